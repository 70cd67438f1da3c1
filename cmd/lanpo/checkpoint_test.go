package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// writeCheckpoint makes a checkpoint directory as lanpo seals one: its
// files and a manifest of their sizes and (digests) SHA-256.
func writeCheckpoint(t *testing.T, dir string, digests bool) {
	t.Helper()
	files := map[string]string{"config.json": "{}", "generation_config.json": "{}", "tokenizer.json": "{}",
		"trainer_state.json": `{"step": 1}`, "optimizer.json": "{}", "optimizer.safetensors": "moments", "model.safetensors": "weights"}
	man := map[string]any{"step": 1}
	sizes, sums := map[string]int64{}, map[string]string{}
	for name, body := range files {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(body))
		sizes[name], sums[name] = int64(len(body)), hex.EncodeToString(sum[:])
	}
	man["files"] = sizes
	if digests {
		man["sha256"] = sums
	}
	js, _ := json.Marshal(man)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
}

// lanpo checkpoint verify: ok for an intact checkpoint, "sizes only" for
// one saved before digests, exit 1 naming the file when a byte changed;
// a run directory verifies each of its checkpoints.
func TestCheckpointVerifyCommand(t *testing.T) {
	run := t.TempDir()
	good := filepath.Join(run, "checkpoints", "step-000001")
	old := filepath.Join(run, "checkpoints", "step-000002")
	writeCheckpoint(t, good, true)
	writeCheckpoint(t, old, false)
	out, err := runApp(t, "checkpoint", "verify", run)
	if err != nil || !strings.Contains(out, good+": ok: 7 files") || !strings.Contains(out, old+": sizes only") {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(good, "model.safetensors"), []byte("weighTs"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runApp(t, "checkpoint", "verify", good)
	ec, ok := err.(cli.ExitCoder)
	if !ok || ec.ExitCode() != 1 || !strings.Contains(out, "FAILED") || !strings.Contains(out, filepath.Join(good, "model.safetensors")+" has SHA-256") {
		t.Fatalf("a changed byte: %v\n%s", err, out)
	}
	if _, err := runApp(t, "checkpoint", "verify", t.TempDir()); err == nil {
		t.Fatal("a directory with no checkpoint verified")
	}
}
