// What csrc/fused.cpp shares with csrc/decode.cpp (never seen by Go).
#pragma once

#include <vector>

#include "bridge.h"
#include "fused_cuda.h"

namespace lanpo {

// The kernels' element type for a dtype (an error for others).
cuda::Elem elem_of(at::ScalarType t);

// Fails unless t is on the CPU (a CUDA tensor in a build without CUDA).
void check_cpu(const at::Tensor &t);

// The current CUDA stream of t's device (an error on a build without CUDA).
void *cuda_stream(const at::Tensor &t);

// A RoPE job reading x [B, T, heads·D] (+ bias) into y, which is [B, heads,
// T', D] when y_bhtd, else [B, T, heads·D].
cuda::RopeJob rope_job(const at::Tensor &x, const at::Tensor &bias, const at::Tensor &y, int64_t heads, int64_t d,
                       bool rotate, bool y_bhtd);

// Runs jobs at positions pos [B, T] on like's device and dtype; slot, when
// defined, is a one-element int64 tensor on that device added to y's time
// index.
void rope_launch(const at::Tensor &like, const std::vector<cuda::RopeJob> &jobs, const at::Tensor &cos,
                 const at::Tensor &sin, const at::Tensor &pos, float sin_sign, const at::Tensor &slot);

}  // namespace lanpo
