package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// TestCheckpointedGradients: with activation checkpointing every parameter
// gets the same gradient as without (fp64, ≤ 1e-10), for a tied and an
// untied model with Qwen3's q/k norms; the per-layer callback runs last
// layer to first.
func TestCheckpointedGradients(t *testing.T) {
	lockThread(t)
	prev := csrc.SetGradEnabled(true)
	defer csrc.SetGradEnabled(prev)
	for _, tied := range []bool{true, false} {
		t.Run(fmt.Sprintf("tied=%v", tied), func(t *testing.T) {
			cfg := &Config{Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3", VocabSize: 96, HiddenSize: 32, IntermediateSize: 48,
				NumHiddenLayers: 3, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8, MaxPositionEmbeddings: 64, RMSNormEps: 1e-6,
				RopeTheta: 10000, TieWordEmbeddings: tied, HiddenAct: "silu"}
			m, err := NewRandom(cfg, LoadOptions{DType: gotch.Double}, 3)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, p := range m.Params() {
				p.Tensor.MustSetRequiresGrad(true, false).MustDrop()
			}
			ids := [][]int64{{5, 9, 13, 2, 7, 1}, {0, 0, 4, 8, 15, 16}}
			mask := [][]int64{{1, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1}}
			pos := [][]int64{{0, 1, 2, 3, 4, 5}, {0, 0, 0, 1, 2, 3}}
			targets := [][]int64{{9, 13, 2, 7, 1, 0}, {0, 0, 8, 15, 16, 0}}
			tm := [][]bool{{true, true, true, true, true, false}, {false, false, true, true, true, false}}
			grads := func(checkpointed bool) ([]float64, []int) {
				for _, p := range m.Params() {
					if g := p.Tensor.MustGrad(false); g.MustDefined() {
						g.MustZero_()
						g.MustDrop()
					}
				}
				var s tensor.Scope
				defer s.Close()
				tmask := s.Keep(ts.MustOfSlice(append(tm[0], tm[1]...))).MustView([]int64{2, 6}, false)
				s.Keep(tmask)
				args := []*ts.Tensor{int64Tensor(&s, ids), int64Tensor(&s, pos), int64Tensor(&s, mask), int64Tensor(&s, targets), tmask}
				lp, _, c, err := m.TokenLogProbsMaybeCheckpointed(checkpointed, &s, args[0], args[1], args[2], args[3], args[4], csrc.LogProbOptions{})
				if err != nil {
					t.Fatal(err)
				}
				loss := s.Keep(s.Keep(lp.MustSum(gotch.Double, false)).MustNeg(false))
				loss.MustBackward()
				var order []int
				if c != nil {
					if err := c.Backward(func(l int) error { order = append(order, l); return nil }); err != nil {
						t.Fatal(err)
					}
					if err := c.Backward(nil); err == nil {
						t.Fatal("a second Backward was accepted")
					}
				}
				var out []float64
				for _, p := range m.Params() {
					g := s.Keep(p.Tensor.MustGrad(false))
					if !g.MustDefined() {
						t.Fatalf("%s has no gradient (checkpointed %v)", p.Name, checkpointed)
					}
					out = append(out, tensor.Float64s(g)...)
				}
				return out, order
			}
			plain, _ := grads(false)
			ckpt, order := grads(true)
			var worst, norm float64
			for i := range plain {
				worst = math.Max(worst, math.Abs(plain[i]-ckpt[i]))
				norm += plain[i] * plain[i]
			}
			t.Logf("gradient norm %.4g, max |difference| %.3g", math.Sqrt(norm), worst)
			if norm < 1e-6 || worst > 1e-10 {
				t.Fatalf("checkpointed gradients differ by %g (norm %g)", worst, math.Sqrt(norm))
			}
			if fmt.Sprint(order) != "[2 1 0]" {
				t.Fatalf("layers finished in order %v", order)
			}
		})
	}
}

// ParamCount equals the loaded parameters' sizes for every tiny reference
// model (tied and untied heads, q/k norms, biases).
func TestParamCount(t *testing.T) {
	lockThread(t)
	for _, name := range tinyModels {
		m := tinyModel(t, name)
		var n int64
		for _, p := range m.Params() {
			n += int64(p.Tensor.Numel())
		}
		if got := m.Config.ParamCount(); got != n {
			t.Errorf("%s: ParamCount %d, parameters %d", name, got, n)
		}
	}
}
