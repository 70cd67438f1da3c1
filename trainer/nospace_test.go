package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The full-disk test's child: a GRPO run whose run_dir is on a tmpfs with
// room for one checkpoint and a half (the parent mounts it in a user and
// mount namespace: unshare -Urm, so it needs no privilege and never
// skips).
const (
	fullDiskVar  = "LANPO_TEST_FULL_DISK"       // the tmpfs's mount point
	fullDiskFrom = "LANPO_TEST_FULL_DISK_MODEL" // the warmed tiny model
)

type fullDiskResult struct {
	Err       string   `json:"err"`
	NoSpace   bool     `json:"no_space"`
	Mount     string   `json:"mount"`
	Needed    int64    `json:"needed"`
	Complete  []string `json:"complete"`
	Verified  string   `json:"verified"` // "" or the newest checkpoint's verification error
	Leftovers []string `json:"leftovers"`
}

func fullDiskChild(mnt string) int {
	cfg, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"run_dir=" + filepath.Join(mnt, "run"), "total_steps=3",
		"checkpoint.every=1", "checkpoint.keep=5", "data.train=../configs/data/tiny-arith.jsonl", "model=" + os.Getenv(fullDiskFrom)})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var r fullDiskResult
	err = RunGRPO(context.Background(), cfg, "", RunOptions{})
	if err != nil {
		r.Err = err.Error()
	}
	var ns *NoSpaceError
	if errors.As(err, &ns) {
		r.NoSpace, r.Mount, r.Needed = true, ns.Mount, ns.Needed
	}
	r.Complete = CompleteCheckpoints(cfg.RunDir)
	if n := len(r.Complete); n > 0 {
		if _, verr := VerifyCheckpoint(r.Complete[n-1]); verr != nil {
			r.Verified = verr.Error()
		}
	}
	entries, _ := os.ReadDir(filepath.Join(cfg.RunDir, checkpointsDir))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			r.Leftovers = append(r.Leftovers, e.Name())
		}
	}
	js, _ := json.Marshal(r)
	fmt.Println(string(js))
	return 0
}

// A checkpoint save that hits ENOSPC on a real (small) filesystem leaves
// the previous complete checkpoint intact, removes its partial directory
// and ends the run with a NoSpaceError naming the filesystem and what a
// checkpoint takes.
func TestFullDiskDuringCheckpoint(t *testing.T) {
	probe := tinyConfig(t, "total_steps=1")
	runGRPO(t, probe, "")
	var runBytes int64
	filepath.Walk(probe.RunDir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			runBytes += info.Size()
		}
		return nil
	})
	man, err := readManifest(filepath.Join(probe.RunDir, checkpointsDir, checkpointName(1)))
	if err != nil {
		t.Fatal(err)
	}
	var ckptBytes int64
	for _, n := range man.Files {
		ckptBytes += n
	}
	size := (runBytes + ckptBytes/2 + 4095) / 4096 * 4096
	mnt := t.TempDir()
	cmd := exec.Command("unshare", "-Urm", "sh", "-c", `mount -t tmpfs -o size="$2" tmpfs "$1" && exec "$0" -test.run='^$'`,
		os.Args[0], mnt, fmt.Sprint(size))
	cmd.Env = append(os.Environ(), fullDiskVar+"="+mnt, fullDiskFrom+"="+warmTiny(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child on a %d-byte tmpfs (unshare -Urm): %v\n%s", size, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r fullDiskResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("tmpfs %d bytes (a checkpoint %d): %s", size, ckptBytes, r.Err)
	// (the checkpoints' config.yaml holds the run_dir: a few bytes apart)
	if !r.NoSpace || r.Mount != mnt || math.Abs(float64(r.Needed-ckptBytes)) > 0.01*float64(ckptBytes) || !strings.Contains(r.Err, "no space left for checkpoint") {
		t.Errorf("the run's error does not say the disk is full, where, and what a checkpoint takes: %+v", r)
	}
	if len(r.Complete) != 1 || filepath.Base(r.Complete[0]) != checkpointName(1) || r.Verified != "" {
		t.Errorf("the previous checkpoint is not intact: complete %v, verification %q", r.Complete, r.Verified)
	}
	if len(r.Leftovers) != 0 {
		t.Errorf("partial checkpoint directories left: %v", r.Leftovers)
	}
}
