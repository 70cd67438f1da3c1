// Package plan is lanpo plan, the memory planner: per-GPU memory of an
// SFT, GRPO or LANPO run from the model's config and the run's shape,
// before renting GPUs (plan.go), and the measurements that check its
// figures against the memory a real update takes (measure.go: host RSS on
// the CPU; the caching allocator's counts on CUDA in cuda_test.go). Nothing
// here runs during training.
package plan
