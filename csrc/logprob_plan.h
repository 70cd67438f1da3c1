// The chunk plan of lanpo's fused vocabulary ops (logprob.cpp, topk.cpp):
// which rows to compute, in chunks of C rows whose [C, V] logits
// z = x·Wᵀ/T live in one reused buffer in the compute type (fp32; fp64 for
// fp64 inputs), and the GEMMs in and out of it.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

namespace lanpo {
namespace lp {

struct Plan {
  at::Tensor rows;  // int64 indices of the rows to compute, or undefined for all rows
  int64_t m = 0;    // number of rows to compute
  int64_t chunk = 0;
  int64_t v = 0;
  int64_t wblock = 0;  // rows of W converted to the compute type at a time (bf16/fp16 weights)
  double temperature = 1;
  at::ScalarType ct = at::kFloat;  // fp32, or fp64 for fp64 inputs
  bool emulate_cuda = false;       // run the CUDA path's algorithm on the CPU (tests)
};

// finish_plan fills what follows from the tensors: compute type, V, and how
// many rows of W to convert at a time (bf16/fp16 weights), which bounds that
// temporary to a quarter of the logits buffer.
inline void finish_plan(Plan &p, const at::Tensor &hidden, const at::Tensor &weight) {
  p.ct = at::promote_types(hidden.scalar_type(), at::kFloat);
  p.v = weight.size(0);
  p.chunk = std::max<int64_t>(1, p.chunk);
  int64_t h = std::max<int64_t>(1, hidden.size(1));
  p.wblock = std::clamp<int64_t>(p.chunk * p.v / (4 * h), 256, p.v);
  p.m = p.rows.defined() ? p.rows.size(0) : hidden.size(0);
}

inline Plan make_plan(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &mask, double temperature,
               int64_t chunk, bool emulate_cuda) {
  Plan p;
  p.temperature = temperature;
  p.chunk = chunk;
  p.emulate_cuda = emulate_cuda;
  if (mask.defined()) p.rows = mask.to(at::kBool).nonzero().squeeze(1);  // sync: row count decides the loop
  finish_plan(p, hidden, weight);
  return p;
}

inline at::Tensor take_rows(const at::Tensor &t, const Plan &p, int64_t c0, int64_t c) {
  if (!p.rows.defined()) return t.narrow(0, c0, c);
  return t.index_select(0, p.rows.narrow(0, c0, c));
}

// put_rows writes src into the chunk's rows of dst ([N, ...]).
inline void put_rows(at::Tensor &dst, const Plan &p, int64_t c0, int64_t c, const at::Tensor &src) {
  if (p.rows.defined()) {
    dst.index_copy_(0, p.rows.narrow(0, c0, c), src);
  } else {
    dst.narrow(0, c0, c).copy_(src);
  }
}

// z = x · Wᵀ / T into z ([c, V] in the compute type).
inline void logits_into(at::Tensor &z, const at::Tensor &xc, const at::Tensor &w, const Plan &p) {
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
inline at::Tensor grad_input(const at::Tensor &dz, const at::Tensor &w, const Plan &p) {
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
inline void for_each_chunk(const at::Tensor &hidden, const at::Tensor &weight, const at::Tensor &targets, const Plan &p, F f) {
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

// Input checks the vocabulary ops share (their own checks add the targets'
// or ids' shapes and devices).

// check_hidden_weight: hidden [N, H] and weight [V, H], floating point.
inline void check_hidden_weight(const at::Tensor &hidden, const at::Tensor &weight) {
  TORCH_CHECK(hidden.dim() == 2, "hidden must be [N, H], got ", hidden.sizes());
  TORCH_CHECK(weight.dim() == 2 && weight.size(1) == hidden.size(1), "weight must be [V, ", hidden.size(1),
              "] to match hidden ", hidden.sizes(), ", got ", weight.sizes());
}

inline void check_floating(const at::Tensor &hidden, const at::Tensor &weight) {
  TORCH_CHECK(at::isFloatingType(hidden.scalar_type()) && at::isFloatingType(weight.scalar_type()),
              "hidden and weight must be floating point, got ", hidden.scalar_type(), " and ", weight.scalar_type());
}

// check_temperature_and_mask: T > 0, and a mask (undefined: none) of [N]
// on hidden's device.
inline void check_temperature_and_mask(const at::Tensor &hidden, const at::Tensor &mask, double temperature) {
  TORCH_CHECK(temperature > 0, "temperature must be > 0, got ", temperature);
  if (mask.defined()) {
    TORCH_CHECK(mask.dim() == 1 && mask.size(0) == hidden.size(0), "mask must be [", hidden.size(0), "], got ",
                mask.sizes());
    TORCH_CHECK(mask.device() == hidden.device(), "mask is on ", mask.device(), ", hidden on ", hidden.device());
  }
}

// check_ids_in_range: token ids (what names them in the message) must lie
// in [0, v): out of range, they would read out of bounds on the GPU.
// sync: one reduction per call.
inline void check_ids_in_range(const at::Tensor &ids, int64_t v, const char *what) {
  if (ids.numel() == 0) return;
  auto lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  TORCH_CHECK(lo >= 0 && hi < v, what, " must lie in [0, ", v, "), got [", lo, ", ", hi, "]");
}

}  // namespace lp
}  // namespace lanpo
