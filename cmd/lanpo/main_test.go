package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/csrc"
)

func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer = &out
	app.ErrWriter = &out
	err := app.Run(append([]string{"lanpo"}, args...))
	return out.String(), err
}

func TestEnvJSON(t *testing.T) {
	out, err := runApp(t, "--log-format", "json", "env", "--json", "--ops")
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("env --json printed %q: %v", out, err)
	}
	for _, k := range []string{"torch_version", "libtorch_dir", "cxx11_abi", "cuda_available", "cuda_devices", "gotch_version", "unavailable_ops_count"} {
		if _, ok := r[k]; !ok {
			t.Errorf("env --json lacks %q: %s", k, out)
		}
	}
	if r["gotch_version"] != "v0.9.1" {
		t.Errorf("gotch_version = %v", r["gotch_version"])
	}
}

func TestEnvText(t *testing.T) {
	out, err := runApp(t, "env")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"libtorch ", "C++ ABI ", "CUDA available ", "unavailable ops "} {
		if !strings.Contains(out, want) {
			t.Errorf("env output lacks %q:\n%s", want, out)
		}
	}
}

// env names the log-prob kernel and attention a run would use; asked
// about CUDA on a CPU build it says so and what it would fall back to, on a
// CUDA build it names the CUDA kernels and a device beyond the GPUs.
func TestEnvRunKernels(t *testing.T) {
	out, err := runApp(t, "env", "--device", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run on          cpu, float32", "log-prob      fused chunked ATen", "attention     reference"} {
		if !strings.Contains(out, want) {
			t.Errorf("env lacks %q:\n%s", want, out)
		}
	}
	out, err = runApp(t, "env", "--device", "cuda:1", "--dtype", "bfloat16")
	if err != nil {
		t.Fatal(err)
	}
	info, err := csrc.BuildInfo()
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"run on          cuda:1, bfloat16", "log-prob      fused chunked ATen", "cannot run:   device cuda:1, but this lanpo was built for CPU only"}
	if info.BuiltWithCUDA {
		wants = []string{"run on          cuda:1, bfloat16", "log-prob      fused CUDA kernels"}
		if info.CUDADevices < 2 {
			wants = append(wants, "cannot run:   device cuda:1")
		}
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("env --device cuda:1 lacks %q:\n%s", want, out)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"--log-level", "loud", "version"}, {"--log-format", "xml", "version"}} {
		_, err := runApp(t, args...)
		ue, ok := err.(usageError)
		if !ok || ue.ExitCode() != 2 {
			t.Errorf("%v: got %v, want a usage error (exit 2)", args, err)
		}
	}
}

func TestScoreMatchesTransformers(t *testing.T) {
	dir := filepath.Join("..", "..", "model", "testdata", "tiny", "qwen2-gqa2-tied")
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		InputIDs     [][]int64   `json:"input_ids"`
		Mask         [][]int64   `json:"attention_mask"`
		NextLogprobs [][]float64 `json:"next_token_logprobs"`
	}
	json.Unmarshal(b, &ref)
	// The reference batch is left-padded; score each row's real tokens.
	var in bytes.Buffer
	var want [][]float64
	for i, row := range ref.InputIDs {
		start := 0
		for start < len(row) && ref.Mask[i][start] == 0 {
			start++
		}
		line, _ := json.Marshal(map[string][]int64{"ids": row[start:]})
		in.Write(append(line, '\n'))
		want = append(want, ref.NextLogprobs[i][start:])
	}
	var out bytes.Buffer
	app := newApp()
	app.Reader, app.Writer = &in, &out
	if err := app.Run([]string{"lanpo", "score", "--model", dir, "--batch-size", "2"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d output lines for %d inputs:\n%s", len(lines), len(want), out.String())
	}
	for i, l := range lines {
		var got struct{ Logprobs []float64 }
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Logprobs) != len(want[i]) {
			t.Fatalf("line %d: %d log-probs, want %d", i+1, len(got.Logprobs), len(want[i]))
		}
		for j := range got.Logprobs {
			if d := math.Abs(got.Logprobs[j] - want[i][j]); d > 1e-5 {
				t.Errorf("line %d, token %d: %g vs transformers %g", i+1, j+1, got.Logprobs[j], want[i][j])
			}
		}
	}
}

func TestScoreNamesBadLines(t *testing.T) {
	dir := filepath.Join("..", "..", "model", "testdata", "tiny", "qwen2-gqa2-tied")
	for _, c := range []struct{ in, want string }{
		{"{\"ids\":[1,2]}\nnot json\n", "stdin line 2"},
		{"{\"ids\":[1,2]}\n{\"ids\":[]}\n", "stdin line 2: \"ids\": no token ids"},
		{"{\"ids\":[1,2000]}\n", "stdin line 1: \"ids\": token id 2000 at index 1 is outside the vocabulary [0, 97)"},
		{"{\"tokens\":[1]}\n", "stdin line 1: no \"ids\" field"},
	} {
		app := newApp()
		var out bytes.Buffer
		app.Reader, app.Writer = strings.NewReader(c.in), &out
		err := app.Run([]string{"lanpo", "score", "--model", dir})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("input %q: got %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func runGenerateCLI(t *testing.T, in string, args ...string) ([]map[string]any, error) {
	t.Helper()
	return runGenerateCLIIn(t, filepath.Join("..", "..", "model", "testdata", "tiny", "qwen3-gqa3"), in, args...)
}

func runGenerateCLIIn(t *testing.T, dir, in string, args ...string) ([]map[string]any, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Reader, app.Writer = strings.NewReader(in), &out
	err := app.Run(append([]string{"lanpo", "generate", "--model", dir}, args...))
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs, err
}

func TestGenerateCLI(t *testing.T) {
	in := "{\"prompt_ids\":[5,9,2]}\n{\"prompt_ids\":[4]}\n{\"prompt_ids\":[8,8,6,1]}\n"
	a, err := runGenerateCLI(t, in, "--samples", "2", "--max-new-tokens", "5", "--seed", "3", "--batch-size", "1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := runGenerateCLI(t, in, "--samples", "2", "--max-new-tokens", "5", "--seed", "3", "--batch-size", "3")
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 6 || len(b) != 6 {
		t.Fatalf("%d and %d lines, want 3 prompts × 2 samples", len(a), len(b))
	}
	for i := range a {
		if fmt.Sprint(a[i]["ids"]) != fmt.Sprint(b[i]["ids"]) || a[i]["prompt_index"] != b[i]["prompt_index"] || a[i]["sample_index"] != b[i]["sample_index"] {
			t.Errorf("line %d depends on --batch-size: %v vs %v", i+1, a[i], b[i])
		}
		if ids, lps := a[i]["ids"].([]any), a[i]["logprobs"].([]any); len(ids) != len(lps) || a[i]["finish_reason"] == nil {
			t.Errorf("line %d: %v", i+1, a[i])
		}
	}
	if int(a[4]["prompt_index"].(float64)) != 2 || int(a[5]["sample_index"].(float64)) != 1 {
		t.Errorf("output not in input order: %v", a)
	}
	for _, c := range []struct{ in, want string }{
		{"{\"prompt\":\"2+2=\"}\n", "stdin line 1: \"prompt\"/\"messages\" need a tokenizer"},
		{"{\"prompt_ids\":[1]}\n{\"prompt_ids\":[]}\n", "stdin line 2: \"prompt_ids\": empty prompt"},
		{"{\"prompt_ids\":[1]}\n{\"ids\":[1]}\n", "stdin line 2: no \"prompt\", \"messages\" or \"prompt_ids\" field"},
		{"{\"prompt_ids\":[1,2,3]}\n", "exceed the model's context (64)"},
	} {
		if _, err := runGenerateCLI(t, c.in, "--max-new-tokens", "62"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("input %q: got %v, want %q", c.in, err, c.want)
		}
	}
	if _, err := runGenerateCLI(t, "", "--min-p", "1"); err == nil || !strings.Contains(err.Error(), "min_p") {
		t.Errorf("--min-p 1: %v", err)
	}
}

// lanpo plan answers for a model directory's config and refuses stages it
// does not have.
func TestPlanCommand(t *testing.T) {
	out, err := runApp(t, "plan", "--model", "../../configs/models/qwen3-14b.json", "--zero", "1", "--kl-beta", "0.001")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"14.77 B parameters", "reference model", "does NOT fit in 80 GiB", "ZeRO-2 with activation checkpointing"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	out, err = runApp(t, "plan", "--model", "../../configs/models/qwen3-14b.json", "--zero", "2", "--activation-checkpointing", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Fits bool `json:"fits"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || !r.Fits {
		t.Errorf("ZeRO-2 + checkpointing at kl_beta 0: %s (%v)", out, err)
	}
	if _, err := runApp(t, "plan", "--model", "../../configs/models/qwen3-14b.json", "--zero", "3"); err == nil {
		t.Error("--zero 3 accepted")
	} else if ue, ok := err.(usageError); !ok || ue.ExitCode() != 2 {
		t.Errorf("--zero 3: %v", err)
	}
}
