package trainer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
)

// Checkpoint digests: the manifest holds the SHA-256 of every file of the
// checkpoint (manifest.sha256): the safetensors files' computed as they are
// written (fsutil.HashPipe), the others' read back when the checkpoint is
// sealed, files in parallel. A resume verifies them before loading anything: a flipped byte in the
// weights or the optimizer state (a bad disk, a partial copy between
// machines) is an error naming the file, never a silent resume into a
// different run. Checkpoints sealed before digests existed carry sizes
// only; they still load, with a warning.

// ErrCorrupt marks a checkpoint whose files do not match its manifest.
var ErrCorrupt = errors.New("checkpoint fails verification")

// Verification is what VerifyCheckpoint found.
type Verification struct {
	Dir     string
	Files   int   // files the manifest lists
	Bytes   int64 // their total size
	Digests bool  // the manifest has digests (false: sizes only, an older checkpoint)
	Seconds float64
}

// digestFiles returns the SHA-256 (hex) of each named file of dir, hashing
// up to GOMAXPROCS files at once.
func digestFiles(dir string, names []string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sum, err := fileSHA256(filepath.Join(dir, name))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			out[name] = sum
		}()
	}
	wg.Wait()
	return out, firstErr
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// VerifyCheckpoint checks a checkpoint against its manifest: every required
// file there, every file of the listed size and, where the manifest has
// digests, of the listed SHA-256. An error wrapping ErrCorrupt names every
// file that differs.
func VerifyCheckpoint(dir string) (Verification, error) {
	start := time.Now()
	v := Verification{Dir: dir}
	man, err := readManifest(dir)
	if err == nil {
		err = checkManifestFiles(dir, man)
	}
	if err != nil {
		return v, fmt.Errorf("%w: not a complete checkpoint: %w", ErrCorrupt, err)
	}
	names := make([]string, 0, len(man.Files))
	for name, size := range man.Files {
		names = append(names, name)
		v.Bytes += size
	}
	sort.Strings(names)
	v.Files = len(names)
	if len(man.Digests) == 0 {
		v.Seconds = time.Since(start).Seconds()
		return v, nil
	}
	v.Digests = true
	for _, name := range names {
		if man.Digests[name] == "" {
			return v, fmt.Errorf("%w: %s: the manifest lists it without a digest", ErrCorrupt, filepath.Join(dir, name))
		}
	}
	got, err := digestFiles(dir, names)
	if err != nil {
		return v, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	var bad []string
	for _, name := range names {
		if got[name] != man.Digests[name] {
			bad = append(bad, fmt.Sprintf("%s has SHA-256 %s, the manifest says %s", filepath.Join(dir, name), short(got[name]), short(man.Digests[name])))
		}
	}
	v.Seconds = time.Since(start).Seconds()
	if len(bad) > 0 {
		return v, fmt.Errorf("%w: %s", ErrCorrupt, strings.Join(bad, "; "))
	}
	return v, nil
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12] + "…"
	}
	return sum
}

func readManifest(dir string) (manifest, error) {
	var man manifest
	raw, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return man, err
	}
	if err := json.Unmarshal(raw, &man); err != nil {
		return man, fmt.Errorf("%s: %w", filepath.Join(dir, manifestFile), err)
	}
	return man, nil
}

// verifiedNewest is --resume auto's choice: the newest complete checkpoint
// that passes verification. One that fails is moved to
// run_dir/set-aside/TIME/checkpoints/ (not deleted) with the reason beside
// it, and the next older one is tried; when checkpoints exist and none is
// intact the run stops (an error), rather than silently start over.
func verifiedNewest(runDir string) (string, error) {
	root := filepath.Join(runDir, checkpointsDir)
	done := completeCheckpoints(root)
	var setAside []string
	for i := len(done) - 1; i >= 0; i-- {
		v, err := VerifyCheckpoint(done[i])
		if err == nil {
			logVerified(v)
			return done[i], nil
		}
		if !errors.Is(err, ErrCorrupt) {
			return "", err
		}
		to, aerr := setAsideCorrupt(runDir, done[i], err)
		if aerr != nil {
			return "", fmt.Errorf("%w (and setting it aside failed: %v)", err, aerr)
		}
		log.Warn().Err(err).Str("checkpoint", done[i]).Str("set_aside_to", to).Msg("--resume auto: checkpoint fails verification; set aside, trying the previous one")
		setAside = append(setAside, done[i])
	}
	if len(setAside) > 0 {
		// A ConfigError: lanpo exits 2, and lanpo launch does not restart
		// into a run whose work would start over.
		return "", ConfigError{fmt.Errorf("--resume auto: no intact checkpoint in %s: %s failed verification and were set aside under %s "+
			"(checkpoint.keep 1 keeps no older one to fall back on); to start over, choose another run_dir",
			root, strings.Join(setAside, ", "), filepath.Join(runDir, setAsideDir))}
	}
	return "", nil
}

// setAsideCorrupt moves a checkpoint that failed verification out of the
// checkpoints directory, writing why beside it; it returns where.
func setAsideCorrupt(runDir, dir string, why error) (string, error) {
	dest := filepath.Join(runDir, setAsideDir, time.Now().UTC().Format("20060102T150405.000Z"), checkpointsDir)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return "", err
	}
	to := filepath.Join(dest, filepath.Base(dir))
	if err := os.Rename(dir, to); err != nil {
		return "", err
	}
	return to, fsutil.WriteFileSync(to+".corrupt.txt", []byte(why.Error()+"\n"))
}

// logVerified reports a verification: a checkpoint without digests loads
// with a warning.
func logVerified(v Verification) {
	if !v.Digests {
		log.Warn().Str("checkpoint", v.Dir).Msg("checkpoint written before digests: only its file sizes are checked")
		return
	}
	log.Info().Str("checkpoint", v.Dir).Int("files", v.Files).Float64("gb", float64(v.Bytes)/1e9).
		Float64("seconds", v.Seconds).Msg("checkpoint verified (SHA-256)")
}
