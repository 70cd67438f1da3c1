// Package trainer holds lanpo's training loops — SFT (sft.go) and GRPO
// (grpo_loop.go) — with their losses and advantages (grpo.go), the AdamW
// optimizer with saveable state (optim.go), the LR schedule, run configs
// (config.go), checkpoints and exact resume (checkpoint.go), and the step
// loop they share (session.go). It uses the model only through its API.
package trainer
