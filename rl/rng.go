package rl

import "hash/fnv"

// A run's randomness is keyed, never drawn from a shared generator: each
// draw comes from (run seed, step, index, purpose), so resume, any world
// size and any order of work reproduce it. The index is a prompt's global
// index in the step for per-prompt draws, or one of the negative stream
// numbers below for a whole-step stream. Their values are part of what a
// run computes: changing one changes LANPO's and lanpo seed's outputs.
const (
	StreamAux            = -1 // LANPO's auxiliary generation: summaries, plans, relevance ratings
	StreamSeedAnswers    = -2 // lanpo seed: attempts at the problems
	StreamSeedReflect    = -3 // lanpo seed: redos after reflection
	StreamSeedAbstract   = -4 // lanpo seed: solutions with a plan
	StreamReferencePairs = -5 // LANPO: the random pool pairs of the quantile scale
)

// StepSeed derives a step's sampling seed from the run seed (splitmix64):
// the rollout's seed, and the base of DrawKey.
func StepSeed(seed uint64, step int) uint64 {
	z := seed + uint64(step+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// DrawKey keys a random stream by (step, index, purpose): a draw never
// depends on what else ran. It is combined with the run seed by the
// caller (rand.NewPCG(seed, DrawKey(…)), or DrawKey(…) ^ seed).
func DrawKey(step, index int, purpose string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(purpose))
	return StepSeed(h.Sum64()^uint64(index)<<20, step)
}
