// Package demo is lanpo demo: a small math world (mathworld.go) and its
// teacher (worldteacher.go), the demo's stages — SFT, then GRPO and LANPO
// arms from the same checkpoint — with held-out evaluation (demo.go), and
// the demo's sections of the run report (report.go). Only cmd/lanpo
// imports it.
package demo
