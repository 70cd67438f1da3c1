package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/trainertest"
	"github.com/lanpo-rl/lanpo/trainer"
)

// configOf runs `lanpo args…` with the command's action replaced by
// build, and returns the config build made from the flags.
func configOf(t *testing.T, build func(*cli.Context) (trainer.Config, error), args ...string) trainer.Config {
	t.Helper()
	app := newApp()
	app.Before = nil
	var cfg trainer.Config
	for _, c := range app.Commands {
		if c.Name == args[0] {
			c.Action = func(ctx *cli.Context) error {
				var err error
				cfg, err = build(ctx)
				return err
			}
		}
	}
	if err := app.Run(append([]string{"lanpo"}, args...)); err != nil {
		t.Fatalf("lanpo %v: %v", args, err)
	}
	return cfg
}

// TestEveryEntryPointResolvesItsConfig: each way into a run's config —
// lanpo train and sft (a config file naming only the model and data),
// lanpo seed and eval (flags alone, no --config), lanpo pool, a Config
// built in Go and passed to RunGRPO, and the demo (demo's own test) —
// gives a resolved config from nothing but defaults: every key derived
// from another is filled and valid. lanpo seed with its defaults used to
// fail at once with "max_attempt_chars must be ≥ 1, got 0": the attempt
// cap was derived only when a config file went through the loader.
func TestEveryEntryPointResolvesItsConfig(t *testing.T) {
	dir := t.TempDir()
	minimal := filepath.Join(dir, "minimal.yaml")
	if err := os.WriteFile(minimal, []byte("model: builtin:tiny\ndata:\n  train: problems.jsonl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"train", "sft"} {
		cfg, err := trainer.LoadConfig(minimal, nil)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		trainertest.AssertResolved(t, "lanpo "+kind+" --config minimal.yaml", cfg)
		if cfg.RunDir != filepath.Join("runs", "minimal") {
			t.Errorf("%s: run_dir %q, want runs/minimal", kind, cfg.RunDir)
		}
	}
	seedCfg := configOf(t, seedConfig, "seed", "--model", "m", "--data", "d.jsonl")
	trainertest.AssertResolved(t, "lanpo seed", seedCfg)
	if want := 16 * seedCfg.Rollout.MaxNewTokens; seedCfg.LANPO.MaxAttemptChars != want {
		t.Errorf("lanpo seed: lanpo.max_attempt_chars %d, want %d (16 per rollout.max_new_tokens token)", seedCfg.LANPO.MaxAttemptChars, want)
	}
	// A flag that a derived key follows is applied before it is derived.
	seedCfg = configOf(t, seedConfig, "seed", "--model", "m", "--data", "d.jsonl", "--max-new-tokens", "100")
	if seedCfg.LANPO.MaxAttemptTokens != 100 || seedCfg.LANPO.MaxAttemptChars != 1600 {
		t.Errorf("lanpo seed --max-new-tokens 100: lanpo.max_attempt_tokens %d, max_attempt_chars %d; want 100, 1600",
			seedCfg.LANPO.MaxAttemptTokens, seedCfg.LANPO.MaxAttemptChars)
	}
	evalCfg := configOf(t, evalConfig, "eval", "--model", "m", "--bench", "gsm8k", "--max-new-tokens", "300")
	trainertest.AssertResolved(t, "lanpo eval", evalCfg)
	if evalCfg.LANPO.MaxAttemptTokens != 300 || !slices.Equal(evalCfg.Eval.Modes, []string{"zero-shot"}) {
		t.Errorf("lanpo eval --max-new-tokens 300: lanpo.max_attempt_tokens %d (want 300), modes %v", evalCfg.LANPO.MaxAttemptTokens, evalCfg.Eval.Modes)
	}
	poolCfg, err := poolRunConfig()
	if err != nil {
		t.Fatal(err)
	}
	trainertest.AssertResolved(t, "lanpo pool", poolCfg)

	// The library: a Config made in Go from the defaults, run as it is.
	cfg := trainer.DefaultConfig()
	cfg.RunDir, cfg.Model, cfg.Data.Train = filepath.Join(dir, "lib"), warmTiny(t), "../../configs/data/tiny-arith-lanpo.jsonl"
	cfg.Algo.Name, cfg.Rollout.MaxNewTokens, cfg.Rollout.PromptsPerStep = trainer.AlgoLANPO, 16, 8
	if err := trainer.RunGRPO(context.Background(), cfg, "", trainer.RunOptions{}); err != nil {
		t.Fatalf("RunGRPO with a Config built from DefaultConfig: %v", err)
	}
	ran, err := trainer.ReadConfig(filepath.Join(cfg.RunDir, "config.resolved.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	trainertest.AssertResolved(t, "trainer.RunGRPO", ran)
	if ran.TotalSteps != 1 {
		t.Errorf("trainer.RunGRPO: total_steps %d, want 1 (8 problems, 8 prompts a step)", ran.TotalSteps)
	}
}
