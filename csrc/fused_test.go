package csrc

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Each fused kernel against the ATen composition it replaces (the code the
// model ran before): fp64 to 1e-12 in forward and backward; RoPE and the KV
// write bit for bit in every dtype; the norm and SwiGLU in fp32 and bf16
// within their reductions' and exp's rounding.

var fusedDTypes = []gotch.DType{gotch.Double, gotch.Float, gotch.BFloat16}

func maxDiff(a, b *ts.Tensor) float64 {
	return tensor.MaxAbsDiff(tensor.Float64s(a), tensor.Float64s(b))
}

// grads backpropagates Σ out·g and returns the gradients of xs.
func grads(t *testing.T, s *tensor.Scope, out, g *ts.Tensor, xs ...*ts.Tensor) []*ts.Tensor {
	t.Helper()
	s.Keep(s.Keep(out.MustMul(g, false)).MustSum(gotch.Double, false)).MustBackward()
	var gs []*ts.Tensor
	for _, x := range xs {
		gs = append(gs, s.Keep(x.MustGrad(false)))
	}
	return gs
}

func TestAddRMSNormMatchesComposition(t *testing.T) {
	lockThread(t)
	const eps = 1e-6
	r := rand.New(rand.NewSource(3))
	shape := []int64{2, 3, 40}
	n := 2 * 3 * 40
	xv, rv, wv, gv, ghv := randVals(r, n), randVals(r, n), randVals(r, 40), randVals(r, n), randVals(r, n)
	for _, dt := range fusedDTypes {
		s := newScope(t)
		// fused
		x, res, w := tensorOf(t, s, xv, shape, dt, true), tensorOf(t, s, rv, shape, dt, true), tensorOf(t, s, wv, []int64{40}, dt, true)
		y, h, err := AddRMSNorm(x, res, w, eps)
		if err != nil {
			t.Fatal(err)
		}
		s.Keep(y)
		s.Keep(h)
		g, gh := tensorOf(t, s, gv, shape, dt, false), tensorOf(t, s, ghv, shape, dt, false)
		both := s.Keep(s.Keep(y.MustMul(g, false)).MustAdd(s.Keep(h.MustMul(gh, false)), false))
		fg := grads(t, s, both, s.Keep(both.MustOnesLike(false)), x, res, w)
		// composed: h = x + res, y = rmsnorm(h) through the previous op
		x2, res2, w2 := tensorOf(t, s, xv, shape, dt, true), tensorOf(t, s, rv, shape, dt, true), tensorOf(t, s, wv, []int64{40}, dt, true)
		h2 := s.Keep(x2.MustAdd(res2, false))
		var y2 *ts.Tensor
		if dt == gotch.Double {
			y2 = rmsNormComposed(s, h2, w2, eps)
		} else {
			xf := s.Keep(h2.MustTotype(gotch.Float, false))
			ms := s.Keep(s.Keep(xf.MustPowTensorScalar(s.Float(2), false)).MustMeanDim([]int64{-1}, true, gotch.Float, false))
			rs := s.Keep(s.Keep(ms.MustAddScalar(s.Float(eps), false)).MustRsqrt(false))
			y2 = s.Keep(w2.MustMul(s.Keep(s.Keep(xf.MustMul(rs, false)).MustTotype(dt, false)), false))
		}
		both2 := s.Keep(s.Keep(y2.MustMul(g, false)).MustAdd(s.Keep(h2.MustMul(gh, false)), false))
		cg := grads(t, s, both2, s.Keep(both2.MustOnesLike(false)), x2, res2, w2)
		if d := maxDiff(h, h2); d != 0 {
			t.Errorf("%v: the residual sum differs from x + res by %g", dt, d)
		}
		tol := map[gotch.DType]float64{gotch.Double: 1e-12, gotch.Float: 2e-6, gotch.BFloat16: 0.032}[dt]
		if d := maxDiff(y, y2); d > tol*4 {
			t.Errorf("%v: y differs from the composition by %g (limit %g)", dt, d, tol*4)
		}
		for i, name := range []string{"dx", "dresidual", "dweight"} {
			lim := tol * 16
			if name == "dweight" {
				lim = tol * float64(n)
			}
			if d := maxDiff(fg[i], cg[i]); d > lim {
				t.Errorf("%v: %s differs from the composition's by %g (limit %g)", dt, name, d, lim)
			}
		}
	}
}

// ropeComposed is what model/nn.go computed before the fused kernel: bias,
// view, transpose, the tables gathered at the positions and cast to the
// dtype, x·cos + rotate_half(x)·sin.
func ropeComposed(s *tensor.Scope, x, bias, cos, sin, pos *ts.Tensor, heads int64, rotate bool) *ts.Tensor {
	size := x.MustSize()
	b, tt := size[0], size[1]
	d := cos.MustSize()[1]
	if bias != nil {
		x = s.Keep(x.MustAdd(bias, false))
	}
	y := s.Keep(s.Keep(x.MustView([]int64{b, tt, heads, d}, false)).MustTranspose(1, 2, false))
	if !rotate {
		return s.Keep(y.MustContiguous(false))
	}
	flat := s.Keep(pos.MustReshape([]int64{-1}, false))
	pick := func(tab *ts.Tensor) *ts.Tensor {
		g := s.Keep(s.Keep(tab.MustIndexSelect(0, flat, false)).MustReshape([]int64{b, 1, tt, d}, false))
		return s.Keep(g.MustTotype(x.DType(), false))
	}
	c, sn := pick(cos), pick(sin)
	x1 := s.Keep(y.MustNarrow(3, 0, d/2, false))
	x2 := s.Keep(y.MustNarrow(3, d/2, d/2, false))
	rot := s.Keep(ts.MustCat([]*ts.Tensor{s.Keep(x2.MustNeg(false)), x1}, 3))
	return s.Keep(s.Keep(y.MustMul(c, false)).MustAdd(s.Keep(rot.MustMul(sn, false)), false))
}

// ropeTables are cos and sin of RoPE angles for p positions, [p, d] fp32.
func ropeTables(s *tensor.Scope, p, d int64) (cos, sin *ts.Tensor) {
	var cv, sv []float32
	for i := int64(0); i < p; i++ {
		for k := int64(0); k < d; k++ {
			a := float64(i) / math.Pow(10000, float64(2*(k%(d/2)))/float64(d))
			cv, sv = append(cv, float32(math.Cos(a))), append(sv, float32(math.Sin(a)))
		}
	}
	return tensor.FromSlice(s, cv, []int64{p, d}, gotch.CPU), tensor.FromSlice(s, sv, []int64{p, d}, gotch.CPU)
}

func TestRopeMatchesCompositionBitForBit(t *testing.T) {
	lockThread(t)
	const b, tt, hq, hkv, d = 2, 5, 4, 2, 8
	r := rand.New(rand.NewSource(5))
	qv, kv, vv := randVals(r, b*tt*hq*d), randVals(r, b*tt*hkv*d), randVals(r, b*tt*hkv*d)
	bqv, bkv, bvv := randVals(r, hq*d), randVals(r, hkv*d), randVals(r, hkv*d)
	gq, gk, gv := randVals(r, b*hq*tt*d), randVals(r, b*hkv*tt*d), randVals(r, b*hkv*tt*d)
	posv := []int64{0, 1, 2, 3, 4, 7, 3, 9, 11, 2}
	for _, dt := range fusedDTypes {
		for _, withBias := range []bool{false, true} {
			s := newScope(t)
			cos, sin := ropeTables(s, 12, d)
			pos := tensor.FromSlice(s, posv, []int64{b, tt}, gotch.CPU)
			mk := func() []*ts.Tensor {
				xs := []*ts.Tensor{tensorOf(t, s, qv, []int64{b, tt, hq * d}, dt, true), tensorOf(t, s, kv, []int64{b, tt, hkv * d}, dt, true),
					tensorOf(t, s, vv, []int64{b, tt, hkv * d}, dt, true), nil, nil, nil}
				if withBias {
					xs[3], xs[4], xs[5] = tensorOf(t, s, bqv, []int64{hq * d}, dt, true), tensorOf(t, s, bkv, []int64{hkv * d}, dt, true), tensorOf(t, s, bvv, []int64{hkv * d}, dt, true)
				}
				return xs
			}
			f, c := mk(), mk()
			oq, ok, ov, err := Rope(f[0], f[1], f[2], f[3], f[4], f[5], cos, sin, pos, hq, hkv)
			if err != nil {
				t.Fatal(err)
			}
			fo := []*ts.Tensor{s.Keep(oq), s.Keep(ok), s.Keep(ov)}
			co := []*ts.Tensor{ropeComposed(s, c[0], c[3], cos, sin, pos, hq, true), ropeComposed(s, c[1], c[4], cos, sin, pos, hkv, true),
				ropeComposed(s, c[2], c[5], cos, sin, pos, hkv, false)}
			for i, name := range []string{"q", "k", "v"} {
				if d := maxDiff(fo[i], co[i]); d != 0 {
					t.Errorf("%v bias %v: %s differs from the composition by %g (want bit for bit)", dt, withBias, name, d)
				}
			}
			if dt != gotch.Double {
				continue
			}
			gs := []*ts.Tensor{tensorOf(t, s, gq, []int64{b, hq, tt, d}, dt, false), tensorOf(t, s, gk, []int64{b, hkv, tt, d}, dt, false),
				tensorOf(t, s, gv, []int64{b, hkv, tt, d}, dt, false)}
			sum := func(out []*ts.Tensor) *ts.Tensor {
				acc := s.Keep(out[0].MustMul(gs[0], false))
				for i := 1; i < 3; i++ {
					acc = s.Keep(s.Keep(acc.MustSum(gotch.Double, false)).MustAdd(s.Keep(s.Keep(out[i].MustMul(gs[i], false)).MustSum(gotch.Double, false)), false))
				}
				return acc
			}
			ins := func(xs []*ts.Tensor) []*ts.Tensor {
				if withBias {
					return xs
				}
				return xs[:3]
			}
			fs, cs := sum(fo), sum(co)
			fg := grads(t, s, fs, s.Keep(fs.MustOnesLike(false)), ins(f)...)
			cg := grads(t, s, cs, s.Keep(cs.MustOnesLike(false)), ins(c)...)
			for i := range fg {
				if d := maxDiff(fg[i], cg[i]); d > 1e-12 {
					t.Errorf("bias %v: gradient of input %d differs from the composition's by %g", withBias, i, d)
				}
			}
		}
	}
}

// TestRopeCacheWritesAtTheDeviceSlot: one token per row, q as Rope makes it,
// k and v written into the caches at ctr[1] and nowhere else.
func TestRopeCacheWritesAtTheDeviceSlot(t *testing.T) {
	lockThread(t)
	const b, hq, hkv, d, tmax = 3, 4, 2, 8, 6
	r := rand.New(rand.NewSource(7))
	for _, dt := range fusedDTypes {
		s := newScope(t)
		cos, sin := ropeTables(s, 16, d)
		q := tensorOf(t, s, randVals(r, b*hq*d), []int64{b, 1, hq * d}, dt, false)
		k := tensorOf(t, s, randVals(r, b*hkv*d), []int64{b, 1, hkv * d}, dt, false)
		v := tensorOf(t, s, randVals(r, b*hkv*d), []int64{b, 1, hkv * d}, dt, false)
		bq := tensorOf(t, s, randVals(r, hq*d), []int64{hq * d}, dt, false)
		pos := tensor.FromSlice(s, []int64{3, 9, 15}, []int64{b, 1}, gotch.CPU)
		kc := s.Keep(ts.MustZeros([]int64{b, hkv, tmax, d}, dt, gotch.CPU))
		vc := s.Keep(ts.MustZeros([]int64{b, hkv, tmax, d}, dt, gotch.CPU))
		ctr := tensor.FromSlice(s, []int64{0, 4}, nil, gotch.CPU)
		oq, err := RopeCache(q, k, v, bq, nil, nil, cos, sin, pos, kc, vc, ctr)
		if err != nil {
			t.Fatal(err)
		}
		s.Keep(oq)
		wq, wk, wv, err := Rope(q, k, v, bq, nil, nil, cos, sin, pos, hq, hkv)
		if err != nil {
			t.Fatal(err)
		}
		s.Keep(wq)
		s.Keep(wk)
		s.Keep(wv)
		if d := maxDiff(oq, wq); d != 0 {
			t.Errorf("%v: q differs from Rope's by %g", dt, d)
		}
		for _, c := range []struct {
			name        string
			cache, want *ts.Tensor
		}{{"k", kc, wk}, {"v", vc, wv}} {
			if d := maxDiff(s.Keep(c.cache.MustNarrow(2, 4, 1, false)), c.want); d != 0 {
				t.Errorf("%v: %s at slot 4 differs by %g", dt, c.name, d)
			}
			rest := s.Keep(s.Keep(c.cache.MustNarrow(2, 0, 4, false)).MustAbs(false))
			if m := tensor.Float64s(s.Keep(rest.MustMax(false)))[0]; m != 0 {
				t.Errorf("%v: %s written outside slot 4", dt, c.name)
			}
		}
	}
}

// TestRopeCacheAndSampleAtEachRowsPosition: with a negative slot (the slots
// engine's layout) each row's k and v go to the cache slot of its own
// position and nowhere else, the sampler opens each row's advanced
// position, and a position outside the cache is refused.
func TestRopeCacheAndSampleAtEachRowsPosition(t *testing.T) {
	lockThread(t)
	const b, hq, hkv, d, tmax, v = 3, 4, 2, 8, 6, 50
	r := rand.New(rand.NewSource(8))
	s := newScope(t)
	cos, sin := ropeTables(s, 16, d)
	q := tensorOf(t, s, randVals(r, b*hq*d), []int64{b, 1, hq * d}, gotch.Float, false)
	k := tensorOf(t, s, randVals(r, b*hkv*d), []int64{b, 1, hkv * d}, gotch.Float, false)
	vv := tensorOf(t, s, randVals(r, b*hkv*d), []int64{b, 1, hkv * d}, gotch.Float, false)
	positions := []int64{3, 0, 5}
	pos := tensor.FromSlice(s, positions, []int64{b, 1}, gotch.CPU)
	kc := s.Keep(ts.MustZeros([]int64{b, hkv, tmax, d}, gotch.Float, gotch.CPU))
	vc := s.Keep(ts.MustZeros([]int64{b, hkv, tmax, d}, gotch.Float, gotch.CPU))
	ctr := tensor.FromSlice(s, []int64{1, -1 << 62}, nil, gotch.CPU)
	oq, err := RopeCache(q, k, vv, nil, nil, nil, cos, sin, pos, kc, vc, ctr)
	if err != nil {
		t.Fatal(err)
	}
	s.Keep(oq)
	wq, wk, wv, err := Rope(q, k, vv, nil, nil, nil, cos, sin, pos, hq, hkv)
	if err != nil {
		t.Fatal(err)
	}
	s.Keep(wq)
	s.Keep(wk)
	s.Keep(wv)
	for _, c := range []struct {
		name        string
		cache, want *ts.Tensor
	}{{"k", kc, wk}, {"v", vc, wv}} {
		for row, p := range positions {
			got := s.Keep(s.Keep(c.cache.MustNarrow(0, int64(row), 1, false)).MustNarrow(2, p, 1, false))
			want := s.Keep(c.want.MustNarrow(0, int64(row), 1, false))
			if dd := maxDiff(got, want); dd != 0 {
				t.Errorf("%s: row %d at its position %d differs by %g", c.name, row, p, dd)
			}
		}
		nonzero := tensor.Float64s(s.Keep(s.Keep(s.Keep(c.cache.MustNe(s.Float(0), false)).MustSum(gotch.Int64, false)).MustTotype(gotch.Double, false)))[0]
		if want := float64(b * hkv * d); nonzero != want {
			t.Errorf("%s: %g values written, want %g (one slot per row)", c.name, nonzero, want)
		}
	}
	logits := make([]float32, b*v)
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	lp := s.Keep(tensor.FromSlice(s, logits, []int64{b, v}, gotch.CPU).MustLogSoftmax(-1, gotch.Float, false))
	bias := s.Keep(ts.MustFull([]int64{b, tmax}, s.Float(math.Inf(-1)), gotch.Float, gotch.CPU))
	rec := s.Keep(ts.MustZeros([]int64{b, 2}, gotch.Int64, gotch.CPU))
	tok := s.Keep(ts.MustZeros([]int64{b, 1}, gotch.Int64, gotch.CPU))
	if err := Sample(SampleArgs{Pick: lp, LP: lp, Ctr: ctr, Tok: tok, Pos: pos, Bias: bias, Rec: rec, Greedy: true}); err != nil {
		t.Fatal(err)
	}
	bv := tensor.Float64s(bias)
	for row, p := range positions {
		for c := int64(0); c < tmax; c++ {
			if open := bv[int64(row)*tmax+c] == 0; open != (c == p+1) {
				t.Errorf("bias[%d, %d] open %v: only the row's next position %d should open", row, c, open, p+1)
			}
		}
	}
	for row, rv := range tensor.Int64s(rec) {
		if (rv != 0) != (row%2 == 1) { // column ctr[0] = 1 of [b, 2]
			t.Errorf("record %d = %d: only column 1 should be written", row, rv)
		}
	}
	far := tensor.FromSlice(s, []int64{3, 6, 1}, []int64{b, 1}, gotch.CPU)
	if bad, err := RopeCache(q, k, vv, nil, nil, nil, cos, sin, far, kc, vc, ctr); err == nil || !strings.Contains(err.Error(), "position 6 outside the cache") {
		if bad != nil {
			s.Keep(bad)
		}
		t.Errorf("a position past the cache: %v", err)
	}
}

func TestSwiGLUMatchesComposition(t *testing.T) {
	lockThread(t)
	r := rand.New(rand.NewSource(11))
	shape := []int64{3, 64}
	gv, uv, ov := randVals(r, 192), randVals(r, 192), randVals(r, 192)
	for _, dt := range fusedDTypes {
		s := newScope(t)
		g, u := tensorOf(t, s, gv, shape, dt, true), tensorOf(t, s, uv, shape, dt, true)
		y, err := SwiGLU(g, u)
		if err != nil {
			t.Fatal(err)
		}
		s.Keep(y)
		g2, u2 := tensorOf(t, s, gv, shape, dt, true), tensorOf(t, s, uv, shape, dt, true)
		y2 := s.Keep(s.Keep(g2.MustSilu(false)).MustMul(u2, false))
		up := tensorOf(t, s, ov, shape, dt, false)
		fg := grads(t, s, y, up, g, u)
		cg := grads(t, s, y2, up, g2, u2)
		tol := map[gotch.DType]float64{gotch.Double: 1e-12, gotch.Float: 1e-6, gotch.BFloat16: 0.032}[dt]
		if d := maxDiff(y, y2); d > tol*4 {
			t.Errorf("%v: y differs from silu(g)·u by %g", dt, d)
		}
		for i, name := range []string{"dgate", "dup"} {
			if d := maxDiff(fg[i], cg[i]); d > tol*8 {
				t.Errorf("%v: %s differs from the composition's by %g", dt, name, d)
			}
		}
	}
}

// TestSampleRecordsAndAdvances: greedy picks the argmax; sampling picks
// where the running sum of the probabilities reaches u·total; either way the
// token and its log-probability land in the record's column, the token is
// the next input, the position moves on and the next cache slot opens.
func TestSampleRecordsAndAdvances(t *testing.T) {
	lockThread(t)
	const rows, v, cols, tmax = 3, 3000, 4, 6 // v > one 1024-block, ragged last block
	r := rand.New(rand.NewSource(13))
	s := newScope(t)
	logits := make([]float32, rows*v)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	lt := tensor.FromSlice(s, logits, []int64{rows, v}, gotch.CPU)
	lp := s.Keep(lt.MustLogSoftmax(-1, gotch.Float, false))
	probs := s.Keep(lp.MustExp(false))
	uv := make([]float64, rows*cols)
	for i := range uv {
		uv[i] = 1 - r.Float64()
	}
	u := tensor.FromSlice(s, uv, []int64{rows, cols}, gotch.CPU)
	for _, greedy := range []bool{true, false} {
		ctr := tensor.FromSlice(s, []int64{2, 3}, nil, gotch.CPU)
		tok := s.Keep(ts.MustZeros([]int64{rows, 1}, gotch.Int64, gotch.CPU))
		pos := tensor.FromSlice(s, []int64{5, 6, 7}, []int64{rows, 1}, gotch.CPU)
		bias := s.Keep(ts.MustFull([]int64{rows, tmax}, s.Float(math.Inf(-1)), gotch.Float, gotch.CPU))
		rec := s.Keep(ts.MustZeros([]int64{rows, cols}, gotch.Int64, gotch.CPU))
		a := SampleArgs{Pick: probs, LP: lp, U: u, Ctr: ctr, Tok: tok, Pos: pos, Bias: bias, Rec: rec, Greedy: greedy}
		if greedy {
			a.Pick, a.U = lp, nil
		}
		if err := Sample(a); err != nil {
			t.Fatal(err)
		}
		recs, toks, lps := tensor.Int64s(rec), tensor.Int64s(tok), tensor.Float64s(lp)
		pv := tensor.Float64s(probs)
		for i := 0; i < rows; i++ {
			want := 0
			row := pv[i*v : (i+1)*v]
			if greedy {
				for j := range row {
					if row[j] > row[want] {
						want = j
					}
				}
			} else {
				total := 0.0
				for _, x := range row {
					total += x
				}
				cum, target := 0.0, uv[i*cols+2]*total
				for want = 0; want < v-1 && cum+row[want] < target; want++ {
					cum += row[want]
				}
			}
			got := recs[i*cols+2]
			id, bits := got&0xffffffff, uint32(uint64(got)>>32)
			if int(id) != want || toks[i] != id {
				t.Errorf("greedy %v row %d: recorded %d, next input %d, want %d", greedy, i, id, toks[i], want)
			}
			if l := math.Float32frombits(bits); float64(l) != lps[i*v+int(id)] {
				t.Errorf("greedy %v row %d: recorded log-prob %g, want %g", greedy, i, l, lps[i*v+int(id)])
			}
			for c := 0; c < cols; c++ {
				if c != 2 && recs[i*cols+c] != 0 {
					t.Errorf("greedy %v row %d: column %d written", greedy, i, c)
				}
			}
		}
		if p := tensor.Int64s(pos); p[0] != 6 || p[1] != 7 || p[2] != 8 {
			t.Errorf("positions %v, want 6 7 8", p)
		}
		bv := tensor.Float64s(bias)
		for i := 0; i < rows*tmax; i++ {
			if open := bv[i] == 0; open != (i%tmax == 4) {
				t.Errorf("bias[%d, %d] = %g: only slot ctr[1]+1 = 4 should open", i/tmax, i%tmax, bv[i])
			}
		}
		if c := tensor.Int64s(ctr); c[0] != 2 || c[1] != 3 {
			t.Errorf("ctr changed to %v", c)
		}
	}
}

// TestSDPAGroupedAndCausal: enable_gqa equals keys and values repeated per
// query head, and is_causal equals an explicit causal mask.
func TestSDPAGroupedAndCausal(t *testing.T) {
	lockThread(t)
	const b, hq, hkv, tt, d = 2, 4, 2, 5, 8
	r := rand.New(rand.NewSource(17))
	s := newScope(t)
	q := tensorOf(t, s, randVals(r, b*hq*tt*d), []int64{b, hq, tt, d}, gotch.Double, false)
	k := tensorOf(t, s, randVals(r, b*hkv*tt*d), []int64{b, hkv, tt, d}, gotch.Double, false)
	v := tensorOf(t, s, randVals(r, b*hkv*tt*d), []int64{b, hkv, tt, d}, gotch.Double, false)
	rep := func(x *ts.Tensor) *ts.Tensor {
		return s.Keep(x.MustRepeatInterleaveSelfInt(hq/hkv, []int64{1}, nil, false))
	}
	causal := s.Keep(s.Keep(ts.MustOnes([]int64{tt, tt}, gotch.Bool, gotch.CPU)).MustTril(0, false))
	want, err := SDPA(q, rep(k), rep(v), causal, false, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Keep(want)
	got, err := SDPA(q, rep(k), rep(v), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(s.Keep(got), want); d > 1e-12 {
		t.Errorf("is_causal differs from the explicit mask by %g", d)
	}
	if !SDPAGQA() {
		if _, err := SDPA(q, k, v, nil, true, true); err == nil {
			t.Error("enable_gqa accepted by a libtorch without it")
		}
		return
	}
	got, err = SDPA(q, k, v, nil, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(s.Keep(got), want); d > 1e-12 {
		t.Errorf("enable_gqa differs from repeated keys and values by %g", d)
	}
}
