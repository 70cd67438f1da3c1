package eval

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/tools"
)

// evaluator runs batches.
type evaluator struct {
	m     *model.Model
	tk    *tokenizer.Tokenizer
	fbFor func(Benchmark) *feedback.Builder
	// toolsFor is the tools mode's builder: the same prompts with the
	// tools declared (fitBuilders; fbFor without the tools mode).
	toolsFor func(Benchmark) *feedback.Builder
	fb       *feedback.Builder // the batch's benchmark's (batch sets it)
	o        Options
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
	e.fb = e.fbFor(b)
	solve := e.fb
	if mode == ModeTools {
		solve = e.toolsFor(b)
	}
	prompts := make([][]int64, len(probs))
	withContext := make([]bool, len(probs))
	for i, p := range probs {
		ids, err := solve.Solve(p.Problem)
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
	if mode == ModeZeroShot && e.o.ReferenceNLL {
		if err := e.reference(probs, prompts, lines); err != nil {
			return nil, err
		}
	}
	if mode != ModeSelfCorrect {
		return e.score(b, probs, lines)
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
	return e.score(b, probs, lines)
}

// score sets every line's verdict through the reward kind (Options.Scorer),
// one call for the batch's lines.
func (e *evaluator) score(b Benchmark, probs []Problem, lines []SampleLine) ([]SampleLine, error) {
	byID := make(map[string]Problem, len(probs))
	for _, p := range probs {
		byID[p.ID] = p
	}
	scorer := e.o.Scorer
	if b.Code {
		scorer = e.o.CodeScorer
	}
	if scorer == nil {
		scorer = reward.Math{}
	}
	_, math := scorer.(reward.Math)
	reqs := make([]reward.Request, len(lines))
	for i, l := range lines {
		p := byID[l.ProblemID]
		resp := l.Response
		if l.ToolTurns > 0 {
			resp = l.ModelText // a tool trajectory: the model's own text
		}
		reqs[i] = reward.Request{Problem: p.Record, ID: p.ID, Answer: p.Answer, Prompt: l.Prompt, Response: resp, Truncated: l.Truncated}
	}
	vs, err := reward.ScoreChecked(context.Background(), scorer, reqs, func(i int) string { return "problem " + reqs[i].ID })
	if err != nil {
		return nil, fmt.Errorf("reward: %w", err)
	}
	for i := range lines {
		lines[i].Correct, lines[i].Extracted = vs[i].Correct, vs[i].Extracted
		if !math {
			lines[i].Reward, lines[i].Reason = vs[i].Reward, vs[i].Reason
			if vs[i].Err != "" {
				lines[i].Reason = "reward error: " + vs[i].Err
			}
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
	// The tools mode draws as zero-shot does: the same problem's samples
	// with and without tools share their randomness (a paired comparison).
	seedMode := mode
	if mode == ModeTools {
		seedMode = ModeZeroShot
	}
	p.Seed = streamSeed(p.Seed, b.Name, fmt.Sprintf("%s/%d", seedMode, stage))
	opt := e.o.Feedback.Generate
	if mode == ModeTools {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var err error
		if opt.Turns, err = e.o.Tools.Start(ctx, len(prompts)*k); err != nil {
			return nil, err
		}
	}
	var res []model.Sample
	err := csrc.NoGrad(func() (err error) {
		res, err = e.m.GenerateAt(reqs, streams, p, opt)
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

// line describes one sample (score gives its verdict).
func (e *evaluator) line(b Benchmark, mode string, lo int, p Problem, j int, prompt []int64, s model.Sample) SampleLine {
	text := e.text(s)
	l := SampleLine{Bench: b.Name, Mode: mode, Batch: lo, ProblemID: p.ID, Sample: j, Prompt: e.tk.Decode(tokenizer.Ints(prompt), false),
		Response: text, Tokens: len(s.IDs), Truncated: s.FinishReason == "length"}
	if mode == ModeTools {
		tr := e.o.Tools.Trajectory(s.Prompt, s.Index)
		l.ToolCalls, l.ToolErrors, l.ToolTurns = tr.Calls, tr.Errors, tr.Turns
		if tr.Turns > 0 {
			l.ModelText = e.tk.Decode(tokenizer.Ints(tools.OwnIDs(s.IDs, s.Appended)), true)
		}
	}
	return l
}

// reference scores the problems' reference solutions (Problem.Solution)
// teacher-forced after their prompts, in one forward pass without grad,
// onto each problem's first sample line (lines: the batch's, K per problem
// in order).
func (e *evaluator) reference(probs []Problem, prompts [][]int64, lines []SampleLine) error {
	var seqs [][]int64
	var which []int
	var sols [][]int
	for i, p := range probs {
		if p.Solution == "" {
			continue
		}
		ids, err := e.tk.Encode(p.Solution, false)
		if err != nil || len(ids) == 0 {
			return fmt.Errorf("problem %s: reference solution: %v", p.ID, err)
		}
		if mp := int(e.m.Config.MaxPositionEmbeddings); mp > 0 && len(prompts[i])+len(ids) > mp {
			ids = ids[:max(mp-len(prompts[i]), 1)] // what fits the context is scored
		}
		seqs = append(seqs, append(append([]int64(nil), prompts[i]...), tokenizer.Int64s(ids)...))
		which, sols = append(which, i), append(sols, ids)
	}
	if len(seqs) == 0 {
		return nil
	}
	var lp [][]float32
	err := csrc.NoGrad(func() (err error) {
		lp, err = e.m.Score(seqs)
		return err
	})
	if err != nil {
		return fmt.Errorf("reference solutions: %w", err)
	}
	for r, i := range which {
		p, sol := probs[i], sols[r]
		vals := lp[r][len(prompts[i])-1:] // the solution's tokens
		var span []bool
		if e.o.ReferenceSpan != nil {
			pieces := e.tk.Pieces(sol, true)
			if lo, hi, ok := e.o.ReferenceSpan(p.ID, strings.Join(pieces, "")); ok {
				span = rl.InSpan(pieces, lo, hi)
			}
		}
		l := &lines[i*e.o.K]
		l.RefTokens = len(sol)
		for k, v := range vals {
			l.RefLogp += float64(v)
			if span != nil && span[k] {
				l.RefSpanLogp += float64(v)
				l.RefSpanTokens++
			}
		}
	}
	return nil
}
