package eval

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

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
	// CodeTemplate: code benchmarks' user message (Options.CodePromptTemplate).
	CodeTemplate string `json:"code_prompt_template,omitempty"`
	Reward       string `json:"reward,omitempty"` // Options.Reward: "" the math verifier
	System       string `json:"system_prompt"`
	// Decontaminate: the training files benchmark problems were checked
	// against (Benchmarks counts what is left).
	Decontaminate []string `json:"decontaminate,omitempty"`
	// Tools: the tools mode's tools, format and limits (ToolRunner.Describe).
	Tools string `json:"tools,omitempty"`
}

func (o *Options) record() runRecord {
	r := runRecord{Modes: o.Modes, K: o.K, Temperature: o.Sampling.Temperature, TopP: o.Sampling.TopP, TopK: o.Sampling.TopK,
		MaxNew: o.Sampling.MaxNewTokens, Seed: o.Sampling.Seed, Batch: o.Batch, Template: o.Feedback.Format.PromptTemplate, System: o.Feedback.Format.SystemPrompt,
		Decontaminate: o.Decontaminate, Reward: o.Reward}
	if o.hasCode() {
		r.CodeTemplate = o.CodePromptTemplate
	}
	if o.Tools != nil && slices.Contains(o.Modes, ModeTools) {
		r.Tools = o.Tools.Describe()
	}
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

// FreeDir is the results directory for o when the user named none: base
// (RUN/eval/step-N, runs/eval/MODEL) if it is new or holds this same
// evaluation (which --resume continues, and which without --resume is
// refused as before), else the first of base-2, base-3, … that is — so a
// second, different evaluation of one model does not stop at "already has
// results" when the user asked for no directory at all.
func FreeDir(base string, o Options) string {
	want := o.record()
	for n := 1; ; n++ {
		dir := base
		if n > 1 {
			dir = fmt.Sprintf("%s-%d", base, n)
		}
		if _, err := os.Stat(filepath.Join(dir, SamplesFile)); err != nil {
			return dir
		}
		raw, err := os.ReadFile(filepath.Join(dir, recordFile))
		var was runRecord
		if err == nil && json.Unmarshal(raw, &was) == nil && recordDiff(withoutCounts(was), withoutCounts(want)) == "" {
			return dir
		}
	}
}

// withoutCounts drops the problem counts from a record's benchmarks
// (decontamination changes them after the directory is chosen).
func withoutCounts(r runRecord) runRecord {
	bs := make([]string, len(r.Benchmarks))
	for i, b := range r.Benchmarks {
		bs[i] = b[:max(0, strings.LastIndexByte(b, ':'))]
	}
	r.Benchmarks = bs
	return r
}
