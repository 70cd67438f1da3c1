package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench generate's JSON, which scripts/gpu/validate.sh collects: at a tiny
// shape on the CPU, with a stand-in for transformers' script that reports a
// known speed, lanpo's object comes first (hf_pending, no baseline yet: a
// baseline that times out cannot take it along), then the whole object with
// every field there and the ratios from the measured times; a python that
// cannot run the baseline leaves hf_error instead.
func TestBenchGenerateJSON(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\n# args: script MODEL_DIR IDS_JSON DEVICE DTYPE THREADS SAMPLES NEW\n" +
		"test -f \"$2/config.json\" && test -f \"$3\" || exit 3\n" +
		"echo '{\"tokens_per_s\": 10, \"ms\": 100, \"batches\": 1, \"device\": \"'$4'\", \"dtype\": \"'$5'\"}'\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"bench", "generate", "--layers", "1", "--prompts", "2", "--samples", "3", "--prompt-len", "5",
		"--new-tokens", "4", "--timing-tokens", "3", "--nocache-steps", "0", "--count-steps", "2", "--cuda-graphs", "--json"}
	out, err := runApp(t, append(args, "--hf-python", fake)...)
	if err != nil {
		t.Fatal(err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want lanpo's object, then the whole one; got %d line(s):\n%s", len(lines), out)
	}
	var first, r map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	if first["hf_pending"] != true || first["hf"] != nil || first["lanpo_tokens_per_s"] == nil {
		t.Errorf("the first object should hold lanpo's figures and say the baseline is pending: %s", lines[0])
	}
	if err := json.Unmarshal([]byte(lines[1]), &r); err != nil {
		t.Fatalf("%v: %s", err, lines[1])
	}
	if r["hf_pending"] != nil || r["lanpo_tokens_per_s"] != first["lanpo_tokens_per_s"] {
		t.Errorf("the whole object should repeat lanpo's figures and not be pending: %s", lines[1])
	}
	num := func(k string) float64 {
		v, ok := r[k].(float64)
		if !ok {
			t.Errorf("%s missing or not a number: %v", k, r[k])
		}
		return v
	}
	if num("rows") != 6 || num("new_tokens") != 4 || num("lanpo_slots") != 8 || r["device"] != "cpu" || r["dtype"] != "float32" {
		t.Errorf("settings: %s", out)
	}
	tps, ms := num("lanpo_tokens_per_s"), num("lanpo_ms")
	if tps <= 0 || math.Abs(tps-6*4/(ms/1000)) > 1e-6*tps {
		t.Errorf("tokens/s %v from %v ms", tps, ms)
	}
	if got := num("lanpo_over_hf"); math.Abs(got-tps/10) > 1e-9*tps {
		t.Errorf("lanpo_over_hf %v, want %v", got, tps/10)
	}
	if num("timed_steps") != 2 || num("step_wall_ms") <= 0 || num("step_forward_host_ms") <= 0 || num("step_forward_gpu_ms") != 0 {
		t.Errorf("step timing: %s", out)
	}
	if h := num("host_share"); h <= 0 || h > 1.001 {
		t.Errorf("host_share %v", h)
	}
	// CUDA graphs on the CPU: the bookkeeping of the 3 decode steps (one
	// shape: a warm-up, a capture, a replay), and a
	// speed against the eager run.
	if num("graphs_tokens_per_s") <= 0 || math.Abs(num("graphs_over_eager")-num("graphs_tokens_per_s")/tps) > 1e-9 ||
		num("graph_warmups") != 1 || num("graph_captures") != 1 || num("graph_replays") != 1 || num("sync_every") != 16 {
		t.Errorf("graphs: %s", out)
	}
	counts, _ := r["counts"].(map[string]any)
	layer, _ := counts["layer_kernels"].(map[string]any)
	if counts["steps"] != 2.0 || counts["kernels_per_layer"].(float64) < 10 || layer["lanpo::rope_cache"] != 2.0 {
		t.Errorf("counts: %v", r["counts"])
	}
	hf, _ := r["hf"].(map[string]any)
	if hf["device"] != "cpu" || hf["dtype"] != "float32" {
		t.Errorf("the baseline was not asked for the same device and dtype: %v", r["hf"])
	}
	out, err = runApp(t, append(args, "--hf-python", filepath.Join(t.TempDir(), "no-python"))...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"hf_error":`) || strings.Contains(out, `"lanpo_over_hf"`) {
		t.Errorf("a missing baseline: %s", out)
	}
}

// bench generate --long-tail: consecutive batches against slots on the
// same drawn lengths, in one JSON object; the slots take fewer decode steps
// and less modeled GPU time, the busy slot-steps are the lengths' sum in
// both; lengths from a file (numbers, or lanpo eval's samples with
// "tokens"); a bad line is named.
func TestBenchGenerateLongTail(t *testing.T) {
	args := []string{"bench", "generate", "--long-tail", "--prompts", "6", "--samples", "4", "--slots", "4",
		"--new-tokens", "96", "--prompt-len", "5", "--sync-every", "4", "--json"}
	out, err := runApp(t, append(args, "--lengths", "lognormal:12:0.9")...)
	if err != nil {
		t.Fatal(err, out)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	mode := func(name string) map[string]any {
		m, ok := r[name].(map[string]any)
		if !ok {
			t.Fatalf("%s missing: %s", name, out)
		}
		return m
	}
	b, s := mode("consecutive_batches"), mode("slots_engine")
	if r["rows"] != 24.0 || r["slots"] != 4.0 || r["target_met"] != true {
		t.Errorf("settings or target: %s", out)
	}
	if s["decode_steps"].(float64) >= b["decode_steps"].(float64) || s["modeled_gpu_s"].(float64) >= b["modeled_gpu_s"].(float64) {
		t.Errorf("slots no better than batches: %s", out)
	}
	// Busy slot-steps are the tokens decode steps made: all of them in
	// slots, all but each sample's first (the prefill's) in one batch.
	for _, c := range []struct {
		m     map[string]any
		first float64
	}{{b, 24}, {s, 0}} {
		if busy := c.m["occupancy"].(float64) * 4 * c.m["decode_steps"].(float64); math.Abs(busy+c.first-r["sum_lengths"].(float64)) > 1e-6*busy {
			t.Errorf("busy slot-steps %v, Σ lengths %v", busy, r["sum_lengths"])
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "samples.jsonl")
	os.WriteFile(file, []byte("{\"tokens\": 30}\n\n7\n{\"tokens\": 3}\n"), 0o644)
	out, err = runApp(t, append(args, "--lengths", file)...)
	if err != nil {
		t.Fatal(err, out)
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil || r["sum_lengths"] != 8*(30+7+3.0) {
		t.Errorf("lengths from a file: %v %s", err, out)
	}
	os.WriteFile(file, []byte("5\n{\"length\": 3}\n"), 0o644)
	if out, err = runApp(t, append(args, "--lengths", file)...); err == nil || !strings.Contains(err.Error(), "samples.jsonl:2") {
		t.Errorf("a line without tokens: %v %s", err, out)
	}
}
