// Collectives for multi-process data parallelism, over torch's c10d
// (TCPStore, PrefixStore, ProcessGroupGloo and, in CUDA builds,
// ProcessGroupNCCL). The C API is in lanpo.h; package dist (Go) is the
// user-facing layer.
//
// Everything real is compiled only under LANPO_DIST, which
// third_party/prepare defines when it found Gloo's headers (the torch wheel
// ships none) and libtorch has ProcessGroupGloo.hpp. Without it every
// function returns an error; the Go side adds why the build has no support.
#include "bridge.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#ifdef LANPO_DIST
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#endif

extern "C" void lanpo_dist_support(int *gloo, int *nccl) {
  *gloo = 0;
  *nccl = 0;
#ifdef LANPO_DIST
  *gloo = 1;
#ifdef USE_C10D_NCCL
  *nccl = 1;
#endif
#endif
}

#ifndef LANPO_DIST

namespace {
char *unsupported(const char *where) {
  return lanpo::dup_error(where, "lanpo was built without distributed support");
}

}  // namespace

extern "C" char *lanpo_dist_init(const char *, const char *, int, int, int, int, const char *, const char *,
                                 int64_t, int, lanpo_dist *out) {
  *out = nullptr;
  return unsupported("init");
}
extern "C" char *lanpo_dist_allreduce_sum(lanpo_dist, lanpo_tensor) { return unsupported("allreduce"); }
extern "C" char *lanpo_dist_broadcast(lanpo_dist, lanpo_tensor, int) { return unsupported("broadcast"); }
extern "C" char *lanpo_dist_allgather(lanpo_dist, lanpo_tensor, lanpo_tensor) { return unsupported("allgather"); }
extern "C" char *lanpo_dist_reduce_scatter_sum(lanpo_dist, lanpo_tensor, lanpo_tensor) {
  return unsupported("reduce_scatter");
}
extern "C" char *lanpo_dist_barrier(lanpo_dist) { return unsupported("barrier"); }
extern "C" void lanpo_dist_free(lanpo_dist) {}
extern "C" char *lanpo_store_serve(const char *, int, int64_t, lanpo_store *out, int *port) {
  *out = nullptr;
  *port = 0;
  return unsupported("store_serve");
}
extern "C" void lanpo_store_free(lanpo_store) {}

#else  // LANPO_DIST

namespace {

// Group is what a lanpo_dist handle points to. The backend keeps its own
// reference to the store; holding one here too keeps a serving rank's
// TCPStore alive until the group is freed.
struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  bool nccl = false;
  int rank = 0;
  int size = 0;
  at::Device device = at::Device(at::kCPU);
};

Group &group(lanpo_dist d) {
  TORCH_CHECK(d != nullptr, "the process group was freed");
  return *static_cast<Group *>(d);
}

// Gloo's network device. GLOO_SOCKET_IFNAME (comma-separated interfaces)
// wins, as in torch; otherwise Gloo binds to bind_host, the address the Go
// side chose (127.0.0.1 when the master is on this machine, else this
// machine's address on the route to the master); an empty bind_host falls
// back to torch's default (whatever the hostname resolves to).
std::vector<std::shared_ptr<::gloo::transport::Device>> glooDevices(const std::string &bind_host) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devs;
  const char *ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    std::string names(ifname);
    size_t start = 0;
    while (start <= names.size()) {
      size_t end = names.find(',', start);
      if (end == std::string::npos) end = names.size();
      std::string name = names.substr(start, end - start);
      if (!name.empty()) devs.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      start = end + 1;
    }
  }
  if (devs.empty()) {
    devs.push_back(bind_host.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                     : c10d::ProcessGroupGloo::createDeviceForHostname(bind_host));
  }
  return devs;
}

void wait(const c10::intrusive_ptr<c10d::Work> &work) {
  // Without a timeout: a Gloo op ends at the group's own timeout
  // (Options.timeout), and a shorter wait would leave the op running with
  // the group unusable (its destructor would block on it).
  work->wait();
}

// issue starts a collective. For Gloo it holds a process-wide lock while the
// op is enqueued: libtorch 2.11's flight recorder (one per process) registers
// a group's status in a map before taking its own lock, so two groups that
// start collectives at once in one process (ranks as goroutines, as the
// tests run them) can corrupt that map and crash. Enqueueing does not wait
// for peers, so the lock is held for microseconds and the wait is outside
// it. NCCL is left alone: its first collective may block creating the
// communicator until every rank arrives.
template <class F>
c10::intrusive_ptr<c10d::Work> issue(const Group &g, F start) {
  if (g.nccl) return start();
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  return start();
}

at::Tensor flat(const Group &g, const at::Tensor &t, const char *what) {
  TORCH_CHECK(t.defined(), what, " is an undefined tensor");
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous (sizes ", t.sizes(), ", strides ", t.strides(), ")");
  TORCH_CHECK(t.device() == g.device, what, " is on ", t.device(), ", the group's tensors live on ", g.device);
  return t.view({-1});
}

#ifdef USE_C10D_NCCL
// ProcessGroupNCCL::Options holds an ncclConfig_t, whose size depends on the
// nccl.h compiled against, while its constructor is libtorch's, compiled
// against libtorch's own NCCL. Options::create() would allocate with this
// file's idea of the size and let that constructor fill libtorch's: with an
// older nccl.h here, past the end. So allocate with room to spare (freed by
// libtorch's deleting destructor: plain operator delete, as malloc'd memory).
c10::intrusive_ptr<c10d::ProcessGroupNCCL::Options> ncclOptions() {
  using Options = c10d::ProcessGroupNCCL::Options;
  void *mem = ::operator new(sizeof(Options) + 4096);
  return c10::intrusive_ptr<Options>::unsafe_steal_from_new(new (mem) Options(/*is_high_priority_stream=*/false));
}
#endif

}  // namespace

extern "C" char *lanpo_dist_init(const char *backend, const char *host, int port, int rank, int world, int is_server,
                                 const char *prefix, const char *bind_host, int64_t timeout_ms, int cuda_device,
                                 lanpo_dist *out) {
  *out = nullptr;
  LANPO_GUARD("init", {
    const std::string be(backend);
    TORCH_CHECK(be == "gloo" || be == "nccl", "unknown backend \"", be, "\" (want gloo or nccl)");
    TORCH_CHECK(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " of world size ", world);
    TORCH_CHECK(port > 0 && port < 65536, "port ", port, " out of range");
    const std::chrono::milliseconds timeout(timeout_ms);

    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(port);
    so.isServer = is_server != 0;
    so.numWorkers = world;
    // The process group's rendezvous waits for every rank anyway (within
    // the timeout); waiting here as well would only add a second barrier.
    so.waitWorkers = false;
    so.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(std::string(host), so);
    if (prefix != nullptr && *prefix != '\0') store = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), store);

    auto g = std::make_unique<Group>();
    g->store = store;
    g->rank = rank;
    g->size = world;
    if (be == "gloo") {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      opts->devices = glooDevices(bind_host == nullptr ? "" : bind_host);
      opts->threads = static_cast<int>(opts->devices.size()) * 2;
      g->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
    } else {
#ifdef USE_C10D_NCCL
      TORCH_CHECK(cuda_device >= 0, "the nccl backend needs a CUDA device");
      auto opts = ncclOptions();
      opts->timeout = timeout;
      g->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
      g->nccl = true;
      g->device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cuda_device));
#else
      TORCH_CHECK(false, "lanpo was built without NCCL support (a CUDA build, CUDA=1, with nccl.h found)");
#endif
    }
    *out = g.release();
  })
}

extern "C" char *lanpo_dist_allreduce_sum(lanpo_dist d, lanpo_tensor t) {
  LANPO_GUARD("allreduce", {
    auto &g = group(d);
    std::vector<at::Tensor> ts{flat(g, lanpo::tensor_ref(t), "tensor")};
    wait(issue(g, [&] { return g.backend->allreduce(ts, c10d::AllreduceOptions{}); }));
  })
}

extern "C" char *lanpo_dist_broadcast(lanpo_dist d, lanpo_tensor t, int root) {
  LANPO_GUARD("broadcast", {
    auto &g = group(d);
    TORCH_CHECK(root >= 0 && root < g.size, "root ", root, " is not a rank of a group of ", g.size);
    std::vector<at::Tensor> ts{flat(g, lanpo::tensor_ref(t), "tensor")};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    wait(issue(g, [&] { return g.backend->broadcast(ts, o); }));
  })
}

extern "C" char *lanpo_dist_allgather(lanpo_dist d, lanpo_tensor in, lanpo_tensor out) {
  LANPO_GUARD("allgather", {
    auto &g = group(d);
    at::Tensor x = flat(g, lanpo::tensor_ref(in), "input");
    at::Tensor y = flat(g, lanpo::tensor_ref(out), "output");
    const int64_t n = x.numel();
    TORCH_CHECK(y.numel() == n * g.size, "output has ", y.numel(), " elements, want world size ", g.size, " × ", n);
    TORCH_CHECK(x.scalar_type() == y.scalar_type(), "input is ", x.scalar_type(), ", output ", y.scalar_type());
    if (g.nccl) {
      wait(issue(g, [&] { return g.backend->_allgather_base(y, x); }));
      return nullptr;
    }
    // Gloo gathers into one flat buffer and copies chunk r into outputs[r];
    // views of y make that copy land in place.
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < g.size; ++r) outs[0].push_back(y.narrow(0, r * n, n));
    std::vector<at::Tensor> ins{x};
    wait(issue(g, [&] { return g.backend->allgather(outs, ins); }));
  })
}

extern "C" char *lanpo_dist_reduce_scatter_sum(lanpo_dist d, lanpo_tensor in, lanpo_tensor out) {
  LANPO_GUARD("reduce_scatter", {
    auto &g = group(d);
    at::Tensor x = flat(g, lanpo::tensor_ref(in), "input");
    at::Tensor y = flat(g, lanpo::tensor_ref(out), "output");
    const int64_t n = y.numel();
    TORCH_CHECK(x.numel() == n * g.size, "input has ", x.numel(), " elements, want world size ", g.size, " × ", n);
    TORCH_CHECK(x.scalar_type() == y.scalar_type(), "input is ", x.scalar_type(), ", output ", y.scalar_type());
    if (g.nccl) {
      wait(issue(g, [&] { return g.backend->_reduce_scatter_base(y, x, c10d::ReduceScatterOptions{}); }));
      return nullptr;
    }
    // Gloo 2.1 has no reduce_scatter: sum everything (on a copy, the input
    // stays as it was, as with NCCL) and keep this rank's chunk. It moves
    // world size times the data a real reduce-scatter would.
    std::vector<at::Tensor> ts{x.clone()};
    wait(issue(g, [&] { return g.backend->allreduce(ts, c10d::AllreduceOptions{}); }));
    y.copy_(ts[0].narrow(0, g.rank * n, n));
  })
}

extern "C" char *lanpo_dist_barrier(lanpo_dist d) {
  LANPO_GUARD("barrier", {
    auto &g = group(d);
    c10d::BarrierOptions o;
    if (g.nccl) o.device_ids = {g.device.index()};
    wait(issue(g, [&] { return g.backend->barrier(o); }));
  })
}

extern "C" void lanpo_dist_free(lanpo_dist d) {
  try {
    delete static_cast<Group *>(d);
  } catch (...) {
    // A destructor that throws has nothing left to clean; never abort.
  }
}

extern "C" char *lanpo_store_serve(const char *host, int port, int64_t timeout_ms, lanpo_store *out, int *bound) {
  *out = nullptr;
  *bound = 0;
  LANPO_GUARD("store_serve", {
    TORCH_CHECK(port >= 0 && port < 65536, "port ", port, " out of range");
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(port);
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = std::chrono::milliseconds(timeout_ms);
    auto s = c10::make_intrusive<c10d::TCPStore>(std::string(host), so);
    *bound = s->getPort();
    *out = new c10::intrusive_ptr<c10d::TCPStore>(std::move(s));
  })
}

extern "C" void lanpo_store_free(lanpo_store s) {
  try {
    delete static_cast<c10::intrusive_ptr<c10d::TCPStore> *>(s);
  } catch (...) {
  }
}

#endif  // LANPO_DIST
