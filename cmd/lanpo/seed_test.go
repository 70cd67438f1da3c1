package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeedCLI: lanpo seed writes chat JSONL, statistics and state; its
// output feeds lanpo sft; --mix errors are named.
func TestSeedCLI(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "seed.jsonl")
	got, err := runWithStdin(t, "", "--log-level", "error", "seed", "--model", warmTiny(t), "--data", "../../configs/data/tiny-arith-lanpo.jsonl",
		"--out", out, "--n", "12", "--k", "4", "--batch-size", "4", "--max-new-tokens", "16",
		"--config", "../../configs/tiny-lanpo.yaml", "--set", "lanpo.summary_field_tokens=64")
	if err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	for _, want := range []string{"seed answer", "seed summarize", "kept", "statistics in"} {
		if !strings.Contains(got, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, got)
		}
	}
	for _, f := range []string{out, filepath.Join(dir, "seed.stats.json"), out + ".state.json"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := runWithStdin(t, "", "--log-level", "error", "sft", "--config", "../../configs/tiny-sft.yaml", "--set", "run_dir="+filepath.Join(dir, "sft"),
		"--set", "data.train="+out, "--set", "data.eval=", "--set", "model="+warmTiny(t), "--set", "total_steps=1", "--set", "sft.max_len=512"); err != nil {
		t.Fatalf("lanpo sft on the seed file: %v: %s", err, got)
	}
	if _, err := runWithStdin(t, "", "seed", "--model", warmTiny(t), "--data", "../../configs/data/tiny-arith-lanpo.jsonl", "--out", filepath.Join(dir, "x.jsonl"),
		"--mix", "answer=1,dance=1"); err == nil || !strings.Contains(err.Error(), "dance") {
		t.Fatalf("an unknown skill in --mix: %v", err)
	}
	if _, err := runWithStdin(t, "", "seed", "--model", warmTiny(t), "--data", "../../configs/data/tiny-arith-lanpo.jsonl", "--out", filepath.Join(dir, "y.jsonl"),
		"--set", "lanpo.similarity=bm25"); err == nil || !strings.Contains(err.Error(), "--set needs --config") {
		t.Fatalf("--set without --config: %v", err)
	}
}

// TestSeedChecksPromptsFirst: problems whose prompt and max_new_tokens
// exceed the model's context (the tiny model's 1024 with the default
// 1024) are refused before anything is written, naming file and line; the
// run used to stop in its first batch and leave an empty --out that the
// next run refused to overwrite.
func TestSeedChecksPromptsFirst(t *testing.T) {
	out := filepath.Join(t.TempDir(), "seed.jsonl")
	_, err := runWithStdin(t, "", "seed", "--model", warmTiny(t), "--data", "../../configs/data/tiny-arith-lanpo.jsonl", "--out", out)
	if err == nil || !strings.Contains(err.Error(), "tiny-arith-lanpo.jsonl:1") || !strings.Contains(err.Error(), "do not fit the model's context") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("%s was written", out)
	}
}
