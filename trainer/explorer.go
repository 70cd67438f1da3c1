package trainer

import (
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
)

// Explorer is the GRPO loop's one seam for changing what the policy sees
// while exploring: LANPO's feedback (feedback.Explorer) plugs in here;
// algo.name grpo runs with none. The loop owns the interface and the
// types it passes (package rl); it never names an explorer's fields, and
// an explorer never names the loop's.
type Explorer interface {
	// AddContext may give each prompt of a round a context (rl.Prompt:
	// IDs, TrainIDs, TISCap, Mode, …). ps is this rank's share of the
	// round; step is the step being run (0-based). Every rank calls it
	// every round, with or without prompts, in the same order.
	AddContext(step int, ps []*rl.Prompt, ph rl.Phases) error
	// Observe sees every rollout this rank sampled in the step, after the
	// update, and returns the step's metrics over every rank: a value
	// whose JSON object's members join the step's metrics line.
	Observe(step int, sampled []*rl.Rollout, ph rl.Phases) (metrics any, err error)
	// Tokens are the tokens the explorer prefilled and generated on this
	// rank since the last call (the step's compute).
	Tokens() (prefilled, generated int)
	// Save writes the explorer's state into a checkpoint directory.
	Save(dir string) error
	// Pool is the experience pool evaluation may read (nil: none).
	Pool() *pool.Pool
}
