package model

import (
	"fmt"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// The Qwen2 family (Qwen2, Qwen2.5, Qwen3; Llama shares the code path):
// embeddings → layers (RMSNorm → GQA attention with RoPE → residual →
// RMSNorm → SwiGLU MLP → residual) → RMSNorm → LM head.
// Dimension letters: B batch, T tokens, H hidden, Hq/Hkv heads, D head dim,
// V vocabulary.

// AttentionImpl selects how attention is computed.
type AttentionImpl int

const (
	// AttentionAuto uses SDPA on CUDA where this libtorch has it, and the
	// reference on CPU, where libtorch 2.1's SDPA with an explicit mask
	// measured slower (`lanpo bench forward --attention sdpa|reference`:
	// 7153 vs 6810 ms for Qwen2.5-0.5B's shape at 4×256 on 2 cores).
	AttentionAuto AttentionImpl = iota
	// AttentionSDPA is libtorch's scaled_dot_product_attention.
	AttentionSDPA
	// AttentionReference is the readable matmul-softmax-matmul.
	AttentionReference
)

// Attention is one layer's self-attention.
type Attention struct {
	QProj, KProj, VProj, OProj *ts.Tensor // [Hq·D, H], [Hkv·D, H], [Hkv·D, H], [H, Hq·D]
	QBias, KBias, VBias, OBias *ts.Tensor // nil where the family has none
	QNorm, KNorm               *ts.Tensor // [D], Qwen3 only
}

// layerInputs are what every decoder layer of one forward pass shares.
type layerInputs struct {
	cfg      *Config
	sdpa     bool       // attention through libtorch's SDPA
	cos, sin *ts.Tensor // RoPE at the positions, [B, 1, T, D]
	allowed  *ts.Tensor // attention mask [B, 1, Tq, Tk]
}

// Forward maps x [B, T, H] to [B, T, H]. With a cache, the new keys and
// values are written into it and attention covers every cached position.
func (a *Attention) Forward(s *tensor.Scope, in *layerInputs, x *ts.Tensor, cache *layerCache) *ts.Tensor {
	c := in.cfg
	size := x.MustSize()
	b, t := size[0], size[1]
	heads := func(y *ts.Tensor, n int64, norm *ts.Tensor) *ts.Tensor {
		y = s.Keep(y.MustView([]int64{b, t, n, c.HeadDim}, false))
		if norm != nil {
			y = rmsNorm(s, y, norm, c.RMSNormEps)
		}
		return s.Keep(y.MustTranspose(1, 2, false)) // [B, n, T, D]
	}
	q := heads(linear(s, x, a.QProj, a.QBias), c.NumAttentionHeads, a.QNorm)
	k := heads(linear(s, x, a.KProj, a.KBias), c.NumKeyValueHeads, a.KNorm)
	v := heads(linear(s, x, a.VProj, a.VBias), c.NumKeyValueHeads, nil)
	q = applyRope(s, q, in.cos, in.sin)
	k = applyRope(s, k, in.cos, in.sin)
	if cache != nil {
		k, v = cache.update(s, k, v)
	}
	var o *ts.Tensor
	if in.sdpa {
		// libtorch 2.1's SDPA wants as many key/value heads as query heads.
		if g := c.KVGroups(); g > 1 {
			k = s.Keep(k.MustRepeatInterleaveSelfInt(g, []int64{1}, nil, false))
			v = s.Keep(v.MustRepeatInterleaveSelfInt(g, []int64{1}, nil, false))
		}
		o = attentionSDPA(s, q, k, v, in.allowed)
	} else {
		o = attentionGrouped(s, q, k, v, in.allowed, c.KVGroups())
	}
	o = s.Keep(s.Keep(o.MustTranspose(1, 2, false)).MustReshape([]int64{b, t, c.NumAttentionHeads * c.HeadDim}, false))
	return linear(s, o, a.OProj, a.OBias)
}

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) · up(x)).
type MLP struct {
	GateProj, UpProj, DownProj *ts.Tensor // [I, H], [I, H], [H, I]
}

func (p *MLP) Forward(s *tensor.Scope, x *ts.Tensor) *ts.Tensor {
	gate := s.Keep(linear(s, x, p.GateProj, nil).MustSilu(false))
	up := linear(s, x, p.UpProj, nil)
	return linear(s, s.Keep(gate.MustMul(up, false)), p.DownProj, nil)
}

// DecoderLayer is pre-norm attention and MLP with residuals.
type DecoderLayer struct {
	InputNorm, PostAttnNorm *ts.Tensor // [H]
	Attn                    Attention
	MLP                     MLP
}

func (l *DecoderLayer) Forward(s *tensor.Scope, in *layerInputs, h *ts.Tensor, cache *layerCache) *ts.Tensor {
	residual := h
	h = rmsNorm(s, h, l.InputNorm, in.cfg.RMSNormEps)
	h = l.Attn.Forward(s, in, h, cache)
	h = s.Keep(residual.MustAdd(h, false))
	residual = h
	h = rmsNorm(s, h, l.PostAttnNorm, in.cfg.RMSNormEps)
	h = l.MLP.Forward(s, h)
	return s.Keep(residual.MustAdd(h, false))
}

// Model is a loaded causal LM. Its parameters are named exactly as the
// checkpoint's keys; Params lists them sorted by name.
type Model struct {
	Config *Config
	Device gotch.Device
	DType  gotch.DType

	Embed  *ts.Tensor // [V, H]
	Layers []*DecoderLayer
	Norm   *ts.Tensor // [H]
	LMHead *ts.Tensor // [V, H]; the embedding itself when tied

	params     []NamedParam
	rope       *rope
	useSDPA    bool
	rawConfig  []byte      // config.json as loaded, for Save
	companions []companion // tokenizer and generation files as loaded, for Save
	sourceDir  string      // where it was loaded from (for messages)
}

// NamedParam is one parameter and its checkpoint key.
type NamedParam struct {
	Name   string
	Tensor *ts.Tensor
}

// Params returns the parameters sorted by name (the order for optimizers,
// gradient clipping, collectives and checkpoints). A tied LM head appears
// once, as model.embed_tokens.weight.
func (m *Model) Params() []NamedParam { return m.params }

// SetAttention picks the attention implementation.
func (m *Model) SetAttention(impl AttentionImpl) error {
	switch impl {
	case AttentionReference:
		m.useSDPA = false
	case AttentionAuto:
		m.useSDPA = sdpaAvailable() && m.Device.IsCuda()
	case AttentionSDPA:
		if !sdpaAvailable() {
			return fmt.Errorf("scaled_dot_product_attention is not available in libtorch %s", csrcVersion())
		}
		m.useSDPA = true
	default:
		return fmt.Errorf("unknown attention implementation %d", impl)
	}
	return nil
}

// UsesSDPA reports whether attention runs through libtorch's SDPA.
func (m *Model) UsesSDPA() bool { return m.useSDPA }

// Forward returns the final hidden states [B, T, H] (after the last norm)
// for ids [B, T] at positions [B, T] with mask [B, T] (1 for tokens, 0 for
// left padding). With a cache (nil: none) the tokens are the next T
// positions of every row: their keys and values are written into the
// cache, attention covers everything cached before them, and the cache
// advances by T. A prefill is one call with the whole (left-padded) prompt;
// each decode step is a call with T = 1. Tensors it returns belong to s.
func (m *Model) Forward(s *tensor.Scope, ids, positions, mask *ts.Tensor, cache *KVCache) (h *ts.Tensor, err error) {
	defer tensor.Recover("forward", &err)
	t := ids.MustSize()[1]
	keyMask := mask
	if cache != nil {
		if cache.Len+t > cache.Tmax {
			return nil, fmt.Errorf("KV cache full: %d + %d positions exceed its %d", cache.Len, t, cache.Tmax)
		}
		s.Keep(cache.Mask.MustNarrow(1, cache.Len, t, false)).Copy_(mask)
		keyMask = s.Keep(cache.Mask.MustNarrow(1, 0, cache.Len+t, false))
	}
	in := &layerInputs{cfg: m.Config, sdpa: m.useSDPA, allowed: attentionMask(s, keyMask, t)}
	in.cos, in.sin = m.rope.tables(s, positions, m.DType)
	h = s.Keep(ts.MustEmbedding(m.Embed, ids, -1, false, false))
	for i, l := range m.Layers {
		var lc *layerCache
		if cache != nil {
			lc = &layerCache{k: cache.K[i], v: cache.V[i], start: cache.Len, n: t}
		}
		h = layerStep(s, h, func(ls *tensor.Scope, x *ts.Tensor) *ts.Tensor { return l.Forward(ls, in, x, lc) })
	}
	if cache != nil {
		cache.Len += t
	}
	return rmsNorm(s, h, m.Norm, m.Config.RMSNormEps), nil
}

// layerStep runs one layer in a scope of its own and frees its temporaries
// as soon as it returns, keeping only the output (in s): holding every
// layer's intermediates to the end of the forward costs memory and, from
// fresh pages, time. Autograd keeps what backward needs by itself.
func layerStep(s *tensor.Scope, h *ts.Tensor, f func(*tensor.Scope, *ts.Tensor) *ts.Tensor) *ts.Tensor {
	var ls tensor.Scope
	defer ls.Close()
	return s.Keep(ls.Release(f(&ls, h)))
}

// Logits maps hidden states [..., H] to fp32 logits [..., V]. Training and
// scoring use TokenLogProbs, which never materializes them.
func (m *Model) Logits(s *tensor.Scope, h *ts.Tensor) *ts.Tensor {
	return s.Keep(linear(s, h, m.LMHead, nil).MustTotype(gotch.Float, false))
}

// TokenLogProbs returns log p(targets[b,t] | ids[b,≤t]) [B, T] (fp32; fp64
// for an fp64 model) for every position where targetMask is true, 0
// elsewhere, through csrc's fused op: the [B·T, V] logits are never held.
// With Entropy it also returns each position's entropy. Differentiable when
// grad mode is on and the parameters require grad.
func (m *Model) TokenLogProbs(s *tensor.Scope, ids, positions, mask, targets, targetMask *ts.Tensor, opt csrc.LogProbOptions) (logp, entropy *ts.Tensor, err error) {
	defer tensor.Recover("token log-probs", &err)
	h, err := m.Forward(s, ids, positions, mask, nil)
	if err != nil {
		return nil, nil, err
	}
	return m.logProbs(s, h, targets, targetMask, opt)
}

// logProbs is TokenLogProbs from final hidden states h [B, T, H].
func (m *Model) logProbs(s *tensor.Scope, h, targets, targetMask *ts.Tensor, opt csrc.LogProbOptions) (logp, entropy *ts.Tensor, err error) {
	size := targets.MustSize()
	flat := s.Keep(h.MustReshape([]int64{-1, m.Config.HiddenSize}, false))
	opt.Mask = s.Keep(targetMask.MustReshape([]int64{-1}, false))
	lp, ent, err := csrc.FusedLogProb(flat, m.LMHead, s.Keep(targets.MustReshape([]int64{-1}, false)), opt)
	if err != nil {
		return nil, nil, err
	}
	logp = s.Keep(s.Keep(lp).MustView(size, false))
	if ent != nil {
		entropy = s.Keep(s.Keep(ent).MustView(size, false))
	}
	return logp, entropy, nil
}

// Close frees the parameters and tables.
func (m *Model) Close() {
	for _, p := range m.params {
		p.Tensor.MustDrop()
	}
	m.params = nil
	if m.rope != nil {
		m.rope.Close()
		m.rope = nil
	}
}
