// A distribution over the vocabulary, not only the sampled token's
// log-prob, without holding the [N, V] logits: what distilling one policy
// toward another token by token needs (a teacher's K most likely tokens,
// and a student's log-probs at them). Two ops over the same chunk plan as
// the fused log-prob (logprob_plan.h), in ATen, so on CPU and CUDA alike:
//
//   topk:   ids[n, :], logp[n, :] = the K largest log softmax(x_n·Wᵀ/T)
//           and their token ids, largest first (no gradient: a teacher);
//   gather: logp[n, k] = log softmax(x_n·Wᵀ/T)[ids[n, k]], differentiable
//           in x and W (a student at the teacher's tokens).
//
// Gather's backward, per row (z = x·Wᵀ/T, p = softmax z, g = dL/dlogp):
//   dL/dz = scatter(g at ids) − p · Σ_k g_k,   dX = dZ·W / T,   dW = dZᵀ·X / T
// with dW skipped for a weight that takes no gradient. Rows outside the
// mask give 0 (ids 0) and no gradient.
#include <torch/csrc/autograd/custom_function.h>

#include "bridge.h"
#include "logprob_plan.h"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace lanpo::lp;

// lse_rows is log Σ exp z per row of a chunk's logits z [c, V].
at::Tensor lse_rows(const at::Tensor &z) { return at::logsumexp(z, {1}); }

std::pair<at::Tensor, at::Tensor> topk_forward(const at::Tensor &hidden, const at::Tensor &weight, const Plan &p, int64_t k) {
  int64_t n = hidden.size(0);
  auto ids = at::zeros({n, k}, hidden.options().dtype(at::kLong));
  auto logp = at::zeros({n, k}, hidden.options().dtype(p.ct));
  for_each_chunk(hidden, weight, ids, p, [&](int64_t c0, int64_t c, at::Tensor &z, const at::Tensor &, const at::Tensor &) {
    auto lse = lse_rows(z);
    auto top = z.topk(k, 1, /*largest=*/true, /*sorted=*/true);
    put_rows(logp, p, c0, c, std::get<0>(top) - lse.unsqueeze(1));
    put_rows(ids, p, c0, c, std::get<1>(top));
  });
  return {ids, logp};
}

at::Tensor gather_forward(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &ids, const Plan &p) {
  auto logp = at::zeros({hidden.size(0), ids.size(1)}, hidden.options().dtype(p.ct));
  for_each_chunk(hidden, weight, ids, p, [&](int64_t c0, int64_t c, at::Tensor &z, const at::Tensor &, const at::Tensor &idc) {
    put_rows(logp, p, c0, c, z.gather(1, idc) - lse_rows(z).unsqueeze(1));
  });
  return logp;
}

std::pair<at::Tensor, at::Tensor> gather_backward(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &ids,
                                                  const Plan &p, const at::Tensor &g, bool want_dw) {
  auto dhidden = at::zeros_like(hidden);
  at::Tensor dw;
  if (want_dw) dw = at::zeros({p.v, weight.size(1)}, hidden.options().dtype(p.ct));
  for_each_chunk(hidden, weight, ids, p, [&](int64_t c0, int64_t c, at::Tensor &z, const at::Tensor &xc, const at::Tensor &idc) {
    auto gc = take_rows(g, p, c0, c).to(p.ct);
    auto lse = lse_rows(z).unsqueeze(1);
    z.sub_(lse).exp_().mul_(gc.sum(1, /*keepdim=*/true)).neg_();  // −p · Σ_k g_k
    z.scatter_add_(1, idc, gc);
    if (p.temperature != 1.0) z.div_(p.temperature);
    put_rows(dhidden, p, c0, c, grad_input(z, weight, p).to(hidden.scalar_type()));
    if (want_dw) dw.addmm_(z.t(), xc);
  });
  return {dhidden, want_dw ? dw.to(weight.scalar_type()) : at::Tensor()};
}

struct GatherFn : public torch::autograd::Function<GatherFn> {
  static variable_list forward(AutogradContext *ctx, const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &ids,
                               const at::Tensor &mask_or_empty, bool has_mask, double temperature, int64_t chunk) {
    at::Tensor mask = has_mask ? mask_or_empty : at::Tensor();
    auto p = make_plan(hidden, weight, mask, temperature, chunk, false);
    ctx->save_for_backward({hidden, weight, ids, p.rows});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["all_rows"] = !mask.defined();
    ctx->saved_data["weight_grad"] = weight.requires_grad();
    return {gather_forward(hidden, weight, ids, p)};
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    Plan p;
    p.temperature = ctx->saved_data["temperature"].toDouble();
    p.chunk = ctx->saved_data["chunk"].toInt();
    if (!ctx->saved_data["all_rows"].toBool()) p.rows = saved[3];
    finish_plan(p, saved[0], saved[1]);
    auto [dh, dw] = gather_backward(saved[0], saved[1], saved[2], p, grads[0], ctx->saved_data["weight_grad"].toBool());
    return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_vocab_inputs(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &mask, double temperature) {
  check_hidden_weight(hidden, weight);
  check_floating(hidden, weight);
  TORCH_CHECK(hidden.device() == weight.device(), "hidden and weight must be on one device, got ", hidden.device(), " and ",
              weight.device());
  check_temperature_and_mask(hidden, mask, temperature);
}

}  // namespace

extern "C" char *lanpo_fused_topk_logprob(lanpo_tensor hidden, lanpo_tensor weight, lanpo_tensor mask, double temperature,
                                          int64_t chunk, int64_t k, lanpo_tensor *ids, lanpo_tensor *logp) {
  LANPO_GUARD("fused_topk_logprob", {
    const auto &h = lanpo::tensor_ref(hidden);
    const auto &w = lanpo::tensor_ref(weight);
    at::Tensor m = mask != nullptr ? lanpo::tensor_ref(mask) : at::Tensor();
    check_vocab_inputs(h, w, m, temperature);
    TORCH_CHECK(k >= 1 && k <= w.size(0), "k must be in [1, ", w.size(0), "], got ", k);
    if (chunk <= 0) chunk = lanpo_default_logprob_chunk(h.is_cuda());
    at::NoGradGuard no_grad;  // a teacher's distribution: nothing to differentiate
    auto [i, l] = topk_forward(h.detach(), w.detach(), make_plan(h, w, m, temperature, chunk, false), k);
    *ids = lanpo::new_handle(i);
    *logp = lanpo::new_handle(l);
  })
}

extern "C" char *lanpo_fused_gather_logprob(lanpo_tensor hidden, lanpo_tensor weight, lanpo_tensor ids, lanpo_tensor mask,
                                            double temperature, int64_t chunk, lanpo_tensor *logp) {
  LANPO_GUARD("fused_gather_logprob", {
    const auto &h = lanpo::tensor_ref(hidden);
    const auto &w = lanpo::tensor_ref(weight);
    const auto &t = lanpo::tensor_ref(ids);
    at::Tensor m = mask != nullptr ? lanpo::tensor_ref(mask) : at::Tensor();
    check_vocab_inputs(h, w, m, temperature);
    TORCH_CHECK(t.dim() == 2 && t.size(0) == h.size(0) && t.scalar_type() == at::kLong && t.device() == h.device(),
                "ids must be [", h.size(0), ", K] int64 on ", h.device(), ", got ", t.sizes(), " ", t.scalar_type(), " on ", t.device());
    check_ids_in_range(t, w.size(0), "ids");  // every row's, masked or not (as documented)
    if (chunk <= 0) chunk = lanpo_default_logprob_chunk(h.is_cuda());
    at::Tensor out;
    if (at::GradMode::is_enabled() && (h.requires_grad() || w.requires_grad())) {
      auto mask_or_empty = m.defined() ? m : at::empty({0}, t.options().dtype(at::kBool));
      out = GatherFn::apply(h, w, t, mask_or_empty, m.defined(), temperature, chunk)[0];
    } else {
      out = gather_forward(h, w, t, make_plan(h, w, m, temperature, chunk, false));
    }
    *logp = lanpo::new_handle(out);
  })
}
