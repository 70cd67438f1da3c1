package trainer

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/tools"
)

// rollout is one sampled response and what the update needs of it; the
// embedded rl.Rollout is what an explorer sees of it.
type rollout struct {
	rl.Rollout
	promptIDs []int64   // the prompt the update conditions on
	ids       []int64   // generated ids
	oldLogp   []float64 // the sampler's record (float32) or the trainer's
	// behaviorLogp are the sampler's log-probs when oldLogp was recomputed
	// by the trainer — on another prompt than the sampler saw
	// (rl.Prompt.TrainIDs ≠ IDs) or on the same one
	// (algo.recompute_old_logp) — and the loss is importance-weighted.
	behaviorLogp []float64
	adv          float64
	refLogp      []float64
	tis          []float32 // truncated importance weight of each token (nil: 1)
	weight       float64   // loss weight of each of its tokens (TokenWeights)
	auxPrompt    []int64   // a term's second prompt for the row (a teacher's)
	// reason is the reward's account of its verdict (the rollouts log);
	// it knows the outcome, so it stays out of rl.Rollout, which an
	// explorer sees.
	reason string
	span   []bool // consolidation: its tokens in the run's diagnostic span (nil: none)
	// A tool trajectory: the ids the tools' responses appended (ranges of
	// ids; no loss, no log-probs), the model's own text (what the reward
	// reads) and what its tools did.
	appended [][2]int
	ownText  string
	tool     tools.Trajectory
}

// rolloutStat is what every rank learns of every rollout of the step: what
// the metrics need.
type rolloutStat struct {
	Index   int     `json:"i"` // the prompt's global index in the step
	Sample  int     `json:"s"`
	Reward  float64 `json:"r"`
	Correct bool    `json:"c,omitempty"`
	Trunc   bool    `json:"t,omitempty"`
	Len     int     `json:"n"`
	Kept    bool    `json:"k,omitempty"`
	// Tools: calls, failed calls, tool turns, appended tokens, tool seconds.
	Calls    int     `json:"tc,omitempty"`
	Errs     int     `json:"te,omitempty"`
	Turns    int     `json:"tt,omitempty"`
	Appended int     `json:"ta,omitempty"`
	ToolSec  float64 `json:"ts,omitempty"`
}

// exchangeStats all-gathers the round's rollout statistics (kept: this
// rank's rollouts that survived the filter), sorted by global index.
func (g *grpoRun) exchangeStats(batch, kept []*rollout) ([]rolloutStat, error) {
	isKept := make(map[*rollout]bool, len(kept))
	for _, r := range kept {
		isKept[r] = true
	}
	mine := make([]rolloutStat, len(batch))
	for i, r := range batch {
		mine[i] = rolloutStat{Index: r.Prompt.Index, Sample: r.Sample, Reward: r.Reward, Correct: r.Correct, Trunc: r.Truncated,
			Len: len(r.ids), Kept: isKept[r], Calls: r.tool.Calls, Errs: r.tool.Errors, Turns: r.tool.Turns, ToolSec: r.tool.ToolSeconds}
		mine[i].Appended = tools.AppendedTokens(r.appended)
	}
	if g.comm.Size() == 1 {
		return mine, nil
	}
	return dist.GatherOrdered(g.comm, mine, func(r rolloutStat) (int, int) { return r.Index, r.Sample })
}

// rollout samples G responses to each prompt, each prompt's randomness
// keyed by its index in the step.
func (g *grpoRun) rollout(ps []*rl.Prompt) ([]*rollout, error) {
	cfg := g.cfg
	reqs := make([]model.Request, len(ps))
	streams := make([]int, len(ps))
	problems := make([]int, len(ps))
	for i, p := range ps {
		reqs[i] = model.Request{PromptIDs: p.IDs, Samples: cfg.Rollout.SamplesPerPrompt}
		streams[i], problems[i] = p.Index, p.Problem
		g.stepTokens.prefilled += len(p.IDs) // once per prompt: the engine shares the prefix across the group
	}
	res, trs, err := g.trajectories(reqs, streams, cfg.Rollout.MaxNewTokens, rl.StepSeed(cfg.Seed, g.state.Step))
	if err != nil {
		return nil, fmt.Errorf("problems %s: %w", g.problemIDs(problems), err)
	}
	batch := make([]*rollout, len(res))
	for i, r := range res {
		p := ps[r.Prompt]
		batch[i] = sampledRollout(g.tk, p, r, trajectoryAt(trs, i))
		batch[i].promptIDs, batch[i].oldLogp = p.IDs, widen(r.Logprobs)
	}
	return batch, nil
}

// trajectories samples like generate, through the run's tools when it has
// them: each sample is then a trajectory (its Appended ranges), and
// trs[i] the loop's record of res[i] (nil without tools).
func (g *grpoRun) trajectories(reqs []model.Request, streams []int, maxNew int, seed uint64) (res []model.Sample, trs []tools.Trajectory, err error) {
	opt := g.cfg.Rollout.GenerateOptions()
	if g.tools == nil {
		res, err = g.generateWith(reqs, streams, maxNew, seed, opt)
		return res, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // tools still running when generation fails
	rows := 0
	for _, r := range reqs {
		rows += r.Samples
	}
	if opt.Turns, err = g.tools.Start(ctx, rows); err != nil {
		return nil, nil, err
	}
	if res, err = g.generateWith(reqs, streams, maxNew, seed, opt); err != nil {
		return nil, nil, err
	}
	trs = make([]tools.Trajectory, len(res))
	for i, r := range res {
		trs[i] = g.tools.Trajectory(r.Prompt, r.Index)
	}
	return res, trs, nil
}

// sampledRollout is sample r of prompt p as a rollout, tr its tools'
// record (zero without tools): its ids and text, and for a trajectory the
// appended ranges and the model's own text (what the reward reads). The
// caller sets its prompt ids and log-probs.
func sampledRollout(tk *tokenizer.Tokenizer, p *rl.Prompt, r model.Sample, tr tools.Trajectory) *rollout {
	text := tk.Decode(tokenizer.Ints(r.IDs), true)
	x := &rollout{Rollout: rl.Rollout{Prompt: p, Sample: r.Index, Tokens: len(r.IDs), Truncated: r.FinishReason == "length", Text: text},
		ids: r.IDs, appended: r.Appended, ownText: text, tool: tr}
	if len(r.Appended) > 0 {
		x.ownText = tk.Decode(tokenizer.Ints(tools.OwnIDs(r.IDs, r.Appended)), true)
	}
	return x
}

// trajectoryAt is trs[i], or none without tools (trs nil).
func trajectoryAt(trs []tools.Trajectory, i int) tools.Trajectory {
	if trs == nil {
		return tools.Trajectory{}
	}
	return trs[i]
}

// generate samples reqs with the rollout's sampling settings, at most
// maxNew tokens each, seeded by seed and keyed by streams (the rollout
// engine, without grad), and counts the generated tokens in the step's.
func (g *grpoRun) generate(reqs []model.Request, streams []int, maxNew int, seed uint64) ([]model.Sample, error) {
	return g.generateWith(reqs, streams, maxNew, seed, g.cfg.Rollout.GenerateOptions())
}

// generateWith is generate with the engine's options given.
func (g *grpoRun) generateWith(reqs []model.Request, streams []int, maxNew int, seed uint64, opt model.GenerateOptions) ([]model.Sample, error) {
	cfg := g.cfg
	sp := model.SamplingParams{Temperature: cfg.Rollout.Temperature, TopP: cfg.Rollout.TopP, TopK: cfg.Rollout.TopK,
		MaxNewTokens: maxNew, StopIDs: g.eos, Seed: seed}
	if g.hb != nil {
		opt.Progress = g.hb.decoded
	}
	var res []model.Sample
	err := csrc.NoGrad(func() (err error) {
		res, err = g.m.GenerateAt(reqs, streams, sp, opt)
		return err
	})
	for _, r := range res {
		appended := tools.AppendedTokens(r.Appended) // a tool's output is prefilled, not generated
		g.stepTokens.prefilled += appended
		g.stepTokens.generated += len(r.IDs) - appended
	}
	return res, err
}

// problemIDs lists the ids of some problems for an error message.
func (g *grpoRun) problemIDs(idx []int) string {
	var ids []string
	for i, k := range idx {
		if i == 8 {
			ids = append(ids, fmt.Sprintf("… (%d in all)", len(idx)))
			break
		}
		ids = append(ids, g.problems[k].ID)
	}
	return strings.Join(ids, ", ")
}

// score sets each rollout's reward, verdict and reason through the run's
// reward kind (reward.kind; math: 1 for a verified answer — a truncated
// response needs an explicit one — plus algo.format_reward when the answer
// is in a complete \boxed{}). The rollouts the kind failed to score and
// scored 0 (reward.on_error zero) are counted in g.stepRewardErrors (and
// every rollout in g.stepScored): a step none of whose rollouts could be
// scored stops the run (checkScored).
func (g *grpoRun) score(batch []*rollout) error {
	if len(batch) == 0 {
		return nil
	}
	reqs := make([]reward.Request, len(batch))
	prompts := map[*rl.Prompt]string{}
	for i, r := range batch {
		p := g.problems[r.Prompt.Problem]
		resp := r.Text
		if len(r.appended) > 0 {
			resp = r.ownText // a tool trajectory: the model's own text, not the tools' outputs
		}
		reqs[i] = reward.Request{Problem: p.Record, ID: p.ID, Answer: p.Answer, Response: resp, Truncated: r.Truncated}
		if k := g.cfg.Reward.Kind; k == reward.KindCommand || k == reward.KindHTTP { // only a user's reward reads the prompt's text
			text, ok := prompts[r.Prompt]
			if !ok {
				text = g.tk.Decode(tokenizer.Ints(r.Prompt.IDs), false)
				prompts[r.Prompt] = text
			}
			reqs[i].Prompt = text
		}
	}
	verdicts, err := reward.ScoreChecked(context.Background(), g.scorer, reqs, func(i int) string { return g.problems[batch[i].Prompt.Problem].Where })
	if err != nil {
		return fmt.Errorf("reward (reward.kind %s): %w", g.cfg.Reward.Kind, err)
	}
	failed := 0
	for i, r := range batch {
		v := verdicts[i]
		r.Reward, r.Correct, r.reason = v.Reward, v.Correct, v.Reason
		if v.Err != "" {
			failed++
			r.reason = "reward error: " + v.Err
		}
	}
	g.stepRewardErrors += failed
	g.stepScored += len(batch)
	if failed > 0 && g.firstRewardErr == "" {
		for _, v := range verdicts {
			if v.Err != "" {
				g.firstRewardErr = v.Err
				break
			}
		}
	}
	return nil
}

// checkScored stops the run when no rollout of the step, on any rank,
// could be scored (reward.on_error zero scores single failures 0, but a
// step of zeros from a dead reward would train on nothing real). A run
// with the math verifier, which cannot fail, issues no collective.
func (g *grpoRun) checkScored() error {
	if g.cfg.Reward.Kind == reward.KindMath {
		return nil
	}
	n, err := dist.SumFloats(g.comm, []float64{float64(g.stepRewardErrors), float64(g.stepScored)})
	if err != nil {
		return err
	}
	if n[0] > 0 && n[0] == n[1] {
		first := g.firstRewardErr
		if first == "" {
			first = "(on another rank)"
		}
		return fmt.Errorf("reward (reward.kind %s): every one of the step's %d rollouts failed to score; this rank's first failure: %s", g.cfg.Reward.Kind, int(n[1]), first)
	}
	return nil
}

// filterGroups computes advantages group by group (G consecutive rollouts)
// and returns the groups to train on. With dynamic sampling a group whose
// rewards are all equal is dropped (it has no gradient), except in the
// last round, which keeps what it gets.
func (g *grpoRun) filterGroups(batch []*rollout, lastRound bool) []*rollout {
	G := g.cfg.Rollout.SamplesPerPrompt
	var kept []*rollout
	for start := 0; start < len(batch); start += G {
		grp := batch[start : start+G]
		rs := groupRewards(grp)
		if g.cfg.Algo.DynamicSampling && allEqual(rs) && !lastRound {
			continue
		}
		adv := Advantages([][]float64{rs}, g.cfg.Algo.AdvNoStd, 1e-6)[0]
		for i, r := range grp {
			r.adv = adv[i]
		}
		kept = append(kept, grp...)
	}
	return kept
}

func groupRewards(grp []*rollout) []float64 {
	rs := make([]float64, len(grp))
	for i, r := range grp {
		rs[i] = r.Reward
	}
	return rs
}

// fillMetrics describes what the policy did — every rollout sampled on
// any rank, before dynamic sampling's filter — and, under *_kept names,
// the batch the update trained on. stats are in global order.
func (g *grpoRun) fillMetrics(m *StepMetrics, stats []rolloutStat) {
	G := g.cfg.Rollout.SamplesPerPrompt
	var sum, sq, correct, lenSum, trunc float64
	var keptN, keptSum, keptCorrect float64
	maxLen := 0
	for _, r := range stats {
		sum += r.Reward
		sq += r.Reward * r.Reward
		if r.Correct {
			correct++
		}
		lenSum += float64(r.Len)
		maxLen = max(maxLen, r.Len)
		if r.Trunc {
			trunc++
		}
		m.Tokens += r.Len
		if r.Kept {
			keptN++
			keptSum += r.Reward
			if r.Correct {
				keptCorrect++
			}
		}
	}
	if n := float64(len(stats)); n > 0 {
		m.RewardMean = sum / n
		m.RewardStd = math.Sqrt(math.Max(0, sq/n-m.RewardMean*m.RewardMean))
		m.Accuracy = correct / n
		m.RespLenMean, m.RespLenMax, m.TruncRatio = lenSum/n, maxLen, trunc/n
	}
	var calls, turns, appended float64
	for _, r := range stats {
		calls += float64(r.Calls)
		turns += float64(r.Turns)
		appended += float64(r.Appended)
		m.ToolErrors += r.Errs
		m.ToolSeconds += r.ToolSec
	}
	if n := float64(len(stats)); n > 0 && g.tools != nil {
		m.ToolCalls, m.ToolTurns = calls/n, turns/n
		if lenSum > 0 {
			m.AppendedShare = appended / lenSum
		}
	}
	zero := 0
	for start := 0; start+G <= len(stats); start += G {
		rs := make([]float64, G)
		for i := range rs {
			rs[i] = stats[start+i].Reward
		}
		if allEqual(rs) {
			zero++
		}
	}
	m.ZeroVarFrac = float64(zero) / float64(max(len(stats)/G, 1))
	m.GroupsKept = int(keptN) / G
	m.GroupsDropped = (len(stats) - int(keptN)) / G
	if keptN > 0 {
		m.RewardMeanKept, m.AccuracyKept = keptSum/keptN, keptCorrect/keptN
	}
}

func widen(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func allEqual(x []float64) bool {
	for _, v := range x[1:] {
		if v != x[0] {
			return false
		}
	}
	return true
}

// spanOf marks the response tokens ids of problem k inside the run's
// diagnostic span (nil: no span function, or no span in this response).
func (g *grpoRun) spanOf(k int, ids []int64) []bool {
	if g.span == nil {
		return nil
	}
	pieces := g.tk.Pieces(tokenizer.Ints(ids), true)
	lo, hi, ok := g.span(g.problems[k].ID, strings.Join(pieces, ""))
	if !ok {
		return nil
	}
	return rl.InSpan(pieces, lo, hi)
}
