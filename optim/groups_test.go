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

// groupSchedule is the sequence the tests run (no clipping: a bfloat16
// gradient is scaled in bfloat16): which moment group steps
// (0 default, 1 the group) and at what learning rate.
var groupSchedule = []struct {
	group int
	lr    float64
}{{0, 1e-2}, {1, 3e-2}, {0, 1e-2}, {1, 3e-2}, {1, 3e-2}, {0, 1e-2}}

func flatWeights(m *model.Model) []float64 {
	var w []float64
	for _, p := range m.Params() {
		w = append(w, tensor.Float64s(p.Tensor)...)
	}
	return w
}

// TestMomentGroups: an optimizer with a moment group steps the parameters
// as two AdamW instances over the same fp32 parameters would — the default
// group's moments and update count untouched by the group's steps and the
// other way round — bit for bit; with bfloat16 parameters both groups
// step the one fp32 master (two instances would each keep a master and
// undo each other's steps); ZeRO-1 and ZeRO-2 on 2 ranks step as plain
// AdamW does; and the group's state saves and loads, at any sharding.
func TestMomentGroups(t *testing.T) {
	lockThread(t)
	h := Hyper{Beta1: 0.9, Beta2: 0.98, Eps: 1e-8, WeightDecay: 0.01}
	run := func(m *model.Model, apply func(g int, lr float64) error) {
		t.Helper()
		for i, st := range groupSchedule {
			for _, p := range m.Params() {
				if g := p.Tensor.MustGrad(false); g.MustDefined() {
					g.MustZero_()
					g.MustDrop()
				}
			}
			fakeBackward(m, i)
			if err := apply(st.group, st.lr); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Reference: two AdamW instances over the same float32 parameters.
	ref := testModel(t, gotch.Float)
	defer ref.Close()
	a, _ := NewAdamW(ref.Params(), h.Beta1, h.Beta2, h.Eps, h.WeightDecay)
	b, _ := NewAdamW(ref.Params(), h.Beta1, h.Beta2, h.Eps, h.WeightDecay)
	defer a.Close()
	defer b.Close()
	run(ref, func(g int, lr float64) error {
		_, err := []*AdamW{a, b}[g].Apply(lr, 0, 0)
		return err
	})
	want := flatWeights(ref)

	grouped := testModel(t, gotch.Float)
	defer grouped.Close()
	o, err := NewOptimizer(grouped.Params(), h, nil, 0, 1<<20, false, "consolidate")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	run(grouped, func(g int, lr float64) error { _, err := o.ApplyGroup(g, lr, 0, 0); return err })
	if got := flatWeights(grouped); !reflect.DeepEqual(got, want) {
		t.Fatalf("float32: a moment group's steps differ from a second AdamW's (max |Δ| %g)", maxDiff(got, want))
	}
	plain := o.(*AdamW)
	if plain.Step != a.Step || plain.groups[0].step != b.Step {
		t.Errorf("update counts %d and %d, want %d and %d", plain.Step, plain.groups[0].step, a.Step, b.Step)
	}
	if _, err := o.ApplyGroup(2, 1e-2, 1, 0); err == nil {
		t.Error("a group that does not exist was applied")
	}

	// bfloat16: the masters follow the float32 reference exactly.
	half := testModel(t, gotch.BFloat16)
	defer half.Close()
	hb, _ := NewAdamW(half.Params(), h.Beta1, h.Beta2, h.Eps, h.WeightDecay, "consolidate")
	defer hb.Close()
	run(half, func(g int, lr float64) error { _, err := hb.ApplyGroup(g, lr, 0, 0); return err })
	var masters []float64
	for _, m := range hb.master {
		masters = append(masters, tensor.Float64s(m)...)
	}
	if !reflect.DeepEqual(masters, want) {
		t.Fatalf("bfloat16: the fp32 masters differ from the float32 reference (max |Δ| %g)", maxDiff(masters, want))
	}

	// ZeRO on 2 ranks, and the group's state through a checkpoint.
	for _, stage := range []int{1, 2} {
		dir := t.TempDir()
		got := make([][]float64, 2)
		// Made here, one after the other: NewRandom draws from torch's
		// global generator, which two ranks' goroutines would share.
		models := []*model.Model{testModel(t, gotch.Float), testModel(t, gotch.Float)}
		errs := disttest.OnMemRanks(2, func(c *disttest.MemComm) error {
			m := models[c.Rank()]
			defer m.Close()
			z, err := NewOptimizer(m.Params(), h, c, stage, 1<<10, false, "consolidate")
			if err != nil {
				return err
			}
			defer z.Close()
			// Each rank half the gradient: the sum is the reference's.
			for i, st := range groupSchedule {
				z.ZeroGrad()
				fakeBackward(m, i)
				for _, p := range m.Params() {
					g := p.Tensor.MustGrad(false)
					g.MustMulScalar_(ts.FloatScalar(0.5))
					g.MustDrop()
				}
				if _, err := z.ApplyGroup(st.group, st.lr, 0, 0); err != nil {
					return err
				}
			}
			got[c.Rank()] = flatWeights(m)
			return z.Save(dir)
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("ZeRO-%d rank %d: %v", stage, r, err)
			}
		}
		for r := range got {
			if d := maxDiff(got[r], want); d > 1e-6 {
				t.Errorf("ZeRO-%d rank %d: weights differ from plain AdamW's by %g", stage, r, d)
			}
		}
		back, _ := NewAdamW(ref.Params(), 0, 0, 0, 0, "consolidate")
		if err := back.Load(dir); err != nil {
			t.Fatal(err)
		}
		if back.Step != a.Step || back.groups[0].step != b.Step {
			t.Errorf("ZeRO-%d checkpoint: update counts %d and %d, want %d and %d", stage, back.Step, back.groups[0].step, a.Step, b.Step)
		}
		for i := range back.params {
			for _, c := range []struct {
				name      string
				got, want *ts.Tensor
			}{{"default exp_avg", back.m[i], a.m[i]}, {"group exp_avg_sq", back.groups[0].v[i], b.v[i]}} {
				if d := maxDiff(tensor.Float64s(c.got), tensor.Float64s(c.want)); d > 1e-6 {
					t.Fatalf("ZeRO-%d checkpoint: %s of %s differs by %g", stage, c.name, back.params[i].Name, d)
				}
			}
		}
		back.Close()
	}

	// A checkpoint without the group: its moments start at zero.
	dir := t.TempDir()
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	fresh, _ := NewAdamW(ref.Params(), 0, 0, 0, 0, "consolidate")
	defer fresh.Close()
	if err := fresh.Load(dir); err != nil {
		t.Fatal(err)
	}
	if fresh.groups[0].step != 0 || maxDiff(tensor.Float64s(fresh.groups[0].m[0]), make([]float64, fresh.groups[0].m[0].Numel())) != 0 {
		t.Error("a checkpoint without the group gave it state")
	}
}

func maxDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}
