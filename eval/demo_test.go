package eval

import (
	"context"
	"encoding/json"
	"image"
	"io"
	"os"
	"path/filepath"
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
	if len(train) != 800 || len(held) != 20+20+20+16 || train[17] != train2[17] || held[33] != held2[33] {
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
	if err != nil || !strings.Contains(string(page), "Held-out accuracy") || !strings.Contains(string(page), ".png") {
		t.Fatalf("report: %v", err)
	}
	pngs, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	if len(pngs) < 4 {
		t.Fatalf("%d charts", len(pngs))
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

// Lines in every direction end (a Bresenham step that reused the updated
// error once looped forever).
func TestLineEnds(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 50, 50))
	for _, c := range [][4]int{{0, 0, 49, 49}, {49, 0, 0, 49}, {5, 40, 45, 2}, {10, 10, 10, 30}, {3, 7, 48, 9}, {20, 20, 20, 20}} {
		line(img, c[0], c[1], c[2], c[3], palette[0])
	}
}
