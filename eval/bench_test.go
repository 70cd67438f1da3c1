package eval

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPassAtK(t *testing.T) {
	for _, c := range []struct {
		n, c, k int
		want    float64
	}{
		{5, 0, 1, 0}, {5, 0, 4, 0}, // c = 0: never
		{5, 5, 1, 1}, {5, 5, 5, 1}, // c = n: always
		{4, 1, 4, 1},            // k = n with one right
		{4, 1, 2, 0.5},          // 1 − C(3,2)/C(4,2) = 1 − 3/6
		{10, 3, 1, 0.3},         // pass@1 = c/n
		{10, 3, 2, 1 - 21.0/45}, // 1 − C(7,2)/C(10,2)
		{8, 6, 4, 1},            // fewer wrong than k
		{100, 1, 8, 0.08},       // 1 − C(99,8)/C(100,8) = 8/100
	} {
		if got := PassAtK(c.n, c.c, c.k); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("pass@%d with %d/%d right = %v, want %v", c.k, c.c, c.n, got, c.want)
		}
	}
}

// maj@k groups answers by equivalence: \frac12 and 0.5 are one answer.
func TestMajorityVote(t *testing.T) {
	for _, c := range []struct {
		votes []vote
		want  bool
	}{
		{[]vote{{`\frac12`, true}, {"0.5", true}, {"1/3", false}}, true},
		{[]vote{{"7", false}, {"7.0", false}, {`\frac12`, true}}, false},
		{[]vote{{"", false}, {"", false}, {"3", true}}, true}, // no answer: no vote
		{[]vote{{"", false}}, false},
		{[]vote{{"2", true}, {"5", false}}, true}, // a tie: the first group wins
	} {
		if got := majorityCorrect(c.votes); got != c.want {
			t.Errorf("%v: %v, want %v", c.votes, got, c.want)
		}
	}
}

func TestResolveBenchmark(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "gsm8k_test.jsonl"), []byte(`{"id":"a","problem":"1+1?","answer":"2"}`+"\n"), 0o644)
	t.Setenv(DataDirEnv, "")
	if name, path, err := ResolveBenchmark("gsm8k", dir); err != nil || name != "gsm8k" || path != filepath.Join(dir, "gsm8k_test.jsonl") {
		t.Fatalf("gsm8k in --data-dir: %s %s %v", name, path, err)
	}
	t.Setenv(DataDirEnv, dir)
	if _, path, err := ResolveBenchmark("gsm8k", ""); err != nil || path != filepath.Join(dir, "gsm8k_test.jsonl") {
		t.Fatalf("gsm8k in $%s: %s %v", DataDirEnv, path, err)
	}
	for _, c := range []struct{ spec, dataDir, want string }{
		{"math500", dir, "math500.jsonl not found; looked in " + filepath.Join(dir, "math500.jsonl") + " and " + filepath.Join(dir, "math500.jsonl")},
		{"gsm9k", dir, `--bench "gsm9k": not a benchmark name`},
		{"no/such.jsonl", "", "benchmark file no/such.jsonl"},
	} {
		if _, _, err := ResolveBenchmark(c.spec, c.dataDir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.spec, err, c.want)
		}
	}
	t.Setenv(DataDirEnv, "")
	if _, _, err := ResolveBenchmark("aime24", ""); err == nil || !strings.Contains(err.Error(), "--data-dir (not set) and $LANPO_DATA (not set)") {
		t.Errorf("nowhere to look: %v", err)
	}
}

func TestLoadBenchmark(t *testing.T) {
	b, err := LoadBenchmark("gsm8k", "testdata/gsm8k_mini.jsonl", 0)
	if err != nil || len(b.Problems) != 6 || b.Total != 6 {
		t.Fatalf("%d problems, %v", len(b.Problems), err)
	}
	sub, _ := LoadBenchmark("gsm8k", "testdata/gsm8k_mini.jsonl", 3)
	if len(sub.Problems) != 3 || sub.Problems[0].ID != b.Problems[0].ID || sub.Problems[1].ID != b.Problems[2].ID || sub.Problems[2].ID != b.Problems[4].ID {
		t.Fatalf("--limit 3 of 6 should take problems 0, 2, 4: %v", sub.Problems)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	for _, c := range []struct{ body, want string }{
		{`{"id":"a","problem":"x","answer":"1"}` + "\n{oops\n", "bad.jsonl:2:"},
		{`{"id":"a","problem":"x"}` + "\n", `bad.jsonl:1: want non-empty "problem" and "answer"`},
		{`{"id":"a","problem":"x","answer":"1"}` + "\n" + `{"id":"a","problem":"y","answer":"2"}` + "\n", `bad.jsonl:2: id "a" already used on line 1`},
	} {
		os.WriteFile(bad, []byte(c.body), 0o644)
		if _, err := LoadBenchmark("bad", bad, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.body, err, c.want)
		}
	}
}
