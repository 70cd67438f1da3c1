// CUDA kernels of the fused forward and of decoding; fused_cuda.h has the
// contract, csrc/fused.cpp and csrc/decode.cpp the CPU versions these follow
// step for step. Products and sums use the _rn intrinsics, which nvcc never
// contracts into fused multiply-adds, so each rounds where the CPU code (and
// the ATen composition) rounds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "fused_cuda.h"

namespace lanpo {
namespace cuda {
namespace {

void check_launch(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

cudaStream_t as_stream(void *s) { return static_cast<cudaStream_t>(s); }

// Element ↔ statistics type (fp32, fp64 for double).
template <typename T>
struct Num {
  using Acc = float;
  __device__ static float load(T v) { return static_cast<float>(v); }
  __device__ static T store(float v) { return static_cast<T>(v); }
};
template <>
struct Num<__nv_bfloat16> {
  using Acc = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct Num<__half> {
  using Acc = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Num<double> {
  using Acc = double;
  __device__ static double load(double v) { return v; }
  __device__ static double store(double v) { return v; }
};

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }

// The value rounded to T and back: one ATen op's rounding.
template <typename T>
__device__ __forceinline__ typename Num<T>::Acc rnd(typename Num<T>::Acc v) {
  return Num<T>::load(Num<T>::store(v));
}

template <typename Acc>
__device__ Acc block_sum(Acc v, Acc *shared) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : Acc(0);
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

// ---- RMSNorm (+ residual): one block per row ----

template <typename T>
__global__ void add_rms_norm_kernel(const T *__restrict__ x, const T *__restrict__ res, const T *__restrict__ w,
                                    int64_t n, double eps, T *__restrict__ y, T *__restrict__ h_out,
                                    typename Num<T>::Acc *__restrict__ rstd) {
  using Acc = typename Num<T>::Acc;
  __shared__ Acc part[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * n;
  Acc ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    Acc v = Num<T>::load(xr[i]);
    if (res != nullptr) {
      T h = Num<T>::store(add(v, Num<T>::load(res[r * n + i])));
      h_out[r * n + i] = h;
      v = Num<T>::load(h);
    }
    ss = add(ss, mul(v, v));
  }
  ss = block_sum(ss, part);
  Acc rs = Acc(1) / sqrt(ss / static_cast<Acc>(n) + static_cast<Acc>(eps));
  if (threadIdx.x == 0) rstd[r] = rs;
  const T *hr = res != nullptr ? h_out + r * n : xr;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    Acc normed = rnd<T>(mul(Num<T>::load(hr[i]), rs));
    y[r * n + i] = Num<T>::store(mul(Num<T>::load(w[i]), normed));
  }
}

// ---- RoPE: one thread per (job, b, t, head, k < D/2) ----

struct RopeJobs {
  RopeJob j[3];
  int64_t start[4];  // first item of each job, then the total
  int n;
};

template <typename T>
__global__ void rope_kernel(RopeJobs jobs, const float *__restrict__ cos, const float *__restrict__ sin,
                            const int64_t *__restrict__ pos, int64_t positions, int64_t b, int64_t t, int64_t d,
                            float sin_sign, const int64_t *__restrict__ slot) {
  using Acc = typename Num<T>::Acc;
  const int64_t half = d / 2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < jobs.start[jobs.n];
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int ji = 0;
    while (i >= jobs.start[ji + 1]) ji++;
    const RopeJob &job = jobs.j[ji];
    int64_t item = i - jobs.start[ji];
    int64_t k = item % half, rest = item / half;
    int64_t h = rest % job.heads, ti = (rest / job.heads) % t, bi = rest / (job.heads * t);
    const T *xr = static_cast<const T *>(job.x) + bi * job.xs[0] + ti * job.xs[1] + h * job.xs[2];
    const T *bias = static_cast<const T *>(job.bias);
    int64_t ty = ti;
    if (job.at_slot && slot != nullptr) ty = *slot < 0 ? pos[bi * t + ti] : ti + *slot;  // < 0: each row at its position
    if (job.yt > 0 && (ty < 0 || ty >= job.yt)) continue;  // never outside the cache (the host keeps positions inside)
    T *yr = static_cast<T *>(job.y) + bi * job.ys[0] + ty * job.ys[1] + h * job.ys[2];
    Acc x1 = Num<T>::load(xr[k * job.xs[3]]), x2 = Num<T>::load(xr[(k + half) * job.xs[3]]);
    if (bias != nullptr) {
      x1 = rnd<T>(add(x1, Num<T>::load(bias[h * d + k])));
      x2 = rnd<T>(add(x2, Num<T>::load(bias[h * d + k + half])));
    }
    if (!job.rotate) {
      yr[k * job.ys[3]] = Num<T>::store(x1);
      yr[(k + half) * job.ys[3]] = Num<T>::store(x2);
      continue;
    }
    int64_t p = pos[bi * t + ti];
    p = p < 0 ? 0 : (p >= positions ? positions - 1 : p);
    Acc c1 = rnd<T>(static_cast<Acc>(cos[p * d + k])), c2 = rnd<T>(static_cast<Acc>(cos[p * d + k + half]));
    Acc s1 = rnd<T>(static_cast<Acc>(sin_sign * sin[p * d + k]));
    Acc s2 = rnd<T>(static_cast<Acc>(sin_sign * sin[p * d + k + half]));
    Acc a1 = rnd<T>(mul(x1, c1)), b1 = rnd<T>(mul(-x2, s1));
    Acc a2 = rnd<T>(mul(x2, c2)), b2 = rnd<T>(mul(x1, s2));
    yr[k * job.ys[3]] = Num<T>::store(add(a1, b1));
    yr[(k + half) * job.ys[3]] = Num<T>::store(add(a2, b2));
  }
}

// ---- SwiGLU ----

__device__ __forceinline__ float exp_of(float v) { return expf(v); }
__device__ __forceinline__ double exp_of(double v) { return exp(v); }

template <typename T>
__global__ void swiglu_kernel(const T *__restrict__ g, const T *__restrict__ u, int64_t n, T *__restrict__ y) {
  using Acc = typename Num<T>::Acc;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc gv = Num<T>::load(g[i]);
    Acc silu = rnd<T>(gv / add(Acc(1), exp_of(-gv)));
    y[i] = Num<T>::store(mul(silu, Num<T>::load(u[i])));
  }
}

// ---- The sampler: one block per row ----

constexpr int kSampleThreads = 256;

// The first index of the largest value, as the CPU's loop finds it: NaNs
// are never larger, and a NaN at index 0 stays the answer.
__device__ int64_t argmax_first(const float *p, int64_t v, float *sv, int64_t *si) {
  float best = -INFINITY;
  int64_t at = -1;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    float x = p[i];
    if (x == x && (at < 0 || x > best)) best = x, at = i;
  }
  sv[threadIdx.x] = best;
  si[threadIdx.x] = at;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < static_cast<int>(blockDim.x); k++) {
      if (si[k] < 0) continue;
      if (si[0] < 0 || sv[k] > sv[0] || (sv[k] == sv[0] && si[k] < si[0])) sv[0] = sv[k], si[0] = si[k];
    }
    if (p[0] != p[0] || si[0] < 0) si[0] = 0;
  }
  __syncthreads();
  return si[0];
}

__global__ void sample_kernel(const float *__restrict__ pick, const float *__restrict__ lp, int64_t v, bool greedy,
                              const double *__restrict__ u, int64_t ldu, const int64_t *__restrict__ ctr,
                              int64_t *__restrict__ tok, int64_t *__restrict__ pos, void *bias, int bias_size,
                              int64_t tmax, int64_t *__restrict__ rec) {
  extern __shared__ double sums[];  // one per block of kBlock entries
  __shared__ float sv[kSampleThreads];
  __shared__ int64_t si[kSampleThreads];
  __shared__ int64_t chosen;
  const int64_t r = blockIdx.x, col = ctr[0], slot = ctr[1];
  const float *p = pick + r * v;
  if (greedy) {
    int64_t t = argmax_first(p, v, sv, si);
    if (threadIdx.x == 0) chosen = t;
  } else {
    const int64_t nb = (v + kBlock - 1) / kBlock;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int64_t j = warp; j < nb; j += warps) {
      double s = 0;
      for (int64_t i = j * kBlock + lane, end = imin(v, (j + 1) * kBlock); i < end; i += kLanes) {
        s = __dadd_rn(s, static_cast<double>(p[i]));
      }
      double blk = 0;  // the lanes' sums in lane order
      for (int l = 0; l < kLanes; l++) blk = __dadd_rn(blk, __shfl_sync(0xffffffffu, s, l));
      if (lane == 0) sums[j] = blk;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double total = 0;
      for (int64_t j = 0; j < nb; j++) total = __dadd_rn(total, sums[j]);
      double target = __dmul_rn(u[r * ldu + col], total), cum = 0;
      int64_t b = -1;
      for (int64_t j = 0; j < nb; j++) {
        double x = sums[j];
        if (x > 0) {
          b = j;
          if (__dadd_rn(cum, x) >= target) break;
        }
        cum = __dadd_rn(cum, x);
      }
      int64_t t = -1;
      if (b >= 0) {
        double remain = __dadd_rn(target, -cum), c = 0;
        for (int64_t i = b * kBlock, end = imin(v, (b + 1) * kBlock); i < end; i++) {
          double x = static_cast<double>(p[i]);
          if (!(x > 0)) continue;
          t = i;
          c = __dadd_rn(c, x);
          if (c >= remain) break;
        }
      }
      chosen = t;
    }
    __syncthreads();
    if (chosen < 0) {  // no mass at all (NaN logits): the argmax, never an invalid id
      int64_t t = argmax_first(p, v, sv, si);
      if (threadIdx.x == 0) chosen = t;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t t = chosen;
    float l = lp[r * v + t];
    uint32_t bits = __float_as_uint(l);
    rec[r * ldu + col] = static_cast<int64_t>((static_cast<uint64_t>(bits) << 32) | static_cast<uint32_t>(t));
    tok[r] = t;
    pos[r] += 1;
    const int64_t open = slot < 0 ? pos[r] : slot + 1;  // slot < 0: each row's slot is its position
    if (bias != nullptr && open >= 0 && open < tmax) {
      char *at = static_cast<char *>(bias) + (r * tmax + open) * bias_size;
      for (int k = 0; k < bias_size; k++) at[k] = 0;  // +0.0 in every float type
    }
  }
}

int blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 8 ? (b < 1 ? 1 : b) : 65535 * 8);
}

// for_elem calls go with a value of dt's element type (its tag).
template <class F>
void for_elem(Elem dt, F &&go) {
  switch (dt) {
    case Elem::kF32:
      go(float{});
      break;
    case Elem::kBF16:
      go(__nv_bfloat16{});
      break;
    case Elem::kF16:
      go(__half{});
      break;
    case Elem::kF64:
      go(double{});
      break;
  }
}

int elem_size(Elem e) {
  switch (e) {
    case Elem::kF32:
      return 4;
    case Elem::kF64:
      return 8;
    default:
      return 2;
  }
}

}  // namespace

void add_rms_norm(void *stream, Elem dt, const void *x, const void *res, const void *w, int64_t rows, int64_t n,
                  double eps, void *y, void *h_out, void *rstd) {
  if (rows == 0) return;
  int threads = n >= 1024 ? 1024 : 256;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    add_rms_norm_kernel<T><<<static_cast<unsigned>(rows), threads, 0, as_stream(stream)>>>(
        static_cast<const T *>(x), static_cast<const T *>(res), static_cast<const T *>(w), n, eps, static_cast<T *>(y),
        static_cast<T *>(h_out), static_cast<typename Num<T>::Acc *>(rstd));
  };
  for_elem(dt, go);
  check_launch("add_rms_norm");
}

void rope(void *stream, Elem dt, const RopeJob *jobs, int n_jobs, const float *cos, const float *sin,
          const int64_t *pos, int64_t positions, int64_t b, int64_t t, int64_t d, float sin_sign, const int64_t *slot) {
  if (n_jobs < 1 || n_jobs > 3) throw std::runtime_error("rope: 1 to 3 jobs per launch, got " + std::to_string(n_jobs));
  RopeJobs js{};
  js.n = n_jobs;
  for (int i = 0; i < n_jobs; i++) {
    js.j[i] = jobs[i];
    js.start[i + 1] = js.start[i] + b * t * jobs[i].heads * (d / 2);
  }
  if (js.start[n_jobs] == 0) return;
  const int threads = 256;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<blocks_for(js.start[n_jobs], threads), threads, 0, as_stream(stream)>>>(js, cos, sin, pos, positions,
                                                                                             b, t, d, sin_sign, slot);
  };
  for_elem(dt, go);
  check_launch("rope");
}

void swiglu(void *stream, Elem dt, const void *g, const void *u, int64_t n, void *y) {
  if (n == 0) return;
  const int threads = 256;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    swiglu_kernel<T><<<blocks_for(n, threads), threads, 0, as_stream(stream)>>>(
        static_cast<const T *>(g), static_cast<const T *>(u), n, static_cast<T *>(y));
  };
  for_elem(dt, go);
  check_launch("swiglu");
}

void sample(void *stream, const float *pick, const float *lp, int64_t rows, int64_t v, bool greedy, const double *u,
            int64_t ldu, const int64_t *ctr, int64_t *tok, int64_t *pos, void *bias, Elem bias_dt, int64_t tmax,
            int64_t *rec) {
  if (rows == 0) return;
  size_t shared = greedy ? 0 : static_cast<size_t>((v + kBlock - 1) / kBlock) * sizeof(double);
  sample_kernel<<<static_cast<unsigned>(rows), kSampleThreads, shared, as_stream(stream)>>>(
      pick, lp, v, greedy, u, ldu, ctr, tok, pos, bias, elem_size(bias_dt), tmax, rec);
  check_launch("sample");
}

}  // namespace cuda
}  // namespace lanpo
