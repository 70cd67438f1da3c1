package csrc

/*
#include "lanpo.h"
*/
import "C"

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Synchronize waits for queued CUDA work; a no-op on CPU.
func Synchronize() error { return takeError(C.lanpo_synchronize()) }

// LogProbBench configures BenchLogProb.
type LogProbBench struct {
	N, H, V int64
	Grad    bool        // forward + backward instead of forward only
	Chunk   int64       // 0: the device default
	DType   gotch.DType // of hidden and weight
	Device  gotch.Device
	Reps    int // timed repetitions after one warm-up; the median is reported
	Seed    int64
	// TopK > 0 measures SDPO's pair instead: a teacher's K most likely
	// tokens (FusedTopKLogProb) and the log-probs at them
	// (FusedGatherLogProb, with Grad differentiable) against full logits,
	// log_softmax, topk and gather.
	TopK int64
}

// LogProbBenchResult is what `lanpo bench logprob` prints.
type LogProbBenchResult struct {
	N           int64   `json:"n"`
	H           int64   `json:"h"`
	V           int64   `json:"v"`
	DType       string  `json:"dtype"`
	Device      string  `json:"device"`
	Grad        bool    `json:"grad"`
	Chunk       int64   `json:"chunk"`
	TopK        int64   `json:"topk,omitempty"`
	FusedMS     float64 `json:"fused_ms"`
	NaiveMS     float64 `json:"naive_ms"`
	FusedPeakMB float64 `json:"fused_peak_mb"`
	NaivePeakMB float64 `json:"naive_peak_mb"`
	PeakSource  string  `json:"peak_source"`
	MaxAbsErr   float64 `json:"max_abs_err"`
	// MaxAbsGradErr compares dhidden (with Grad).
	MaxAbsGradErr float64 `json:"max_abs_grad_err,omitempty"`
	SpeedRatio    float64 `json:"naive_over_fused_time"`
	PeakRatio     float64 `json:"fused_over_naive_peak"`
	// TFLOPS counts 2NHV per logits GEMM: 2 GEMMs' worth forward… see FLOPs.
	FusedTFLOPS float64 `json:"fused_tflops"`
	NaiveTFLOPS float64 `json:"naive_tflops"`
}

// BenchLogProb measures FusedLogProb against the naive computation (full
// fp32 logits, log_softmax, gather; autograd for the backward) in the same
// process on the same data. Peak memory is the CUDA allocator's peak on
// CUDA and the process's peak resident set (VmHWM, reset before each op)
// on CPU, minus what was resident before the op.
func BenchLogProb(cfg LogProbBench) (LogProbBenchResult, error) {
	if cfg.Reps <= 0 {
		cfg.Reps = 3
	}
	cuda := cfg.Device.IsCuda()
	if cfg.Chunk <= 0 {
		cfg.Chunk = DefaultLogProbChunk(cuda)
	}
	res := LogProbBenchResult{N: cfg.N, H: cfg.H, V: cfg.V, DType: DTypeName(cfg.DType), Device: deviceName(cfg.Device),
		Grad: cfg.Grad, Chunk: cfg.Chunk, TopK: cfg.TopK}
	s := &tensor.Scope{}
	defer s.Close()
	if err := ManualSeed(cfg.Seed); err != nil {
		return res, err
	}
	hidden := s.Keep(ts.MustRandn([]int64{cfg.N, cfg.H}, cfg.DType, cfg.Device))
	weight := s.Keep(s.Keep(ts.MustRandn([]int64{cfg.V, cfg.H}, cfg.DType, cfg.Device)).MustDivScalar(s.Float(math.Sqrt(float64(cfg.H))), false))
	targets := s.Keep(ts.MustRandint(cfg.V, []int64{cfg.N}, gotch.Int64, cfg.Device))
	if cfg.Grad {
		hidden = s.Keep(hidden.MustSetRequiresGrad(true, false))
		weight = s.Keep(weight.MustSetRequiresGrad(true, false))
	}

	var fusedLogp, naiveLogp, fusedDh, naiveDh []float64
	run := func(fused, keep bool) error {
		step := &tensor.Scope{}
		defer step.Close()
		var logp *ts.Tensor
		switch {
		case fused && cfg.TopK > 0:
			var ids, tl *ts.Tensor
			err := NoGrad(func() (err error) {
				ids, tl, err = FusedTopKLogProb(hidden, weight, cfg.TopK, VocabOptions{Chunk: cfg.Chunk})
				return err
			})
			if err != nil {
				return err
			}
			step.Keep(ids)
			step.Keep(tl)
			lp, err := FusedGatherLogProb(hidden, weight, ids, VocabOptions{Chunk: cfg.Chunk})
			if err != nil {
				return err
			}
			logp = step.Keep(step.Keep(lp).MustReshape([]int64{-1}, false))
		case fused:
			lp, _, err := FusedLogProb(hidden, weight, targets, LogProbOptions{Chunk: cfg.Chunk})
			if err != nil {
				return err
			}
			logp = step.Keep(lp)
		default:
			h32 := step.Keep(hidden.MustTotype(gotch.Float, false))
			w32 := step.Keep(weight.MustTotype(gotch.Float, false))
			logits := step.Keep(h32.MustMatmul(step.Keep(w32.MustT(false)), false))
			lsm := step.Keep(logits.MustLogSoftmax(-1, gotch.Float, false))
			idx := step.Keep(targets.MustView([]int64{cfg.N, 1}, false))
			if cfg.TopK > 0 {
				vals, top := lsm.MustTopk(cfg.TopK, -1, true, true, false)
				step.Keep(vals)
				step.Keep(top)
				idx = step.Keep(top.MustDetach(false))
			}
			logp = step.Keep(step.Keep(lsm.MustGather(1, idx, false, false)).MustReshape([]int64{-1}, false))
		}
		var dh []float64
		if cfg.Grad {
			step.Keep(logp.MustSum(gotch.Float, false)).MustBackward()
			g := step.Keep(hidden.MustGrad(false))
			if keep {
				dh = tensor.Float64s(g)
			}
			// Reset the accumulated gradients for the next run.
			step.Keep(hidden.MustGrad(false)).MustZero_()
			step.Keep(weight.MustGrad(false)).MustZero_()
		}
		if err := Synchronize(); err != nil {
			return err
		}
		if keep {
			if fused {
				fusedLogp, fusedDh = tensor.Float64s(logp), dh
			} else {
				naiveLogp, naiveDh = tensor.Float64s(logp), dh
			}
		}
		return nil
	}
	measure := func(fused bool) (ms, peakMB float64, err error) {
		if err := run(fused, true); err != nil { // warm-up, and the values compared below
			return 0, 0, err
		}
		var times []float64
		for i := 0; i < cfg.Reps; i++ {
			p := NewPeakMeter(cfg.Device)
			start := time.Now()
			if err := run(fused, false); err != nil {
				return 0, 0, err
			}
			times = append(times, float64(time.Since(start).Microseconds())/1000)
			b, src := p.Peak()
			mb := float64(b) / (1 << 20)
			peakMB = math.Max(peakMB, mb)
			res.PeakSource = src
		}
		sort.Float64s(times)
		return times[len(times)/2], peakMB, nil
	}
	var err error
	if res.FusedMS, res.FusedPeakMB, err = measure(true); err != nil {
		return res, err
	}
	if res.NaiveMS, res.NaivePeakMB, err = measure(false); err != nil {
		return res, err
	}
	res.MaxAbsErr = tensor.MaxAbsDiff(fusedLogp, naiveLogp)
	if cfg.Grad {
		res.MaxAbsGradErr = tensor.MaxAbsDiff(fusedDh, naiveDh)
	}
	res.SpeedRatio = res.NaiveMS / res.FusedMS
	if res.NaivePeakMB > 0 {
		res.PeakRatio = res.FusedPeakMB / res.NaivePeakMB
	}
	// Logit GEMMs: forward 2NHV; backward adds dX and dW (4NHV) and, for
	// the fused op, the recomputation (2NHV).
	flop := 2 * float64(cfg.N*cfg.H*cfg.V)
	fusedFlop, naiveFlop := flop, flop
	if cfg.Grad {
		fusedFlop, naiveFlop = 4*flop, 3*flop
	}
	if cfg.TopK > 0 { // the top-K pass is one more logits GEMM
		fusedFlop += flop
	}
	res.FusedTFLOPS = fusedFlop / (res.FusedMS * 1e-3) / 1e12
	res.NaiveTFLOPS = naiveFlop / (res.NaiveMS * 1e-3) / 1e12
	return res, nil
}

func deviceName(d gotch.Device) string {
	if d.IsCuda() {
		return fmt.Sprintf("cuda:%d", d.Value)
	}
	return "cpu"
}

// ManualSeed seeds libtorch's default generators (CPU and every CUDA device).
func ManualSeed(seed int64) error { return takeError(C.lanpo_manual_seed(C.int64_t(seed))) }

// Backward backpropagates from out with gradient grad (out's shape) into
// every leaf that requires grad, accumulating into its gradient.
func Backward(out, grad *ts.Tensor) error {
	return takeError(C.lanpo_backward(handle(out), handle(grad)))
}

// ClearGrad drops t's accumulated gradient: t.grad becomes undefined and
// its memory is freed (a later backward allocates it anew).
func ClearGrad(t *ts.Tensor) error { return takeError(C.lanpo_clear_grad(handle(t))) }

// EnsureGrad gives t a zero gradient if it has none.
func EnsureGrad(t *ts.Tensor) error { return takeError(C.lanpo_ensure_grad(handle(t))) }

// SetGradEnabled sets autograd's grad mode on the calling OS thread and
// returns the previous mode.
func SetGradEnabled(on bool) bool {
	var prev C.int
	en := C.int(0)
	if on {
		en = 1
	}
	if err := takeError(C.lanpo_set_grad_enabled(en, &prev)); err != nil {
		panic(err) // cannot fail: GradMode is a thread-local flag
	}
	return prev != 0
}
