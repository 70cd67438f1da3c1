package optim

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// The LoRA fixtures of scripts/ref/lora_peft.py (model/testdata/lora).
var (
	loraBase    = filepath.Join("..", "model", "testdata", "tiny", "qwen2-gqa2-tied")
	loraFixture = filepath.Join("..", "model", "testdata", "lora")
)

func readF32(t *testing.T, f *model.File, name string) []float64 {
	t.Helper()
	b, info, err := f.Bytes(name)
	if err != nil {
		t.Fatal(err)
	}
	if info.DType != "F32" {
		t.Fatalf("%s is %s", name, info.DType)
	}
	out := make([]float64, len(b)/4)
	for i := range out {
		u := uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
		out[i] = float64(math.Float32frombits(u))
	}
	return out
}

// loraStepped is the base with PEFT's "default" adapter after one lanpo
// AdamW step on PEFT's gradients (lr 1e-2, weight decay 0.01, as the
// script's torch.optim.AdamW), checked against the adapter torch's step
// gave.
func loraStepped(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.Load(loraBase, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.LoadAdapter(filepath.Join(loraFixture, "default")); err != nil {
		t.Fatal(err)
	}
	params := m.TrainableParams()
	o, err := NewAdamW(params, 0.9, 0.999, 1e-8, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	grads, err := model.OpenSafetensors(filepath.Join(loraFixture, "default", "grads.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer grads.Close()
	var s tensor.Scope
	defer s.Close()
	for _, p := range params {
		if err := csrc.EnsureGrad(p.Tensor); err != nil {
			t.Fatal(err)
		}
		g := readF32(t, grads, p.Name)
		s.Keep(p.Tensor.MustGrad(false)).Copy_(tensor.FromSlice(&s, g, p.Tensor.MustSize(), gotch.CPU))
	}
	if err := o.Update(1e-2); err != nil {
		t.Fatal(err)
	}
	after, err := model.OpenSafetensors(filepath.Join(loraFixture, "default", "after_step.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	for _, p := range params {
		want := readF32(t, after, p.Name)
		got := tensor.Float64s(p.Tensor)
		worst := 0.0
		for i := range want {
			worst = max(worst, math.Abs(got[i]-want[i]))
		}
		if worst > 1e-6 {
			t.Errorf("%s: after one AdamW step, %g from torch's", p.Name, worst)
		}
	}
	return m
}

// TestLoRAAdamWStepMatchesTorch: the adapters after one step equal torch's.
func TestLoRAAdamWStepMatchesTorch(t *testing.T) {
	lockThread(t)
	loraStepped(t)
}

// lanpoWritten is lanpo_written.json: PEFT scoring lanpo's adapter, and
// transformers scoring lanpo's merged export.
type lanpoWritten struct {
	IDs     [][]int64   `json:"ids"`
	Adapter [][]float64 `json:"peft_adapter_logprobs"`
	Merged  [][]float64 `json:"merged_logprobs"`
}

// scoreNext is log p(ids[b][t+1] | ids[b][≤t]) for every row, flattened.
func scoreNext(t *testing.T, m *model.Model, ids [][]int64) []float64 {
	t.Helper()
	var s tensor.Scope
	defer s.Close()
	var out []float64
	for _, row := range ids {
		n := int64(len(row))
		pos, tmask := make([]int64, n), make([]bool, n)
		targets := make([]int64, n)
		for i := range row {
			pos[i] = int64(i)
			if i+1 < len(row) {
				targets[i], tmask[i] = row[i+1], true
			}
		}
		shape := []int64{1, n}
		lp, _, err := m.TokenLogProbs(&s, tensor.FromSlice(&s, row, shape, gotch.CPU), tensor.FromSlice(&s, pos, shape, gotch.CPU), nil,
			tensor.FromSlice(&s, targets, shape, gotch.CPU), s.Keep(s.Keep(ts.MustOfSlice(tmask)).MustView(shape, false)), csrc.LogProbOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tensor.Float64s(lp)[:n-1]...)
	}
	return out
}

// TestLoRAWritten: the adapter lanpo writes (PEFT's format) loads in PEFT
// with lanpo's log-probs, and the model lanpo merges and saves loads in
// transformers with them: model/testdata/lora/lanpo_written.json, written
// by scripts/ref/lora_peft.py check from what this test writes under
// $LANPO_LORA_OUT.
func TestLoRAWritten(t *testing.T) {
	lockThread(t)
	m := loraStepped(t)
	out := os.Getenv("LANPO_LORA_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := m.SaveAdapter(filepath.Join(out, "adapter"), "model/testdata/tiny/qwen2-gqa2-tied"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(loraFixture, "lanpo_written.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref lanpoWritten
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	flat := func(x [][]float64) []float64 {
		var o []float64
		for _, r := range x {
			o = append(o, r...)
		}
		return o
	}
	check := func(what string, got, want []float64) {
		if len(got) != len(want) {
			t.Errorf("%s: %d log-probs, the reference has %d (rerun scripts/ref/lora_peft.py check)", what, len(got), len(want))
			return
		}
		worst := 0.0
		for i := range want {
			worst = max(worst, math.Abs(got[i]-want[i]))
		}
		if worst > 2e-5 {
			t.Errorf("%s: %g from the reference (if lanpo's adapter changed on purpose, rerun scripts/ref/lora_peft.py check)", what, worst)
		}
	}
	back, err := model.Load(loraBase, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if err := back.LoadAdapter(filepath.Join(out, "adapter")); err != nil {
		t.Fatal(err)
	}
	check("PEFT with lanpo's adapter", scoreNext(t, back, ref.IDs), flat(ref.Adapter))
	if err := m.MergeLoRA(); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(filepath.Join(out, "merged")); err != nil {
		t.Fatal(err)
	}
	merged, err := model.Load(filepath.Join(out, "merged"), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer merged.Close()
	check("transformers with lanpo's merged model", scoreNext(t, merged, ref.IDs), flat(ref.Merged))
}
