// Package optim is lanpo's optimizer: AdamW with state it can save and
// reload exactly (optim.go), the learning-rate schedule (schedule.go), and
// data-parallel AdamW — gradients all-reduced in buckets, or ZeRO stage 1
// and 2 with the state (and for stage 2 the gradients) sharded by rank —
// behind the one Optimizer interface the training loops call (zero.go).
// Checkpoints of any world size and sharding reload into any other by
// parameter name.
package optim
