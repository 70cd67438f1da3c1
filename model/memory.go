package model

// Memory arithmetic of this implementation, for lanpo plan: how many
// parameters a config has and what a training forward keeps for backward.

// ParamCount is the number of parameters the config implies (a tied head
// counted once).
func (c *Config) ParamCount() int64 {
	h, i, v := c.HiddenSize, c.IntermediateSize, c.VocabSize
	qd, kvd := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	layer := 2*h + h*qd + 2*h*kvd + qd*h + 3*h*i // norms, q, k, v, o, gate, up, down
	if c.QKVBias {
		layer += qd + 2*kvd
	}
	if c.OBias {
		layer += h
	}
	if c.QKNorm {
		layer += 2 * c.HeadDim
	}
	n := v*h + h + c.NumHiddenLayers*layer // embedding, final norm, layers
	if !c.TieWordEmbeddings {
		n += v * h
	}
	return n
}

// ActivationElems counts the elements a training forward keeps for backward
// per token, as lanpo's Forward computes (qwen2.go): per layer the
// normalized inputs of the attention and MLP blocks and their norms'
// inputs, q and k before and after RoPE with their rotated halves, v, the
// attention output, and the MLP's gate, up, silu(gate) and product:
// 5H + 3·Hq·D + 4·Hkv·D + 4I. The reference attention also keeps its fp32
// probabilities, Hq · (sequence length) per token (AttentionProbs);
// SDPA's fused kernels keep none of that size.
func (c *Config) ActivationElems() (perLayer int64) {
	h, i := c.HiddenSize, c.IntermediateSize
	qd, kvd := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	return 5*h + 3*qd + 4*kvd + 4*i
}

// AttentionProbs is the reference attention's probabilities kept per token
// and layer for a sequence of length t (fp32 elements).
func (c *Config) AttentionProbs(t int64) int64 { return c.NumAttentionHeads * t }

// KVCacheBytes is the rollout cache for rows sequences of up to tmax
// positions in dtypeBytes-sized elements: K and V of every layer.
func (c *Config) KVCacheBytes(rows, tmax int64, dtypeBytes int64) int64 {
	return 2 * c.NumHiddenLayers * rows * c.NumKeyValueHeads * tmax * c.HeadDim * dtypeBytes
}

// GenerationBytes estimates the device memory one generation batch holds
// (decode.go): the KV cache of rows sequences of up to tmax positions, with
// rows rounded up to their bucket; per row the decode step's transients
// (logits in the model's dtype and the fp32 distributions the sampler
// filters and draws from, with top-p's sort: V·(dtypeBytes + 48), and one
// layer's hidden, q/k/v and MLP intermediates) — twice with CUDA graphs,
// whose memory pool holds a step's transients beside the eager step's —,
// the decode state (uniforms and records of every new token, the attention
// mask over the cache); and the prefill of prompts distinct prompts of up
// to lmax tokens, one layer at a time (plus the reference attention's fp32
// scores, or SDPA's keys and values repeated per query head).
func (c *Config) GenerationBytes(rows, prompts, lmax, tmax, dtypeBytes int64, sdpa, graphs bool) int64 {
	rows = int64(bucketRows(int(rows)))
	h, i := c.HiddenSize, c.IntermediateSize
	qd, kvd := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	layer := (4*h + qd + 2*kvd + 3*i) * dtypeBytes
	b := c.KVCacheBytes(rows, tmax, dtypeBytes)
	step := rows * (c.VocabSize*(dtypeBytes+48) + layer)
	b += step
	if graphs {
		b += step
	}
	b += rows * ((tmax-lmax)*16 + tmax*dtypeBytes)
	prefill := prompts * lmax * layer
	if sdpa {
		prefill += prompts * lmax * 2 * qd * dtypeBytes
	} else {
		prefill += prompts * c.NumAttentionHeads * lmax * lmax * 4
	}
	return b + prefill
}

// loraDims are the input and output sizes of each LoRA target projection.
func (c *Config) loraDims() map[string][2]int64 {
	h, i := c.HiddenSize, c.IntermediateSize
	qd, kvd := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	return map[string][2]int64{"q_proj": {h, qd}, "k_proj": {h, kvd}, "v_proj": {h, kvd}, "o_proj": {qd, h},
		"gate_proj": {h, i}, "up_proj": {h, i}, "down_proj": {i, h}}
}

// LoRAParamCount is the adapters' parameter count at rank r on targets
// (nil: every projection): r·(in + out) per adapted projection and layer.
func (c *Config) LoRAParamCount(r int64, targets []string) int64 {
	if len(targets) == 0 {
		targets = LoRATargets
	}
	var n int64
	dims := c.loraDims()
	for _, t := range targets {
		d := dims[t]
		n += r * (d[0] + d[1])
	}
	return n * c.NumHiddenLayers
}

// LoRAActivationBytes is what the adapters add to a training forward's kept
// activations per token and layer (model/lora.go): each adapter keeps its
// input for A's gradient — a fp32 copy of it over a 16-bit base
// (dtypeBytes < 4), nothing more over an fp32 one, whose projection keeps it
// already — and x·Aᵀ (r values, fp32) for B's.
func (c *Config) LoRAActivationBytes(r int64, targets []string, dtypeBytes int64) int64 {
	if len(targets) == 0 {
		targets = LoRATargets
	}
	var n int64
	dims := c.loraDims()
	for _, t := range targets {
		if dtypeBytes < 4 {
			n += dims[t][0] * 4
		}
		n += r * 4
	}
	return n
}
