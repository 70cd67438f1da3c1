// CUDA events for timing GPU work (lanpo.h, "CUDA events"): torch's
// at::cuda::CUDAEvent with timing on, recorded on the device's current
// stream, so the times describe the same stream the model's kernels run on.
#include "bridge.h"

#ifdef LANPO_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#endif

extern "C" char *lanpo_cuda_event_create(int device, void **event, int *supported) {
  LANPO_GUARD("cuda_event_create", {
    *event = nullptr;
    *supported = 0;
#ifdef LANPO_CUDA
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    auto *e = new at::cuda::CUDAEvent(cudaEventDefault);
    *event = e;
    *supported = 1;
#else
    (void)device;
#endif
  })
}

extern "C" char *lanpo_cuda_event_record(void *event) {
  LANPO_GUARD("cuda_event_record", {
#ifdef LANPO_CUDA
    if (event != nullptr) static_cast<at::cuda::CUDAEvent *>(event)->record();
#else
    (void)event;
#endif
  })
}

extern "C" char *lanpo_cuda_event_elapsed(void *start, void *end, double *ms) {
  LANPO_GUARD("cuda_event_elapsed", {
    *ms = 0;
#ifdef LANPO_CUDA
    if (start != nullptr && end != nullptr) {
      auto *e = static_cast<at::cuda::CUDAEvent *>(end);
      e->synchronize();
      *ms = static_cast<at::cuda::CUDAEvent *>(start)->elapsed_time(*e);
    }
#else
    (void)start;
    (void)end;
#endif
  })
}

extern "C" void lanpo_cuda_event_destroy(void *event) {
#ifdef LANPO_CUDA
  delete static_cast<at::cuda::CUDAEvent *>(event);
#else
  (void)event;
#endif
}
