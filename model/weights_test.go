package model

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

func paramValues(m *Model) []float64 {
	var out []float64
	for _, p := range m.Params() {
		out = append(out, tensor.Float64s(p.Tensor)...)
	}
	return out
}

// TestWeightsFileAndEMA: EMAFrom moves every parameter a rate of the way
// to the source's (1: a copy); SaveWeights then LoadWeights restore the
// values exactly into another model; Clone copies them into storage of
// its own; a file of another architecture is
// refused with its path and the differing tensors named.
func TestWeightsFileAndEMA(t *testing.T) {
	lockThread(t)
	a, b := tinyModel(t, "qwen3-gqa3"), tinyModel(t, "qwen3-gqa3")
	va := paramValues(a)
	// b: a's values moved to 2a (so the EMA's target differs from b).
	var sc tensor.Scope
	defer sc.Close()
	for _, p := range b.Params() {
		p.Tensor.MustMulScalar_(sc.Float(2))
	}
	vb := paramValues(b)
	if err := a.EMAFrom(b, 0.25); err != nil {
		t.Fatal(err)
	}
	for i, x := range paramValues(a) {
		if want := va[i] + 0.25*(vb[i]-va[i]); math.Abs(x-want) > 1e-6*(1+math.Abs(want)) {
			t.Fatalf("entry %d: %v, want %v", i, x, want)
		}
	}
	path := filepath.Join(t.TempDir(), "teacher.safetensors")
	if err := a.SaveWeights(path); err != nil {
		t.Fatal(err)
	}
	if err := b.LoadWeights(path); err != nil {
		t.Fatal(err)
	}
	want, got := paramValues(a), paramValues(b)
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("entry %d after the round trip: %v, want %v", i, got[i], want[i])
		}
	}
	// Clone: the same values, storage of its own, no grad (the source's
	// parameters require it, as a policy's do).
	for _, p := range a.Params() {
		p.Tensor.MustRequiresGrad_(true)
	}
	c, err := a.Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, x := range paramValues(c) {
		if x != want[i] {
			t.Fatalf("clone entry %d: %v, want %v", i, x, want[i])
		}
	}
	for _, p := range c.Params() {
		if p.Tensor.MustRequiresGrad() {
			t.Fatalf("clone's %s requires grad", p.Name)
		}
		p.Tensor.MustMulScalar_(sc.Float(3))
	}
	for i, x := range paramValues(a) {
		if x != want[i] {
			t.Fatalf("scaling the clone changed the original's entry %d", i)
		}
	}
	other := tinyModel(t, "qwen2-gqa2-tied")
	if err := other.LoadWeights(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "do not match") {
		t.Fatalf("another architecture's weights: %v", err)
	}
	if err := other.EMAFrom(a, 0.5); err == nil {
		t.Fatal("EMA from another architecture: no error")
	}
}
