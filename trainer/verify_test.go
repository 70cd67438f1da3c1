package trainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/optim"
)

// flipByte flips one byte in the middle of dir/name, keeping its size.
func flipByte(t *testing.T, dir, name string) {
	t.Helper()
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every file of a checkpoint has its SHA-256 in the manifest; a flipped
// byte in the weights or the optimizer state (same size: the manifest's
// sizes alone do not see it) fails verification naming the file, and
// --resume PATH refuses that checkpoint.
func TestCheckpointDigestsCatchAFlippedByte(t *testing.T) {
	cfg := tinyConfig(t, "total_steps=1")
	runGRPO(t, cfg, "")
	ckpt := filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(1))
	man, err := readManifest(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	for name := range man.Files {
		if len(man.Digests[name]) != 64 {
			t.Errorf("%s: digest %q", name, man.Digests[name])
		}
	}
	if v, err := VerifyCheckpoint(ckpt); err != nil || !v.Digests || v.Files != len(man.Files) {
		t.Fatalf("a fresh checkpoint: %+v, %v", v, err)
	}
	for _, name := range []string{"model.safetensors", optim.TensorsFile} {
		t.Run(name, func(t *testing.T) {
			cp := copyDir(t, ckpt)
			flipByte(t, cp, name)
			if err := checkManifest(cp); err != nil {
				t.Fatalf("the sizes still match, so the cheap check passes: %v", err)
			}
			_, err := VerifyCheckpoint(cp)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(cp, name)+" has SHA-256") {
				t.Fatalf("verification: %v", err)
			}
			if _, err := ResolveResume(cfg.RunDir, cp); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("--resume %s: %v", cp, err)
			}
		})
	}
}

// A checkpoint saved before digests (a manifest of sizes) still verifies
// and resumes, as sizes only.
func TestCheckpointWithoutDigestsStillLoads(t *testing.T) {
	cfg := tinyConfig(t, "total_steps=1")
	runGRPO(t, cfg, "")
	ckpt := filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(1))
	man, _ := readManifest(ckpt)
	man.Digests = nil
	js, _ := json.Marshal(man)
	if err := os.WriteFile(filepath.Join(ckpt, manifestFile), js, 0o644); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(js, []byte("sha256")) {
		t.Fatal("the old-style manifest still has digests")
	}
	v, err := VerifyCheckpoint(ckpt)
	if err != nil || v.Digests {
		t.Fatalf("an old-style checkpoint: %+v, %v", v, err)
	}
	if got, err := ResolveResume(cfg.RunDir, "auto"); err != nil || got != ckpt {
		t.Fatalf("--resume auto: %q, %v", got, err)
	}
}

// --resume auto with a corrupt newest checkpoint sets it aside (not
// deleted, with the reason beside it), resumes from the previous one and
// ends bit for bit where an uninterrupted run ends; with no intact
// checkpoint left it stops instead of starting over.
func TestResumeAutoSetsACorruptCheckpointAside(t *testing.T) {
	straight := tinyConfig(t)
	runGRPO(t, straight, "")
	split := tinyConfig(t, "stop_after_steps=3")
	runGRPO(t, split, "")
	root := filepath.Join(split.RunDir, checkpointsDir)
	flipByte(t, filepath.Join(root, checkpointName(3)), optim.TensorsFile)
	got, err := ResolveResume(split.RunDir, "auto")
	if err != nil || got != filepath.Join(root, checkpointName(2)) {
		t.Fatalf("--resume auto chose %q, %v", got, err)
	}
	aside, _ := filepath.Glob(filepath.Join(split.RunDir, setAsideDir, "*", checkpointsDir, checkpointName(3)))
	reason, _ := filepath.Glob(filepath.Join(split.RunDir, setAsideDir, "*", checkpointsDir, checkpointName(3)+".corrupt.txt"))
	if len(aside) != 1 || len(reason) != 1 {
		t.Fatalf("step 3 set aside as %v with reason %v", aside, reason)
	}
	if b, _ := os.ReadFile(reason[0]); !strings.Contains(string(b), optim.TensorsFile) {
		t.Errorf("the reason does not name the file: %s", b)
	}
	runGRPO(t, split, "auto")
	a := filepath.Join(straight.RunDir, checkpointsDir, checkpointName(4))
	b := filepath.Join(root, checkpointName(4))
	for _, f := range []string{"model.safetensors", optim.TensorsFile, stateFile} {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Fatalf("%s differs from the uninterrupted run's after resuming past a corrupt checkpoint", f)
		}
	}

	// Every checkpoint corrupt: an error naming them, nothing started.
	for _, c := range CompleteCheckpoints(split.RunDir) {
		flipByte(t, c, "model.safetensors")
	}
	if got, err := ResolveResume(split.RunDir, "auto"); err == nil || got != "" || !strings.Contains(err.Error(), "no intact checkpoint") {
		t.Fatalf("with every checkpoint corrupt: %q, %v", got, err)
	}
}

func copyDir(t *testing.T, dir string) string {
	t.Helper()
	cp := filepath.Join(t.TempDir(), filepath.Base(dir))
	if err := os.MkdirAll(cp, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cp, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cp
}
