// Package eval is lanpo eval: math benchmarks (bench.go), sampled and
// verified in LANPO's three inference modes — zero-shot, retrieval and
// self-correct, with the training run's own prompts through
// feedback.Builder (run.go; evaluator.go generates and verifies a batch)
// — with resumable results (samples.go), their summaries
// (summary.go, metrics.go: mean@k, unbiased pass@k, maj@k),
// decontamination against training files, and run reports with inline
// SVG charts (report.go, chart.go). It sits below trainer: a training run's
// evaluator (trainer.TrainingEvaluator) calls it.
package eval
