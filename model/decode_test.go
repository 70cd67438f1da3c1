package model

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
)

// compactionReqs stop at a handful of ids, so rows finish at many different
// steps (some between two looks of the host).
var compactionReqs = []Request{{PromptIDs: []int64{5, 9, 2}, Samples: 6}, {PromptIDs: []int64{4}, Samples: 5}, {PromptIDs: []int64{8, 8, 6, 1, 7}, Samples: 5}}

func sameSamples(t *testing.T, what string, a, b []Sample) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d samples, want %d", what, len(a), len(b))
	}
	for i := range a {
		if !slices.Equal(a[i].IDs, b[i].IDs) || !slices.Equal(a[i].Logprobs, b[i].Logprobs) || a[i].FinishReason != b[i].FinishReason ||
			fmt.Sprint(a[i].Segments) != fmt.Sprint(b[i].Segments) {
			t.Fatalf("%s: sample %d is %v %v (%s), want %v %v (%s)", what, i, a[i].IDs, a[i].Logprobs, a[i].FinishReason, b[i].IDs, b[i].Logprobs, b[i].FinishReason)
		}
	}
}

// TestSyncEveryLeavesSamplesAlone: how often the host looks at the sampled
// tokens (up to every 16 steps) changes nothing sampled, bit for bit — rows
// that stop between two looks drop what they drew after their stop id or
// stop string, and finished rows leave the batch at the same steps. Looking
// less often than that delays compaction: the same tokens, log-probs equal
// to float32 rounding (other batch shapes).
func TestSyncEveryLeavesSamplesAlone(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen2-gqa2-tied")
	detok := func() func(int64) string { return func(id int64) string { return fmt.Sprintf("<%d>", id) } }
	for _, p := range []SamplingParams{
		{Temperature: 1, MaxNewTokens: 24, Seed: 11, StopIDs: []int64{1, 2, 3, 4, 5, 6}},
		{Temperature: 1, MaxNewTokens: 20, Seed: 12, StopStrings: []string{"<7>", "9><1"}, MinNewTokens: 2, StopIDs: []int64{3}},
	} {
		base, err := m.Generate(compactionReqs, p, GenerateOptions{SyncEvery: 1, Detokenize: detok})
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, s := range base {
			if s.FinishReason == "stop" {
				stopped++
			}
		}
		if stopped < len(base)/3 {
			t.Fatalf("only %d of %d samples stopped: the case tests little", stopped, len(base))
		}
		for _, n := range []int{2, 5, 16, 40} {
			out, err := m.Generate(compactionReqs, p, GenerateOptions{SyncEvery: n, Detokenize: detok})
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("stops %v %q, SyncEvery %d", p.StopIDs, p.StopStrings, n)
			if n <= 16 {
				sameSamples(t, what, out, base)
				continue
			}
			for i := range out {
				if !slices.Equal(out[i].IDs, base[i].IDs) || out[i].FinishReason != base[i].FinishReason {
					t.Fatalf("%s: sample %d is %v (%s), want %v (%s)", what, i, out[i].IDs, out[i].FinishReason, base[i].IDs, base[i].FinishReason)
				}
				for j := range out[i].Logprobs {
					if d := math.Abs(float64(out[i].Logprobs[j] - base[i].Logprobs[j])); d > 1e-5 {
						t.Errorf("%s: sample %d token %d: log-prob off by %g", what, i, j, d)
					}
				}
			}
		}
	}
}

// TestDecodeSyncsPerToken: between two looks a decode step neither waits
// for the device nor uploads from pageable memory: the host syncs once per
// SyncEvery steps (and at the last step).
func TestDecodeSyncsPerToken(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	p := SamplingParams{Temperature: 0.8, TopK: 20, MaxNewTokens: 57, Seed: 3} // the tiny model has 64 positions
	for _, every := range []int{16, 4} {
		var c DecodeCounts
		if _, err := m.Generate(genPrompts, p, GenerateOptions{SyncEvery: every, Counts: &c}); err != nil {
			t.Fatal(err)
		}
		syncs := c.Transfers.Syncs() + c.Ops.Syncs
		want := int64(c.Steps/every + 1)
		t.Logf("SyncEvery %d: %d steps, %d syncs (%d downloads, %d uploads, %d async uploads, %d sync ops)", every, c.Steps, syncs,
			c.Transfers.Downloads, c.Transfers.Uploads, c.Transfers.AsyncUploads, c.Ops.Syncs)
		if c.Steps != p.MaxNewTokens-1 || syncs > want {
			t.Errorf("SyncEvery %d: %d syncs in %d steps, want at most %d", every, syncs, c.Steps, want)
		}
	}
}

// TestDecodeKernelsPerLayer counts one decode step's kernels per layer on
// the path a CUDA run takes (SDPA), as lanpo bench generate does: a
// 2-layer minus a 1-layer model of a Qwen2.5-style config (q/k/v biases,
// grouped queries). The layer is seven matrix products (q/k/v with their
// biases as addmm: on CPU each copies its bias into the output first, on
// CUDA a cuBLASLt epilogue does it), two norms with their residual adds,
// RoPE with the cache write, SwiGLU — eleven kernels, fourteen on CPU — and
// the attention: one kernel where libtorch's SDPA has a fused CPU kernel for
// a masked decode query (2.11), its math fallback's few otherwise (2.1).
func TestDecodeKernelsPerLayer(t *testing.T) {
	lockThread(t)
	base := tinyModel(t, "qwen2-gqa2-tied").Config
	count := func(layers int64) DecodeCounts {
		cfg := *base
		cfg.NumHiddenLayers = layers
		m, err := NewRandom(&cfg, LoadOptions{Device: gotch.CPU}, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := m.SetAttention(AttentionSDPA); err != nil {
			t.Fatal(err)
		}
		var c DecodeCounts
		if _, err := m.Generate(genPrompts, SamplingParams{Temperature: 1, MaxNewTokens: 5, Seed: 1}, GenerateOptions{Counts: &c}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	one, two := count(1), count(2)
	layer := two.Ops.Sub(one.Ops)
	steps := int64(one.Steps)
	t.Logf("per layer and step: %s", layer)
	// copy_ is addmm's bias copy on CPU (one per bias); any more belong to
	// the attention (2.1's math fallback copies too).
	fixed := map[string]int64{"aten::mm": 4, "aten::addmm": 3, "aten::copy_": 3, "lanpo::add_rms_norm": 2, "lanpo::rope_cache": 1, "lanpo::swiglu": 1}
	var attn int64
	for name, n := range layer.ByName {
		want, ok := fixed[name]
		switch {
		case !ok:
			attn += n
		case name == "aten::copy_" && n > want*steps:
			attn += n - want*steps
		case n != want*steps:
			t.Errorf("%s: %d per layer and step, want %d", name, n/steps, want)
		}
	}
	if layer.ByName["aten::mm"] == 0 || layer.ByName["lanpo::rope_cache"] == 0 {
		t.Fatalf("the count missed the layer's kernels: %v", layer.ByName)
	}
	info, err := csrc.BuildInfo()
	if err != nil {
		t.Fatal(err)
	}
	if csrc.SDPAGQA() && attn != steps {
		t.Errorf("libtorch %s: attention took %d kernels per step, want SDPA's one", info.TorchVersion, attn/steps)
	}
	if got := layer.Kernels / steps; csrc.SDPAGQA() && got > 15 {
		t.Errorf("libtorch %s: %d kernels per layer, the target is at most 15", info.TorchVersion, got)
	}
}

// TestStepGraphsBookkeeping: with CUDA graphs on, a CPU run keeps the books
// a GPU run keeps — per distinct step (batch bucket, attention window,
// barred stops) a warm-up, then a capture, then replays, and all of it
// afresh after each compaction — while every step still runs eagerly, so
// the samples are those without graphs.
func TestStepGraphsBookkeeping(t *testing.T) {
	lockThread(t)
	cfg := *tinyModel(t, "qwen2-gqa2-tied").Config
	cfg.MaxPositionEmbeddings = 512 // room for several attention windows
	m, err := NewRandom(&cfg, LoadOptions{Device: gotch.CPU}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := SamplingParams{Temperature: 1, MaxNewTokens: 300, Seed: 5, StopIDs: []int64{1, 2}, MinNewTokens: 3}
	plain, err := m.Generate(compactionReqs, p, GenerateOptions{SyncEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	var stats GraphStats
	graphed, err := m.Generate(compactionReqs, p, GenerateOptions{SyncEvery: 4, CUDAGraphs: true, GraphStats: &stats})
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "CUDA graphs on (bookkeeping on the CPU)", graphed, plain)
	type key struct {
		rows   int
		window int64
		held   bool
	}
	seen := map[key]int{}
	epochs := 1
	for i, st := range stats.Steps {
		k := key{st.Rows, st.Window, st.Held}
		if slices.Contains(stats.Resets, i) {
			epochs++ // a compaction: new buffers, the graphs start over
			clear(seen)
		}
		if want := []string{"warm-up", "capture", "replay"}[min(seen[k], 2)]; st.Event != want {
			t.Errorf("step %d %+v: %s, want %s", i, st, st.Event, want)
		}
		seen[k]++
	}
	warm, captures, replays := stats.Count("warm-up"), stats.Count("capture"), stats.Count("replay")
	t.Logf("%d steps: %d warm-ups, %d captures, %d replays, %d sets of buffers", len(stats.Steps), warm, captures, replays, epochs)
	if warm+captures+replays != len(stats.Steps) || replays < captures || captures == 0 || epochs < 2 {
		t.Errorf("%d steps: %d warm-ups, %d captures, %d replays, %d sets of buffers: want mostly replays and a compaction",
			len(stats.Steps), warm, captures, replays, epochs)
	}
	held := 0
	for _, k := range stats.Steps {
		if k.Held {
			held++
		}
		if k.Window%windowStep != 0 || k.Rows != bucketRows(k.Rows) {
			t.Errorf("step %+v: the window is not a multiple of %d or the rows not a bucket", k, windowStep)
		}
	}
	if held != p.MinNewTokens-1 {
		t.Errorf("%d steps barred the stop ids, want %d (MinNewTokens %d, the first token from the prefill)", held, p.MinNewTokens-1, p.MinNewTokens)
	}
}

// TestBucketRows: powers of two up to 8, multiples of 8 above.
func TestBucketRows(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 5: 8, 8: 8, 9: 16, 16: 16, 17: 24, 100: 104} {
		if got := bucketRows(n); got != want {
			t.Errorf("bucketRows(%d) = %d, want %d", n, got, want)
		}
	}
}
