// The fused kernels of the model's forward and of decoding (csrc/fused.cpp,
// csrc/decode.cpp drive them; the CUDA versions are in csrc/cuda/fused.cu).
// Plain C++ like logprob_cuda.h: raw pointers, no ATen or CUDA types, so g++
// and nvcc share it. Every CUDA function runs asynchronously on the given
// stream, reads every integer it needs from device memory (so a CUDA graph
// can replay it), and throws std::runtime_error on a launch error.
//
// Rounding: each kernel rounds to the element type wherever the ATen
// composition it replaces does (one rounding per ATen op), with products
// and sums never contracted into fused multiply-adds, so RoPE and the KV
// write are bit for bit the composition and the norm and SwiGLU differ from
// it only by their reductions and exp.
#ifndef LANPO_FUSED_CUDA_H
#define LANPO_FUSED_CUDA_H

#include <cstdint>

namespace lanpo {
namespace cuda {

// Element type of a kernel's tensors. Statistics are fp32 (fp64 for kF64).
enum class Elem { kF32 = 0, kBF16 = 1, kF16 = 2, kF64 = 3 };

// y = w · round(h · rstd), rstd = 1/sqrt(mean(h²) + eps), per row of h [rows,
// n], where h = round(x + res) when res is not null (then written to h_out)
// and h = x otherwise. rstd (fp32; fp64 for kF64) is written per row.
void add_rms_norm(void *stream, Elem dt, const void *x, const void *res, const void *w, int64_t rows, int64_t n,
                  double eps, void *y, void *h_out, void *rstd);

// One tensor of a RoPE launch: x [B, T, heads, D] read through strides
// xs (elements, in that order), plus bias [heads·D] when not null, rotated
// when rotate (else only the bias is added), written to y through strides ys;
// with at_slot, y's time index is t + *slot (a KV-cache write at a slot the
// device holds), or, when *slot < 0, the row's position pos[b, t] (slots
// decoding: each row's cache holds its own positions).
struct RopeJob {
  const void *x;
  int64_t xs[4];
  const void *bias;
  void *y;
  int64_t ys[4];
  int64_t heads;
  bool rotate;
  bool at_slot;
  int64_t yt;  // y's time extent when > 0: a write outside it is skipped (a cache's slots)
};

// Rotates each job's x at positions pos [B, T] (int64) with the tables cos,
// sin [P, D] (fp32, cast to the element type as transformers does):
// y = x·cos + rotate_half(x)·(sin_sign·sin). sin_sign −1 is the backward.
// slot is read only by jobs with at_slot. The tables have positions rows; a
// position outside them is clamped (the callers check lengths on the host:
// a device-side assert would end the CUDA context).
void rope(void *stream, Elem dt, const RopeJob *jobs, int n_jobs, const float *cos, const float *sin,
          const int64_t *pos, int64_t positions, int64_t b, int64_t t, int64_t d, float sin_sign, const int64_t *slot);

// y = round(silu(g)) · u, elementwise over n elements.
void swiglu(void *stream, Elem dt, const void *g, const void *u, int64_t n, void *y);

// The block size of the sampler's inverse CDF and the lanes that sum a block:
// lane l of block j sums elements j·kBlock + l + kLanes·i for i = 0, 1, … in
// order, and the block's sum is its lanes' sums added in lane order, all in
// fp64. The host reference (model/sample.go) adds in the same order.
constexpr int64_t kBlock = 1024;
constexpr int64_t kLanes = 32;

// One decode step's draw for rows [rows, v]: with greedy the first index of
// the largest pick[r]; otherwise the inverse CDF of pick[r] (unnormalized
// probabilities, fp32, 0 for removed tokens) at u[r, col]·total, where col =
// ctr[0] and u is [rows, ldu] fp64. It records the token and lp[r, token]
// (fp32 log-probability) as rec[r, col] = token | bits(lp) << 32 (rec [rows,
// ldu] int64), makes the token the next input tok[r], advances pos[r] by one
// and opens the next cache slot for attention: bias[r, ctr[1] + 1] = 0, or
// bias[r, pos[r]] (the advanced position) when ctr[1] < 0 (bias [rows, tmax]
// in bias_dt; skipped past tmax or when bias is null).
void sample(void *stream, const float *pick, const float *lp, int64_t rows, int64_t v, bool greedy, const double *u,
            int64_t ldu, const int64_t *ctr, int64_t *tok, int64_t *pos, void *bias, Elem bias_dt, int64_t tmax,
            int64_t *rec);

}  // namespace cuda
}  // namespace lanpo

#endif
