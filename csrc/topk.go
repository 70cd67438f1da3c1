package csrc

/*
#include "lanpo.h"
*/
import "C"

import (
	"unsafe"

	"github.com/sugarme/gotch/ts"
)

// VocabOptions are FusedTopKLogProb's and FusedGatherLogProb's:
// LogProbOptions' temperature, chunk and mask (Entropy is not used).
type VocabOptions = LogProbOptions

// FusedTopKLogProb returns, for hidden [N, H] and weight [V, H], the k most
// likely tokens of each row of softmax(hidden·weightᵀ/T) — ids [N, k] int64
// and their log-probs [N, k] (fp32; fp64 for fp64 inputs), largest first —
// without materializing the [N, V] logits (topk.cpp). Masked rows give ids
// and log-probs 0. No gradient: a teacher's distribution for distillation.
func FusedTopKLogProb(hidden, weight *ts.Tensor, k int64, opt VocabOptions) (ids, logp *ts.Tensor, err error) {
	var mask C.lanpo_tensor
	if opt.Mask != nil {
		mask = handle(opt.Mask)
	}
	var i, l C.lanpo_tensor
	if err := takeError(C.lanpo_fused_topk_logprob(handle(hidden), handle(weight), mask, C.double(ScoringTemperature(opt.Temperature)),
		C.int64_t(opt.Chunk), C.int64_t(k), &i, &l)); err != nil {
		return nil, nil, err
	}
	return ts.FromCtensor(unsafe.Pointer(i)), ts.FromCtensor(unsafe.Pointer(l)), nil
}

// FusedGatherLogProb returns logp [N, K] = log softmax(hidden·weightᵀ/T) at
// ids [N, K] (int64, every id in [0, V)), 0 for masked rows, without
// materializing the logits; differentiable in hidden and weight when grad
// mode is on and either requires grad (the weight's gradient is skipped
// when it does not): a student's log-probs at a teacher's tokens.
func FusedGatherLogProb(hidden, weight, ids *ts.Tensor, opt VocabOptions) (*ts.Tensor, error) {
	var mask C.lanpo_tensor
	if opt.Mask != nil {
		mask = handle(opt.Mask)
	}
	var l C.lanpo_tensor
	if err := takeError(C.lanpo_fused_gather_logprob(handle(hidden), handle(weight), handle(ids), mask, C.double(ScoringTemperature(opt.Temperature)),
		C.int64_t(opt.Chunk), &l)); err != nil {
		return nil, err
	}
	return ts.FromCtensor(unsafe.Pointer(l)), nil
}
