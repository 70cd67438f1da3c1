package reward

import (
	"strings"
	"testing"
)

// The response from the issue, in kind: cut off by the token limit in the
// middle of an enumeration whose last number happens to be the gold answer.
const cutEnumeration = "We list the pairs $(a, b)$ with $a + b \\le 8$ by the value of $a$.\n\n" +
	"For $a = 1$: $b = 1, 2, \\dots, 7$, that is 7 pairs.\n" +
	"For $a = 2$: $b = 1, 2, 3, 4, 5, 6"

func TestExtractResponse(t *testing.T) {
	cases := []struct {
		name      string
		in        string
		truncated bool
		want      string
		ok        bool
	}{
		// Explicit answers count in a truncated response when complete.
		{"truncated boxed", "So \\boxed{6} and then we double-check by listing 1, 2, 3", true, "6", true},
		{"truncated final answer in $", "The final answer is $42$. Let me verify: 40 + 2", true, "42", true},
		{"truncated final answer sentence", "The final answer is 42. Let me verify: 40", true, "42", true},
		{"truncated Answer line", "Answer: 17\nCheck: 10 + 7", true, "17", true},
		{"truncated Answer at the cut", "We get it.\nAnswer: 17", true, "", false},
		{"truncated final answer at the cut", "The final answer is 3.", true, "", false},
		{"truncated final answer $ unclosed", "The final answer is $\\frac{1}{2", true, "", false},
		{"truncated unbraced box at the cut", "so \\boxed 12", true, "", false},
		{"truncated unbraced box complete", "so \\boxed 12 and more", true, "12", true},
		{"truncated unclosed box", "so \\boxed{12", true, "", false},
		// No explicit answer: a truncated response has none.
		{"truncated enumeration", cutEnumeration, true, "", false},
		{"truncated last line number", "Thinking.\nSo there are 12 ways", true, "", false},
		{"truncated display math", "We get \\[ 9 \\] and", true, "", false},
		// The same texts finished: the final line only.
		{"finished final answer at the end", "The final answer is 3.", false, "3", true},
		{"finished Answer at the end", "We get it.\nAnswer: 17", false, "17", true},
		{"finished unbraced box", "so \\boxed 12", false, "12", true},
		{"finished last line", "Thinking: 3, 4, 5.\n\nSo there are 12 ways.\n\n", false, "12", true},
		{"finished enumeration before a closing line", "Listing: 1, 2, 3, 4, 5.\n\nI could not finish.", false, "", false},
		{"finished one line", "41 then 42, done", false, "42", true},
		{"finished inline math", "We divide.\nThe probability is $\\frac{3}{4}$.", false, `\frac{3}{4}`, true},
		{"finished inline math then number", "There are 12 ways to choose $k$.", false, "12", true},
		{"finished math then a number after it", "With $n = 5$ we get 10.", false, "10", true},
		{"finished escaped dollars", `It costs \$5, so 3 cost \$15.`, false, "15", true},
		{"finished answer is", "Checked: 7, 8.\nThe answer is $\\frac{1}{2}$ of the cake, so 2 of 4 slices.", false, `\frac{1}{2}`, true},
		{"finished numeric equation", "Multiplying,\n$16 \\times (-8) = -128$", false, `16 \times (-8) = -128`, true},
		{"finished display on the last line", "We get\n\\[\n9\n\\]\n", false, "9", true},
		{"finished display then prose", "We get\n\\[ 9 \\]\nbut that is not all of it.", false, "", false},
		{"finished display then a number", "We get\n\\[ 9 \\]\nso 10 in all.", false, "10", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ExtractResponse(c.in, c.truncated)
			if got != c.want || ok != c.ok {
				t.Errorf("ExtractResponse(%q, %v) = %q, %v; want %q, %v", c.in, c.truncated, got, ok, c.want, c.ok)
			}
		})
	}
}

func TestVerifyResponseTruncated(t *testing.T) {
	cases := []struct {
		name, response, gold string
		truncated, want      bool
	}{
		{"cut enumeration", cutEnumeration, "6", true, false},
		{"cut enumeration as if finished", cutEnumeration, "6", false, true},
		{"cut after a box", "Thus \\boxed{28}. To double-check, count 1, 2, 3", "28", true, true},
		{"cut after a wrong box", "Thus \\boxed{27}. To double-check, count 1, 2, 28", "28", true, false},
		{"cut inside the box", "Thus \\boxed{28", "28", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := VerifyResponse(c.response, c.gold, c.truncated, Options{}).Correct; got != c.want {
				t.Errorf("VerifyResponse(truncated=%v) = %v, want %v", c.truncated, got, c.want)
			}
		})
	}
	// Verify is the finished case.
	if Verify(cutEnumeration, "6", Options{}) != VerifyResponse(cutEnumeration, "6", false, Options{}) {
		t.Error("Verify differs from VerifyResponse(finished)")
	}
}

func TestTruncatedThroughBatchAndReward(t *testing.T) {
	pairs := []Pair{
		{Response: cutEnumeration, Gold: "6", Truncated: true},
		{Response: cutEnumeration, Gold: "6"},
		{Response: "so \\boxed{6}. Next", Gold: "6", Truncated: true},
	}
	want := []bool{false, true, true}
	for i, r := range VerifyBatch(pairs, 2, Options{}) {
		if r.Correct != want[i] {
			t.Errorf("pair %d: correct = %v, want %v", i, r.Correct, want[i])
		}
	}
	if VerifyResponse(cutEnumeration, "6", true, Options{}).Correct {
		t.Errorf("the truncated response was accepted")
	}
	if !VerifyResponse(cutEnumeration, "6", false, Options{}).Correct {
		t.Errorf("the finished response was rejected")
	}
}

// A long truncated response is searched only at its end, like a finished one.
func TestTruncatedLongResponse(t *testing.T) {
	long := "\\boxed{5} " + strings.Repeat("and so on ", maxResponseLen/10+10)
	if _, ok := ExtractResponse(long, true); ok {
		t.Error("a box cut off the searched end was found")
	}
	if got, ok := ExtractResponse(long+"\nThe final answer is $5$.", true); !ok || got != "5" {
		t.Errorf("got %q, %v", got, ok)
	}
}
