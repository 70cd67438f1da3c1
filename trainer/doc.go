// Package trainer holds lanpo's training loops. The RL step reads top to
// bottom in step.go (step → collect → train → update); beside it
// rollout.go (sampling, rewards, advantages, the step's statistics),
// logprobs.go (π_old and π_ref recomputed), update.go (optimizer steps
// over micro-batches), grpo.go (advantages, token weights, the policy
// loss) and explorer.go, the one seam through which LANPO (package
// feedback) changes what the policy sees; algo.name grpo runs without one.
// sft.go is SFT. session.go opens what both share (policy, optimizer,
// state, run directory) and loop.go is their step loop (checkpoints,
// metrics, evaluation, signals, failed steps); config.go and
// config_load.go, data.go, checkpoint.go and resume.go are run configs,
// datasets, checkpoints and exact resume. It
// uses the model only through its API and the optimizer through
// optim.Optimizer.
package trainer
