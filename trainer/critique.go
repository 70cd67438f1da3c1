package trainer

import (
	"fmt"
	"math/rand/v2"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/tools"
)

// Critique-GRPO (algo.name: critique-grpo; docs/feedback-methods.md says
// where each detail comes from). After the step's rollouts are scored, one
// attempt of each group — drawn without looking at outcomes — gets a
// critique: the policy's own (critique.source self: it is shown the
// attempt and asked to find its errors, told nothing of the outcome) or
// the verifier's verdict alone (outcome). The policy then refines the
// attempt with the critique in context, and the refinement, verified, joins
// its group: G + 1 members whose advantages are r − mean (no std unless
// critique.adv_std). The G first attempts train with GRPO's clipped loss;
// the refinement trains as an answer to the bare problem, with policy
// shaping in place of the ratio — each token's loss −A·f(π_θ), f(p) =
// p/(p + γ) — normalized with the first attempts (algo.loss_agg_mode over
// both). A group whose first attempts all scored alike is trained when its
// refinement scored otherwise: the refinement is the only way such a
// group gives a gradient. No prompt carries the gold answer.

// critiqueMethod is Critique-GRPO's row of the methods table.
var critiqueMethod = method{
	name:     AlgoCritique,
	about:    "Critique-GRPO: one attempt per group critiqued and refined; the refinement joins its group, policy-shaped",
	section:  "critique",
	defaults: func(c *Config) { c.Critique = CritiqueConfig{Source: CritiqueSelf, MaxCritiqueTokens: 256, Gamma: 0.1} },
	validate: func(c *Config, _ bool) error { return c.Critique.validate() },
	build: func(g *grpoRun) (methodParts, error) {
		v := g.view()
		return methodParts{term: &critique{v: v, cfg: v.cfg.Critique}}, nil
	},
	tag:     "critique",
	metrics: []any{critiqueMetrics{}},
}

// CritiqueConfig is Critique-GRPO's (algo.name: critique-grpo): one
// attempt per group is critiqued and refined; the refinement joins its
// group, trained under the bare problem with policy shaping.
type CritiqueConfig struct {
	// Source of the critique: "self" (the policy critiques the attempt,
	// told nothing of its outcome) or "outcome" (the critique is whether
	// the verifier accepted the attempt, and nothing else).
	Source string `yaml:"source"`
	// MaxCritiqueTokens bounds a self-critique's generation.
	MaxCritiqueTokens int `yaml:"max_critique_tokens"`
	// Gamma is the shaping f(p) = p / (p + γ) of a refinement token's
	// probability, in place of the ratio.
	Gamma float64 `yaml:"gamma"`
	// AdvStd divides the mixed group's advantages by their std (the paper:
	// no).
	AdvStd bool `yaml:"adv_std"`
}

// critique.source values.
const (
	CritiqueSelf    = "self"
	CritiqueOutcome = "outcome"
)

func (q CritiqueConfig) validate() error {
	switch {
	case q.Source != CritiqueSelf && q.Source != CritiqueOutcome:
		return bad("critique.source", "%q: want %s or %s", q.Source, CritiqueSelf, CritiqueOutcome)
	case q.MaxCritiqueTokens < 1:
		return bad("critique.max_critique_tokens", "must be ≥ 1, got %d", q.MaxCritiqueTokens)
	case !finite(q.Gamma) || q.Gamma <= 0:
		return bad("critique.gamma", "must be > 0, got %g", q.Gamma)
	}
	return nil
}

// critique is Critique-GRPO's update term (term.go). It reads the
// critique section, the problems, their prompt format and bare prompts,
// and the rollout's settings; it generates and verifies through the step.
type critique struct {
	v   termView
	cfg CritiqueConfig
}

// The sums of critique's rows beside their count and tokens
// (termRows.sums).
const (
	critiqueCorrect   = iota // refinements the verifier accepted
	critiqueRevived          // groups the refinement gave reward variance that had none
	critiqueToolCalls        // the tool calls of the refinements made (tools: section)
	critiqueSums
)

func (c *critique) policyScale() float64 { return 1 }

func (c *critique) stepped() error { return nil }

func (c *critique) close() {}

// The critique and refinement prompts: the problem's user message, the
// attempt, then the ask.
const (
	critiqueAttemptHeader = "\n\nHere is an attempt at this problem:\n\n"
	critiqueAsk           = "\n\nCritique this attempt: check its reasoning step by step and point out any error. Do not write a new solution."
	critiqueHeader        = "\n\nA critique of this attempt:\n\n"
	critiqueRefineAsk     = "\n\nTaking the critique into account, solve the problem again from the start."
	critiqueRight         = "The final answer of this attempt is correct."
	critiqueWrong         = "The final answer of this attempt is incorrect."
)

// rows critiques and refines one attempt per group of this rank's sampled
// rollouts, puts each refinement into its group, recomputes the groups'
// advantages and returns the kept first attempts (with any group the
// refinement revived) and the refinements.
func (c *critique) rows(step int, kept, sampled []*rollout, ph rl.Phases) ([]*rollout, []*rollout, termRows, error) {
	v := c.v
	G := v.cfg.Rollout.SamplesPerPrompt
	format := v.cfg.PromptFormat()
	// A critique is text: its prompt declares no tools (nobody would answer
	// them). The refinement is a rollout like the first attempts: through
	// the run's tools, if any.
	critiqueFormat := format
	critiqueFormat.Tools = nil
	var jobs []*critiqueJob
	for start := 0; start+G <= len(sampled); start += G {
		grp := sampled[start : start+G]
		a := c.pick(step, grp)
		text, _ := v.tk.StripAddedTokens(a.Text)
		jobs = append(jobs, &critiqueJob{grp: grp, attempt: a, user: format.User(v.problems[a.Prompt.Problem].Problem) + critiqueAttemptHeader + text})
	}
	// 1. critiques
	if c.cfg.Source == CritiqueOutcome {
		for _, j := range jobs {
			j.critique = critiqueWrong
			if j.attempt.Correct {
				j.critique = critiqueRight
			}
		}
	} else {
		ph.Enter("critique")
		var asks []*critiqueJob
		var prompts [][]int64
		for _, j := range jobs {
			ids, err := critiqueFormat.UserIDs(v.tk, j.user+critiqueAsk)
			if err != nil {
				return nil, nil, termRows{}, err
			}
			if v.step.fitsContext(len(ids) + c.cfg.MaxCritiqueTokens) {
				asks, prompts = append(asks, j), append(prompts, ids)
			}
		}
		out, _, err := c.generate(step, asks, prompts, c.cfg.MaxCritiqueTokens, "critique", false)
		if err != nil {
			return nil, nil, termRows{}, err
		}
		for i, j := range asks {
			j.critique, _ = v.tk.StripAddedTokens(v.tk.Decode(tokenizer.Ints(out[i].IDs), true))
		}
	}
	// 2. refinements, verified
	ph.Enter("refine")
	var refine []*critiqueJob
	var prompts [][]int64
	for _, j := range jobs {
		if j.critique == "" {
			continue // no critique: its prompt did not fit the context, or the policy wrote none
		}
		ids, err := format.UserIDs(v.tk, j.user+critiqueHeader+j.critique+critiqueRefineAsk)
		if err != nil {
			return nil, nil, termRows{}, err
		}
		if v.step.fitsContext(len(ids) + v.cfg.Rollout.MaxNewTokens) {
			refine, prompts = append(refine, j), append(prompts, ids)
		}
	}
	out, trs, err := c.generate(step, refine, prompts, v.cfg.Rollout.MaxNewTokens, "critique-refine", true)
	if err != nil {
		return nil, nil, termRows{}, err
	}
	refs := make([]*rollout, len(refine))
	for i, j := range refine {
		o := out[i]
		o.Index = G // the group's G + 1st member
		j.ref = sampledRollout(v.tk, j.attempt.Prompt, o, trajectoryAt(trs, i))
		j.ref.promptIDs, j.ref.oldLogp = v.prompts[j.attempt.Prompt.Problem], make([]float64, len(o.IDs)) // shaped, no ratio: π_old unused
		refs[i] = j.ref
	}
	ph.Enter("reward")
	if err := v.step.score(refs); err != nil {
		return nil, nil, termRows{}, err
	}
	// 3. the mixed groups' advantages; a group is trained if it was kept,
	// or if its refinement scored otherwise than its first attempts.
	wasKept := map[*rollout]bool{}
	for _, r := range kept {
		wasKept[r] = true
	}
	var newKept, trained []*rollout
	tokens, correct, revived, calls := 0, 0, 0, 0
	for _, j := range jobs {
		ref := j.ref
		members := j.grp
		if ref != nil {
			members = append(append([]*rollout(nil), j.grp...), ref)
			if ref.Correct {
				correct++
			}
			calls += ref.tool.Calls
		}
		rs := groupRewards(members)
		keep := wasKept[j.grp[0]]
		if !keep && ref != nil && !allEqual(rs) {
			keep = true
			revived++
		}
		if !keep {
			continue
		}
		adv := Advantages([][]float64{rs}, !c.cfg.AdvStd, 1e-6)[0] // over the G + 1
		for i, r := range members {
			r.adv = adv[i]
		}
		newKept = append(newKept, j.grp...)
		if ref != nil && len(ref.ids) > 0 {
			trained = append(trained, ref)
			tokens += ownTokens(ref) // a refinement's tool outputs are inputs
		}
	}
	sums := make([]float64, critiqueSums)
	sums[critiqueCorrect], sums[critiqueRevived], sums[critiqueToolCalls] = float64(correct), float64(revived), float64(calls)
	return newKept, trained, termRows{rows: len(trained), tokens: tokens, sums: sums, joinPolicy: true}, nil
}

// pick is the group's attempt to critique: drawn uniformly, keyed by
// (seed, step, prompt), without looking at outcomes — which attempt is
// shown says nothing about whether it was right.
func (c *critique) pick(step int, grp []*rollout) *rollout {
	rng := rand.New(rand.NewPCG(c.v.cfg.Seed, rl.DrawKey(step, grp[0].Prompt.Index, "critique-attempt")))
	return grp[rng.IntN(len(grp))]
}

// critiqueJob is one group's attempt on its way to a refinement.
type critiqueJob struct {
	grp      []*rollout
	attempt  *rollout
	user     string // the problem's user message + the attempt
	critique string
	ref      *rollout // the refinement, verified (nil: none made)
}

// generate samples one response to each prompt (the rollout's sampling
// settings, at most maxNew tokens), keyed by (seed, step, purpose) and
// each job's prompt index; withTools: through the run's tools (trs: the
// trajectories' records, nil without tools), the samples in the jobs'
// order.
func (c *critique) generate(step int, jobs []*critiqueJob, prompts [][]int64, maxNew int, purpose string, withTools bool) (_ []model.Sample, trs []tools.Trajectory, _ error) {
	v := c.v
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	reqs := make([]model.Request, len(jobs))
	streams := make([]int, len(jobs))
	for i, j := range jobs {
		reqs[i] = model.Request{PromptIDs: prompts[i], Samples: 1}
		streams[i] = j.attempt.Prompt.Index
		v.step.prefilled(len(prompts[i]))
	}
	seed := rl.DrawKey(step, 0, purpose) ^ v.cfg.Seed
	var res []model.Sample
	var err error
	if withTools {
		res, trs, err = v.step.trajectories(reqs, streams, maxNew, seed)
	} else {
		res, err = v.step.generate(reqs, streams, maxNew, seed)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("Critique-GRPO %s: %w", purpose, err)
	}
	out := make([]model.Sample, len(jobs))
	var byJob []tools.Trajectory
	if trs != nil {
		byJob = make([]tools.Trajectory, len(jobs))
	}
	for i, r := range res {
		out[r.Prompt] = r
		if trs != nil {
			byJob[r.Prompt] = trs[i]
		}
	}
	return out, byJob, nil
}

// critiqueMetrics are Critique-GRPO's keys of the step's line
// (TensorBoard: critique/…): refinements made and those the verifier
// accepted, groups the refinements gave reward variance that had none,
// the refinements' shaped loss, the refinement tokens' share of the
// update's, and with tools the refinements' tool calls.
type critiqueMetrics struct {
	Refinements int     `json:"critique_refinements,omitempty"`
	RefinedOK   int     `json:"critique_refined_correct,omitempty"`
	GroupsSaved int     `json:"critique_groups_revived,omitempty"`
	Loss        float64 `json:"critique_loss,omitempty"`
	TokenFrac   float64 `json:"critique_token_frac,omitempty"`
	ToolCalls   int     `json:"critique_tool_calls,omitempty"`
}

func (c *critique) metrics(tot termRows, loss float64, _ []float64, policyTokens int) any {
	met := &critiqueMetrics{Refinements: tot.rows, RefinedOK: int(tot.sum(critiqueCorrect)), GroupsSaved: int(tot.sum(critiqueRevived)), Loss: loss,
		ToolCalls: int(tot.sum(critiqueToolCalls))}
	if tot.rows > 0 {
		met.TokenFrac = float64(tot.tokens) / float64(tot.tokens+policyTokens)
	}
	return met
}

// microBatch runs one micro-batch of refinements under the bare problem:
// loss −Σ w·A·p/(p + γ) over their tokens (w: the policy's token weights),
// backward.
func (c *critique) microBatch(mb []*rollout, first int, _ termRows) (microResult, error) {
	return c.v.step.micro("refinement micro-batch at row", mb, first, func(s *tensor.Scope, b *batch, _ *microResult) (*ts.Tensor, *model.Checkpointed, error) {
		lp, _, ckpt, err := c.v.step.logProbs(s, b, csrc.LogProbOptions{Temperature: c.v.cfg.Rollout.Temperature})
		if err != nil {
			return nil, nil, err
		}
		l, err := shapedLoss(s, lp, b.adv, b.weight, c.cfg.Gamma)
		return l, ckpt, err
	})
}

// shapedLoss is −Σ weight·adv·f(exp(lp)), f(p) = p/(p + γ), over lp [B, T]
// (adv [B, 1], weight [B, T], 0 off the response).
func shapedLoss(s *tensor.Scope, lp, adv, weight *ts.Tensor, gamma float64) (l *ts.Tensor, err error) {
	defer tensor.Recover("shaped loss", &err)
	p := s.Keep(s.Keep(lp.MustTotype(weight.DType(), false)).MustExp(false))
	f := s.Keep(p.MustDiv(s.Keep(p.MustAddScalar(s.Float(gamma), false)), false))
	t := s.Keep(s.Keep(f.MustMul(adv, false)).MustMul(weight, false))
	return s.Keep(s.Keep(t.MustSum(weight.DType(), false)).MustNeg(false)), nil
}
