package trainer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// StepMetrics is one line of RUN_DIR/metrics.jsonl.
type StepMetrics struct {
	Step int     `json:"step"`
	Loss float64 `json:"loss"`
	LR   float64 `json:"lr"`

	// GRPO. Reward, accuracy, lengths and the zero-variance fraction are
	// over every rollout sampled in the step (what the policy did); with
	// dynamic sampling the *_kept values are over the groups the update
	// trained on.
	RewardMean     float64 `json:"reward_mean,omitempty"`
	RewardStd      float64 `json:"reward_std,omitempty"`
	Accuracy       float64 `json:"accuracy"`
	ZeroVarFrac    float64 `json:"zero_variance_group_frac"`
	RespLenMean    float64 `json:"response_length_mean,omitempty"`
	RespLenMax     int     `json:"response_length_max,omitempty"`
	TruncRatio     float64 `json:"truncation_ratio"`
	GroupsKept     int     `json:"groups_kept,omitempty"`
	GroupsDropped  int     `json:"groups_dropped,omitempty"` // zero-variance groups dynamic sampling removed
	RewardMeanKept float64 `json:"reward_mean_kept,omitempty"`
	AccuracyKept   float64 `json:"accuracy_kept,omitempty"`
	Entropy        float64 `json:"entropy,omitempty"`
	KL             float64 `json:"kl"`
	ClipFrac       float64 `json:"clip_frac"`
	Ratio          float64 `json:"ratio_mean,omitempty"`
	LogpMismatch   float64 `json:"sampler_trainer_logp_max_abs_diff"`

	// SFT
	EvalLoss float64 `json:"eval_loss,omitempty"`

	GradNorm float64 `json:"grad_norm"`
	Skipped  bool    `json:"update_skipped,omitempty"`
	Tokens   int     `json:"tokens"`

	// Timings differ between runs; everything above does not.
	TokensPerS float64            `json:"tokens_per_s"`
	Seconds    map[string]float64 `json:"seconds"`
}

// metricsLog appends StepMetrics to RUN_DIR/metrics.jsonl.
type metricsLog struct{ f *os.File }

func openMetrics(runDir string) (*metricsLog, error) {
	f, err := os.OpenFile(filepath.Join(runDir, metricsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return &metricsLog{f}, nil
}

func (l *metricsLog) write(m StepMetrics) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return err
	}
	return l.f.Sync()
}

func (l *metricsLog) Close() error { return l.f.Close() }

// phaseTimer accumulates wall time per named phase of a step.
type phaseTimer struct {
	start time.Time
	phase string
	secs  map[string]float64
}

func newPhaseTimer() *phaseTimer { return &phaseTimer{secs: map[string]float64{}} }

// enter ends the current phase and starts another.
func (p *phaseTimer) enter(phase string) {
	now := time.Now()
	if p.phase != "" {
		p.secs[p.phase] += now.Sub(p.start).Seconds()
	}
	p.phase, p.start = phase, now
}

func (p *phaseTimer) total() float64 {
	p.enter("")
	var t float64
	for _, s := range p.secs {
		t += s
	}
	return t
}
