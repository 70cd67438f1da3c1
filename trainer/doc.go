// Package trainer holds lanpo's SFT and GRPO/LANPO loops: losses and
// advantages, the optimizer and LR schedule, checkpoints, and the
// data-parallel glue. It uses the model through its API only.
//
// The loops land with the trainer issue; this file only names the role.
package trainer
