package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
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

// sdpoMethod is SDPO's row of the methods table.
var sdpoMethod = method{
	name:    AlgoSDPO,
	about:   "SDPO: GRPO's loss blended with self-distillation toward an EMA teacher that sees a verified sibling (teacher.safetensors in every checkpoint)",
	section: "sdpo",
	defaults: func(c *Config) {
		c.SDPO = SDPOConfig{Lambda: 0.9, TopK: 20, Alpha: 0.5, TeacherUpdateRate: 0.05, ISClip: 2, TeacherContext: TeacherSibling}
	},
	validate: func(c *Config, chosen bool) error { return c.SDPO.validate(chosen && c.LoRA.On()) },
	build: func(g *grpoRun) (methodParts, error) {
		d, err := newSDPO(g.view())
		if err != nil {
			return methodParts{}, err
		}
		return methodParts{term: d, save: d.save}, nil
	},
	tag:     "sdpo",
	metrics: []any{sdpoMetrics{}},
}

// SDPOConfig is SDPO's (algo.name: sdpo): each rollout with a teacher
// context is distilled, under the bare prompt, toward the teacher's
// distribution over its own tokens.
type SDPOConfig struct {
	// Lambda weighs the blend: λ·(GRPO's loss) + (1 − λ)·(the distillation
	// loss); 0 is SDPO alone (the official code), 1 GRPO alone.
	Lambda float64 `yaml:"lambda"`
	// TopK is the support of the per-token divergence: the teacher's K most
	// likely tokens, plus one bucket for the rest of the vocabulary.
	TopK int `yaml:"top_k"`
	// Alpha picks the divergence: 0 KL(teacher‖student), 1
	// KL(student‖teacher), between: the generalized Jensen-Shannon
	// divergence with mixture (1−α)·student + α·teacher.
	Alpha float64 `yaml:"alpha"`
	// TeacherUpdateRate is the EMA teacher's rate r: θ_T ← (1−r)·θ_T + r·θ
	// after each optimizer step (1: the live policy).
	TeacherUpdateRate float64 `yaml:"teacher_update_rate"`
	// ISClip caps the per-token importance weight π_θ/π_old (stop-grad).
	ISClip float64 `yaml:"is_clip"`
	// TeacherContext is what the teacher sees besides the problem:
	// "sibling" a sibling the verifier accepted, shown as a correct
	// solution (the paper's form with scalar rewards); "blind" a sibling
	// drawn without looking at outcomes, shown as another attempt.
	TeacherContext string `yaml:"teacher_context"`
}

// sdpo.teacher_context values.
const (
	TeacherSibling = "sibling"
	TeacherBlind   = "blind"
)

// validate checks the sdpo section; withLoRA: the run is SDPO's with LoRA
// adapters.
func (d SDPOConfig) validate(withLoRA bool) error {
	switch {
	case !finite(d.Lambda) || d.Lambda < 0 || d.Lambda > 1:
		return bad("sdpo.lambda", "must be in [0, 1] (the weight of GRPO's loss), got %g", d.Lambda)
	case d.TopK < 1:
		return bad("sdpo.top_k", "must be ≥ 1, got %d", d.TopK)
	case !finite(d.Alpha) || d.Alpha < 0 || d.Alpha > 1:
		return bad("sdpo.alpha", "must be in [0, 1], got %g", d.Alpha)
	case !finite(d.TeacherUpdateRate) || d.TeacherUpdateRate <= 0 || d.TeacherUpdateRate > 1:
		return bad("sdpo.teacher_update_rate", "must be in (0, 1], got %g", d.TeacherUpdateRate)
	case !finite(d.ISClip) || d.ISClip <= 0:
		return bad("sdpo.is_clip", "must be > 0, got %g", d.ISClip)
	case d.TeacherContext != TeacherSibling && d.TeacherContext != TeacherBlind:
		return bad("sdpo.teacher_context", "%q: want %s or %s", d.TeacherContext, TeacherSibling, TeacherBlind)
	case withLoRA:
		return bad("lora", "is not supported with algo.name sdpo yet: the EMA teacher is a full copy of the model")
	}
	return nil
}

// teacherFile is the EMA teacher's weights in a checkpoint.
const teacherFile = "teacher.safetensors"

// sdpo is SDPO's update term (term.go). It reads the sdpo section, the
// problems, their prompt format and bare prompts, and the policy (its
// teacher's copy, its hidden states and LM head).
type sdpo struct {
	v       termView
	cfg     SDPOConfig
	teacher *model.Model
}

// The sums of sdpo's rows beside their count and tokens (termRows.sums).
const (
	sdpoSkipped = iota // rows whose teacher sequence exceeds the model's context (not distilled)
	sdpoSums
)

// newSDPO makes the teacher: a copy of the policy in memory, which on a
// resume takes the checkpoint's teacher.safetensors; checkpoints keep it
// (save).
func newSDPO(v termView) (*sdpo, error) {
	t, err := v.m.Clone()
	if err != nil {
		return nil, fmt.Errorf("SDPO teacher: %w", err)
	}
	if v.resumedFrom != "" {
		if err := t.LoadWeights(filepath.Join(v.resumedFrom, teacherFile)); err != nil {
			t.Close()
			return nil, fmt.Errorf("SDPO teacher: %w", err)
		}
	}
	return &sdpo{v: v, cfg: v.cfg.SDPO, teacher: t}, nil
}

// save writes the teacher into a checkpoint directory.
func (d *sdpo) save(dir string) error { return d.teacher.SaveWeights(filepath.Join(dir, teacherFile)) }

// close frees the teacher.
func (d *sdpo) close() { d.teacher.Close() }

func (d *sdpo) policyScale() float64 { return d.cfg.Lambda }

// stepped moves the teacher toward the policy just updated.
func (d *sdpo) stepped() error { return d.teacher.EMAFrom(d.v.m, d.cfg.TeacherUpdateRate) }

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
// outcomes. The draw is keyed by (seed, step, prompt, sample). With
// tools, both prompts declare them, the sibling is its whole trajectory
// (calls and outputs) as text, and only the rollout's own tokens are
// distilled: its tool outputs are inputs to student and teacher alike.
func (d *sdpo) rows(step int, kept, sampled []*rollout, _ rl.Phases) ([]*rollout, []*rollout, termRows, error) {
	v := d.v
	G := v.cfg.Rollout.SamplesPerPrompt
	format := v.cfg.PromptFormat()
	header, ask := sdpoSiblingHeader, sdpoSiblingAsk
	if d.cfg.TeacherContext == TeacherBlind {
		header, ask = sdpoBlindHeader, sdpoBlindAsk
	}
	var rows []*rollout
	tokens, skipped := 0, 0
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
				sib, _ := v.tk.StripAddedTokens(o.Text)
				user := format.User(v.problems[r.Prompt.Problem].Problem) + header + sib + ask
				var err error
				if tids, err = format.UserIDs(v.tk, user); err != nil {
					return nil, nil, termRows{}, fmt.Errorf("SDPO teacher prompt of problem %s: %w", v.problems[r.Prompt.Problem].ID, err)
				}
				teacherIDs[o] = tids
			}
			if !v.step.fitsContext(len(tids) + len(r.ids)) {
				skipped++
				continue
			}
			rows = append(rows, &rollout{Rollout: r.Rollout, promptIDs: v.prompts[r.Prompt.Problem], ids: r.ids, appended: r.appended,
				oldLogp: r.oldLogp, auxPrompt: tids})
			tokens += ownTokens(r) // a trajectory's tool outputs are inputs to both, distilled nowhere
		}
	}
	sums := make([]float64, sdpoSums)
	sums[sdpoSkipped] = float64(skipped)
	return kept, rows, termRows{rows: len(rows), tokens: tokens, sums: sums}, nil
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
	rng := rand.New(rand.NewPCG(d.v.cfg.Seed, rl.DrawKey(step, r.Prompt.Index*len(grp)+r.Sample, "sdpo-teacher-context")))
	return cands[rng.IntN(len(cands))]
}

// sdpoMetrics are SDPO's keys of the step's line (TensorBoard: sdpo/…):
// the rollouts distilled toward the teacher, those left out because the
// teacher's sequence exceeds the context, the importance-weighted
// token-mean divergence, and the distilled tokens' share of the update's.
type sdpoMetrics struct {
	Rows       int     `json:"sdpo_rows,omitempty"`
	Skipped    int     `json:"sdpo_skipped,omitempty"`
	Divergence float64 `json:"sdpo_divergence,omitempty"`
	TokenFrac  float64 `json:"sdpo_token_frac,omitempty"`
}

func (d *sdpo) metrics(tot termRows, loss float64, _ []float64, policyTokens int) any {
	met := &sdpoMetrics{Rows: tot.rows, Skipped: int(tot.sum(sdpoSkipped))}
	if tot.rows > 0 {
		if d.cfg.Lambda < 1 { // the loss is (1 − λ)·the divergence
			met.Divergence = loss / (1 - d.cfg.Lambda)
		}
		met.TokenFrac = float64(tot.tokens) / float64(tot.tokens+policyTokens)
	}
	return met
}

// microBatch runs one micro-batch of SDPO rows: the teacher's top-K under
// its prompts (no grad), the student's log-probs at those tokens and at
// the sampled one under the bare prompt, the weighted divergence,
// backward. Each token weighs (1 − λ) / (the step's distilled tokens).
func (d *sdpo) microBatch(mb []*rollout, first int, tot termRows) (microResult, error) {
	v := d.v
	w := (1 - d.cfg.Lambda) / float64(tot.tokens)
	teach := make([]*rollout, len(mb))
	for i, x := range mb {
		x.weight = w
		teach[i] = &rollout{promptIDs: x.auxPrompt, ids: x.ids, appended: x.appended, oldLogp: x.oldLogp}
	}
	opt := csrc.VocabOptions{Temperature: v.cfg.Rollout.Temperature}
	return v.step.micro("SDPO micro-batch at row", mb, first, func(s *tensor.Scope, b *batch, _ *microResult) (*ts.Tensor, *model.Checkpointed, error) {
		v.step.countTrained(teach) // the teacher's forward: tokens_trained counts every trainer forward
		// The teacher's forward in a scope of its own: only its top-K
		// outlives it, not its layers' outputs, during the student's
		// forward and backward.
		var tIDs, tLogp *ts.Tensor
		err := csrc.NoGrad(func() (err error) {
			var own tensor.Scope
			defer own.Close()
			defer tensor.Recover("SDPO teacher", &err)
			tb := buildBatch(&own, v.m.Device, teach)
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
			return nil, nil, err
		}
		h, ckpt, err := v.m.Hidden(v.cfg.Train.ActivationCheckpointing, s, b.ids, b.pos, nil)
		if err != nil {
			return nil, nil, err
		}
		// The student's log-probs at the teacher's K tokens, then at the
		// sampled token (for the importance weight): one pass.
		target := s.Keep(s.Keep(b.targets.MustMaskedSelect(b.tmask, false)).MustUnsqueeze(1, false))
		ids := s.Keep(ts.MustCat([]*ts.Tensor{tIDs, target}, 1))
		sl, err := csrc.FusedGatherLogProb(responseRows(s, h, b.tmask), v.m.LMHead, ids, opt)
		if err != nil {
			return nil, nil, err
		}
		sl = s.Keep(s.Keep(sl).MustTotype(gotch.Double, false))
		k := int64(d.cfg.TopK)
		div := sdpoDivergence(s, s.Keep(sl.MustNarrow(1, 0, k, false)), s.Keep(tLogp.MustTotype(gotch.Double, false)), d.cfg.Alpha)
		lp := s.Keep(s.Keep(sl.MustNarrow(1, k, 1, false)).MustSqueezeDim(1, false))
		old := s.Keep(b.old.MustMaskedSelect(b.tmask, false))
		is := s.Keep(s.Keep(s.Keep(s.Keep(lp.MustSub(old, false)).MustExp(false)).MustClampMax(s.Float(d.cfg.ISClip), false)).MustDetach(false))
		wt := s.Keep(b.weight.MustMaskedSelect(b.tmask, false))
		return s.Keep(s.Keep(s.Keep(div.MustMul(is, false)).MustMul(wt, false)).MustSum(gotch.Double, false)), ckpt, nil
	})
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
