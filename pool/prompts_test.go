package pool

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPromptsValidate: both sets of defaults have every placeholder their
// builders fill, and the code prompts speak of programs, not answers.
func TestPromptsValidate(t *testing.T) {
	for name, p := range map[string]Prompts{"default": DefaultPrompts(), "code": CodePrompts()} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s prompts: %v", name, err)
		}
	}
	code := CodePrompts()
	for key, text := range map[string]string{"reflection": code.Reflection, "abstraction": code.Abstraction, "lessons": code.Lessons,
		"condense": code.Condense, "summarize": code.Summarize, "outcome_correct": code.OutcomeCorrect, "outcome_wrong": code.OutcomeWrong} {
		for _, math := range []string{"final answer", "state an answer", "solve the problem again"} {
			if strings.Contains(strings.ToLower(text), math) {
				t.Errorf("code prompt %s keeps the math wording %q", key, math)
			}
		}
	}
	if !strings.Contains(code.Condense, "Do not write code.") {
		t.Errorf("the code condense prompt does not forbid code:\n%s", code.Condense)
	}
	if got := code.SummarizeRequest("P", "A", true); !strings.Contains(got, "Its program was run against the problem's tests and passed.") {
		t.Errorf("summarize, passed:\n%s", got)
	}
	if got := code.SummarizeRequest("P", "A", false); !strings.Contains(got, "Its program was run against the problem's tests and failed.") {
		t.Errorf("summarize, failed:\n%s", got)
	}
}

// outcomeWord is any word that would tell a reflection prompt's reader
// whether the attempt it shows passed.
var outcomeWord = regexp.MustCompile(`(?i)\b(pass(es|ed|ing)?|fail(s|ed|ing|ure)?|correct(ly)?|incorrect|wrong|right|tests?|reward|assert(ion)?)\b`)

// TestCodeReflectionTellsNoOutcome: the code reflection context holds the
// attempt and the template, and no word of an outcome.
func TestCodeReflectionTellsNoOutcome(t *testing.T) {
	const program = "def add(a, b):\n    return a - b\n"
	p := CodePrompts()
	ctx := p.ReflectionContext(Attempt{ProblemID: "add", Text: program})
	if !strings.Contains(ctx, program) {
		t.Fatalf("the attempt is not shown:\n%s", ctx)
	}
	if w := outcomeWord.FindString(ctx); w != "" {
		t.Fatalf("the code reflection prompt says %q:\n%s", w, ctx)
	}
	for _, s := range []string{p.OutcomeCorrect, p.OutcomeWrong} {
		if strings.Contains(ctx, s) {
			t.Fatalf("the code reflection prompt states the outcome %q", s)
		}
	}
}

// TestLoadPromptsOver: an overrides file applies over the base it is
// given; LoadPrompts keeps applying it over DefaultPrompts.
func TestLoadPromptsOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prompts.yaml")
	if err := os.WriteFile(path, []byte("abstraction: \"Plan from elsewhere:\\n{plan}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		load func() (Prompts, error)
		base Prompts
	}{
		{"LoadPrompts", func() (Prompts, error) { return LoadPrompts(path) }, DefaultPrompts()},
		{"LoadPromptsOver code", func() (Prompts, error) { return LoadPromptsOver(path, CodePrompts()) }, CodePrompts()},
		{"PromptsFor code", func() (Prompts, error) { return PromptsFor(true, path) }, CodePrompts()},
		{"PromptsFor math", func() (Prompts, error) { return PromptsFor(false, path) }, DefaultPrompts()},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.load()
			if err != nil {
				t.Fatal(err)
			}
			want := c.base
			want.Abstraction = "Plan from elsewhere:\n{plan}"
			if got != want {
				t.Fatalf("got %+v\nwant %+v", got, want)
			}
		})
	}
	for code, want := range map[bool]Prompts{false: DefaultPrompts(), true: CodePrompts()} {
		if got, err := PromptsFor(code, ""); err != nil || got != want {
			t.Errorf("PromptsFor(%v, \"\"): %v, not the defaults", code, err)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("reflection: \"no placeholder\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPromptsOver(bad, CodePrompts()); err == nil || !strings.Contains(err.Error(), "{attempt}") {
		t.Fatalf("an override without its placeholder: %v", err)
	}
}
