package demo

import (
	"fmt"
	"math/rand"
	"strings"

	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/seed"
)

// The math world as a teacher: it knows its problems and the column method,
// so it can write what a good policy would for each of LANPO's skills —
// attempts (worked or brief, right or with a carry slip), summaries of them,
// reflections that check an attempt in columns, and plans condensed from
// related problems — for the demo's SFT stage, through the same builders
// lanpo seed uses (seed.Builder), so the prompts are the trainer's.

// demoPrompts are short LANPO prompts for the demo's byte-level model
// (lanpo.prompts): the default ones are several hundred bytes, which the
// 0.8 M-parameter model would have to read as that many tokens.
const demoPrompts = `system: "Be brief."
reflection: "Try: {attempt}\nCheck it."
abstraction: "Plan: {plan}"
lessons: "Notes:\n{lessons}\nWhich apply?"
condense: "{problem}\n{lessons}\nPlan?"
plan_header: "Plan:"
summarize: "{problem}\nTry: {attempt}\n{outcome} Sum up."
outcome_correct: "Right."
outcome_wrong: "Wrong."
flow_header: "Flow:"
principles_header: "Rule:"
pitfalls_header: "Risk:"
relevance: "A: {query}\nB: {candidate}\nSame? 0-9."
rating_prefix: "Rating: "
`

// attemptKind is how a simulated attempt went.
type attemptKind int

const (
	workedRight attemptKind = iota // column steps, right
	briefRight                     // the result only, right
	briefWrong                     // the result only, off in one column
)

// attempt writes an attempt at it: worked or brief, right, or wrong by a
// slip the column method prevents (a dropped carry or borrow, or a tens
// digit off by one).
func (it Item) attempt(kind attemptKind, rng *rand.Rand) (text string, correct bool) {
	switch kind {
	case workedRight:
		return it.Solution, true
	case briefRight:
		return it.Brief, true
	}
	ans := 0
	fmt.Sscan(it.Answer, &ans)
	wrong := ans + 10*(1+rng.Intn(2)) // the tens slip
	if rng.Intn(2) == 0 && ans >= 10 {
		wrong = ans - 10
	}
	return strings.Replace(it.Brief, "{"+it.Answer+"}", fmt.Sprintf("{%d}", wrong), 1), false
}

// method names the item's operation, its column rule and its risk, in a
// few words: the demo's model reads every byte as a token.
func (it Item) method() (op, rule, risk string) {
	switch it.Level {
	case 1:
		return "fact", "Use the digit fact.", "Mixing + and -."
	case 4:
		return "times", "Ones times, carry, tens times plus carry.", "Dropping the carry."
	}
	if strings.Contains(it.Problem, "-") {
		return "minus", "Ones first, borrow if needed, then tens.", "Dropping the borrow."
	}
	return "plus", "Ones first, carry at 10, then tens.", "Dropping the carry."
}

// summary is the ideal summary of an attempt.
func (it Item) summary(kind attemptKind) pool.Summary {
	_, rule, risk := it.method()
	switch kind {
	case workedRight:
		return pool.Summary{FlowOfThought: "Columns; right.", Principles: rule, Pitfalls: risk}
	case briefRight:
		return pool.Summary{FlowOfThought: "No columns; right.", Principles: rule, Pitfalls: "Skipping columns."}
	}
	return pool.Summary{FlowOfThought: "No columns; tens off.", Principles: rule, Pitfalls: risk}
}

// redo is the ideal answer to the reflection prompt: the attempt checked
// in columns, that is, the worked solution.
func (it Item) redo() string {
	if it.Level == 1 {
		return it.Brief
	}
	return it.Solution
}

// plan is the ideal plan condensed from related problems' lessons.
func (it Item) plan() string {
	_, rule, _ := it.method()
	return rule
}

// worldSeed writes the demo's skill examples for SFT problems: for n
// problems each (chosen from its own stream) a summary of a simulated
// attempt, a reflection on one (right and wrong attempts shown equally
// often), and a plan condensed from another problem of its kind with a
// solve that uses it.
func worldSeed(b *seed.Builder, items []Item, rngSeed int64, n int) []seed.Example {
	rng := rand.New(rand.NewSource(rngSeed))
	byKind := map[string][]Item{}
	for _, it := range items {
		op, _, _ := it.method()
		k := fmt.Sprint(it.Level, op)
		byKind[k] = append(byKind[k], it)
	}
	var out []seed.Example
	reflections := 0
	share := float64(n) / float64(max(len(items), 1))
	for _, it := range items {
		if rng.Float64() < share {
			kind := attemptKind(rng.Intn(3))
			text, correct := it.attempt(kind, rng)
			out = append(out, b.Summarize(it.ID, it.Problem, text, correct, it.summary(kind)))
		}
		if rng.Float64() < share {
			// Alternate wrong and right shown attempts: a model that sees
			// mostly wrong ones learns that a shown attempt is wrong.
			kind := briefWrong
			if reflections%2 == 1 {
				kind = attemptKind(rng.Intn(2)) // worked or brief, right
			}
			reflections++
			text, _ := it.attempt(kind, rng)
			out = append(out, b.Reflect(it.ID, it.Problem, pool.Attempt{Text: text}, it.redo()))
		}
		if rng.Float64() < share {
			op, _, _ := it.method()
			related := byKind[fmt.Sprint(it.Level, op)]
			var lessons []pool.Lesson
			for len(lessons) < 1 && len(related) > 1 {
				r := related[rng.Intn(len(related))]
				if r.ID == it.ID {
					continue
				}
				s := r.summary(attemptKind(rng.Intn(3)))
				lessons = append(lessons, pool.Lesson{ProblemID: r.ID, Principles: s.Principles, Pitfalls: s.Pitfalls})
			}
			out = append(out, b.Condense(it.ID, it.Problem, lessons, it.plan()), b.SolveWithPlan(it.ID, it.Problem, it.plan(), it.Solution))
		}
	}
	return out
}
