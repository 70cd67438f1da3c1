package eval

import (
	"fmt"

	"github.com/lanpo-rl/lanpo/feedback"
)

// checkFit renders every problem's solve prompt before the first forward
// pass and checks that it fits the model's context with the generation
// budget (feedback.Builder.SolveFits) — so an evaluation does not stop at
// problem 169 of MATH-500 after evaluating 168. Without skip, a problem
// that does not fit is an error naming the first ones and how many; with
// skip (--skip-long-prompts) they are left out of their benchmarks and
// counted (Benchmark.SkippedLong, the summary's skipped_long_prompts).
// Prompts with context (a plan, an attempt to reflect on) shorten or fall
// back to the solve prompt on their own.
func checkFit(benches []Benchmark, fbFor func(Benchmark) *feedback.Builder, skip bool) ([]Benchmark, error) {
	var fb *feedback.Builder
	var long []string
	out := make([]Benchmark, len(benches))
	for i, b := range benches {
		fb = fbFor(b)
		keep := b.Problems[:0:0]
		for _, p := range b.Problems {
			n, fits, err := fb.SolveFits(p.Problem)
			if err != nil {
				return nil, fmt.Errorf("%s, problem %s: %w", b.Name, p.ID, err)
			}
			if !fits {
				long = append(long, fmt.Sprintf("%s %s (%d prompt tokens)", b.Name, p.ID, n))
				continue
			}
			keep = append(keep, p)
		}
		b.SkippedLong = len(b.Problems) - len(keep)
		b.Problems = keep
		out[i] = b
	}
	if len(long) == 0 {
		return out, nil
	}
	if !skip {
		return nil, fb.TooLong(long, "lower --max-new-tokens, or pass --skip-long-prompts to leave them out (counted in the summary)")
	}
	for _, b := range out {
		if len(b.Problems) == 0 {
			maxPos, maxNew := fb.ContextLimit()
			return nil, fmt.Errorf("%s: no problem's prompt fits the model's context (max_position_embeddings %d) with --max-new-tokens %d", b.Name, maxPos, maxNew)
		}
	}
	return out, nil
}
