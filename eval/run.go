package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/progress"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/trainer"
)

// Evaluation modes (LANPO's three inference modes).
const (
	ModeZeroShot    = "zero-shot"    // the problem alone
	ModeRetrieval   = "retrieval"    // a plan condensed from related problems of a pool
	ModeSelfCorrect = "self-correct" // a first attempt, then reflection on it and a second attempt
)

// Modes lists the evaluation modes.
var Modes = []string{ModeZeroShot, ModeRetrieval, ModeSelfCorrect}

// Options configure an evaluation.
type Options struct {
	Benchmarks []Benchmark
	Modes      []string
	K          int                  // samples per problem (per first attempt in self-correct)
	Sampling   model.SamplingParams // temperature (0: greedy), top-p/k, max new tokens, seed
	// Config gives the prompts: data.prompt_template, data.system_prompt,
	// rollout.enable_thinking and the lanpo section (retrieval's scorer,
	// γ, condenser; the reflection prompt).
	Config trainer.Config
	Pool   *pool.Pool // retrieval's pool
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
}

// runRecord is what eval.json records of a run, so --resume continues
// only the same evaluation.
type runRecord struct {
	Benchmarks  []string `json:"benchmarks"` // name=path:count
	Modes       []string `json:"modes"`
	K           int      `json:"k"`
	Temperature float64  `json:"temperature"`
	TopP        float64  `json:"top_p"`
	TopK        int64    `json:"top_k"`
	MaxNew      int      `json:"max_new_tokens"`
	Seed        uint64   `json:"seed"`
	Batch       int      `json:"batch"`
	Template    string   `json:"prompt_template"`
	System      string   `json:"system_prompt"`
	// Decontaminate: the training files benchmark problems were checked
	// against (Benchmarks counts what is left).
	Decontaminate []string `json:"decontaminate,omitempty"`
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
	cfg := o.Config
	cfg.Rollout.MaxNewTokens = o.Sampling.MaxNewTokens
	fb, err := feedback.NewBuilder(m, tk, cfg.FeedbackSettings(), o.Pool)
	if err != nil {
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
	e := &evaluator{m: m, tk: tk, fb: fb, o: o}
	for _, b := range o.Benchmarks {
		for _, mode := range o.Modes {
			bar := progress.New(o.Progress, b.Name+" "+mode, len(b.Problems), 0)
			start, tokens := time.Now(), 0
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
				}
				all = append(all, lines...)
				for _, l := range lines {
					tokens += l.Tokens
				}
				rate := float64(tokens) / time.Since(start).Seconds()
				bar.Update(hi, fmt.Sprintf("%.0f tok/s", rate))
				if o.Progress == nil {
					log.Info().Str("bench", b.Name).Str("mode", mode).Int("done", hi).Int("of", len(b.Problems)).Msg("eval")
				}
			}
			bar.Done("done")
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
	return sums, nil
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
	case o.Batch < 1:
		return fmt.Errorf("--batch-size must be ≥ 1, got %d", o.Batch)
	case o.NearDuplicate < 0 || o.NearDuplicate > 1:
		return fmt.Errorf("lanpo.near_duplicate_threshold must be in (0, 1] (0: the pool's), got %g", o.NearDuplicate)
	}
	for _, mode := range o.Modes {
		if !slices.Contains(Modes, mode) {
			return fmt.Errorf("--mode %q: want %s, %s or %s", mode, ModeZeroShot, ModeRetrieval, ModeSelfCorrect)
		}
		if mode == ModeRetrieval && o.Pool == nil {
			return errors.New("--mode retrieval needs --pool (a LANPO checkpoint or its pool.jsonl)")
		}
	}
	return o.Sampling.Validate()
}

func (o *Options) record() runRecord {
	r := runRecord{Modes: o.Modes, K: o.K, Temperature: o.Sampling.Temperature, TopP: o.Sampling.TopP, TopK: o.Sampling.TopK,
		MaxNew: o.Sampling.MaxNewTokens, Seed: o.Sampling.Seed, Batch: o.Batch, Template: o.Config.Data.PromptTemplate, System: o.Config.Data.SystemPrompt,
		Decontaminate: o.Decontaminate}
	for _, b := range o.Benchmarks {
		r.Benchmarks = append(r.Benchmarks, fmt.Sprintf("%s=%s:%d", b.Name, b.Path, len(b.Problems)))
	}
	return r
}

type batchKey struct {
	bench, mode string
	first       int
}

// open prepares the output directory: a new one gets eval.json; with
// Resume, an existing one must hold the same evaluation, and its complete
// batches are returned (a batch cut short by a kill is dropped from the
// file and run again).
func (o *Options) open() (map[batchKey][]SampleLine, *os.File, error) {
	done := map[batchKey][]SampleLine{}
	if o.Out == "" {
		return done, nil, nil
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, nil, err
	}
	rec, _ := json.MarshalIndent(o.record(), "", "  ")
	recPath, samples := filepath.Join(o.Out, recordFile), filepath.Join(o.Out, SamplesFile)
	_, statErr := os.Stat(samples)
	switch {
	case statErr == nil && !o.Resume:
		return nil, nil, fmt.Errorf("%s already has results (%s): pass --resume to continue them, or choose another --out", o.Out, SamplesFile)
	case statErr == nil:
		old, err := os.ReadFile(recPath)
		if err != nil {
			return nil, nil, fmt.Errorf("--resume: %w", err)
		}
		var was runRecord
		if err := json.Unmarshal(old, &was); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", recPath, err)
		}
		if diff := recordDiff(was, o.record()); diff != "" {
			return nil, nil, fmt.Errorf("--resume: %s holds another evaluation (%s differs); choose another --out", o.Out, diff)
		}
		lines, err := readSamples(samples)
		if err != nil {
			return nil, nil, err
		}
		for _, l := range lines {
			k := batchKey{l.Bench, l.Mode, l.Batch}
			done[k] = append(done[k], l)
		}
		for k, ls := range done {
			if len(ls) != o.batchLines(k) {
				delete(done, k)
			}
		}
		var keep []SampleLine
		for _, l := range lines {
			if _, ok := done[batchKey{l.Bench, l.Mode, l.Batch}]; ok {
				keep = append(keep, l)
			}
		}
		if err := jsonl.WriteFile(samples, keep); err != nil {
			return nil, nil, err
		}
		log.Info().Int("batches", len(done)).Str("dir", o.Out).Msg("resuming an evaluation")
	default:
		if err := fsutil.WriteFileSync(recPath, append(rec, '\n')); err != nil {
			return nil, nil, err
		}
	}
	f, err := os.OpenFile(samples, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	return done, f, err
}

// batchLines is how many sample lines a complete batch has.
func (o *Options) batchLines(k batchKey) int {
	for _, b := range o.Benchmarks {
		if b.Name == k.bench {
			n := min(o.Batch, len(b.Problems)-k.first) * o.K
			if k.mode == ModeSelfCorrect {
				n *= 2
			}
			return n
		}
	}
	return -1
}

func recordDiff(a, b runRecord) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			return va.Type().Field(i).Tag.Get("json")
		}
	}
	return ""
}

// readSamples reads samples.jsonl; a last line cut short (a kill while it
// was written) is dropped, any other bad line is an error naming it.
func readSamples(path string) ([]SampleLine, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []SampleLine
	lines := strings.Split(string(raw), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var s SampleLine
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			if i == len(lines)-1 {
				log.Warn().Str("file", path).Int("line", i+1).Msg("dropping a line cut short")
				break
			}
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func appendLines(f *os.File, lines []SampleLine) error {
	enc := jsonl.Encoder(f)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return f.Sync()
}

// SampleLine is one line of samples.jsonl: one sample of one problem.
type SampleLine struct {
	Bench     string  `json:"bench"`
	Mode      string  `json:"mode"`
	Batch     int     `json:"batch"` // index of the batch's first problem (resume unit)
	ProblemID string  `json:"problem_id"`
	Stage     string  `json:"stage,omitempty"` // self-correct: first or reflect
	Sample    int     `json:"sample"`
	Prompt    string  `json:"prompt"`
	Response  string  `json:"response"`
	Extracted string  `json:"extracted"`
	Correct   bool    `json:"correct"`
	Tokens    int     `json:"tokens"`
	Truncated bool    `json:"truncated"`
	Context   bool    `json:"context,omitempty"` // retrieval: the prompt carried a plan
	Nearest   string  `json:"nearest_pool_problem,omitempty"`
	NearSim   float64 `json:"nearest_similarity,omitempty"`
}

// evaluator runs batches.
type evaluator struct {
	m  *model.Model
	tk *tokenizer.Tokenizer
	fb *feedback.Builder
	o  Options
}

// streamBase keys a benchmark and mode's random streams.
func streamSeed(seed uint64, bench, mode string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(bench + "\x00" + mode))
	return seed ^ h.Sum64()
}

// batch evaluates problems [lo, hi) of b in one mode.
func (e *evaluator) batch(b Benchmark, mode string, lo, hi int) ([]SampleLine, error) {
	probs := b.Problems[lo:hi]
	prompts := make([][]int64, len(probs))
	withContext := make([]bool, len(probs))
	for i, p := range probs {
		ids, err := e.fb.Solve(p.Problem)
		if err != nil {
			return nil, fmt.Errorf("problem %s: %w", p.ID, err)
		}
		prompts[i] = ids
	}
	if mode == ModeRetrieval {
		texts, idx := make([]string, len(probs)), make([]int, len(probs))
		for i, p := range probs {
			texts[i], idx[i] = p.Problem, lo+i
		}
		ids, err := e.fb.Abstraction(texts, idx)
		if err != nil {
			return nil, err
		}
		for i := range ids {
			if ids[i] != nil {
				prompts[i], withContext[i] = ids[i], true
			}
		}
	}
	first, err := e.sample(b, mode, lo, prompts, e.o.K, 0)
	if err != nil {
		return nil, err
	}
	var lines []SampleLine
	for i, p := range probs {
		for j, s := range first[i] {
			l := e.line(b, mode, lo, p, j, prompts[i], s)
			l.Context = withContext[i]
			if mode == ModeRetrieval {
				if id, sim, ok := e.o.Pool.NearestProblem(p.Problem); ok {
					l.Nearest, l.NearSim = id, sim
				}
			}
			if mode == ModeSelfCorrect {
				l.Stage = "first"
			}
			lines = append(lines, l)
		}
	}
	if mode != ModeSelfCorrect {
		return lines, nil
	}
	// Second attempts: each first attempt, shown with the training run's
	// reflection prompt (which never says whether it was right).
	var second [][]int64
	for i, p := range probs {
		for _, s := range first[i] {
			ids, ok, err := e.fb.Reflection(p.Problem, e.text(s))
			if err != nil {
				return nil, err
			}
			if !ok {
				ids = prompts[i] // did not fit: the problem alone
			}
			second = append(second, ids)
		}
	}
	redo, err := e.sample(b, mode, lo*e.o.K, second, 1, 1)
	if err != nil {
		return nil, err
	}
	for i, p := range probs {
		for j := range first[i] {
			r := i*e.o.K + j
			l := e.line(b, mode, lo, p, j, second[r], redo[r][0])
			l.Stage = "reflect"
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// sample draws k samples for each prompt; prompt i's randomness is stream
// first+i of (seed, benchmark, mode, stage).
func (e *evaluator) sample(b Benchmark, mode string, first int, prompts [][]int64, k, stage int) ([][]model.Sample, error) {
	reqs := make([]model.Request, len(prompts))
	streams := make([]int, len(prompts))
	for i, ids := range prompts {
		reqs[i], streams[i] = model.Request{PromptIDs: ids, Samples: k}, first+i
	}
	p := e.o.Sampling
	p.Seed = streamSeed(p.Seed, b.Name, fmt.Sprintf("%s/%d", mode, stage))
	var res []model.Sample
	err := csrc.NoGrad(func() (err error) {
		res, err = e.m.GenerateAt(reqs, streams, p, e.o.Config.Rollout.GenerateOptions())
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([][]model.Sample, len(prompts))
	for _, s := range res {
		out[s.Prompt] = append(out[s.Prompt], s)
	}
	return out, nil
}

func (e *evaluator) text(s model.Sample) string { return e.tk.Decode(tokenizer.Ints(s.IDs), true) }

// line verifies one sample and describes it.
func (e *evaluator) line(b Benchmark, mode string, lo int, p Problem, j int, prompt []int64, s model.Sample) SampleLine {
	text := e.text(s)
	truncated := s.FinishReason == "length"
	v := reward.VerifyResponse(text, p.Answer, truncated, reward.Options{})
	return SampleLine{Bench: b.Name, Mode: mode, Batch: lo, ProblemID: p.ID, Sample: j, Prompt: e.tk.Decode(tokenizer.Ints(prompt), false),
		Response: text, Extracted: v.Extracted, Correct: v.Correct, Tokens: len(s.IDs), Truncated: truncated}
}
