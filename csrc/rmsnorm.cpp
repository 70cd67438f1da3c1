#include <torch/csrc/autograd/custom_function.h>

#include "bridge.h"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Statistics run in fp32 at least; fp64 inputs keep fp64 so tests can
// compare against a composition at 1e-10.
at::ScalarType compute_type(const at::Tensor &x) { return at::promote_types(x.scalar_type(), at::kFloat); }

// y = weight * cast_x_dtype(x * r), r = rsqrt(mean(x², -1) + eps)
struct RMSNormFn : public torch::autograd::Function<RMSNormFn> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &weight, double eps) {
    auto xf = x.to(compute_type(x));
    auto r = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
    ctx->save_for_backward({x, weight, r});
    return weight * (xf * r).to(x.scalar_type());
  }

  // With n = x·r and g the upstream gradient:
  //   dweight = Σ_rows g·n
  //   dx      = r · (dn − n · mean(dn·n, −1)),  dn = g·weight
  // all in the compute type, cast back to each input's dtype.
  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto x = saved[0], weight = saved[1], r = saved[2];
    auto ct = r.scalar_type();
    auto g = grads[0].to(ct);
    auto n = x.to(ct) * r;
    auto dn = g * weight.to(ct);
    auto dx = r * (dn - n * (dn * n).mean(-1, /*keepdim=*/true));
    auto dweight = (g * n.to(x.scalar_type()).to(ct)).reshape({-1, n.size(-1)}).sum(0);
    return {dx.to(x.scalar_type()), dweight.to(weight.scalar_type()), at::Tensor()};
  }
};

}  // namespace

extern "C" char *lanpo_rms_norm(lanpo_tensor x, lanpo_tensor weight, double eps, lanpo_tensor *out) {
  LANPO_GUARD("rms_norm", {
    const auto &xt = lanpo::tensor_ref(x);
    const auto &wt = lanpo::tensor_ref(weight);
    TORCH_CHECK(xt.dim() >= 1, "x must have at least one dimension, got shape ", xt.sizes());
    TORCH_CHECK(wt.dim() == 1 && wt.size(0) == xt.size(-1), "weight must have shape [", xt.size(-1), "] to match x ",
                xt.sizes(), ", got ", wt.sizes());
    TORCH_CHECK(xt.device() == wt.device(), "x is on ", xt.device(), " but weight is on ", wt.device());
    TORCH_CHECK(eps >= 0, "eps must be >= 0, got ", eps);
    *out = lanpo::new_handle(RMSNormFn::apply(xt, wt, eps));
  })
}
