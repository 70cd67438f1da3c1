package trainer

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// lossCase is a micro-batch laid out as buildBatch does: row i holds its
// response at columns [start_i, start_i+len_i), the rest is prompt or
// padding (old log-prob 0, weight 0, mask 0, and a log π of its own that
// must not leak into a sequence ratio).
type lossCase struct {
	b, t                    int
	logp, old, ref, w, mask []float64 // [b·t]
	adv                     []float64 // [b]
	tis                     []float64 // [b·t], nil: none
}

// newLossCase draws a case for cfg: each response's log-ratios are spread
// by ±0.4 around the row's mean, chosen as a multiple of ε_high so that
// GSPO's sequence ratio falls inside the clip range for some rows and
// beyond either bound for others, whatever the range; the spread puts the
// token ratios on both sides of PPO's and CISPO's bounds.
func newLossCase(rng *rand.Rand, withTIS bool, cfg PolicyLossConfig) lossCase {
	starts := []int{0, 2, 1, 3, 0, 4}
	lens := []int{9, 6, 3, 5, 7, 0}                 // the last row has no response
	means := []float64{5, -5, 0.3, 5, -0.2, 0}      // × ε_high
	adv := []float64{1.3, -0.7, 0.4, -2, 0.9, 1}    // mixed signs
	rowW := []float64{0.03, 0.05, 0, 0.02, 0.04, 0} // row 2 is masked (overlong): mask 1, weight 0
	c := lossCase{b: len(lens), t: 12, adv: adv}
	n := c.b * c.t
	c.logp, c.old, c.ref, c.w, c.mask = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	if withTIS {
		c.tis = make([]float64, n)
	}
	for i := range c.b {
		row := i * c.t
		for k := range c.t {
			c.logp[row+k] = -rng.Float64() * 4 // prompt and padding
			if c.tis != nil {
				c.tis[row+k] = 1
			}
		}
		d := make([]float64, lens[i])
		var mean float64
		for k := range d {
			d[k] = (rng.Float64() - 0.5) * 0.8
			mean += d[k] / float64(len(d))
		}
		for k := range d {
			at := row + starts[i] + k
			c.old[at] = -2 - rng.Float64()*3 // log π stays < 0 under the shifts below
			c.logp[at] = c.old[at] + d[k] - mean + means[i]*cfg.ClipHigh
			c.ref[at] = c.old[at] + (rng.Float64()-0.5)*0.5
			c.w[at], c.mask[at] = rowW[i], 1
			if c.tis != nil {
				// min(π_old/μ, cap), some at the cap.
				c.tis[at] = math.Min(math.Exp((rng.Float64()-0.5)*2), 2)
			}
		}
	}
	return c
}

// slowVariant is the slow reference of one kind: each token's loss before
// the weights (surrogate + β·kl, times tis), its derivative with respect to
// log π of that token, whether the clip decided, the ratio the stats
// report and the KL estimate.
type slowVariant struct {
	loss, dLoss, ratio, kl []float64
	pg                     []float64 // the surrogate alone, before β·kl and tis
	clipped                []bool
}

func slowPolicyLoss(c lossCase, cfg PolicyLossConfig) slowVariant {
	n := c.b * c.t
	v := slowVariant{loss: make([]float64, n), dLoss: make([]float64, n), ratio: make([]float64, n), kl: make([]float64, n), pg: make([]float64, n), clipped: make([]bool, n)}
	for i := range c.b {
		// GSPO's sequence ratio: the mean log-ratio over the response.
		var sum, length float64
		for k := range c.t {
			at := i*c.t + k
			sum += c.mask[at] * (c.logp[at] - c.old[at])
			length += c.mask[at]
		}
		seqRatio := math.Exp(math.Max(-20, math.Min(20, sum/math.Max(length, 1))))
		for k := range c.t {
			at := i*c.t + k
			a := c.adv[i]
			var l, dl float64
			switch cfg.Kind {
			case LossGSPO:
				// s_{i,t} = sg[s_i]·π/sg[π]: value s_i, d/d log π_t = s_i.
				v.ratio[at] = seqRatio
				l, dl, v.clipped[at] = slowClip(seqRatio, a, cfg)
			case LossCISPO:
				rho := math.Exp(math.Max(-20, math.Min(20, c.logp[at]-c.old[at])))
				w := math.Min(math.Max(rho, 1-cfg.ClipLow), 1+cfg.ClipHigh)
				v.ratio[at], v.clipped[at] = rho, w != rho
				// ℓ = −sg[w]·A·log π: the weight is a constant.
				l, dl = -w*a*c.logp[at], -w*a
			default:
				panic(cfg.Kind)
			}
			v.pg[at] = l
			if cfg.Beta != 0 {
				kl, dk := slowKL(c.logp[at], c.ref[at], cfg.KL)
				v.kl[at] = kl
				l += cfg.Beta * kl
				dl += cfg.Beta * dk
			}
			if c.tis != nil {
				l *= c.tis[at]
				dl *= c.tis[at]
			}
			v.loss[at], v.dLoss[at] = l, dl
		}
	}
	return v
}

// run is PolicyLoss on the case in float64, with the gradient w.r.t. log π.
func (c lossCase) run(t *testing.T, s *tensor.Scope, cfg PolicyLossConfig) (loss float64, grad []float64, st PolicyLossStats) {
	t.Helper()
	mk := func(v []float64, shape ...int64) *ts.Tensor { return tensor.FromSlice(s, v, shape, gotch.CPU) }
	b, tt := int64(c.b), int64(c.t)
	lp := s.Keep(mk(c.logp, b, tt).MustSetRequiresGrad(true, false))
	in := PolicyLossInput{Logp: lp, OldLogp: mk(c.old, b, tt), Adv: mk(c.adv, b, 1), Weight: mk(c.w, b, tt), Mask: mk(c.mask, b, tt)}
	if cfg.Beta != 0 {
		in.RefLogp = mk(c.ref, b, tt)
	}
	if c.tis != nil {
		in.TIS = mk(c.tis, b, tt)
	}
	l, st, err := PolicyLoss(s, in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.MustBackward()
	return tensor.Float64s(l)[0], tensor.Float64s(s.Keep(lp.MustGrad(false))), st
}

// TestPolicyLossVariantsMatchSlowReference: GSPO and CISPO, loss, gradient
// and statistics, against loops over float64 with the derivatives written
// out. Each case must also tell apart the mistakes the kind invites: a
// per-token ratio under GSPO, a CISPO weight that is not detached.
func TestPolicyLossVariantsMatchSlowReference(t *testing.T) {
	lockThread(t)
	for _, c := range []struct {
		cfg     PolicyLossConfig
		withTIS bool
	}{
		{PolicyLossConfig{Kind: LossGSPO, ClipLow: GSPOClipLow, ClipHigh: GSPOClipHigh}, false},
		{PolicyLossConfig{Kind: LossGSPO, ClipLow: GSPOClipLow, ClipHigh: GSPOClipHigh}, true},
		{PolicyLossConfig{Kind: LossGSPO, ClipLow: GSPOClipLow, ClipHigh: GSPOClipHigh, Beta: 0.04, KL: KLK3}, true},
		{PolicyLossConfig{Kind: LossGSPO, ClipLow: 0.2, ClipHigh: 0.28, Beta: 0.05, KL: KLK1}, false},
		{PolicyLossConfig{Kind: LossCISPO, ClipLow: CISPOClipLow, ClipHigh: CISPOClipHigh}, false},
		{PolicyLossConfig{Kind: LossCISPO, ClipLow: CISPOClipLow, ClipHigh: CISPOClipHigh}, true},
		{PolicyLossConfig{Kind: LossCISPO, ClipLow: 0.2, ClipHigh: 0.28, Beta: 0.1, KL: KLK2}, true},
		{PolicyLossConfig{Kind: LossCISPO, ClipLow: 0.1, ClipHigh: 0.2, Beta: 0.04, KL: KLK3}, false},
	} {
		cfg := c.cfg
		t.Run(fmt.Sprintf("%s/eps=%g,%g/beta=%g%s/tis=%v", cfg.Kind, cfg.ClipLow, cfg.ClipHigh, cfg.Beta, cfg.KL, c.withTIS), func(t *testing.T) {
			var s tensor.Scope
			defer s.Close()
			lc := newLossCase(rand.New(rand.NewSource(7)), c.withTIS, cfg)
			loss, grad, st := lc.run(t, &s, cfg)
			want := slowPolicyLoss(lc, cfg)
			var wantLoss, wantClip, wantRatio, wantKL float64
			sawClip, sawFree := false, false
			var perToken, noStopGrad float64 // how far the two mistakes would land
			sawLow := false                  // CISPO's lower bound active
			for i := range want.loss {
				w := lc.w[i]
				wantLoss += w * want.loss[i]
				wantRatio += w * want.ratio[i]
				wantKL += w * want.kl[i]
				if want.clipped[i] {
					wantClip += w
				}
				if w > 0 {
					sawClip = sawClip || want.clipped[i]
					sawFree = sawFree || !want.clipped[i]
				}
				if math.Abs(grad[i]-w*want.dLoss[i]) > 1e-12 {
					t.Fatalf("token %d (row %d): grad %v want %v", i, i/lc.t, grad[i], w*want.dLoss[i])
				}
				if w == 0 {
					continue
				}
				a, lp := lc.adv[i/lc.t], lc.logp[i]
				switch cfg.Kind {
				case LossGSPO:
					// The surrogate with the token's π/π_old in place of s_i.
					l, _, _ := slowClip(math.Exp(lp-lc.old[i]), a, cfg)
					perToken += w * math.Abs(l-want.pg[i])
				case LossCISPO:
					// Without sg the weight's own derivative joins in:
					// d(−clip(ρ)·A·log π)/d log π = −A·(clip(ρ) + ρ·log π) inside the range.
					if !want.clipped[i] {
						noStopGrad = math.Max(noStopGrad, math.Abs(w*tisOf(lc, i)*a*want.ratio[i]*lp))
					}
					sawLow = sawLow || want.ratio[i] < 1-cfg.ClipLow
				}
			}
			if !sawClip || !sawFree {
				t.Fatal("the case must exercise both the clipped and the unclipped branch")
			}
			if cfg.Kind == LossGSPO && perToken < 1e-6 {
				t.Fatalf("a per-token ratio would change the loss by only %g: the case does not test GSPO", perToken)
			}
			if cfg.Kind == LossCISPO && cfg.ClipLow < 1 && !sawLow {
				t.Fatal("the case must exercise CISPO's lower bound")
			}
			if cfg.Kind == LossCISPO && noStopGrad < 1e-6 {
				t.Fatalf("dropping the stop-gradient would move the gradient by only %g: the case does not test CISPO", noStopGrad)
			}
			if math.Abs(loss-wantLoss) > 1e-12 {
				t.Fatalf("loss %v want %v", loss, wantLoss)
			}
			if math.Abs(st.ClipFrac-wantClip) > 1e-12 || math.Abs(st.Ratio-wantRatio) > 1e-12 || math.Abs(st.KL-wantKL) > 1e-12 {
				t.Fatalf("stats %+v want clip %v ratio %v kl %v", st, wantClip, wantRatio, wantKL)
			}
		})
	}
}

func tisOf(c lossCase, i int) float64 {
	if c.tis == nil {
		return 1
	}
	return c.tis[i]
}

// TestPolicyLossPPOKind: Kind "" and "ppo" are the same path, bit for bit
// (TestPolicyLossMatchesSlowReference checks it against the reference).
func TestPolicyLossPPOKind(t *testing.T) {
	lockThread(t)
	cfg := PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, Beta: 0.04, KL: KLK3}
	lc := newLossCase(rand.New(rand.NewSource(3)), true, cfg)
	var s tensor.Scope
	defer s.Close()
	loss0, grad0, st0 := lc.run(t, &s, cfg)
	cfg.Kind = LossPPO
	loss1, grad1, st1 := lc.run(t, &s, cfg)
	if math.Float64bits(loss0) != math.Float64bits(loss1) || st0 != st1 {
		t.Fatalf(`kind "": loss %v stats %+v; kind ppo: loss %v stats %+v`, loss0, st0, loss1, st1)
	}
	for i := range grad0 {
		if math.Float64bits(grad0[i]) != math.Float64bits(grad1[i]) {
			t.Fatalf("token %d: grad %v and %v", i, grad0[i], grad1[i])
		}
	}
}

// TestPolicyLossKindErrors: an unknown kind is named with the valid ones;
// GSPO without a response mask is refused rather than guessed.
func TestPolicyLossKindErrors(t *testing.T) {
	lockThread(t)
	lc := newLossCase(rand.New(rand.NewSource(1)), false, PolicyLossConfig{ClipHigh: 0.2})
	var s tensor.Scope
	defer s.Close()
	mk := func(v []float64, shape ...int64) *ts.Tensor { return tensor.FromSlice(&s, v, shape, gotch.CPU) }
	b, tt := int64(lc.b), int64(lc.t)
	in := PolicyLossInput{Logp: mk(lc.logp, b, tt), OldLogp: mk(lc.old, b, tt), Adv: mk(lc.adv, b, 1), Weight: mk(lc.w, b, tt)}
	_, _, err := PolicyLoss(&s, in, PolicyLossConfig{Kind: "gpso", ClipLow: 0.2, ClipHigh: 0.2})
	if err == nil {
		t.Fatal("unknown kind accepted")
	}
	for _, want := range []string{`"gpso"`, LossPPO, LossGSPO, LossCISPO} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
	if _, _, err := PolicyLoss(&s, in, PolicyLossConfig{Kind: LossGSPO, ClipLow: GSPOClipLow, ClipHigh: GSPOClipHigh}); err == nil || !strings.Contains(err.Error(), "mask") {
		t.Fatalf("gspo without a mask: %v", err)
	}
	if _, _, err := ClipDefaults("gpso"); err == nil || !strings.Contains(err.Error(), `"gpso"`) {
		t.Fatalf("ClipDefaults of an unknown kind: %v", err)
	}
}

func TestClipDefaults(t *testing.T) {
	for _, c := range []struct {
		kind      string
		low, high float64
	}{
		{"", 0.2, 0.28}, {LossPPO, 0.2, 0.28}, {LossGSPO, 3e-4, 4e-4}, {LossCISPO, 1, 0.2},
	} {
		low, high, err := ClipDefaults(c.kind)
		if err != nil || low != c.low || high != c.high {
			t.Fatalf("%q: %v, %v, %v; want %v, %v", c.kind, low, high, err, c.low, c.high)
		}
	}
}
