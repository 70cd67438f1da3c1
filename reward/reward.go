// Package reward extracts final answers from model responses, decides
// whether they equal the gold answer (math-verify's job, in pure Go with
// bounded work), and turns that into rewards for the trainer.
//
// Rewards come from a Scorer (scorer.go), chosen by the reward: section
// (Config): math — the verdict (VerifyBatch: 1 for a verified answer)
// plus, optionally, a weight times HasBoxedAnswer, a whole batch on all
// cores at once — or the user's own program (command) or server (http).
// Each verdict carries the reward, whether it counts as correct and a
// reason.
package reward

// HasBoxedAnswer reports whether the response states its answer in a
// complete \boxed{…} or \fbox{…}, the form the prompts ask for (the format
// reward). truncated: the response was cut off by the token limit.
func HasBoxedAnswer(response string, truncated bool) bool {
	_, found, ok := lastBoxed(response, truncated)
	return found && ok
}
