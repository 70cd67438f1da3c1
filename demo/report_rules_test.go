package demo

import (
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/eval"
)

// TestWorldIntroRetrievalDrop: the report names the group whose accuracy
// retrieval lowered most, and says that none dropped when none did
// (before, it named a group anyway: "its largest drop is on zotx, 0.00 →
// 0.00").
func TestWorldIntroRetrievalDrop(t *testing.T) {
	levels := func(acc ...float64) []LevelAccuracy {
		names := []string{"zotx", "blic", "zorp"}
		var out []LevelAccuracy
		for i, a := range acc {
			out = append(out, LevelAccuracy{Level: i, Name: names[i], Accuracy: a})
		}
		return out
	}
	stage := func(zeroShot, retrieval []LevelAccuracy) StageResult {
		return StageResult{Stage: "lanpo", Modes: []ModeResult{{Mode: eval.ModeZeroShot, Levels: zeroShot, Overall: 0.5}, {Mode: eval.ModeRetrieval, Levels: retrieval, Overall: 0.6}}}
	}
	for _, c := range []struct {
		name, world      string
		zeroShot, retrie []LevelAccuracy
		want, not        string
	}{
		{"a drop", WorldTransfer, levels(0.5, 0.75, 0.25), levels(0.5, 0.25, 0.5), "its largest drop is on blic, 0.75 → 0.25.", "no family"},
		{"the larger of two drops", WorldTransfer, levels(0.5, 0.75, 0.25), levels(0.25, 0.5, 0), "its largest drop is on zotx, 0.50 → 0.25.", "no family"},
		{"none dropped", WorldTransfer, levels(0, 0.5, 0.25), levels(0, 0.75, 0.25), "no family dropped.", "largest drop"},
		{"all at 0", WorldControl, levels(0, 0, 0), levels(0, 0, 0), "no family dropped.", "largest drop"},
		{"no groups", WorldTransfer, nil, nil, "no family dropped.", "largest drop"},
		{"arithmetic: levels", WorldArithmetic, levels(0.5, 0.5), levels(0.5, 0.75), "no level dropped.", "largest drop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			worldIntro(&b, Results{World: c.world, Stages: []StageResult{stage(c.zeroShot, c.retrie)}})
			if got := b.String(); !strings.Contains(got, "lanpo: retrieval moves held-out accuracy 0.500 → 0.600 over all problems; "+c.want) || strings.Contains(got, c.not) {
				t.Errorf("got %q\nwant %q, without %q", got, c.want, c.not)
			}
		})
	}
}
