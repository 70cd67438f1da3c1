package trainer

import (
	"bytes"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/rl"
)

// refDivergence is sdpoDivergence for one token, written out: both sides
// completed by their tail bucket, then KL(T‖S), KL(S‖T) or the generalized
// JSD with M = (1−α)·S + α·T.
func refDivergence(s, t []float64, alpha float64) float64 {
	tail := func(lp []float64) []float64 {
		sum := 0.0
		for _, x := range lp {
			sum += math.Exp(x)
		}
		return append(append([]float64(nil), lp...), math.Log(math.Max(1-sum, 1e-12)))
	}
	S, T := tail(s), tail(t)
	kl := func(p, q []float64) float64 {
		d := 0.0
		for i := range p {
			d += math.Exp(p[i]) * (p[i] - q[i])
		}
		return d
	}
	switch alpha {
	case 0:
		return kl(T, S)
	case 1:
		return kl(S, T)
	}
	m := make([]float64, len(S))
	for i := range m {
		m[i] = math.Log((1-alpha)*math.Exp(S[i]) + alpha*math.Exp(T[i]))
	}
	return (1-alpha)*kl(S, m) + alpha*kl(T, m)
}

// topLogProbs draws a random distribution over v outcomes and returns the
// log-probs of k of them (so their mass is below 1).
func topLogProbs(rng *rand.Rand, v, k int) []float64 {
	z := make([]float64, v)
	sum := 0.0
	for i := range z {
		z[i] = 2 * rng.NormFloat64()
		sum += math.Exp(z[i])
	}
	out := make([]float64, k)
	for i := range out {
		out[i] = z[i] - math.Log(sum)
	}
	return out
}

// TestSDPODivergence: the per-token divergence (tail bucket included) and
// its gradient in the student's log-probs match the written-out formula
// and its central differences, for both KLs and two JSDs; the teacher gets
// no gradient; identical sides give 0.
func TestSDPODivergence(t *testing.T) {
	lockThread(t)
	rng := rand.New(rand.NewSource(3))
	const n, k = 5, 4
	var sv, tv []float64
	for i := 0; i < n; i++ {
		sv = append(sv, topLogProbs(rng, 9, k)...)
		tv = append(tv, topLogProbs(rng, 9, k)...)
	}
	coef := []float64{1, -0.5, 2, 0.3, 1.5}
	for _, alpha := range []float64{0, 0.3, 0.5, 1} {
		var s tensor.Scope
		S := s.Keep(tensor.FromSlice(&s, sv, []int64{n, k}, gotch.CPU).MustSetRequiresGrad(true, false))
		T := tensor.FromSlice(&s, tv, []int64{n, k}, gotch.CPU)
		div := sdpoDivergence(&s, S, T, alpha)
		got := tensor.Float64s(div)
		l := s.Keep(s.Keep(div.MustMul(tensor.FromSlice(&s, coef, []int64{n}, gotch.CPU), false)).MustSum(gotch.Double, false))
		l.MustBackward()
		grad := tensor.Float64s(s.Keep(S.MustGrad(false)))
		for i := 0; i < n; i++ {
			want := refDivergence(sv[i*k:(i+1)*k], tv[i*k:(i+1)*k], alpha)
			if math.Abs(got[i]-want) > 1e-12 || want <= 0 {
				t.Fatalf("α %g token %d: divergence %v, want %v (> 0)", alpha, i, got[i], want)
			}
			for j := 0; j < k; j++ {
				const h = 1e-6
				x := append([]float64(nil), sv[i*k:(i+1)*k]...)
				x[j] += h
				up := refDivergence(x, tv[i*k:(i+1)*k], alpha)
				x[j] -= 2 * h
				down := refDivergence(x, tv[i*k:(i+1)*k], alpha)
				if fd := coef[i] * (up - down) / (2 * h); math.Abs(grad[i*k+j]-fd) > 1e-6 {
					t.Fatalf("α %g token %d id %d: gradient %v, central difference %v", alpha, i, j, grad[i*k+j], fd)
				}
			}
		}
		if T.MustRequiresGrad() {
			t.Fatal("the teacher requires grad")
		}
		same := tensor.Float64s(sdpoDivergence(&s, T, T, alpha))
		for _, x := range same {
			if math.Abs(x) > 1e-12 {
				t.Fatalf("α %g: D(T, T) = %v", alpha, x)
			}
		}
		s.Close()
	}
}

// TestSDPOLossMatchesFullLogits: one SDPO micro-batch of the tiny model
// (float64, temperature 0.7, an EMA teacher that differs from the policy,
// importance weights on both sides of the cap) gives the loss and every
// parameter gradient of a slow path that materializes the full
// log-softmax of both models, takes the teacher's top-K with torch.topk
// and gathers the student there.
func TestSDPOLossMatchesFullLogits(t *testing.T) {
	cfg := tinyConfig(t, "dtype=float64", "rollout.temperature=0.7", "algo.name=sdpo", "sdpo.top_k=5", "sdpo.alpha=0.5", "sdpo.lambda=0.25")
	s, err := openSession(cfg, "", AlgoSDPO, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &grpoRun{session: s}
	d, err := newSDPO(g.view())
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	// The teacher: the policy moved by noise.
	err = csrc.NoGrad(func() error {
		for _, p := range d.teacher.Params() {
			n := p.Tensor.MustRandnLike(false)
			p.Tensor.MustAdd_(n.MustMulScalar(ts.FloatScalar(0.05), true))
			n.MustDrop()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(5))
	V := int(s.m.Config.VocabSize)
	var rows []*rollout
	tokens := 0
	for i := 0; i < 3; i++ {
		r := &rollout{}
		for j := 0; j < 3+i; j++ {
			r.promptIDs = append(r.promptIDs, int64(1+rng.Intn(V-1)))
		}
		for j := 0; j < 6+2*i; j++ {
			r.auxPrompt = append(r.auxPrompt, int64(1+rng.Intn(V-1)))
		}
		for j := 0; j < 4+i; j++ {
			r.ids = append(r.ids, int64(1+rng.Intn(V-1)))
		}
		rows = append(rows, r)
		tokens += len(r.ids)
	}
	tot := termRows{rows: len(rows), tokens: tokens}
	T := cfg.Rollout.Temperature
	K := int64(cfg.SDPO.TopK)
	w := (1 - cfg.SDPO.Lambda) / float64(tokens)

	// Full log-softmax [N, V] of a model over the rows' response positions.
	full := func(sc *tensor.Scope, m *model.Model, prompt func(*rollout) []int64) *ts.Tensor {
		rs := make([]*rollout, len(rows))
		for i, r := range rows {
			rs[i] = &rollout{promptIDs: prompt(r), ids: r.ids, oldLogp: make([]float64, len(r.ids))}
		}
		b := buildBatch(sc, m.Device, rs)
		h, err := m.Forward(sc, b.ids, b.pos, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		logits := sc.Keep(responseRows(sc, h, b.tmask).MustMatmul(sc.Keep(m.LMHead.MustT(false)), false)) // float64, not Logits' fp32
		z := sc.Keep(logits.MustDivScalar(sc.Float(T), false))
		return sc.Keep(z.MustLogSoftmax(-1, gotch.Double, false))
	}
	var targets []int64
	for _, r := range rows {
		targets = append(targets, r.ids...)
	}
	var sc tensor.Scope
	defer sc.Close()
	tgt := sc.Keep(tensor.FromSlice(&sc, targets, []int64{int64(len(targets)), 1}, gotch.CPU))
	// π_old: the student's log-prob of each token moved by δ, so the
	// importance weight is e^δ: above the cap (2) for δ = 1.
	var lpNow []float64
	csrc.NoGrad(func() error {
		lpNow = tensor.Float64s(sc.Keep(full(&sc, s.m, func(r *rollout) []int64 { return r.promptIDs }).MustGather(1, tgt, false, false)))
		return nil
	})
	deltas := []float64{1, -0.3, 0.2, 0.5}
	at := 0
	for _, r := range rows {
		for range r.ids {
			r.oldLogp = append(r.oldLogp, lpNow[at]-deltas[at%len(deltas)])
			at++
		}
	}

	// The slow path's loss and gradients.
	var tl *ts.Tensor
	csrc.NoGrad(func() error {
		tl = full(&sc, d.teacher, func(r *rollout) []int64 { return r.auxPrompt })
		return nil
	})
	topv, topi := tl.MustTopk(K, -1, true, true, false)
	sc.Keep(topv)
	sc.Keep(topi)
	sl := full(&sc, s.m, func(r *rollout) []int64 { return r.promptIDs })
	div := sdpoDivergence(&sc, sc.Keep(sl.MustGather(1, topi, false, false)), topv, cfg.SDPO.Alpha)
	lp := sc.Keep(sc.Keep(sl.MustGather(1, tgt, false, false)).MustSqueezeDim(1, false))
	var old []float64
	for _, r := range rows {
		old = append(old, r.oldLogp...)
	}
	oldT := tensor.FromSlice(&sc, old, []int64{int64(len(old))}, gotch.CPU)
	is := sc.Keep(sc.Keep(sc.Keep(sc.Keep(lp.MustSub(oldT, false)).MustExp(false)).MustClampMax(sc.Float(cfg.SDPO.ISClip), false)).MustDetach(false))
	want := sc.Keep(sc.Keep(sc.Keep(div.MustMul(is, false)).MustMulScalar(sc.Float(w), false)).MustSum(gotch.Double, false))
	s.opt.ZeroGrad()
	want.MustBackward()
	grads := func() map[string][]float64 {
		out := map[string][]float64{}
		for _, p := range s.m.Params() {
			gr := p.Tensor.MustGrad(false)
			out[p.Name] = tensor.Float64s(gr)
			gr.MustDrop()
		}
		return out
	}
	wantGrads := grads()
	clipped := 0
	for _, x := range tensor.Float64s(is) {
		if x == cfg.SDPO.ISClip {
			clipped++
		}
	}
	if clipped == 0 || clipped == len(old) {
		t.Fatalf("%d of %d importance weights at the cap: the test does not see the cap", clipped, len(old))
	}

	s.opt.ZeroGrad()
	r, err := d.microBatch(rows, 0, tot)
	if err != nil {
		t.Fatal(err)
	}
	wl := tensor.Float64s(want)[0]
	if math.Abs(r.loss-wl) > 1e-10*math.Abs(wl) || wl <= 0 {
		t.Fatalf("SDPO loss %v, slow path %v", r.loss, wl)
	}
	gmax := 0.0
	for _, g := range wantGrads {
		for _, x := range g {
			gmax = math.Max(gmax, math.Abs(x))
		}
	}
	for name, g := range grads() {
		if dd := maxAbsDiff(g, wantGrads[name]); dd > 1e-9*gmax {
			t.Fatalf("gradient of %s differs from the slow path's by %g (largest %g)", name, dd, gmax)
		}
	}
	for _, p := range d.teacher.Params() {
		if p.Tensor.MustRequiresGrad() {
			t.Fatalf("teacher parameter %s requires grad", p.Name)
		}
	}
}

// TestSDPOSiblingChoice: with teacher_context sibling the teacher is shown
// a sibling the verifier accepted, never the rollout itself, and a rollout
// with none gets no teacher; with blind the choice is the same whatever the
// outcomes (flipping every verdict changes no pick).
func TestSDPOSiblingChoice(t *testing.T) {
	cfg := DefaultConfig()
	mk := func(correct ...bool) []*rollout {
		var grp []*rollout
		for i, c := range correct {
			grp = append(grp, &rollout{Rollout: rl.Rollout{Prompt: &rl.Prompt{Index: 3}, Sample: i, Correct: c}, ids: []int64{1}})
		}
		return grp
	}
	d := &sdpo{v: termView{cfg: &cfg}, cfg: SDPOConfig{TeacherContext: TeacherSibling}}
	grp := mk(true, false, false, true)
	for step := 0; step < 50; step++ {
		for i := range grp {
			o := d.sibling(step, grp, i)
			if o == nil || o == grp[i] || !o.Correct {
				t.Fatalf("step %d rollout %d: teacher context %+v", step, i, o)
			}
		}
	}
	if o := d.sibling(0, mk(true, false, false), 0); o != nil {
		t.Fatal("the only correct rollout got a teacher context: itself")
	}
	d.cfg.TeacherContext = TeacherBlind
	for step := 0; step < 50; step++ {
		a, b := mk(true, false, false, true), mk(false, true, true, false)
		for i := range a {
			x, y := d.sibling(step, a, i), d.sibling(step, b, i)
			if x == nil || x == a[i] || x.Sample != y.Sample {
				t.Fatalf("blind: step %d rollout %d picked %v and, outcomes flipped, %v", step, i, x, y)
			}
		}
	}
}

// sdpoFiles are what an SDPO run's checkpoint must hold alike after a
// resume: the policy, the optimizer, the state and the EMA teacher.
var sdpoFiles = []string{"model.safetensors", optim.TensorsFile, optim.MetaFile, stateFile, teacherFile}

// TestSDPOExactResume: 4 SDPO steps straight and 2 + --resume auto + 2
// give the same bytes (policy, optimizer, state, teacher) and metrics; the
// run distilled, and the teacher moved toward the policy but is not it.
func TestSDPOExactResume(t *testing.T) {
	straight, _ := runStraightAndResumed(t, sdpoFiles, "algo.name=sdpo", "sdpo.lambda=0.5")
	if metricSum(t, straight.RunDir, "sdpo_rows") == 0 {
		t.Fatal("no rollout was distilled: the test compares GRPO")
	}
	ck := func(step int, f string) []byte {
		b, err := os.ReadFile(filepath.Join(straight.RunDir, checkpointsDir, checkpointName(step), f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if bytes.Equal(ck(1, teacherFile), ck(4, teacherFile)) || bytes.Equal(ck(4, teacherFile), ck(4, "model.safetensors")) {
		t.Fatal("the teacher did not move, or is the policy itself")
	}
}

// TestSDPOTeacherIsTheEMA: after one SDPO step the checkpoint's teacher is
// (1 − r)·θ₀ + r·θ₁ of the policy before (θ₀) and after (θ₁) the step.
func TestSDPOTeacherIsTheEMA(t *testing.T) {
	const rate = 0.25
	cfg := tinyConfig(t, "algo.name=sdpo", "total_steps=1", "sdpo.teacher_update_rate=0.25", "dtype=float64")
	runGRPO(t, cfg, "")
	lockThread(t)
	load := func(dir string) []float64 {
		m, err := model.Load(dir, model.LoadOptions{DType: gotch.Double})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var out []float64
		for _, p := range m.Params() {
			out = append(out, tensor.Float64s(p.Tensor)...)
		}
		return out
	}
	ckpt := filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(1))
	before, after := load(cfg.Model), load(ckpt)
	m, err := model.Load(ckpt, model.LoadOptions{DType: gotch.Double})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.LoadWeights(filepath.Join(ckpt, teacherFile)); err != nil {
		t.Fatal(err)
	}
	var teacher []float64
	for _, p := range m.Params() {
		teacher = append(teacher, tensor.Float64s(p.Tensor)...)
	}
	moved := 0.0
	for i := range teacher {
		want := before[i] + rate*(after[i]-before[i])
		if math.Abs(teacher[i]-want) > 1e-12*(1+math.Abs(want)) {
			t.Fatalf("teacher entry %d is %v, want %v", i, teacher[i], want)
		}
		moved = math.Max(moved, math.Abs(after[i]-before[i]))
	}
	if moved == 0 {
		t.Fatal("the policy did not move: the test compares copies")
	}
}
