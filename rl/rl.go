package rl

// Problem is one training problem: what the policy solves and the gold
// answer the verifier checks it against.
type Problem struct {
	ID      string `json:"id"`
	Problem string `json:"problem"`
	Answer  string `json:"answer"`
	Where   string `json:"-"` // file:line it was read from
	// A record whose problem is a chat (verl's "prompt": [{role, content}],
	// the instruction already inside): Problem is its last user message,
	// System its system message, if any; Chat says so.
	Chat   bool   `json:"-"`
	System string `json:"-"`
	// Record is the record as the data file holds it (every field), for a
	// user's reward (reward.Request.Problem).
	Record map[string]any `json:"-"`
}

// Prompt modes: from scratch (the problem alone), or with one of LANPO's
// two kinds of feedback as context.
const (
	ModeScratch     = "scratch"
	ModeReflection  = "reflection"
	ModeAbstraction = "abstraction"
)

// Prompt is what one problem of a step is sampled from. The loop makes it
// (Problem, Index, IDs = TrainIDs = the bare prompt, Mode scratch); a
// plug-in may give it a context before the rollout.
type Prompt struct {
	Problem int     // index into the run's problems
	Index   int     // global index in the step (round·P + i): keys its random draws and sample streams
	IDs     []int64 // what the sampler sees
	// TrainIDs is what the update conditions on: IDs, or the bare prompt.
	// Where they differ the loop recomputes π_old on TrainIDs and weights
	// each token by min(π_old/μ, TISCap) against the sampler's log-probs μ.
	TrainIDs []int64
	TISCap   float64
	Mode     string // ModeScratch, ModeReflection or ModeAbstraction
	Feedback bool   // drawn feedback-aware
	Context  int    // tokens the context added
	Shown    string // reflection: the final answer of the attempt shown
	// Related are abstraction's retrieval candidates and their relevance
	// (logged with the rollouts).
	Related []Related
	// Lessons are the lessons an abstraction prompt's plan was condensed
	// from (or, with lanpo.context: lessons, those it shows), each as its
	// principles and pitfalls (logged with the rollouts).
	Lessons []string
}

// Related is one retrieval candidate of an abstraction prompt, as the
// rollout log shows it: which problem, its relevance on
// lanpo.similarity_scale and on the scorer's own scale, and whether it
// passed the filter (γ and lanpo.relevance_floor).
type Related struct {
	ProblemID string  `json:"problem_id"`
	Relevance float64 `json:"relevance"`
	Raw       float64 `json:"relevance_raw"`
	Passed    bool    `json:"passed"`
}

// Rollout is one sampled response, as a plug-in sees it after the update.
type Rollout struct {
	Prompt    *Prompt
	Sample    int // index within its group
	Text      string
	Tokens    int // generated tokens
	Reward    float64
	Correct   bool
	Truncated bool
}

// Phases times a step's phases; Enter starts the named one (the previous
// one ends).
type Phases interface {
	Enter(phase string)
}

// Span marks, for diagnostics, the part of a response to a problem that
// carries its decision: byte offsets [lo, hi) in the text, ok false where
// the text has none. The demo's rule worlds mark the rule an answer names
// ("zorp is aab: 7 7 3." — "aab"; given it, the rest is copied), so a
// log-likelihood can be read inside and outside it. Never a training
// signal: only metrics read it.
type Span func(problemID, text string) (lo, hi int, ok bool)

// InSpan reports, for each token of a response whose decoded pieces are
// pieces (their concatenation is the text Span saw), whether any of its
// bytes fall in [lo, hi).
func InSpan(pieces []string, lo, hi int) []bool {
	out := make([]bool, len(pieces))
	at := 0
	for i, p := range pieces {
		end := at + len(p)
		out[i] = end > lo && at < hi && len(p) > 0
		at = end
	}
	return out
}
