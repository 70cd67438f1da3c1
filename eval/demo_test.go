package eval

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	os.Exit(m.Run())
}

func TestSplitIsDisjointAndDeterministic(t *testing.T) {
	train, held := Split(3, []int{1, 2, 3, 4}, 200, 20)
	train2, held2 := Split(3, []int{1, 2, 3, 4}, 200, 20)
	if len(train) != 800 || len(held) != 20+20+20+20 || train[17] != train2[17] || held[33] != held2[33] {
		t.Fatalf("split: %d train, %d held out, or not deterministic", len(train), len(held))
	}
	seen := map[string]bool{}
	for _, it := range held {
		seen[it.Problem] = true
	}
	levels := map[int]int{}
	for _, it := range train {
		if seen[it.Problem] {
			t.Fatalf("held-out problem %q is in the training set", it.Problem)
		}
		levels[it.Level]++
		if !strings.Contains(it.Solution, `\boxed{`+it.Answer+`}`) {
			t.Fatalf("solution %q does not box the answer %q", it.Solution, it.Answer)
		}
	}
	if len(levels) != 4 {
		t.Fatalf("levels %v", levels)
	}
}

// TestSolutionStepsAreRight evaluates every equation in the worked
// solutions of all levels: a wrong carry, borrow or product in the
// reference data would teach the model wrong arithmetic.
func TestSolutionStepsAreRight(t *testing.T) {
	eq := regexp.MustCompile(`(\d+) ([-+*]|\\times) (\d+)(?: ([-+]) (\d+))? = (\d+)`)
	w := NewWorld(7)
	for lv := 1; lv <= MaxLevel; lv++ {
		for k := 0; k < 500; k++ {
			it := w.Problem(lv)
			ms := eq.FindAllStringSubmatch(it.Solution, -1)
			if len(ms) == 0 || (lv > 1 && len(ms) != 3) {
				t.Fatalf("level %d: %q has %d equations", lv, it.Solution, len(ms))
			}
			for _, m := range ms {
				n := func(s string) int { v, _ := strconv.Atoi(s); return v }
				v := n(m[1])
				switch m[2] {
				case "+":
					v += n(m[3])
				case "-":
					v -= n(m[3])
				default:
					v *= n(m[3])
				}
				if m[4] == "+" {
					v += n(m[5])
				} else if m[4] == "-" {
					v -= n(m[5])
				}
				if v != n(m[6]) {
					t.Fatalf("level %d: %q: %q is wrong", lv, it.Solution, m[0])
				}
			}
			if last := ms[len(ms)-1]; last[6] != it.Answer {
				t.Fatalf("level %d: %q: answer %s, last equation %s", lv, it.Solution, it.Answer, last[0])
			}
		}
	}
}

// TestDemoFast runs `lanpo demo --fast` end to end and checks that the
// report, metrics and evaluations exist and parse (not the accuracy).
func TestDemoFast(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	if err := RunDemo(context.Background(), DemoOptions{RunDir: dir, Seed: 1, Fast: true, Log: io.Discard}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"eval_sft.json", "eval_rl.json"} {
		r, err := readEval(filepath.Join(dir, f))
		if err != nil || len(r.Levels) != MaxLevel || len(r.Completions) == 0 {
			t.Fatalf("%s: %v %+v", f, err, r.Levels)
		}
	}
	for _, stage := range []string{"sft", "rl"} {
		rows, err := readMetrics(filepath.Join(dir, stage, "metrics.jsonl"))
		if err != nil || len(rows) == 0 {
			t.Fatalf("%s metrics: %v (%d rows)", stage, err, len(rows))
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(page), "Held-out accuracy") {
		t.Fatalf("report: %v", err)
	}
	if n := strings.Count(string(page), "<svg"); n < 4 {
		t.Fatalf("%d charts", n)
	}
	// lanpo report regenerates it.
	os.Remove(filepath.Join(dir, "report.html"))
	if err := WriteReport(dir); err != nil {
		t.Fatal(err)
	}
	var r Result
	b, _ := os.ReadFile(filepath.Join(dir, "eval_rl.json"))
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
}
