package pool

import (
	"bytes"
	"strings"
	"testing"
)

// TestStripCode: fenced, unfenced and long inline code goes; prose stays,
// including sentences that begin with or contain a Python keyword. Every
// output is stripped already (StripCode(want) == want): relatedLessons
// strips a code pool's lessons a second time.
func TestStripCode(t *testing.T) {
	long := strings.Repeat("x", 61)
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", ""},
		{"fenced block", "Use a heap.\n```python\nimport heapq\ndef f(xs):\n    return heapq.nsmallest(2, xs)\n```\nWatch empty input.",
			"Use a heap.\n(code omitted)\nWatch empty input."},
		{"unclosed fence", "Plan: sort first. ```python\ndef f(xs):\n    return sorted(xs)", "Plan: sort first. (code omitted)"},
		{"fence within a line", "See ```x = 1``` above.", "See (code omitted) above."},
		{"two fences", "A ```a``` and B ````\nb\n```` end.", "A (code omitted) and B (code omitted) end."},
		{"def with its body, blank inside", "Principle: two pointers.\ndef f(a):\n    i = 0\n\n    return i\nThen check ends.",
			"Principle: two pointers.\n(code omitted)\nThen check ends."},
		{"blank after the body stays", "def f():\n    pass\n\nAfter.", "(code omitted)\n\nAfter."},
		{"one-line def", "def f(x): return x * 2", "(code omitted)"},
		{"blocks apart by blank lines merge", "import heapq\n\nfrom math import gcd\n\ndef f(a, b):\n    return gcd(a, b)\nDone.",
			"(code omitted)\nDone."},
		{"indented block keeps its indentation", "- Pitfall: off by one:\n    def f(n):\n        return n-1\n- Next", "- Pitfall: off by one:\n    (code omitted)\n- Next"},
		{"class", "class Solution:\n    def f(self):\n        return 1\nUse a class.", "(code omitted)\nUse a class."},
		{"decorator", "@lru_cache(maxsize=None)\ndef fib(n):\n    return n", "(code omitted)"},
		{"import forms", "import heapq, bisect as b\nfrom collections import Counter, deque\nfrom . import x", "(code omitted)"},
		{"doctest to the blank line", "Examples:\n>>> f([1, 2])\n3\n>>> f([])\n0\n\nMind the empty list.", "Examples:\n(code omitted)\n\nMind the empty list."},
		{"return statements", "return x\nreturn sorted(xs)\nreturn a + b\nreturn True if x else False\nreturn\nreturn -1", "(code omitted)"},
		{"fenced and unfenced merge", "```\nx = 1\n```\n\ndef g():\n    pass", "(code omitted)"},
		{"short inline code stays", "Use `sorted()` and `dp[i-1]` here.", "Use `sorted()` and `dp[i-1]` here."},
		{"inline code of 60 stays", "Use `" + long[:60] + "` here.", "Use `" + long[:60] + "` here."},
		{"inline code over 60", "Use `" + long + "` here.", "Use (code omitted) here."},
		// Prose that a careless rule would take for code.
		{"return mid-sentence", "Make sure to return the list sorted; the helper should return early when n is 0.",
			"Make sure to return the list sorted; the helper should return early when n is 0."},
		{"Return starting a sentence", "Return the smallest index, or -1 when absent.\nReturn x only when valid.",
			"Return the smallest index, or -1 when absent.\nReturn x only when valid."},
		{"wrapped sentence starting with return", "The function must\nreturn the largest element\nof the list; it should\nreturn early if n < 2.\nreturn values in order,",
			"The function must\nreturn the largest element\nof the list; it should\nreturn early if n < 2.\nreturn values in order,"},
		{"returns", "returns the count (a number)", "returns the count (a number)"},
		{"import in prose", "import the module once, not in the loop.\nImport heapq for the queue.",
			"import the module once, not in the loop.\nImport heapq for the queue."},
		{"from in prose", "from there import costs into the table.", "from there import costs into the table."},
		{"def and class in prose", "define the base case first.\nA def with a default list shares it.\nclass invariants: keep the heap ordered.",
			"define the base case first.\nA def with a default list shares it.\nclass invariants: keep the heap ordered."},
		{"at sign in prose", "@ each step, check the bound.", "@ each step, check the bound."},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := StripCode(c.in)
			if got != c.want {
				t.Errorf("StripCode(%q) =\n %q\nwant\n %q", c.in, got, c.want)
			}
			if again := StripCode(c.want); again != c.want {
				t.Errorf("StripCode of the stripped text changed it: %q", again)
			}
		})
	}
}

// TestStripForeign: without code it is StripAnswers exactly (math runs do
// not change); with code, code goes first, then answers.
func TestStripForeign(t *testing.T) {
	in := "So \\boxed{42}.\n```python\nprint(42)\n```\nThe answer is 42."
	if got, want := StripForeign(in, "", false, "42"), StripAnswers(in, "", "42"); got != want {
		t.Fatalf("without code: %q, want StripAnswers' %q", got, want)
	}
	if got, want := StripForeign(in, "", true, "42"), "So (answer omitted).\n(code omitted)\nThe answer is (answer omitted)."; got != want {
		t.Fatalf("with code: %q, want %q", got, want)
	}
}

// TestLessonsStripCodeInACodeRun: with Config.Code a summary's program does
// not reach another problem's lessons, and its prose does; without it the
// lessons are what they were before code runs existed, and a math pool's
// header is written as before.
func TestLessonsStripCodeInACodeRun(t *testing.T) {
	const problemText = "def has_pair(xs, t):\n    \"\"\"Whether two elements of xs sum to t.\"\"\""
	sum := Summary{
		Principles: "Use a set of seen values for O(1) lookups.\n```python\ndef has_pair(xs, t):\n    seen = set()\n" +
			"    for x in xs:\n        if t - x in seen:\n            return True\n        seen.add(x)\n    return False\n```",
		Pitfalls: "Adding x before the lookup pairs x with itself: `for x in xs: seen.add(x); found = found or (t - x in seen and t != 2 * x)`.",
	}
	lessons := func(code bool) Lesson {
		cfg := DefaultConfig()
		cfg.Code = code
		p := newPool(t, cfg)
		p.Add(problemText, Entry{ProblemID: "h1", Attempt: "def has_pair(xs, t): ...", Summary: sum, Correct: true})
		ls := p.Lessons("h1", 2, "", false)
		if len(ls) != 1 {
			t.Fatalf("code %v: %d lessons, want 1", code, len(ls))
		}
		var buf bytes.Buffer
		if err := p.Write(&buf); err != nil {
			t.Fatal(err)
		}
		if header, _, _ := strings.Cut(buf.String(), "\n"); strings.Contains(header, `"code"`) != code {
			t.Errorf("code %v: pool header %s", code, header)
		}
		return ls[0]
	}
	got := lessons(true)
	if want := "Use a set of seen values for O(1) lookups.\n(code omitted)"; got.Principles != want {
		t.Errorf("principles with code on:\n%q\nwant\n%q", got.Principles, want)
	}
	if want := "Adding x before the lookup pairs x with itself: (code omitted)."; got.Pitfalls != want {
		t.Errorf("pitfalls with code on:\n%q\nwant\n%q", got.Pitfalls, want)
	}
	for _, field := range []string{got.Principles, got.Pitfalls} {
		for _, bad := range []string{"```", "def ", "seen.add", "return True"} {
			if strings.Contains(field, bad) {
				t.Errorf("a lesson with code on still holds %q: %q", bad, field)
			}
		}
	}
	if off := lessons(false); off.Principles != sum.Principles || off.Pitfalls != sum.Pitfalls {
		t.Errorf("with code off the lessons changed: %+v", off)
	}
}
