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

// ---- Fused kernels of the forward (fused.cpp; CUDA in cuda/fused.cu) ----
//
// Each is one kernel on CPU and on CUDA, takes part in autograd, and rounds
// to the element type where the ATen composition it replaces does.

// RMSNorm as in Hugging Face Qwen2/Llama: statistics in fp32 (fp64 inputs
// stay fp64), the normalized value cast back to x's dtype, then times weight.
// x [..., H] contiguous, weight [H] of x's dtype. Differentiable in x and
// weight.
char *lanpo_rms_norm(lanpo_tensor x, lanpo_tensor weight, double eps, lanpo_tensor *out);

// The residual add and RMSNorm of a pre-norm block in one pass:
// *h = x + residual (rounded to the dtype), *y = rms_norm(*h, weight).
char *lanpo_add_rms_norm(lanpo_tensor x, lanpo_tensor residual, lanpo_tensor weight, double eps, lanpo_tensor *y,
                         lanpo_tensor *h);

// The projections q [B, T, hq·D], k and v [B, T, hkv·D] (+ their biases; NULL:
// none) to attention's layout [B, heads, T, D], q and k rotated by RoPE at
// positions pos [B, T] (int64) with the tables cos, sin [P, D] (fp32, cast to
// the dtype as transformers does): x·cos + rotate_half(x)·sin, bit for bit.
char *lanpo_rope(lanpo_tensor q, lanpo_tensor k, lanpo_tensor v, lanpo_tensor bq, lanpo_tensor bk, lanpo_tensor bv,
                 lanpo_tensor cos, lanpo_tensor sin, lanpo_tensor pos, int64_t hq, int64_t hkv, lanpo_tensor *oq,
                 lanpo_tensor *ok, lanpo_tensor *ov);

// silu(gate) · up, elementwise (contiguous, same shape and dtype).
char *lanpo_swiglu(lanpo_tensor gate, lanpo_tensor up, lanpo_tensor *out);

// ---- Decoding (decode.cpp; CUDA in cuda/fused.cu) ----
//
// Every integer a decode step needs lives on the device: ctr [2] int64 holds
// the output column and the cache slot of the latest token. A negative slot
// means slots decoding: each row's cache holds its own positions, so a row
// writes at its position pos[r] and the slot counter is not read.

// lanpo_rope for one new token per row (q, k, v [B, 1, ·]) that writes the
// rotated keys and the values into kcache and vcache [B, hkv, Tmax, D] at slot
// ctr[1] (at pos[r] when ctr[1] < 0), and returns q [B, hq, 1, D]. Not
// differentiable.
char *lanpo_rope_cache(lanpo_tensor q, lanpo_tensor k, lanpo_tensor v, lanpo_tensor bq, lanpo_tensor bk,
                       lanpo_tensor bv, lanpo_tensor cos, lanpo_tensor sin, lanpo_tensor pos, lanpo_tensor kcache,
                       lanpo_tensor vcache, lanpo_tensor ctr, lanpo_tensor *out);

// One token per row from pick [R, V] (fp32): its argmax when greedy, else
// the inverse CDF of pick (unnormalized probabilities) at u[r, ctr[0]]
// (u [R, U] fp64; lanpo's summation order, fused_cuda.h). Records
// rec[r, ctr[0]] = token | bits(lp[r, token]) << 32 (rec [R, U] int64),
// writes the token to tok [R, 1], adds one to pos [R, 1] and sets
// bias[r, ctr[1] + 1] = 0, or bias[r, pos[r]] when ctr[1] < 0 (bias [R,
// Tmax], the attention mask; NULL: none).
// Every argument is on one device; nothing is read back to the host.
char *lanpo_sample(lanpo_tensor pick, lanpo_tensor lp, lanpo_tensor u, lanpo_tensor ctr, lanpo_tensor tok,
                   lanpo_tensor pos, lanpo_tensor bias, lanpo_tensor rec, int greedy);

// scaled_dot_product_attention with is_causal and, where this libtorch has it
// (≥ 2.5: lanpo_sdpa_gqa_supported), enable_gqa; mask may be NULL.
char *lanpo_sdpa(lanpo_tensor q, lanpo_tensor k, lanpo_tensor v, lanpo_tensor mask, int is_causal, int enable_gqa,
                 lanpo_tensor *out);
int lanpo_sdpa_gqa_supported(void);

// Copies a host buffer (dtype a c10::ScalarType code, contiguous) into a new
// tensor on device (-1: CPU). On CUDA the copy goes through pinned memory and
// the host does not wait for it (*async = 1).
char *lanpo_upload(const void *data, const int64_t *shape, int ndim, int dtype, int device, int *async,
                   lanpo_tensor *out);

// CUDA graphs of decode steps. A side stream of a device is where capture
// (and the warm-up before it) runs: enter makes it current after the work
// queued so far, exit makes the previous stream current again, waiting for
// the side stream. Graphs capture the calling thread's work between
// capture_begin and capture_end (thread-local capture mode) into a memory
// pool from lanpo_graph_pool; replay runs one on the current stream. On a
// build without CUDA, supported is 0 and the others fail.
char *lanpo_graph_supported(int *supported);
char *lanpo_side_stream_new(int device, void **out);
char *lanpo_side_stream_enter(void *s);
char *lanpo_side_stream_exit(void *s);
void lanpo_side_stream_free(void *s);
char *lanpo_graph_pool(uint64_t pool[2]);
char *lanpo_graph_capture_begin(const uint64_t pool[2], void **graph);
char *lanpo_graph_capture_end(void *graph);
char *lanpo_graph_replay(void *graph);
void lanpo_graph_free(void *graph);

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

// The k most likely tokens of each row of softmax(hidden · weightᵀ / T):
// *ids [N, k] int64 and *logp [N, k] their log-probs, largest first; 0 for
// masked rows. No gradient. Chunked as lanpo_fused_logprob (topk.cpp).
char *lanpo_fused_topk_logprob(lanpo_tensor hidden, lanpo_tensor weight, lanpo_tensor mask, double temperature,
                               int64_t chunk, int64_t k, lanpo_tensor *ids, lanpo_tensor *logp);

// *logp [N, K] = log softmax(hidden · weightᵀ / T)[n, ids[n, k]] for ids
// [N, K] int64 (every id in [0, V), masked rows' too); 0 for masked rows.
// Differentiable in hidden and weight when grad mode is on (topk.cpp).
char *lanpo_fused_gather_logprob(lanpo_tensor hidden, lanpo_tensor weight, lanpo_tensor ids, lanpo_tensor mask,
                                 double temperature, int64_t chunk, lanpo_tensor *logp);

// The cuBLAS handle of the last GEMM the fused op ran on this thread and
// torch's current handle for device (CUDA builds; *supported = 0 otherwise):
// the op runs on torch's handle and workspace, never a private one.
char *lanpo_logprob_blas_handles(int device, void **last_used, void **torch_current, int *supported);

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

// Drops t's accumulated gradient (t.grad becomes undefined and its memory
// is freed), as ZeRO-2 does once a gradient's shard has been reduced.
char *lanpo_clear_grad(lanpo_tensor t);

// Gives t a zero gradient if it has none (a rank whose share of a step was
// empty ran no backward, yet must take part in the gradient reduction).
char *lanpo_ensure_grad(lanpo_tensor t);

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
// Gives every unused block the caching allocator holds back to the driver
// (torch.cuda.empty_cache), so another process can use it. *supported is 0
// on a build without CUDA.
char *lanpo_cuda_empty_cache(int *supported);
// The name of a CUDA device (cudaGetDeviceProperties), NUL-terminated in
// name[0..n). *supported is 0 on a build without CUDA.
char *lanpo_cuda_device_name(int device, char *name, int n, int *supported);
// Makes the host allocator return every large free to the system (fixed
// mmap threshold, heap trimmed), so peak RSS measures what tensors hold.
void lanpo_malloc_measure(void);

// ---- Collectives (dist.cpp), over torch's c10d ----
//
// A lanpo_dist is one process group (a TCPStore rendezvous plus a Gloo or
// NCCL backend); a lanpo_store is a TCPStore server on its own. Both are
// opaque. In a build without distributed support (prepare found no Gloo
// headers) every function returns an error and lanpo_dist_support reports 0.

typedef void *lanpo_dist;
typedef void *lanpo_store;

// Which backends this build compiled in (1) or not (0).
void lanpo_dist_support(int *gloo, int *nccl);

// Joins a process group. backend is "gloo" or "nccl". The rendezvous is a
// TCPStore at host:port, served by this process when is_server (rank 0 of a
// launch whose launcher serves no store), with every key under prefix when
// prefix is non-empty (torchrun's agent store: "/worker/attempt_<n>").
// bind_host is the address Gloo listens on ("" for torch's default; the
// environment's GLOO_SOCKET_IFNAME wins over both). timeout_ms bounds the
// rendezvous and every collective. cuda_device is the device index of an
// NCCL group (ignored by Gloo). Blocks until every rank has joined.
char *lanpo_dist_init(const char *backend, const char *host, int port, int rank, int world, int is_server,
                      const char *prefix, const char *bind_host, int64_t timeout_ms, int cuda_device,
                      lanpo_dist *out);

// Collectives, in place or into out, each waited for before returning
// (on NCCL: the current CUDA stream waits for it). Tensors are contiguous
// and on the group's device; they are treated as flat.
//   allreduce_sum:   t = Σ_ranks t
//   broadcast:       t = t of rank root
//   allgather:       in n elements, out world × n; chunk r of out = rank r's in
//   reduce_scatter:  in world × n elements, out n = Σ_ranks chunk <rank> of in
char *lanpo_dist_allreduce_sum(lanpo_dist d, lanpo_tensor t);
char *lanpo_dist_broadcast(lanpo_dist d, lanpo_tensor t, int root);
char *lanpo_dist_allgather(lanpo_dist d, lanpo_tensor in, lanpo_tensor out);
char *lanpo_dist_reduce_scatter_sum(lanpo_dist d, lanpo_tensor in, lanpo_tensor out);
char *lanpo_dist_barrier(lanpo_dist d);
// Leaves the group and frees it (NULL is a no-op).
void lanpo_dist_free(lanpo_dist d);

// Serves a TCPStore on host:port (0: a free port, reported in *bound_port),
// the way torchrun's agent does; for tests.
char *lanpo_store_serve(const char *host, int port, int64_t timeout_ms, lanpo_store *out, int *bound_port);
void lanpo_store_free(lanpo_store s);

// Throws a C++ exception of the given kind inside the bridge, for tests of
// the error path: 0 c10::Error (TORCH_CHECK), 1 std::runtime_error,
// 2 a non-standard exception type, other: no exception.
char *lanpo_selftest_throw(int kind);

// ---- CUDA device and determinism (device.cpp, determinism.cpp) ----
//
// Both device functions set *supported = 0 and do nothing on a build
// without CUDA; an out-of-range device is an error naming the count.

// Makes device the calling host thread's current CUDA device (the CUDA
// runtime keeps one per thread): a rank calls it with its LOCAL_RANK's GPU
// before its first CUDA work, so its context, cuBLAS handles, NCCL
// communicators and allocations default to that GPU rather than GPU 0.
char *lanpo_cuda_set_device(int device, int *supported);
// The calling host thread's current CUDA device.
char *lanpo_cuda_current_device(int *device, int *supported);

// torch's deterministic algorithms (torch.use_deterministic_algorithms):
// with enabled, ops that have a deterministic variant use it, and the
// others fail (or, with warn_only, warn). cuBLAS then also needs
// CUBLAS_WORKSPACE_CONFIG=:4096:8 (or :16:8) in the environment before the
// process's first matrix product.
char *lanpo_set_deterministic(int enabled, int warn_only);
char *lanpo_get_deterministic(int *enabled, int *warn_only);

// ---- Operator counting (opcount.cpp) ----
//
// Counts the operators the calling thread dispatches between start and stop
// (libtorch's RecordFunction observers; lanpo's fused ops announce
// themselves too). kernels: leaf calls that do device work; views: calls
// returning an alias (metadata only); allocs: allocation-only calls;
// composite: calls whose work is done by the kernels they call; syncs:
// calls that make the host wait for the device (item, nonzero …). *table
// (malloc'd, the caller frees it) lists "name\tcount\n" for each kernel.
typedef struct {
  int64_t kernels, views, allocs, composite, syncs;
} lanpo_opcount;

char *lanpo_opcount_start(void);
char *lanpo_opcount_stop(lanpo_opcount *out, char **table);

// ---- CUDA events (events.cpp) ----
//
// Timing GPU work without synchronizing at every point: an event recorded on
// the current stream of device completes when the GPU reaches it. On a build
// without CUDA, create sets *supported = 0 and *event = NULL; the others
// accept NULL and do nothing.
char *lanpo_cuda_event_create(int device, void **event, int *supported);
char *lanpo_cuda_event_record(void *event);
// Milliseconds between two recorded events; waits for end to complete.
char *lanpo_cuda_event_elapsed(void *start, void *end, double *ms);
void lanpo_cuda_event_destroy(void *event);

#ifdef __cplusplus
}
#endif

#endif
