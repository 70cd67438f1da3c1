package eval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/pool"
)

// TestDecontaminate: a benchmark problem with a reworded twin in a training
// file is dropped and named with its twin; a template of another (other
// numbers) and unrelated problems stay; the summary counts what was
// dropped and uses the given threshold for near-duplicates in the pool.
func TestDecontaminate(t *testing.T) {
	bench := Benchmark{Name: "mini", Problems: []Problem{
		// MATH-500 problem 237 and its MATH-train twin (pool/testdata).
		{ID: "b-1", Problem: `If $x$, $y$, and $z$ are positive with $xy = 24$, $xz = 48$, and $yz = 72$, then find $x + y + z.$`, Answer: "22"},
		{ID: "b-2", Problem: `What is the remainder when $1 + 2 + 3 + 4 + \dots + 9 + 10$ is divided by 9?`, Answer: "1"},
		{ID: "b-3", Problem: `How many positive divisors does 196 have?`, Answer: "9"},
	}}
	dir := t.TempDir()
	train := filepath.Join(dir, "train.jsonl")
	other := filepath.Join(dir, "other.jsonl")
	write := func(path string, rows []map[string]string) {
		if err := jsonl.WriteFile(path, rows); err != nil {
			t.Fatal(err)
		}
	}
	write(train, []map[string]string{
		{"id": "tr-1", "problem": `If $x$, $y$, and $z$ are positive with $xy=24$, $xz = 48$, and $yz=72$, what is the value of $x+y+z$?`},
		{"id": "tr-2", "problem": `What is the remainder when $1 + 2 + 3 + 4 + \dots + 9 + 10$ is  divided by 8?`}, // a template
	})
	write(other, []map[string]string{{"problem": "Find the area of a circle of radius 3."}})

	left, dropped, err := Decontaminate([]Benchmark{bench}, []string{other, train}, pool.DefaultConfig().NearDuplicate)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || len(left[0].Problems) != 2 || left[0].Problems[0].ID != "b-2" || left[0].Problems[1].ID != "b-3" {
		t.Fatalf("left %+v", left)
	}
	if len(dropped) != 1 || dropped[0] != (Contaminated{Bench: "mini", ID: "b-1", TwinID: "tr-1", TwinFile: train, Similarity: dropped[0].Similarity}) ||
		dropped[0].Similarity < pool.DefaultConfig().NearDuplicate {
		t.Fatalf("dropped %+v", dropped)
	}
	if same, _, _ := Decontaminate([]Benchmark{bench}, nil, 0.9); len(same[0].Problems) != 3 {
		t.Fatal("no training files dropped problems")
	}

	lines := []SampleLine{
		{Bench: "mini", Mode: ModeRetrieval, ProblemID: "b-2", NearSim: 0.85},
		{Bench: "mini", Mode: ModeRetrieval, ProblemID: "b-3", NearSim: 0.95},
	}
	for _, c := range []struct {
		threshold float64
		want      int
	}{{0.9, 1}, {0.8, 2}, {0.99, 0}} {
		sums := Summarize(lines, 1, left, []string{ModeRetrieval}, Contamination{NearDuplicate: c.threshold, Dropped: dropped})
		if len(sums) != 1 || sums[0].NearDuplicates != c.want || sums[0].Decontaminated != 1 {
			t.Errorf("threshold %v: %+v, want %d near-duplicates and 1 decontaminated", c.threshold, sums, c.want)
		}
		var table strings.Builder
		PrintTable(&table, sums)
		if !strings.Contains(table.String(), "1 dropped as contaminated") {
			t.Errorf("table:\n%s", table.String())
		}
	}

	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"problem\": \"x\"}\n{\"id\": 3}\n"), 0o644)
	for _, c := range []struct {
		files []string
		want  string
	}{
		{[]string{bad}, bad + ":2"},
		{[]string{filepath.Join(dir, "none.jsonl")}, "none.jsonl"},
	} {
		if _, _, err := Decontaminate([]Benchmark{bench}, c.files, 0.9); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.files, err, c.want)
		}
	}
}
