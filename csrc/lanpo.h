// C API of lanpo's C++ code. No C++ type crosses it: tensors travel as
// gotch's handles (a pointer to a heap-allocated torch::Tensor), and every
// function returns NULL on success or an error message allocated with
// malloc that the caller frees. No function lets a C++ exception escape.
#ifndef LANPO_CSRC_H
#define LANPO_CSRC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *lanpo_tensor;

typedef struct {
  char torch_version[32]; // TORCH_VERSION of the headers compiled against
  int cxx11_abi;          // _GLIBCXX_USE_CXX11_ABI compiled with
  int built_with_cuda;    // lanpo's CUDA kernels compiled in (CUDA=1)
  int cuda_available;     // libtorch sees a usable CUDA runtime and device
  int cuda_device_count;
  int cudnn_available;
  int num_threads;        // at::get_num_threads()
} lanpo_build_info;

char *lanpo_get_build_info(lanpo_build_info *out);

// RMSNorm as in Hugging Face Qwen2/Llama: statistics in fp32 (fp64 inputs
// stay fp64), the normalized value cast back to x's dtype, then times weight.
// x [..., H], weight [H]. Differentiable in x and weight.
char *lanpo_rms_norm(lanpo_tensor x, lanpo_tensor weight, double eps, lanpo_tensor *out);

// Throws a C++ exception of the given kind inside the bridge, for tests of
// the error path: 0 c10::Error (TORCH_CHECK), 1 std::runtime_error,
// 2 a non-standard exception type, other: no exception.
char *lanpo_selftest_throw(int kind);

#ifdef __cplusplus
}
#endif

#endif
