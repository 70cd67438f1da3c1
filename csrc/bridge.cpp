#include "bridge.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <stdexcept>
#include <vector>

#include <malloc.h>

#ifdef LANPO_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

namespace {
// Index of the all-pools total in the allocator's StatArray. The enum that
// names it (StatType::AGGREGATE, 0 in every release) moved from
// c10::cuda::CUDACachingAllocator (2.1) to c10::CachingAllocator (2.11).
constexpr size_t kAggregateStat = 0;
}  // namespace
#endif

extern "C" char *lanpo_get_build_info(lanpo_build_info *out) {
  LANPO_GUARD("build_info", {
    std::memset(out, 0, sizeof(*out));
    std::strncpy(out->torch_version, TORCH_VERSION, sizeof(out->torch_version) - 1);
    out->cxx11_abi = _GLIBCXX_USE_CXX11_ABI;
#ifdef LANPO_CUDA
    out->built_with_cuda = 1;
#endif
    out->cuda_available = torch::cuda::is_available() ? 1 : 0;
    out->cuda_device_count = static_cast<int>(torch::cuda::device_count());
    out->cudnn_available = torch::cuda::cudnn_is_available() ? 1 : 0;
    out->num_threads = at::get_num_threads();
  })
}

namespace {
struct NotAStdException {};
}  // namespace

extern "C" char *lanpo_selftest_throw(int kind) {
  LANPO_GUARD("selftest_throw", {
    switch (kind) {
      case 0:
        TORCH_CHECK(false, "selftest: c10::Error from TORCH_CHECK");
      case 1:
        throw std::runtime_error("selftest: std::runtime_error");
      case 2:
        throw NotAStdException{};
      default:
        break;
    }
  })
}

extern "C" char *lanpo_synchronize(void) {
  LANPO_GUARD("synchronize", {
    if (torch::cuda::is_available()) torch::cuda::synchronize();
  })
}

extern "C" char *lanpo_cuda_peak_bytes(int device, int reset, int64_t *bytes, int *supported) {
  LANPO_GUARD("cuda_peak_bytes", {
    *bytes = 0;
    *supported = 0;
#ifdef LANPO_CUDA
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    *bytes = stats.allocated_bytes[kAggregateStat].peak;
    *supported = 1;
    if (reset) c10::cuda::CUDACachingAllocator::resetPeakStats(device);
#endif
  })
}

extern "C" char *lanpo_cuda_mem_info(int device, int64_t *free_bytes, int64_t *total_bytes, int64_t *allocated, int64_t *reserved, int *supported) {
  LANPO_GUARD("cuda_mem_info", {
    *free_bytes = *total_bytes = *allocated = *reserved = 0;
    *supported = 0;
#ifdef LANPO_CUDA
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    size_t f = 0, t = 0;
    cudaError_t err = cudaMemGetInfo(&f, &t);
    if (err != cudaSuccess) throw std::runtime_error(std::string("cudaMemGetInfo: ") + cudaGetErrorString(err));
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    const auto agg = kAggregateStat;
    *free_bytes = static_cast<int64_t>(f);
    *total_bytes = static_cast<int64_t>(t);
    *allocated = stats.allocated_bytes[agg].current;
    *reserved = stats.reserved_bytes[agg].current;
    *supported = 1;
#endif
  })
}

extern "C" char *lanpo_cuda_empty_cache(int *supported) {
  LANPO_GUARD("cuda_empty_cache", {
    *supported = 0;
#ifdef LANPO_CUDA
    c10::cuda::CUDACachingAllocator::emptyCache();
    *supported = 1;
#endif
  })
}

extern "C" char *lanpo_cuda_device_name(int device, char *name, int n, int *supported) {
  LANPO_GUARD("cuda_device_name", {
    *supported = 0;
    if (n > 0) name[0] = 0;
#ifdef LANPO_CUDA
    cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, device);
    if (err != cudaSuccess) throw std::runtime_error(std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err));
    if (n > 0) {
      std::strncpy(name, prop.name, static_cast<size_t>(n) - 1);
      name[n - 1] = 0;
    }
    *supported = 1;
#endif
  })
}

extern "C" void lanpo_malloc_measure(void) {
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  malloc_trim(0);
}

extern "C" char *lanpo_manual_seed(int64_t seed) {
  LANPO_GUARD("manual_seed", { at::manual_seed(static_cast<uint64_t>(seed)); })
}

extern "C" char *lanpo_set_grad_enabled(int enabled, int *previous) {
  LANPO_GUARD("set_grad_enabled", {
    *previous = at::GradMode::is_enabled() ? 1 : 0;
    at::GradMode::set_enabled(enabled != 0);
  })
}

extern "C" char *lanpo_backward(lanpo_tensor out, lanpo_tensor grad) {
  LANPO_GUARD("backward", {
    torch::autograd::backward({*static_cast<at::Tensor *>(out)}, {*static_cast<at::Tensor *>(grad)});
  })
}

extern "C" char *lanpo_clear_grad(lanpo_tensor t) {
  LANPO_GUARD("clear_grad", { static_cast<at::Tensor *>(t)->mutable_grad().reset(); })
}

extern "C" char *lanpo_ensure_grad(lanpo_tensor t) {
  LANPO_GUARD("ensure_grad", {
    auto *x = static_cast<at::Tensor *>(t);
    if (!x->grad().defined()) x->mutable_grad() = at::zeros_like(*x);
  })
}

extern "C" char *lanpo_tensor_from_bytes(const void *data, const int64_t *shape, int ndim, int src_dtype, int dst_dtype,
                                         int device, lanpo_tensor *out) {
  LANPO_GUARD("tensor_from_bytes", {
    std::vector<int64_t> sizes(shape, shape + ndim);
    auto src = at::from_blob(const_cast<void *>(data), sizes,
                             at::TensorOptions().dtype(static_cast<at::ScalarType>(src_dtype)));
    at::Device dev = device < 0 ? at::Device(at::kCPU) : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device));
    *out =
        lanpo::new_handle(src.to(dev, static_cast<at::ScalarType>(dst_dtype), /*non_blocking=*/false, /*copy=*/true));
  })
}

extern "C" char *lanpo_tensor_to_bytes(lanpo_tensor t, void *dst, int64_t nbytes) {
  LANPO_GUARD("tensor_to_bytes", {
    auto host = lanpo::tensor_ref(t).detach().to(at::kCPU).contiguous();
    int64_t n = static_cast<int64_t>(host.numel() * host.element_size());
    TORCH_CHECK(n == nbytes, "tensor of ", host.sizes(), " ", host.scalar_type(), " is ", n, " bytes, buffer is ",
                nbytes);
    if (n > 0) std::memcpy(dst, host.data_ptr(), static_cast<size_t>(n));
  })
}
