package demo

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPairedStatistics: the interval, the exact sign-flip p and the area
// against values worked out by hand.
func TestPairedStatistics(t *testing.T) {
	// Differences 0.1, 0.2, 0.3: mean 0.2, s 0.1, t(2) 4.303.
	m, lo, hi := tInterval([]float64{0.1, 0.2, 0.3})
	h := 4.303 * 0.1 / math.Sqrt(3)
	if math.Abs(m-0.2) > 1e-12 || math.Abs(lo-(0.2-h)) > 1e-12 || math.Abs(hi-(0.2+h)) > 1e-12 {
		t.Fatalf("t-interval %v [%v, %v]", m, lo, hi)
	}
	// All three positive: of the 8 sign assignments only +++ and --- reach
	// |sum| 0.6: p = 2/8.
	if p := signFlipP([]float64{0.1, 0.2, 0.3}); math.Abs(p-0.25) > 1e-12 {
		t.Fatalf("sign-flip p %v, want 0.25", p)
	}
	// 0.5 and -0.1: |±0.5 ± 0.1| ≥ 0.4 for every assignment: p = 1.
	if p := signFlipP([]float64{0.5, -0.1}); p != 1 {
		t.Fatalf("sign-flip p %v, want 1", p)
	}
	// A curve 0 at step 0, 1 at step 10, 1 at 20: area over [0, 20] is
	// (5 + 10) / 20; over [0, 10] 0.5; a curve ending before T: -1.
	c := [][2]float64{{0, 0}, {10, 1}, {20, 1}}
	if a := areaUpTo(c, 20); math.Abs(a-0.75) > 1e-12 {
		t.Fatalf("area %v, want 0.75", a)
	}
	if a := areaUpTo(c, 10); math.Abs(a-0.5) > 1e-12 {
		t.Fatalf("area to 10: %v", a)
	}
	if a := areaUpTo(c, 30); a != -1 {
		t.Fatalf("area past the curve: %v", a)
	}
	// A constant difference: the bootstrap interval is that difference.
	lo, hi = crossedBootstrap([][]float64{{1, 0.5}, {1, 0.5}}, [][]float64{{0.5, 0}, {0.5, 0}}, 200, 1)
	if math.Abs(lo-0.5) > 1e-12 || math.Abs(hi-0.5) > 1e-12 {
		t.Fatalf("bootstrap [%v, %v], want [0.5, 0.5]", lo, hi)
	}
}

// TestPairedReadsRuns: runs pair by (world, seed, RL seed); a run without
// a partner is left out; two runs of one key under one ARM@DIR are an
// error naming both files.
func TestPairedReadsRuns(t *testing.T) {
	root := t.TempDir()
	write := func(dir string, seed int64, rl int, grpo, lanpo float64) {
		res := Results{World: WorldTransfer, Seed: seed, RLSeed: rl, Stages: []StageResult{
			{Stage: ArmGRPO, Modes: []ModeResult{{Mode: "zero-shot", Overall: grpo, Levels: []LevelAccuracy{{Accuracy: grpo}, {Accuracy: grpo}}}}},
			{Stage: ArmLANPOConsolidate, Modes: []ModeResult{{Mode: "zero-shot", Overall: lanpo, Levels: []LevelAccuracy{{Accuracy: lanpo}, {Accuracy: 1}}}}}}}
		b, _ := json.Marshal(res)
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "demo_results.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("s1", 1, 1, 0.5, 0.75)
	write("s1/rl-2", 1, 2, 0.25, 0.5)
	write("s2", 2, 1, 0.5, 0.5)
	base, _ := ParseArmRef("grpo@" + root)
	arm, err := ParseArmRef("best=lanpo-consolidate@" + root)
	if err != nil || arm.Label != "best" || arm.Arm != ArmLANPOConsolidate {
		t.Fatalf("ParseArmRef: %+v, %v", arm, err)
	}
	res, err := Paired(base, []ArmRef{arm}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	z := res[0].Stats[0]
	if len(res[0].Pairs) != 3 || z.Positive != 2 || z.Negative != 0 || math.Abs(z.Mean-0.5/3) > 1e-12 {
		t.Fatalf("pairs %v, stats %+v", res[0].Pairs, z)
	}
	// Families learned: grpo learns none (0.5, 0.25 < 0.75) but 0.75 ≥ 0.75.
	if l := res[0].Stats[1]; l.Treatment[0] != 2 || l.Baseline[0] != 0 {
		t.Fatalf("families learned: %+v", l)
	}
	var out strings.Builder
	WritePaired(&out, res)
	if !strings.Contains(out.String(), "transfer seed 1, RL seed 2") || !strings.Contains(out.String(), "sign-flip p") {
		t.Fatalf("table:\n%s", out.String())
	}
	write("copy/s1", 1, 1, 0.5, 0.75)
	if _, err := Paired(base, []ArmRef{arm}, 0, 1); err == nil || !strings.Contains(err.Error(), "copy") {
		t.Fatalf("a duplicate pair: %v", err)
	}
	if _, err := ParseArmRef("grpo"); err == nil {
		t.Fatal("an ARM without @DIR was accepted")
	}
}
