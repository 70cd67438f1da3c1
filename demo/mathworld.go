package demo

import (
	"fmt"
	"math/rand"
	"strings"
)

// Item is one problem of the math world, in the dataset format trainers
// read ({"id","problem","answer"}) plus its level and a worked solution.
type Item struct {
	ID       string `json:"id"`
	Problem  string `json:"problem"`
	Answer   string `json:"answer"`
	Solution string `json:"solution"` // worked: column steps, then the result
	Brief    string `json:"brief"`    // the result alone, no steps
	Level    int    `json:"level"`
	// Rule worlds: the family's word, the rule that answers the problem and
	// its operands.
	Family string `json:"family,omitempty"`
	Rule   string `json:"rule,omitempty"`
	A      int    `json:"a,omitempty"`
	B      int    `json:"b,omitempty"`
}

// Levels of the math world, easiest first.
var Levels = []string{
	1: "one-digit addition and subtraction",
	2: "two-digit ± one-digit (carries, borrows)",
	3: "two-digit ± two-digit",
	4: "two-digit × one-digit",
}

// MaxLevel is the hardest level.
const MaxLevel = 4

// World generates problems from a seed. Train and held-out problems come
// from disjoint seeds and are deduplicated against each other by the
// caller's split (Split).
type World struct{ rng *rand.Rand }

// NewWorld starts a generator.
func NewWorld(seed int64) *World { return &World{rand.New(rand.NewSource(seed))} }

// Problem draws one problem of the given level.
func (w *World) Problem(level int) Item {
	r := w.rng
	var a, b int
	op := "+"
	switch level {
	case 1:
		a, b = r.Intn(10), r.Intn(10)
	case 2:
		a, b = 10+r.Intn(90), r.Intn(10)
	case 3:
		a, b = 10+r.Intn(90), 10+r.Intn(90)
	case 4:
		a, b = 10+r.Intn(90), 2+r.Intn(8)
		op = "*"
	default:
		panic(fmt.Sprintf("math world: no level %d", level))
	}
	if op == "+" && r.Intn(2) == 1 {
		if a < b {
			a, b = b, a
		}
		op = "-"
	}
	var c int
	sym := op
	switch op {
	case "+":
		c = a + b
	case "-":
		c = a - b
	case "*":
		c = a * b
		sym = "\\times"
	}
	problem := fmt.Sprintf("What is %d %s %d?", a, op, b)
	brief := fmt.Sprintf("%d %s %d = %d. The answer is \\boxed{%d}.", a, sym, b, c, c)
	return Item{Problem: problem, Answer: fmt.Sprint(c), Solution: columnSteps(a, b, op) + brief, Brief: brief, Level: level}
}

// columnSteps writes the column method for two-digit addition,
// subtraction and multiplication by one digit: ones first, with the carry
// or borrow, then tens. A small model learns the algorithm from these steps
// instead of memorizing results.
func columnSteps(a, b int, op string) string {
	if a < 10 {
		return ""
	}
	a1, a0, b1, b0 := a/10, a%10, b/10, b%10
	switch op {
	case "*":
		p0 := a0 * b
		carry := p0 / 10
		return fmt.Sprintf("Ones: %d * %d = %d, carry %d. Tens: %d * %d + %d = %d. ", a0, b, p0, carry, a1, b, carry, a1*b+carry)
	case "+":
		s0 := a0 + b0
		carry := s0 / 10
		return fmt.Sprintf("Ones: %d + %d = %d, carry %d. Tens: %d + %d + %d = %d. ", a0, b0, s0, carry, a1, b1, carry, a1+b1+carry)
	}
	borrow := 0
	if a0 < b0 {
		borrow = 1
	}
	return fmt.Sprintf("Ones: %d - %d = %d, borrow %d. Tens: %d - %d - %d = %d. ", a0+10*borrow, b0, a0+10*borrow-b0, borrow, a1, b1, borrow, a1-b1-borrow)
}

// ShowsSteps reports whether an answer works the problem in columns (the
// worked form of Solution) rather than stating the result (Brief).
func ShowsSteps(answer string) bool { return strings.Contains(answer, "Ones:") }

// distinctProblems is how many different problems each level has.
var distinctProblems = map[int]int{
	1: 100 + 55,        // a+b, and a−b with a ≥ b, one digit each
	2: 90*10 + 90*10,   // two-digit ± one-digit
	3: 90*90 + 90*91/2, // two-digit + two-digit, and − with a ≥ b
	4: 90 * 8,          // 10..99 × 2..9
}

// Split draws n problems per level for training and up to m per level held
// out — never more than a quarter of a level's distinct problems (level 4
// has 720) — with no held-out problem text in the training set.
func Split(seed int64, levels []int, n, m int) (train, heldOut []Item) {
	w := NewWorld(seed)
	seen := map[string]bool{}
	for _, lv := range levels {
		// Held-out problems are distinct from each other, too.
		heldOut = append(heldOut, w.draw(lv, min(m, distinctProblems[lv]/4), 200*m, seen, true, "heldout")...)
	}
	for _, lv := range levels {
		train = append(train, w.draw(lv, n, 100*n, seen, false, "train")...)
	}
	return train, heldOut
}

// Fresh draws n problems per level whose text is in none of avoid.
func Fresh(seed int64, levels []int, n int, avoid []Item) []Item {
	w := NewWorld(seed)
	seen := map[string]bool{}
	for _, it := range avoid {
		seen[it.Problem] = true
	}
	var out []Item
	for _, lv := range levels {
		out = append(out, w.draw(lv, n, 100*n, seen, false, "fresh")...)
	}
	return out
}

// draw takes up to n problems of a level, in at most tries draws, skipping
// those whose text is in seen (and adding its own to seen when mark), with
// IDs prefix-L<level>-<k>.
func (w *World) draw(lv, n, tries int, seen map[string]bool, mark bool, prefix string) []Item {
	var out []Item
	for try := 0; try < tries && len(out) < n; try++ {
		it := w.Problem(lv)
		if seen[it.Problem] {
			continue
		}
		if mark {
			seen[it.Problem] = true
		}
		it.ID = fmt.Sprintf("%s-L%d-%d", prefix, lv, len(out))
		out = append(out, it)
	}
	return out
}
