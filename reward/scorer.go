package reward

import (
	"context"
	"fmt"
	"math"
)

// A reward kind scores rollouts: the trainer's step, lanpo eval, LANPO's
// pool (a rollout's outcome) and lanpo seed go through a Scorer and never
// know which kind it is (reward.kind: math, code, command, http; Config).

// Request is one rollout to score.
type Request struct {
	// Problem is the problem's record as the data file holds it (every
	// field, nested ones too), for a user's reward; ID names it.
	Problem map[string]any `json:"problem"`
	ID      string         `json:"id"`
	// Answer is the gold answer the data mapping read ("" where the data
	// has none).
	Answer string `json:"answer,omitempty"`
	// Prompt is the text the policy was given (the chat template applied),
	// Response what it wrote (special tokens stripped).
	Prompt   string `json:"prompt"`
	Response string `json:"response"`
	// Truncated: the response was cut off at the token limit.
	Truncated bool `json:"truncated"`
}

// Verdict is one rollout's score.
type Verdict struct {
	Reward float64 `json:"reward"`
	// Correct: the rollout counts as solved (accuracy, LANPO's pool
	// outcome, eval's pass@k).
	Correct bool `json:"correct"`
	// Reason is a short account for the rollouts log ("" allowed). It
	// knows the outcome: nothing that builds a prompt reads it.
	Reason string `json:"reason,omitempty"`
	// Extracted is the answer the math verifier took from the response
	// (math only).
	Extracted string `json:"extracted,omitempty"`
	// Err is a failure to score this rollout that the kind's policy turned
	// into a 0 reward (reward.on_error: zero); "" for a scored rollout.
	Err string `json:"-"`
}

// Scorer scores batches of rollouts; verdicts are in request order.
type Scorer interface {
	Score(ctx context.Context, reqs []Request) ([]Verdict, error)
	// Close stops what the scorer started (a reward program).
	Close() error
}

// Math is the math verifier as a Scorer: reward 1 for a verified final
// answer (VerifyBatch on every core), plus FormatWeight when the response
// states it in \boxed{…}.
type Math struct {
	FormatWeight float64
	Opt          Options
}

// Score verifies every response against its problem's answer.
func (m Math) Score(_ context.Context, reqs []Request) ([]Verdict, error) {
	pairs := make([]Pair, len(reqs))
	for i, r := range reqs {
		pairs[i] = Pair{Response: r.Response, Gold: r.Answer, Truncated: r.Truncated}
	}
	out := make([]Verdict, len(reqs))
	for i, v := range VerifyBatch(pairs, 0, m.Opt) {
		out[i] = Verdict{Correct: v.Correct, Extracted: v.Extracted}
		switch {
		case v.Correct:
			out[i].Reward, out[i].Reason = 1, "verified: "+v.Extracted
		case v.Extracted == "":
			out[i].Reason = "no final answer"
		default:
			out[i].Reason = "not equal to the answer: " + v.Extracted
		}
		if m.FormatWeight > 0 && HasBoxedAnswer(reqs[i].Response, reqs[i].Truncated) {
			out[i].Reward += m.FormatWeight
		}
	}
	return out, nil
}

// Close does nothing.
func (Math) Close() error { return nil }

// ScoreChecked is s.Score with CheckVerdicts after it: what every caller
// of a Scorer runs (where names request i for the error).
func ScoreChecked(ctx context.Context, s Scorer, reqs []Request, where func(i int) string) ([]Verdict, error) {
	vs, err := s.Score(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if err := CheckVerdicts(reqs, vs, where); err != nil {
		return nil, err
	}
	return vs, nil
}

// CheckVerdicts refuses a batch whose rewards are not finite numbers,
// naming the problem (where: each request's file:line or id).
func CheckVerdicts(reqs []Request, vs []Verdict, where func(i int) string) error {
	if len(vs) != len(reqs) {
		return fmt.Errorf("reward: %d verdicts for %d rollouts", len(vs), len(reqs))
	}
	for i, v := range vs {
		if math.IsNaN(v.Reward) || math.IsInf(v.Reward, 0) {
			return fmt.Errorf("%s: reward %v for a response to problem %s: want a finite number", where(i), v.Reward, reqs[i].ID)
		}
	}
	return nil
}
