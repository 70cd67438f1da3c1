package eval

import (
	"fmt"
	"hash/fnv"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/reward"
)

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
		res, err = e.m.GenerateAt(reqs, streams, p, e.o.Feedback.Generate)
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
