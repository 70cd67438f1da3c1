// Package demo is lanpo demo: the embedded worlds (world.go: the rule
// worlds of rulesworld.go, transfer and control, and the arithmetic world
// of mathworld.go) with their teachers, the demo's stages — SFT, then GRPO
// and LANPO arms from the same checkpoint — with held-out evaluation
// (demo.go), what the rule worlds' arms did (analysis.go), and the demo's
// sections of the run report (report.go, report_rules.go). Only cmd/lanpo
// imports it.
package demo
