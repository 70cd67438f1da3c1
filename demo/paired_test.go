package demo

import (
	"encoding/json"
	"math"
	"math/rand"
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
	rng := rand.New(rand.NewSource(1))
	lo, hi = bootInterval([][]float64{{1, 0.5}, {1, 0.5}}, [][]float64{{0.5, 0}, {0.5, 0}}, []int{0, 1}, 200, rng)
	if math.Abs(lo-0.5) > 1e-12 || math.Abs(hi-0.5) > 1e-12 {
		t.Fatalf("bootstrap [%v, %v], want [0.5, 0.5]", lo, hi)
	}
}

// TestClusteredStatistics: pairs from one SFT model are averaged before
// the interval and the test, against values worked out by hand; the
// hierarchical bootstrap draws SFT models first.
func TestClusteredStatistics(t *testing.T) {
	// Three SFT models, two RL seeds each: differences (0.1, 0.3), (0.0,
	// 0.4), (0.5, 0.7) → model means 0.2, 0.2, 0.6: mean 1/3, s 0.2309,
	// t(2) 4.303; sign-flip over 3 units, all positive: p 2/8. Over the six
	// pairs, as if independent, t(5) 2.571 would give a narrower interval.
	diffs := []float64{0.1, 0.3, 0.0, 0.4, 0.5, 0.7}
	cluster := []int{0, 0, 1, 1, 2, 2}
	zero := make([]float64, 6)
	st := clusteredStat("x", diffs, zero, cluster)
	sd := math.Sqrt(((0.2-1.0/3)*(0.2-1.0/3)*2 + (0.6-1.0/3)*(0.6-1.0/3)) / 2)
	h := 4.303 * sd / math.Sqrt(3)
	if len(st.Clusters) != 3 || math.Abs(st.Mean-1.0/3) > 1e-12 || math.Abs(st.Lo-(1.0/3-h)) > 1e-12 || math.Abs(st.Hi-(1.0/3+h)) > 1e-12 {
		t.Fatalf("clustered: %v, mean %v [%v, %v], want 1/3 ± %v", st.Clusters, st.Mean, st.Lo, st.Hi, h)
	}
	if math.Abs(st.SignFlipP-0.25) > 1e-12 || st.Positive != 3 || math.Abs(st.DZ-(1.0/3)/sd) > 1e-12 {
		t.Fatalf("sign-flip p %v (want 0.25), +%d, d_z %v", st.SignFlipP, st.Positive, st.DZ)
	}
	_, plo, phi := tInterval(diffs)
	if phi-plo >= st.Hi-st.Lo {
		t.Fatalf("the pairs' interval [%v, %v] is not narrower than the models' [%v, %v]: the example shows nothing", plo, phi, st.Lo, st.Hi)
	}
	// The bootstrap, one family per pair: every round's value is a mean of
	// drawn values, so it lies in the data's range.
	fam := func(xs []float64) [][]float64 {
		out := make([][]float64, len(xs))
		for i, x := range xs {
			out[i] = []float64{x}
		}
		return out
	}
	rng := rand.New(rand.NewSource(3))
	lo, hi := bootInterval(fam(diffs), fam(zero), cluster, 4000, rng)
	if lo < 0 || hi > 0.7 || lo >= hi {
		t.Fatalf("bootstrap [%v, %v]", lo, hi)
	}
	// Within-model constants 0.2, 0.2, 0.6: a round's mean is (number of
	// 0.6 draws)·0.4/3 + 0.2: its 2.5% and 97.5% points are 0.2 (no 0.6
	// drawn: (2/3)^3 = 0.30 of rounds) and 0.6 (all three: 1/27 = 0.037 of
	// rounds, above 2.5%).
	lo, hi = bootInterval(fam([]float64{0.2, 0.2, 0.2, 0.2, 0.6, 0.6}), fam(zero), cluster, 20000, rng)
	if math.Abs(lo-0.2) > 1e-12 || math.Abs(hi-0.6) > 1e-12 {
		t.Fatalf("bootstrap over constant models [%v, %v], want [0.2, 0.6]", lo, hi)
	}
}

// TestPairedReadsRuns: runs pair by world, seed, SFT model, size, --fast
// and RL seed; a run without a partner is left out; RL seeds of one SFT
// model are one unit; two runs of one key under one ARM@DIR, a partner
// from another SFT model, and a results file without the pairing key are
// errors naming the files.
func TestPairedReadsRuns(t *testing.T) {
	root := t.TempDir()
	write := func(dir string, seed int64, rl int, sft string, grpo, lanpo float64) string {
		res := Results{World: WorldTransfer, Seed: seed, RLSeed: rl, Stages: []StageResult{
			{Stage: ArmGRPO, Modes: []ModeResult{{Mode: "zero-shot", Overall: grpo, Levels: []LevelAccuracy{{Accuracy: grpo, RefLogp: -2}, {Accuracy: grpo, RefLogp: -4}}}}},
			{Stage: ArmLANPOConsolidate, Modes: []ModeResult{{Mode: "zero-shot", Overall: lanpo, Levels: []LevelAccuracy{{Accuracy: lanpo, RefLogp: -1}, {Accuracy: 1, RefLogp: -1}}},
				{Mode: "retrieval", Overall: 0.9}}}},
			// The retrieval controls: the SFT model with LANPO's pool 0.8, GRPO's with its own 0.6.
			Controls: []RetrievalControl{{Model: "sft", Pool: ArmLANPOConsolidate, Retrieval: ModeResult{Overall: 0.8}},
				{Model: ArmGRPO, Pool: "grpo-own", Retrieval: ModeResult{Overall: 0.6}}}}
		if sft != "" {
			res.Pairing = &Pairing{SFTDigest: sft, ModelSize: "small"}
		}
		b, _ := json.Marshal(res)
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(root, dir, "demo_results.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("s1", 1, 1, "aaaa", 0.5, 0.75)
	write("s1/rl-2", 1, 2, "aaaa", 0.25, 0.5)
	write("s2", 2, 1, "bbbb", 0.5, 0.5)
	base, _ := ParseArmRef("grpo@" + root)
	arm, err := ParseArmRef("best=lanpo-consolidate@" + root)
	if err != nil || arm.Label != "best" || arm.Arm != ArmLANPOConsolidate {
		t.Fatalf("ParseArmRef: %+v, %v", arm, err)
	}
	res, err := Paired(base, []ArmRef{arm}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Pairs 0.25, 0.25 (seed 1) and 0 (seed 2): model means 0.25 and 0.
	z := res[0].Stats[0]
	if len(res[0].Pairs) != 3 || len(z.Clusters) != 2 || z.Positive != 1 || z.Negative != 0 || math.Abs(z.Mean-0.125) > 1e-12 {
		t.Fatalf("pairs %v, stats %+v", res[0].Pairs, z)
	}
	// Families learned: grpo learns none (0.5, 0.25 < 0.75) but 0.75 ≥ 0.75.
	if l := res[0].Stats[1]; l.Treatment[0] != 2 || l.Baseline[0] != 0 {
		t.Fatalf("families learned: %+v", l)
	}
	// The canonical answers: −1 against a mean of −3: +2 in every pair.
	byName := map[string]PairedStat{}
	for _, st := range res[0].Stats {
		byName[st.Outcome] = st
	}
	if c := byName["canonical answer's bare-prompt log-likelihood (nats, per answer)"]; math.Abs(c.Mean-2) > 1e-12 {
		t.Fatalf("continuous endpoint: %+v", c)
	}
	// The controls: the training's share over the SFT model (+0.1 in every
	// pair), each with its own pool (+0.3); none against GRPO's model with
	// LANPO's pool (not evaluated).
	if c := byName["with retrieval from the arm's pool: the arm's model − the SFT model"]; math.Abs(c.Mean-0.1) > 1e-12 {
		t.Fatalf("the training's share: %+v", c)
	}
	if c := byName["with retrieval, each from its own pool: the arm − grpo (its pool built from its rollouts)"]; math.Abs(c.Mean-0.3) > 1e-12 {
		t.Fatalf("each with its own pool: %+v (stats %v)", c, byName)
	}
	if _, ok := byName["with retrieval from the arm's pool: the arm's model − grpo's"]; ok {
		t.Fatal("a control no run has was compared")
	}
	var out strings.Builder
	WritePaired(&out, res)
	if !strings.Contains(out.String(), "transfer seed 1, RL seed 2") || !strings.Contains(out.String(), "2 SFT models") || !strings.Contains(out.String(), "sign-flip p") {
		t.Fatalf("table:\n%s", out.String())
	}
	dup := write("copy/s1", 1, 1, "aaaa", 0.5, 0.75)
	if _, err := Paired(base, []ArmRef{arm}, 0, 1); err == nil || !strings.Contains(err.Error(), "copy") {
		t.Fatalf("a duplicate pair: %v", err)
	}
	os.RemoveAll(filepath.Dir(filepath.Dir(dup)))
	// The same seeds from another SFT model: not a partner, an error.
	arm.Root = root
	root = t.TempDir()
	base.Root = root
	write("s1", 1, 1, "cccc", 0.5, 0.75)
	if _, err := Paired(base, []ArmRef{arm}, 0, 1); err == nil || !strings.Contains(err.Error(), "different SFT models") {
		t.Fatalf("pairs across SFT models: %v", err)
	}
	// A results file without the pairing key.
	old := write("s3", 3, 1, "", 0.5, 0.75)
	if _, err := Paired(base, []ArmRef{arm}, 0, 1); err == nil || !strings.Contains(err.Error(), old) {
		t.Fatalf("a results file without the pairing key: %v", err)
	}
	if _, err := ParseArmRef("grpo"); err == nil {
		t.Fatal("an ARM without @DIR was accepted")
	}
}
