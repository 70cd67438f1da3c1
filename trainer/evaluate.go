package trainer

import (
	"fmt"
	"path/filepath"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
)

// TrainingEvaluator returns the evaluator lanpo train runs (RunOptions.Evaluate) every
// eval.every steps: the eval section's benchmarks (loaded once) on the
// current policy, with samples in RUN_DIR/eval/step-NNNNNN/. It draws only
// from its own seeds (eval.seed, benchmark, mode, problem, sample) and
// runs without grad, so training is the same with or without it. Without
// record it keeps the samples in memory (the ranks other than 0 of a
// data-parallel run, which evaluate alike but must not write the files).
// Before the first step its Check refuses a benchmark problem whose prompt
// does not fit the model's context (eval.skip_long_prompts: leave them out).
func TrainingEvaluator(cfg Config, record bool) (Evaluator, error) {
	if err := cfg.Resolve(); err != nil { // eval.modes, eval.max_new_tokens
		return nil, err
	}
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
	o := eval.Options{Benchmarks: benches, Modes: ec.Modes, K: ec.K, Feedback: cfg.FeedbackSettings(), Batch: ec.BatchSize,
		SkipLongPrompts: ec.SkipLongPrompts, ReferenceNLL: ec.ReferenceNLL, Sampling: model.SamplingParams{Temperature: ec.Temperature, TopP: ec.TopP, MaxNewTokens: ec.MaxNewTokens, Seed: ec.Seed}}
	if eval.HasCode(benches) {
		o.CodePromptTemplate = CodeTemplate(cfg)
	}
	e := trainingEvaluator{o: o, runDir: cfg.RunDir, record: record, reward: cfg.Reward}
	if len(ec.Tools) > 0 {
		if eval.HasCode(benches) {
			return nil, bad("eval.tools", "the tools mode runs on math benchmarks; eval.bench holds a code benchmark (its tests are not given to tools)")
		}
		specs, err := EvalToolSpecs(cfg)
		if err != nil {
			return nil, err
		}
		e.tools = func(tk *tokenizer.Tokenizer, eos []int64) (eval.ToolRunner, error) {
			l, err := ToolLoop(cfg, specs, tk, eos)
			if err != nil {
				return nil, err
			}
			return l, nil
		}
	}
	return e, nil
}

// trainingEvaluator is TrainingEvaluator's: the options of every
// evaluation but the step's pool and directory.
type trainingEvaluator struct {
	o      eval.Options
	runDir string
	record bool
	reward reward.Config // the run's reward kind, started for each evaluation
	// tools builds eval.tools' tools for the run's tokenizer (nil: no
	// tools mode).
	tools func(tk *tokenizer.Tokenizer, eos []int64) (eval.ToolRunner, error)
}

// withTools is e's options with its tools (if any) built for m and tk.
func (e trainingEvaluator) withTools(m *model.Model, tk *tokenizer.Tokenizer) (eval.Options, error) {
	o := e.o
	if e.tools == nil {
		return o, nil
	}
	eos, err := m.EOSTokenIDs()
	if err != nil {
		return o, err
	}
	o.Tools, err = e.tools(tk, eos)
	return o, err
}

func (e trainingEvaluator) Check(m *model.Model, tk *tokenizer.Tokenizer) error {
	o, err := e.withTools(m, tk)
	if err != nil {
		return err
	}
	if err := eval.CheckFit(m, tk, o); err != nil {
		return fmt.Errorf("config key eval.bench: %w", err)
	}
	return nil
}

func (e trainingEvaluator) Evaluate(step int, m *model.Model, tk *tokenizer.Tokenizer, p *pool.Pool) (map[string]float64, error) {
	o, err := e.withTools(m, tk)
	if err != nil {
		return nil, err
	}
	o.Pool = p
	scorer, err := reward.New(e.reward, 0) // no format bonus in an evaluation
	if err != nil {
		return nil, err
	}
	defer scorer.Close()
	o.Scorer, o.Reward = scorer, e.reward.Describe()
	if eval.HasCode(o.Benchmarks) {
		if o.CodeScorer, err = newCodeScorer(e.reward, scorer); err != nil {
			return nil, err
		}
		defer o.CodeScorer.Close()
	}
	if e.record {
		o.Out, o.Resume = filepath.Join(e.runDir, "eval", fmt.Sprintf("step-%06d", step)), true
	}
	sums, err := eval.Run(m, tk, o)
	if err != nil {
		return nil, err
	}
	return eval.Flatten(sums), nil
}

// withSpan gives lanpo train's evaluator the run's diagnostic span
// (RunOptions.Span) for its reference solutions; any other evaluator is
// returned as it is.
func withSpan(e Evaluator, span rl.Span) Evaluator {
	if te, ok := e.(trainingEvaluator); ok && span != nil {
		te.o.ReferenceSpan = span
		return te
	}
	return e
}

// NewScorer is the scorer an evaluation with cfg's reward kind uses
// (lanpo eval: without algo.format_reward's bonus); Close it after.
func NewScorer(cfg Config) (reward.Scorer, error) {
	return reward.New(cfg.Reward, 0)
}

// CodePromptTemplate is the user message of code problems where the run
// leaves data.prompt_template at its (math) default: EvalPlus's
// instruction for chat models, which Qwen2.5-Coder's publishers evaluate
// HumanEval with (docs/rewards.md).
const CodePromptTemplate = "Please provide a self-contained Python script that solves the following problem in a markdown code block:\n```\n{problem}\n```"

// CodeTemplate is the user message of code benchmarks in an evaluation
// under cfg: the run's own when its reward is code (Resolve gave it
// CodePromptTemplate unless it set one), else CodePromptTemplate.
func CodeTemplate(cfg Config) string {
	if cfg.Reward.Kind == reward.KindCode {
		return cfg.Data.PromptTemplate
	}
	return CodePromptTemplate
}

// NewCodeScorer scores code benchmarks in an evaluation under cfg: a
// second scorer beside NewScorer's, with reward.code's sandbox when the
// run's reward is code, else the default sandbox. Close it after.
func NewCodeScorer(cfg Config) (reward.Scorer, error) {
	return newCodeScorer(cfg.Reward, nil)
}

// newCodeScorer is run's own scorer when its kind is code (then Close
// is a no-op on it: the caller closes run), else a new one.
func newCodeScorer(rc reward.Config, run reward.Scorer) (reward.Scorer, error) {
	if rc.Kind == reward.KindCode {
		if run != nil {
			return nopClose{run}, nil
		}
		return reward.New(rc, 0)
	}
	c := reward.DefaultConfig()
	c.Kind, c.OnError = reward.KindCode, rc.OnError
	return reward.New(c, 0)
}

// nopClose is a scorer shared with another owner, who closes it.
type nopClose struct{ reward.Scorer }

func (nopClose) Close() error { return nil }
