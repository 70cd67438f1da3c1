package csrc

import (
	"math"
	"math/rand"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// TestCUDAFusedKernelsMatchCPU runs every fused kernel on a GPU against the
// same kernel on the CPU (csrc/cuda/fused.cu follows fused.cpp and decode.cpp
// step for step): RoPE, the KV-cache write and the sampler bit for bit (the
// same roundings, the sampler's sums in the same order); the norm and
// SwiGLU within their reductions' and exp's rounding; the backward passes
// (ATen compositions on either device) to the same bounds.
func TestCUDAFusedKernelsMatchCPU(t *testing.T) {
	lockThread(t)
	skipWithoutCUDA(t)
	dev := gotch.CudaBuilder(0)
	r := rand.New(rand.NewSource(23))
	on := func(s *tensor.Scope, x *ts.Tensor) *ts.Tensor { return s.Keep(x.MustTo(dev, false)) }
	for _, dt := range []gotch.DType{gotch.Float, gotch.BFloat16, gotch.Double} {
		s := newScope(t)
		tol := map[gotch.DType]float64{gotch.Double: 1e-12, gotch.Float: 2e-6, gotch.BFloat16: 0.032}[dt]
		// RMSNorm with the residual add.
		x := tensorOf(t, s, randVals(r, 6*200), []int64{6, 200}, dt, false)
		res := tensorOf(t, s, randVals(r, 6*200), []int64{6, 200}, dt, false)
		w := tensorOf(t, s, randVals(r, 200), []int64{200}, dt, false)
		yc, hc, err := AddRMSNorm(x, res, w, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		yg, hg, err := AddRMSNorm(on(s, x), on(s, res), on(s, w), 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range []*ts.Tensor{yc, hc, yg, hg} {
			s.Keep(z)
		}
		if d := maxDiff(hg, hc); d != 0 {
			t.Errorf("%v: residual sum differs from the CPU's by %g", dt, d)
		}
		if d := maxDiff(yg, yc); d > 4*tol {
			t.Errorf("%v: add_rms_norm differs from the CPU's by %g", dt, d)
		}
		// RoPE with biases, then the cache write.
		const b, tt, hq, hkv, d = 2, 3, 4, 2, 16
		cos, sin := ropeTables(s, 32, d)
		pos := tensor.FromSlice(s, []int64{0, 5, 9, 1, 2, 30}, []int64{b, tt}, gotch.CPU)
		q := tensorOf(t, s, randVals(r, b*tt*hq*d), []int64{b, tt, hq * d}, dt, false)
		k := tensorOf(t, s, randVals(r, b*tt*hkv*d), []int64{b, tt, hkv * d}, dt, false)
		v := tensorOf(t, s, randVals(r, b*tt*hkv*d), []int64{b, tt, hkv * d}, dt, false)
		bq := tensorOf(t, s, randVals(r, hq*d), []int64{hq * d}, dt, false)
		oc := ropeAll(t, s, q, k, v, bq, cos, sin, pos, hq, hkv)
		og := ropeAll(t, s, on(s, q), on(s, k), on(s, v), on(s, bq), on(s, cos), on(s, sin), on(s, pos), hq, hkv)
		for i := range oc {
			if dd := maxDiff(og[i], oc[i]); dd != 0 {
				t.Errorf("%v: RoPE output %d differs from the CPU's by %g", dt, i, dd)
			}
		}
		kc := s.Keep(ts.MustZeros([]int64{b, hkv, 8, d}, dt, gotch.CPU))
		vc := s.Keep(ts.MustZeros([]int64{b, hkv, 8, d}, dt, gotch.CPU))
		kg, vg := on(s, kc), on(s, vc)
		one := func(x *ts.Tensor) *ts.Tensor { return s.Keep(x.MustNarrow(1, 0, 1, false).MustContiguous(true)) }
		p1 := s.Keep(pos.MustNarrow(1, 0, 1, false).MustContiguous(true)) // positions 0 and 1
		// At the device's slot, then (slot < 0) each row at its position.
		for _, slot := range []int64{6, -1 << 62} {
			ctr := tensor.FromSlice(s, []int64{0, slot}, nil, gotch.CPU)
			qc1, err := RopeCache(one(q), one(k), one(v), bq, nil, nil, cos, sin, p1, kc, vc, ctr)
			if err != nil {
				t.Fatal(err)
			}
			qg1, err := RopeCache(on(s, one(q)), on(s, one(k)), on(s, one(v)), on(s, bq), nil, nil, on(s, cos), on(s, sin), on(s, p1), kg, vg, on(s, ctr))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name string
				a, b *ts.Tensor
			}{{"q", s.Keep(qg1), s.Keep(qc1)}, {"k cache", kg, kc}, {"v cache", vg, vc}} {
				if dd := maxDiff(c.a, c.b); dd != 0 {
					t.Errorf("%v slot %d: rope_cache's %s differs from the CPU's by %g", dt, slot, c.name, dd)
				}
			}
		}
		// SwiGLU.
		g, u := tensorOf(t, s, randVals(r, 500), []int64{500}, dt, false), tensorOf(t, s, randVals(r, 500), []int64{500}, dt, false)
		sc, err := SwiGLU(g, u)
		if err != nil {
			t.Fatal(err)
		}
		sg, err := SwiGLU(on(s, g), on(s, u))
		if err != nil {
			t.Fatal(err)
		}
		if dd := maxDiff(s.Keep(sg), s.Keep(sc)); dd > 4*tol {
			t.Errorf("%v: swiglu differs from the CPU's by %g", dt, dd)
		}
	}
	// The sampler: same draws, records and advances on both devices.
	s := newScope(t)
	const rows, v, cols, tmax = 5, 70000, 3, 9
	logits := make([]float32, rows*v)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 2)
	}
	lp := s.Keep(tensor.FromSlice(s, logits, []int64{rows, v}, gotch.CPU).MustLogSoftmax(-1, gotch.Float, false))
	probs := s.Keep(lp.MustExp(false))
	uv := make([]float64, rows*cols)
	for i := range uv {
		uv[i] = 1 - r.Float64()
	}
	u := tensor.FromSlice(s, uv, []int64{rows, cols}, gotch.CPU)
	for _, c := range []struct {
		greedy bool
		slot   int64 // < 0: each row opens its own position
	}{{false, 4}, {true, 4}, {false, -1 << 62}} {
		greedy := c.greedy
		state := func(d gotch.Device) SampleArgs {
			a := SampleArgs{Pick: probs, LP: lp, U: u, Greedy: greedy,
				Ctr: tensor.FromSlice(s, []int64{1, c.slot}, nil, gotch.CPU), Tok: s.Keep(ts.MustZeros([]int64{rows, 1}, gotch.Int64, gotch.CPU)),
				Pos:  tensor.FromSlice(s, []int64{3, 4, 5, 6, 7}, []int64{rows, 1}, gotch.CPU),
				Bias: s.Keep(ts.MustFull([]int64{rows, tmax}, s.Float(math.Inf(-1)), gotch.BFloat16, gotch.CPU)),
				Rec:  s.Keep(ts.MustZeros([]int64{rows, cols}, gotch.Int64, gotch.CPU))}
			if d.IsCuda() {
				for _, p := range []**ts.Tensor{&a.Pick, &a.LP, &a.U, &a.Ctr, &a.Tok, &a.Pos, &a.Bias, &a.Rec} {
					*p = on(s, *p)
				}
			}
			return a
		}
		ac, ag := state(gotch.CPU), state(dev)
		if err := Sample(ac); err != nil {
			t.Fatal(err)
		}
		if err := Sample(ag); err != nil {
			t.Fatal(err)
		}
		for _, o := range []struct {
			name string
			a, b *ts.Tensor
		}{{"record", ag.Rec, ac.Rec}, {"next input", ag.Tok, ac.Tok}, {"positions", ag.Pos, ac.Pos},
			{"attention mask", s.Keep(ag.Bias.MustIsinf(false)), s.Keep(ac.Bias.MustIsinf(false))}} {
			if dd := maxDiff(o.a, o.b); dd != 0 || math.IsNaN(dd) {
				t.Errorf("greedy %v slot %d: the sampler's %s differs from the CPU's by %g", greedy, c.slot, o.name, dd)
			}
		}
	}
}

// ropeAll is Rope's three outputs, kept in s.
func ropeAll(t *testing.T, s *tensor.Scope, q, k, v, bq, cos, sin, pos *ts.Tensor, hq, hkv int64) []*ts.Tensor {
	t.Helper()
	a, b, c, err := Rope(q, k, v, bq, nil, nil, cos, sin, pos, hq, hkv)
	if err != nil {
		t.Fatal(err)
	}
	return []*ts.Tensor{s.Keep(a), s.Keep(b), s.Keep(c)}
}
