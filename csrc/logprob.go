package csrc

/*
#include <stdlib.h>
#include "lanpo.h"
*/
import "C"

import (
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// LogProbOptions tunes FusedLogProb. The zero value means temperature 1,
// the device's default chunk, every row, no entropy.
type LogProbOptions struct {
	// Temperature divides the logits (sampling temperature); 0 means 1.
	Temperature float64
	// Chunk is how many rows share one [Chunk, V] logits buffer; 0 picks
	// DefaultLogProbChunk for the device.
	Chunk int64
	// Mask [N] (bool) selects the rows to compute; others get 0 and zero
	// gradient. nil computes every row.
	Mask *ts.Tensor
	// Entropy also returns the entropy of each row's distribution.
	Entropy bool

	// emulateCUDA runs the CUDA path's algorithm (csrc/cuda) on CPU
	// tensors: for tests on machines without a GPU.
	emulateCUDA bool
}

// DefaultLogProbChunk is the chunk FusedLogProb uses when none is given:
// 4096 rows on CUDA, 256 on CPU (a [256, 151936] fp32 buffer is 155 MB).
func DefaultLogProbChunk(cuda bool) int64 {
	c := 0
	if cuda {
		c = 1
	}
	return int64(C.lanpo_default_logprob_chunk(C.int(c)))
}

// ScoringTemperature is the temperature log-probs are recorded and scored
// at for sampling temperature t: t itself, or 1 when sampling is greedy
// (t = 0), where the distribution argmax picked from is the model's own.
// The sampler and every scorer go through it, so their log-probs agree.
func ScoringTemperature(t float64) float64 {
	if t == 0 {
		return 1
	}
	return t
}

// FusedLogProb returns logp[i] = log softmax(hidden[i]·weightᵀ/T)[targets[i]]
// for hidden [N, H], weight [V, H] and targets [N] (int64), and with
// opt.Entropy the entropy of each row's distribution, without materializing
// the [N, V] logits. Outputs are fp32 (fp64 for fp64 inputs). Statistics
// are computed in fp32 from bf16/fp16 inputs. With grad mode on and hidden
// or weight requiring grad, the outputs are differentiable (the backward
// recomputes each chunk's logits); otherwise nothing is kept for backward.
// entropy is nil unless opt.Entropy.
func FusedLogProb(hidden, weight, targets *ts.Tensor, opt LogProbOptions) (logp, entropy *ts.Tensor, err error) {
	t := ScoringTemperature(opt.Temperature)
	var mask C.lanpo_tensor
	if opt.Mask != nil {
		mask = handle(opt.Mask)
	}
	want := C.int(0)
	if opt.Entropy {
		want = 1
	}
	emulate := C.int(0)
	if opt.emulateCUDA {
		emulate = 1
	}
	var lp, ent C.lanpo_tensor
	if err := takeError(C.lanpo_fused_logprob(handle(hidden), handle(weight), handle(targets), mask,
		C.double(t), C.int64_t(opt.Chunk), want, emulate, &lp, &ent)); err != nil {
		return nil, nil, err
	}
	logp = ts.FromCtensor(unsafe.Pointer(lp))
	if opt.Entropy {
		entropy = ts.FromCtensor(unsafe.Pointer(ent))
	}
	return logp, entropy, nil
}

// LogProbKernel names the implementation FusedLogProb takes for parameters
// of dtype on dev: lanpo's CUDA kernels (fp32, bf16, fp16 on a CUDA build),
// or the chunked ATen path (CPU, fp64, or a build without CUDA).
func LogProbKernel(dev gotch.Device, dtype gotch.DType) string {
	if dev.IsCuda() && builtWithCUDA() && (dtype == gotch.Float || dtype == gotch.BFloat16 || dtype == gotch.Half) {
		return "fused CUDA kernels"
	}
	return "fused chunked ATen"
}

func builtWithCUDA() bool {
	info, err := BuildInfo()
	return err == nil && info.BuiltWithCUDA
}

// logProbBLASHandles returns the cuBLAS handle the fused op's last GEMM on
// this thread used and torch's current handle for device; ok is false on a
// build without CUDA.
func logProbBLASHandles(device int) (lastUsed, torchCurrent unsafe.Pointer, ok bool, err error) {
	var sup C.int
	if err = takeError(C.lanpo_logprob_blas_handles(C.int(device), &lastUsed, &torchCurrent, &sup)); err != nil {
		return nil, nil, false, err
	}
	return lastUsed, torchCurrent, sup != 0, nil
}
