// Package reward extracts final answers from model responses, decides
// whether they equal the gold answer (math-verify's job, in pure Go with
// bounded work), and turns that into rewards for the trainer.
package reward

// Sample is what a reward function sees of one rollout.
type Sample struct {
	Problem  string
	Response string // the decoded model output
	Gold     string // the dataset's answer
	// Truncated: the response was cut off by the token limit; without an
	// explicit answer it is not correct (see VerifyResponse).
	Truncated bool
}

// Func scores one sample. Implementations are safe for concurrent use.
type Func interface {
	Name() string
	Score(s Sample) float64
}

// Correctness is 1 when the response's final answer equals the gold
// answer, else 0.
type Correctness struct{ Options Options }

func (Correctness) Name() string { return "correctness" }

func (c Correctness) Score(s Sample) float64 {
	if VerifyResponse(s.Response, s.Gold, s.Truncated, c.Options).Correct {
		return 1
	}
	return 0
}

// Format is 1 when the response states its answer in a complete \boxed{…}
// (what the prompt asks for), else 0.
type Format struct{}

func (Format) Name() string { return "format" }

func (Format) Score(s Sample) float64 {
	if _, found, ok := lastBoxed(s.Response, false); found && ok {
		return 1
	}
	return 0
}

// Weighted is a weighted sum of reward functions.
type Weighted struct {
	Funcs   []Func
	Weights []float64
}

func (w Weighted) Name() string { return "weighted" }

func (w Weighted) Score(s Sample) float64 {
	var total float64
	for i, f := range w.Funcs {
		total += w.Weights[i] * f.Score(s)
	}
	return total
}
