// The calling thread's current CUDA device. The CUDA runtime keeps one per
// host thread, and every CUDA call that names no device (the context a
// process creates first, cuBLAS handles, NCCL's communicators, the caching
// allocator's default) uses it: a rank that never sets it works on GPU 0.
// C API in lanpo.h; a build without CUDA reports *supported = 0.
#include "bridge.h"

#ifdef LANPO_CUDA
#include <c10/cuda/CUDAFunctions.h>

extern "C" char *lanpo_cuda_set_device(int device, int *supported) {
  *supported = 1;
  LANPO_GUARD("cuda_set_device", {
    const int n = static_cast<int>(c10::cuda::device_count());
    TORCH_CHECK(device >= 0 && device < n, "cuda:", device, " does not exist: ", n,
                " CUDA device(s) are visible to this process");
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  })
}

extern "C" char *lanpo_cuda_current_device(int *device, int *supported) {
  *device = -1;
  *supported = 1;
  LANPO_GUARD("cuda_current_device", { *device = static_cast<int>(c10::cuda::current_device()); })
}

#else  // LANPO_CUDA

extern "C" char *lanpo_cuda_set_device(int, int *supported) {
  *supported = 0;
  return nullptr;
}

extern "C" char *lanpo_cuda_current_device(int *device, int *supported) {
  *device = -1;
  *supported = 0;
  return nullptr;
}

#endif  // LANPO_CUDA
