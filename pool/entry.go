package pool

import (
	"strings"
	"unicode/utf8"
)

// Summary is the policy's own account of one attempt: the lessons
// (principles and pitfalls) and, when the prompts ask for it, the flow of
// thought.
type Summary struct {
	FlowOfThought string `json:"flow_of_thought"` // how the attempt went, step by step (optional: Prompts.FlowHeader)
	Principles    string `json:"principles"`      // what is worth reusing on other problems
	Pitfalls      string `json:"pitfalls"`        // what went, or could go, wrong
}

// Empty counts the summary's empty lesson fields, principles and pitfalls
// (a weak model's summary may leave some; the trainer counts them). The
// flow of thought is optional and not counted.
func (s Summary) Empty() int {
	n := 0
	for _, f := range []string{s.Principles, s.Pitfalls} {
		if f == "" {
			n++
		}
	}
	return n
}

// Entry is one attempt at a training problem and what the pool knows of
// it.
type Entry struct {
	ProblemID string  `json:"problem_id"`
	Step      int     `json:"step"`    // training step that sampled it
	Attempt   string  `json:"attempt"` // the raw response, capped (Config.MaxAttemptChars)
	Summary   Summary `json:"summary"`
	// Outcome metadata. Only Lessons (other problems) and FailedAttempt
	// (lanpo.reflect_on: failed, a documented leak) read it.
	Correct        bool    `json:"correct"`
	Reward         float64 `json:"reward"`
	Truncated      bool    `json:"truncated"`
	ResponseTokens int     `json:"response_tokens"`
	// Which rollout it was: group (global prompt index of its step) and
	// sample within the group.
	Group  int `json:"group"`
	Sample int `json:"sample"`
	// Seq is the pool's insertion counter: eviction order and a stable
	// order for saving.
	Seq uint64 `json:"seq"`
}

// bytes is what an entry costs against Config.MaxBytes: its text.
func (e *Entry) bytes() int64 {
	return int64(len(e.Attempt) + len(e.Summary.FlowOfThought) + len(e.Summary.Principles) + len(e.Summary.Pitfalls) + len(e.ProblemID))
}

// Attempt is what a reflection prompt may show of an earlier attempt: the
// raw response and nothing else. It has no outcome, reward or summary
// field on purpose — the reflection prompt is built from this type only,
// so it cannot say whether the attempt was right.
type Attempt struct {
	ProblemID string
	Text      string
}

// Lesson is what abstraction may use of another problem's entry: its
// principles and pitfalls (summaries may know the outcome: they are about
// another problem), with final answers removed (and, in a code run, the
// code they quote).
type Lesson struct {
	ProblemID  string
	Principles string
	Pitfalls   string
}

// sanitize makes the entry's texts valid UTF-8 (invalid bytes become
// U+FFFD, as JSON would write them, so the pool in memory and pool.jsonl
// hold the same text and a resumed run sees what a straight one saw) and
// keeps the attempt's last maxAttempt characters, cut on a character
// boundary.
func (e *Entry) sanitize(maxAttempt int) {
	for _, s := range []*string{&e.ProblemID, &e.Attempt, &e.Summary.FlowOfThought, &e.Summary.Principles, &e.Summary.Pitfalls} {
		*s = strings.ToValidUTF8(*s, "\uFFFD")
	}
	e.Attempt = lastRunes(e.Attempt, maxAttempt)
}

// lastRunes is the end of s holding at most n characters.
func lastRunes(s string, n int) string {
	if len(s) <= n { // at most n bytes: at most n characters
		return s
	}
	cut := len(s)
	for k := 0; k < n && cut > 0; k++ {
		_, size := utf8.DecodeLastRuneInString(s[:cut])
		cut -= size
	}
	return s[cut:]
}
