package trainer

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
)

// TestConfigRefusesSilentMistakes: settings that used to be taken in
// silence — a fractional count truncated, a group of one that learns
// nothing, a warm-up longer than the run — are refused naming the key.
func TestConfigRefusesSilentMistakes(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"rollout.samples_per_prompt=4.9", "config key rollout.samples_per_prompt: want a whole number, got 4.9"},
		{"rollout.samples_per_prompt=1", "config key rollout.samples_per_prompt: GRPO and LANPO need ≥ 2"},
		{"lanpo.summary_field_tokens=1.5", "config key lanpo.summary_field_tokens: want a whole number"},
	} {
		_, err := LoadConfig("../configs/tiny-grpo.yaml", []string{c.set})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want %q", c.set, err, c.want)
		}
	}
	for _, set := range []string{"lanpo.consolidate=-0.1", "lanpo.consolidate=.inf", "lanpo.consolidate=.nan"} {
		if _, err := LoadConfig("../configs/tiny-lanpo.yaml", []string{set}); err == nil || !strings.Contains(err.Error(), "config key lanpo.consolidate: must be a finite λ ≥ 0") {
			t.Errorf("--set %s: %v", set, err)
		}
	}
	if cfg, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"rollout.samples_per_prompt=4.0"}); err != nil || cfg.Rollout.SamplesPerPrompt != 4 {
		t.Errorf("4.0 is a whole number: %v", err)
	}
	// A warm-up longer than the run (a quick --set total_steps=1 try) is
	// said, not refused.
	var buf bytes.Buffer
	defer func(l zerolog.Logger) { log.Logger = l }(log.Logger)
	log.Logger = zerolog.New(&buf)
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"optim.warmup_steps=7"}); err != nil || !strings.Contains(buf.String(), "the warm-up is longer than the run") {
		t.Errorf("warmup_steps 7 of 6: %v, log %q", err, buf.String())
	}
}

// TestWithSets: overrides apply to a config in memory as to a file, and
// a bad key is named.
func TestWithSets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Model, cfg.Seed = "tiny", 3
	got, err := WithSets(cfg, []string{"lanpo.lesson_order=outcome", "rollout.temperature=0.5"})
	if err != nil {
		t.Fatal(err)
	}
	if got.LANPO.LessonOrder != "outcome" || got.Rollout.Temperature != 0.5 || got.Model != "tiny" || got.Seed != 3 {
		t.Fatalf("lesson_order %q, temperature %v, model %q, seed %d", got.LANPO.LessonOrder, got.Rollout.Temperature, got.Model, got.Seed)
	}
	if _, err := WithSets(cfg, []string{"lanpo.lesson_ordr=outcome"}); err == nil || !strings.Contains(err.Error(), "lesson_ordr") {
		t.Fatalf("a misspelt key: %v", err)
	}
}
