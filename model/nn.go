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

// rmsNorm is HF's Qwen2RMSNorm through csrc (statistics in fp32).
func rmsNorm(s *tensor.Scope, x, w *ts.Tensor, eps float64) *ts.Tensor {
	y, err := csrc.RMSNorm(x, w, eps)
	if err != nil {
		panic(err)
	}
	return s.Keep(y)
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

func (r *rope) Close() {
	r.cos.MustDrop()
	r.sin.MustDrop()
}

// tables gathers cos and sin at positions [B, T] as [B, 1, T, D] in dtype.
func (r *rope) tables(s *tensor.Scope, positions *ts.Tensor, dtype gotch.DType) (cos, sin *ts.Tensor) {
	size := positions.MustSize()
	flat := s.Keep(positions.MustReshape([]int64{-1}, false))
	pick := func(t *ts.Tensor) *ts.Tensor {
		g := s.Keep(t.MustIndexSelect(0, flat, false))
		g = s.Keep(g.MustReshape([]int64{size[0], 1, size[1], -1}, false))
		return s.Keep(g.MustTotype(dtype, false))
	}
	return pick(r.cos), pick(r.sin)
}

// applyRope rotates x [B, Hx, T, D]: x·cos + rotate_half(x)·sin, with
// rotate_half(x) = [−x₂, x₁] for the two halves of the last dimension.
func applyRope(s *tensor.Scope, x, cos, sin *ts.Tensor) *ts.Tensor {
	d := x.MustSize()[3]
	x1 := s.Keep(x.MustNarrow(3, 0, d/2, false))
	x2 := s.Keep(x.MustNarrow(3, d/2, d/2, false))
	rot := s.Keep(ts.MustCat([]*ts.Tensor{s.Keep(x2.MustNeg(false)), x1}, 3))
	return s.Keep(s.Keep(x.MustMul(cos, false)).MustAdd(s.Keep(rot.MustMul(sin, false)), false))
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
