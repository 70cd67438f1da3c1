// The decode step's pieces that ATen lacks or that gotch cannot reach: RoPE
// with the KV-cache write at a slot the device holds, the sampler that draws
// and records a token without the host, SDPA with enable_gqa (libtorch ≥
// 2.5), uploads from pinned memory, and CUDA graphs of a decode step.
// Every product and sum rounds on its own, never fused into a multiply-add
// (a compiler may contract them where the CPU has FMA): the kernels round
// where the ATen compositions and the CUDA kernels do.
#pragma GCC optimize("fp-contract=off")

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/version.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "bridge.h"
#include "fused.h"
#include "fused_cuda.h"

#ifdef LANPO_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define LANPO_SDPA_GQA 1
#endif

namespace {

using lanpo::tensor_ref;

at::Tensor opt(lanpo_tensor t) { return t == nullptr ? at::Tensor() : tensor_ref(t); }

// ---- The sampler (CPU; the CUDA kernel follows the same steps) ----

int64_t argmax_first(const float *p, int64_t v) {
  int64_t best = 0;
  for (int64_t i = 1; i < v; i++) {
    if (p[i] > p[best]) best = i;
  }
  return best;
}

// The inverse CDF of p [v] at u·total with lanpo's summation order
// (fused_cuda.h: kBlock, kLanes).
int64_t draw_row(const float *p, int64_t v, double u) {
  using lanpo::cuda::kBlock;
  using lanpo::cuda::kLanes;
  int64_t nb = (v + kBlock - 1) / kBlock;
  std::vector<double> sums(nb);
  for (int64_t j = 0; j < nb; j++) {
    int64_t end = std::min(v, (j + 1) * kBlock);
    double lanes[kLanes] = {};
    for (int64_t l = 0; l < kLanes; l++) {
      for (int64_t i = j * kBlock + l; i < end; i += kLanes) lanes[l] += static_cast<double>(p[i]);
    }
    double s = 0;
    for (int64_t l = 0; l < kLanes; l++) s += lanes[l];
    sums[j] = s;
  }
  double total = 0;
  for (double s : sums) total += s;
  double target = u * total, cum = 0;
  int64_t b = -1;
  for (int64_t j = 0; j < nb; j++) {
    double x = sums[j];
    if (x > 0) {
      b = j;  // the last block with mass, should rounding leave target unmet
      if (cum + x >= target) break;
    }
    cum += x;
  }
  if (b < 0) return -1;
  double remain = target - cum, c = 0;
  int64_t pick = -1;
  for (int64_t i = b * kBlock, end = std::min(v, (b + 1) * kBlock); i < end; i++) {
    double x = static_cast<double>(p[i]);
    if (!(x > 0)) continue;
    pick = i;
    c += x;
    if (c >= remain) break;
  }
  return pick;
}

template <typename B>
void sample_cpu(const float *pick, const float *lp, int64_t rows, int64_t v, bool greedy, const double *u, int64_t ldu,
                const int64_t *ctr, int64_t *tok, int64_t *pos, B *bias, int64_t tmax, int64_t *rec) {
  const int64_t col = ctr[0], slot = ctr[1];
  at::parallel_for(0, rows, 1, [&](int64_t a, int64_t e) {
    for (int64_t r = a; r < e; r++) {
      const float *p = pick + r * v;
      int64_t t = greedy ? argmax_first(p, v) : draw_row(p, v, u[r * ldu + col]);
      if (t < 0) t = argmax_first(p, v);  // no mass at all (NaN logits): the argmax, never an invalid id
      float l = lp[r * v + t];
      uint32_t bits;
      std::memcpy(&bits, &l, sizeof bits);
      rec[r * ldu + col] = static_cast<int64_t>((static_cast<uint64_t>(bits) << 32) | static_cast<uint32_t>(t));
      tok[r] = t;
      pos[r] += 1;
      const int64_t open = slot < 0 ? pos[r] : slot + 1;  // slot < 0: each row's slot is its position
      if (bias != nullptr && open >= 0 && open < tmax) bias[r * tmax + open] = B(0);
    }
  });
}

void check_on(const at::Tensor &t, const at::Tensor &like, const char *name, at::ScalarType dt) {
  TORCH_CHECK(t.device() == like.device() && t.scalar_type() == dt && t.is_contiguous(), name, " must be contiguous ",
              dt, " on ", like.device(), ", got ", t.scalar_type(), " on ", t.device());
}

}  // namespace

extern "C" char *lanpo_rope_cache(lanpo_tensor q, lanpo_tensor k, lanpo_tensor v, lanpo_tensor bq, lanpo_tensor bk,
                                  lanpo_tensor bv, lanpo_tensor cos, lanpo_tensor sin, lanpo_tensor pos,
                                  lanpo_tensor kcache, lanpo_tensor vcache, lanpo_tensor ctr, lanpo_tensor *out) {
  LANPO_GUARD("rope_cache", {
    RECORD_FUNCTION("lanpo::rope_cache", std::vector<c10::IValue>());
    const auto &qt = tensor_ref(q), &kc = tensor_ref(kcache), &vc = tensor_ref(vcache), &c = tensor_ref(ctr);
    int64_t b = qt.size(0), d = kc.size(3), hkv = kc.size(1), hq = qt.size(2) / d;
    TORCH_CHECK(qt.dim() == 3 && qt.size(1) == 1, "rope_cache decodes one token per row, got q ", qt.sizes());
    TORCH_CHECK(kc.sizes() == vc.sizes() && kc.size(0) == b && kc.scalar_type() == qt.scalar_type(), "caches ",
                kc.sizes(), " and ", vc.sizes(), " for q ", qt.sizes());
    check_on(c, qt, "ctr", at::kLong);
    const auto &pt = tensor_ref(pos);
    TORCH_CHECK(pt.dim() == 2 && pt.size(0) == b && pt.size(1) == 1, "positions must be [", b, ", 1], got ", pt.sizes());
    TORCH_CHECK(kc.device() == qt.device() && vc.device() == qt.device() && kc.scalar_type() == vc.scalar_type(),
                "caches on ", kc.device(), " and ", vc.device(), " for q on ", qt.device());
    TORCH_CHECK(c.numel() == 2, "ctr must hold 2 values, got ", c.numel());
    if (!qt.is_cuda() && c.data_ptr<int64_t>()[1] < 0) {  // each row writes at its position: inside the cache
      const int64_t *pp = pt.data_ptr<int64_t>();
      for (int64_t r = 0; r < b; r++) {
        TORCH_CHECK(pp[r] >= 0 && pp[r] < kc.size(2), "row ", r, " writes at position ", pp[r], " outside the cache's ",
                    kc.size(2), " slots");
      }
    }
    auto y = at::empty({b, hq, 1, d}, qt.options());
    auto kj = lanpo::rope_job(tensor_ref(k), opt(bk), kc, hkv, d, true, true);
    auto vj = lanpo::rope_job(tensor_ref(v), opt(bv), vc, hkv, d, false, true);
    kj.at_slot = vj.at_slot = true;
    kj.yt = vj.yt = kc.size(2);
    lanpo::rope_launch(qt, {lanpo::rope_job(qt, opt(bq), y, hq, d, true, true), kj, vj}, tensor_ref(cos),
                       tensor_ref(sin), tensor_ref(pos), 1, c.narrow(0, 1, 1));
    *out = lanpo::new_handle(y);
  })
}

extern "C" char *lanpo_sample(lanpo_tensor pick, lanpo_tensor lp, lanpo_tensor u, lanpo_tensor ctr, lanpo_tensor tok,
                              lanpo_tensor pos, lanpo_tensor bias, lanpo_tensor rec, int greedy) {
  LANPO_GUARD("sample", {
    RECORD_FUNCTION("lanpo::sample", std::vector<c10::IValue>());
    const auto &pk = tensor_ref(pick), &l = tensor_ref(lp), &r = tensor_ref(rec);
    int64_t rows = pk.size(0), v = pk.size(1), ldu = r.size(1);
    TORCH_CHECK(pk.dim() == 2 && l.sizes() == pk.sizes(), "pick ", pk.sizes(), " and lp ", l.sizes(), " must be [R, V]");
    check_on(pk, pk, "pick", at::kFloat);
    check_on(l, pk, "lp", at::kFloat);
    check_on(r, pk, "rec", at::kLong);
    check_on(tensor_ref(ctr), pk, "ctr", at::kLong);
    check_on(tensor_ref(tok), pk, "tok", at::kLong);
    check_on(tensor_ref(pos), pk, "pos", at::kLong);
    TORCH_CHECK(r.size(0) == rows && tensor_ref(tok).numel() == rows && tensor_ref(pos).numel() == rows,
                "rec, tok and pos must have ", rows, " rows");
    at::Tensor ut = opt(u), bt = opt(bias);
    TORCH_CHECK(greedy || ut.defined(), "sampling needs the uniforms u");
    if (ut.defined()) {
      check_on(ut, pk, "u", at::kDouble);
      TORCH_CHECK(ut.size(0) == rows && ut.size(1) == ldu, "u ", ut.sizes(), " must match rec ", r.sizes());
    }
    int64_t tmax = 0;
    if (bt.defined()) {
      TORCH_CHECK(bt.dim() == 2 && bt.size(0) == rows && bt.is_contiguous() && bt.device() == pk.device(),
                  "bias must be contiguous [", rows, ", Tmax], got ", bt.sizes());
      tmax = bt.size(1);
    }
    const double *up = ut.defined() ? ut.data_ptr<double>() : nullptr;
    auto *ctrp = tensor_ref(ctr).data_ptr<int64_t>();
    auto *tokp = tensor_ref(tok).data_ptr<int64_t>(), *posp = tensor_ref(pos).data_ptr<int64_t>();
#ifdef LANPO_CUDA
    if (pk.is_cuda()) {
      c10::cuda::CUDAGuard guard(pk.device());
      lanpo::cuda::sample(lanpo::cuda_stream(pk), pk.data_ptr<float>(), l.data_ptr<float>(), rows, v, greedy != 0, up,
                          ldu, ctrp, tokp, posp, bt.defined() ? bt.data_ptr() : nullptr,
                          bt.defined() ? lanpo::elem_of(bt.scalar_type()) : lanpo::cuda::Elem::kF32, tmax,
                          r.data_ptr<int64_t>());
      return nullptr;
    }
#endif
    lanpo::check_cpu(pk);
    if (bt.defined()) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, bt.scalar_type(), "sample", [&] {
        sample_cpu<scalar_t>(pk.data_ptr<float>(), l.data_ptr<float>(), rows, v, greedy != 0, up, ldu, ctrp, tokp, posp,
                             bt.data_ptr<scalar_t>(), tmax, r.data_ptr<int64_t>());
      });
    } else {
      sample_cpu<float>(pk.data_ptr<float>(), l.data_ptr<float>(), rows, v, greedy != 0, up, ldu, ctrp, tokp, posp,
                        nullptr, 0, r.data_ptr<int64_t>());
    }
  })
}

extern "C" int lanpo_sdpa_gqa_supported(void) {
#ifdef LANPO_SDPA_GQA
  return 1;
#else
  return 0;
#endif
}

extern "C" char *lanpo_sdpa(lanpo_tensor q, lanpo_tensor k, lanpo_tensor v, lanpo_tensor mask, int is_causal,
                            int enable_gqa, lanpo_tensor *out) {
  LANPO_GUARD("scaled_dot_product_attention", {
    at::Tensor mt = opt(mask);
    c10::optional<at::Tensor> m;
    if (mt.defined()) m = mt;
#ifdef LANPO_SDPA_GQA
    *out = lanpo::new_handle(at::scaled_dot_product_attention(tensor_ref(q), tensor_ref(k), tensor_ref(v), m, 0.0,
                                                              is_causal != 0, std::nullopt, enable_gqa != 0));
#else
    TORCH_CHECK(!enable_gqa, "scaled_dot_product_attention has no enable_gqa before libtorch 2.5 (this is ",
                TORCH_VERSION, ")");
    *out = lanpo::new_handle(
        at::scaled_dot_product_attention(tensor_ref(q), tensor_ref(k), tensor_ref(v), m, 0.0, is_causal != 0));
#endif
  })
}

extern "C" char *lanpo_upload(const void *data, const int64_t *shape, int ndim, int dtype, int device, int *async,
                              lanpo_tensor *out) {
  LANPO_GUARD("upload", {
    auto st = static_cast<at::ScalarType>(dtype);
    std::vector<int64_t> sz(shape, shape + ndim);
    *async = 0;
#ifdef LANPO_CUDA
    if (device >= 0) {
      // Pinned staging memory: the copy runs on the stream without the host
      // waiting for it, and the caching host allocator keeps the staging
      // block until the copy is done.
      auto host = at::empty(sz, at::TensorOptions().dtype(st).pinned_memory(true));
      if (host.numel() > 0) std::memcpy(host.data_ptr(), data, host.nbytes());
      *out = lanpo::new_handle(host.to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)), /*non_blocking=*/true));
      *async = 1;
      return nullptr;
    }
#endif
    TORCH_CHECK(device < 0, "lanpo was built without CUDA");
    auto t = at::empty(sz, at::TensorOptions().dtype(st));
    if (t.numel() > 0) std::memcpy(t.data_ptr(), data, t.nbytes());
    *out = lanpo::new_handle(t);
  })
}

// ---- CUDA graphs ----
//
// A decode step is captured on a side stream of the device (CUDA graphs
// cannot be captured on the default stream), in thread-local capture mode
// (other threads' CUDA calls are not captured and not refused), into a
// memory pool the step graphs of one generation share: they replay one at a
// time and every value they keep lives in buffers made before capture.

#ifdef LANPO_CUDA
namespace {
struct SideStream {
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStream previous;
  c10::DeviceIndex device;
  c10::DeviceIndex previous_device;
};
}  // namespace
#endif

extern "C" char *lanpo_graph_supported(int *supported) {
  LANPO_GUARD("graph_supported", {
#ifdef LANPO_CUDA
    *supported = 1;
#else
    *supported = 0;
#endif
  })
}

extern "C" char *lanpo_side_stream_new(int device, void **out) {
  LANPO_GUARD("side_stream_new", {
#ifdef LANPO_CUDA
    auto dev = static_cast<c10::DeviceIndex>(device);
    auto cur = c10::cuda::getCurrentCUDAStream(dev);
    *out = new SideStream{c10::cuda::getStreamFromPool(false, dev), cur, dev, dev};
#else
    (void)device;
    *out = nullptr;
    TORCH_CHECK(false, "lanpo was built without CUDA");
#endif
  })
}

// Makes the side stream current after the work queued so far on the current
// stream (enter), and back (exit: the previous stream then waits for
// everything the side stream ran).
extern "C" char *lanpo_side_stream_enter(void *s) {
  LANPO_GUARD("side_stream_enter", {
#ifdef LANPO_CUDA
    auto *ss = static_cast<SideStream *>(s);
    // The stream's device becomes the current one too: capture and the
    // kernels' launches use the current device's current stream.
    ss->previous_device = c10::cuda::current_device();
    c10::cuda::set_device(ss->device);
    ss->previous = c10::cuda::getCurrentCUDAStream(ss->device);
    at::cuda::CUDAEvent ready;
    ready.record(ss->previous);
    ready.block(ss->stream);
    c10::cuda::setCurrentCUDAStream(ss->stream);
#else
    (void)s;
    TORCH_CHECK(false, "lanpo was built without CUDA");
#endif
  })
}

extern "C" char *lanpo_side_stream_exit(void *s) {
  LANPO_GUARD("side_stream_exit", {
#ifdef LANPO_CUDA
    auto *ss = static_cast<SideStream *>(s);
    at::cuda::CUDAEvent done;
    done.record(ss->stream);
    done.block(ss->previous);
    c10::cuda::setCurrentCUDAStream(ss->previous);
    c10::cuda::set_device(ss->previous_device);
#else
    (void)s;
    TORCH_CHECK(false, "lanpo was built without CUDA");
#endif
  })
}

extern "C" void lanpo_side_stream_free(void *s) {
#ifdef LANPO_CUDA
  delete static_cast<SideStream *>(s);
#else
  (void)s;
#endif
}

extern "C" char *lanpo_graph_pool(uint64_t pool[2]) {
  LANPO_GUARD("graph_pool", {
#ifdef LANPO_CUDA
    auto id = at::cuda::graph_pool_handle();
    pool[0] = id.first;
    pool[1] = id.second;
#else
    pool[0] = pool[1] = 0;
    TORCH_CHECK(false, "lanpo was built without CUDA");
#endif
  })
}

// Starts capturing the calling thread's CUDA work on the current stream
// (a side stream: lanpo_side_stream_enter first) into a new graph.
extern "C" char *lanpo_graph_capture_begin(const uint64_t pool[2], void **graph) {
  LANPO_GUARD("graph_capture_begin", {
#ifdef LANPO_CUDA
    auto g = std::make_unique<at::cuda::CUDAGraph>();
    g->capture_begin({pool[0], pool[1]}, cudaStreamCaptureModeThreadLocal);
    *graph = g.release();
#else
    (void)pool;
    *graph = nullptr;
    TORCH_CHECK(false, "lanpo was built without CUDA");
#endif
  })
}

extern "C" char *lanpo_graph_capture_end(void *graph) {
  LANPO_GUARD("graph_capture_end", {
#ifdef LANPO_CUDA
    static_cast<at::cuda::CUDAGraph *>(graph)->capture_end();
#else
    (void)graph;
    TORCH_CHECK(false, "lanpo was built without CUDA");
#endif
  })
}

extern "C" char *lanpo_graph_replay(void *graph) {
  LANPO_GUARD("graph_replay", {
#ifdef LANPO_CUDA
    static_cast<at::cuda::CUDAGraph *>(graph)->replay();
#else
    (void)graph;
    TORCH_CHECK(false, "lanpo was built without CUDA");
#endif
  })
}

extern "C" void lanpo_graph_free(void *graph) {
#ifdef LANPO_CUDA
  delete static_cast<at::cuda::CUDAGraph *>(graph);
#else
  (void)graph;
#endif
}
