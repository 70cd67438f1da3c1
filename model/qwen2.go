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
	QLoRA, KLoRA, VLoRA, OLoRA *Adapter   // nil without LoRA (lora.go)
}

// layerInputs are what every decoder layer of one forward pass shares.
type layerInputs struct {
	cfg  *Config
	sdpa bool  // attention through libtorch's SDPA
	rope *rope // cos and sin of every position
	pos  *ts.Tensor
	// allowed is the attention mask [B, 1, Tq, Tk]; nil where every row is
	// a prefix (no left padding), so causal attention alone is exact for
	// every token: SDPA's is_causal, no mask.
	allowed *ts.Tensor
	dec     *decodeInput // one token per row into the static cache (decode.go)
}

// Forward maps x [B, T, H] to [B, T, H]. With a cache, the new keys and
// values are written into it and attention covers every cached position.
func (a *Attention) Forward(s *tensor.Scope, in *layerInputs, x *ts.Tensor, cache *layerCache) *ts.Tensor {
	c := in.cfg
	b, t := x.MustSize()[0], x.MustSize()[1]
	hq, hkv := c.NumAttentionHeads, c.NumKeyValueHeads
	// The biases stay in the projections (addmm: one rounding, as
	// transformers' F.linear; on CUDA a cuBLASLt epilogue, no extra kernel).
	q, k, v := project(s, x, a.QProj, a.QBias, a.QLoRA), project(s, x, a.KProj, a.KBias, a.KLoRA), project(s, x, a.VProj, a.VBias, a.VLoRA) // [B, T, n·D]
	if a.QNorm != nil {
		// Qwen3 normalizes each head before RoPE.
		q = headNorm(s, q, a.QNorm, hq, c)
		k = headNorm(s, k, a.KNorm, hkv, c)
	}
	var o *ts.Tensor
	if in.dec != nil {
		o = in.dec.attend(s, in, q, k, v, cache)
	} else {
		q, k, v = rope3(s, in, q, k, v) // [B, n, T, D]
		if cache != nil {
			k, v = cache.update(s, k, v)
		}
		o = attention(s, in, q, k, v)
		o = s.Keep(o.MustTranspose(1, 2, false))
	}
	o = s.Keep(o.MustReshape([]int64{b, t, hq * c.HeadDim}, false))
	return project(s, o, a.OProj, a.OBias, a.OLoRA)
}

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) · up(x)).
type MLP struct {
	GateProj, UpProj, DownProj *ts.Tensor // [I, H], [I, H], [H, I]
	GateLoRA, UpLoRA, DownLoRA *Adapter   // nil without LoRA (lora.go)
}

func (p *MLP) Forward(s *tensor.Scope, x *ts.Tensor) *ts.Tensor {
	return project(s, swiGLU(s, project(s, x, p.GateProj, nil, p.GateLoRA), project(s, x, p.UpProj, nil, p.UpLoRA)), p.DownProj, nil, p.DownLoRA)
}

// DecoderLayer is pre-norm attention and MLP with residuals.
type DecoderLayer struct {
	InputNorm, PostAttnNorm *ts.Tensor // [H]
	Attn                    Attention
	MLP                     MLP
}

// Forward takes the hidden state as x + res (res nil: x alone) and returns
// the next one the same way, as out + next: each residual add is done by
// the norm that follows it (addRMSNorm), the last one by the next layer's.
func (l *DecoderLayer) Forward(s *tensor.Scope, in *layerInputs, x, res *ts.Tensor, cache *layerCache) (out, next *ts.Tensor) {
	h, residual := addRMSNorm(s, x, res, l.InputNorm, in.cfg.RMSNormEps)
	h = l.Attn.Forward(s, in, h, cache)
	h, residual = addRMSNorm(s, h, residual, l.PostAttnNorm, in.cfg.RMSNormEps)
	return l.MLP.Forward(s, h), residual
}

// forwardWhole is Forward from and to one hidden-state tensor (activation
// checkpointing keeps those). The sum rounds as addRMSNorm's does, so both
// ways compute the same values.
func (l *DecoderLayer) forwardWhole(s *tensor.Scope, in *layerInputs, h *ts.Tensor) *ts.Tensor {
	out, next := l.Forward(s, in, h, nil, nil)
	return s.Keep(out.MustAdd(next, false))
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
	lora       *LoRA // adapters (lora.go), or nil
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
// for ids [B, T] at positions [B, T]. mask [B, T] is 1 for tokens and 0 for
// left padding; nil means every row starts at its first column (right
// padding or none), where causal attention alone is exact for every token
// and SDPA runs its causal kernel without a mask. With a cache (nil: none)
// the tokens are the next T positions of every row: their keys and values
// are written into it, attention covers everything cached before them, and
// the cache advances by T. A prefill is one call with the whole
// (left-padded) prompt. Tensors it returns belong to s.
func (m *Model) Forward(s *tensor.Scope, ids, positions, mask *ts.Tensor, cache *KVCache) (h *ts.Tensor, err error) {
	defer tensor.Recover("forward", &err)
	t := ids.MustSize()[1]
	in := &layerInputs{cfg: m.Config, sdpa: m.useSDPA, rope: m.rope, pos: positions}
	// Positions run below the sequence's length: within the RoPE tables,
	// which the fused kernel reads without a bounds check on CUDA.
	if n, end := m.rope.positions(), t+cacheLen(cache); end > n {
		return nil, fmt.Errorf("%d positions exceed the model's %d (max_position_embeddings)", end, n)
	}
	if cache != nil {
		if cache.Len+t > cache.Tmax {
			return nil, fmt.Errorf("KV cache full: %d + %d positions exceed its %d", cache.Len, t, cache.Tmax)
		}
		if mask == nil {
			mask = s.Keep(ids.MustOnesLike(false))
		}
		s.Keep(cache.Mask.MustNarrow(1, cache.Len, t, false)).Copy_(mask)
		mask = s.Keep(cache.Mask.MustNarrow(1, 0, cache.Len+t, false))
	}
	if mask != nil {
		in.allowed = attentionMask(s, mask, t)
	}
	x := s.Keep(ts.MustEmbedding(m.Embed, ids, -1, false, false))
	var res *ts.Tensor
	for i, l := range m.Layers {
		var lc *layerCache
		if cache != nil {
			lc = &layerCache{k: cache.K[i], v: cache.V[i], start: cache.Len, n: t}
		}
		x, res = layerStep(s, x, res, func(ls *tensor.Scope, x, res *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
			return l.Forward(ls, in, x, res, lc)
		})
	}
	if cache != nil {
		cache.Len += t
	}
	h, _ = addRMSNorm(s, x, res, m.Norm, m.Config.RMSNormEps)
	return h, nil
}

func cacheLen(c *KVCache) int64 {
	if c == nil {
		return 0
	}
	return c.Len
}

// layerStep runs one layer in a scope of its own and frees its temporaries
// as soon as it returns, keeping only its outputs (in s): holding every
// layer's intermediates to the end of the forward costs memory and, from
// fresh pages, time. Autograd keeps what backward needs by itself.
func layerStep(s *tensor.Scope, x, res *ts.Tensor, f func(ls *tensor.Scope, x, res *ts.Tensor) (*ts.Tensor, *ts.Tensor)) (*ts.Tensor, *ts.Tensor) {
	var ls tensor.Scope
	defer ls.Close()
	out, next := f(&ls, x, res)
	if next != nil {
		next = s.Keep(ls.Release(next))
	}
	return s.Keep(ls.Release(out)), next
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
// grad mode is on and the parameters require grad. mask is Forward's (nil
// for right-padded rows).
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
	m.dropLoRA()
	if m.rope != nil {
		m.rope.Close()
		m.rope = nil
	}
}
