package reward

import (
	"runtime"
	"strings"
	"sync"
	"time"
)

// Options bound one verification.
type Options struct {
	// Timeout per verification (default 1 s); Steps, the evaluator steps
	// it may take (default 200,000). Running out of either is "not
	// equivalent".
	Timeout time.Duration
	Steps   int
}

func (o Options) budget() *budget {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Steps <= 0 {
		o.Steps = 200_000
	}
	return &budget{steps: o.Steps, deadline: time.Now().Add(o.Timeout)}
}

// Result is the verdict on one response.
type Result struct {
	Correct   bool   `json:"correct"`
	Extracted string `json:"extracted"` // the answer taken from the response ("" if none)
}

// Verify is VerifyResponse for a finished response (one that ended on its
// own, not at the token limit).
func Verify(response, gold string, opt Options) Result {
	return VerifyResponse(response, gold, false, opt)
}

// VerifyResponse extracts the final answer from a model response and
// compares it with the gold answer (a dataset answer string such as
// "\frac{1}{2}" or "(3, \frac{\pi}{2})"). truncated says the response was
// cut off by the token limit. It never evaluates text as code, and its
// work is bounded by opt.
//
// Which text is the answer (ExtractResponse has the details): an explicit
// answer — a complete \boxed{…} or \fbox{…}, "final answer is …",
// "Answer: …" — counts whether the response finished or not. A truncated
// response without one scores 0: whatever number it was in the middle of
// is no answer, and rewarding it would reward cut-off text for stray
// numbers. A finished response without one is judged by its final
// non-empty line (its last display math, "the answer is …", last inline
// math or last number there).
func VerifyResponse(response, gold string, truncated bool, opt Options) Result {
	ans, ok := ExtractResponse(response, truncated)
	if !ok {
		return Result{}
	}
	return Result{Correct: Equivalent(gold, ans, opt), Extracted: ans}
}

// Equivalent reports whether two final answers are mathematically the same.
func Equivalent(gold, pred string, opt Options) (eq bool) {
	defer func() {
		if recover() != nil { // a parser bug must not take the trainer down
			eq = false
		}
	}()
	b := opt.budget()
	gn, pn := normalize(unboxGold(gold)), normalize(pred)
	if gn == "" || pn == "" {
		return false
	}
	if gn == pn {
		return true
	}
	return equivalent(parseAnswer(gn, b), parseAnswer(pn, b), b)
}

// unboxGold accepts gold answers written as responses (\boxed{…}).
func unboxGold(g string) string {
	if strings.Contains(g, `\boxed`) || strings.Contains(g, `\fbox`) {
		if ans, ok := Extract(g); ok {
			return ans
		}
	}
	return g
}

// Pair is one (response, gold) to verify.
type Pair struct {
	Response, Gold string
	// Truncated: the response was cut off by the token limit (see
	// VerifyResponse).
	Truncated bool
}

// VerifyBatch verifies pairs on a pool of workers (GOMAXPROCS when
// workers < 1); results are in input order.
func VerifyBatch(pairs []Pair, workers int, opt Options) []Result {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	out := make([]Result, len(pairs))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(workers, max(len(pairs), 1)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				out[i] = VerifyResponse(pairs[i].Response, pairs[i].Gold, pairs[i].Truncated, opt)
			}
		}()
	}
	for i := range pairs {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return out
}
