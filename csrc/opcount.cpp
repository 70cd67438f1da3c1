// Counting the operators the calling thread dispatches (lanpo bench
// generate's kernels per layer). libtorch's dispatcher announces every
// operator call to RecordFunction observers — composite operators (linear,
// scaled_dot_product_attention) as well as the operators they call — and
// lanpo's own fused ops announce themselves the same way (RECORD_FUNCTION in
// kernels.cpp). A call is a *kernel* when it reaches a backend kernel: the
// operator has a CPU or CUDA kernel of its own (a native kernel; operators it
// calls inside, such as addmm's copy of the bias on CPU, count too), or it is
// a leaf of the call tree (no operator it calls did work: lanpo's fused ops).
// Composite operators count as the kernels they call, views (metadata only)
// and allocations apart. Wrapping ATen ops in one C++ function therefore does
// not make them one kernel: each ATen op inside still counts.
#include "bridge.h"

#include <ATen/core/function_schema.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

// What a call is, before looking at what it called.
enum class Sort {
  kOp,        // an operator that may do device work
  kMetadata,  // a view (an alias of an input it does not write: view,
              // transpose, narrow, expand, detach …) or a call that returns
              // no tensor (result_type): no device work
  kLanpo,     // one of lanpo's fused ops (no schema; RECORD_FUNCTION)
  kScope,     // anything else without a schema (autograd's own scopes)
};

struct Frame {
  std::string name;
  Sort sort = Sort::kOp;
  bool backend = false;     // the operator has a CPU or CUDA kernel of its own
  bool has_kernel = false;  // some operator below it was a kernel
};

struct Counter {
  at::CallbackHandle handle = 0;
  std::vector<Frame> stack;
  std::map<std::string, int64_t> kernels;  // by operator name
  std::map<std::string, bool> backend;     // cached dispatcher lookups
  int64_t views = 0, allocs = 0, composite = 0, syncs = 0;
  bool trace = false;  // LANPO_OPCOUNT_TRACE: print every call as it ends
};

thread_local std::unique_ptr<Counter> counter;

// Operators that only allocate (no device work). The caching allocator
// serves them without a kernel launch.
bool is_alloc(const std::string &n) {
  return n == "aten::empty" || n == "aten::empty_strided" || n == "aten::empty_like" || n == "aten::new_empty" ||
         n == "aten::new_empty_strided" || n == "aten::resize_" || n == "aten::lift_fresh";
}

// Operators that make the host wait for the device (a value read, or an
// output size that depends on the data).
bool is_sync(const std::string &n) {
  return n == "aten::_local_scalar_dense" || n == "aten::nonzero" || n == "aten::masked_select" ||
         n == "aten::_unique2" || n == "aten::unique_consecutive" || n == "aten::is_nonzero" || n == "aten::equal";
}

Sort sort_of(const at::RecordFunction &fn, const std::string &name) {
  auto schema = fn.operator_schema();
  if (!schema.has_value()) return name.rfind("lanpo::", 0) == 0 ? Sort::kLanpo : Sort::kScope;
  if (name == "aten::_unsafe_view" || name == "aten::_reshape_alias") return Sort::kMetadata;
  bool tensor = false;
  for (const auto &r : schema->returns()) {
    const auto &t = r.type();
    tensor = tensor || t->kind() == c10::TypeKind::TensorType || t->kind() == c10::TypeKind::ListType ||
             t->kind() == c10::TypeKind::OptionalType;
  }
  if (!tensor) return Sort::kMetadata;
  const auto *alias = schema->returns()[0].alias_info();
  return alias != nullptr && !alias->isWrite() ? Sort::kMetadata : Sort::kOp;
}

// Whether the dispatcher holds a CPU or CUDA kernel for the operator (not
// only a composite one written in terms of other operators).
bool has_backend_kernel(Counter &c, const at::RecordFunction &fn, const std::string &key) {
  auto it = c.backend.find(key);
  if (it != c.backend.end()) return it->second;
  bool b = false;
  if (auto name = fn.operator_name()) {
    if (auto op = c10::Dispatcher::singleton().findOp(*name)) {
      b = op->hasKernelForDispatchKey(c10::DispatchKey::CPU) || op->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
    }
  }
  c.backend[key] = b;
  return b;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn) {
  if (counter) {
    Frame f;
    f.name = fn.name();
    f.sort = sort_of(fn, f.name);
    auto op = fn.operator_name();
    f.backend = has_backend_kernel(*counter, fn, op ? f.name + "." + op->overload_name : f.name);
    counter->stack.push_back(std::move(f));
  }
  return nullptr;
}

void on_end(const at::RecordFunction & /*fn*/, at::ObserverContext * /*ctx*/) {
  if (!counter || counter->stack.empty()) return;
  Frame f = std::move(counter->stack.back());
  counter->stack.pop_back();
  bool kernel = false;
  if (is_sync(f.name)) {
    counter->syncs++;  // a read of device memory, not a kernel
  } else if (f.sort == Sort::kMetadata) {
    counter->views++;
  } else if (f.sort == Sort::kScope) {
    // not an operator: what it called counts
  } else if (is_alloc(f.name)) {
    counter->allocs++;
  } else if (f.backend || !f.has_kernel) {
    counter->kernels[f.name]++;
    kernel = true;
  } else {
    counter->composite++;
  }
  if ((kernel || f.has_kernel) && !counter->stack.empty()) counter->stack.back().has_kernel = true;
  if (counter->trace) {
    std::fprintf(stderr, "opcount: %*s%s%s\n", static_cast<int>(2 * counter->stack.size()), "", f.name.c_str(),
                 kernel ? " [kernel]" : f.sort == Sort::kMetadata ? " [metadata]" : "");
  }
}

}  // namespace

extern "C" char *lanpo_opcount_start(void) {
  LANPO_GUARD("opcount_start", {
    TORCH_CHECK(!counter, "operator counting is already on for this thread");
    auto c = std::make_unique<Counter>();
    c->trace = std::getenv("LANPO_OPCOUNT_TRACE") != nullptr;
    c->handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(on_start, on_end).scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
    counter = std::move(c);
  })
}

extern "C" char *lanpo_opcount_stop(lanpo_opcount *out, char **table) {
  LANPO_GUARD("opcount_stop", {
    *table = nullptr;
    TORCH_CHECK(counter, "operator counting is not on for this thread");
    at::removeCallback(counter->handle);
    std::unique_ptr<Counter> c = std::move(counter);
    out->views = c->views;
    out->allocs = c->allocs;
    out->composite = c->composite;
    out->syncs = c->syncs;
    out->kernels = 0;
    std::string t;
    for (const auto &kv : c->kernels) {
      out->kernels += kv.second;
      t += kv.first + "\t" + std::to_string(kv.second) + "\n";
    }
    *table = static_cast<char *>(std::malloc(t.size() + 1));
    TORCH_CHECK(*table != nullptr, "out of host memory");
    std::memcpy(*table, t.c_str(), t.size() + 1);
  })
}
