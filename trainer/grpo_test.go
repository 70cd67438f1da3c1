package trainer

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
)

func lockThread(t testing.TB) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

func TestAdvantages(t *testing.T) {
	got := Advantages([][]float64{{1, 0, 1, 0}, {1, 1, 1, 1}, {0, 0, 0, 1}}, false, 0)
	// group 0: mean 0.5, unbiased std sqrt(1/3).
	s := math.Sqrt(1.0 / 3)
	want := [][]float64{{0.5 / s, -0.5 / s, 0.5 / s, -0.5 / s}, {0, 0, 0, 0}, {-0.25 / 0.5, -0.25 / 0.5, -0.25 / 0.5, 0.75 / 0.5}}
	for g := range want {
		for i := range want[g] {
			if math.Abs(got[g][i]-want[g][i]) > 1e-12 {
				t.Fatalf("group %d sample %d: %v want %v", g, i, got[g][i], want[g][i])
			}
		}
	}
	noStd := Advantages([][]float64{{1, 0, 1, 0}}, true, 1e-6)
	if noStd[0][0] != 0.5 || noStd[0][1] != -0.5 {
		t.Fatalf("no-std: %v", noStd)
	}
}

func TestTokenWeights(t *testing.T) {
	lengths := []int{2, 4, 3, 6}
	masked := []bool{false, false, true, false} // the third was truncated (overlong_mask)
	for _, c := range []struct {
		mode   string
		masked []bool
		want   []float64
	}{
		{AggTokenMean, nil, []float64{1.0 / 15, 1.0 / 15, 1.0 / 15, 1.0 / 15}},
		{AggSeqMeanTokenMean, nil, []float64{1.0 / 8, 1.0 / 16, 1.0 / 12, 1.0 / 24}},
		{AggSeqMeanTokenSumNorm, nil, []float64{1.0 / 32, 1.0 / 32, 1.0 / 32, 1.0 / 32}},
		// A masked sequence weighs nothing and leaves the normalizer: 12
		// tokens, 3 sequences.
		{AggTokenMean, masked, []float64{1.0 / 12, 1.0 / 12, 0, 1.0 / 12}},
		{AggSeqMeanTokenMean, masked, []float64{1.0 / 6, 1.0 / 12, 0, 1.0 / 18}},
		{AggSeqMeanTokenSumNorm, masked, []float64{1.0 / 24, 1.0 / 24, 0, 1.0 / 24}},
		{AggTokenMean, []bool{true, true, true, true}, []float64{0, 0, 0, 0}},
	} {
		t.Run(fmt.Sprintf("%s/masked=%v", c.mode, c.masked), func(t *testing.T) {
			got, err := TokenWeights(lengths, c.masked, c.mode, 8)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if math.Abs(got[i]-c.want[i]) > 1e-15 {
					t.Fatalf("got %v want %v", got, c.want)
				}
			}
		})
	}
	if _, err := TokenWeights(lengths, masked, "sum", 8); err == nil {
		t.Fatal("unknown mode accepted")
	}
}

// slowTokenLoss is GRPO's per-token objective written out in float64,
// with its derivative with respect to log π.
func slowTokenLoss(logp, old, ref, adv float64, cfg PolicyLossConfig) (loss, dLoss float64, clipped bool, kl float64) {
	loss, dLoss, clipped = slowClip(math.Exp(logp-old), adv, cfg)
	if cfg.Beta != 0 {
		var dk float64
		kl, dk = slowKL(logp, ref, cfg.KL)
		loss += cfg.Beta * kl
		dLoss += cfg.Beta * dk
	}
	return loss, dLoss, clipped, kl
}

// slowClip is PPO's clipped term max(−A·r, −A·clip(r)) for a ratio r whose
// derivative with respect to log π is r itself (a token's ratio, or GSPO's
// s_{i,t}), with that derivative.
func slowClip(ratio, adv float64, cfg PolicyLossConfig) (loss, dLoss float64, clipped bool) {
	lo, hi := 1-cfg.ClipLow, 1+cfg.ClipHigh
	c := math.Min(math.Max(ratio, lo), hi)
	l1, l2 := -adv*ratio, -adv*c
	if l2 > l1 {
		// The clipped branch has zero gradient where the clamp is active.
		if ratio > lo && ratio < hi {
			dLoss = -adv * ratio
		}
		return l2, dLoss, true
	}
	return l1, -adv * ratio, false
}

// slowKL is the KL estimate of one token and its derivative with respect
// to log π.
func slowKL(logp, ref float64, kind string) (kl, dKL float64) {
	d := logp - ref
	switch kind {
	case KLK1:
		return d, 1
	case KLK2:
		return 0.5 * d * d, d
	case KLK3:
		return math.Exp(-d) + d - 1, 1 - math.Exp(-d)
	}
	panic("slowKL: kind " + kind)
}

func TestPolicyLossMatchesSlowReference(t *testing.T) {
	lockThread(t)
	rng := rand.New(rand.NewSource(5))
	const b, tt = 4, 6
	n := b * tt
	logp, old, ref, w := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	adv := []float64{1.3, -0.7, 0.4, -2}
	for i := range logp {
		old[i] = -rng.Float64() * 3
		// Ratios spread over both sides of both clip bounds.
		logp[i] = old[i] + (rng.Float64()-0.5)*0.8
		ref[i] = old[i] + (rng.Float64()-0.5)*0.5
		if rng.Float64() < 0.8 {
			w[i] = rng.Float64() / float64(n)
		}
	}
	// Truncated importance weights (LANPO's original-prompt training):
	// min(π_old/μ, cap), some at the cap.
	tis := make([]float64, n)
	for i := range tis {
		tis[i] = math.Min(math.Exp((rng.Float64()-0.5)*2), 2)
	}
	for _, c := range []struct {
		cfg     PolicyLossConfig
		withTIS bool
	}{
		{PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.2}, false},
		{PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, Beta: 0.05, KL: KLK1}, false},
		{PolicyLossConfig{ClipLow: 0.1, ClipHigh: 0.3, Beta: 0.1, KL: KLK2}, false},
		{PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, Beta: 0.04, KL: KLK3}, false},
		{PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, Beta: 0.04, KL: KLK3}, true},
		{PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28}, true},
	} {
		cfg := c.cfg
		t.Run(fmt.Sprintf("%s/tis=%v", cfg.KL, c.withTIS), func(t *testing.T) {
			var s tensor.Scope
			defer s.Close()
			mk := func(v []float64, shape []int64) *ts.Tensor { return tensor.FromSlice(&s, v, shape, gotch.CPU) }
			lp := s.Keep(mk(logp, []int64{b, tt}).MustSetRequiresGrad(true, false))
			in := PolicyLossInput{Logp: lp, OldLogp: mk(old, []int64{b, tt}), Adv: mk(adv, []int64{b, 1}), Weight: mk(w, []int64{b, tt})}
			if cfg.Beta != 0 {
				in.RefLogp = mk(ref, []int64{b, tt})
			}
			iw := make([]float64, n) // the importance weight each token's loss gets
			for i := range iw {
				iw[i] = 1
				if c.withTIS {
					iw[i] = tis[i]
				}
			}
			if c.withTIS {
				in.TIS = mk(tis, []int64{b, tt})
			}
			loss, st, err := PolicyLoss(&s, in, cfg)
			if err != nil {
				t.Fatal(err)
			}
			loss.MustBackward()
			grad := tensor.Float64s(s.Keep(lp.MustGrad(false)))
			var wantLoss, wantClip, wantKL float64
			sawClip, sawFree := false, false
			for i := range logp {
				l, dl, clipped, kl := slowTokenLoss(logp[i], old[i], ref[i], adv[i/tt], cfg)
				wantLoss += w[i] * iw[i] * l
				dl *= iw[i]
				wantKL += w[i] * kl
				if clipped {
					wantClip += w[i]
					sawClip = true
				} else {
					sawFree = true
				}
				if math.Abs(grad[i]-w[i]*dl) > 1e-12 {
					t.Fatalf("token %d: grad %v want %v", i, grad[i], w[i]*dl)
				}
			}
			if !sawClip || !sawFree {
				t.Fatal("the case must exercise both the clipped and the unclipped branch")
			}
			if got := tensor.Float64s(loss)[0]; math.Abs(got-wantLoss) > 1e-12 {
				t.Fatalf("loss %v want %v", got, wantLoss)
			}
			if math.Abs(st.ClipFrac-wantClip) > 1e-12 || math.Abs(st.KL-wantKL) > 1e-12 {
				t.Fatalf("stats %+v want clip %v kl %v", st, wantClip, wantKL)
			}
		})
	}
}

// scoringRun is a GRPO run with only what scoring and filtering use: the
// config and the problems (no model).
func scoringRun(t *testing.T, sets ...string) *grpoRun {
	t.Helper()
	cfg := tinyConfig(t, append([]string{"rollout.samples_per_prompt=4"}, sets...)...)
	return &grpoRun{session: &session{cfg: cfg, comm: dist.Single()}, scorer: reward.Math{FormatWeight: cfg.Algo.FormatReward}, problems: []Problem{
		{ID: "a", Problem: "1+1?", Answer: "2"}, {ID: "b", Problem: "2+2?", Answer: "4"}, {ID: "c", Problem: "3+3?", Answer: "6"}}}
}

// group makes G rollouts of problem p with the given responses.
func group(p int, texts ...string) []*rollout {
	var out []*rollout
	pr := &rl.Prompt{Problem: p, Index: p, Mode: rl.ModeScratch}
	for i, x := range texts {
		out = append(out, &rollout{Rollout: rl.Rollout{Prompt: pr, Sample: i, Text: x}, ids: make([]int64, len(x))})
	}
	return out
}

// TestScoreAndFilter: rewards are the verdict plus format_reward × the
// format score; dynamic sampling drops zero-variance groups except in the
// last round; the metrics describe every sampled rollout, and the *_kept
// ones the trained batch.
func TestScoreAndFilter(t *testing.T) {
	batch := func() []*rollout {
		var b []*rollout
		b = append(b, group(0, `\boxed{2}`, `\boxed{2}`, `\boxed{2}`, `\boxed{2}`)...) // all right: no variance
		b = append(b, group(1, `\boxed{4}`, `\boxed{5}`, `4`, `\boxed{3}`)...)         // right, wrong, right unboxed, wrong
		b = append(b, group(2, `7`, `8`, `9`, `\boxed{1}`)...)                         // all wrong, one boxed
		return b
	}
	t.Run("format reward", func(t *testing.T) {
		g := scoringRun(t, "algo.format_reward=0.5")
		b := batch()
		if err := g.score(b); err != nil {
			t.Fatal(err)
		}
		want := []float64{1.5, 1.5, 1.5, 1.5, 1.5, 0.5, 1, 0.5, 0, 0, 0, 0.5}
		for i, r := range b {
			if r.Reward != want[i] {
				t.Fatalf("rollout %d (%q): reward %v, want %v", i, r.Text, r.Reward, want[i])
			}
		}
	})
	for _, c := range []struct {
		name      string
		sets      []string
		lastRound bool
		kept      []int // problems of the kept groups
	}{
		{"no dynamic sampling", nil, false, []int{0, 1, 2}},
		{"dynamic sampling", []string{"algo.dynamic_sampling=true"}, false, []int{1}},
		{"dynamic sampling, format reward", []string{"algo.dynamic_sampling=true", "algo.format_reward=0.5"}, false, []int{1, 2}},
		{"dynamic sampling, last round", []string{"algo.dynamic_sampling=true"}, true, []int{0, 1, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := scoringRun(t, c.sets...)
			b := batch()
			if err := g.score(b); err != nil {
				t.Fatal(err)
			}
			kept := g.filterGroups(b, c.lastRound)
			var problems []int
			for i := 0; i < len(kept); i += 4 {
				problems = append(problems, kept[i].Prompt.Problem)
			}
			if fmt.Sprint(problems) != fmt.Sprint(c.kept) {
				t.Fatalf("kept problems %v, want %v", problems, c.kept)
			}
			var met StepMetrics
			stats, err := g.exchangeStats(b, kept)
			if err != nil {
				t.Fatal(err)
			}
			g.fillMetrics(&met, stats)
			// Pre-filter: 6 of 12 right (4 + 2); groups 0 and, without the
			// format reward, 2 have no variance.
			if met.Accuracy != 0.5 || met.GroupsKept != len(c.kept) || met.GroupsDropped != 3-len(c.kept) {
				t.Fatalf("accuracy %v, kept %d, dropped %d", met.Accuracy, met.GroupsKept, met.GroupsDropped)
			}
			zeroVar := 2.0 / 3
			if g.cfg.Algo.FormatReward > 0 {
				zeroVar = 1.0 / 3
			}
			if math.Abs(met.ZeroVarFrac-zeroVar) > 1e-12 {
				t.Fatalf("zero-variance fraction %v, want %v", met.ZeroVarFrac, zeroVar)
			}
			if len(c.kept) == 1 && met.AccuracyKept != 0.5 {
				t.Fatalf("accuracy of the kept group %v, want 0.5", met.AccuracyKept)
			}
		})
	}
}
