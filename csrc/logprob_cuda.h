// CUDA pieces of the fused log-prob op (csrc/logprob.cpp drives them chunk by
// chunk). This header is plain C++: raw device pointers, no ATen and no CUDA
// types, so logprob.cpp (g++) and logprob.cu (nvcc) share it without either
// seeing the other's headers. Every function runs asynchronously on the
// given stream and throws std::runtime_error on a launch or cuBLAS error.
//
// GEMMs run on the cuBLAS handle the caller passes (blas, a cublasHandle_t):
// torch's own for the current device and stream
// (at::cuda::getCurrentCUDABlasHandle()), which is bound to that stream and
// whose workspace comes from torch's caching allocator — so the op's memory
// shows in torch's statistics and no second handle holds a workspace of its
// own.
//
// Layouts are row-major, as torch stores tensors: a [rows, cols] matrix with
// row stride ld (elements).
#ifndef LANPO_CUDA_LOGPROB_H
#define LANPO_CUDA_LOGPROB_H

#include <cstdint>

namespace lanpo {
namespace cuda {

// Element type of hidden and weight (both the same) and of dZ for the
// gradient GEMMs.
enum class DType { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// z[c, V] (fp32, row stride ldz) = x[c, H] · w[V, H]ᵀ, accumulated in fp32.
// allow_tf32 lets fp32 inputs use TF32 tensor cores (torch's
// allow_tf32 setting for cuBLAS); bf16/fp16 always use tensor cores.
void logits(void *stream, void *blas, DType dt, bool allow_tf32, const void *x, const void *w, int64_t c, int64_t h,
            int64_t v, float *z, int64_t ldz);

// One pass over each row of z (raw logits, divided by temperature here):
// logp[r] = z[r, tgt[r]]/T − lse[r], lse[r] = log Σ exp(z[r]/T), and
// entropy[r] = lse − Σ p·z/T when entropy is not null. All fp32.
void forward_stats(void *stream, const float *z, int64_t ldz, int64_t c, int64_t v, const int64_t *tgt, float inv_t,
                   float *logp, float *lse, float *entropy);

// Turns each row of z (raw logits) into dL/d(x·Wᵀ) in place, for upstream
// gradients g_logp (may be null: zero) and g_ent (null: no entropy term;
// then entropy may be null too):
//   dz = (g_logp·(onehot(tgt) − p) − g_ent·p·(log p + H)) / T.
// For out = kFloat32 the result stays in z. For bf16/fp16 the result is
// written packed at the start of each row's own bytes: row r of dZ begins
// where row r of z begins and dZ's row stride is 2·ldz elements of the
// 16-bit type. No second buffer is needed.
void logits_grad(void *stream, float *z, int64_t ldz, int64_t c, int64_t v, const int64_t *tgt, float inv_t,
                 const float *lse, const float *entropy, const float *g_logp, const float *g_ent, DType out);

// dx[c, H] (type dt, row stride h) = dz[c, V] · w[V, H], fp32 accumulation.
void grad_input(void *stream, void *blas, DType dt, bool allow_tf32, const void *dz, int64_t lddz, const void *w,
                int64_t c, int64_t h, int64_t v, void *dx);

// dw[V, H] (fp32) += dz[c, V]ᵀ · x[c, H], fp32 accumulation.
void grad_weight_acc(void *stream, void *blas, DType dt, bool allow_tf32, const void *dz, int64_t lddz, const void *x,
                     int64_t c, int64_t h, int64_t v, float *dw);

// The cuBLAS handle of the last GEMM this thread ran (tests check it is
// torch's).
void *last_blas_handle();

}  // namespace cuda
}  // namespace lanpo

#endif
