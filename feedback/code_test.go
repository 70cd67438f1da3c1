package feedback

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
)

// TestCodeRunPrompts: with lanpo's Code set (a code run) the builder asks
// the code prompts, a lanpo.prompts file overriding them key by key, and
// the reflection prompt it renders shows the earlier program whole with no
// word of its outcome; without Code the prompts are the math defaults.
func TestCodeRunPrompts(t *testing.T) {
	m, tk := loadWarm(t)
	overrides := filepath.Join(t.TempDir(), "prompts.yaml")
	if err := os.WriteFile(overrides, []byte("abstraction: \"Plan from elsewhere:\\n{plan}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	math := TinySettings(t)
	if math.LANPO.Code {
		t.Fatal("the tiny math config is a code run")
	}
	f, err := NewBuilder(m, tk, math, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.Prompts() != pool.DefaultPrompts() {
		t.Fatal("a math run's builder does not use the default prompts")
	}

	cfg := TinySettings(t)
	cfg.LANPO.Code, cfg.LANPO.Prompts = true, overrides
	f, err = NewBuilder(m, tk, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := pool.CodePrompts()
	want.Abstraction = "Plan from elsewhere:\n{plan}"
	if f.Prompts() != want {
		t.Fatalf("a code run's prompts:\n%+v\nwant the code prompts with the override:\n%+v", f.Prompts(), want)
	}

	const problem = "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n"
	const program = "def add(a, b):\n    return a - b\n"
	ids, ok, err := f.Reflection(problem, program)
	if err != nil || !ok {
		t.Fatalf("reflection: ok %v, %v", ok, err)
	}
	prompt := tk.Decode(tokenizer.Ints(ids), false)
	ctx := f.Prompts().ReflectionContext(pool.Attempt{Text: program})
	if !strings.Contains(prompt, ctx) || !strings.Contains(prompt, program) {
		t.Fatalf("the reflection prompt does not show the program in the code template:\n%s", prompt)
	}
	outcome := regexp.MustCompile(`(?i)\b(pass(es|ed|ing)?|fail(s|ed|ing|ure)?|correct(ly)?|incorrect|wrong|tests?|reward)\b`)
	if w := outcome.FindString(ctx); w != "" {
		t.Fatalf("the reflection context says %q:\n%s", w, ctx)
	}
	for _, s := range []string{want.OutcomeCorrect, want.OutcomeWrong} {
		if strings.Contains(prompt, s) {
			t.Fatalf("the reflection prompt states the outcome %q", s)
		}
	}
}

// TestCodeRunLessonsLoseCode: abstraction's lessons lose their code in a
// code run even from a pool loaded with the default pool config (as lanpo
// eval loads one), and keep it byte for byte in a math run; lanpo's Code
// reaches the pool's own config through PoolConfig.
func TestCodeRunLessonsLoseCode(t *testing.T) {
	p, err := pool.New(pool.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	principles := "Count with a dictionary.\n```python\nfrom collections import Counter\ndef f(xs):\n    return Counter(xs).most_common(1)\n```"
	p.Add("def most_common(xs):\n    \"\"\"The most frequent element.\"\"\"", pool.Entry{ProblemID: "c1", Correct: true,
		Summary: pool.Summary{Principles: principles, Pitfalls: "Ties: return the first one seen."}})
	cfg := Default()
	cfg.Resolve(16)
	if got := relatedLessons(p, "c1", "", cfg); len(got) != 1 || got[0].Principles != principles {
		t.Fatalf("math run: %+v, want the summary unchanged", got)
	}
	cfg.Code = true
	got := relatedLessons(p, "c1", "", cfg)
	if len(got) != 1 || got[0].Principles != "Count with a dictionary.\n(code omitted)" || got[0].Pitfalls != "Ties: return the first one seen." {
		t.Fatalf("code run: %+v", got)
	}
	if !cfg.PoolConfig().Code || Default().PoolConfig().Code {
		t.Fatal("lanpo's Code does not reach the pool config")
	}
}
