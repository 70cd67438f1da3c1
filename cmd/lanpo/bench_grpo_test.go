package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// bench grpo-step's JSON at a tiny shape on the CPU: the phases are the
// trainer's, the shares add up to one, and peak and plan are both there.
func TestBenchGRPOStepJSON(t *testing.T) {
	shape := filepath.Join(t.TempDir(), "config.json")
	cfg := `{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
	"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
	"rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": true, "vocab_size": 512, "hidden_act": "silu"}`
	if err := os.WriteFile(shape, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runApp(t, "bench", "grpo-step", "--shape", shape, "--prompts", "2", "--samples", "2", "--new-tokens", "6", "--steps", "2", "--json")
	if err != nil {
		t.Fatal(err, out)
	}
	var r grpoStepBench
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Steps != 2 || r.Rows != 4 || r.Device != "cpu" || r.Params <= 0 || r.StepS <= 0 || r.FirstStepS <= 0 {
		t.Errorf("%+v", r)
	}
	var share float64
	for _, k := range []string{"rollout", "update"} {
		if r.Phases[k] <= 0 {
			t.Errorf("phase %s: %v", k, r.Phases)
		}
	}
	for _, s := range r.PhaseShare {
		share += s
	}
	if math.Abs(share-1) > 1e-9 {
		t.Errorf("phase shares add up to %v", share)
	}
	if r.PlanPeakMB <= 0 || r.PeakSource == "" || math.Abs(r.PeakOverPlan-r.PeakMB/r.PlanPeakMB) > 1e-9 {
		t.Errorf("peak %v MB (%s), plan %v MB, ratio %v", r.PeakMB, r.PeakSource, r.PlanPeakMB, r.PeakOverPlan)
	}
}
