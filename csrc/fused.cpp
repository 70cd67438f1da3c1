// Fused kernels of the model's forward: RMSNorm with the residual add, RoPE
// on q and k (with the projections' biases and the layout change to [B, H,
// T, D]), SwiGLU. Each is one kernel on CPU (the loops below) and on CUDA
// (csrc/cuda/fused.cu) and takes part in autograd; backward passes are ATen
// compositions (or the RoPE kernel run backwards), since they are off the
// decode path. Each announces itself to RecordFunction observers as one
// operator (lanpo::…), which is how lanpo bench generate counts it.
// Every product and sum rounds on its own, never fused into a multiply-add
// (a compiler may contract them where the CPU has FMA): the kernels round
// where the ATen compositions and the CUDA kernels do.
#pragma GCC optimize("fp-contract=off")

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <type_traits>
#include <cmath>
#include <cstring>
#include <vector>

#include "bridge.h"
#include "fused.h"
#include "fused_cuda.h"

#ifdef LANPO_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lanpo {

cuda::Elem elem_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return cuda::Elem::kF32;
    case at::kBFloat16:
      return cuda::Elem::kBF16;
    case at::kHalf:
      return cuda::Elem::kF16;
    case at::kDouble:
      return cuda::Elem::kF64;
    default:
      TORCH_CHECK(false, "unsupported dtype ", t, " (want float32, bfloat16, float16 or float64)");
  }
}

void check_cpu(const at::Tensor &t) {
  TORCH_CHECK(t.is_cpu(), "tensors on ", t.device(), " need lanpo built with CUDA=1");
}

void *cuda_stream(const at::Tensor &t) {
#ifdef LANPO_CUDA
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
#else
  (void)t;
  TORCH_CHECK(false, "lanpo was built without CUDA");
#endif
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- RMSNorm (+ residual) ----

template <typename T>
void add_rms_norm_cpu(const T *x, const T *res, const T *w, int64_t rows, int64_t n, double eps, T *y, T *h_out,
                      at::opmath_type<T> *rstd) {
  using acc = at::opmath_type<T>;
  at::parallel_for(0, rows, 1, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; r++) {
      const T *xr = x + r * n;
      T *hr = res != nullptr ? h_out + r * n : nullptr;
      double ss = 0;
      for (int64_t i = 0; i < n; i++) {
        acc v = static_cast<acc>(xr[i]);
        if (hr != nullptr) {
          hr[i] = static_cast<T>(v + static_cast<acc>(res[r * n + i]));
          v = static_cast<acc>(hr[i]);
        }
        ss += static_cast<double>(v) * static_cast<double>(v);
      }
      const T *h = hr != nullptr ? hr : xr;
      acc rs = static_cast<acc>(1) / std::sqrt(static_cast<acc>(ss / static_cast<double>(n)) + static_cast<acc>(eps));
      rstd[r] = rs;
      for (int64_t i = 0; i < n; i++) {
        T normed = static_cast<T>(static_cast<acc>(h[i]) * rs);
        y[r * n + i] = static_cast<T>(static_cast<acc>(w[i]) * static_cast<acc>(normed));
      }
    }
  });
}

at::ScalarType acc_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// The kernel: y, the new residual h (undefined without res) and rstd per row.
std::vector<at::Tensor> add_rms_norm_fwd(const at::Tensor &x, const at::Tensor &res, const at::Tensor &w, double eps) {
  RECORD_FUNCTION(res.defined() ? "lanpo::add_rms_norm" : "lanpo::rms_norm", std::vector<c10::IValue>());
  TORCH_CHECK(x.dim() >= 1 && w.dim() == 1 && w.size(0) == x.size(-1), "weight must have shape [", x.size(-1),
              "] to match x ", x.sizes(), ", got ", w.sizes());
  TORCH_CHECK(x.device() == w.device(), "x is on ", x.device(), " but weight is on ", w.device());
  TORCH_CHECK(x.scalar_type() == w.scalar_type(), "x is ", x.scalar_type(), " but weight is ", w.scalar_type());
  TORCH_CHECK(eps >= 0, "eps must be >= 0, got ", eps);
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "x and weight must be contiguous");
  if (res.defined()) {
    TORCH_CHECK(res.sizes() == x.sizes() && res.scalar_type() == x.scalar_type() && res.device() == x.device() &&
                    res.is_contiguous(),
                "residual ", res.sizes(), " ", res.scalar_type(), " must be contiguous and match x ", x.sizes(), " ",
                x.scalar_type());
  }
  int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  auto y = at::empty_like(x);
  auto h = res.defined() ? at::empty_like(x) : at::Tensor();
  auto rstd = at::empty({rows}, x.options().dtype(acc_type(x.scalar_type())));
#ifdef LANPO_CUDA
  if (x.is_cuda()) {
    c10::cuda::CUDAGuard guard(x.device());
    cuda::add_rms_norm(cuda_stream(x), elem_of(x.scalar_type()), x.data_ptr(), res.defined() ? res.data_ptr() : nullptr,
                       w.data_ptr(), rows, n, eps, y.data_ptr(), res.defined() ? h.data_ptr() : nullptr,
                       rstd.data_ptr());
    return {y, h, rstd};
  }
#endif
  check_cpu(x);
  {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "add_rms_norm", [&] {
      add_rms_norm_cpu<scalar_t>(x.data_ptr<scalar_t>(), res.defined() ? res.data_ptr<scalar_t>() : nullptr,
                                 w.data_ptr<scalar_t>(), rows, n, eps, y.data_ptr<scalar_t>(),
                                 res.defined() ? h.data_ptr<scalar_t>() : nullptr,
                                 rstd.data_ptr<at::opmath_type<scalar_t>>());
    });
  }
  return {y, h, rstd};
}

// The gradients of y = w · round(h · r) for h and w, given gy: with n = h·r
// and dn = gy·w, dh = r·(dn − n·mean(dn·n)) and dw = Σ_rows gy·round(n), in
// the statistics' type and cast back.
std::pair<at::Tensor, at::Tensor> rms_norm_bwd(const at::Tensor &h, const at::Tensor &w, const at::Tensor &rstd,
                                               const at::Tensor &gy) {
  auto ct = rstd.scalar_type();
  auto r = rstd.view([&] {
    auto s = h.sizes().vec();
    s.back() = 1;
    return s;
  }());
  auto g = gy.to(ct);
  auto nrm = h.to(ct) * r;
  auto dn = g * w.to(ct);
  auto dh = r * (dn - nrm * (dn * nrm).mean(-1, /*keepdim=*/true));
  auto dw = (g * nrm.to(h.scalar_type()).to(ct)).reshape({-1, nrm.size(-1)}).sum(0);
  return {dh.to(h.scalar_type()), dw.to(w.scalar_type())};
}

struct RMSNormFn : public torch::autograd::Function<RMSNormFn> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &w, double eps) {
    auto out = add_rms_norm_fwd(x, at::Tensor(), w, eps);
    ctx->save_for_backward({x, w, out[2]});
    return out[0];
  }
  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    auto [dx, dw] = rms_norm_bwd(s[0], s[1], s[2], grads[0]);
    return {dx, dw, at::Tensor()};
  }
};

// (y, h) = (rmsnorm(x + res), x + res): h is the residual stream the next
// block adds to, so its gradient joins the norm's.
struct AddRMSNormFn : public torch::autograd::Function<AddRMSNormFn> {
  static variable_list forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &res, const at::Tensor &w,
                               double eps) {
    auto out = add_rms_norm_fwd(x, res, w, eps);
    ctx->save_for_backward({out[1], w, out[2]});
    return {out[0], out[1]};
  }
  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    if (!grads[0].defined()) return {grads[1], grads[1], at::Tensor(), at::Tensor()};  // only h was used
    auto [dh, dw] = rms_norm_bwd(s[0], s[1], s[2], grads[0]);
    if (grads[1].defined()) dh = dh + grads[1];
    return {dh, dh, dw, at::Tensor()};
  }
};

// ---- RoPE ----

template <typename T>
void rope_cpu(const cuda::RopeJob *jobs, int n_jobs, const float *cos, const float *sin, const int64_t *pos,
              int64_t positions, int64_t b, int64_t t, int64_t d, float sin_sign, int64_t slot) {
  using acc = at::opmath_type<T>;
  const int64_t half = d / 2;
  for (int j = 0; j < n_jobs; j++) {
    const auto &job = jobs[j];
    const T *x = static_cast<const T *>(job.x);
    const T *bias = static_cast<const T *>(job.bias);
    T *y = static_cast<T *>(job.y);
    at::parallel_for(0, b * t * job.heads, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; i++) {
        int64_t bi = i / (t * job.heads), ti = (i / job.heads) % t, hi_ = i % job.heads;
        const T *xr = x + bi * job.xs[0] + ti * job.xs[1] + hi_ * job.xs[2];
        // A negative slot: each row writes at its own position (slots decoding).
        const int64_t ty = job.at_slot ? (slot < 0 ? pos[bi * t + ti] : ti + slot) : ti;
        if (job.yt > 0 && (ty < 0 || ty >= job.yt)) continue;  // never outside the cache (checked before on CPU)
        T *yr = y + bi * job.ys[0] + ty * job.ys[1] + hi_ * job.ys[2];
        auto in = [&](int64_t k) -> acc {
          acc v = static_cast<acc>(xr[k * job.xs[3]]);
          if (bias != nullptr) v = static_cast<acc>(static_cast<T>(v + static_cast<acc>(bias[hi_ * d + k])));
          return v;
        };
        if (!job.rotate) {
          for (int64_t k = 0; k < d; k++) yr[k * job.ys[3]] = static_cast<T>(in(k));
          continue;
        }
        const int64_t p = pos[bi * t + ti];
        TORCH_CHECK(p >= 0 && p < positions, "position ", p, " outside the RoPE table's ", positions);
        const float *c = cos + p * d;
        const float *s = sin + p * d;
        for (int64_t k = 0; k < half; k++) {
          acc x1 = in(k), x2 = in(k + half);
          // cos and sin in the element type, as transformers casts them.
          acc c1 = static_cast<acc>(static_cast<T>(c[k])), c2 = static_cast<acc>(static_cast<T>(c[k + half]));
          acc s1 = static_cast<acc>(static_cast<T>(sin_sign * s[k]));
          acc s2 = static_cast<acc>(static_cast<T>(sin_sign * s[k + half]));
          // x·cos + rotate_half(x)·sin, rotate_half(x) = [−x₂, x₁]: one
          // rounding per product and per sum, as the composition.
          acc a1 = static_cast<acc>(static_cast<T>(x1 * c1)), b1 = static_cast<acc>(static_cast<T>(-x2 * s1));
          acc a2 = static_cast<acc>(static_cast<T>(x2 * c2)), b2 = static_cast<acc>(static_cast<T>(x1 * s2));
          yr[k * job.ys[3]] = static_cast<T>(a1 + b1);
          yr[(k + half) * job.ys[3]] = static_cast<T>(a2 + b2);
        }
      }
    });
  }
}

}  // namespace

void rope_launch(const at::Tensor &like, const std::vector<cuda::RopeJob> &jobs, const at::Tensor &cos,
                 const at::Tensor &sin, const at::Tensor &pos, float sin_sign, const at::Tensor &slot) {
  int64_t b = pos.size(0), t = pos.size(1), d = cos.size(1);
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.is_contiguous() &&
                  sin.is_contiguous() && cos.sizes() == sin.sizes() && d % 2 == 0,
              "RoPE tables must be contiguous fp32 [P, D] with D even, got ", cos.sizes(), " ", cos.scalar_type());
  TORCH_CHECK(pos.scalar_type() == at::kLong && pos.dim() == 2 && pos.is_contiguous(),
              "positions must be contiguous int64 [B, T], got ", pos.sizes(), " ", pos.scalar_type());
  TORCH_CHECK(cos.device() == like.device() && pos.device() == like.device(), "RoPE tables and positions must be on ",
              like.device());
#ifdef LANPO_CUDA
  if (like.is_cuda()) {
    c10::cuda::CUDAGuard guard(like.device());
    cuda::rope(cuda_stream(like), elem_of(like.scalar_type()), jobs.data(), static_cast<int>(jobs.size()),
               cos.data_ptr<float>(), sin.data_ptr<float>(), pos.data_ptr<int64_t>(), cos.size(0), b, t, d, sin_sign,
               slot.defined() ? slot.data_ptr<int64_t>() : nullptr);
    return;
  }
#endif
  check_cpu(like);
  int64_t at_slot = slot.defined() ? slot.data_ptr<int64_t>()[0] : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, like.scalar_type(), "rope", [&] {
    rope_cpu<scalar_t>(jobs.data(), static_cast<int>(jobs.size()), cos.data_ptr<float>(), sin.data_ptr<float>(),
                       pos.data_ptr<int64_t>(), cos.size(0), b, t, d, sin_sign, at_slot);
  });
}

// A job reading x [B, T, heads·D] (a projection's output) into y.
cuda::RopeJob rope_job(const at::Tensor &x, const at::Tensor &bias, const at::Tensor &y, int64_t heads, int64_t d,
                       bool rotate, bool y_bhtd) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == heads * d && x.stride(2) == 1, "projection must be [B, T, ", heads * d,
              "] with contiguous rows, got ", x.sizes());
  if (bias.defined()) {
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == heads * d && bias.scalar_type() == x.scalar_type() &&
                    bias.is_contiguous(),
                "bias must be [", heads * d, "] ", x.scalar_type(), ", got ", bias.sizes(), " ", bias.scalar_type());
  }
  cuda::RopeJob j{};
  j.x = x.data_ptr();
  j.xs[0] = x.stride(0), j.xs[1] = x.stride(1), j.xs[2] = d, j.xs[3] = 1;
  j.bias = bias.defined() ? bias.data_ptr() : nullptr;
  j.y = y.data_ptr();
  if (y_bhtd) {  // y [B, heads, T', D]
    j.ys[0] = y.stride(0), j.ys[1] = y.stride(2), j.ys[2] = y.stride(1), j.ys[3] = y.stride(3);
  } else {  // y [B, T, heads·D]
    j.ys[0] = y.stride(0), j.ys[1] = y.stride(1), j.ys[2] = d, j.ys[3] = 1;
  }
  j.heads = heads;
  j.rotate = rotate;
  return j;
}

namespace {

// q, k, v [B, T, heads·D] (+ biases) → [B, heads, T, D], q and k rotated.
std::vector<at::Tensor> rope_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &bq,
                                 const at::Tensor &bk, const at::Tensor &bv, const at::Tensor &cos,
                                 const at::Tensor &sin, const at::Tensor &pos, int64_t hq, int64_t hkv) {
  RECORD_FUNCTION("lanpo::rope", std::vector<c10::IValue>());
  int64_t b = q.size(0), t = q.size(1), d = cos.size(1);
  TORCH_CHECK(pos.dim() == 2 && pos.size(0) == b && pos.size(1) == t, "positions ", pos.sizes(), " for q ", q.sizes());
  for (const auto *x : {&k, &v}) {
    TORCH_CHECK(x->size(0) == b && x->size(1) == t && x->scalar_type() == q.scalar_type() && x->device() == q.device(),
                "q ", q.sizes(), " and k/v ", x->sizes(), " differ in batch, length, dtype or device");
  }
  auto yq = at::empty({b, hq, t, d}, q.options());
  auto yk = at::empty({b, hkv, t, d}, q.options());
  auto yv = at::empty({b, hkv, t, d}, q.options());
  rope_launch(q,
              {rope_job(q, bq, yq, hq, d, true, true), rope_job(k, bk, yk, hkv, d, true, true),
               rope_job(v, bv, yv, hkv, d, false, true)},
              cos, sin, pos, 1, at::Tensor());
  return {yq, yk, yv};
}

// The gradient of rope_fwd's output g [B, heads, T, D] for its input
// [B, T, heads·D]: the rotation by −θ (and the layout back).
at::Tensor rope_bwd(const at::Tensor &g, const at::Tensor &cos, const at::Tensor &sin, const at::Tensor &pos,
                    bool rotate) {
  auto gc = g.contiguous();
  int64_t b = gc.size(0), heads = gc.size(1), t = gc.size(2), d = gc.size(3);
  auto dx = at::empty({b, t, heads * d}, gc.options());
  cuda::RopeJob j{};
  j.x = gc.data_ptr();
  j.xs[0] = gc.stride(0), j.xs[1] = gc.stride(2), j.xs[2] = gc.stride(1), j.xs[3] = 1;
  j.y = dx.data_ptr();
  j.ys[0] = dx.stride(0), j.ys[1] = dx.stride(1), j.ys[2] = d, j.ys[3] = 1;
  j.heads = heads;
  j.rotate = rotate;
  rope_launch(gc, {j}, cos, sin, pos, -1, at::Tensor());
  return dx;
}

struct RopeFn : public torch::autograd::Function<RopeFn> {
  static variable_list forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                               const at::Tensor &bq, const at::Tensor &bk, const at::Tensor &bv, const at::Tensor &cos,
                               const at::Tensor &sin, const at::Tensor &pos, int64_t hq, int64_t hkv) {
    // A missing bias arrives as an empty tensor: autograd's Function
    // cannot take an undefined one.
    auto some = [](const at::Tensor &b) { return b.numel() == 0 ? at::Tensor() : b; };
    ctx->save_for_backward({cos, sin, pos});
    ctx->saved_data["bq"] = bq.numel() > 0;
    ctx->saved_data["bk"] = bk.numel() > 0;
    ctx->saved_data["bv"] = bv.numel() > 0;
    return rope_fwd(q, k, v, some(bq), some(bk), some(bv), cos, sin, pos, hq, hkv);
  }
  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    bool has[3] = {ctx->saved_data["bq"].toBool(), ctx->saved_data["bk"].toBool(), ctx->saved_data["bv"].toBool()};
    variable_list out;
    for (int i = 0; i < 3; i++) {
      out.push_back(grads[i].defined() ? rope_bwd(grads[i], s[0], s[1], s[2], i < 2) : at::Tensor());
    }
    for (int i = 0; i < 3; i++) {
      out.push_back(has[i] && out[i].defined() ? out[i].sum(at::IntArrayRef{0, 1}) : at::Tensor());
    }
    for (int i = 0; i < 5; i++) out.push_back(at::Tensor());
    return out;
  }
};

// ---- SwiGLU ----

// exp for the CPU kernel in fp32, x in [−87.3, 88.37]: Cephes' expf (range
// reduction by ln 2 in two parts, a degree-6 polynomial, the power of two
// built from its bits), within 2e-7 relative of libm's, and without calls
// or branches so that the loop around it vectorizes (libm's expf is a call
// per element: 20× slower than the composition's vectorized silu).
__attribute__((always_inline)) inline float exp_f32(float x) {
  // x·log2(e) rounded to the nearest integer without a branch: adding
  // 1.5·2^23 leaves it in the mantissa's low bits.
  float kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  int k = static_cast<int>(kf);
  float r = x - kf * 0.693359375f;
  r = r - kf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  uint32_t bits = static_cast<uint32_t>(k + 127) << 23;
  return p * __builtin_bit_cast(float, bits);
}

template <typename T>
void swiglu_range(const T *g, const T *u, T *y, int64_t n) {
  using acc = at::opmath_type<T>;
  for (int64_t i = 0; i < n; i++) {
    acc gv = static_cast<acc>(g[i]);
    T silu = static_cast<T>(gv / (static_cast<acc>(1) + std::exp(-gv)));
    y[i] = static_cast<T>(static_cast<acc>(silu) * static_cast<acc>(u[i]));
  }
}

// The fp32 loop, vectorized for the machine it runs on (AVX2 where the CPU
// has it, chosen at load time; SSE2 otherwise; no FMA either way): the
// clamp in one loop, exp and the rest in another, each without branches.
#if defined(__x86_64__)
#define LANPO_VECTOR_CLONES __attribute__((target_clones("avx2", "default"), optimize("O3")))
#else
#define LANPO_VECTOR_CLONES __attribute__((optimize("O3")))
#endif
LANPO_VECTOR_CLONES void swiglu_f32(const float *g, const float *u, float *y,
                                                                              int64_t n) {
  constexpr int64_t kChunk = 512;
  float e[kChunk];
  for (int64_t a = 0; a < n; a += kChunk) {
    const int64_t m = std::min(kChunk, n - a);
    for (int64_t i = 0; i < m; i++) {
      float x = -g[a + i];
      x = x < -87.3f ? -87.3f : x;  // exp's range; silu is 0 or g beyond it
      e[i] = x > 88.37f ? 88.37f : x;  // 2^128 is past fp32: k stays ≤ 127
    }
    for (int64_t i = 0; i < m; i++) y[a + i] = (g[a + i] / (1.0f + exp_f32(e[i]))) * u[a + i];
  }
}

template <typename T>
void swiglu_cpu(const T *g, const T *u, int64_t n, T *y) {
  at::parallel_for(0, n, 4096, [&](int64_t a, int64_t b) {
    if constexpr (std::is_same_v<T, float>) {
      swiglu_f32(g + a, u + a, y + a, b - a);
    } else {
      swiglu_range(g + a, u + a, y + a, b - a);
    }
  });
}

at::Tensor swiglu_fwd(const at::Tensor &g, const at::Tensor &u) {
  RECORD_FUNCTION("lanpo::swiglu", std::vector<c10::IValue>());
  TORCH_CHECK(g.sizes() == u.sizes() && g.scalar_type() == u.scalar_type() && g.device() == u.device() &&
                  g.is_contiguous() && u.is_contiguous(),
              "gate ", g.sizes(), " and up ", u.sizes(), " must be contiguous and alike");
  auto y = at::empty_like(g);
#ifdef LANPO_CUDA
  if (g.is_cuda()) {
    c10::cuda::CUDAGuard guard(g.device());
    cuda::swiglu(cuda_stream(g), elem_of(g.scalar_type()), g.data_ptr(), u.data_ptr(), g.numel(), y.data_ptr());
    return y;
  }
#endif
  check_cpu(g);
  {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, g.scalar_type(), "swiglu", [&] {
      swiglu_cpu<scalar_t>(g.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(), g.numel(), y.data_ptr<scalar_t>());
    });
  }
  return y;
}

struct SwiGLUFn : public torch::autograd::Function<SwiGLUFn> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &g, const at::Tensor &u) {
    ctx->save_for_backward({g, u});
    return swiglu_fwd(g, u);
  }
  // dg = silu'(g)·(gy·u), du = gy·silu(g): ATen's own silu backward and
  // silu, as the composition's autograd computes them.
  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const auto &g = s[0], &u = s[1], &gy = grads[0];
    return {at::silu_backward(gy * u, g), gy * at::silu(g)};
  }
};

// An optional argument of an autograd Function: empty when absent.
at::Tensor opt_ref(lanpo_tensor t, const at::Tensor &like) {
  return t == nullptr ? at::empty({0}, like.options()) : tensor_ref(t);
}

}  // namespace

}  // namespace lanpo

extern "C" char *lanpo_rms_norm(lanpo_tensor x, lanpo_tensor weight, double eps, lanpo_tensor *out) {
  LANPO_GUARD("rms_norm", { *out = lanpo::new_handle(lanpo::RMSNormFn::apply(lanpo::tensor_ref(x), lanpo::tensor_ref(weight), eps)); })
}

extern "C" char *lanpo_add_rms_norm(lanpo_tensor x, lanpo_tensor residual, lanpo_tensor weight, double eps,
                                    lanpo_tensor *y, lanpo_tensor *h) {
  LANPO_GUARD("add_rms_norm", {
    auto out = lanpo::AddRMSNormFn::apply(lanpo::tensor_ref(x), lanpo::tensor_ref(residual), lanpo::tensor_ref(weight), eps);
    *y = lanpo::new_handle(out[0]);
    *h = lanpo::new_handle(out[1]);
  })
}

extern "C" char *lanpo_rope(lanpo_tensor q, lanpo_tensor k, lanpo_tensor v, lanpo_tensor bq, lanpo_tensor bk,
                            lanpo_tensor bv, lanpo_tensor cos, lanpo_tensor sin, lanpo_tensor pos, int64_t hq,
                            int64_t hkv, lanpo_tensor *oq, lanpo_tensor *ok, lanpo_tensor *ov) {
  LANPO_GUARD("rope", {
    const auto &qt = lanpo::tensor_ref(q);
    auto out = lanpo::RopeFn::apply(qt, lanpo::tensor_ref(k), lanpo::tensor_ref(v), lanpo::opt_ref(bq, qt),
                                    lanpo::opt_ref(bk, qt), lanpo::opt_ref(bv, qt), lanpo::tensor_ref(cos),
                                    lanpo::tensor_ref(sin), lanpo::tensor_ref(pos), hq, hkv);
    *oq = lanpo::new_handle(out[0]);
    *ok = lanpo::new_handle(out[1]);
    *ov = lanpo::new_handle(out[2]);
  })
}

extern "C" char *lanpo_swiglu(lanpo_tensor gate, lanpo_tensor up, lanpo_tensor *out) {
  LANPO_GUARD("swiglu", { *out = lanpo::new_handle(lanpo::SwiGLUFn::apply(lanpo::tensor_ref(gate), lanpo::tensor_ref(up))); })
}
