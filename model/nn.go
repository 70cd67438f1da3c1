package model

import (
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Shared layers. Every function registers what it makes in the caller's
// scope; nothing here frees its inputs.

// linear is x·Wᵀ (+ b). b may be nil.
func linear(s *tensor.Scope, x, w, b *ts.Tensor) *ts.Tensor {
	if b == nil {
		b = ts.None // an undefined tensor: at::linear skips the bias
	}
	return s.Keep(ts.MustLinear(x, w, b))
}

// project is linear with the projection's LoRA adapter added (a nil: none).
func project(s *tensor.Scope, x, w, b *ts.Tensor, a *Adapter) *ts.Tensor {
	y := linear(s, x, w, b)
	if a == nil {
		return y
	}
	return a.add(s, x, y)
}

// rmsNorm is HF's Qwen2RMSNorm through csrc (statistics in fp32).
func rmsNorm(s *tensor.Scope, x, w *ts.Tensor, eps float64) *ts.Tensor {
	y, err := csrc.RMSNorm(x, w, eps)
	if err != nil {
		panic(err)
	}
	return s.Keep(y)
}

// addRMSNorm is the residual add and the norm after it in one kernel:
// h = x + res, y = rmsNorm(h). With res nil, h is x (a new handle to it).
func addRMSNorm(s *tensor.Scope, x, res, w *ts.Tensor, eps float64) (y, h *ts.Tensor) {
	if res == nil {
		return rmsNorm(s, x, w, eps), s.Keep(x.MustShallowClone())
	}
	y, h, err := csrc.AddRMSNorm(x, res, w, eps)
	if err != nil {
		panic(err)
	}
	return s.Keep(y), s.Keep(h)
}

// headNorm is Qwen3's RMSNorm of each head of x [B, T, n·D], as [B, T, n·D].
func headNorm(s *tensor.Scope, x, w *ts.Tensor, n int64, c *Config) *ts.Tensor {
	size := x.MustSize()
	y := rmsNorm(s, s.Keep(x.MustView([]int64{size[0], size[1], n, c.HeadDim}, false)), w, c.RMSNormEps)
	return s.Keep(y.MustView(size, false))
}

// swiGLU is silu(gate) · up in one kernel.
func swiGLU(s *tensor.Scope, gate, up *ts.Tensor) *ts.Tensor {
	y, err := csrc.SwiGLU(gate, up)
	if err != nil {
		panic(err)
	}
	return s.Keep(y)
}

// rope3 turns the projections q, k, v [B, T, n·D] into attention's
// [B, n, T, D] with q and k rotated at the positions: one kernel.
func rope3(s *tensor.Scope, in *layerInputs, q, k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor, *ts.Tensor) {
	c := in.cfg
	oq, ok, ov, err := csrc.Rope(q, k, v, nil, nil, nil, in.rope.cos, in.rope.sin, in.pos, c.NumAttentionHeads, c.NumKeyValueHeads)
	if err != nil {
		panic(err)
	}
	return s.Keep(oq), s.Keep(ok), s.Keep(ov)
}

// attention is softmax(q·kᵀ/√D)·v over the keys in.allowed (or causal)
// lets each query see: q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D] →
// [B, Hq, Tq, D]. SDPA without a mask runs its causal kernel, with
// enable_gqa where libtorch has it; otherwise keys and values are repeated
// for SDPA, or grouped for the reference.
func attention(s *tensor.Scope, in *layerInputs, q, k, v *ts.Tensor) *ts.Tensor {
	g := in.cfg.KVGroups()
	if !in.sdpa {
		allowed := in.allowed
		if allowed == nil {
			allowed = causalMask(s, q)
		}
		return attentionGrouped(s, q, k, v, allowed, g)
	}
	gqa := g > 1 && in.allowed == nil && csrc.SDPAGQA()
	if g > 1 && !gqa {
		// libtorch 2.1's SDPA (and a masked call) wants as many key/value
		// heads as query heads.
		k = s.Keep(k.MustRepeatInterleaveSelfInt(g, []int64{1}, nil, false))
		v = s.Keep(v.MustRepeatInterleaveSelfInt(g, []int64{1}, nil, false))
	}
	if in.allowed != nil {
		return attentionSDPA(s, q, k, v, in.allowed)
	}
	o, err := csrc.SDPA(q, k, v, nil, true, gqa)
	if err != nil {
		panic(err)
	}
	return s.Keep(o)
}

// causalMask is the boolean [1, 1, T, T] causal mask for q [B, H, T, D].
func causalMask(s *tensor.Scope, q *ts.Tensor) *ts.Tensor {
	t := q.MustSize()[2]
	m := s.Keep(s.Keep(ts.MustOnes([]int64{t, t}, gotch.Bool, q.MustDevice())).MustTril(0, false))
	return s.Keep(m.MustView([]int64{1, 1, t, t}, false))
}

// rope holds cos and sin of every position's rotation angles, [Tmax, D] in
// fp32, computed as transformers does: inv_freq in fp32, angles in fp32.
type rope struct {
	cos, sin *ts.Tensor
}

func newRope(headDim int64, theta float64, maxPos int64, device gotch.Device) *rope {
	var s tensor.Scope
	defer s.Close()
	half := headDim / 2
	inv := make([]float32, half)
	for i := range inv {
		inv[i] = float32(1.0 / math.Pow(theta, float64(float32(2*i)/float32(headDim))))
	}
	pos := make([]float32, maxPos)
	for i := range pos {
		pos[i] = float32(i)
	}
	invT := tensor.FromSlice(&s, inv, nil, device)
	posT := tensor.FromSlice(&s, pos, nil, device)
	freqs := s.Keep(s.Keep(posT.MustUnsqueeze(1, false)).MustMul(s.Keep(invT.MustUnsqueeze(0, false)), false)) // [Tmax, D/2]
	emb := s.Keep(ts.MustCat([]*ts.Tensor{freqs, freqs}, 1))                                                   // [Tmax, D]
	return &rope{cos: emb.MustCos(false), sin: emb.MustSin(false)}
}

// positions is how many positions the tables hold.
func (r *rope) positions() int64 { return r.cos.MustSize()[0] }

func (r *rope) Close() {
	r.cos.MustDrop()
	r.sin.MustDrop()
}

// attentionMask is the boolean [B, 1, Tq, Tk] mask of allowed attention for
// queries at the last Tq of Tk positions: causal, not onto padding keys.
// A query with no allowed key (a padding position) may attend to itself so
// softmax stays finite; its output is never used.
func attentionMask(s *tensor.Scope, keyMask *ts.Tensor, tq int64) *ts.Tensor {
	size := keyMask.MustSize()
	b, tk := size[0], size[1]
	dev := keyMask.MustDevice()
	causal := s.Keep(s.Keep(ts.MustOnes([]int64{tk, tk}, gotch.Bool, dev)).MustTril(0, false))
	causal = s.Keep(causal.MustNarrow(0, tk-tq, tq, false)) // rows of the last tq queries
	keys := s.Keep(s.Keep(keyMask.MustTotype(gotch.Bool, false)).MustView([]int64{b, 1, 1, tk}, false))
	self := s.Keep(s.Keep(ts.MustEye(tk, gotch.Bool, dev)).MustNarrow(0, tk-tq, tq, false))
	// Same-shape operands: libtorch 2.1 warns when a broadcasting logical op
	// resizes its output.
	full := []int64{b, 1, tq, tk}
	expand := func(t *ts.Tensor) *ts.Tensor { return s.Keep(t.MustExpand(full, false, false)) }
	allowed := s.Keep(expand(causal).MustLogicalAnd(expand(keys), false))
	return s.Keep(allowed.MustLogicalOr(expand(self), false))
}

// attentionReference is softmax(q·kᵀ/√D masked)·v with the softmax in fp32,
// as transformers' eager attention computes it. q [B,H,Tq,D], k/v [B,H,Tk,D].
func attentionReference(s *tensor.Scope, q, k, v, allowed *ts.Tensor) *ts.Tensor {
	d := q.MustSize()[3]
	kt := s.Keep(k.MustTranspose(2, 3, false))
	scores := s.Keep(s.Keep(q.MustMatmul(kt, false)).MustMulScalar(s.Float(1/math.Sqrt(float64(d))), false))
	blocked := s.Keep(allowed.MustLogicalNot(false))
	scores = s.Keep(scores.MustMaskedFill(blocked, s.Float(math.Inf(-1)), false))
	probs := s.Keep(s.Keep(scores.MustSoftmax(-1, gotch.Float, false)).MustTotype(q.DType(), false))
	return s.Keep(probs.MustMatmul(v, false))
}

// attentionGrouped is attentionReference for grouped-query attention
// without copying keys and values G times: query head h uses key/value head
// h / G, so the G query heads of a group are stacked along the query axis,
// q [B, Hkv, G·Tq, D], and attend to their shared k, v [B, Hkv, Tk, D].
// During decoding that saves reading G copies of the whole cache per layer.
func attentionGrouped(s *tensor.Scope, q, k, v, allowed *ts.Tensor, g int64) *ts.Tensor {
	if g == 1 {
		return attentionReference(s, q, k, v, allowed)
	}
	qs := q.MustSize()
	b, hq, tq, d := qs[0], qs[1], qs[2], qs[3]
	hkv := hq / g
	tk := allowed.MustSize()[3]
	qg := s.Keep(q.MustReshape([]int64{b, hkv, g * tq, d}, false))
	mask := s.Keep(s.Keep(s.Keep(allowed.MustUnsqueeze(2, false)).MustExpand([]int64{b, 1, g, tq, tk}, false, false)).MustReshape([]int64{b, 1, g * tq, tk}, false))
	o := attentionReference(s, qg, k, v, mask) // [B, Hkv, G·Tq, D]
	return s.Keep(o.MustReshape([]int64{b, hq, tq, d}, false))
}

// attentionSDPA is the same through libtorch's scaled_dot_product_attention.
func attentionSDPA(s *tensor.Scope, q, k, v, allowed *ts.Tensor) *ts.Tensor {
	return s.Keep(ts.MustScaledDotProductAttention(q, k, v, allowed, 0, false, nil))
}
