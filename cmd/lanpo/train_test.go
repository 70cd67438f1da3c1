package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTrainCLI(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	common := []string{"--log-level", "error", "train", "--config", "../../configs/tiny-grpo.yaml",
		"--set", "run_dir=" + run, "--set", "data.train=../../configs/data/tiny-arith.jsonl", "--set", "total_steps=2"}
	out, err := runWithStdin(t, "", append(common, "--dry-run")...)
	if err != nil || !strings.Contains(out, "run_dir: "+run) || !strings.Contains(out, "clip_high: 0.28") {
		t.Fatalf("--dry-run: %v\n%s", err, out)
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Fatal("--dry-run created the run directory")
	}
	if _, err := runWithStdin(t, "", common...); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"metrics.jsonl", "config.resolved.yaml", "checkpoints/step-000002/manifest.json", "checkpoints/step-000002/tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(run, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	// A second fresh start into the same run directory is refused.
	_, err = runWithStdin(t, "", common...)
	if ue, ok := err.(usageError); !ok || !strings.Contains(err.Error(), "--resume auto") {
		t.Fatalf("second start: %v (%T)", err, ue)
	}
	// The checkpoint is a model directory lanpo score reads.
	out, err = runWithStdin(t, "{\"ids\":[279,72,198,55]}\n", "--log-level", "error", "score", "--model", filepath.Join(run, "checkpoints", "step-000002"))
	if err != nil || !strings.Contains(out, "logprobs") {
		t.Fatalf("score on the checkpoint: %v %s", err, out)
	}
	_, err = runWithStdin(t, "", "train", "--config", "../../configs/tiny-grpo.yaml", "--set", "algo.kl_estimator=k9")
	if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), "algo.kl_estimator") {
		t.Fatalf("bad config: %v", err)
	}
}
