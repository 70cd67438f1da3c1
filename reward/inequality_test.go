package reward

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

func TestEquivalentForms(t *testing.T) {
	cases := []struct {
		name, gold, pred string
		want             bool
	}{
		// An equation with a number on the left states its right side.
		{"numeric left side", `-128`, `16 \times (-8) = -128`, true},
		{"numeric left side, wrong right", `-128`, `16 \times (-8) = 128`, false},
		{"false equation states its right side", `6`, `2+3 = 6`, true},
		{"false equation is not its left side", `5`, `2+3 = 6`, false},
		{"constant left side", `2\pi`, `\pi \cdot 2 = 2\pi`, true},
		{"gold written as an equation", `16 \times (-8) = -128`, `-128`, true},
		{"equation in x is not its right side", `5`, `x+1 = 5`, false},
		{"x^2 = 4 is not 4", `4`, `x^2 = 4`, false},
		{"x = 5 and 2+3 = 5 are different statements", `x = 5`, `2+3 = 5`, false},
		// Set notation.
		{"left/right braces", `\{1,2\}`, `\left\{1,2\right\}`, true},
		{"lbrace", `\{1,2\}`, `\lbrace 2, 1\rbrace`, true},
		{"union of sets", `\{1,2\}`, `\{1\} \cup \{2\}`, true},
		{"union of other sets", `\{1,2\}`, `\{1\} \cup \{3\}`, false},
		{"extra element", `\{1,2\}`, `\{1,2,3\}`, false},
		{"varnothing", `\emptyset`, `\varnothing`, true},
		{"empty braces", `\varnothing`, `\{\}`, true},
		{"empty braces with space", `\emptyset`, `\left\{ \right\}`, true},
		{"unicode empty set", `\emptyset`, `∅`, true},
		{"set of the empty set", `\emptyset`, `\{\emptyset\}`, false},
		{"empty set is not zero", `\emptyset`, `0`, false},
		{"zero set is not empty", `\{0\}`, `\emptyset`, false},
		{"set-builder is its condition", `(2,\infty)`, `\{x \mid x > 2\}`, true},
		{"set-builder with colon and domain", `(2,\infty)`, `\{x \in \mathbb{R} : x > 2\}`, true},
		{"set-builder with bar", `[2,\infty)`, `\{x | x \ge 2\}`, true},
		{"set-builder endpoint", `(2,\infty)`, `\{x \mid x \geq 2\}`, false},
		{"set-builder is not its symbols", `x, 2`, `\{x \mid x > 2\}`, false},
		{"set-builder is not a number", `2`, `\{x \mid x > 2\}`, false},
		{"set-builder point", `\{2\}`, `\{x \mid x = 2\}`, true},
		{"set-builder other variable", `(2,\infty)`, `\{x \mid y > 2\}`, false},
		{"ratio in braces is no set-builder", `\{1:2\}`, `\{1:2\}`, true},
		// ± and solutions written out.
		{"pm in a set", `\{-3, 3\}`, `\{\pm 3\}`, true},
		{"x = pm", `3, -3`, `x = \pm 3`, true},
		{"or", `3, -3`, `x = 3 \text{ or } x = -3`, true},
		{"or against a set", `\{-3, 3\}`, `x = -3 \text{ or } x = 3`, true},
		{"and", `3, -3`, `3 \text{ and } -3`, true},
		{"serial comma", `1, 2, 3`, `1, 2, \text{ or } 3`, true},
		{"pm in a gold list", `\{1\pm\sqrt{5},-2\}`, `-2, 1+\sqrt{5}, 1-\sqrt{5}`, true},
		{"pm in a gold list, one missing", `\{1\pm\sqrt{5},-2\}`, `1+\sqrt{5}, 1-\sqrt{5}`, false},
		{"pm is not its plus", `3`, `\pm 3`, false},
		{"plus is not pm", `\pm 3`, `3`, false},
		{"x = pm is not its plus", `3`, `x = \pm 3`, false},
		{"or, one solution twice", `3, -3`, `x = 3 \text{ or } x = 3`, false},
		{"pm other value", `3, -3`, `x = \pm 2`, false},
		// Inequalities and intervals.
		{"x > a", `(2, \infty)`, `x > 2`, true},
		{"a < x", `(2, \infty)`, `2 < x`, true},
		{"gold inequality", `x > 2`, `(2, \infty)`, true},
		{"two inequalities", `x > 2`, `2 < x`, true},
		{"not strict", `(2, \infty)`, `x \geq 2`, false},
		{"wrong direction", `(2, \infty)`, `x < 2`, false},
		{"wrong endpoint", `(2, \infty)`, `x > 3`, false},
		{"endpoint alone", `(2, \infty)`, `2`, false},
		{"chain", `[-1, 3)`, `-1 \le x < 3`, true},
		{"chain of >", `[-1, 3)`, `3 > x \geq -1`, true},
		{"chain, left strict", `[-1, 3)`, `-1 < x < 3`, false},
		{"chain, right closed", `[-1, 3)`, `-1 \le x \le 3`, false},
		{"ge", `[0,\infty)`, `x \ge 0`, true},
		{"geqslant", `[0,\infty)`, `x \geqslant 0`, true},
		{"ascii >=", `[0,\infty)`, `x >= 0`, true},
		{"unicode", `[0,\infty)`, `x ≥ 0`, true},
		{"ge, strict", `[0,\infty)`, `x > 0`, false},
		{"le", `(-\infty, 3]`, `x \leq 3`, true},
		{"le, strict", `(-\infty, 3]`, `x < 3`, false},
		{"or is a union", `(-\infty,0)\cup(1,\infty)`, `x<0 \text{ or } x>1`, true},
		{"union in other order", `(1,\infty)\cup(-\infty,0)`, `x<0 \text{ or } x>1`, true},
		{"union, one end closed", `(-\infty,0)\cup(1,\infty)`, `x \le 0 \text{ or } x > 1`, false},
		{"union, other end", `(-\infty,0)\cup(1,\infty)`, `x<0 \text{ or } x>2`, false},
		{"and is an intersection", `(-\infty,0)\cup(1,\infty)`, `x<0 \text{ and } x>1`, false},
		{"and of two half-lines", `(0, 5]`, `x > 0 \text{ and } x \le 5`, true},
		{"not equal", `(-\infty, 2) \cup (2, \infty)`, `x \neq 2`, true},
		{"not equal, other point", `(-\infty, 2) \cup (2, \infty)`, `x \neq 3`, false},
		{"chain without a point", `(0,9) \cup (9,36)`, `0 < x < 36 \text{ and } x \neq 9`, true},
		{"chain with the point", `(0,9) \cup (9,36)`, `0 < x < 36`, false},
		{"union with a point", `(-\infty, 0) \cup\{1\}`, `x < 0 \text{ or } x = 1`, true},
		{"union with a point, closed", `(-\infty, 0) \cup\{1\}`, `x \le 0 \text{ or } x = 1`, false},
		{"touching pieces merge", `(-\infty, 5)`, `x < 2 \text{ or } 2 \le x < 5`, true},
		{"irrational ends", `(-\sqrt{11},-2)\cup (\sqrt{11},9)`, `-\sqrt{11} < x < -2 \text{ or } \sqrt{11} < x < 9`, true},
		{"irrational end, near value", `(\sqrt{11},9)`, `3.3166 < x < 9`, false},
		{"fraction ends", `\left(\frac{3}{5},\frac{8}{3}\right]`, `\frac35 < x \le \frac83`, true},
		{"other variable", `x > 2`, `y > 2`, false},
		{"same variable, other letter case", `k \geqslant 2`, `k \ge 2`, true},
		{"mixed variables in an or", `(-\infty,0)\cup(1,\infty)`, `x<0 \text{ or } y>1`, false},
		{"two variables", `(2,\infty)`, `x > y`, false},
		{"expression, not a variable", `(2,\infty)`, `2x > 4`, false},
		{"bad chain", `(2,\infty)`, `1 < x > 2`, false},
		{"empty chain", `\emptyset`, `3 < x < 1`, true},
		{"inequality is not an equation", `2`, `x \le 2`, false},
		{"x = a is not an inequality", `[2, \infty)`, `x = 2`, false},
		{"(2, 3) reads as an interval", `(2, 3)`, `2 < x < 3`, true},
		{"tuple of a point", `(3, 2)`, `2 < x < 3`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Equivalent(c.gold, c.pred, Options{}); got != c.want {
				t.Errorf("Equivalent(%q, %q) = %v, want %v", c.gold, c.pred, got, c.want)
			}
		})
	}
}

func TestSplitConjunction(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		and  bool
	}{
		{"x = 3  or  x = -3", []string{"x = 3", "x = -3"}, false},
		{"1, 2, or 3", []string{"1, 2", "3"}, false},
		{"3and-3", []string{"3", "-3"}, true},
		{"x > 0 and x < 1 or x > 2", nil, false}, // which binds first is not written
		{"color, north", nil, false},             // or inside a word
		{`\operatorname{or}(x)`, nil, false},     // a command name
		{"(a or b)", nil, false},                 // inside brackets
		{`\{1 or 2\}`, nil, false},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, and := splitConjunction(c.in)
			if len(got) != len(c.want) || and != c.and {
				t.Fatalf("splitConjunction(%q) = %q, %v; want %q, %v", c.in, got, and, c.want, c.and)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("splitConjunction(%q) = %q, want %q", c.in, got, c.want)
				}
			}
		})
	}
}

// TestVerifyCases runs the cases scripts/ref/verify_cases.py checked
// against math-verify: lanpo must give its verdict on each, and where
// math-verify differs the case must say why (docs/verifier.md lists them).
func TestVerifyCases(t *testing.T) {
	f, err := os.Open("testdata/verify_cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n, differ := 0, 0
	for sc.Scan() {
		n++
		var c struct {
			Gold, Pred, Why string
			Want, MV        bool
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("verify_cases.jsonl:%d: %v", n, err)
		}
		if c.Want != c.MV {
			differ++
			if c.Why == "" {
				t.Errorf("verify_cases.jsonl:%d: math-verify says %v, unexplained", n, c.MV)
			}
		}
		t.Run(c.Gold+" vs "+c.Pred, func(t *testing.T) {
			if got := Verify(c.Pred, c.Gold, Options{}).Correct; got != c.Want {
				t.Errorf("Verify(%q, %q) = %v, want %v (math-verify: %v)", c.Pred, c.Gold, got, c.Want, c.MV)
			}
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("only %d cases", n)
	}
	t.Logf("%d cases, math-verify agrees on %d", n, n-differ)
}
