package model

import (
	"math/rand"
	"sort"
	"time"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Qwen25_05BShape is the architecture of Qwen2.5-0.5B (random weights).
func Qwen25_05BShape() *Config {
	return &Config{Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 151936, HiddenSize: 896,
		IntermediateSize: 4864, NumHiddenLayers: 24, NumAttentionHeads: 14, NumKeyValueHeads: 2,
		MaxPositionEmbeddings: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, HiddenAct: "silu"}
}

// Qwen25_7BShape is the architecture of Qwen2.5-7B (random weights), as in
// configs/models/qwen2.5-7b.json.
func Qwen25_7BShape() *Config {
	return &Config{Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 152064, HiddenSize: 3584,
		IntermediateSize: 18944, NumHiddenLayers: 28, NumAttentionHeads: 28, NumKeyValueHeads: 4,
		MaxPositionEmbeddings: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: false, HiddenAct: "silu"}
}

// ForwardBench is one timing of Model.Forward + Logits.
type ForwardBench struct {
	Batch, Seq int64
	Reps       int
	MedianMS   float64
	TokensPerS float64
}

// RandomIDs makes a [batch][seq] matrix of token ids from a seed, shared by
// lanpo's run and the reference run of a benchmark.
func RandomIDs(batch, seq, vocab, seed int64) [][]int64 {
	r := rand.New(rand.NewSource(seed))
	out := make([][]int64, batch)
	for i := range out {
		out[i] = make([]int64, seq)
		for j := range out[i] {
			out[i][j] = r.Int63n(vocab)
		}
	}
	return out
}

// BenchForward times the full forward (hidden states and fp32 logits, as
// transformers' model(input_ids).logits) on ids without padding: one
// warm-up, then the median of reps.
func (m *Model) BenchForward(ids [][]int64, reps int) (r ForwardBench, err error) {
	defer tensor.Recover("bench forward", &err)
	var data tensor.Scope
	defer data.Close()
	l, idsT, posT, maskT := m.leftPad(&data, ids)
	b, t := l.b, l.t
	run := func() error {
		var s tensor.Scope
		defer s.Close()
		h, err := m.Forward(&s, idsT, posT, l.attention(maskT), nil)
		if err != nil {
			return err
		}
		m.Logits(&s, h)
		return csrc.Synchronize()
	}
	if err := run(); err != nil {
		return r, err
	}
	var times []float64
	for i := 0; i < reps; i++ {
		start := time.Now()
		if err := run(); err != nil {
			return r, err
		}
		times = append(times, float64(time.Since(start).Microseconds())/1000)
	}
	sort.Float64s(times)
	r = ForwardBench{Batch: b, Seq: t, Reps: reps, MedianMS: times[len(times)/2]}
	r.TokensPerS = float64(b*t) / (r.MedianMS / 1000)
	return r, nil
}

// GenerateNoCache is the baseline for the rollout engine: the same sampling,
// but every step runs the full forward over prompt + output so far, with no
// KV cache. Only for benchmarks.
func (m *Model) GenerateNoCache(reqs []Request, p SamplingParams) (out []Sample, err error) {
	defer tensor.Recover("generate without cache", &err)
	out, rowPrompt, draws := sampleRows(reqs, nil, p.Seed)
	rows := make([][]int64, len(out))
	for i, r := range rowPrompt {
		rows[i] = append([]int64(nil), reqs[r].PromptIDs...)
	}
	for step := 0; step < p.MaxNewTokens; step++ {
		var s tensor.Scope
		l, ids, pos, mask := m.leftPad(&s, rows)
		n, tmax := l.b, l.t
		h, err := m.Forward(&s, ids, pos, l.attention(mask), nil)
		if err != nil {
			s.Close()
			return nil, err
		}
		last := s.Keep(s.Keep(h.MustNarrow(1, tmax-1, 1, false)).MustSqueezeDim(1, false))
		u := make([]float64, n)
		for i := range u {
			u[i] = draws[i]()
		}
		toks, lps := sampleStep(&s, m.Logits(&s, last), p, u)
		s.Close()
		for i := range rows {
			rows[i] = append(rows[i], toks[i])
			out[i].IDs = append(out[i].IDs, toks[i])
			out[i].Logprobs = append(out[i].Logprobs, lps[i])
		}
	}
	return out, nil
}

// MemoryBenchShape is a small Qwen3-style model (8 layers, H 512, 8/2
// heads of 64, I 1536, V 32000, untied: 57 M parameters) for lanpo bench
// memory: big enough that activations dwarf the allocator's noise, small
// enough for a CPU.
func MemoryBenchShape() *Config {
	return &Config{Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3", VocabSize: 32000, HiddenSize: 512,
		IntermediateSize: 1536, NumHiddenLayers: 8, NumAttentionHeads: 8, NumKeyValueHeads: 2, HeadDim: 64,
		MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: "silu"}
}
