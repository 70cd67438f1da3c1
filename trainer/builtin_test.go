package trainer

import (
	"testing"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/model"
)

// qwen2Params counts a tied Qwen2 model's parameters from its config:
// embeddings, per layer q/k/v (with biases), o, the MLP's three
// projections and two norms, and the final norm.
func qwen2Params(c *model.Config) int64 {
	h, kv := c.HiddenSize, c.HiddenSize/c.NumAttentionHeads*c.NumKeyValueHeads
	layer := h*h + h + 2*(h*kv+kv) + h*h + 3*h*c.IntermediateSize + 2*h
	return c.VocabSize*h + c.NumHiddenLayers*layer + h
}

// TestBuiltinSizes: the built-in models the demo offers are ≈ 10× and ≈
// 100× the small one. The count is checked against loaded models for
// small and medium; large (76 M, 300 MB) is counted from its config by
// the same formula.
func TestBuiltinSizes(t *testing.T) {
	counts := map[string]int64{}
	for _, name := range []string{"small", "medium"} {
		dir := t.TempDir()
		if err := WriteBuiltin(name, dir, 1); err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir, model.LoadOptions{Device: gotch.CPU})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, p := range m.Params() {
			n += int64(p.Tensor.Numel())
		}
		if want := qwen2Params(m.Config); n != want {
			t.Fatalf("%s: %d parameters loaded, the formula says %d", name, n, want)
		}
		counts[name] = n
		m.Close()
	}
	v := int64(0)
	{
		dir := t.TempDir()
		if err := WriteBuiltin("tiny", dir, 1); err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir, model.LoadOptions{Device: gotch.CPU})
		if err != nil {
			t.Fatal(err)
		}
		v = m.Config.VocabSize
		m.Close()
	}
	counts["large"] = qwen2Params(builtinConfig(builtinShapes["large"], v))
	for name, lo := range map[string]float64{"medium": 8, "large": 80} {
		r := float64(counts[name]) / float64(counts["small"])
		if r < lo || r > lo*1.4 {
			t.Errorf("%s: %d parameters, %.1f× small's %d", name, counts[name], r, counts["small"])
		}
	}
	t.Logf("parameters: small %d, medium %d, large %d", counts["small"], counts["medium"], counts["large"])
	if err := WriteBuiltin("huge", t.TempDir(), 1); err == nil {
		t.Fatal("an unknown built-in model was written")
	}
}
