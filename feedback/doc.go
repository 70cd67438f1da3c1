// Package feedback is LANPO's side of the training loop: the feedback
// builder (builder.go: reflection prompts; abstraction.go: retrieval, the
// relevance filter and condensed plans; summarize.go: the policy's
// summaries of its attempts; aux.go: auxiliary generation), the relevance
// scorers and their calibration (relevance.go, calibrate.go), the lanpo:
// config section (config.go), and the Explorer (lanpo.go) that plugs into
// the GRPO loop through trainer.Explorer. lanpo eval and lanpo seed use
// the same builder, so they ask exactly what training asks. It sits below
// trainer and never imports it.
package feedback
