package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/progress"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/tools"
)

// Evaluation modes (LANPO's three inference modes).
const (
	ModeZeroShot    = "zero-shot"    // the problem alone
	ModeRetrieval   = "retrieval"    // a plan condensed from related problems of a pool
	ModeSelfCorrect = "self-correct" // a first attempt, then reflection on it and a second attempt
)

// Modes lists the evaluation modes.
var Modes = []string{ModeZeroShot, ModeRetrieval, ModeSelfCorrect, ModeTools}

// ModeTools is zero-shot with the tools declared (Options.Tools): the
// model may call them, multi-turn (docs/tools.md); beside zero-shot it is
// the with/without-tools comparison.
const ModeTools = "tools"

// Options configure an evaluation.
type Options struct {
	Benchmarks []Benchmark
	Modes      []string
	K          int                  // samples per problem (per first attempt in self-correct)
	Sampling   model.SamplingParams // temperature (0: greedy), top-p/k, max new tokens, seed
	// Feedback gives the prompts: the solve prompt's format
	// (data.prompt_template, data.system_prompt, rollout.enable_thinking),
	// the lanpo section (retrieval's scorer, γ, condenser; the reflection
	// prompt), rollout's memory caps and the run seed (Config.FeedbackSettings
	// in package trainer).
	Feedback feedback.Settings
	Pool     *pool.Pool // retrieval's pool
	// NearDuplicate is the pool.Similarity at or above which a pool or
	// training problem is a benchmark problem's twin, for the contamination
	// count and Decontaminate; 0: the pool's threshold (pool.Config), or
	// the default without a pool.
	NearDuplicate float64
	// Decontaminate lists training JSONL files: benchmark problems with a
	// twin in them are dropped before the evaluation (Decontaminate).
	Decontaminate []string
	Out           string // results directory ("": keep in memory only)
	Resume        bool
	Batch         int       // problems per generation call
	Progress      io.Writer // a terminal for the progress line, or nil
	// SkipLongPrompts leaves out the problems whose prompt and the
	// generation budget exceed the model's context (counted in the
	// summary) instead of refusing before the first forward pass.
	SkipLongPrompts bool
	// Scorer scores the samples (the run's reward kind; nil: the math
	// verifier, reward.Math); Reward describes it (reward.Config.Describe:
	// "" for math), so --resume does not mix two rewards' verdicts.
	Scorer reward.Scorer
	Reward string
	// CodeScorer scores code benchmarks (Benchmark.Code; reward.Code) and
	// CodePromptTemplate is their user message ("": the Feedback format's).
	CodeScorer         reward.Scorer
	CodePromptTemplate string
	// ReferenceNLL: zero-shot, also score each problem's reference
	// solution (Problem.Solution, where it has one) teacher-forced after
	// its prompt (SampleLine.RefLogp; Summary.ReferenceNLL).
	ReferenceNLL bool
	// ReferenceSpan marks the part of a problem's reference solution that
	// carries its decision (rl.Span, a diagnostic; the demo's rule name):
	// reference_nll is then also reported inside it. nil: none.
	ReferenceSpan rl.Span
	// Tools run the tools mode's calls (tools.Loop; nil: no tools mode).
	Tools ToolRunner
}

// ToolRunner is what the tools mode asks of the tools (tools.Loop).
type ToolRunner interface {
	Describe() string // what a resumed evaluation must match: tools, format, limits
	Declarations() []json.RawMessage
	Start(ctx context.Context, rows int) (*model.Turns, error)
	Trajectory(prompt, index int) tools.Trajectory
}

// Files of an evaluation directory.
const (
	SamplesFile = "samples.jsonl"
	SummaryFile = "summary.json"
	recordFile  = "eval.json"
)

// Run evaluates m on every benchmark in every mode and returns the
// summary. With an Out directory, samples are appended to samples.jsonl as
// each batch of problems finishes, and summary.json is written at the end;
// with Resume, the batches already in samples.jsonl are not run again.
// Every sample's randomness comes from (seed, benchmark, mode, problem,
// sample) and batches have fixed boundaries, so a resumed evaluation ends
// with the same summary, byte for byte.
func Run(m *model.Model, tk *tokenizer.Tokenizer, o Options) ([]Summary, error) {
	runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
	defer runtime.UnlockOSThread()
	if err := o.validate(); err != nil {
		return nil, err
	}
	contamination := Contamination{NearDuplicate: o.nearDuplicate()}
	var err error
	if o.Benchmarks, contamination.Dropped, err = Decontaminate(o.Benchmarks, o.Decontaminate, contamination.NearDuplicate); err != nil {
		return nil, err
	}
	fb, fit, err := o.fitBuilders(m, tk)
	if err != nil {
		return nil, err
	}
	if o.Benchmarks, err = checkFit(o.Benchmarks, fit, o.SkipLongPrompts); err != nil {
		return nil, err
	}
	eos, err := m.EOSTokenIDs()
	if err != nil {
		return nil, err
	}
	o.Sampling.StopIDs = eos
	done, out, err := o.open()
	if err != nil {
		return nil, err
	}
	if out != nil {
		defer out.Close()
	}
	var all []SampleLine
	e := &evaluator{m: m, tk: tk, fbFor: fb, toolsFor: fit, o: o}
	// One line for the whole evaluation: a progress bar over every
	// benchmark and mode on a terminal, else one summary line in the log
	// (report) — lanpo train evaluates every eval.every steps, and a line
	// per batch or per benchmark filled its log. Per batch: debug lines.
	total, resumed := o.units(done)
	bar := progress.New(o.Progress, "eval", total, resumed)
	start, tokens, units := time.Now(), 0, resumed
	for _, b := range o.Benchmarks {
		for _, mode := range o.Modes {
			for lo := 0; lo < len(b.Problems); lo += o.Batch {
				hi := min(lo+o.Batch, len(b.Problems))
				key := batchKey{b.Name, mode, lo}
				lines, ok := done[key]
				if !ok {
					if lines, err = e.batch(b, mode, lo, hi); err != nil {
						return nil, fmt.Errorf("%s %s, problems %d-%d: %w", b.Name, mode, lo+1, hi, err)
					}
					if out != nil {
						if err := appendLines(out, lines); err != nil {
							return nil, err
						}
					}
					units += hi - lo
					for _, l := range lines {
						tokens += l.Tokens
					}
				}
				all = append(all, lines...)
				rate := float64(tokens) / time.Since(start).Seconds()
				bar.Update(units, fmt.Sprintf("%s %s  %.0f tok/s", b.Name, mode, rate))
				log.Debug().Str("bench", b.Name).Str("mode", mode).Int("done", hi).Int("of", len(b.Problems)).Msg("eval batch")
			}
		}
	}
	sums := Summarize(all, o.K, o.Benchmarks, o.Modes, contamination)
	if o.Out != "" {
		if len(o.Decontaminate) > 0 {
			if err := jsonl.WriteFile(filepath.Join(o.Out, DecontaminatedFile), contamination.Dropped); err != nil {
				return nil, err
			}
		}
		js, _ := json.MarshalIndent(sums, "", "  ")
		if err := fsutil.WriteFileSync(filepath.Join(o.Out, SummaryFile), append(js, '\n')); err != nil {
			return nil, err
		}
	}
	secs := time.Since(start).Seconds()
	bar.Done(fmt.Sprintf("%d problems of %d benchmarks, %s, %.0f tok/s", total/max(len(o.Modes), 1), len(o.Benchmarks), strings.Join(o.Modes, ", "), float64(tokens)/secs))
	report(bar.Shown(), o.Out, sums, secs)
	return sums, nil
}

// units counts the evaluation's problem runs (a problem in one mode), all
// of them and those done before (the batches a resumed evaluation found).
func (o *Options) units(done map[batchKey][]SampleLine) (total, resumed int) {
	for _, b := range o.Benchmarks {
		for _, mode := range o.Modes {
			total += len(b.Problems)
			for lo := 0; lo < len(b.Problems); lo += o.Batch {
				if _, ok := done[batchKey{b.Name, mode, lo}]; ok {
					resumed += min(lo+o.Batch, len(b.Problems)) - lo
				}
			}
		}
	}
	return total, resumed
}

// report logs the evaluation's one line: mean@k per benchmark and mode
// (BENCH/MODE, Flatten's names) — at info level where no progress bar
// showed, at debug level under one (the bar's last line said it ended,
// and lanpo eval prints the table).
func report(barShown bool, out string, sums []Summary, secs float64) {
	ev := log.Info()
	if barShown {
		ev = log.Debug()
	}
	mean := zerolog.Dict()
	for _, s := range sums {
		mean.Float64(s.Bench+"/"+s.Mode, math.Round(s.MeanAtK*1000)/1000)
	}
	if out != "" {
		ev = ev.Str("results", out)
	}
	ev.Dict("mean@k", mean).Float64("seconds", math.Round(secs*10)/10).Msg("eval")
}

// CheckFit renders every benchmark problem's prompt and checks it against
// m's context with the generation budget, as Run does before its first
// forward pass (checkFit): for an evaluator that runs later (lanpo train's
// eval.every), so a problem that cannot fit stops the run at its start,
// not at its first evaluation.
func CheckFit(m *model.Model, tk *tokenizer.Tokenizer, o Options) error {
	_, fit, err := o.fitBuilders(m, tk)
	if err != nil {
		return err
	}
	_, err = checkFit(o.Benchmarks, fit, o.SkipLongPrompts)
	return err
}

// fitBuilders are the evaluation's prompt builders (builders) and the ones
// whose prompts must fit the context: with the tools mode, the prompts
// with the tools declared, the longest — a problem that does not fit them
// is left out of every mode, so the comparison stays paired.
func (o *Options) fitBuilders(m *model.Model, tk *tokenizer.Tokenizer) (fb, fit func(Benchmark) *feedback.Builder, err error) {
	if fb, err = o.builders(m, tk); err != nil {
		return nil, nil, err
	}
	if !slices.Contains(o.Modes, ModeTools) || o.Tools == nil {
		return fb, fb, nil
	}
	ot := *o
	ot.Feedback.Format.Tools = o.Tools.Declarations()
	if fit, err = ot.builders(m, tk); err != nil {
		return nil, nil, err
	}
	return fb, fit, nil
}

// builders are the evaluation's prompt builders: the feedback settings
// with the evaluation's generation budget, and its pool (retrieval's); a
// code benchmark's with CodePromptTemplate.
func (o *Options) builders(m *model.Model, tk *tokenizer.Tokenizer) (func(Benchmark) *feedback.Builder, error) {
	fs := o.Feedback
	fs.MaxNewTokens = o.Sampling.MaxNewTokens
	fb, err := feedback.NewBuilder(m, tk, fs, o.Pool)
	if err != nil {
		return nil, err
	}
	code := fb
	if o.CodePromptTemplate != "" {
		fs.Format.PromptTemplate = o.CodePromptTemplate
		if code, err = feedback.NewBuilder(m, tk, fs, o.Pool); err != nil {
			return nil, err
		}
	}
	return func(b Benchmark) *feedback.Builder {
		if b.Code {
			return code
		}
		return fb
	}, nil
}

func (o *Options) hasCode() bool { return HasCode(o.Benchmarks) }

// HasCode reports whether any of benches is a code benchmark (it needs
// Options.CodeScorer).
func HasCode(benches []Benchmark) bool {
	for _, b := range benches {
		if b.Code {
			return true
		}
	}
	return false
}

// nearDuplicate is the twin threshold in use (Options.NearDuplicate).
func (o *Options) nearDuplicate() float64 {
	switch {
	case o.NearDuplicate > 0:
		return o.NearDuplicate
	case o.Pool != nil:
		return o.Pool.Config().NearDuplicate
	}
	return pool.DefaultConfig().NearDuplicate
}

func (o *Options) validate() error {
	switch {
	case len(o.Benchmarks) == 0:
		return errors.New("no benchmark to evaluate")
	case o.K < 1:
		return fmt.Errorf("--k must be ≥ 1, got %d", o.K)
	case o.Sampling.Temperature == 0 && o.K > 1:
		return fmt.Errorf("--k %d with --temperature 0: greedy samples are all the same; use --k 1 or a temperature", o.K)
	case o.hasCode() && o.CodeScorer == nil:
		return errors.New("a code benchmark needs a code scorer (reward.kind: code)")
	case o.Batch < 1:
		return fmt.Errorf("--batch-size must be ≥ 1, got %d", o.Batch)
	case o.NearDuplicate < 0 || o.NearDuplicate > 1:
		return fmt.Errorf("lanpo.near_duplicate_threshold must be in (0, 1] (0: the pool's), got %g", o.NearDuplicate)
	}
	for _, mode := range o.Modes {
		if !slices.Contains(Modes, mode) {
			return fmt.Errorf("--mode %q: want %s, %s, %s or %s", mode, ModeZeroShot, ModeRetrieval, ModeSelfCorrect, ModeTools)
		}
		if mode == ModeRetrieval && o.Pool == nil {
			return errors.New("--mode retrieval needs --pool (a LANPO checkpoint or its pool.jsonl)")
		}
		if mode == ModeTools && o.Tools == nil {
			return errors.New("--mode tools needs --tools (python, or a config's tools:)")
		}
		if mode == ModeTools && o.hasCode() {
			return errors.New("--mode tools runs on math benchmarks (a code benchmark's tests are not given to tools)")
		}
	}
	return o.Sampling.Validate()
}

// SampleLine is one line of samples.jsonl: one sample of one problem.
type SampleLine struct {
	Bench     string `json:"bench"`
	Mode      string `json:"mode"`
	Batch     int    `json:"batch"` // index of the batch's first problem (resume unit)
	ProblemID string `json:"problem_id"`
	Stage     string `json:"stage,omitempty"` // self-correct: first or reflect
	Sample    int    `json:"sample"`
	Prompt    string `json:"prompt"`
	Response  string `json:"response"`
	Extracted string `json:"extracted"`
	Correct   bool   `json:"correct"`
	// Reward and Reason: a user's reward kind's (reward.kind command or
	// http; the math verifier's verdict is Correct and Extracted).
	Reward    float64 `json:"reward,omitempty"`
	Reason    string  `json:"reason,omitempty"`
	Tokens    int     `json:"tokens"`
	Truncated bool    `json:"truncated"`
	Context   bool    `json:"context,omitempty"` // retrieval: the prompt carried a plan
	Nearest   string  `json:"nearest_pool_problem,omitempty"`
	NearSim   float64 `json:"nearest_similarity,omitempty"`
	// Zero-shot, a problem with a reference solution (its first sample's
	// line): the solution's log-likelihood under the prompt, summed over its
	// tokens, and its tokens; inside ReferenceSpan the same (RefSpanTokens 0:
	// no span).
	RefLogp       float64 `json:"reference_logprob,omitempty"`
	RefTokens     int     `json:"reference_tokens,omitempty"`
	RefSpanLogp   float64 `json:"reference_span_logprob,omitempty"`
	RefSpanTokens int     `json:"reference_span_tokens,omitempty"`
	// Tools mode: the calls, failed calls and tool turns of the
	// trajectory; with tool turns, ModelText is its own text (what the
	// reward read), where Response is the whole trajectory with the tools'
	// responses.
	ToolCalls  int    `json:"tool_calls,omitempty"`
	ToolErrors int    `json:"tool_errors,omitempty"`
	ToolTurns  int    `json:"tool_turns,omitempty"`
	ModelText  string `json:"model_text,omitempty"`
}
