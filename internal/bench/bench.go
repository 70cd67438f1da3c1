// Package bench runs the Python baselines that lanpo's benchmarks compare
// against in the same run (transformers' forward and generate(), Hugging
// Face tokenizers, math-verify). The scripts live here, embedded in the
// binary, so `lanpo bench` works from any directory; they print one JSON
// line on stdout.
package bench

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/lanpo-rl/lanpo/model"
)

// The scripts, by file name.
const (
	HFForward  = "hf_forward_bench.py"  // MODEL_DIR IDS_JSON THREADS REPS
	HFGenerate = "hf_generate_bench.py" // MODEL_DIR IDS_JSON DEVICE DTYPE THREADS SAMPLES MAX_NEW
	HFTokenize = "hf_tokenize_bench.py" // TOKENIZER_DIR TEXTS_JSON ...
	MathVerify = "mv_bench.py"          // PAIRS_JSON
)

//go:embed *.py
var scripts embed.FS

// RunPython writes the named script into dir and runs it with python; it
// returns the script's stdout (one JSON line) or an error with the last
// line of its stderr.
func RunPython(python, name, dir string, args ...string) (json.RawMessage, error) {
	script, err := scripts.ReadFile(name)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, script, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(python, append([]string{path}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = msg[i+1:]
		}
		return nil, fmt.Errorf("%s: %v: %s", python, err, msg)
	}
	return json.RawMessage(bytes.TrimSpace(out)), nil
}

// RunHF saves the model and ids to a temporary directory and runs the named
// transformers script on them: script MODEL_DIR IDS_JSON args...
func RunHF(m *model.Model, ids [][]int64, python, name string, args ...string) (json.RawMessage, error) {
	dir, err := os.MkdirTemp("", "lanpo-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := m.Save(filepath.Join(dir, "model")); err != nil {
		return nil, err
	}
	idsJSON, _ := json.Marshal(ids)
	if err := os.WriteFile(filepath.Join(dir, "ids.json"), idsJSON, 0o644); err != nil {
		return nil, err
	}
	return RunPython(python, name, dir, append([]string{filepath.Join(dir, "model"), filepath.Join(dir, "ids.json")}, args...)...)
}

// RunHFConfig is RunHF for a shape only: it writes cfg as config.json (no
// weights; the script builds random weights of that shape) beside the ids.
func RunHFConfig(cfg *model.Config, ids [][]int64, python, name string, args ...string) (json.RawMessage, error) {
	dir, err := os.MkdirTemp("", "lanpo-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "model"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "model", "config.json"), raw, 0o644); err != nil {
		return nil, err
	}
	idsJSON, _ := json.Marshal(ids)
	if err := os.WriteFile(filepath.Join(dir, "ids.json"), idsJSON, 0o644); err != nil {
		return nil, err
	}
	return RunPython(python, name, dir, append([]string{filepath.Join(dir, "model"), filepath.Join(dir, "ids.json")}, args...)...)
}
