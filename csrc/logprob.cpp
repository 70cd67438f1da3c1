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

#include "bridge.h"

#ifdef LANPO_CUDA
#include <ATen/Context.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/logprob_cuda.h"
#endif

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kColumnBlock = 8192;  // columns per elementwise pass (small temporaries)

struct Plan {
  at::Tensor rows;  // int64 indices of the rows to compute, or undefined for all rows
  int64_t m = 0;    // number of rows to compute
  int64_t chunk = 0;
  int64_t v = 0;
  int64_t wblock = 0;  // rows of W converted to the compute type at a time (bf16/fp16 weights)
  double temperature = 1;
  at::ScalarType ct = at::kFloat;  // fp32, or fp64 for fp64 inputs
};

// finish_plan fills what follows from the tensors: compute type, V, and how
// many rows of W to convert at a time (bf16/fp16 weights), which bounds that
// temporary to a quarter of the logits buffer.
void finish_plan(Plan &p, const at::Tensor &hidden, const at::Tensor &weight) {
  p.ct = at::promote_types(hidden.scalar_type(), at::kFloat);
  p.v = weight.size(0);
  p.chunk = std::max<int64_t>(1, p.chunk);
  int64_t h = std::max<int64_t>(1, hidden.size(1));
  p.wblock = std::clamp<int64_t>(p.chunk * p.v / (4 * h), 256, p.v);
  p.m = p.rows.defined() ? p.rows.size(0) : hidden.size(0);
}

Plan make_plan(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &mask, double temperature,
               int64_t chunk) {
  Plan p;
  p.temperature = temperature;
  p.chunk = chunk;
  if (mask.defined()) p.rows = mask.to(at::kBool).nonzero().squeeze(1);  // sync: row count decides the loop
  finish_plan(p, hidden, weight);
  return p;
}

at::Tensor take_rows(const at::Tensor &t, const Plan &p, int64_t c0, int64_t c) {
  if (!p.rows.defined()) return t.narrow(0, c0, c);
  return t.index_select(0, p.rows.narrow(0, c0, c));
}

// put_rows writes src into the chunk's rows of dst ([N, ...]).
void put_rows(at::Tensor &dst, const Plan &p, int64_t c0, int64_t c, const at::Tensor &src) {
  if (p.rows.defined()) {
    dst.index_copy_(0, p.rows.narrow(0, c0, c), src);
  } else {
    dst.narrow(0, c0, c).copy_(src);
  }
}

// z = x · Wᵀ / T into z ([c, V] in the compute type).
void logits_into(at::Tensor &z, const at::Tensor &xc, const at::Tensor &w, const Plan &p) {
  if (w.scalar_type() == p.ct) {
    at::mm_out(z, xc, w.t());
  } else {
    for (int64_t v0 = 0; v0 < p.v; v0 += p.wblock) {
      int64_t vb = std::min(p.wblock, p.v - v0);
      auto out = z.narrow(1, v0, vb);
      at::mm_out(out, xc, w.narrow(0, v0, vb).to(p.ct).t());
    }
  }
  if (p.temperature != 1.0) z.div_(p.temperature);
}

// dX = dZ · W in the compute type.
at::Tensor grad_input(const at::Tensor &dz, const at::Tensor &w, const Plan &p) {
  if (w.scalar_type() == p.ct) return at::mm(dz, w);
  at::Tensor dx;
  for (int64_t v0 = 0; v0 < p.v; v0 += p.wblock) {
    int64_t vb = std::min(p.wblock, p.v - v0);
    auto part = at::mm(dz.narrow(1, v0, vb), w.narrow(0, v0, vb).to(p.ct));
    dx = dx.defined() ? dx.add_(part) : part;
  }
  return dx;
}

// for_each_chunk computes each chunk's logits z = x·Wᵀ/T into one reused
// [C, V] buffer and calls f(c0, c, z, xc, tgt) with the chunk's first row
// index among the computed rows, its size, the logits, the inputs in the
// compute type and the targets.
template <class F>
void for_each_chunk(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &targets, const Plan &p, F f) {
  if (p.m == 0) return;
  auto buf = at::empty({std::min(p.chunk, p.m), p.v}, hidden.options().dtype(p.ct));
  for (int64_t c0 = 0; c0 < p.m; c0 += p.chunk) {
    int64_t c = std::min(p.chunk, p.m - c0);
    auto z = buf.narrow(0, 0, c);
    auto xc = take_rows(hidden, p, c0, c).to(p.ct);
    auto tgt = take_rows(targets, p, c0, c);
    logits_into(z, xc, weight, p);
    f(c0, c, z, xc, tgt);
  }
}

struct Result {
  at::Tensor logp, lse, entropy;  // [N] in the compute type; masked rows 0
};

#ifdef LANPO_CUDA
// On CUDA, fp32/bf16/fp16 inputs of one dtype take csrc/cuda: cuBLAS GEMMs
// with fp32 outputs into the reused chunk buffer and one kernel per pass
// over it. Other inputs (fp64, mixed dtypes) take the ATen path below.
bool use_cuda_kernels(const at::Tensor &hidden, const at::Tensor &weight) {
  auto t = hidden.scalar_type();
  return hidden.is_cuda() && weight.scalar_type() == t && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}

lanpo::cuda::DType cuda_dtype(at::ScalarType t) {
  if (t == at::kBFloat16) return lanpo::cuda::DType::kBFloat16;
  if (t == at::kHalf) return lanpo::cuda::DType::kFloat16;
  return lanpo::cuda::DType::kFloat32;
}

// CudaChunks walks the chunks of a plan with the inputs made contiguous and
// the logits of each chunk computed into one [C, V] fp32 buffer.
struct CudaChunks {
  const Plan &p;
  at::Tensor x, w, targets, buf;
  void *stream;
  int device;
  lanpo::cuda::DType dt;
  bool tf32;

  CudaChunks(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &tgt, const Plan &plan)
      : p(plan),
        x(hidden.contiguous()),
        w(weight.contiguous()),
        targets(tgt.contiguous()),
        stream(c10::cuda::getCurrentCUDAStream(hidden.get_device()).stream()),
        device(hidden.get_device()),
        dt(cuda_dtype(hidden.scalar_type())),
        tf32(at::globalContext().allowTF32CuBLAS()) {
    if (p.m > 0) buf = at::empty({std::min(p.chunk, p.m), p.v}, hidden.options().dtype(at::kFloat));
  }

  // f(c0, c, xc, tgt) after the chunk's logits are in buf.
  template <class F>
  void each(F f) {
    for (int64_t c0 = 0; c0 < p.m; c0 += p.chunk) {
      int64_t c = std::min(p.chunk, p.m - c0);
      auto xc = take_rows(x, p, c0, c).contiguous();
      auto tgt = take_rows(targets, p, c0, c).contiguous();
      lanpo::cuda::logits(stream, device, dt, tf32, xc.data_ptr(), w.data_ptr(), c, x.size(1), p.v,
                          buf.data_ptr<float>(), p.v);
      f(c0, c, xc, tgt);
    }
  }
};

Result cuda_forward(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &targets, const Plan &p,
                    bool want_entropy) {
  c10::cuda::CUDAGuard guard(hidden.device());
  auto opts = hidden.options().dtype(at::kFloat);
  int64_t n = hidden.size(0);
  Result r{at::zeros({n}, opts), at::zeros({n}, opts), want_entropy ? at::zeros({n}, opts) : at::Tensor()};
  CudaChunks chunks(hidden, weight, targets, p);
  chunks.each([&](int64_t c0, int64_t c, const at::Tensor &, const at::Tensor &tgt) {
    // Without a mask the chunk's rows are contiguous in the outputs.
    auto logp = p.rows.defined() ? at::empty({c}, opts) : r.logp.narrow(0, c0, c);
    auto lse = p.rows.defined() ? at::empty({c}, opts) : r.lse.narrow(0, c0, c);
    at::Tensor ent;
    if (want_entropy) ent = p.rows.defined() ? at::empty({c}, opts) : r.entropy.narrow(0, c0, c);
    lanpo::cuda::forward_stats(chunks.stream, chunks.buf.data_ptr<float>(), p.v, c, p.v, tgt.data_ptr<int64_t>(),
                               static_cast<float>(1.0 / p.temperature), logp.data_ptr<float>(), lse.data_ptr<float>(),
                               want_entropy ? ent.data_ptr<float>() : nullptr);
    if (p.rows.defined()) {
      put_rows(r.logp, p, c0, c, logp);
      put_rows(r.lse, p, c0, c, lse);
      if (want_entropy) put_rows(r.entropy, p, c0, c, ent);
    }
  });
  return r;
}

std::pair<at::Tensor, at::Tensor> cuda_backward(const at::Tensor &hidden, const at::Tensor &weight,
                                                const at::Tensor &targets, const Plan &p, const at::Tensor &lse,
                                                const at::Tensor &entropy, const at::Tensor &g_logp,
                                                const at::Tensor &g_ent) {
  c10::cuda::CUDAGuard guard(hidden.device());
  auto dhidden = at::zeros_like(hidden);
  auto dw = at::zeros({p.v, weight.size(1)}, hidden.options().dtype(at::kFloat));
  CudaChunks chunks(hidden, weight, targets, p);
  auto rows_f32 = [&](const at::Tensor &t, int64_t c0, int64_t c) {
    return take_rows(t, p, c0, c).to(at::kFloat).contiguous();
  };
  int64_t h = hidden.size(1);
  // A 16-bit dZ is packed into the first half of each fp32 row of buf.
  int64_t lddz = chunks.dt == lanpo::cuda::DType::kFloat32 ? p.v : 2 * p.v;
  chunks.each([&](int64_t c0, int64_t c, const at::Tensor &xc, const at::Tensor &tgt) {
    at::Tensor gl, ge, ent;
    if (g_logp.defined()) gl = rows_f32(g_logp, c0, c);
    if (g_ent.defined()) {
      ge = rows_f32(g_ent, c0, c);
      ent = rows_f32(entropy, c0, c);
    }
    auto lsec = rows_f32(lse, c0, c);
    float *z = chunks.buf.data_ptr<float>();
    lanpo::cuda::logits_grad(chunks.stream, z, p.v, c, p.v, tgt.data_ptr<int64_t>(),
                             static_cast<float>(1.0 / p.temperature), lsec.data_ptr<float>(),
                             ent.defined() ? ent.data_ptr<float>() : nullptr, gl.defined() ? gl.data_ptr<float>() : nullptr,
                             ge.defined() ? ge.data_ptr<float>() : nullptr, chunks.dt);
    auto dx = at::empty({c, h}, hidden.options());
    lanpo::cuda::grad_input(chunks.stream, chunks.device, chunks.dt, chunks.tf32, z, lddz, chunks.w.data_ptr(), c, h,
                            p.v, dx.data_ptr());
    put_rows(dhidden, p, c0, c, dx);
    lanpo::cuda::grad_weight_acc(chunks.stream, chunks.device, chunks.dt, chunks.tf32, z, lddz, xc.data_ptr(), c, h,
                                 p.v, dw.data_ptr<float>());
  });
  return {dhidden, dw.to(weight.scalar_type())};
}
#endif

Result fused_forward(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &targets, const Plan &p,
                     bool want_entropy) {
#ifdef LANPO_CUDA
  if (use_cuda_kernels(hidden, weight)) return cuda_forward(hidden, weight, targets, p, want_entropy);
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

// Gradients of Σ g_logp·logp + Σ g_ent·H for hidden and weight; dW is
// accumulated in fp32 (fp64 for fp64 inputs) and cast once at the end.
std::pair<at::Tensor, at::Tensor> fused_backward(const at::Tensor &hidden, const at::Tensor &weight,
                                                 const at::Tensor &targets, const Plan &p, const at::Tensor &lse,
                                                 const at::Tensor &entropy, const at::Tensor &g_logp,
                                                 const at::Tensor &g_ent) {
#ifdef LANPO_CUDA
  if (use_cuda_kernels(hidden, weight)) {
    return cuda_backward(hidden, weight, targets, p, lse, entropy, g_logp, g_ent);
  }
#endif
  auto opts = hidden.options().dtype(p.ct);
  auto dhidden = at::zeros_like(hidden);
  auto dw = at::zeros({p.v, weight.size(1)}, opts);
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
    dw.addmm_(z.t(), xc);
  };
  for_each_chunk(hidden, weight, targets, p, step);
  return {dhidden, dw.to(weight.scalar_type())};
}

struct FusedLogProbFn : public torch::autograd::Function<FusedLogProbFn> {
  // apply() cannot take undefined tensors: "no mask" travels as an empty
  // tensor plus has_mask = false.
  static variable_list forward(AutogradContext *ctx, const at::Tensor &hidden, const at::Tensor &weight,
                               const at::Tensor &targets, const at::Tensor &mask_or_empty, bool has_mask,
                               double temperature, int64_t chunk, bool want_entropy) {
    at::Tensor mask = has_mask ? mask_or_empty : at::Tensor();
    auto p = make_plan(hidden, weight, mask, temperature, chunk);
    auto r = fused_forward(hidden, weight, targets, p, want_entropy);
    ctx->save_for_backward({hidden, weight, targets, p.rows, r.lse, want_entropy ? r.entropy : at::Tensor()});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["all_rows"] = !mask.defined();
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
    finish_plan(p, hidden, weight);
    at::Tensor g_ent = grads.size() > 1 ? grads[1] : at::Tensor();
    auto [dh, dw] = fused_backward(hidden, weight, targets, p, saved[4], saved[5], grads[0], g_ent);
    return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_inputs(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &targets, const at::Tensor &mask,
                  double temperature) {
  TORCH_CHECK(hidden.dim() == 2, "hidden must be [N, H], got ", hidden.sizes());
  TORCH_CHECK(weight.dim() == 2 && weight.size(1) == hidden.size(1), "weight must be [V, ", hidden.size(1),
              "] to match hidden ", hidden.sizes(), ", got ", weight.sizes());
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "targets must be [", hidden.size(0), "], got ",
              targets.sizes());
  TORCH_CHECK(targets.scalar_type() == at::kLong, "targets must be int64, got ", targets.scalar_type());
  TORCH_CHECK(at::isFloatingType(hidden.scalar_type()) && at::isFloatingType(weight.scalar_type()),
              "hidden and weight must be floating point, got ", hidden.scalar_type(), " and ", weight.scalar_type());
  TORCH_CHECK(hidden.device() == weight.device() && hidden.device() == targets.device(),
              "hidden, weight and targets must be on one device, got ", hidden.device(), ", ", weight.device(), ", ",
              targets.device());
  TORCH_CHECK(temperature > 0, "temperature must be > 0, got ", temperature);
  if (mask.defined()) {
    TORCH_CHECK(mask.dim() == 1 && mask.size(0) == hidden.size(0), "mask must be [", hidden.size(0), "], got ",
                mask.sizes());
    TORCH_CHECK(mask.device() == hidden.device(), "mask is on ", mask.device(), ", hidden on ", hidden.device());
  }
  // Out-of-range targets would read out of bounds on the GPU; check the rows
  // that are computed. sync: one reduction per call.
  auto t = mask.defined() ? targets.masked_select(mask.to(at::kBool)) : targets;
  if (t.numel() > 0) {
    auto lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < weight.size(0), "targets must lie in [0, ", weight.size(0), "), got [", lo, ", ", hi,
                "]");
  }
}

}  // namespace

extern "C" char *lanpo_fused_logprob(lanpo_tensor hidden, lanpo_tensor weight, lanpo_tensor targets, lanpo_tensor mask,
                                     double temperature, int64_t chunk, int want_entropy, lanpo_tensor *logp,
                                     lanpo_tensor *entropy) {
  LANPO_GUARD("fused_logprob", {
    const auto &h = lanpo::tensor_ref(hidden);
    const auto &w = lanpo::tensor_ref(weight);
    const auto &t = lanpo::tensor_ref(targets);
    at::Tensor m = mask != nullptr ? lanpo::tensor_ref(mask) : at::Tensor();
    check_inputs(h, w, t, m, temperature);
    if (chunk <= 0) chunk = lanpo_default_logprob_chunk(h.is_cuda());
    bool track = at::GradMode::is_enabled() && (h.requires_grad() || w.requires_grad());
    variable_list out;
    if (track) {
      auto mask_or_empty = m.defined() ? m : at::empty({0}, t.options().dtype(at::kBool));
      out = FusedLogProbFn::apply(h, w, t, mask_or_empty, m.defined(), temperature, chunk, want_entropy != 0);
    } else {
      auto r = fused_forward(h, w, t, make_plan(h, w, m, temperature, chunk), want_entropy != 0);
      out = {r.logp};
      if (want_entropy) out.push_back(r.entropy);
    }
    *logp = lanpo::new_handle(out[0]);
    if (want_entropy) *entropy = lanpo::new_handle(out[1]);
  })
}

extern "C" int64_t lanpo_default_logprob_chunk(int cuda) { return cuda ? 4096 : 256; }
