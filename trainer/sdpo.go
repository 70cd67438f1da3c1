package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/rl"
)

// SDPO (algo.name: sdpo; docs/feedback-methods.md says where each detail
// comes from). The policy's own rollout y of a problem x is re-scored by a
// teacher — an EMA of the policy, conditioned on feedback c (a sibling
// rollout of the same prompt) — and the policy, under the bare prompt, is
// distilled toward the teacher's next-token distribution at every token of
// y:
//
//	L_SDPO = Σ_t w_t · min(π_θ(y_t)/π_old(y_t), is_clip) · D(π_θ(·|x,y<t), π_T(·|x,c,y<t))
//
// with the importance weight stop-gradient, D over the teacher's top-K
// tokens plus one bucket for the rest (sdpo.alpha picks KL(T‖S), KL(S‖T)
// or the generalized Jensen-Shannon divergence between), and w_t the
// token-mean over every distilled token of the step. The update is
// λ·L_GRPO + (1 − λ)·L_SDPO in one optimizer step; after each optimizer
// step the teacher moves toward the policy (θ_T ← (1−r)·θ_T + r·θ). The
// teacher never generates: it scores the student's tokens (one forward,
// no grad, csrc.FusedTopKLogProb), and the student's log-probs at the
// teacher's tokens come from csrc.FusedGatherLogProb — neither holds the
// [tokens, V] logits.

// teacherFile is the EMA teacher's weights in a checkpoint.
const teacherFile = "teacher.safetensors"

// sdpo is SDPO's update term (term.go).
type sdpo struct {
	g       *grpoRun
	cfg     SDPOConfig
	teacher *model.Model
	// skipped counts this rank's rows whose teacher sequence exceeds the
	// model's context (not distilled) in the step.
	skipped int
}

// newSDPO makes the teacher: a copy of the policy in memory, which on a
// resume takes the checkpoint's teacher.safetensors; checkpoints keep it.
func newSDPO(g *grpoRun) (*sdpo, error) {
	t, err := g.m.Clone()
	if err != nil {
		return nil, fmt.Errorf("SDPO teacher: %w", err)
	}
	if g.resumedFrom != "" {
		if err := t.LoadWeights(filepath.Join(g.resumedFrom, teacherFile)); err != nil {
			t.Close()
			return nil, fmt.Errorf("SDPO teacher: %w", err)
		}
	}
	g.saveExtra = append(g.saveExtra, func(dir string) error { return t.SaveWeights(filepath.Join(dir, teacherFile)) })
	return &sdpo{g: g, cfg: g.cfg.SDPO, teacher: t}, nil
}

// Close frees the teacher.
func (d *sdpo) Close() { d.teacher.Close() }

func (d *sdpo) policyScale() float64 { return d.cfg.Lambda }

// stepped moves the teacher toward the policy just updated.
func (d *sdpo) stepped() error { return d.teacher.EMAFrom(d.g.m, d.cfg.TeacherUpdateRate) }

// Teacher contexts: what the teacher reads after the problem's user
// message, then "solve it" — the policy's own sibling text, never the
// gold answer.
const (
	sdpoSiblingHeader = "\n\nCorrect solution:\n\n"
	sdpoSiblingAsk    = "\n\nCorrectly solve the original question."
	sdpoBlindHeader   = "\n\nAnother attempt at this problem:\n\n"
	sdpoBlindAsk      = "\n\nSolve the original question."
)

// rows gives every sampled rollout that has a teacher context a row: the
// bare prompt and the rollout's tokens for the student, the teacher's
// prompt beside them. With teacher_context sibling the context is a
// sibling the verifier accepted (not the rollout itself); rollouts with
// none are not distilled (a group that failed throughout gets no SDPO
// signal). With blind it is any other sibling, drawn without looking at
// outcomes. The draw is keyed by (seed, step, prompt, sample).
func (d *sdpo) rows(step int, kept, sampled []*rollout, _ rl.Phases) ([]*rollout, []*rollout, termRows, error) {
	g := d.g
	G := g.cfg.Rollout.SamplesPerPrompt
	format := g.cfg.PromptFormat()
	header, ask := sdpoSiblingHeader, sdpoSiblingAsk
	if d.cfg.TeacherContext == TeacherBlind {
		header, ask = sdpoBlindHeader, sdpoBlindAsk
	}
	var rows []*rollout
	tokens := 0
	d.skipped = 0
	for start := 0; start+G <= len(sampled); start += G {
		grp := sampled[start : start+G]
		teacherIDs := map[*rollout][]int64{} // by sibling: rollouts that draw the same one share its prompt
		for i, r := range grp {
			if len(r.ids) == 0 {
				continue
			}
			o := d.sibling(step, grp, i)
			if o == nil {
				continue
			}
			tids, ok := teacherIDs[o]
			if !ok {
				sib, _ := g.tk.StripAddedTokens(o.Text)
				user := format.User(g.problems[r.Prompt.Problem].Problem) + header + sib + ask
				var err error
				if tids, err = format.UserIDs(g.tk, user); err != nil {
					return nil, nil, termRows{}, fmt.Errorf("SDPO teacher prompt of problem %s: %w", g.problems[r.Prompt.Problem].ID, err)
				}
				teacherIDs[o] = tids
			}
			if !g.fitsContext(len(tids) + len(r.ids)) {
				d.skipped++
				continue
			}
			rows = append(rows, &rollout{Rollout: r.Rollout, promptIDs: g.prompts[r.Prompt.Problem], ids: r.ids,
				oldLogp: r.oldLogp, teacherIDs: tids})
			tokens += len(r.ids)
		}
	}
	tot, err := dist.SumFloats(g.comm, []float64{float64(len(rows)), float64(tokens), float64(d.skipped)})
	if err != nil {
		return nil, nil, termRows{}, err
	}
	d.skipped = int(tot[2])
	return kept, rows, termRows{rows: int(tot[0]), tokens: int(tot[1])}, nil
}

// sibling is the teacher context of grp[i]: another member of its group
// with a response — with teacher_context sibling one the verifier
// accepted — drawn uniformly, keyed by (seed, step, prompt, sample); nil
// when there is none.
func (d *sdpo) sibling(step int, grp []*rollout, i int) *rollout {
	var cands []*rollout
	for j, o := range grp {
		if j != i && len(o.ids) > 0 && (d.cfg.TeacherContext == TeacherBlind || o.Correct) {
			cands = append(cands, o)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	r := grp[i]
	rng := rand.New(rand.NewPCG(d.g.cfg.Seed, rl.DrawKey(step, r.Prompt.Index*len(grp)+r.Sample, "sdpo-teacher-context")))
	return cands[rng.IntN(len(cands))]
}

func (d *sdpo) metrics(met *StepMetrics, tot termRows, loss float64, _ []float64, policyTokens int) {
	met.SDPORows, met.SDPOSkipped = tot.rows, d.skipped
	if tot.rows > 0 {
		if d.cfg.Lambda < 1 { // the loss is (1 − λ)·the divergence
			met.SDPODivergence = loss / (1 - d.cfg.Lambda)
		}
		met.SDPOTokenFrac = float64(tot.tokens) / float64(tot.tokens+policyTokens)
	}
}

// microBatch runs one micro-batch of SDPO rows: the teacher's top-K under
// its prompts (no grad), the student's log-probs at those tokens and at
// the sampled one under the bare prompt, the weighted divergence,
// backward. Each token weighs (1 − λ) / (the step's distilled tokens).
func (d *sdpo) microBatch(mb []*rollout, first int, tot termRows) (r microResult, err error) {
	g := d.g
	cfg := g.cfg
	var s tensor.Scope
	defer s.Close()
	w := (1 - d.cfg.Lambda) / float64(tot.tokens)
	teach := make([]*rollout, len(mb))
	for i, x := range mb {
		x.weight = w
		teach[i] = &rollout{promptIDs: x.teacherIDs, ids: x.ids, oldLogp: x.oldLogp}
	}
	b := buildBatch(&s, g.m.Device, mb)
	r.real, r.padded = g.countTrained(mb), len(mb)*int(b.t)
	g.countTrained(teach) // the teacher's forward: tokens_trained counts every trainer forward
	where := func(err error) error { return g.microBatchErr("SDPO micro-batch at row", first, len(mb), b.t, err) }
	opt := csrc.VocabOptions{Temperature: cfg.Rollout.Temperature}
	// The teacher's forward in a scope of its own: only its top-K outlives
	// it, not its layers' outputs, during the student's forward and backward.
	var tIDs, tLogp *ts.Tensor
	err = csrc.NoGrad(func() (err error) {
		var own tensor.Scope
		defer own.Close()
		defer tensor.Recover("SDPO teacher", &err)
		tb := buildBatch(&own, g.m.Device, teach)
		h, err := d.teacher.Forward(&own, tb.ids, tb.pos, nil, nil)
		if err != nil {
			return err
		}
		if tIDs, tLogp, err = csrc.FusedTopKLogProb(responseRows(&own, h, tb.tmask), d.teacher.LMHead, int64(d.cfg.TopK), opt); err != nil {
			return err
		}
		s.Keep(tIDs)
		s.Keep(tLogp)
		return nil
	})
	if err != nil {
		return r, where(err)
	}
	l, err := func() (l *ts.Tensor, err error) {
		defer tensor.Recover("SDPO loss", &err)
		h, ckpt, err := g.m.Hidden(cfg.Train.ActivationCheckpointing, &s, b.ids, b.pos, nil)
		if err != nil {
			return nil, err
		}
		// The student's log-probs at the teacher's K tokens, then at the
		// sampled token (for the importance weight): one pass.
		target := s.Keep(s.Keep(b.targets.MustMaskedSelect(b.tmask, false)).MustUnsqueeze(1, false))
		ids := s.Keep(ts.MustCat([]*ts.Tensor{tIDs, target}, 1))
		sl, err := csrc.FusedGatherLogProb(responseRows(&s, h, b.tmask), g.m.LMHead, ids, opt)
		if err != nil {
			return nil, err
		}
		sl = s.Keep(s.Keep(sl).MustTotype(gotch.Double, false))
		k := int64(d.cfg.TopK)
		div := sdpoDivergence(&s, s.Keep(sl.MustNarrow(1, 0, k, false)), s.Keep(tLogp.MustTotype(gotch.Double, false)), d.cfg.Alpha)
		lp := s.Keep(s.Keep(sl.MustNarrow(1, k, 1, false)).MustSqueezeDim(1, false))
		old := s.Keep(b.old.MustMaskedSelect(b.tmask, false))
		is := s.Keep(s.Keep(s.Keep(s.Keep(lp.MustSub(old, false)).MustExp(false)).MustClampMax(s.Float(d.cfg.ISClip), false)).MustDetach(false))
		wt := s.Keep(b.weight.MustMaskedSelect(b.tmask, false))
		l = s.Keep(s.Keep(s.Keep(div.MustMul(is, false)).MustMul(wt, false)).MustSum(gotch.Double, false))
		return l, model.Backward(l, ckpt, g.opt.LayerDone)
	}()
	if err != nil {
		return r, where(err)
	}
	r.loss = tensor.Float64s(l)[0] // sync: once per micro-batch
	return r, nil
}

// responseRows are the hidden states [N, H] of h [B, T, H] at the
// positions mask [B, T] marks, row by row (differentiable).
func responseRows(s *tensor.Scope, h, mask *ts.Tensor) *ts.Tensor {
	hs := h.MustSize()
	flat := s.Keep(h.MustReshape([]int64{-1, hs[len(hs)-1]}, false))
	idx := s.Keep(s.Keep(s.Keep(mask.MustReshape([]int64{-1}, false)).MustNonzero(false)).MustSqueezeDim(1, false))
	return s.Keep(flat.MustIndexSelect(0, idx, false))
}

// sdpoDivergence is the per-token divergence [N] between the student's
// log-probs student [N, K] and the teacher's teacher [N, K] at the same K
// tokens, each completed by a tail bucket log(1 − Σ p) so both are
// distributions over K + 1 outcomes: alpha 0 KL(teacher‖student), 1
// KL(student‖teacher), between the generalized Jensen-Shannon divergence
// (1−α)·KL(S‖M) + α·KL(T‖M) with M = (1−α)·S + α·T. Gradients flow to
// student only if it requires them (the teacher's are constants).
func sdpoDivergence(s *tensor.Scope, student, teacher *ts.Tensor, alpha float64) *ts.Tensor {
	S, T := withTail(s, student), withTail(s, teacher)
	kl := func(p, q *ts.Tensor) *ts.Tensor { // Σ exp(p)·(p − q) over the last dim
		d := s.Keep(s.Keep(p.MustExp(false)).MustMul(s.Keep(p.MustSub(q, false)), false))
		return s.Keep(d.MustSumDimIntlist([]int64{-1}, false, d.DType(), false))
	}
	switch alpha {
	case 0:
		return kl(T, S)
	case 1:
		return kl(S, T)
	}
	m := s.Keep(s.Keep(S.MustAddScalar(s.Float(math.Log(1-alpha)), false)).MustLogaddexp(s.Keep(T.MustAddScalar(s.Float(math.Log(alpha)), false)), false))
	a := s.Keep(kl(S, m).MustMulScalar(s.Float(1-alpha), false))
	return s.Keep(a.MustAdd(s.Keep(kl(T, m).MustMulScalar(s.Float(alpha), false)), false))
}

// withTail appends log(1 − Σ exp(lp)) to lp [N, K] (the mass outside the K
// tokens, floored at 1e-12 of the total), giving [N, K + 1].
func withTail(s *tensor.Scope, lp *ts.Tensor) *ts.Tensor {
	sum := s.Keep(s.Keep(lp.MustExp(false)).MustSumDimIntlist([]int64{-1}, true, lp.DType(), false))
	tail := s.Keep(s.Keep(s.Keep(sum.MustRsubScalar(s.Float(1), false)).MustClampMin(s.Float(1e-12), false)).MustLog(false))
	return s.Keep(ts.MustCat([]*ts.Tensor{lp, tail}, 1))
}
