package trainer

import (
	"fmt"
	"path/filepath"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
)

// TrainingEvaluator returns the evaluator lanpo train runs (RunOptions.Evaluate) every
// eval.every steps: the eval section's benchmarks (loaded once) on the
// current policy, with samples in RUN_DIR/eval/step-NNNNNN/. It draws only
// from its own seeds (eval.seed, benchmark, mode, problem, sample) and
// runs without grad, so training is the same with or without it. Without
// record it keeps the samples in memory (the ranks other than 0 of a
// data-parallel run, which evaluate alike but must not write the files).
func TrainingEvaluator(cfg Config, record bool) (Evaluator, error) {
	ec := cfg.Eval
	var benches []eval.Benchmark
	for _, spec := range ec.Bench {
		name, path, err := eval.ResolveBenchmark(spec, ec.DataDir)
		if err != nil {
			return nil, fmt.Errorf("config key eval.bench: %w", err)
		}
		b, err := eval.LoadBenchmark(name, path, ec.Limit)
		if err != nil {
			return nil, err
		}
		benches = append(benches, b)
	}
	modes := ec.Modes
	if len(modes) == 0 {
		modes = []string{eval.ModeZeroShot}
	}
	maxNew := ec.MaxNewTokens
	if maxNew == 0 {
		maxNew = cfg.Rollout.MaxNewTokens
	}
	fs := cfg.FeedbackSettings()
	return func(step int, m *model.Model, tk *tokenizer.Tokenizer, p *pool.Pool) (map[string]float64, error) {
		o := eval.Options{Benchmarks: benches, Modes: modes, K: ec.K, Feedback: fs, Pool: p, Batch: ec.BatchSize, Resume: true,
			Sampling: model.SamplingParams{Temperature: ec.Temperature, TopP: ec.TopP, MaxNewTokens: maxNew, Seed: ec.Seed},
			Out:      filepath.Join(cfg.RunDir, "eval", fmt.Sprintf("step-%06d", step))}
		if !record {
			o.Out, o.Resume = "", false
		}
		sums, err := eval.Run(m, tk, o)
		if err != nil {
			return nil, err
		}
		return eval.Flatten(sums), nil
	}, nil
}
