// Fused linear + log-softmax + gather (+ entropy): per-token log-probs of
// targets under softmax(hidden · weightᵀ / T) without ever holding the
// [N, V] logits. Rows are processed in chunks of C; one [C, V] buffer in the
// compute type is reused for every chunk, forward and backward.
//
// Notation (per row): z = x·Wᵀ/T, lse = log Σ exp z, logp = z[target] − lse,
// p = exp(z − lse), H = −Σ p log p = lse − Σ p z.
//   dlogp/dz = onehot(target) − p
//   dH/dz    = −p ⊙ (log p + H)
// and d/d(x·Wᵀ) = (dz)/T, dX = dZ·W, dW = dZᵀ·X.
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "bridge.h"

#ifdef LANPO_CUDA
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include "logprob_cuda.h"
#include "logprob_math.h"
#include "logprob_plan.h"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace lanpo::lp;

constexpr int64_t kColumnBlock = 8192;  // columns per elementwise pass (small temporaries)

struct Result {
  at::Tensor logp, lse, entropy;  // [N] in the compute type; masked rows 0
};

// The CUDA path: fp32/bf16/fp16 inputs of one dtype on a GPU take
// csrc/cuda (cuBLAS GEMMs with fp32 outputs into the reused chunk buffer, one
// kernel per pass over it); other inputs (fp64, mixed dtypes) take the ATen
// path further down. The chunk loop is written once over a backend: the
// GPU's (CUDA builds), or an emulation on the CPU that runs the kernels'
// arithmetic from logprob_math.h sequentially, thread by simulated
// thread, so the loop, the GEMM argument mapping and the packed 16-bit dZ
// layout are tested on machines without a GPU.
using lanpo::cuda::DType;

bool kernel_dtypes(const at::Tensor &hidden, const at::Tensor &weight) {
  auto t = hidden.scalar_type();
  return weight.scalar_type() == t && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}

DType cuda_dtype(at::ScalarType t) {
  if (t == at::kBFloat16) return DType::kBFloat16;
  if (t == at::kHalf) return DType::kFloat16;
  return DType::kFloat32;
}

#ifdef LANPO_CUDA
bool use_cuda_kernels(const at::Tensor &hidden, const at::Tensor &weight) {
  return hidden.is_cuda() && kernel_dtypes(hidden, weight);
}

struct GpuBackend {
  void *stream;
  DType dt;
  bool tf32;
  c10::cuda::CUDAGuard guard;
  void *blas;  // torch's cuBLAS handle for this device and its current stream

  // Members initialize in this order: the guard makes hidden's device
  // current before torch's handle for it is taken.
  explicit GpuBackend(const at::Tensor &hidden)
      : stream(c10::cuda::getCurrentCUDAStream(hidden.get_device()).stream()),
        dt(cuda_dtype(hidden.scalar_type())),
        tf32(at::globalContext().allowTF32CuBLAS()),
        guard(hidden.device()),
        blas(at::cuda::getCurrentCUDABlasHandle()) {}
  void logits(const void *x, const void *w, int64_t c, int64_t h, int64_t v, float *z, int64_t ldz) {
    lanpo::cuda::logits(stream, blas, dt, tf32, x, w, c, h, v, z, ldz);
  }
  void forward_stats(const float *z, int64_t ldz, int64_t c, int64_t v, const int64_t *tgt, float inv_t, float *logp,
                     float *lse, float *entropy) {
    lanpo::cuda::forward_stats(stream, z, ldz, c, v, tgt, inv_t, logp, lse, entropy);
  }
  void logits_grad(float *z, int64_t ldz, int64_t c, int64_t v, const int64_t *tgt, float inv_t, const float *lse,
                   const float *entropy, const float *g_logp, const float *g_ent) {
    lanpo::cuda::logits_grad(stream, z, ldz, c, v, tgt, inv_t, lse, entropy, g_logp, g_ent, dt);
  }
  void grad_input(const void *dz, int64_t lddz, const void *w, int64_t c, int64_t h, int64_t v, void *dx) {
    lanpo::cuda::grad_input(stream, blas, dt, tf32, dz, lddz, w, c, h, v, dx);
  }
  void grad_weight_acc(const void *dz, int64_t lddz, const void *x, int64_t c, int64_t h, int64_t v, float *dw) {
    lanpo::cuda::grad_weight_acc(stream, blas, dt, tf32, dz, lddz, x, c, h, v, dw);
  }
};
#endif

// EmulatedBackend runs the GPU backend's steps on CPU memory.
struct EmulatedBackend {
  DType dt;
  explicit EmulatedBackend(const at::Tensor &hidden) : dt(cuda_dtype(hidden.scalar_type())) {}

  static float load(const void *p, int64_t i, DType t) {
    switch (t) {
      case DType::kBFloat16:
        return static_cast<float>(static_cast<const c10::BFloat16 *>(p)[i]);
      case DType::kFloat16:
        return static_cast<float>(static_cast<const c10::Half *>(p)[i]);
      default:
        return static_cast<const float *>(p)[i];
    }
  }
  static void store(void *p, int64_t i, DType t, float x) {
    switch (t) {
      case DType::kBFloat16:
        static_cast<c10::BFloat16 *>(p)[i] = c10::BFloat16(x);
        break;
      case DType::kFloat16:
        static_cast<c10::Half *>(p)[i] = c10::Half(x);
        break;
      default:
        static_cast<float *>(p)[i] = x;
    }
  }

  // What cublasGemmEx computes for a GemmSpec: column-major, fp32
  // accumulation. x, w and dz are the operands by role, all in the input
  // type (dz is fp32 for fp32 inputs, else 16-bit); c is of type ct.
  void gemm(const lanpo::cuda::GemmSpec &g, const void *x, const void *w, const void *dz, void *c, DType ct) {
    const void *a = lanpo::cuda::operand(g.a, x, w, dz), *b = lanpo::cuda::operand(g.b, x, w, dz);
    for (int64_t j = 0; j < g.n; ++j) {
      for (int64_t i = 0; i < g.m; ++i) {
        float acc = 0;
        for (int64_t k = 0; k < g.k; ++k) {
          float av = load(a, g.trans_a ? k + i * g.lda : i + k * g.lda, dt);
          float bv = load(b, g.trans_b ? j + k * g.ldb : k + j * g.ldb, dt);
          acc += av * bv;
        }
        if (g.accumulate) acc += load(c, i + j * g.ldc, ct);
        store(c, i + j * g.ldc, ct, acc);
      }
    }
  }

  void logits(const void *x, const void *w, int64_t c, int64_t h, int64_t v, float *z, int64_t ldz) {
    gemm(lanpo::cuda::logits_gemm(c, h, v, ldz), x, w, nullptr, z, DType::kFloat32);
  }

  // The forward kernel: thread t of a row's block folds elements t,
  // t + kThreads, …; warps merge by xor butterfly; warp 0 merges the warps.
  void forward_stats(const float *z, int64_t ldz, int64_t c, int64_t v, const int64_t *tgt, float inv_t, float *logp,
                     float *lse, float *entropy) {
    using namespace lanpo::cuda;
    auto butterfly = [](Stats *lanes) {
      for (int off = 16; off > 0; off >>= 1) {
        Stats next[32];
        for (int l = 0; l < 32; ++l) next[l] = merge(lanes[l], lanes[l ^ off]);
        std::copy(next, next + 32, lanes);
      }
      return lanes[0];
    };
    for (int64_t r = 0; r < c; ++r) {
      const float *row = z + r * ldz;
      Stats th[kThreads];
      for (auto &s : th) s = empty_stats();
      for (int64_t j = 0; j < v; ++j) add_value(th[j % kThreads], row[j] * inv_t);
      Stats part[32];
      for (int l = 0; l < 32; ++l) part[l] = l < kWarps ? butterfly(th + 32 * l) : empty_stats();
      row_results(butterfly(part), row[tgt[r]] * inv_t, logp + r, lse + r, entropy != nullptr ? entropy + r : nullptr);
    }
  }

  // The backward kernel: per tile, every simulated thread computes its
  // values before any writes them (the kernel's barrier), and 16-bit
  // results are packed into the start of the row's own bytes.
  void logits_grad(float *z, int64_t ldz, int64_t c, int64_t v, const int64_t *tgt, float inv_t, const float *lse,
                   const float *entropy, const float *g_logp, const float *g_ent) {
    using namespace lanpo::cuda;
    constexpr int64_t tile = kThreads * kPerThread;
    std::vector<float> d(tile);
    for (int64_t r = 0; r < c; ++r) {
      float *row = z + r * ldz;
      const RowGrad rg = row_grad(r, lse, entropy, g_logp, g_ent);
      for (int64_t v0 = 0; v0 < v; v0 += tile) {
        int64_t n = std::min(tile, v - v0);
        for (int64_t j = 0; j < n; ++j) d[j] = logit_grad(row[v0 + j], inv_t, rg, v0 + j == tgt[r]);
        for (int64_t j = 0; j < n; ++j) store(row, v0 + j, dt, d[j]);
      }
    }
  }
  void grad_input(const void *dz, int64_t lddz, const void *w, int64_t c, int64_t h, int64_t v, void *dx) {
    gemm(lanpo::cuda::grad_input_gemm(c, h, v, lddz), nullptr, w, dz, dx, dt);
  }
  void grad_weight_acc(const void *dz, int64_t lddz, const void *x, int64_t c, int64_t h, int64_t v, float *dw) {
    gemm(lanpo::cuda::grad_weight_gemm(c, h, v, lddz), x, nullptr, dz, dw, DType::kFloat32);
  }
};

// kernel_chunks walks the chunks of a plan with the inputs made contiguous,
// computing each chunk's logits into one [C, V] fp32 buffer, then calls
// f(c0, c, xc, tgt).
template <class Backend, class F>
void kernel_chunks(Backend &be, const at::Tensor &x, const at::Tensor &w, const at::Tensor &targets, const Plan &p,
                   at::Tensor &buf, F f) {
  if (p.m == 0) return;
  buf = at::empty({std::min(p.chunk, p.m), p.v}, x.options().dtype(at::kFloat));
  for (int64_t c0 = 0; c0 < p.m; c0 += p.chunk) {
    int64_t c = std::min(p.chunk, p.m - c0);
    auto xc = take_rows(x, p, c0, c).contiguous();
    auto tgt = take_rows(targets, p, c0, c).contiguous();
    be.logits(xc.data_ptr(), w.data_ptr(), c, x.size(1), p.v, buf.data_ptr<float>(), p.v);
    f(c0, c, xc, tgt);
  }
}

template <class Backend>
Result kernel_forward(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &targets, const Plan &p,
                      bool want_entropy) {
  Backend be(hidden);
  auto opts = hidden.options().dtype(at::kFloat);
  int64_t n = hidden.size(0);
  Result r{at::zeros({n}, opts), at::zeros({n}, opts), want_entropy ? at::zeros({n}, opts) : at::Tensor()};
  at::Tensor buf;
  auto x = hidden.contiguous(), w = weight.contiguous();
  kernel_chunks(be, x, w, targets.contiguous(), p, buf, [&](int64_t c0, int64_t c, const at::Tensor &, const at::Tensor &tgt) {
    // Without a mask the chunk's rows are contiguous in the outputs.
    auto logp = p.rows.defined() ? at::empty({c}, opts) : r.logp.narrow(0, c0, c);
    auto lse = p.rows.defined() ? at::empty({c}, opts) : r.lse.narrow(0, c0, c);
    at::Tensor ent;
    if (want_entropy) ent = p.rows.defined() ? at::empty({c}, opts) : r.entropy.narrow(0, c0, c);
    be.forward_stats(buf.data_ptr<float>(), p.v, c, p.v, tgt.data_ptr<int64_t>(), static_cast<float>(1.0 / p.temperature),
                     logp.data_ptr<float>(), lse.data_ptr<float>(), want_entropy ? ent.data_ptr<float>() : nullptr);
    if (p.rows.defined()) {
      put_rows(r.logp, p, c0, c, logp);
      put_rows(r.lse, p, c0, c, lse);
      if (want_entropy) put_rows(r.entropy, p, c0, c, ent);
    }
  });
  return r;
}

template <class Backend>
std::pair<at::Tensor, at::Tensor> kernel_backward(const at::Tensor &hidden, const at::Tensor &weight,
                                                  const at::Tensor &targets, const Plan &p, const at::Tensor &lse,
                                                  const at::Tensor &entropy, const at::Tensor &g_logp,
                                                  const at::Tensor &g_ent, bool want_dw) {
  Backend be(hidden);
  auto dhidden = at::zeros_like(hidden);
  at::Tensor dw;
  if (want_dw) dw = at::zeros({p.v, weight.size(1)}, hidden.options().dtype(at::kFloat));
  auto rows_f32 = [&](const at::Tensor &t, int64_t c0, int64_t c) {
    return take_rows(t, p, c0, c).to(at::kFloat).contiguous();
  };
  int64_t h = hidden.size(1);
  // A 16-bit dZ is packed into the first half of each fp32 row of buf.
  int64_t lddz = be.dt == DType::kFloat32 ? p.v : 2 * p.v;
  at::Tensor buf;
  auto x = hidden.contiguous(), w = weight.contiguous();
  kernel_chunks(be, x, w, targets.contiguous(), p, buf, [&](int64_t c0, int64_t c, const at::Tensor &xc, const at::Tensor &tgt) {
    at::Tensor gl, ge, ent;
    if (g_logp.defined()) gl = rows_f32(g_logp, c0, c);
    if (g_ent.defined()) {
      ge = rows_f32(g_ent, c0, c);
      ent = rows_f32(entropy, c0, c);
    }
    at::Tensor lsec = rows_f32(lse, c0, c);
    float *z = buf.data_ptr<float>();
    be.logits_grad(z, p.v, c, p.v, tgt.data_ptr<int64_t>(), static_cast<float>(1.0 / p.temperature),
                   lsec.data_ptr<float>(), ent.defined() ? ent.data_ptr<float>() : nullptr,
                   gl.defined() ? gl.data_ptr<float>() : nullptr, ge.defined() ? ge.data_ptr<float>() : nullptr);
    auto dx = at::empty({c, h}, hidden.options());
    be.grad_input(z, lddz, w.data_ptr(), c, h, p.v, dx.data_ptr());
    put_rows(dhidden, p, c0, c, dx);
    if (want_dw) be.grad_weight_acc(z, lddz, xc.data_ptr(), c, h, p.v, dw.data_ptr<float>());
  });
  return {dhidden, want_dw ? dw.to(weight.scalar_type()) : at::Tensor()};
}

Result fused_forward(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &targets, const Plan &p,
                     bool want_entropy) {
  if (p.emulate_cuda) return kernel_forward<EmulatedBackend>(hidden, weight, targets, p, want_entropy);
#ifdef LANPO_CUDA
  if (use_cuda_kernels(hidden, weight)) return kernel_forward<GpuBackend>(hidden, weight, targets, p, want_entropy);
#endif
  auto opts = hidden.options().dtype(p.ct);
  int64_t n = hidden.size(0);
  Result r{at::zeros({n}, opts), at::zeros({n}, opts), want_entropy ? at::zeros({n}, opts) : at::Tensor()};
  auto step = [&](int64_t c0, int64_t c, at::Tensor &z, const at::Tensor &, const at::Tensor &tgt) {
    auto zt = z.gather(1, tgt.unsqueeze(1)).squeeze(1);
    auto mx = std::get<0>(z.max(1, /*keepdim=*/true));
    z.sub_(mx);
    // S = Σ exp(z − max), A = Σ exp(z − max)·(z − max), blockwise so the
    // temporaries stay [c, kColumnBlock].
    auto s = at::zeros({c}, opts);
    auto a = want_entropy ? at::zeros({c}, opts) : at::Tensor();
    for (int64_t v0 = 0; v0 < p.v; v0 += kColumnBlock) {
      auto zb = z.narrow(1, v0, std::min(kColumnBlock, p.v - v0));
      auto e = zb.exp();
      s.add_(e.sum(1));
      if (want_entropy) a.add_(e.mul_(zb).sum(1));
    }
    auto logs = s.log();
    auto lse = mx.squeeze(1) + logs;
    auto logp = zt - lse;
    put_rows(r.logp, p, c0, c, logp);
    put_rows(r.lse, p, c0, c, lse);
    if (want_entropy) put_rows(r.entropy, p, c0, c, logs - a / s);
  };
  for_each_chunk(hidden, weight, targets, p, step);
  return r;
}

// Gradients of Σ g_logp·logp + Σ g_ent·H for hidden and, when want_dw,
// weight (undefined otherwise: a frozen head, as under LoRA, costs no [V, H]
// buffer and no GEMM); dW is accumulated in fp32 (fp64 for fp64 inputs) and
// cast once at the end.
std::pair<at::Tensor, at::Tensor> fused_backward(const at::Tensor &hidden, const at::Tensor &weight,
                                                 const at::Tensor &targets, const Plan &p, const at::Tensor &lse,
                                                 const at::Tensor &entropy, const at::Tensor &g_logp,
                                                 const at::Tensor &g_ent, bool want_dw) {
  if (p.emulate_cuda) {
    return kernel_backward<EmulatedBackend>(hidden, weight, targets, p, lse, entropy, g_logp, g_ent, want_dw);
  }
#ifdef LANPO_CUDA
  if (use_cuda_kernels(hidden, weight)) {
    return kernel_backward<GpuBackend>(hidden, weight, targets, p, lse, entropy, g_logp, g_ent, want_dw);
  }
#endif
  auto opts = hidden.options().dtype(p.ct);
  auto dhidden = at::zeros_like(hidden);
  at::Tensor dw;
  if (want_dw) dw = at::zeros({p.v, weight.size(1)}, opts);
  auto step = [&](int64_t c0, int64_t c, at::Tensor &z, const at::Tensor &xc, const at::Tensor &tgt) {
    auto gl = (g_logp.defined() ? take_rows(g_logp, p, c0, c).to(p.ct) : at::zeros({c}, opts)).unsqueeze(1);
    at::Tensor ge, ent;
    if (g_ent.defined()) {
      ge = take_rows(g_ent, p, c0, c).to(p.ct).unsqueeze(1);
      ent = take_rows(entropy, p, c0, c).unsqueeze(1);
    }
    z.sub_(take_rows(lse, p, c0, c).unsqueeze(1));  // z is now log p
    for (int64_t v0 = 0; v0 < p.v; v0 += kColumnBlock) {
      auto lb = z.narrow(1, v0, std::min(kColumnBlock, p.v - v0));
      auto pb = lb.exp();
      if (ge.defined()) {
        // −p·g_logp − g_ent·p·(log p + H)
        lb.add_(ent).mul_(ge).add_(gl).mul_(pb).neg_();
      } else {
        lb.copy_(pb.mul_(gl).neg_());
      }
    }
    z.scatter_add_(1, tgt.unsqueeze(1), gl);  // + g_logp at the target
    if (p.temperature != 1.0) z.div_(p.temperature);
    put_rows(dhidden, p, c0, c, grad_input(z, weight, p).to(hidden.scalar_type()));
    if (want_dw) dw.addmm_(z.t(), xc);
  };
  for_each_chunk(hidden, weight, targets, p, step);
  return {dhidden, want_dw ? dw.to(weight.scalar_type()) : at::Tensor()};
}

struct FusedLogProbFn : public torch::autograd::Function<FusedLogProbFn> {
  // apply() cannot take undefined tensors: "no mask" travels as an empty
  // tensor plus has_mask = false.
  static variable_list forward(AutogradContext *ctx, const at::Tensor &hidden, const at::Tensor &weight,
                               const at::Tensor &targets, const at::Tensor &mask_or_empty, bool has_mask,
                               double temperature, int64_t chunk, bool want_entropy, bool emulate_cuda) {
    at::Tensor mask = has_mask ? mask_or_empty : at::Tensor();
    auto p = make_plan(hidden, weight, mask, temperature, chunk, emulate_cuda);
    auto r = fused_forward(hidden, weight, targets, p, want_entropy);
    ctx->save_for_backward({hidden, weight, targets, p.rows, r.lse, want_entropy ? r.entropy : at::Tensor()});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["all_rows"] = !mask.defined();
    ctx->saved_data["emulate_cuda"] = emulate_cuda;
    ctx->saved_data["weight_grad"] = weight.requires_grad();
    if (want_entropy) return {r.logp, r.entropy};
    return {r.logp};
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &hidden = saved[0], &weight = saved[1], &targets = saved[2];
    Plan p;
    p.temperature = ctx->saved_data["temperature"].toDouble();
    p.chunk = ctx->saved_data["chunk"].toInt();
    if (!ctx->saved_data["all_rows"].toBool()) p.rows = saved[3];
    p.emulate_cuda = ctx->saved_data["emulate_cuda"].toBool();
    finish_plan(p, hidden, weight);
    at::Tensor g_ent = grads.size() > 1 ? grads[1] : at::Tensor();
    auto [dh, dw] = fused_backward(hidden, weight, targets, p, saved[4], saved[5], grads[0], g_ent,
                                   ctx->saved_data["weight_grad"].toBool());
    return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_inputs(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &targets, const at::Tensor &mask,
                  double temperature) {
  check_hidden_weight(hidden, weight);
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "targets must be [", hidden.size(0), "], got ",
              targets.sizes());
  TORCH_CHECK(targets.scalar_type() == at::kLong, "targets must be int64, got ", targets.scalar_type());
  check_floating(hidden, weight);
  TORCH_CHECK(hidden.device() == weight.device() && hidden.device() == targets.device(),
              "hidden, weight and targets must be on one device, got ", hidden.device(), ", ", weight.device(), ", ",
              targets.device());
  check_temperature_and_mask(hidden, mask, temperature);
  // Only the rows that are computed need targets in range.
  check_ids_in_range(mask.defined() ? targets.masked_select(mask.to(at::kBool)) : targets, weight.size(0), "targets");
}

}  // namespace

extern "C" char *lanpo_fused_logprob(lanpo_tensor hidden, lanpo_tensor weight, lanpo_tensor targets, lanpo_tensor mask,
                                     double temperature, int64_t chunk, int want_entropy, int emulate_cuda,
                                     lanpo_tensor *logp, lanpo_tensor *entropy) {
  LANPO_GUARD("fused_logprob", {
    const auto &h = lanpo::tensor_ref(hidden);
    const auto &w = lanpo::tensor_ref(weight);
    const auto &t = lanpo::tensor_ref(targets);
    at::Tensor m = mask != nullptr ? lanpo::tensor_ref(mask) : at::Tensor();
    check_inputs(h, w, t, m, temperature);
    if (emulate_cuda) {
      TORCH_CHECK(!h.is_cuda() && kernel_dtypes(h, w),
                  "emulating the CUDA path needs CPU tensors of one dtype among fp32, bf16, fp16; got ", h.scalar_type(),
                  " and ", w.scalar_type(), " on ", h.device());
    }
    if (chunk <= 0) chunk = lanpo_default_logprob_chunk(h.is_cuda());
    bool track = at::GradMode::is_enabled() && (h.requires_grad() || w.requires_grad());
    variable_list out;
    if (track) {
      auto mask_or_empty = m.defined() ? m : at::empty({0}, t.options().dtype(at::kBool));
      out = FusedLogProbFn::apply(h, w, t, mask_or_empty, m.defined(), temperature, chunk, want_entropy != 0,
                                  emulate_cuda != 0);
    } else {
      auto r = fused_forward(h, w, t, make_plan(h, w, m, temperature, chunk, emulate_cuda != 0), want_entropy != 0);
      out = {r.logp};
      if (want_entropy) out.push_back(r.entropy);
    }
    *logp = lanpo::new_handle(out[0]);
    if (want_entropy) *entropy = lanpo::new_handle(out[1]);
  })
}

extern "C" int64_t lanpo_default_logprob_chunk(int cuda) { return cuda ? 4096 : 256; }

extern "C" char *lanpo_logprob_blas_handles(int device, void **last_used, void **torch_current, int *supported) {
  LANPO_GUARD("logprob_blas_handles", {
    *last_used = *torch_current = nullptr;
    *supported = 0;
#ifdef LANPO_CUDA
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    *last_used = lanpo::cuda::last_blas_handle();
    *torch_current = at::cuda::getCurrentCUDABlasHandle();
    *supported = 1;
#endif
  })
}
