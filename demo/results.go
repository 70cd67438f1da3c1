package demo

import (
	"fmt"
	"path/filepath"

	"github.com/lanpo-rl/lanpo/eval"
)

// Results is RUN_DIR/demo_results.json: each stage's held-out accuracy
// by mode and level, the split sizes and how often feedback was available.
type Results struct {
	Seed   int64                    `json:"seed"`
	Sizes  map[string]int           `json:"sizes"`
	Stages []StageResult            `json:"stages"`
	Usage  map[string]FeedbackUsage `json:"feedback_usage,omitempty"` // per LANPO arm
}

// StageResult is one model's held-out evaluation.
type StageResult struct {
	Stage string       `json:"stage"` // sft, grpo, lanpo, lanpo-original
	Modes []ModeResult `json:"modes"`
}

// ModeResult is one mode's accuracy per level.
type ModeResult struct {
	Mode    string          `json:"mode"`
	Levels  []LevelAccuracy `json:"levels"`
	Overall float64         `json:"overall"`
	Worked  int             `json:"worked"`
}

// LevelAccuracy is greedy accuracy on one difficulty level.
type LevelAccuracy struct {
	Level    int     `json:"level"`
	N        int     `json:"n"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
	Worked   int     `json:"worked"` // answers that show column steps (ShowsSteps)
}

// FeedbackUsage totals a LANPO arm's prompts by what they got.
type FeedbackUsage struct {
	Prompts       int `json:"prompts"`
	FeedbackAware int `json:"feedback_aware"`
	Reflection    int `json:"reflection"`
	Abstraction   int `json:"abstraction"`
	Fallback      int `json:"fallback"`
}

// stageResult tallies sample lines per mode and level (self-correct: the
// answers after reflection).
func stageResult(stage string, modes []string, lines []eval.SampleLine) StageResult {
	r := StageResult{Stage: stage}
	for _, mode := range modes {
		mr := ModeResult{Mode: mode}
		byLevel := map[int]*LevelAccuracy{}
		for _, l := range lines {
			if l.Mode != mode || l.Stage == "first" {
				continue
			}
			var lv int
			fmt.Sscanf(l.Bench, "level%d", &lv)
			la := byLevel[lv]
			if la == nil {
				la = &LevelAccuracy{Level: lv}
				byLevel[lv] = la
			}
			la.N++
			if l.Correct {
				la.Correct++
			}
			if ShowsSteps(l.Response) {
				la.Worked++
			}
		}
		total, correct := 0, 0
		for lv := 1; lv <= MaxLevel; lv++ {
			if la := byLevel[lv]; la != nil {
				la.Accuracy = float64(la.Correct) / float64(la.N)
				mr.Levels = append(mr.Levels, *la)
				total += la.N
				correct += la.Correct
				mr.Worked += la.Worked
			}
		}
		if total > 0 {
			mr.Overall = float64(correct) / float64(total)
		}
		r.Modes = append(r.Modes, mr)
	}
	return r
}

// feedbackUsage totals a LANPO run's prompt counters from metrics.jsonl.
func feedbackUsage(runDir string) FeedbackUsage {
	var u FeedbackUsage
	rows, err := eval.ReadMetrics(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		return u
	}
	num := func(r map[string]any, k string) int { v, _ := r[k].(float64); return int(v) }
	for _, r := range rows {
		u.Prompts += num(r, "lanpo_prompts")
		u.FeedbackAware += num(r, "lanpo_feedback_aware")
		u.Reflection += num(r, "lanpo_reflection")
		u.Abstraction += num(r, "lanpo_abstraction")
		u.Fallback += num(r, "lanpo_fallback_no_material") + num(r, "lanpo_fallback_not_relevant") + num(r, "lanpo_fallback_too_long")
	}
	return u
}
