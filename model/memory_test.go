package model

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

func rss(t *testing.T) int64 {
	n, err := tensor.RSSBytes()
	if err != nil {
		t.Skipf("no RSS on this system: %v", err)
	}
	return n
}

// TestTrainingLoopKeepsMemoryFlat runs 1,000 forward/backward steps through
// the fused log-prob path and checks that the live-tensor count returns to
// where it was and RSS stays flat.
func TestTrainingLoopKeepsMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 steps take a few seconds; skipped with -short")
	}
	lockThread(t)
	m, err := Load(filepath.Join("testdata", "tiny", "qwen3-gqa3"), LoadOptions{Device: gotch.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, p := range m.Params() {
		p.Tensor.MustRequiresGrad_(true)
	}
	ref := loadReference(t, "qwen3-gqa3")
	var data tensor.Scope
	defer data.Close()
	ids, pos, mask := int64Tensor(&data, ref.InputIDs), int64Tensor(&data, ref.PositionIDs), int64Tensor(&data, ref.AttentionMask)
	tmask := data.Keep(mask.MustTotype(gotch.Bool, false))
	step := func() {
		var s tensor.Scope
		defer s.Close()
		lp, ent, err := m.TokenLogProbs(&s, ids, pos, mask, ids, tmask, csrc.LogProbOptions{Entropy: true})
		if err != nil {
			t.Fatal(err)
		}
		loss := s.Keep(s.Keep(lp.MustSum(gotch.Float, false)).MustAdd(s.Keep(ent.MustSum(gotch.Float, false)), false))
		loss.MustBackward()
		for _, p := range m.Params() {
			s.Keep(p.Tensor.MustGrad(false)).MustZero_()
		}
	}
	for i := 0; i < 50; i++ {
		step()
	}
	runtime.GC()
	live, before := len(ts.ExistingTensors), rss(t)
	for i := 0; i < 1000; i++ {
		step()
	}
	runtime.GC()
	after := rss(t)
	t.Logf("live tensors %d → %d; RSS %d MB → %d MB (%+d KB) over 1,000 steps", live, len(ts.ExistingTensors), before>>20, after>>20, (after-before)>>10)
	// Growth is a leak; fewer is an earlier test's tensors whose
	// finalizers ran during the loop (seen once in a full package run).
	if n := len(ts.ExistingTensors); n > live {
		t.Errorf("live tensors went from %d to %d", live, n)
	}
	if after-before > 16<<20 {
		t.Errorf("RSS grew by %d MB over 1,000 steps", (after-before)>>20)
	}
}
