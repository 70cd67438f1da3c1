package eval

import (
	"fmt"
	"path/filepath"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

// TrainingEvaluator returns the evaluator lanpo train runs every
// eval.every steps: the eval section's benchmarks (loaded once) on the
// current policy, with samples in RUN_DIR/eval/step-NNNNNN/. It draws only
// from its own seeds (eval.seed, benchmark, mode, problem, sample) and
// runs without grad, so training is the same with or without it. Without
// record it keeps the samples in memory (the ranks other than 0 of a
// data-parallel run, which evaluate alike but must not write the files).
func TrainingEvaluator(cfg trainer.Config, record bool) (trainer.Evaluator, error) {
	ec := cfg.Eval
	var benches []Benchmark
	for _, spec := range ec.Bench {
		name, path, err := ResolveBenchmark(spec, ec.DataDir)
		if err != nil {
			return nil, fmt.Errorf("config key eval.bench: %w", err)
		}
		b, err := LoadBenchmark(name, path, ec.Limit)
		if err != nil {
			return nil, err
		}
		benches = append(benches, b)
	}
	modes := ec.Modes
	if len(modes) == 0 {
		modes = []string{ModeZeroShot}
	}
	maxNew := ec.MaxNewTokens
	if maxNew == 0 {
		maxNew = cfg.Rollout.MaxNewTokens
	}
	return func(step int, m *model.Model, tk *tokenizer.Tokenizer, p *pool.Pool) (map[string]float64, error) {
		o := Options{Benchmarks: benches, Modes: modes, K: ec.K, Config: cfg, Pool: p, Batch: ec.BatchSize, Resume: true,
			Sampling: model.SamplingParams{Temperature: ec.Temperature, TopP: ec.TopP, MaxNewTokens: maxNew, Seed: ec.Seed},
			Out:      filepath.Join(cfg.RunDir, "eval", fmt.Sprintf("step-%06d", step))}
		if !record {
			o.Out, o.Resume = "", false
		}
		sums, err := Run(m, tk, o)
		if err != nil {
			return nil, err
		}
		return Flatten(sums), nil
	}, nil
}

// Flatten names a summary's numbers BENCH/MODE/METRIC (mean@k, pass@K,
// maj@k, and for self-correct first_attempt), as metrics.jsonl and reports
// use them.
func Flatten(sums []Summary) map[string]float64 {
	out := map[string]float64{}
	for _, s := range sums {
		pre := s.Bench + "/" + s.Mode + "/"
		out[pre+"mean@k"] = s.MeanAtK
		out[pre+"maj@k"] = s.MajAtK
		for _, kv := range s.PassAtK {
			out[fmt.Sprintf("%spass@%d", pre, kv.K)] = kv.Value
		}
		if s.Mode == ModeSelfCorrect {
			out[pre+"first_attempt"] = s.FirstAttempt
		}
	}
	return out
}
