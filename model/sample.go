package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// SamplingParams control generation. The zero value of each filter turns it
// off; Temperature 0 is greedy.
type SamplingParams struct {
	Temperature  float64  // 0: greedy (argmax)
	TopP         float64  // nucleus: keep the smallest set with probability ≥ TopP; 0 or 1: off
	TopK         int64    // keep the K most likely tokens; 0: off
	MinP         float64  // drop tokens with p < MinP · p_max; 0: off
	MaxNewTokens int      // ≥ 1
	MinNewTokens int      // the stop ids cannot be sampled before this many tokens (0: off)
	StopIDs      []int64  // finish when one is sampled (it is kept in the output)
	StopStrings  []string // finish when the decoded output contains one (needs a decoder)
	Seed         uint64
	// Segments, when set, make each sample a structured output: the
	// segments in turn, each its header (fed as given, not sampled) and
	// then up to its MaxTokens sampled tokens. A stop id, one of the
	// segment's Stops or its budget ends a segment and the next header
	// follows in the same decode, so a three-field summary costs one
	// prefill. StopIDs and MinNewTokens apply to each segment; a stop id
	// that ends a segment other than the last is not fed (its position
	// takes the next header's first id). StopStrings must be empty, and
	// MaxNewTokens is set to the segments' total (headers and budgets).
	// Sample.Segments says where each segment's sampled ids lie.
	Segments []Segment
}

// Segment is one part of a structured output (SamplingParams.Segments).
type Segment struct {
	Header []int64 // fed before the segment's sampled tokens; required after the first segment
	// HeaderText is Header as text. When the previous segment ended on a
	// stop string equal to it, the model wrote the header itself and it
	// is not fed again.
	HeaderText string
	MaxTokens  int      // ≥ 1
	Stops      []string // end the segment when its sampled text holds one (needs a decoder)
}

// allStopStrings is every stop string a sample can meet: the request's
// and its segments'.
func (p SamplingParams) allStopStrings() []string {
	all := append([]string(nil), p.StopStrings...)
	for _, g := range p.Segments {
		all = append(all, g.Stops...)
	}
	return all
}

// segmentsBudget is the new tokens a structured output can take.
func segmentsBudget(segs []Segment) int {
	n := 0
	for _, g := range segs {
		n += len(g.Header) + g.MaxTokens
	}
	return n
}

// Validate names the first out-of-range parameter.
func (p SamplingParams) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature):
		return fmt.Errorf("temperature must be ≥ 0, got %g", p.Temperature)
	case p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p must lie in [0, 1], got %g", p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("top_k must be ≥ 0, got %d", p.TopK)
	case p.MinP < 0 || p.MinP >= 1:
		return fmt.Errorf("min_p must lie in [0, 1), got %g", p.MinP)
	case p.MaxNewTokens < 1:
		return fmt.Errorf("max_new_tokens must be ≥ 1, got %d", p.MaxNewTokens)
	case p.MinNewTokens < 0 || p.MinNewTokens > p.MaxNewTokens:
		return fmt.Errorf("min_new_tokens must lie in [0, max_new_tokens %d], got %d", p.MaxNewTokens, p.MinNewTokens)
	case len(p.Segments) > 0 && len(p.StopStrings) > 0:
		return errors.New("stop strings belong to the segments of a structured output")
	}
	for i, g := range p.Segments {
		switch {
		case g.MaxTokens < 1:
			return fmt.Errorf("segment %d: max tokens must be ≥ 1, got %d", i, g.MaxTokens)
		case i > 0 && len(g.Header) == 0:
			return fmt.Errorf("segment %d: a segment after the first needs a header", i)
		}
	}
	return nil
}

// rowRNG is one sequence's random stream. It derives from (seed, prompt,
// sample) only, so a sequence samples the same tokens whatever else is in
// the batch.
func rowRNG(seed uint64, prompt, sample int) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(prompt)<<32|uint64(uint32(sample))))
}

// scaledLogprobs is log_softmax(logits / T) [R, V] (fp32) at the scoring
// temperature (T = 1 when greedy): the distribution whose log-probabilities
// a sample records, the values the trainer recomputes for the PPO ratio.
func scaledLogprobs(s *tensor.Scope, logits *ts.Tensor, temperature float64) *ts.Tensor {
	scaled := logits
	if t := csrc.ScoringTemperature(temperature); t != 1 {
		scaled = s.Keep(logits.MustDivScalar(s.Float(t), false))
	}
	return s.Keep(scaled.MustLogSoftmax(-1, gotch.Float, false))
}

// sampleStep picks one token per row from logits [R, V] (fp32) with the
// uniform u[i] ∈ (0, 1] of each row, through the decode loop's device
// sampler (csrc.Sample: the inverse CDF in fp64, or the argmax when
// greedy), and returns the tokens and their log-probabilities under the
// full distribution at the sampling temperature. Filtering (top-k, min-p,
// top-p) only narrows what can be drawn. For callers outside the decode
// loop (the no-cache baseline, tests); it reads the result back.
func sampleStep(s *tensor.Scope, logits *ts.Tensor, p SamplingParams, u []float64) (tokens []int64, logprobs []float32) {
	r := int64(len(u))
	dev := logits.MustDevice()
	lp := scaledLogprobs(s, logits, p.Temperature)
	a := csrc.SampleArgs{Pick: lp, LP: lp, Greedy: p.Temperature == 0,
		Ctr: tensor.FromSlice(s, []int64{0, 0}, nil, dev), Tok: s.Keep(ts.MustZeros([]int64{r, 1}, gotch.Int64, dev)),
		Pos: s.Keep(ts.MustZeros([]int64{r, 1}, gotch.Int64, dev)), Rec: s.Keep(ts.MustZeros([]int64{r, 1}, gotch.Int64, dev))}
	if !a.Greedy {
		a.Pick = s.Keep(filterLogprobs(s, lp, p, !dev.IsCuda()).MustExp(false))
		a.U = tensor.FromSlice(s, u, []int64{r, 1}, dev)
	}
	if err := csrc.Sample(a); err != nil {
		panic(err)
	}
	for _, rv := range tensor.Int64s(a.Rec) {
		tok, lp := csrc.UnpackRecord(rv)
		tokens, logprobs = append(tokens, tok), append(logprobs, lp)
	}
	return tokens, logprobs
}

// filterLogprobs sets to −Inf every token top-k, min-p or top-p removes.
// hostBranch lets top-p read a value on the host to skip the full sort
// when it can (free on a CPU device, a sync on CUDA).
func filterLogprobs(s *tensor.Scope, lp *ts.Tensor, p SamplingParams, hostBranch bool) *ts.Tensor {
	out := lp
	v := lp.MustSize()[1]
	if p.TopK > 0 && p.TopK < v {
		vals, idx := lp.MustTopk(p.TopK, -1, true, true, false)
		s.Keep(vals)
		s.Keep(idx)
		kth := s.Keep(vals.MustNarrow(1, p.TopK-1, 1, false))
		out = s.Keep(out.MustMaskedFill(s.Keep(lp.MustLtTensor(kth, false)), s.Float(math.Inf(-1)), false))
	}
	if p.MinP > 0 {
		mx, at := lp.MustMaxDim(-1, true, false)
		s.Keep(mx)
		s.Keep(at)
		limit := s.Keep(mx.MustAddScalar(s.Float(math.Log(p.MinP)), false))
		out = s.Keep(out.MustMaskedFill(s.Keep(lp.MustLtTensor(limit, false)), s.Float(math.Inf(-1)), false))
	}
	if p.TopP > 0 && p.TopP < 1 {
		k := v // the full sort
		if hostBranch {
			k = topPCandidates
		}
		out = topP(s, out, p.TopP, k)
	}
	return out
}

// topPCandidates is how many of the most likely tokens top-p looks at
// first. Sorting all 151,936 logits of a row costs ≈ 400 ms a step on CPU
// for 32 rows; when the top candidates already hold more than top_p of the
// mass (usual for a trained model) the nucleus lies among them and a top-k
// selection gives the same mask.
const topPCandidates = 1024

// topP drops, per row, every token once the more likely tokens before it
// hold more than topP of the probability (the most likely token is always
// kept). With k < V it looks at the k most likely tokens first and sorts the
// whole vocabulary only when some row's nucleus is larger than that (which
// it learns on the host); with k ≥ V it sorts at once.
func topP(s *tensor.Scope, lp *ts.Tensor, topP float64, k int64) *ts.Tensor {
	v := lp.MustSize()[1]
	if k < v {
		vals, idx := lp.MustTopk(k, -1, true, true, false)
		s.Keep(vals)
		s.Keep(idx)
		lse := s.Keep(lp.MustLogsumexp([]int64{-1}, true, false))
		probs := s.Keep(s.Keep(s.Keep(vals.MustTotype(gotch.Double, false)).MustSub(s.Keep(lse.MustTotype(gotch.Double, false)), false)).MustExp(false))
		cum := s.Keep(probs.MustCumsum(-1, gotch.Double, false))
		least := tensor.Float64s(s.Keep(s.Keep(cum.MustNarrow(1, k-1, 1, false)).MustMin(false)))[0] // sync
		if least > topP {
			// Every row's nucleus is inside its top k: keep those of its
			// top k that are needed, drop the rest of the vocabulary.
			before := s.Keep(cum.MustSub(probs, false))
			keep := s.Keep(before.MustLe(s.Float(topP), false))
			none := s.Keep(ts.MustZeros(lp.MustSize(), gotch.Bool, lp.MustDevice()))
			keepOrig := s.Keep(none.MustScatter(-1, idx, keep, false))
			return s.Keep(lp.MustMaskedFill(s.Keep(keepOrig.MustLogicalNot(false)), s.Float(math.Inf(-1)), false))
		}
	}
	sorted, order := lp.MustSort(-1, true, false)
	s.Keep(sorted)
	s.Keep(order)
	probs := s.Keep(sorted.MustSoftmax(-1, gotch.Double, false))
	cum := s.Keep(probs.MustCumsum(-1, gotch.Double, false))
	before := s.Keep(cum.MustSub(probs, false))
	drop := s.Keep(before.MustGt(s.Float(topP), false))
	dropOrig := s.Keep(s.Keep(drop.MustZerosLike(false)).MustScatter(-1, order, drop, false))
	return s.Keep(lp.MustMaskedFill(dropOrig, s.Float(math.Inf(-1)), false))
}

var errNeedDecoder = errors.New("stop strings need a decoder (the tokenizer)")
