package csrc

import (
	"math"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// TestGotchAutograd checks the prepared gotch end to end: matmul →
// log_softmax → gather → backward, with the gradient compared against the
// closed form computed in plain Go: d(−Σ log p[target])/dX = (softmax(XW) − onehot)·Wᵀ.
func TestGotchAutograd(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	r := rand.New(rand.NewSource(1))
	const n, h, v = 4, 3, 5
	xv, wv := randVals(r, n*h), randVals(r, h*v)
	targets := []int64{0, 4, 2, 2}

	x := tensorOf(t, s, xv, []int64{n, h}, gotch.Double, true)
	w := tensorOf(t, s, wv, []int64{h, v}, gotch.Double, false)
	logits := s.Keep(x.MustMatmul(w, false))
	logp := s.Keep(logits.MustLogSoftmax(-1, gotch.Double, false))
	idx := s.Keep(ts.MustOfSlice(targets).MustView([]int64{n, 1}, true))
	picked := s.Keep(logp.MustGather(1, idx, false, false))
	loss := s.Keep(picked.MustSum(gotch.Double, false).MustNeg(true))
	loss.MustBackward()
	grad := tensor.Float64s(s.Keep(x.MustGrad(false)))

	want := make([]float64, n*h)
	wantLoss := 0.0
	for i := 0; i < n; i++ {
		z := make([]float64, v)
		zmax := math.Inf(-1)
		for j := 0; j < v; j++ {
			for k := 0; k < h; k++ {
				z[j] += xv[i*h+k] * wv[k*v+j]
			}
			zmax = math.Max(zmax, z[j])
		}
		sum := 0.0
		for j := range z {
			sum += math.Exp(z[j] - zmax)
		}
		wantLoss -= z[targets[i]] - zmax - math.Log(sum)
		for j := 0; j < v; j++ {
			dz := math.Exp(z[j]-zmax) / sum
			if int64(j) == targets[i] {
				dz--
			}
			for k := 0; k < h; k++ {
				want[i*h+k] += dz * wv[k*v+j]
			}
		}
	}
	if d := math.Abs(tensor.Float64s(loss)[0] - wantLoss); d > 1e-12 {
		t.Errorf("loss differs from the closed form by %g", d)
	}
	if d := tensor.MaxAbsDiff(grad, want); d > 1e-12 {
		t.Errorf("dX differs from the closed form by %g\n got %v\nwant %v", d, grad, want)
	}
}

// TestMustPanicsInsteadOfExiting checks the prepared gotch's Must* helpers
// panic (recoverable at a step boundary) where upstream calls log.Fatal.
func TestMustPanicsInsteadOfExiting(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	a := s.Keep(ts.MustOnes([]int64{2, 3}, gotch.Float, gotch.CPU))
	b := s.Keep(ts.MustOnes([]int64{4, 5}, gotch.Float, gotch.CPU))
	defer func() {
		if recover() == nil {
			t.Fatal("MustMatmul on mismatched shapes did not panic")
		}
	}()
	a.MustMatmul(b, false)
}

// TestTinyOpsKeepRSSFlat runs 10^6 tiny generated ops. Upstream gotch leaks
// a malloc(0) chunk (≥ 32 bytes) per op, ≥ 32 MB here; the prepared copy
// must keep RSS and the live-tensor count flat.
func TestTinyOpsKeepRSSFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("10^6 ops take a few seconds; skipped with -short")
	}
	lockThread(t)
	s := newScope(t)
	a := s.Keep(ts.MustOnes([]int64{1}, gotch.Float, gotch.CPU))
	b := s.Keep(ts.MustOnes([]int64{1}, gotch.Float, gotch.CPU))
	step := func(n int) {
		for i := 0; i < n; i++ {
			c := a.MustAdd(b, false)
			mx, idx := c.MustMaxDim(0, false, true) // a two-output op, too
			mx.MustDrop()
			idx.MustDrop()
		}
	}
	liveBefore := len(ts.ExistingTensors)
	step(100_000) // warm up allocator pools and the Go heap
	runtime.GC()
	before := rssBytes(t)
	step(900_000)
	runtime.GC()
	after := rssBytes(t)
	growth := after - before
	t.Logf("RSS %d MB → %d MB over 900k iterations (2.7M tensors): %+d KB", before>>20, after>>20, growth>>10)
	if growth > 8<<20 {
		t.Errorf("RSS grew by %d KB over 900k tiny ops: leak", growth>>10)
	}
	if live := len(ts.ExistingTensors); live != liveBefore {
		t.Errorf("live tensors %d before, %d after", liveBefore, live)
	}
}

// TestStubbedOpsFailByName checks SDPA, which the model uses: against
// libtorch 2.1 it runs; against a libtorch where its generated binding did
// not compile (1.13) the prepared stub returns an error naming the op.
func TestStubbedOpsFailByName(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	q := s.Keep(ts.MustOnes([]int64{1, 1, 2, 4}, gotch.Float, gotch.CPU))
	// gotch passes an undefined tensor for "no mask", which libtorch 2.1's
	// SDPA rejects as a mask of dtype "nullptr"; pass an all-true mask.
	mask := s.Keep(ts.MustOnes([]int64{1, 1, 2, 2}, gotch.Bool, gotch.CPU))
	out, err := ts.ScaledDotProductAttention(q, q, q, mask, 0, false, nil)
	if slices.Contains(libtch.LanpoUnavailableOps, "atg_scaled_dot_product_attention") {
		if err == nil {
			out.MustDrop()
			t.Fatal("stubbed SDPA returned no error")
		}
		for _, want := range []string{"atg_scaled_dot_product_attention", "not available", libtch.LanpoLibtorchVersion} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("SDPA on libtorch %s: %v", libtch.LanpoLibtorchVersion, err)
	}
	s.Keep(out)
	// q = k = v = 1: uniform attention over ones gives ones.
	if got := tensor.Float64s(out); len(got) != 8 || tensor.MaxAbsDiff(got, []float64{1, 1, 1, 1, 1, 1, 1, 1}) > 1e-6 {
		t.Errorf("SDPA(ones) = %v", got)
	}
}

// TestGotchErrorsAreOneMessage: the prepared gotch reports what libtorch
// said, without the C++ backtrace or the Go stack upstream appends.
func TestGotchErrorsAreOneMessage(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	a := s.Keep(ts.MustOnes([]int64{2, 3}, gotch.Float, gotch.CPU))
	b := s.Keep(ts.MustOnes([]int64{4, 5}, gotch.Float, gotch.CPU))
	c, err := a.Matmul(b, false)
	if err == nil {
		c.MustDrop()
		t.Fatal("Matmul on mismatched shapes returned no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "libtorch: ") || !strings.Contains(msg, "2x3 and 4x5") {
		t.Errorf("error does not carry libtorch's message: %q", msg)
	}
	for _, noise := range []string{"Exception raised from", "frame #", "goroutine ", "\n"} {
		if strings.Contains(strings.TrimSpace(msg), noise) {
			t.Errorf("error contains %q: %q", noise, msg)
		}
	}
}

// TestInPlaceOpsFreeStorage: upstream gotch's in-place ops swap in a new
// handle and leak the old one, which keeps the storage alive after the
// tensor is dropped (4 MB per iteration here, 400 MB in all).
func TestInPlaceOpsFreeStorage(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	x := s.Keep(ts.MustOnes([]int64{1 << 20}, gotch.Float, gotch.CPU))
	two := s.Float(2)
	step := func() {
		y := x.MustMulScalar(two, false)
		y.MustAdd_(x)
		y.MustZero_()
		y.MustDrop()
	}
	for i := 0; i < 10; i++ { // let the allocator settle
		step()
	}
	runtime.GC()
	before := rssBytes(t)
	for i := 0; i < 100; i++ {
		step()
	}
	runtime.GC()
	growth := rssBytes(t) - before
	t.Logf("RSS growth over 100 × (4 MB tensor, 2 in-place ops): %d KB", growth>>10)
	if growth > 40<<20 {
		t.Errorf("RSS grew by %d MB: in-place ops leak their tensors' storage", growth>>20)
	}
}
