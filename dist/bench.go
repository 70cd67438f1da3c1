package dist

import (
	"fmt"
	"slices"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// AllReduceResult is one message size of BenchAllReduce. Times are medians
// over iterations of the slowest rank's time in each iteration (a
// collective is as slow as its slowest rank).
type AllReduceResult struct {
	Bytes     int64   `json:"bytes"`
	Iters     int     `json:"iters"`
	LatencyUS float64 `json:"latency_us"`
	// AlgBW is bytes / time; BusBW is AlgBW · 2(n−1)/n, the traffic each
	// rank's link carries in a ring allreduce (nccl-tests' definition), so
	// it can be compared across world sizes and with a link's bandwidth.
	AlgBW float64 `json:"algbw_gbs"`
	BusBW float64 `json:"busbw_gbs"`
	// CopyUS and CopyBW are the baseline: a tensor copy_ of the same bytes
	// on the same device, timed the same way (bytes / time: each byte read
	// once and written once).
	CopyUS float64 `json:"copy_us"`
	CopyBW float64 `json:"copy_gbs"`
	Ratio  float64 `json:"busbw_over_copy"`
}

// AllReduceBench is what BenchAllReduce measured.
type AllReduceBench struct {
	World     int               `json:"world"`
	Device    string            `json:"device"`
	Sizes     []AllReduceResult `json:"sizes"`
	BarrierUS float64           `json:"barrier_us"` // median, slowest rank
	Barriers  int               `json:"barriers"`
}

// BenchAllReduce times AllReduceSum of fp32 tensors of each size (bytes,
// multiples of 4) and a copy_ of the same size, and Barrier. Every rank
// must call it with the same sizes; all ranks get the same result.
func BenchAllReduce(c Comm, sizes []int64, device gotch.Device) (r AllReduceBench, err error) {
	defer tensor.Recover("bench allreduce", &err)
	r = AllReduceBench{World: c.Size(), Device: "cpu (gloo)"}
	if device.IsCuda() {
		r.Device = fmt.Sprintf("cuda:%d (nccl)", device.Value)
	}
	n := float64(c.Size())
	for _, bytes := range sizes {
		if bytes < 4 || bytes%4 != 0 {
			return r, fmt.Errorf("bench allreduce: size %d bytes is not a positive multiple of 4 (fp32)", bytes)
		}
		iters := int(min(100, max(5, (256<<20)/bytes)))
		var s tensor.Scope
		x := s.Keep(ts.MustOnes([]int64{bytes / 4}, gotch.Float, device))
		y := s.Keep(ts.MustZeros([]int64{bytes / 4}, gotch.Float, device))
		ar, err := timeOp(c, iters, device, func() error { return c.AllReduceSum(x) })
		if err != nil {
			s.Close()
			return r, err
		}
		cp, err := timeOp(c, iters, device, func() error { y.Copy_(x); return nil })
		s.Close()
		if err != nil {
			return r, err
		}
		res := AllReduceResult{Bytes: bytes, Iters: iters, LatencyUS: ar, CopyUS: cp}
		res.AlgBW = float64(bytes) / ar / 1e3 // bytes/µs → GB/s
		res.BusBW = res.AlgBW * 2 * (n - 1) / n
		res.CopyBW = float64(bytes) / cp / 1e3
		res.Ratio = res.BusBW / res.CopyBW
		r.Sizes = append(r.Sizes, res)
	}
	r.Barriers = 200
	r.BarrierUS, err = timeOp(c, r.Barriers, device, c.Barrier)
	return r, err
}

// timeOp runs op twice to warm up, then iters times after a barrier, each
// timed on its own (the device synchronized before the clock is read), and
// returns the median over iterations of the slowest rank's µs.
func timeOp(c Comm, iters int, device gotch.Device, op func() error) (float64, error) {
	sync := func() error {
		if device.IsCuda() {
			return csrc.Synchronize()
		}
		return nil
	}
	for i := 0; i < 2; i++ {
		if err := op(); err != nil {
			return 0, err
		}
	}
	if err := sync(); err != nil {
		return 0, err
	}
	if err := c.Barrier(); err != nil {
		return 0, err
	}
	us := make([]float64, iters)
	for i := range us {
		start := time.Now()
		if err := op(); err != nil {
			return 0, err
		}
		if err := sync(); err != nil {
			return 0, err
		}
		us[i] = float64(time.Since(start).Nanoseconds()) / 1e3
	}
	all, err := AllGatherFloat64s(c, us)
	if err != nil {
		return 0, err
	}
	slowest := make([]float64, iters)
	for _, rank := range all {
		if len(rank) != iters {
			return 0, fmt.Errorf("bench: a rank timed %d iterations, this one %d", len(rank), iters)
		}
		for i, v := range rank {
			slowest[i] = max(slowest[i], v)
		}
	}
	slices.Sort(slowest)
	return slowest[iters/2], nil
}
