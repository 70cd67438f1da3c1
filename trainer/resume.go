package trainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"gopkg.in/yaml.v3"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
)

// Resuming without losing work: every checkpoint keeps the resolved config
// it was trained with (checkpointConfigFile); a resume compares the new
// config with it, refuses changes that break exact continuation unless
// allowed key by key, and records every change with its step in the run
// directory (changesFile). A resume from an older checkpoint than the run
// directory's newest refuses to overwrite the newer ones unless told to
// set them aside.

const (
	checkpointConfigFile = "config.yaml"
	changesFile          = "config_changes.jsonl"
	setAsideDir          = "set-aside"
)

// ConfigError is an error in what the user asked for — a refused resume,
// a config that cannot run here — rather than in running it: lanpo exits
// with status 2 for it, as for a bad flag.
type ConfigError struct{ Err error }

func (e ConfigError) Error() string { return e.Err.Error() }
func (e ConfigError) Unwrap() error { return e.Err }

// harmlessKeys change nothing a resumed run computes up to the step it
// stops at (total_steps does change a decaying LR schedule's later steps:
// extending a run is what it is for), or only how it is watched, saved
// and placed: a key equal to one of these or under one (prefix + ".").
var harmlessKeys = []string{"total_steps", "stop_after_steps", "max_bad_steps", "run_dir", "device",
	"checkpoint", "log", "eval", "dist", "train.activation_checkpointing", "rollout.cuda_graphs"}

// ConfigChange is one key that differs from the checkpoint's config.
type ConfigChange struct {
	Step       int    `json:"step"` // the checkpoint's step: the change applies from the next step
	Key        string `json:"key"`
	From       string `json:"from"`
	To         string `json:"to"`
	How        string `json:"how"` // harmless, or allowed by --allow-change
	Checkpoint string `json:"checkpoint"`
	Time       string `json:"time"`
}

// resumeCheck compares cfg with the checkpoint's recorded config and finds
// the run directory's checkpoints a resume from ckpt would overwrite. It
// reads only; prepareRunDir acts on the result.
type resumeCheck struct {
	changes []ConfigChange
	newer   []string // complete checkpoints of run_dir at or after ckpt's step (not ckpt itself)
}

func checkResume(cfg Config, ckpt string, step int, opts RunOptions) (resumeCheck, error) {
	var rc resumeCheck
	switch {
	case cfg.TotalSteps < step:
		return rc, ConfigError{fmt.Errorf("--resume %s: the checkpoint is at step %d, past total_steps %d (raise total_steps to train on)", ckpt, step, cfg.TotalSteps)}
	case cfg.TotalSteps == step:
		log.Warn().Str("checkpoint", ckpt).Int("total_steps", step).Msg("the run is complete: the checkpoint is at total_steps, nothing to train (raise total_steps to train on)")
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		if r, err := filepath.EvalSymlinks(a); err == nil {
			return r
		}
		return a
	}
	for _, dir := range completeCheckpoints(filepath.Join(cfg.RunDir, checkpointsDir)) {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(dir), "step-%d", &n); err == nil && n >= step && abs(dir) != abs(ckpt) {
			rc.newer = append(rc.newer, dir)
		}
	}
	if len(rc.newer) > 0 && !opts.SetAsideNewer {
		return rc, ConfigError{fmt.Errorf("--resume %s (step %d) would overwrite run_dir's newer checkpoints %s and cut its metrics back: "+
			"resume the newest with --resume auto, choose another run_dir, or pass --set-aside-newer to move them to %s first",
			ckpt, step, strings.Join(rc.newer, ", "), filepath.Join(cfg.RunDir, setAsideDir))}
	}
	raw, err := os.ReadFile(filepath.Join(ckpt, checkpointConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		log.Warn().Str("checkpoint", ckpt).Msg("the checkpoint records no config (written by an older lanpo): changes to the config cannot be checked")
		return rc, nil
	}
	if err != nil {
		return rc, err
	}
	before, err := flattenYAML(resolvedYAML(raw))
	if err != nil {
		return rc, fmt.Errorf("%s: %w", filepath.Join(ckpt, checkpointConfigFile), err)
	}
	after, err := flattenYAML([]byte(cfg.YAML()))
	if err != nil {
		return rc, err
	}
	var refused []string
	now := time.Now().UTC().Format(time.RFC3339)
	for _, key := range slices.Sorted(maps.Keys(before)) {
		to, ok := after[key]
		if !ok || to == before[key] {
			continue // a key this lanpo no longer has, or unchanged
		}
		c := ConfigChange{Step: step, Key: key, From: before[key], To: to, Checkpoint: ckpt, Time: now}
		switch {
		case under(key, harmlessKeys):
			c.How = "harmless"
		case under(key, opts.AllowChanges):
			c.How = "allowed (--allow-change)"
		default:
			refused = append(refused, fmt.Sprintf("%s: %s → %s", key, c.From, c.To))
			continue
		}
		rc.changes = append(rc.changes, c)
	}
	if len(refused) > 0 {
		return rc, ConfigError{fmt.Errorf("--resume %s: the config differs from the one the checkpoint was trained with (%s) in keys that change what the run computes:\n  %s\n"+
			"put them back, or allow each with --allow-change KEY (a section name allows all its keys); every change is recorded in %s",
			ckpt, filepath.Join(ckpt, checkpointConfigFile), strings.Join(refused, "\n  "), filepath.Join(cfg.RunDir, changesFile))}
	}
	return rc, nil
}

// apply sets the newer checkpoints aside (with the run's metrics) and
// records the changes; rank 0 alone (prepareRunDir).
func (rc resumeCheck) apply(runDir string) error {
	if len(rc.newer) > 0 {
		dest := filepath.Join(runDir, setAsideDir, time.Now().UTC().Format("20060102T150405Z"), checkpointsDir)
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return err
		}
		for _, dir := range rc.newer {
			if err := os.Rename(dir, filepath.Join(dest, filepath.Base(dir))); err != nil {
				return fmt.Errorf("setting %s aside: %w", dir, err)
			}
		}
		if b, err := os.ReadFile(filepath.Join(runDir, metricsFile)); err == nil {
			if err := fsutil.WriteFileSync(filepath.Join(filepath.Dir(dest), metricsFile), b); err != nil {
				return err
			}
		}
		log.Warn().Strs("checkpoints", rc.newer).Str("to", filepath.Dir(dest)).Msg("newer checkpoints and the metrics set aside (--set-aside-newer)")
	}
	if len(rc.changes) == 0 {
		return nil
	}
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	for _, c := range rc.changes {
		log.Info().Str("key", c.Key).Str("from", c.From).Str("to", c.To).Str("how", c.How).Int("after_step", c.Step).Msg("config changed on resume")
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	return fsutil.AppendFileSync(filepath.Join(runDir, changesFile), lines.Bytes())
}

// resolvedYAML is a checkpoint's recorded config resolved by today's
// rules (Config.Resolve), so that a default an older lanpo left unfilled
// (the lanpo section of a GRPO run's config) does not read as a change;
// the recorded text as it is where it no longer decodes.
func resolvedYAML(raw []byte) []byte {
	cfg := DefaultConfig()
	if err := decodeStrict(raw, &cfg); err != nil {
		return raw
	}
	if err := cfg.Resolve(); err != nil {
		return raw
	}
	return []byte(cfg.YAML())
}

// under reports whether key is one of keys or under one of them.
func under(key string, keys []string) bool {
	return slices.ContainsFunc(keys, func(k string) bool { return key == k || strings.HasPrefix(key, k+".") })
}

// flattenYAML maps a YAML document to dotted keys and each leaf's value
// as JSON.
func flattenYAML(b []byte) (map[string]string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, x := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), x)
			}
			return
		}
		s, _ := json.Marshal(v)
		out[prefix] = string(s)
	}
	walk("", doc)
	return out, nil
}
