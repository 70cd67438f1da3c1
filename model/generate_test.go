package model

import (
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

func tinyModel(t *testing.T, name string) *Model { return tinyModelAs(t, name, 0) }

// tinyModelAs loads a tiny test model in dtype (0: its own, fp32).
func tinyModelAs(t *testing.T, name string, dtype gotch.DType) *Model {
	t.Helper()
	m, err := Load(filepath.Join("testdata", "tiny", name), LoadOptions{Device: gotch.CPU, DType: dtype})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

var genPrompts = []Request{
	{PromptIDs: []int64{5, 9, 2, 7, 1, 3}, Samples: 3},
	{PromptIDs: []int64{4}, Samples: 2},
	{PromptIDs: []int64{8, 8, 6}, Samples: 1},
}

// TestGreedyEqualsArgmaxOfFullForward: greedy decoding with the cache picks,
// at every step, the argmax of a full forward over prompt + output so far.
func TestGreedyEqualsArgmaxOfFullForward(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	out, err := m.Generate(genPrompts, SamplingParams{MaxNewTokens: 6}, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, smp := range out {
		seq := append([]int64(nil), genPrompts[smp.Prompt].PromptIDs...)
		for k, tok := range smp.IDs {
			var s tensor.Scope
			n := int64(len(seq))
			pos := make([]int64, n)
			mask := make([]int64, n)
			for i := range pos {
				pos[i], mask[i] = int64(i), 1
			}
			h, err := m.Forward(&s, int64Tensor(&s, [][]int64{seq}), int64Tensor(&s, [][]int64{pos}), int64Tensor(&s, [][]int64{mask}), nil)
			if err != nil {
				t.Fatal(err)
			}
			last := s.Keep(h.MustNarrow(1, n-1, 1, false))
			want := tensor.Int64s(s.Keep(m.Logits(&s, last).MustArgmax([]int64{-1}, false, false)))[0]
			s.Close()
			if tok != want {
				t.Fatalf("prompt %d sample %d step %d: greedy picked %d, full forward argmax %d", smp.Prompt, smp.Index, k, tok, want)
			}
			seq = append(seq, tok)
		}
		if smp.FinishReason != "length" || len(smp.IDs) != 6 {
			t.Errorf("finish %q after %d tokens", smp.FinishReason, len(smp.IDs))
		}
	}
}

// TestSampledLogprobsMatchTrainer: the log-probs recorded while sampling
// equal those the trainer's path (TokenLogProbs through the fused op)
// computes on prompt + output at the same temperature.
func TestSampledLogprobsMatchTrainer(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen2-gqa2-tied")
	for _, p := range []SamplingParams{
		{Temperature: 1, MaxNewTokens: 8, Seed: 1},
		{Temperature: 0.7, TopP: 0.9, TopK: 20, MaxNewTokens: 8, Seed: 2},
		{Temperature: 0, MaxNewTokens: 5},
	} {
		out, err := m.Generate(genPrompts, p, GenerateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		worst := logprobGap(t, m, genPrompts, out, p.Temperature)
		t.Logf("T=%g top_p=%g top_k=%d: max |sampler − trainer| = %.2g", p.Temperature, p.TopP, p.TopK, worst)
		if worst > 1e-5 {
			t.Errorf("T=%g: recorded log-probs differ from the trainer's by %g", p.Temperature, worst)
		}
	}
}

// logprobGap is the largest difference between the log-probs recorded in
// out and those the trainer's path (TokenLogProbs through the fused op)
// computes on prompt + output at temperature temp (0: 1).
func logprobGap(t *testing.T, m *Model, reqs []Request, out []Sample, temp float64) float64 {
	t.Helper()
	if temp == 0 {
		temp = 1
	}
	worst := 0.0
	for _, smp := range out {
		prompt := reqs[smp.Prompt].PromptIDs
		seq := append(append([]int64(nil), prompt...), smp.IDs...)
		n := int64(len(seq))
		pos, mask, targets := make([]int64, n), make([]int64, n), make([]int64, n)
		tmask := make([]bool, n)
		for i := range seq {
			pos[i], mask[i] = int64(i), 1
			if i+1 < len(seq) {
				targets[i] = seq[i+1]
				tmask[i] = i+1 >= len(prompt)
			}
		}
		var s tensor.Scope
		tm := s.Keep(s.Keep(ts.MustOfSlice(tmask)).MustView([]int64{1, n}, false))
		lp, _, err := m.TokenLogProbs(&s, int64Tensor(&s, [][]int64{seq}), int64Tensor(&s, [][]int64{pos}), int64Tensor(&s, [][]int64{mask}),
			int64Tensor(&s, [][]int64{targets}), tm, csrc.LogProbOptions{Temperature: temp})
		if err != nil {
			t.Fatal(err)
		}
		got := tensor.Float64s(lp)
		s.Close()
		for k := range smp.IDs {
			d := got[len(prompt)-1+k] - float64(smp.Logprobs[k])
			worst = max(worst, max(d, -d))
		}
	}
	return worst
}

// TestSamplingDoesNotDependOnBatch: prefix sharing on or off, and a
// request sampled alone or with others, give the same tokens for the same
// seed.
func TestSamplingDoesNotDependOnBatch(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-mha-untied")
	p := SamplingParams{Temperature: 1, MinP: 0.05, MaxNewTokens: 7, Seed: 42}
	key := func(out []Sample) []string {
		var k []string
		for _, s := range out {
			k = append(k, fmt.Sprint(s.Prompt, s.Index, s.IDs))
		}
		return k
	}
	shared, err := m.Generate(genPrompts, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	separate, err := m.Generate(genPrompts, p, GenerateOptions{NoPrefixSharing: true})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := key(shared), key(separate); strings.Join(a, ";") != strings.Join(b, ";") {
		t.Errorf("prefix sharing changed the samples:\n%v\n%v", a, b)
	}
	// Request 2 next to different prompts (other lengths, so other left
	// padding, and other row counts) at the same request index: same tokens.
	other := []Request{{PromptIDs: []int64{1, 2}, Samples: 1}, {PromptIDs: []int64{3, 3, 3, 3, 3, 3, 3}, Samples: 4}, genPrompts[2]}
	mixed, err := m.Generate(other, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(mixed[len(mixed)-1].IDs) != fmt.Sprint(shared[len(shared)-1].IDs) {
		t.Errorf("request 2 sampled %v next to other prompts, %v in the original batch", mixed[len(mixed)-1].IDs, shared[len(shared)-1].IDs)
	}
}

func TestStops(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	greedy, err := m.Generate(genPrompts[:1], SamplingParams{MaxNewTokens: 6}, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := greedy[0].IDs
	// A stop id: the third generated token.
	out, _ := m.Generate(genPrompts[:1], SamplingParams{MaxNewTokens: 6, StopIDs: []int64{ids[2]}}, GenerateOptions{})
	first := 0
	for first < len(ids) && ids[first] != ids[2] {
		first++
	}
	if len(out[0].IDs) != first+1 || out[0].FinishReason != "stop" {
		t.Errorf("stop id %d: got %v (%s), want the first %d tokens of %v", ids[2], out[0].IDs, out[0].FinishReason, first+1, ids)
	}
	// A stop string spanning the 2nd and 3rd tokens' text.
	detok := func() func(int64) string {
		return func(id int64) string { return fmt.Sprintf("<%d>", id) }
	}
	span := fmt.Sprintf("%d><%d", ids[1], ids[2])
	out, _ = m.Generate(genPrompts[:1], SamplingParams{MaxNewTokens: 6, StopStrings: []string{span}}, GenerateOptions{Detokenize: detok})
	if len(out[0].IDs) != 3 || out[0].FinishReason != "stop" {
		t.Errorf("stop string %q: got %v (%s)", span, out[0].IDs, out[0].FinishReason)
	}
	if _, err := m.Generate(genPrompts[:1], SamplingParams{MaxNewTokens: 2, StopStrings: []string{"x"}}, GenerateOptions{}); err == nil {
		t.Error("stop strings without a decoder were accepted")
	}
}

func TestGenerateRejectsBadInput(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	for _, c := range []struct {
		reqs []Request
		p    SamplingParams
		want string
	}{
		{genPrompts, SamplingParams{Temperature: -1, MaxNewTokens: 1}, "temperature"},
		{genPrompts, SamplingParams{TopP: 1.5, MaxNewTokens: 1}, "top_p"},
		{genPrompts, SamplingParams{MinP: 1, MaxNewTokens: 1}, "min_p"},
		{genPrompts, SamplingParams{}, "max_new_tokens"},
		{[]Request{{PromptIDs: nil}}, SamplingParams{MaxNewTokens: 1}, "request 0: no token ids"},
		{[]Request{{PromptIDs: []int64{1}}, {PromptIDs: []int64{1000}}}, SamplingParams{MaxNewTokens: 1}, "request 1: token id 1000"},
		{[]Request{{PromptIDs: make([]int64, 60)}}, SamplingParams{MaxNewTokens: 10}, "exceed max_position_embeddings 64"},
		{genPrompts, SamplingParams{Segments: []Segment{{MaxTokens: 2}, {MaxTokens: 0, Header: []int64{1}}}}, "segment 1: max tokens"},
		{genPrompts, SamplingParams{Segments: []Segment{{MaxTokens: 2}, {MaxTokens: 2}}}, "segment 1: a segment after the first needs a header"},
		{genPrompts, SamplingParams{Segments: []Segment{{MaxTokens: 2}}, StopStrings: []string{"x"}}, "stop strings belong to the segments"},
		{genPrompts, SamplingParams{Segments: []Segment{{MaxTokens: 2, Stops: []string{"x"}}}}, "need a decoder"},
		{[]Request{{PromptIDs: make([]int64, 50)}}, SamplingParams{Segments: []Segment{{MaxTokens: 8}, {Header: []int64{1, 2}, MaxTokens: 5}}}, "max_new_tokens 15 exceed"},
	} {
		if _, err := m.Generate(c.reqs, c.p, GenerateOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}

// TestSamplerFilters draws from a known distribution with each filter and
// checks which tokens can appear and how often.
func TestSamplerFilters(t *testing.T) {
	lockThread(t)
	probs := []float64{0.5, 0.3, 0.15, 0.05}
	const draws = 4000
	for _, c := range []struct {
		name    string
		p       SamplingParams
		allowed []float64 // renormalized probabilities, 0 = must never appear
	}{
		{"plain", SamplingParams{Temperature: 1}, []float64{0.5, 0.3, 0.15, 0.05}},
		{"top-k 2", SamplingParams{Temperature: 1, TopK: 2}, []float64{0.625, 0.375, 0, 0}},
		{"top-p 0.7", SamplingParams{Temperature: 1, TopP: 0.7}, []float64{0.625, 0.375, 0, 0}},
		{"min-p 0.2", SamplingParams{Temperature: 1, MinP: 0.2}, []float64{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s tensor.Scope
			defer s.Close()
			row := make([]float32, 0, draws*len(probs))
			for i := 0; i < draws; i++ {
				for _, p := range probs {
					row = append(row, float32(math.Log(p)))
				}
			}
			logits := s.Keep(s.Keep(ts.MustOfSlice(row)).MustView([]int64{draws, int64(len(probs))}, false))
			g := rowRNG(7, 0, 0)
			u := make([]float64, draws)
			for i := range u {
				u[i] = 1 - g.Float64()
			}
			toks, lps := sampleStep(&s, logits, c.p, u)
			counts := make([]float64, len(probs))
			for i, tok := range toks {
				counts[tok]++
				if d := math.Abs(float64(lps[i]) - math.Log(probs[tok])); d > 1e-6 {
					t.Fatalf("recorded log-prob %g for token %d, want the unfiltered %g", lps[i], tok, math.Log(probs[tok]))
				}
			}
			for k, want := range c.allowed {
				got := counts[k] / draws
				if want == 0 {
					if counts[k] != 0 {
						t.Errorf("token %d drawn %v times; the filter removes it", k, counts[k])
					}
					continue
				}
				sigma := math.Sqrt(want * (1 - want) / draws)
				if math.Abs(got-want) > 4*sigma {
					t.Errorf("token %d: frequency %.3f, want %.3f ± %.3f", k, got, want, 4*sigma)
				}
			}
		})
	}
}

// Dropping finished rows from the batch (compaction) changes neither the
// samples nor their log-probs, and finished samples end at their stop.
func TestCompactionKeepsSamples(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen2-gqa2-tied")
	reqs := []Request{{PromptIDs: []int64{5, 9, 2}, Samples: 6}, {PromptIDs: []int64{4}, Samples: 5}, {PromptIDs: []int64{8, 8, 6, 1, 7}, Samples: 5}}
	// Stop at a handful of ids so that rows finish at many different steps.
	p := SamplingParams{Temperature: 1, MaxNewTokens: 24, Seed: 11, StopIDs: []int64{1, 2, 3, 4, 5, 6}}
	compact, err := m.Generate(reqs, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := m.Generate(reqs, p, GenerateOptions{NoCompaction: true})
	if err != nil {
		t.Fatal(err)
	}
	lengths := map[int]bool{}
	stopped := 0
	for i := range full {
		a, b := compact[i], full[i]
		if fmt.Sprint(a.IDs) != fmt.Sprint(b.IDs) || a.FinishReason != b.FinishReason {
			t.Fatalf("sample %d: compacted %v (%s), full batch %v (%s)", i, a.IDs, a.FinishReason, b.IDs, b.FinishReason)
		}
		for j := range a.Logprobs {
			if d := math.Abs(float64(a.Logprobs[j] - b.Logprobs[j])); d > 1e-5 {
				t.Fatalf("sample %d token %d: logprob differs by %g", i, j, d)
			}
		}
		lengths[len(a.IDs)] = true
		if a.FinishReason == "stop" {
			stopped++
		}
	}
	if len(lengths) < 4 || stopped < len(full)/2 {
		t.Fatalf("the test needs rows finishing at different steps: lengths %v, %d stopped", lengths, stopped)
	}
}

// The top-k-first top-p gives the mask of the full sort, both when every
// nucleus fits in the candidates and when it falls back to sorting.
func TestTopPCandidatesMatchFullSort(t *testing.T) {
	lockThread(t)
	var s tensor.Scope
	defer s.Close()
	csrc.ManualSeed(3)
	for _, c := range []struct {
		scale float64
		k     int64
	}{{8, 16}, {8, 4}, {0.5, 16}} {
		lp := s.Keep(s.Keep(s.Keep(ts.MustRandn([]int64{6, 300}, gotch.Float, gotch.CPU)).MustMulScalar(s.Float(c.scale), false)).MustLogSoftmax(-1, gotch.Float, false))
		for _, p := range []float64{0.3, 0.8, 0.95} {
			fast := topP(&s, lp, p, c.k)
			full := topP(&s, lp, p, 300)
			a := tensor.Float64s(s.Keep(fast.MustIsinf(false).MustTotype(gotch.Double, true)))
			b := tensor.Float64s(s.Keep(full.MustIsinf(false).MustTotype(gotch.Double, true)))
			kept := 0
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("scale %g k %d top_p %g: masks differ at %d", c.scale, c.k, p, i)
				}
				if a[i] == 0 {
					kept++
				}
			}
			if kept < 6 || kept == len(a) {
				t.Fatalf("scale %g top_p %g: %d tokens kept, the case tests nothing", c.scale, p, kept)
			}
		}
	}
}

// BenchmarkTopP times top-p on 32 rows of a 151,936-token vocabulary with a
// peaked (trained-model-like) distribution: the full sort, then the
// top-k-first path, in the same run; it reports the speed-up.
func BenchmarkTopP(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var s tensor.Scope
	defer s.Close()
	csrc.ManualSeed(1)
	// Logits N(0, 10²): entropy ≈ 0.86 nats a row, top-1024 mass > 0.9999
	// (N(0, 4²) would give 4.9 nats and 0.90, and fall back to the sort).
	lp := s.Keep(s.Keep(s.Keep(ts.MustRandn([]int64{32, 151936}, gotch.Float, gotch.CPU)).MustMulScalar(s.Float(10), false)).MustLogSoftmax(-1, gotch.Float, false))
	run := func(k int64) time.Duration {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			var st tensor.Scope
			topP(&st, lp, 0.95, k)
			st.Close()
		}
		return time.Since(start)
	}
	full := run(151936)
	fast := run(topPCandidates)
	b.ReportMetric(float64(full.Microseconds())/float64(b.N)/1000, "ms/full-sort")
	b.ReportMetric(float64(fast.Microseconds())/float64(b.N)/1000, "ms/top-k-first")
	b.ReportMetric(float64(full)/float64(fast), "speedup")
}

// NextTokenLogProbs equals the last value Score gives for the prompt with
// the token appended, whatever the batch split; MeanHidden equals the mean
// of an unpadded forward's hidden states.
func TestNextTokenLogProbsAndMeanHidden(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen2-gqa2-tied")
	prompts := [][]int64{{5, 9, 13}, {7}, {2, 4, 6, 8, 10, 12}}
	tokens := []int64{1, 17, 42}
	all, err := m.NextTokenLogProbs(prompts, tokens, 8)
	if err != nil {
		t.Fatal(err)
	}
	one, err := m.NextTokenLogProbs(prompts, tokens, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		for j, tok := range tokens {
			sc, err := m.Score([][]int64{append(append([]int64(nil), p...), tok)})
			if err != nil {
				t.Fatal(err)
			}
			want := float64(sc[0][len(p)-1])
			if math.Abs(all[i][j]-want) > 1e-5 || math.Abs(one[i][j]-all[i][j]) > 1e-5 {
				t.Fatalf("prompt %d token %d: %v (batched), %v (alone), Score %v", i, tok, all[i][j], one[i][j], want)
			}
		}
	}
	emb, err := m.MeanHidden(prompts, 8)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		var s tensor.Scope
		h, err := m.Forward(&s, int64Tensor(&s, [][]int64{p}), int64Tensor(&s, [][]int64{seqPositions(len(p))}), int64Tensor(&s, [][]int64{ones(len(p))}), nil)
		if err != nil {
			t.Fatal(err)
		}
		vals := tensor.Float64s(h)
		hs := int(m.Config.HiddenSize)
		for j := 0; j < hs; j++ {
			var mean float64
			for k := range p {
				mean += vals[k*hs+j]
			}
			mean /= float64(len(p))
			if math.Abs(mean-float64(emb[i][j])) > 1e-5 {
				t.Fatalf("prompt %d dim %d: %v, want %v", i, j, emb[i][j], mean)
			}
		}
		s.Close()
	}
}

func seqPositions(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

func ones(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// MinNewTokens keeps the stop ids from being sampled early: with the greedy
// first token of every prompt made a stop id, plain decoding stops at once
// and decoding with MinNewTokens 3 runs at least 3 tokens, none of the
// first 3 a stop id.
func TestMinNewTokens(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	first, err := m.Generate(genPrompts, SamplingParams{MaxNewTokens: 1}, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var stops []int64
	for _, s := range first {
		stops = append(stops, s.IDs[0])
	}
	for _, temp := range []float64{0, 1} {
		plain, err := m.Generate(genPrompts, SamplingParams{MaxNewTokens: 6, StopIDs: stops, Temperature: temp, Seed: 3}, GenerateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held, err := m.Generate(genPrompts, SamplingParams{MaxNewTokens: 6, MinNewTokens: 3, StopIDs: stops, Temperature: temp, Seed: 3}, GenerateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		short := 0
		for i, s := range held {
			if len(plain[i].IDs) == 1 {
				short++
			}
			if len(s.IDs) < 3 || slices.Contains(stops, s.IDs[0]) || slices.Contains(stops, s.IDs[1]) || slices.Contains(stops, s.IDs[2]) {
				t.Fatalf("temperature %g, row %d: %v (stops %v)", temp, i, s.IDs, stops)
			}
		}
		if temp == 0 && short != len(plain) {
			t.Fatalf("greedy without MinNewTokens stopped at once on %d of %d rows: the test shows nothing", short, len(plain))
		}
	}
	if err := (SamplingParams{MaxNewTokens: 2, MinNewTokens: 3}).Validate(); err == nil {
		t.Fatal("min_new_tokens > max_new_tokens accepted")
	}
}

// MaxRows with ConsecutiveBatches splits the requests, whole, into batches
// that each give what they give alone: the same samples as one batch
// (tokens), request and sample indices in the caller's numbering, and an
// error naming the request whose group cannot fit. (Without it, MaxRows
// runs the slots engine: slots_test.go.)
func TestGenerateMaxRows(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-mha-untied")
	p := SamplingParams{Temperature: 1, MaxNewTokens: 6, Seed: 7}
	key := func(out []Sample) string {
		var k []string
		for _, s := range out {
			k = append(k, fmt.Sprint(s.Prompt, s.Index, s.IDs, s.FinishReason))
		}
		return strings.Join(k, ";")
	}
	whole, err := m.Generate(genPrompts, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{3, 4, 5, 6} {
		split, err := m.Generate(genPrompts, p, GenerateOptions{MaxRows: rows, ConsecutiveBatches: true})
		if err != nil {
			t.Fatalf("MaxRows %d: %v", rows, err)
		}
		if key(split) != key(whole) {
			t.Errorf("MaxRows %d:\n%s\nwhole batch:\n%s", rows, key(split), key(whole))
		}
	}
	// The second batch's requests keep their streams: the same as asking
	// for them alone at their indices.
	tail, err := m.GenerateAt(genPrompts[1:], []int{1, 2}, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if split, _ := m.Generate(genPrompts, p, GenerateOptions{MaxRows: 3, ConsecutiveBatches: true}); fmt.Sprint(split[3].IDs, split[5].IDs) != fmt.Sprint(tail[0].IDs, tail[2].IDs) {
		t.Errorf("batch 2 sampled %v %v, alone %v %v", split[3].IDs, split[5].IDs, tail[0].IDs, tail[2].IDs)
	}
	if _, err := m.Generate(genPrompts, p, GenerateOptions{MaxRows: 2, ConsecutiveBatches: true}); err == nil || !strings.Contains(err.Error(), "request 0: its 3 samples") {
		t.Errorf("a group of 3 under MaxRows 2: %v", err)
	}
}

// The CUDA memory cap's arithmetic: everything fits in a large budget;
// a budget for about two groups' rows gives that many rows (a whole
// number of groups or more); one group that cannot fit is an error that
// says what it needs and what there is.
func TestGenerationRowsThatFit(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-mha-untied")
	reqs := []Request{{PromptIDs: make([]int64, 10), Samples: 4}, {PromptIDs: make([]int64, 10), Samples: 4}, {PromptIDs: make([]int64, 10), Samples: 4}}
	dt := int64(m.DType.Size())
	group := m.Config.GenerationBytes(4, 1, 10, 30, dt, m.useSDPA, false)
	const gib = 1 << 30
	big := csrc.CUDAMemInfo{Free: 70 * gib, Total: 80 * gib, Allocated: 10 * gib, Reserved: 10 * gib}
	if rows, err := m.fitRows(big, reqs, 10, 20, 0.9, false); err != nil || rows != 12 {
		t.Errorf("large budget: %d rows, %v; want all 12", rows, err)
	}
	two := csrc.CUDAMemInfo{Free: 2*group + group/2, Total: 100 * gib, Allocated: gib, Reserved: gib}
	if rows, err := m.fitRows(two, reqs, 10, 20, 0.9, false); err != nil || rows < 8 || rows >= 12 {
		t.Errorf("budget for 2.5 groups: %d rows, %v; want 8 to 11", rows, err)
	}
	// The fraction binds before the driver's free memory.
	frac := csrc.CUDAMemInfo{Free: 80 * gib, Total: 2*group + gib, Allocated: gib, Reserved: gib}
	if rows, err := m.fitRows(frac, reqs, 10, 20, 1, false); err != nil || rows < 8 || rows >= 12 {
		t.Errorf("fraction-bound budget: %d rows, %v; want 8 to 11", rows, err)
	}
	small := csrc.CUDAMemInfo{Free: group / 2, Total: 80 * gib, Allocated: 79 * gib, Reserved: 79 * gib}
	if _, err := m.fitRows(small, reqs, 10, 20, 0.9, false); err == nil || !strings.Contains(err.Error(), "one prompt's 4 samples of up to 30 tokens need") ||
		!strings.Contains(err.Error(), "rollout.gpu_memory_fraction") {
		t.Errorf("a group that cannot fit: %v", err)
	}
}

// Decode timing changes nothing sampled, and records one entry per decode
// step (every token but the first, which the prefill gives), with the host
// times filled in (and no GPU time on the CPU).
func TestDecodeTimingLeavesSamplesAlone(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-mha-untied")
	p := SamplingParams{Temperature: 1, MaxNewTokens: 6, Seed: 7}
	plain, err := m.Generate(genPrompts, p, GenerateOptions{NoCompaction: true})
	if err != nil {
		t.Fatal(err)
	}
	var timing DecodeTiming
	timed, err := m.Generate(genPrompts, p, GenerateOptions{NoCompaction: true, Timing: &timing})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(timed) != fmt.Sprint(plain) {
		t.Errorf("timing changed the samples:\n%v\n%v", timed, plain)
	}
	rows := totalRows(genPrompts)
	if len(timing.Steps) != p.MaxNewTokens-1 {
		t.Fatalf("%d steps timed, want %d", len(timing.Steps), p.MaxNewTokens-1)
	}
	for i, s := range timing.Steps {
		if s.Rows != rows || s.WallMS <= 0 || s.LookMS < 0 || s.ForwardHostMS <= 0 || s.ForwardGPUMS != 0 ||
			s.LookMS+s.ForwardHostMS > s.WallMS+0.01 {
			t.Errorf("step %d: %+v", i, s)
		}
	}
}
