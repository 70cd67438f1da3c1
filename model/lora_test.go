package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// loraRef is scripts/ref/lora_peft.py's reference.json.
type loraRef struct {
	Scale    float64     `json:"scale"`
	IDs      [][]int64   `json:"ids"`
	Weights  [][]float64 `json:"weights"`
	Logprobs [][]float64 `json:"logprobs"`
}

// loraCase loads the tiny base model with PEFT's adapter testdata/lora/name
// (B ≠ 0) and its reference.
func loraCase(t *testing.T, name string) (*Model, loraRef) {
	t.Helper()
	m := tinyModel(t, "qwen2-gqa2-tied")
	dir := filepath.Join("testdata", "lora", name)
	if err := m.LoadAdapter(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r loraRef
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return m, r
}

// nextLogprobs scores ids [B, T]: log p(ids[b][t+1] | ids[b][≤t]), [B, T−1]
// flattened, as a tensor in s (differentiable when grad is on).
func nextLogprobs(t *testing.T, s *tensor.Scope, m *Model, ids [][]int64) *ts.Tensor {
	t.Helper()
	b, n := len(ids), len(ids[0])
	var flat, pos, targets []int64
	var tmask []bool
	for _, row := range ids {
		for i := range row {
			flat, pos = append(flat, row[i]), append(pos, int64(i))
			next := int64(0)
			if i+1 < n {
				next = row[i+1]
			}
			targets, tmask = append(targets, next), append(tmask, i+1 < n)
		}
	}
	shape := []int64{int64(b), int64(n)}
	tm := s.Keep(s.Keep(ts.MustOfSlice(tmask)).MustView(shape, false))
	lp, _, err := m.TokenLogProbs(s, tensor.FromSlice(s, flat, shape, gotch.CPU), tensor.FromSlice(s, pos, shape, gotch.CPU), nil,
		tensor.FromSlice(s, targets, shape, gotch.CPU), tm, csrc.LogProbOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Keep(lp.MustNarrow(1, 0, int64(n-1), false))
}

func flat2(x [][]float64) []float64 {
	var out []float64
	for _, r := range x {
		out = append(out, r...)
	}
	return out
}

// relDiff is max |a − b| / max |b|.
func relDiff(a, b []float64) float64 {
	return maxDiff(a, b, nil) / max(maxAbs(b), 1e-30)
}

// TestLoRAMatchesPEFT: with PEFT's adapters (B ≠ 0, all seven projections
// at alpha/r, and three with rsLoRA's alpha/√r) lanpo's log-probs and the
// gradients of every lora_A and lora_B for a fixed loss equal PEFT's.
func TestLoRAMatchesPEFT(t *testing.T) {
	lockThread(t)
	for _, name := range []string{"default", "rslora"} {
		t.Run(name, func(t *testing.T) {
			m, ref := loraCase(t, name)
			if got := m.LoRA().Scale(); got != ref.Scale {
				t.Errorf("scale %g, PEFT's %g", got, ref.Scale)
			}
			var s tensor.Scope
			defer s.Close()
			for _, p := range m.LoRA().Params() {
				p.Tensor.MustRequiresGrad_(true)
			}
			lp := nextLogprobs(t, &s, m, ref.IDs)
			got := tensor.Float64s(lp)
			if d := maxDiff(got, flat2(ref.Logprobs), nil); d > 2e-5 {
				t.Errorf("log-probs differ from PEFT's by %g", d)
			}
			// The adapter matters: without it the log-probs move by far
			// more than the tolerance (B ≠ 0).
			restore := m.UseAdapters(AdaptersOff)
			base := tensor.Float64s(nextLogprobs(t, &s, m, ref.IDs))
			restore()
			if d := maxDiff(base, got, nil); d < 1e-2 {
				t.Errorf("the adapter moves log-probs by only %g", d)
			}
			w := tensor.FromSlice(&s, flat2(ref.Weights), []int64{int64(len(ref.Weights)), int64(len(ref.Weights[0]))}, gotch.CPU)
			loss := s.Keep(s.Keep(s.Keep(w.MustTotype(gotch.Float, false)).MustMul(lp, false)).MustSum(gotch.Float, false))
			if err := Backward(loss, nil, nil); err != nil {
				t.Fatal(err)
			}
			grads, err := OpenSafetensors(filepath.Join("testdata", "lora", name, "grads.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer grads.Close()
			if len(grads.Tensors()) != len(m.LoRA().Params()) {
				t.Fatalf("%d gradients in the fixture, %d adapter tensors", len(grads.Tensors()), len(m.LoRA().Params()))
			}
			for _, p := range m.LoRA().Params() {
				b, info, err := grads.Bytes(p.Name)
				if err != nil {
					t.Fatal(err)
				}
				want := decode(t, info.DType, b)
				g := tensor.Float64s(s.Keep(p.Tensor.MustGrad(false)))
				if d := relDiff(g, want); d > 1e-4 {
					t.Errorf("%s: gradient differs from PEFT's by %.2g of its largest entry", p.Name, d)
				}
			}
			for _, p := range m.Params() {
				if s.Keep(p.Tensor.MustGrad(false)).MustDefined() {
					t.Errorf("%s: the frozen base took a gradient", p.Name)
				}
			}
		})
	}
}

// TestLoRASamplerEqualsTrainer: the log-probs the sampler records with
// adapters (unmerged, through the fused decode step) equal the trainer's.
func TestLoRASamplerEqualsTrainer(t *testing.T) {
	lockThread(t)
	m, _ := loraCase(t, "default")
	for _, p := range []SamplingParams{{Temperature: 1, MaxNewTokens: 8, Seed: 1}, {Temperature: 0.7, TopP: 0.9, MaxNewTokens: 8, Seed: 2}} {
		out, err := m.Generate(genPrompts, p, GenerateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if worst := logprobGap(t, m, genPrompts, out, p.Temperature); worst > 1e-5 {
			t.Errorf("T=%g: with LoRA the recorded log-probs differ from the trainer's by %g", p.Temperature, worst)
		}
	}
}

// TestLoRAModes: adapters off is the base model bit for bit; the initial
// adapter, kept, is what AdaptersInitial computes after the adapter moved.
func TestLoRAModes(t *testing.T) {
	lockThread(t)
	var s tensor.Scope
	defer s.Close()
	m, ref := loraCase(t, "default")
	base := tinyModel(t, "qwen2-gqa2-tied")
	want := tensor.Float64s(nextLogprobs(t, &s, base, ref.IDs))
	restore := m.UseAdapters(AdaptersOff)
	off := tensor.Float64s(nextLogprobs(t, &s, m, ref.IDs))
	restore()
	if d := maxDiff(off, want, nil); d != 0 {
		t.Errorf("adapters off differ from the base model by %g", d)
	}
	initial := tensor.Float64s(nextLogprobs(t, &s, m, ref.IDs))
	if err := m.KeepInitial(); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.LoRA().Params() {
		p.Tensor.MustMulScalar_(s.Float(1.5))
	}
	moved := tensor.Float64s(nextLogprobs(t, &s, m, ref.IDs))
	restore = m.UseAdapters(AdaptersInitial)
	again := tensor.Float64s(nextLogprobs(t, &s, m, ref.IDs))
	restore()
	if d := maxDiff(again, initial, nil); d != 0 {
		t.Errorf("the initial adapter's log-probs differ by %g", d)
	}
	if maxDiff(moved, initial, nil) < 1e-3 {
		t.Error("changing the adapter did not change the policy")
	}
}

// TestLoRAMerge: merged weights give the unmerged model's log-probs; the
// merged model has no adapters and saves as a plain one.
func TestLoRAMerge(t *testing.T) {
	lockThread(t)
	var s tensor.Scope
	defer s.Close()
	m, ref := loraCase(t, "rslora")
	want := tensor.Float64s(nextLogprobs(t, &s, m, ref.IDs))
	if err := m.MergeLoRA(); err != nil {
		t.Fatal(err)
	}
	if m.LoRA() != nil || m.Layers[0].Attn.QLoRA != nil || m.Layers[1].MLP.DownLoRA != nil {
		t.Fatal("adapters left after the merge")
	}
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if d := maxDiff(tensor.Float64s(nextLogprobs(t, &s, back, ref.IDs)), want, nil); d > 2e-5 {
		t.Errorf("merged log-probs differ from the adapters' by %g", d)
	}
}

// TestLoRAFiles: an adapter lanpo saves loads back bit for bit; a fresh
// default-initialized adapter is the base model (B = 0) with A in PEFT's
// Kaiming bound, the same for the same seed; bad adapters are refused by
// name.
func TestLoRAFiles(t *testing.T) {
	lockThread(t)
	var s tensor.Scope
	defer s.Close()
	m, _ := loraCase(t, "rslora")
	dir := t.TempDir()
	if err := m.SaveAdapter(dir, "my/base"); err != nil {
		t.Fatal(err)
	}
	c, base, err := ReadAdapterConfig(dir)
	if err != nil || base != "my/base" || c.R != 4 || c.Alpha != 8 || !c.UseRSLoRA || strings.Join(c.TargetModules, ",") != "q_proj,v_proj,down_proj" {
		t.Fatalf("read back %+v, %q, %v", c, base, err)
	}
	back := tinyModel(t, "qwen2-gqa2-tied")
	if err := back.LoadAdapter(dir); err != nil {
		t.Fatal(err)
	}
	for i, p := range m.LoRA().Params() {
		q := back.LoRA().Params()[i]
		if p.Name != q.Name || maxDiff(tensor.Float64s(p.Tensor), tensor.Float64s(q.Tensor), nil) != 0 {
			t.Errorf("%s came back as %s, or changed", p.Name, q.Name)
		}
	}

	fresh := func(seed int64) *Model {
		f := tinyModel(t, "qwen2-gqa2-tied")
		c := LoRAConfig{R: 3}
		if err := c.Resolve(); err != nil {
			t.Fatal(err)
		}
		if err := f.AddLoRA(c, seed); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := fresh(1), fresh(1)
	if len(a.LoRA().Params()) != 2*7*2 {
		t.Errorf("%d adapter tensors, want 28 (2 layers × 7 projections × A, B)", len(a.LoRA().Params()))
	}
	for i, p := range a.LoRA().Params() {
		v := tensor.Float64s(p.Tensor)
		if d := maxDiff(v, tensor.Float64s(b.LoRA().Params()[i].Tensor), nil); d != 0 {
			t.Errorf("%s: same seed, different init", p.Name)
		}
		switch {
		case strings.Contains(p.Name, "lora_B") && maxAbs(v) != 0:
			t.Errorf("%s: B not zero", p.Name)
		case strings.Contains(p.Name, "lora_A"):
			in := float64(p.Tensor.MustSize()[1])
			if maxAbs(v) > 1/math.Sqrt(in) || maxAbs(v) == 0 {
				t.Errorf("%s: |A| max %g outside (0, 1/√%g]", p.Name, maxAbs(v), in)
			}
		}
	}

	for _, tc := range []struct{ key, value, want string }{
		{"use_dora", "true", "use_dora"},
		{"target_modules", `["q_proj", "lm_head"]`, "lm_head"},
		{"peft_type", `"IA3"`, "peft_type"},
		{"r", "5", "mis-shaped"},
	} {
		bad := t.TempDir()
		raw, _ := os.ReadFile(filepath.Join("testdata", "lora", "default", AdapterConfigFile))
		var cfg map[string]any
		json.Unmarshal(raw, &cfg)
		var v any
		json.Unmarshal([]byte(tc.value), &v)
		cfg[tc.key] = v
		js, _ := json.Marshal(cfg)
		os.WriteFile(filepath.Join(bad, AdapterConfigFile), js, 0o644)
		w, _ := os.ReadFile(filepath.Join("testdata", "lora", "default", AdapterWeightsFile))
		os.WriteFile(filepath.Join(bad, AdapterWeightsFile), w, 0o644)
		err := tinyModel(t, "qwen2-gqa2-tied").LoadAdapter(bad)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %s: error %v, want one naming %s", tc.key, tc.value, err, tc.want)
		}
	}
}
