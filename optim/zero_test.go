package optim

import (
	"math"
	"reflect"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/disttest"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// zeroTestModel is a small bfloat16 model (16-bit parameters get fp32
// masters, which the state must carry too).
func zeroTestModel(t *testing.T) *model.Model { return testModel(t, gotch.BFloat16) }

// testModel is a small model in dtype dt, weights from seed 1 rounded to
// bfloat16 (so a float32 model starts where a bfloat16 one's fp32 masters
// do).
func testModel(t *testing.T, dt gotch.DType) *model.Model {
	t.Helper()
	cfg := &model.Config{Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 40, HiddenSize: 16,
		IntermediateSize: 24, NumHiddenLayers: 2, NumAttentionHeads: 2, NumKeyValueHeads: 1, MaxPositionEmbeddings: 32,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}
	m, err := model.NewRandom(cfg, model.LoadOptions{Device: gotch.CPU, DType: dt}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var s tensor.Scope
	defer s.Close()
	for _, p := range m.Params() {
		p.Tensor.Copy_(s.Keep(s.Keep(p.Tensor.MustTotype(gotch.BFloat16, false)).MustTotype(dt, false)))
	}
	return m
}

// fakeBackward accumulates, into every parameter, the gradient
// sin(k + step) (k: the element) rounded to bfloat16 — what a bfloat16
// parameter's gradient of Σ p·sin(k + step) is — whatever the parameter's
// dtype: a float32 model then gets the very gradients a bfloat16 one does.
func fakeBackward(m *model.Model, step int) {
	var s tensor.Scope
	defer s.Close()
	var loss *ts.Tensor
	for _, p := range m.Params() {
		w := make([]float32, p.Tensor.Numel())
		for k := range w {
			w[k] = float32(math.Sin(float64(k + step)))
		}
		wt := s.Keep(s.Keep(tensor.FromSlice(&s, w, p.Tensor.MustSize(), gotch.CPU).MustTotype(gotch.BFloat16, false)).MustTotype(p.Tensor.DType(), false))
		term := s.Keep(s.Keep(p.Tensor.MustMul(wt, false)).MustSum(gotch.Float, false))
		if loss == nil {
			loss = term
		} else {
			loss = s.Keep(loss.MustAdd(term, false))
		}
	}
	loss.MustBackward()
}

// TestZeroCheckpointReshards: the state ZeRO-1 saves on 2 ranks loads into
// plain AdamW on one rank and into ZeRO-2 on 3, each rank's shard of the
// moments and masters equal to its range of the whole state.
func TestZeroCheckpointReshards(t *testing.T) {
	dir := t.TempDir()
	h := Hyper{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	errs := disttest.OnMemRanks(2, func(c *disttest.MemComm) error {
		m := zeroTestModel(t)
		defer m.Close()
		o, err := NewOptimizer(m.Params(), h, c, 1, 1<<10, false)
		if err != nil {
			return err
		}
		defer o.Close()
		for step := 0; step < 2; step++ {
			o.ZeroGrad()
			fakeBackward(m, step+c.Rank())
			if _, err := o.Apply(1e-2, 1, 0); err != nil {
				return err
			}
		}
		return o.Save(dir)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	lockThread(t)
	m := zeroTestModel(t)
	defer m.Close()
	plain, err := NewAdamW(m.Params(), 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Load(dir); err != nil {
		t.Fatal(err)
	}
	if plain.Step != 2 || plain.Hyper != h {
		t.Fatalf("plain AdamW from the shards: step %d, %+v", plain.Step, plain.Hyper)
	}
	var nonzero bool
	for _, v := range plain.v {
		for _, x := range tensor.Float64s(v) {
			nonzero = nonzero || x != 0
		}
	}
	if !nonzero {
		t.Fatal("the loaded moments are all zero: the test compares nothing")
	}
	g := disttest.NewMemGroup(3)
	for r := 0; r < 3; r++ {
		z, err := newZeroAdamW(m.Params(), h, g.Comm(r), 2, 1<<10, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := z.Load(dir); err != nil {
			t.Fatal(err)
		}
		for i, p := range m.Params() {
			sh := z.sh[i]
			for _, c := range []struct {
				kind        string
				whole, part *ts.Tensor
			}{{"exp_avg", plain.m[i], sh.m}, {"exp_avg_sq", plain.v[i], sh.v}, {"master", plain.master[i], sh.master}} {
				want := tensor.Float64s(c.whole)[sh.lo:sh.hi]
				if got := tensor.Float64s(c.part); !reflect.DeepEqual(got, want) {
					t.Fatalf("rank %d of 3: %s of %s [%d, %d) differs from the whole state's", r, c.kind, p.Name, sh.lo, sh.hi)
				}
			}
		}
		z.Close()
	}
}
