// CUDA kernels and cuBLAS GEMMs of the fused log-prob op; see
// logprob_cuda.h for the contract and csrc/logprob.cpp for the chunk loop.
//
// Per row of a chunk, with y = z/T:
//   forward:  one read of the row keeps a running (max m, S = Σ e^(y−m),
//             A = Σ e^(y−m)·(y−m)); lse = m + log S and entropy
//             H = log S − A/S. A is kept relative to the running max, so H
//             does not lose digits to cancellation when logits are large.
//   backward: one read and one write of the row turn logits into dZ.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "logprob_cuda.h"
#include "logprob_math.h"

namespace lanpo {
namespace cuda {
namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void check(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
  }
}

int as_int(int64_t x, const char *name) {
  if (x < 0 || x > INT_MAX) throw std::runtime_error(std::string("fused logprob: ") + name + " = " + std::to_string(x) + " does not fit cuBLAS's int");
  return static_cast<int>(x);
}

__device__ __forceinline__ Stats warp_merge(Stats st) {
  for (int off = 16; off > 0; off >>= 1) {
    Stats o{__shfl_xor_sync(0xffffffffu, st.m, off), __shfl_xor_sync(0xffffffffu, st.s, off),
            __shfl_xor_sync(0xffffffffu, st.a, off)};
    st = merge(st, o);
  }
  return st;
}

// One block per row. The merge order is fixed by the thread layout, so the
// result does not depend on scheduling (deterministic).
__global__ void __launch_bounds__(kThreads) forward_stats_kernel(const float *__restrict__ z, int64_t ldz, int64_t v,
                                                                  const int64_t *__restrict__ tgt, float inv_t,
                                                                  float *__restrict__ logp, float *__restrict__ lse,
                                                                  float *__restrict__ entropy) {
  __shared__ Stats part[kWarps];
  const int64_t r = blockIdx.x;
  const float *row = z + r * ldz;
  Stats st = empty_stats();
  for (int64_t j = threadIdx.x; j < v; j += kThreads) add_value(st, row[j] * inv_t);
  st = warp_merge(st);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = st;
  __syncthreads();
  if (warp == 0) {
    st = lane < kWarps ? part[lane] : empty_stats();
    st = warp_merge(st);
    if (lane == 0) row_results(st, row[tgt[r]] * inv_t, logp + r, lse + r, entropy != nullptr ? entropy + r : nullptr);
  }
}

template <typename Out>
__device__ __forceinline__ Out convert(float x);
template <>
__device__ __forceinline__ float convert<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half convert<__half>(float x) {
  return __float2half_rn(x);
}

// One block per row; tiles of kThreads·kPerThread columns. For a 16-bit
// output the row is rewritten packed into the first half of its own bytes:
// a tile's writes only touch bytes of this tile and earlier ones, so one
// barrier between a tile's reads and its writes keeps every read ahead of
// the write that overlaps it.
template <typename Out>
__global__ void __launch_bounds__(kThreads) logits_grad_kernel(float *__restrict__ z, int64_t ldz, int64_t v,
                                                                const int64_t *__restrict__ tgt, float inv_t,
                                                                const float *__restrict__ lse,
                                                                const float *__restrict__ entropy,
                                                                const float *__restrict__ g_logp,
                                                                const float *__restrict__ g_ent) {
  const int64_t r = blockIdx.x;
  float *row = z + r * ldz;
  Out *out = reinterpret_cast<Out *>(row);
  const RowGrad rg = row_grad(r, lse, entropy, g_logp, g_ent);
  const int64_t t = tgt[r];
  constexpr bool in_place = sizeof(Out) == sizeof(float);
  for (int64_t v0 = 0; v0 < v; v0 += kThreads * kPerThread) {
    float d[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      int64_t j = v0 + k * kThreads + threadIdx.x;
      d[k] = j < v ? logit_grad(row[j], inv_t, rg, j == t) : 0.f;
    }
    if (!in_place) __syncthreads();
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      int64_t j = v0 + k * kThreads + threadIdx.x;
      if (j < v) out[j] = convert<Out>(d[k]);
    }
  }
}

cudaDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
  }
  throw std::runtime_error("fused logprob: unknown dtype");
}

thread_local void *last_handle = nullptr;

// Sets the math mode our GEMMs need on torch's handle and puts back what
// torch had when the GEMM is issued: fp32 accumulation without
// reduced-precision split-K reductions for 16-bit inputs.
class MathMode {
 public:
  explicit MathMode(cublasHandle_t h) : h_(h) {
    check(cublasGetMathMode(h_, &old_), "cublasGetMathMode");
    check(cublasSetMathMode(h_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
          "cublasSetMathMode");
  }
  ~MathMode() { cublasSetMathMode(h_, old_); }
  MathMode(const MathMode &) = delete;
  MathMode &operator=(const MathMode &) = delete;

 private:
  cublasHandle_t h_;
  cublasMath_t old_ = CUBLAS_DEFAULT_MATH;
};

cublasComputeType_t compute_type(DType dt, bool allow_tf32) {
  return dt == DType::kFloat32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Runs a GemmSpec with cuBLAS on the operands x, w, dz (by role; unused
// ones may be null): fp32 scalars, fp32 accumulation.
void gemm(void *blas, DType dt, bool allow_tf32, const GemmSpec &g, const void *x, const void *w, const void *dz,
          void *c, cudaDataType_t ct, const char *what) {
  if (g.m == 0 || g.n == 0) return;
  const float alpha = 1.f, beta = g.accumulate ? 1.f : 0.f;
  auto t = data_type(dt);
  const void *a = operand(g.a, x, w, dz), *b = operand(g.b, x, w, dz);
  auto h = static_cast<cublasHandle_t>(blas);
  last_handle = blas;
  MathMode mode(h);
  check(cublasGemmEx(h, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     as_int(g.m, "m"), as_int(g.n, "n"), as_int(g.k, "k"), &alpha, a, t, as_int(g.lda, "lda"), b, t,
                     as_int(g.ldb, "ldb"), &beta, c, ct, as_int(g.ldc, "ldc"), compute_type(dt, allow_tf32),
                     CUBLAS_GEMM_DEFAULT),
        what);
}

}  // namespace

void *last_blas_handle() { return last_handle; }

void logits(void *, void *blas, DType dt, bool allow_tf32, const void *x, const void *w, int64_t c, int64_t h,
            int64_t v, float *z, int64_t ldz) {
  gemm(blas, dt, allow_tf32, logits_gemm(c, h, v, ldz), x, w, nullptr, z, CUDA_R_32F,
       "fused logprob: logits GEMM");
}

void forward_stats(void *stream, const float *z, int64_t ldz, int64_t c, int64_t v, const int64_t *tgt, float inv_t,
                   float *logp, float *lse, float *entropy) {
  if (c == 0) return;
  forward_stats_kernel<<<static_cast<unsigned>(c), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      z, ldz, v, tgt, inv_t, logp, lse, entropy);
  check(cudaGetLastError(), "fused logprob: forward kernel launch");
}

void logits_grad(void *stream, float *z, int64_t ldz, int64_t c, int64_t v, const int64_t *tgt, float inv_t,
                 const float *lse, const float *entropy, const float *g_logp, const float *g_ent, DType out) {
  if (c == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  auto blocks = static_cast<unsigned>(c);
  switch (out) {
    case DType::kFloat32:
      logits_grad_kernel<float><<<blocks, kThreads, 0, s>>>(z, ldz, v, tgt, inv_t, lse, entropy, g_logp, g_ent);
      break;
    case DType::kBFloat16:
      logits_grad_kernel<__nv_bfloat16><<<blocks, kThreads, 0, s>>>(z, ldz, v, tgt, inv_t, lse, entropy, g_logp, g_ent);
      break;
    case DType::kFloat16:
      logits_grad_kernel<__half><<<blocks, kThreads, 0, s>>>(z, ldz, v, tgt, inv_t, lse, entropy, g_logp, g_ent);
      break;
  }
  check(cudaGetLastError(), "fused logprob: backward kernel launch");
}

void grad_input(void *, void *blas, DType dt, bool allow_tf32, const void *dz, int64_t lddz, const void *w,
                int64_t c, int64_t h, int64_t v, void *dx) {
  gemm(blas, dt, allow_tf32, grad_input_gemm(c, h, v, lddz), nullptr, w, dz, dx, data_type(dt),
       "fused logprob: dX GEMM");
}

void grad_weight_acc(void *, void *blas, DType dt, bool allow_tf32, const void *dz, int64_t lddz, const void *x,
                     int64_t c, int64_t h, int64_t v, float *dw) {
  gemm(blas, dt, allow_tf32, grad_weight_gemm(c, h, v, lddz), x, nullptr, dz, dw, CUDA_R_32F,
       "fused logprob: dW GEMM");
}

}  // namespace cuda
}  // namespace lanpo
