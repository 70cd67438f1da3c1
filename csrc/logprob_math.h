// Arithmetic shared by the CUDA kernels (logprob.cu, nvcc) and their CPU
// emulation (logprob.cpp, g++); in csrc/ itself so that Go rebuilds csrc when it changes, so that a test on a machine without a GPU
// runs the kernels' own per-element formulas, reduction order and GEMM
// argument mapping.
#ifndef LANPO_CUDA_LOGPROB_MATH_H
#define LANPO_CUDA_LOGPROB_MATH_H

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define LANPO_HD __host__ __device__ __forceinline__
#else
#define LANPO_HD inline
#endif

namespace lanpo {
namespace cuda {

constexpr int kThreads = 512;  // threads per block; one block per row
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 4;  // elements per thread per tile of the backward pass

// Running softmax statistics of a set of values y: m = max, s = Σ e^(y−m),
// a = Σ e^(y−m)·(y−m). The empty set is m = −inf, s = a = 0.
struct Stats {
  float m, s, a;
};

LANPO_HD Stats empty_stats() { return Stats{-INFINITY, 0.f, 0.f}; }

LANPO_HD void add_value(Stats &st, float y) {
  if (y > st.m) {
    if (st.m == -INFINITY) {
      st.s = 0.f;
      st.a = 0.f;
    } else {
      float d = st.m - y;  // < 0
      float e = expf(d);
      st.a = e * (st.a + d * st.s);
      st.s *= e;
    }
    st.m = y;
  }
  float d = y - st.m;
  float e = expf(d);
  st.s += e;
  st.a += e * d;
}

LANPO_HD Stats merge(Stats x, Stats y) {
  if (y.m == -INFINITY) return x;
  if (x.m == -INFINITY) return y;
  float m = fmaxf(x.m, y.m);
  float dx = x.m - m, dy = y.m - m;
  float ex = expf(dx), ey = expf(dy);
  return Stats{m, ex * x.s + ey * y.s, ex * (x.a + dx * x.s) + ey * (y.a + dy * y.s)};
}

// Row results from the merged statistics and the target's scaled logit.
LANPO_HD void row_results(Stats st, float target_y, float *logp, float *lse, float *entropy) {
  float logs = logf(st.s);
  float l = st.m + logs;
  *lse = l;
  *logp = target_y - l;
  if (entropy != nullptr) *entropy = logs - st.a / st.s;
}

// What the backward needs of row r: its log-sum-exp, the upstream
// gradients (null pointers: 0, and no entropy term) and its entropy.
struct RowGrad {
  float lse, g_logp, g_ent, h;
};

LANPO_HD RowGrad row_grad(int64_t r, const float *lse, const float *entropy, const float *g_logp, const float *g_ent) {
  return RowGrad{lse[r], g_logp != nullptr ? g_logp[r] : 0.f, g_ent != nullptr ? g_ent[r] : 0.f,
                 g_ent != nullptr ? entropy[r] : 0.f};
}

// dL/d(x·Wᵀ) for one logit z (raw, before temperature):
//   (g_logp·(onehot − p) − g_ent·p·(log p + H)) / T.
LANPO_HD float logit_grad(float z, float inv_t, const RowGrad &rg, bool is_target) {
  float lp = z * inv_t - rg.lse;  // log p
  float p = expf(lp);
  float g = -p * (rg.g_logp + rg.g_ent * (lp + rg.h));
  if (is_target) g += rg.g_logp;
  return g * inv_t;
}

// A column-major GEMM C[m, n] = op(A)·op(B) (+ C when accumulate), with A
// and B named by role: which of the op's operands each one is. Both the
// cuBLAS call and its CPU emulation take their pointers through operand().
enum class Operand { kX, kW, kDZ };
struct GemmSpec {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  Operand a, b;
  bool accumulate;
};

LANPO_HD const void *operand(Operand o, const void *x, const void *w, const void *dz) {
  return o == Operand::kX ? x : o == Operand::kW ? w : dz;
}

// Row-major z[c, V] (ld ldz) = x[c, H] · W[V, H]ᵀ is column-major
// zᵀ[V, c] = (W as col-major [H, V])ᵀ · (x as col-major [H, c]).
LANPO_HD GemmSpec logits_gemm(int64_t c, int64_t h, int64_t v, int64_t ldz) {
  return GemmSpec{true, false, v, c, h, h, h, ldz, Operand::kW, Operand::kX, false};
}

// Row-major dx[c, H] = dz[c, V] · W[V, H] is column-major dxᵀ[H, c] =
// (W as col-major [H, V]) · (dz as col-major [V, c], ld lddz).
LANPO_HD GemmSpec grad_input_gemm(int64_t c, int64_t h, int64_t v, int64_t lddz) {
  return GemmSpec{false, false, h, c, v, h, lddz, h, Operand::kW, Operand::kDZ, false};
}

// Row-major dW[V, H] += dzᵀ · x is column-major dWᵀ[H, V] += (x as
// col-major [H, c]) · (dz as col-major [V, c])ᵀ.
LANPO_HD GemmSpec grad_weight_gemm(int64_t c, int64_t h, int64_t v, int64_t lddz) {
  return GemmSpec{false, true, h, v, c, h, lddz, h, Operand::kX, Operand::kDZ, true};
}

}  // namespace cuda
}  // namespace lanpo

#endif
