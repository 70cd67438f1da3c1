// Package reward extracts final answers from model responses, decides
// whether they equal the gold answer (math-verify's job, in pure Go with
// bounded work), and turns that into rewards for the trainer.
//
// The trainer's reward is the verdict (VerifyBatch: 1 for a verified
// answer) plus, optionally, a weight times HasBoxedAnswer. There is no
// reward-function interface: the loop needs each rollout's verdict and
// extracted answer, not only a number, and verifies a whole batch on all
// cores at once.
package reward

// HasBoxedAnswer reports whether the response states its answer in a
// complete \boxed{…} or \fbox{…}, the form the prompts ask for (the format
// reward). truncated: the response was cut off by the token limit.
func HasBoxedAnswer(response string, truncated bool) bool {
	_, found, ok := lastBoxed(response, truncated)
	return found && ok
}
