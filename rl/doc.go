// Package rl holds what one RL step passes between the GRPO loop (trainer)
// and its exploration plug-in (feedback.Explorer, LANPO's side): the
// problems, the prompts a step samples from (with any context the plug-in
// added), the sampled rollouts as the plug-in sees them, the solve
// prompt's renderer both use, and the named random streams every draw of a
// run comes from (rng.go). It sits below both, so neither names the
// other's fields.
package rl
