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
  char torch_version[32];  // TORCH_VERSION of the headers compiled against
  int cxx11_abi;           // _GLIBCXX_USE_CXX11_ABI compiled with
  int built_with_cuda;     // lanpo's CUDA kernels compiled in (CUDA=1)
  int cuda_available;      // libtorch sees a usable CUDA runtime and device
  int cuda_device_count;
  int cudnn_available;
  int num_threads;  // at::get_num_threads()
} lanpo_build_info;

char *lanpo_get_build_info(lanpo_build_info *out);

// RMSNorm as in Hugging Face Qwen2/Llama: statistics in fp32 (fp64 inputs
// stay fp64), the normalized value cast back to x's dtype, then times weight.
// x [..., H], weight [H]. Differentiable in x and weight.
char *lanpo_rms_norm(lanpo_tensor x, lanpo_tensor weight, double eps, lanpo_tensor *out);

// Fused linear + log-softmax + gather (+ entropy), without materializing
// [N, V] logits: for each row i with mask[i] (all rows when mask is NULL),
//   logp[i]    = log softmax(hidden[i] · weightᵀ / temperature)[targets[i]]
//   entropy[i] = −Σ_v p_v log p_v of the same distribution (if want_entropy)
// and 0 for masked rows. hidden [N, H] and weight [V, H] are fp32, bf16, fp16
// or fp64; targets [N] int64; mask [N] bool. Outputs are fp32 (fp64 for fp64
// inputs). Rows are processed chunk at a time (chunk <= 0: the default for
// the device); when grad mode is on and hidden or weight requires grad, the
// outputs take part in autograd and masked rows get exactly zero gradient.
// emulate_cuda (tests) runs the CUDA path's algorithm on CPU tensors.
char *lanpo_fused_logprob(lanpo_tensor hidden, lanpo_tensor weight, lanpo_tensor targets, lanpo_tensor mask,
                          double temperature, int64_t chunk, int want_entropy, int emulate_cuda, lanpo_tensor *logp,
                          lanpo_tensor *entropy);

// The chunk size lanpo_fused_logprob uses when given chunk <= 0.
int64_t lanpo_default_logprob_chunk(int cuda);

// Copies a host buffer holding a tensor of src_dtype and the given shape
// (little-endian, contiguous) into a new tensor of dst_dtype on device (-1
// for CPU, else the CUDA index). dtypes are c10::ScalarType codes. One copy,
// converting on the way; the buffer may be released afterwards.
char *lanpo_tensor_from_bytes(const void *data, const int64_t *shape, int ndim, int src_dtype, int dst_dtype,
                              int device, lanpo_tensor *out);

// Copies a tensor's elements (made contiguous, moved to the host) into dst,
// which holds exactly nbytes = numel × element size.
char *lanpo_tensor_to_bytes(lanpo_tensor t, void *dst, int64_t nbytes);

// Seeds libtorch's default generators (CPU and CUDA).
char *lanpo_manual_seed(int64_t seed);

// Sets autograd's grad mode on the calling thread and reports the previous
// mode in *previous (gotch's at_grad_set_enabled wrapper reads its int
// result through a wider Go int, so its answer is unreliable).
char *lanpo_set_grad_enabled(int enabled, int *previous);

// Backpropagates from out with the gradient grad (same shape) into every
// leaf that requires grad, accumulating into their .grad (activation
// checkpointing's per-layer backward).
char *lanpo_backward(lanpo_tensor out, lanpo_tensor grad);

// Waits for all queued work on the current CUDA device (no-op without CUDA),
// so timings include it.
char *lanpo_synchronize(void);

// Peak allocated bytes on a CUDA device since the last reset (reset != 0
// resets after reading). Sets *supported = 0 when lanpo was built without
// CUDA.
char *lanpo_cuda_peak_bytes(int device, int reset, int64_t *bytes, int *supported);
// Memory of a CUDA device: free and total as the driver reports them, and
// what this process's caching allocator has allocated and reserved.
// *supported is 0 on a build without CUDA.
char *lanpo_cuda_mem_info(int device, int64_t *free_bytes, int64_t *total_bytes, int64_t *allocated, int64_t *reserved, int *supported);
// Makes the host allocator return every large free to the system (fixed
// mmap threshold, heap trimmed), so peak RSS measures what tensors hold.
void lanpo_malloc_measure(void);

// Throws a C++ exception of the given kind inside the bridge, for tests of
// the error path: 0 c10::Error (TORCH_CHECK), 1 std::runtime_error,
// 2 a non-standard exception type, other: no exception.
char *lanpo_selftest_throw(int kind);

#ifdef __cplusplus
}
#endif

#endif
