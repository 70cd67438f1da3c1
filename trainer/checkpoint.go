package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/optim"
)

// A checkpoint is RUN_DIR/checkpoints/step-NNNNNN/: a Hugging Face model
// directory (model.safetensors, config.json, generation_config.json,
// tokenizer files), the optimizer (optimizer.safetensors + .json), the
// trainer state (step, data cursor, seeds, counters), the metrics so far,
// and manifest.json, written last. It is built in a temporary directory,
// fsynced and renamed into place, so a crash leaves either a complete
// checkpoint or a temporary directory that resume ignores and removes.

const (
	checkpointsDir = "checkpoints"
	manifestFile   = "manifest.json"
	stateFile      = "trainer_state.json"
	metricsFile    = "metrics.jsonl"
	tmpPrefix      = ".tmp-"
)

// TrainerState is everything besides weights and optimizer that resuming
// needs to continue exactly: all randomness derives from Seed and Step.
type TrainerState struct {
	Kind     string `json:"kind"` // "sft", or the run's algo.name (method.go)
	Step     int    `json:"step"` // completed training steps
	Seed     uint64 `json:"seed"`
	Cursor   Cursor `json:"cursor"`
	BadSteps int    `json:"bad_steps"` // NaN/Inf steps in a row
	Skipped  int    `json:"skipped_updates"`
}

// requiredFiles are what every checkpoint holds: a complete Hugging Face
// model directory (weights are model.safetensors or an index with shards)
// and the trainer's state. A checkpoint without one of them is not
// complete, whatever its manifest says. A LoRA run's checkpoint holds a
// PEFT adapter directory in place of the model (loraRequiredFiles).
var (
	requiredFiles     = []string{"config.json", "generation_config.json", tokenizer.TokenizerFile, stateFile, optim.MetaFile}
	loraRequiredFiles = []string{model.AdapterConfigFile, model.AdapterWeightsFile, tokenizer.TokenizerFile, stateFile, optim.MetaFile}
)

// namedFile is a file's name and contents, held in memory so checkpoints do
// not depend on a directory that may be gone by the time they are written.
type namedFile struct {
	name string
	data []byte
}

// readTokenizerFiles reads the tokenizer files of dir (tokenizer.json is
// required; the config and template files are copied when present).
func readTokenizerFiles(dir string) ([]namedFile, error) {
	var out []namedFile
	for _, f := range []string{tokenizer.TokenizerFile, tokenizer.ConfigFile, tokenizer.TemplateFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, fs.ErrNotExist) && f != tokenizer.TokenizerFile {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		out = append(out, namedFile{f, b})
	}
	return out, nil
}

// manifest lists a checkpoint's files with their sizes and SHA-256
// digests (verify.go; absent in checkpoints sealed before digests).
type manifest struct {
	Step    int               `json:"step"`
	Files   map[string]int64  `json:"files"`
	Digests map[string]string `json:"sha256,omitempty"`
}

func checkpointName(step int) string { return fmt.Sprintf("step-%06d", step) }

// checkpointParts are what a checkpoint holds.
type checkpointParts struct {
	m        *model.Model
	tokFiles []namedFile // the run's tokenizer files
	opt      optim.Optimizer
	state    TrainerState
	extra    []func(dir string) error // more state (the LANPO pool), written before the manifest
	comm     dist.Comm                // nil: one process
	config   []byte                   // the resolved config the run trains with (checkpointConfigFile; nil: none)
	// adapterBase is the base model a LoRA checkpoint's adapter_config.json
	// names (a LoRA run's checkpoint holds its adapters, not the model).
	adapterBase string
}

// SaveCheckpoint writes a checkpoint for state.Step and keeps the newest
// keep checkpoints. In a data-parallel run every rank calls it: rank 0
// makes the temporary directory and writes the model, tokenizer, trainer
// state, extra state and metrics; every rank writes its part of the
// optimizer (ZeRO: its shard); after all ranks are done, rank 0 writes
// the manifest and renames the directory into place. A failure on any
// rank fails the save on every rank (nothing half-written is renamed).
func SaveCheckpoint(runDir string, parts checkpointParts, keep int) (string, error) {
	m, tokFiles, opt, state := parts.m, parts.tokFiles, parts.opt, parts.state
	c := parts.comm
	if c == nil {
		c = dist.Single()
	}
	rank0 := c.Rank() == 0
	root := filepath.Join(runDir, checkpointsDir)
	final := filepath.Join(root, checkpointName(state.Step))
	// 1. rank 0 makes the temporary directory and tells the others.
	var tmp string
	err := func() error {
		if !rank0 {
			return nil
		}
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		var err error
		tmp, err = os.MkdirTemp(root, tmpPrefix+checkpointName(state.Step)+"-")
		return err
	}()
	if rank0 && tmp != "" {
		defer os.RemoveAll(tmp) // after a successful rename there is nothing left to remove
	}
	dirs, err := agree(c, err, tmp)
	if err != nil {
		return "", err
	}
	tmp = dirs[0]
	// 2. every rank writes its part.
	err = func() error {
		if err := opt.Save(tmp); err != nil {
			return fmt.Errorf("checkpoint optimizer: %w", err)
		}
		if !rank0 {
			return nil
		}
		save := func() error { return m.Save(tmp) }
		if m.LoRA() != nil {
			save = func() error { return m.SaveAdapter(tmp, parts.adapterBase) }
		}
		if err := save(); err != nil {
			return fmt.Errorf("checkpoint model: %w", err)
		}
		for _, f := range tokFiles {
			if err := fsutil.WriteFileSync(filepath.Join(tmp, f.name), f.data); err != nil {
				return fmt.Errorf("checkpoint tokenizer: %w", err)
			}
		}
		js, _ := json.MarshalIndent(state, "", "  ")
		if err := fsutil.WriteFileSync(filepath.Join(tmp, stateFile), append(js, '\n')); err != nil {
			return err
		}
		if parts.config != nil {
			if err := fsutil.WriteFileSync(filepath.Join(tmp, checkpointConfigFile), parts.config); err != nil {
				return err
			}
		}
		for _, save := range parts.extra {
			if err := save(tmp); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
		if b, err := os.ReadFile(filepath.Join(runDir, metricsFile)); err == nil {
			if err := fsutil.WriteFileSync(filepath.Join(tmp, metricsFile), b); err != nil {
				return err
			}
		}
		return nil
	}()
	if _, aerr := agree(c, err, ""); aerr != nil {
		return "", diagnoseSave(root, final, err, aerr)
	}
	// 3. rank 0 seals it: the manifest, written last, then the rename.
	err = func() error {
		if !rank0 {
			return nil
		}
		return sealCheckpoint(root, tmp, final, state.Step, keep)
	}()
	if _, aerr := agree(c, err, ""); aerr != nil {
		return "", diagnoseSave(root, final, err, aerr)
	}
	return final, nil
}

// diagnoseSave is a failed save's error: a NoSpaceError when this rank or
// another ran out of space (local: this rank's own error), else agreed.
func diagnoseSave(root, final string, local, agreed error) error {
	if isNoSpace(local) {
		return noSpace(root, final, local)
	}
	if strings.Contains(agreed.Error(), syscall.ENOSPC.Error()) || strings.Contains(agreed.Error(), syscall.EDQUOT.Error()) {
		return noSpace(root, final, agreed)
	}
	return agreed
}

// sealCheckpoint writes tmp's manifest, renames it to final and prunes.
func sealCheckpoint(root, tmp, final string, step, keep int) error {
	man := manifest{Step: step, Files: map[string]int64{}}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	var names []string
	var total int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return err
		}
		man.Files[e.Name()] = info.Size()
		names = append(names, e.Name())
		total += info.Size()
	}
	// Digests: those the writers computed as they wrote (safetensors
	// files this process wrote), the rest read back.
	start := time.Now()
	man.Digests = map[string]string{}
	var rest []string
	for _, name := range names {
		if sum, ok := fsutil.TakeDigest(filepath.Join(tmp, name)); ok {
			man.Digests[name] = sum
		} else {
			rest = append(rest, name)
		}
	}
	readBack, err := digestFiles(tmp, rest)
	if err != nil {
		return fmt.Errorf("checkpoint digests: %w", err)
	}
	var readBytes int64
	for name, sum := range readBack {
		man.Digests[name] = sum
		readBytes += man.Files[name]
	}
	log.Debug().Int("files", len(names)).Float64("gb", float64(total)/1e9).Int("read_back", len(rest)).
		Float64("read_back_gb", float64(readBytes)/1e9).Float64("seconds", time.Since(start).Seconds()).Msg("checkpoint digests (SHA-256)")
	js, _ := json.MarshalIndent(man, "", "  ")
	if err := fsutil.WriteFileSync(filepath.Join(tmp, manifestFile), append(js, '\n')); err != nil {
		return err
	}
	if err := fsutil.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.RemoveAll(final); err != nil { // a stale copy of this step
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	if err := fsutil.SyncDir(root); err != nil {
		return err
	}
	pruneCheckpoints(root, keep)
	return nil
}

// agree all-gathers each rank's outcome of a phase and its value: an
// error on any rank is an error on every rank, naming the rank.
func agree(c dist.Comm, err error, value string) ([]string, error) {
	type outcome struct {
		Err   string `json:"err,omitempty"`
		Value string `json:"value"`
	}
	o := outcome{Value: value}
	if err != nil {
		o.Err = err.Error()
	}
	all, gerr := dist.GatherJSON(c, o)
	if gerr != nil {
		if err != nil {
			return nil, fmt.Errorf("%w (and telling the other ranks failed: %v)", err, gerr)
		}
		return nil, gerr
	}
	vals := make([]string, len(all))
	for r, x := range all {
		if x.Err != "" {
			if c.Size() == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("rank %d: %s", r, x.Err)
		}
		vals[r] = x.Value
	}
	return vals, nil
}

// completeCheckpoints lists the complete checkpoints under root, oldest
// first: those whose manifest exists and whose files have the listed sizes.
func completeCheckpoints(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "step-") {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if checkManifest(dir) == nil {
			out = append(out, dir)
		}
	}
	sort.Strings(out) // step-%06d sorts by step
	return out
}

// checkManifest is the cheap check (names and sizes) that decides which
// checkpoints are complete; VerifyCheckpoint adds the digests.
func checkManifest(dir string) error {
	man, err := readManifest(dir)
	if err != nil {
		return err
	}
	return checkManifestFiles(dir, man)
}

// checkManifestFiles checks dir against its read manifest: the required
// files listed, and every listed file there with its size.
func checkManifestFiles(dir string, man manifest) error {
	_, lora := man.Files[model.AdapterConfigFile]
	required := requiredFiles
	if lora {
		required = loraRequiredFiles
	}
	for _, name := range required {
		if _, ok := man.Files[name]; !ok {
			return fmt.Errorf("%s: no %s", dir, name)
		}
	}
	if err := optim.CheckFiles(dir, man.Files); err != nil {
		return err
	}
	_, single := man.Files["model.safetensors"]
	_, sharded := man.Files["model.safetensors.index.json"]
	if !single && !sharded && !lora {
		return fmt.Errorf("%s: no model.safetensors (or model.safetensors.index.json)", dir)
	}
	for name, size := range man.Files {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if info.Size() != size {
			return fmt.Errorf("%s: %d bytes, the manifest says %d", filepath.Join(dir, name), info.Size(), size)
		}
	}
	return nil
}

// pruneCheckpoints removes all but the newest keep complete checkpoints and
// any leftover temporary directories.
func pruneCheckpoints(root string, keep int) {
	done := completeCheckpoints(root)
	for i := 0; i+keep < len(done); i++ {
		if err := os.RemoveAll(done[i]); err != nil {
			log.Warn().Err(err).Str("dir", done[i]).Msg("cannot remove old checkpoint")
		}
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}

// ResolveResume turns --resume into a verified checkpoint directory: ""
// (start fresh), "auto" (the newest complete checkpoint of the run that
// passes verification — one that fails is set aside and the previous one
// taken; fresh if there is none) or a path, which must be a complete
// checkpoint that passes verification. It reads every file of the chosen
// checkpoint (VerifyCheckpoint) and may move checkpoints: one process of a
// run calls it (rank 0).
func ResolveResume(runDir, resume string) (string, error) {
	switch resume {
	case "":
		return "", nil
	case "auto":
		pruneTemps(filepath.Join(runDir, checkpointsDir))
		return verifiedNewest(runDir)
	}
	v, err := VerifyCheckpoint(resume)
	if err != nil {
		return "", fmt.Errorf("--resume %s: %w", resume, err)
	}
	logVerified(v)
	return resume, nil
}

// CompleteCheckpoints lists the run directory's complete checkpoints
// (manifest and sizes; not their digests), oldest first.
func CompleteCheckpoints(runDir string) []string {
	return completeCheckpoints(filepath.Join(runDir, checkpointsDir))
}

// NewestCheckpoint is the run directory's newest complete checkpoint, or
// "" (it changes nothing on disk).
func NewestCheckpoint(runDir string) string {
	done := completeCheckpoints(filepath.Join(runDir, checkpointsDir))
	if len(done) == 0 {
		return ""
	}
	return done[len(done)-1]
}

func pruneTemps(root string) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			log.Warn().Str("dir", filepath.Join(root, e.Name())).Msg("removing an incomplete checkpoint (interrupted while saving)")
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}

// readState reads a checkpoint's trainer state.
func readState(ckpt string) (TrainerState, error) {
	var st TrainerState
	raw, err := os.ReadFile(filepath.Join(ckpt, stateFile))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("%s: %w", filepath.Join(ckpt, stateFile), err)
	}
	return st, nil
}

// restoreMetrics puts a checkpoint's metrics back as the run's metrics
// file, so the run continues the same series (rank 0: prepareRunDir).
func restoreMetrics(ckpt, runDir string) error {
	b, err := os.ReadFile(filepath.Join(ckpt, metricsFile))
	if errors.Is(err, fs.ErrNotExist) {
		b, err = nil, nil
	}
	if err != nil {
		return err
	}
	return fsutil.WriteFileSync(filepath.Join(runDir, metricsFile), b)
}
