package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// The golden run pins what SFT and GRPO compute, so that later changes to
// the loops (LANPO's phases, devices, data parallelism) are checked to leave
// them alone: 60 SFT steps of the built-in tiny model on arithmetic chats
// (enough that GRPO's rewards vary), then 4 GRPO steps with the KL term
// from that checkpoint. It runs in float64: a float32 run's sampled tokens
// can flip on another CPU (reduction order), which would make a pinned
// fixture fail for the wrong reason; in float64 the values agree to ~1e-12
// and the draws do not move.
//
// Regenerate (only when a change to the results is intended, and say so in
// the commit): LANPO_UPDATE_GOLDEN=1 go test -run TestGRPOGolden ./trainer
const goldenFile = "testdata/grpo_golden.json"

// goldenKeys are the metrics compared; timings are left out.
var goldenKeys = []string{"loss", "lr", "reward_mean", "accuracy", "response_length_mean", "entropy", "kl", "clip_frac",
	"ratio_mean", "grad_norm", "tokens", "sampler_trainer_logp_max_abs_diff"}

type golden struct {
	SFT     []map[string]float64  `json:"sft"`
	Steps   []map[string]float64  `json:"steps"`   // GRPO
	Weights map[string][3]float64 `json:"weights"` // after GRPO, per parameter: sum, sum of |w|, sum of w²
}

// goldenSFT runs the SFT stage of the golden run; it returns its config
// and final checkpoint.
func goldenSFT(t *testing.T) (Config, string) {
	t.Helper()
	cfg, err := LoadConfig("../configs/tiny-sft.yaml", []string{"run_dir=" + filepath.Join(t.TempDir(), "sft"), "dtype=float64",
		"data.train=../configs/data/tiny-arith-sft.jsonl", "data.eval=", "total_steps=60", "checkpoint.every=0", "checkpoint.keep=1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := RunSFT(context.Background(), cfg, "", RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return cfg, filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(cfg.TotalSteps))
}

// goldenConfig is the GRPO stage of the golden run, from model (the SFT
// checkpoint), with overrides.
func goldenConfig(t *testing.T, model string, sets ...string) Config {
	return tinyConfig(t, append([]string{"dtype=float64", "algo.kl_beta=0.05", "total_steps=4", "model=" + model}, sets...)...)
}

func goldenRows(t *testing.T, runDir string) []map[string]float64 {
	t.Helper()
	var rows []map[string]float64
	for _, row := range stableMetrics(t, runDir) {
		step := map[string]float64{}
		for _, k := range goldenKeys {
			if v, ok := row[k].(float64); ok {
				step[k] = v
			}
		}
		rows = append(rows, step)
	}
	return rows
}

// runGolden runs the GRPO stage cfg and summarizes it with its SFT stage
// (nil: none).
func runGolden(t *testing.T, sft *Config, cfg Config) golden {
	t.Helper()
	runGRPO(t, cfg, "")
	var g golden
	if sft != nil {
		g.SFT = goldenRows(t, sft.RunDir)
	}
	g.Steps = goldenRows(t, cfg.RunDir)
	lockThread(t)
	m, err := model.Load(filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(cfg.TotalSteps)), cfg.loadOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g.Weights = map[string][3]float64{}
	for _, p := range m.Params() {
		var s [3]float64
		for _, v := range tensor.Float64s(p.Tensor) {
			s[0] += v
			s[1] += math.Abs(v)
			s[2] += v * v
		}
		g.Weights[p.Name] = s
	}
	return g
}

// compareGolden fails unless got equals want to relative tolerance tol.
func compareGolden(t *testing.T, got, want golden, tol float64) {
	t.Helper()
	close := func(a, b float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }
	rows := func(stage string, got, want []map[string]float64) {
		if len(got) != len(want) {
			t.Fatalf("%s: %d steps, golden has %d", stage, len(got), len(want))
		}
		for i := range want {
			for k, v := range want[i] {
				if g, ok := got[i][k]; !ok || !close(g, v) {
					t.Errorf("%s step %d %s = %v, golden %v", stage, i+1, k, got[i][k], v)
				}
			}
		}
	}
	if want.SFT != nil {
		rows("SFT", got.SFT, want.SFT)
	}
	rows("GRPO", got.Steps, want.Steps)
	if len(got.Weights) != len(want.Weights) {
		t.Fatalf("%d parameters, golden has %d", len(got.Weights), len(want.Weights))
	}
	for name, w := range want.Weights {
		for j := range w {
			if !close(got.Weights[name][j], w[j]) {
				t.Errorf("%s statistic %d = %v, golden %v", name, j, got.Weights[name][j], w[j])
			}
		}
	}
}

func readGolden(t *testing.T) golden {
	t.Helper()
	raw, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	var want golden
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", goldenFile, err))
	}
	return want
}

// TestGRPOGolden: the tiny SFT then GRPO run (float64, KL on) gives the
// pinned metrics and weights.
func TestGRPOGolden(t *testing.T) {
	sft, model := goldenSFT(t)
	got := runGolden(t, &sft, goldenConfig(t, model))
	if os.Getenv("LANPO_UPDATE_GOLDEN") != "" {
		b, _ := json.MarshalIndent(got, "", " ")
		if err := os.WriteFile(goldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Skip("golden file rewritten")
	}
	compareGolden(t, got, readGolden(t), 1e-9)
}
