package demo

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/seed"
)

// The rule worlds: "What is 7 zorp 3?", where the invented word names one
// of K candidate rules, each a pattern over the two operands' digits (aab:
// 7 zorp 3 = 773). Applying a rule is copying, not arithmetic: the demo's
// model is weak at digit facts. Operands are distinct digits 1-9, so every
// pattern gives another answer and only the right rule is rewarded.
//
// Transfer world: a family is one word with one rule, the same for every
// problem of the family; the prompt never states it. SFT teaches the
// candidate rules (the answer names the rule it applies, and applies a rule
// a plan states) but never a family's rule: guesses for unknown words are
// uniform over the rules. A family's rule is found only by exploring, and
// once found it is one sentence ("zorp is aab.") that answers every
// problem of the family.
//
// Control world: the same words and answers, but every problem draws its
// own rule and carries one worked example of it ("If 2 zorp 5 is 225, what
// is 7 zorp 3?"): solvable from the prompt alone, while a lesson from one
// problem says nothing about another, however alike their words.

// rulePatterns are the candidate rules in the order K takes them: a
// pattern's a and b stand for the first and second operand's digit.
var rulePatterns = []string{"ab", "ba", "aab", "abb", "aba", "bab", "baa", "bba", "aa", "bb", "abab", "baba", "abba", "baab", "aaab", "abbb", "aaa", "bbb", "aabb", "bbaa"}

// applyRule writes a pattern's answer for the digits a and b.
func applyRule(pattern string, a, b int) string {
	var s strings.Builder
	for _, c := range pattern {
		if c == 'a' {
			fmt.Fprint(&s, a)
		} else {
			fmt.Fprint(&s, b)
		}
	}
	return s.String()
}

// ruleAnswer is a solution that names its rule, spells the digits it
// copies, and boxes the result: "zorp is aab: 7 7 3. \boxed{773}".
func ruleAnswer(word, pattern string, a, b int) string {
	ans := applyRule(pattern, a, b)
	return fmt.Sprintf("%s is %s: %s. \\boxed{%s}", word, pattern, strings.Join(strings.Split(ans, ""), " "), ans)
}

// ruleStatement is the one sentence that carries a family's rule.
func ruleStatement(word, pattern string) string { return word + " is " + pattern + "." }

// notStatement is the lesson of a wrong attempt.
func notStatement(word, pattern string) string { return word + " is not " + pattern + "." }

// ruleProblem is a bare rule-world problem.
func ruleProblem(word string, a, b int) string { return fmt.Sprintf("What is %d %s %d?", a, word, b) }

// exampleProblem is a control-world problem: a worked example of its own
// rule, then the question.
func exampleProblem(word, pattern string, ea, eb, a, b int) string {
	return fmt.Sprintf("If %d %s %d is %s, what is %d %s %d?", ea, word, eb, applyRule(pattern, ea, eb), a, word, b)
}

// inventWords draws n distinct four-letter words from letters chosen so
// that they read as no English word (a rare consonant first and last) and
// hold neither a nor b, which the rule patterns use.
func inventWords(rng *rand.Rand, n int, avoid map[string]bool) []string {
	const first, vows, mid, last = "zvkqx", "eiou", "lmnrtdg", "kzxq"
	var out []string
	for len(out) < n {
		w := string([]byte{first[rng.Intn(len(first))], vows[rng.Intn(len(vows))], mid[rng.Intn(len(mid))], last[rng.Intn(len(last))]})
		if avoid[w] {
			continue
		}
		avoid[w] = true
		out = append(out, w)
	}
	return out
}

// operandPairs are the ordered pairs of distinct digits 1-9.
func operandPairs() [][2]int {
	var out [][2]int
	for a := 1; a <= 9; a++ {
		for b := 1; b <= 9; b++ {
			if a != b {
				out = append(out, [2]int{a, b})
			}
		}
	}
	return out
}

// rulesWorld is the transfer world (transfer) or its control.
type rulesWorld struct{ transfer bool }

// Item fields of a rule-world problem: Level is the family's number
// (1-based, its held-out benchmark), Family its word, Rule the pattern
// that answers it.

// heldOutPairs of the 72 operand pairs are held out, the rest are RL and
// SFT pairs: held-out problems share no operand pair with RL problems.
const heldOutPairs = 24

// split draws the families (words and rules), their RL and held-out
// problems, and the SFT material's words — disjoint from the families'.
func (w rulesWorld) split(seedV int64, p demoPlan) demoSplit {
	rng := rand.New(rand.NewSource(seedV*7919 + 17))
	pairs := operandPairs()
	rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	held, train := pairs[:heldOutPairs], pairs[heldOutPairs:]
	words := inventWords(rng, p.families+p.sftWords, map[string]bool{})
	d := demoSplit{families: words[:p.families], sftWords: words[p.families:]}
	rules := rulePatterns[:p.rulesK]
	// A different rule per family (families ≤ K): were two families to share
	// one, the most frequent rule would pay without reading the word, and a
	// policy could learn it in place of the families' rules.
	order := rng.Perm(len(rules))
	for f, word := range d.families {
		rule := rules[order[f%len(order)]]
		if w.transfer {
			d.familyRules = append(d.familyRules, rule)
		} else {
			d.familyRules = append(d.familyRules, "") // each problem its own
		}
		pick := func(from [][2]int, n int, prefix string) []Item {
			idx := rng.Perm(len(from))[:n]
			sort.Ints(idx)
			var out []Item
			for k, i := range idx {
				a, b := from[i][0], from[i][1]
				it := Item{ID: fmt.Sprintf("%s-%s-%d", prefix, word, k), Level: f + 1, Family: word, Rule: rule, A: a, B: b}
				if !w.transfer {
					// The control: a rule of its own, and one worked example of it.
					it.Rule = rules[rng.Intn(len(rules))]
					e := train[rng.Intn(len(train))]
					for e == from[i] {
						e = train[rng.Intn(len(train))]
					}
					it.Problem = exampleProblem(word, it.Rule, e[0], e[1], a, b)
				} else {
					it.Problem = ruleProblem(word, a, b)
				}
				it.Answer = applyRule(it.Rule, a, b)
				it.Solution = ruleAnswer(word, it.Rule, a, b)
				out = append(out, it)
			}
			return out
		}
		d.heldOut = append(d.heldOut, pick(held, p.heldOut, "heldout")...)
		d.rl = append(d.rl, pick(train, p.rlPerLevel, "rl")...)
	}
	d.trainPairs = train
	return d
}

// groups names the held-out benchmarks: one per family.
func (w rulesWorld) groups(d demoSplit) []string { return d.families }

// sftChats is the SFT data of both rule worlds — the same for the two, so
// one SFT checkpoint serves both: answers to bare problems of SFT words
// with a rule drawn at random for each (the format, and a uniform guess for
// an unknown word), answers to problems with a worked example (the
// control's skill), and the teacher's examples of LANPO's four skills with
// rules the SFT words hold for the occasion — never a family's word.
func (w rulesWorld) sftChats(b *seed.Builder, d demoSplit, seedV int64, p demoPlan) []seed.Example {
	rng := rand.New(rand.NewSource(seedV + 5000))
	rules := rulePatterns[:p.rulesK]
	pair := func() (int, int) { q := d.trainPairs[rng.Intn(len(d.trainPairs))]; return q[0], q[1] }
	other := func(not string) string {
		for {
			if r := rules[rng.Intn(len(rules))]; r != not {
				return r
			}
		}
	}
	var out []seed.Example
	for i := 0; i < p.sftDraws; i++ {
		word, rule := d.sftWords[rng.Intn(len(d.sftWords))], rules[rng.Intn(len(rules))]
		a, bb := pair()
		id := fmt.Sprintf("sft-%d", i)
		switch i % 2 {
		case 0: // a guess: the bare problem of an unknown word
			out = append(out, b.Answer(id, ruleProblem(word, a, bb), ruleAnswer(word, rule, a, bb)))
		case 1: // a worked example shows the rule
			ea, eb := pair()
			for ea == a && eb == bb {
				ea, eb = pair()
			}
			out = append(out, b.Answer(id, exampleProblem(word, rule, ea, eb, a, bb), ruleAnswer(word, rule, a, bb)))
		}
	}
	for i := 0; i < p.skillExamples; i++ {
		word, rule := d.sftWords[rng.Intn(len(d.sftWords))], rules[rng.Intn(len(rules))]
		a, bb := pair()
		id, problem := fmt.Sprintf("skill-%d", i), ruleProblem(word, a, bb)
		// An attempt, right (it applied the word's rule) or wrong.
		tried, right := rule, rng.Intn(2) == 0
		if !right {
			tried = other(rule)
		}
		attempt := ruleAnswer(word, tried, a, bb)
		out = append(out, b.Summarize(id, problem, attempt, right, ruleSummary(word, tried, right)))
		// Reflection is shown failed attempts (lanpo.reflect_on: failed): the
		// redo tries another rule.
		wrong := other(rule)
		out = append(out, b.Reflect(id, problem, pool.Attempt{Text: ruleAnswer(word, wrong, a, bb)}, ruleAnswer(word, other(wrong), a, bb)))
		// A plan condensed from other problems' lessons, newest first as the
		// pool gives them, and a solve with it: among the lessons (mostly
		// failed attempts' "not" ones) the one that states the rule gives the
		// plan; with none, the plan rules out what the newest one ruled out.
		var lessons []pool.Lesson
		positive, newest := false, "" // newest: the pattern the newest lesson's attempt tried
		for k := 0; k < 1+rng.Intn(maxLessons); k++ {
			tried, right := rule, rng.Intn(3) == 0
			if !right {
				tried = other(rule)
			}
			if k == 0 {
				newest = tried
			}
			positive = positive || right
			s := ruleSummary(word, tried, right)
			lessons = append(lessons, pool.Lesson{ProblemID: fmt.Sprintf("skill-%d-related-%d", i, k), Principles: s.Principles, Pitfalls: s.Pitfalls})
		}
		plan, solveRule := ruleStatement(word, rule), rule
		if !positive {
			plan, solveRule = notStatement(word, newest), other(newest)
		}
		out = append(out, b.Condense(id, problem, lessons, plan), b.SolveWithPlan(id, problem, plan, ruleAnswer(word, solveRule, a, bb)))
		if p.sftLessons {
			// lanpo.context: lessons — the same lessons shown to the solver,
			// who works out which apply: the rule a lesson states, or with
			// none a rule no lesson ruled out (the answer names it first).
			// Only when asked: with these examples the fair test's SFT
			// models followed a stated rule less well (ceiling 0.42–0.65
			// against 0.97–1.00 without; docs/benchmarks.md).
			shown := append([]pool.Lesson(nil), lessons...)
			out = append(out, b.SolveWithLessons(id, problem, shown, ruleAnswer(word, lessonsRule(lessons, rules, word, rule, positive, rng), a, bb)))
		}
	}
	return out
}

// The rule worlds' arms read ruleRelated problems' ruleLessons lessons
// each (lanpo.max_related_problems, lanpo.lessons_per_problem); a teacher's
// condensing example shows at most as many.
const (
	ruleRelated, ruleLessons = 2, 2
	maxLessons               = ruleRelated * ruleLessons
)

// lessonsRule is the rule a solver that analyses lessons applies: the
// word's rule when a lesson states it, else one no lesson ruled out.
func lessonsRule(lessons []pool.Lesson, rules []string, word, rule string, positive bool, rng *rand.Rand) string {
	if positive {
		return rule
	}
	var open []string
	for _, r := range rules {
		out := false
		for _, l := range lessons {
			out = out || strings.Contains(l.Principles, notStatement(word, r))
		}
		if !out {
			open = append(open, r)
		}
	}
	return open[rng.Intn(len(open))]
}

// ruleSummary is the ideal summary of an attempt that applied tried: a
// right one states the rule, a wrong one rules its pattern out.
func ruleSummary(word, tried string, right bool) pool.Summary {
	if right {
		return pool.Summary{FlowOfThought: "Used " + tried + "; right.", Principles: ruleStatement(word, tried), Pitfalls: "None."}
	}
	return pool.Summary{FlowOfThought: "Used " + tried + "; wrong.", Principles: notStatement(word, tried), Pitfalls: "Not " + tried + "."}
}

// statesRule reports whether a text states the word's rule as pattern:
// "zorp is aab", not "zorp is not aab" nor "zorp is aabb".
func statesRule(text, word, pattern string) bool {
	s := word + " is " + pattern
	for rest := text; ; {
		i := strings.Index(rest, s)
		if i < 0 {
			return false
		}
		rest = rest[i+len(s):]
		if rest == "" || !strings.ContainsRune("ab", rune(rest[0])) {
			return true
		}
	}
}

// ruleNamed finds the rule an answer names ("zorp is aab: …" — "aab"): the
// first run of pattern letters after " is ", as byte offsets. It is the
// rule worlds' diagnostic span (rl.Span): given it, the rest of an answer
// is copied from the problem, so its log-likelihood is the bare prompt's
// choice among the K rules.
func ruleNamed(_ string, text string) (lo, hi int, ok bool) {
	const is = " is "
	i := strings.Index(text, is)
	if i < 0 {
		return 0, 0, false
	}
	lo = i + len(is)
	hi = lo
	for hi < len(text) && (text[hi] == 'a' || text[hi] == 'b') {
		hi++
	}
	return lo, hi, hi > lo
}
