package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Block and lane sizes of the sampler's summation order (csrc/fused_cuda.h).
const (
	cdfBlock = 1024
	cdfLanes = 32
)

// inverseCDF is the readable host version of the device sampler's draw:
// the first token at which the running sum of p (unnormalized
// probabilities, 0 for removed tokens) reaches u·total, in fp64. The device
// sums blocks of cdfBlock entries, lane l of a block adding entries
// l, l+cdfLanes, … in order and the block adding its lanes in lane order;
// it then walks the blocks, and the chosen block entry by entry. So does
// this, one addition at a time.
func inverseCDF(p []float32, u float64) int {
	nb := (len(p) + cdfBlock - 1) / cdfBlock
	sums := make([]float64, nb)
	for j := range sums {
		end := min(len(p), (j+1)*cdfBlock)
		var lanes [cdfLanes]float64
		for l := range lanes {
			for i := j*cdfBlock + l; i < end; i += cdfLanes {
				lanes[l] += float64(p[i])
			}
		}
		for _, x := range lanes {
			sums[j] += x
		}
	}
	total := 0.0
	for _, x := range sums {
		total += x
	}
	target, cum, b := u*total, 0.0, -1
	for j, x := range sums {
		if x > 0 {
			b = j // the last block with mass, should rounding leave target unmet
			if cum+x >= target {
				break
			}
		}
		cum += x
	}
	remain, c, pick := target-cum, 0.0, -1
	for i := b * cdfBlock; i < min(len(p), (b+1)*cdfBlock); i++ {
		x := float64(p[i])
		if !(x > 0) {
			continue
		}
		pick = i
		c += x
		if c >= remain {
			break
		}
	}
	return pick
}

// boundaryU is a uniform at which inverseCDF's running sum in p reaches
// u·total exactly at token k (step ulps away).
func boundaryU(p []float32, k, step int) float64 {
	b := k / cdfBlock
	total, before := 0.0, 0.0
	for j := 0; j*cdfBlock < len(p); j++ {
		end := min(len(p), (j+1)*cdfBlock)
		var lanes [cdfLanes]float64
		for l := range lanes {
			for i := j*cdfBlock + l; i < end; i += cdfLanes {
				lanes[l] += float64(p[i])
			}
		}
		sum := 0.0
		for _, x := range lanes {
			sum += x
		}
		total += sum
		if j < b {
			before += sum
		}
	}
	c := 0.0
	for i := b * cdfBlock; i <= k; i++ {
		c += float64(p[i])
	}
	u := (before + c) / total
	for ; step > 0; step-- {
		u = math.Nextafter(u, 2)
	}
	for ; step < 0; step++ {
		u = math.Nextafter(u, 0)
	}
	return min(u, 1)
}

// TestDeviceSamplerEqualsHost: on the same probabilities and uniforms the
// device sampler (csrc.Sample, here on the CPU; on a GPU in
// TestCUDADecodeStepsMatchCPU) draws the token the host reference draws,
// for every row — including rows filtered by top-k, min-p and top-p, and a
// vocabulary that does not fill its last block.
func TestDeviceSamplerEqualsHost(t *testing.T) {
	lockThread(t)
	const rows, v = 96, 5000
	r := rand.New(rand.NewPCG(1, 2))
	var s tensor.Scope
	defer s.Close()
	logits := make([]float32, rows*v)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * (1 + float64(i/v%4)*3))
	}
	lt := tensor.FromSlice(&s, logits, []int64{rows, v}, gotch.CPU)
	u := make([]float64, rows)
	for i := range u {
		u[i] = 1 - r.Float64()
	}
	// Half the rows draw at a token boundary, to the last bit: u·total lands
	// on (or one ulp around) the running sum at a random token, which only
	// the same additions in the same order decide the same way.
	plain := tensor.Float64s(s.Keep(scaledLogprobs(&s, lt, 1).MustExp(false))) // what Temperature 1 draws from
	for i := 0; i < rows; i += 2 {
		row := make([]float32, v)
		for j := range row {
			row[j] = float32(plain[i*v+j])
		}
		u[i] = boundaryU(row, r.IntN(v), i%3-1)
	}
	for _, p := range []SamplingParams{
		{Temperature: 1}, {Temperature: 0.6, TopK: 40}, {Temperature: 1, TopP: 0.9}, {Temperature: 1.2, MinP: 0.05},
	} {
		got, _ := sampleStep(&s, lt, p, u)
		lp := scaledLogprobs(&s, lt, p.Temperature)
		probs := tensor.Float64s(s.Keep(filterLogprobs(&s, lp, p, true).MustExp(false)))
		for i := 0; i < rows; i++ {
			row := make([]float32, v)
			for j := range row {
				row[j] = float32(probs[i*v+j])
			}
			if want := inverseCDF(row, u[i]); int(got[i]) != want {
				t.Errorf("%+v row %d: the device drew %d, the host %d", p, i, got[i], want)
			}
		}
	}
	// Greedy: the first largest log-probability, as ATen's argmax.
	greedy, _ := sampleStep(&s, lt, SamplingParams{}, u)
	want := tensor.Int64s(s.Keep(lt.MustArgmax([]int64{-1}, false, false)))
	for i := range greedy {
		if greedy[i] != want[i] {
			t.Errorf("greedy row %d: %d, argmax %d", i, greedy[i], want[i])
		}
	}
}

// TestTopPWithoutHostBranch: on CUDA top-p sorts the vocabulary rather than
// reading a value on the host; its mask is the same.
func TestTopPWithoutHostBranch(t *testing.T) {
	lockThread(t)
	var s tensor.Scope
	defer s.Close()
	csrc.ManualSeed(5)
	lp := s.Keep(s.Keep(s.Keep(ts.MustRandn([]int64{8, 2000}, gotch.Float, gotch.CPU)).MustMulScalar(s.Float(6), false)).MustLogSoftmax(-1, gotch.Float, false))
	for _, topp := range []float64{0.5, 0.9} {
		p := SamplingParams{Temperature: 1, TopP: topp}
		a := tensor.Float64s(s.Keep(filterLogprobs(&s, lp, p, true).MustIsinf(false)))
		before := tensor.TransferCount()
		b := s.Keep(filterLogprobs(&s, lp, p, false).MustIsinf(false))
		if n := tensor.TransferCount().Sub(before).Syncs(); n != 0 {
			t.Errorf("top_p %g without the host branch made %d host transfers", topp, n)
		}
		if d := tensor.MaxAbsDiff(a, tensor.Float64s(b)); d != 0 {
			t.Errorf("top_p %g: the masks differ", topp)
		}
	}
}
