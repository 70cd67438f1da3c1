package demo

import (
	"path/filepath"

	"github.com/lanpo-rl/lanpo/eval"
)

// Results is RUN_DIR/demo_results.json: each stage's held-out accuracy
// by mode and level, the split sizes and how often feedback was available.
type Results struct {
	World     string   `json:"world"`
	Seed      int64    `json:"seed"`
	RLSeed    int      `json:"rl_seed"`       // which RL seed (1: the world seed's own)
	Set       []string `json:"set,omitempty"` // overrides of the LANPO arms' config
	ModelSize string   `json:"model_size,omitempty"`
	// Pairing is what lanpo demo paired matches runs on besides the world
	// and seeds: which SFT checkpoint the arms started from, the model
	// size and --fast.
	Pairing *Pairing                 `json:"pairing,omitempty"`
	Sizes   map[string]int           `json:"sizes"`
	Stages  []StageResult            `json:"stages"`
	Usage   map[string]FeedbackUsage `json:"feedback_usage,omitempty"` // per LANPO arm
	Seconds []ArmSeconds             `json:"seconds,omitempty"`        // each arm's training wall time
	Rules   *RulesAnalysis           `json:"rules,omitempty"`          // rule worlds
	// Controls are the rule worlds' retrieval controls (retrievalControls).
	Controls []RetrievalControl `json:"retrieval_controls,omitempty"`
}

// Pairing identifies the SFT model a run's arms started from.
type Pairing struct {
	// SFTDigest is the SHA-256 of the SFT checkpoint's weights file
	// (model.safetensors), its first 16 hex digits.
	SFTDigest string `json:"sft_digest"`
	ModelSize string `json:"model_size"`
	Fast      bool   `json:"fast"`
}

// RetrievalControl is a model evaluated with retrieval from a pool that is
// not its own run's: whose gain is it, the pool's or the training's?
type RetrievalControl struct {
	Model string `json:"model"` // sft, or the arm whose final model it is
	Pool  string `json:"pool"`  // the arm whose final pool it is; grpo-own: built from GRPO's rollouts; lanpo-oracle: the oracle's plans
	// Summarizer is the model that wrote a built pool's summaries (the
	// arm's final model).
	Summarizer string     `json:"summarizer,omitempty"`
	Retrieval  ModeResult `json:"retrieval"`
}

// ArmSeconds is an arm's wall time (training with its evaluations).
type ArmSeconds struct {
	Arm     string  `json:"arm"`
	Seconds float64 `json:"seconds"`
}

// StageResult is one model's held-out evaluation.
type StageResult struct {
	Stage string       `json:"stage"` // sft, sft-told, or an arm
	Modes []ModeResult `json:"modes"`
}

// mode is the stage's result in one inference mode (nil: not evaluated so).
func (st StageResult) mode(m string) *ModeResult {
	for i := range st.Modes {
		if st.Modes[i].Mode == m {
			return &st.Modes[i]
		}
	}
	return nil
}

// ModeResult is one mode's accuracy per level.
type ModeResult struct {
	Mode    string          `json:"mode"`
	Levels  []LevelAccuracy `json:"levels"`
	Overall float64         `json:"overall"`
	Worked  int             `json:"worked"`
}

// LevelAccuracy is greedy accuracy on one held-out group: a difficulty
// level, or a rule world's family.
type LevelAccuracy struct {
	Level    int     `json:"level"`
	Name     string  `json:"name"` // the group's benchmark name
	N        int     `json:"n"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
	Worked   int     `json:"worked"` // answers that show column steps (ShowsSteps)
	// Zero-shot: the canonical answers' log-likelihood under the bare
	// prompt, teacher-forced (eval's reference solutions), summed over each
	// answer's tokens and averaged over the group's problems; RefSpanLogp
	// the same over the rule it names (rule worlds). A continuous endpoint
	// beside accuracy.
	RefLogp     float64 `json:"reference_logprob,omitempty"`
	RefSpanLogp float64 `json:"reference_span_logprob,omitempty"`
}

// FeedbackUsage totals a LANPO arm's prompts by what they got.
type FeedbackUsage struct {
	Prompts       int `json:"prompts"`
	FeedbackAware int `json:"feedback_aware"`
	Reflection    int `json:"reflection"`
	Abstraction   int `json:"abstraction"`
	Fallback      int `json:"fallback"`
}

// stageResult tallies sample lines per mode and group (self-correct: the
// answers after reflection); groups are the benchmarks' names.
func stageResult(stage string, modes []string, groups []string, lines []eval.SampleLine) StageResult {
	index := map[string]int{}
	for i, g := range groups {
		index[g] = i + 1
	}
	r := StageResult{Stage: stage}
	for _, mode := range modes {
		mr := ModeResult{Mode: mode}
		byLevel := map[int]*LevelAccuracy{}
		for _, l := range lines {
			if l.Mode != mode || l.Stage == "first" {
				continue
			}
			lv := index[l.Bench]
			la := byLevel[lv]
			if la == nil {
				la = &LevelAccuracy{Level: lv, Name: l.Bench}
				byLevel[lv] = la
			}
			la.N++
			if l.Correct {
				la.Correct++
			}
			la.RefLogp += l.RefLogp
			la.RefSpanLogp += l.RefSpanLogp
			if ShowsSteps(l.Response) {
				la.Worked++
			}
		}
		total, correct := 0, 0
		for lv := 1; lv <= len(groups); lv++ {
			if la := byLevel[lv]; la != nil {
				la.Accuracy = float64(la.Correct) / float64(la.N)
				la.RefLogp /= float64(la.N)
				la.RefSpanLogp /= float64(la.N)
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
