package trainer

import (
	"fmt"
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// GRPO's pieces, one function each (after verl's core_algos, shapes in the
// comments). The slow readable versions in grpo_test.go are the reference
// these are tested against.

// Advantages returns each rollout's advantage from the rewards of its group
// (rewards[g][i]: sample i of prompt g): r − mean(group), divided by the
// group's standard deviation + eps unless noStd (Dr. GRPO drops the std
// because it weights easy and hard prompts unequally). A group whose
// rewards are all equal gets zeros.
func Advantages(rewards [][]float64, noStd bool, eps float64) [][]float64 {
	out := make([][]float64, len(rewards))
	for g, group := range rewards {
		var mean float64
		for _, r := range group {
			mean += r
		}
		mean /= float64(len(group))
		var ss float64
		for _, r := range group {
			ss += (r - mean) * (r - mean)
		}
		// Unbiased std, as torch.std and the GRPO paper's implementations.
		std := 0.0
		if len(group) > 1 {
			std = math.Sqrt(ss / float64(len(group)-1))
		}
		out[g] = make([]float64, len(group))
		for i, r := range group {
			a := r - mean
			if !noStd {
				a /= std + eps
			}
			out[g][i] = a
		}
	}
	return out
}

// KL estimators of KL(π‖π_ref) per token, from log π and log π_ref
// (Schulman, "Approximating KL divergence", 2020).
const (
	KLK1 = "k1" // log π − log π_ref: unbiased, high variance, can be negative
	KLK2 = "k2" // ½ (log π − log π_ref)²
	KLK3 = "k3" // π_ref/π − log(π_ref/π) − 1: unbiased and ≥ 0 (GRPO paper)
)

// Loss aggregation modes: how per-token losses become one number. The
// per-token weights they imply are computed once for the whole global batch
// (TokenWeights), so any split into micro-batches gives the same gradient.
const (
	AggTokenMean           = "token-mean"              // Σ_tokens ℓ / #tokens (DAPO)
	AggSeqMeanTokenMean    = "seq-mean-token-mean"     // mean_seq (Σ_t ℓ / len_seq) (GRPO paper)
	AggSeqMeanTokenSumNorm = "seq-mean-token-sum-norm" // Σ_tokens ℓ / (#seqs · L) (Dr. GRPO)
)

// TokenWeights returns, for each sequence of the global batch with the
// given response lengths, the weight of each of its tokens under mode;
// maxLen is L of seq-mean-token-sum-norm (the generation budget). A
// sequence with masked[i] (overlong filtering; masked may be nil) gets
// weight 0 and leaves the normalizer, as in DAPO and verl:
//
//	token-mean               1 / (response tokens of the unmasked sequences)
//	seq-mean-token-mean      1 / (len_i · number of unmasked sequences)
//	seq-mean-token-sum-norm  1 / (number of unmasked sequences · L)
//
// When every sequence is masked, every weight is 0: the step has no loss.
func TokenWeights(lengths []int, masked []bool, mode string, maxLen int) ([]float64, error) {
	tokens, seqs := normalizer(lengths, masked)
	return tokenWeights(lengths, masked, mode, maxLen, tokens, seqs)
}

// normalizer counts the response tokens and sequences that are not masked.
func normalizer(lengths []int, masked []bool) (tokens, seqs int) {
	for i, n := range lengths {
		if masked == nil || !masked[i] {
			tokens += n
			seqs++
		}
	}
	return tokens, seqs
}

// tokenWeights is TokenWeights for part of a global batch whose unmasked
// sequences hold tokens response tokens in seqs sequences (a rank's share
// of a data-parallel step).
func tokenWeights(lengths []int, masked []bool, mode string, maxLen, tokens, seqs int) ([]float64, error) {
	switch mode {
	case AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm:
	default:
		return nil, fmt.Errorf("loss_agg_mode %q: want %s, %s or %s", mode, AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm)
	}
	kept := func(i int) bool { return masked == nil || !masked[i] }
	w := make([]float64, len(lengths))
	for i, n := range lengths {
		switch {
		case !kept(i):
		case mode == AggTokenMean && tokens > 0:
			w[i] = 1 / float64(tokens)
		case mode == AggSeqMeanTokenMean && n > 0:
			w[i] = 1 / (float64(n) * float64(seqs))
		case mode == AggSeqMeanTokenSumNorm:
			w[i] = 1 / (float64(seqs) * float64(maxLen))
		}
	}
	return w, nil
}

// PolicyLossInput is one micro-batch, every tensor [B, T] except adv [B, 1].
type PolicyLossInput struct {
	Logp    *ts.Tensor // log π_θ(token), differentiable
	OldLogp *ts.Tensor // log π_old(token): the sampler's record
	RefLogp *ts.Tensor // log π_ref(token); nil when Beta = 0
	Adv     *ts.Tensor // advantage of the sequence
	Weight  *ts.Tensor // aggregation weight of each token (0 on padding and prompt)
	// TIS is each token's truncated importance weight (detached) when the
	// behaviour policy differs from π_old (LANPO's original-prompt
	// training); nil: all 1.
	TIS *ts.Tensor
	// Mask is 1 on each row's response tokens and 0 on its prompt and
	// padding (batch.tmaskF), trained or not. Only GSPO reads it: its
	// ratio is a mean over the response, whose length is a property of
	// the sequence, not of how the loss is aggregated (Weight).
	Mask *ts.Tensor
}

// PolicyLossConfig are the surrogate, clipping and KL settings.
type PolicyLossConfig struct {
	Kind              string  // LossPPO ("" too), LossGSPO or LossCISPO (loss_variants.go)
	ClipLow, ClipHigh float64 // ε_low, ε_high (clip-higher when ε_high > ε_low)
	Beta              float64 // KL coefficient; 0 skips the reference
	KL                string  // KLK1, KLK2 or KLK3
}

// PolicyLossStats are the micro-batch's contributions to the step metrics,
// already weighted like the loss, so they add up over micro-batches.
type PolicyLossStats struct {
	ClipFrac float64 // weighted fraction of tokens where the clip decides (GSPO: whose sequence is clipped)
	KL       float64 // weighted mean KL estimate
	Ratio    float64 // weighted mean π/π_old (GSPO: of the sequence ratio s)
}

// PolicyLoss is the policy surrogate of cfg.Kind (PPO's clipped surrogate,
// GSPO's or CISPO's: loss_variants.go) with an optional KL penalty, summed
// with the token weights: Σ w·tis·(ℓ + β·kl), tis = 1 unless given; for PPO
// ℓ = max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high)). It returns the scalar loss
// (differentiable) and its statistics (one host read: sync).
func PolicyLoss(s *tensor.Scope, in PolicyLossInput, cfg PolicyLossConfig) (*ts.Tensor, PolicyLossStats, error) {
	var pg surrogate
	switch cfg.Kind {
	case LossPPO, "":
		pg = ppoSurrogate(s, in, cfg)
	case LossGSPO:
		if in.Mask == nil {
			return nil, PolicyLossStats{}, fmt.Errorf("policy loss %s: needs the response mask (PolicyLossInput.Mask)", cfg.Kind)
		}
		pg = gspoSurrogate(s, in, cfg)
	case LossCISPO:
		pg = cispoSurrogate(s, in, cfg)
	default:
		return nil, PolicyLossStats{}, unknownKind(cfg.Kind)
	}

	tokenLoss := pg.loss
	var kl *ts.Tensor
	if cfg.Beta != 0 {
		if in.RefLogp == nil {
			return nil, PolicyLossStats{}, fmt.Errorf("policy loss: beta %g needs reference log-probs", cfg.Beta)
		}
		var err error
		if kl, err = klEstimate(s, in.Logp, in.RefLogp, cfg.KL); err != nil {
			return nil, PolicyLossStats{}, err
		}
		tokenLoss = s.Keep(pg.loss.MustAdd(s.Keep(kl.MustMulScalar(s.Float(cfg.Beta), false)), false))
	}
	if in.TIS != nil {
		// The whole token loss is an expectation under the policy that the
		// update conditions on, estimated from samples of another.
		tokenLoss = s.Keep(tokenLoss.MustMul(in.TIS, false))
	}
	loss := s.Keep(s.Keep(tokenLoss.MustMul(in.Weight, false)).MustSum(tokenLoss.DType(), false))

	// Statistics, detached, read once.
	weighted := func(x *ts.Tensor) *ts.Tensor {
		d := s.Keep(x.MustDetach(false))
		return s.Keep(s.Keep(d.MustMul(in.Weight, false)).MustSum(gotch.Double, false))
	}
	parts := []*ts.Tensor{weighted(pg.clipUsed), weighted(pg.ratio)}
	if kl != nil {
		parts = append(parts, weighted(kl))
	}
	vals := tensor.Float64s(s.Keep(ts.MustStack(parts, 0))) // sync: one read per micro-batch
	st := PolicyLossStats{ClipFrac: vals[0], Ratio: vals[1]}
	if kl != nil {
		st.KL = vals[2]
	}
	return loss, st, nil
}

// surrogate is a policy loss's per-token part [B, T], before the KL
// penalty, TIS and the aggregation weights.
type surrogate struct {
	loss     *ts.Tensor // ℓ, differentiable
	clipUsed *ts.Tensor // 1 where the clip decides, 0 elsewhere (Weight's dtype)
	ratio    *ts.Tensor // the importance ratio the clip acts on (statistics only)
}

// ppoSurrogate is PPO's clipped surrogate per token, ρ = π/π_old:
// max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high)).
func ppoSurrogate(s *tensor.Scope, in PolicyLossInput, cfg PolicyLossConfig) surrogate {
	logRatio := s.Keep(in.Logp.MustSub(in.OldLogp, false))
	// Clamp log-ratios before exp: a token whose probability moved by e^20
	// would overflow and its gradient is clipped anyway.
	logRatio = s.Keep(logRatio.MustClamp(s.Float(-20), s.Float(20), false))
	return clippedSurrogate(s, in, cfg, s.Keep(logRatio.MustExp(false)))
}

// clippedSurrogate is max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high)) for a ratio
// r [B, T] (PPO's token ratio, GSPO's sequence ratio), with where the clip
// decides.
func clippedSurrogate(s *tensor.Scope, in PolicyLossInput, cfg PolicyLossConfig, ratio *ts.Tensor) surrogate {
	negAdv := s.Keep(in.Adv.MustNeg(false))
	pgLoss1 := s.Keep(negAdv.MustMul(ratio, false))
	clipped := s.Keep(ratio.MustClamp(s.Float(1-cfg.ClipLow), s.Float(1+cfg.ClipHigh), false))
	pgLoss2 := s.Keep(negAdv.MustMul(clipped, false))
	pgLoss := s.Keep(pgLoss1.MustMaximum(pgLoss2, false))
	clipUsed := s.Keep(s.Keep(pgLoss2.MustGtTensor(pgLoss1, false)).MustTotype(in.Weight.DType(), false))
	return surrogate{loss: pgLoss, clipUsed: clipUsed, ratio: ratio}
}

// klEstimate returns the per-token KL estimate [B, T].
func klEstimate(s *tensor.Scope, logp, refLogp *ts.Tensor, kind string) (*ts.Tensor, error) {
	diff := s.Keep(logp.MustSub(refLogp, false)) // log π − log π_ref
	switch kind {
	case KLK1:
		return diff, nil
	case KLK2:
		return s.Keep(s.Keep(diff.MustSquare(false)).MustMulScalar(s.Float(0.5), false)), nil
	case KLK3, "":
		// r = π_ref/π = exp(−diff); k3 = r − log r − 1 = exp(−diff) + diff − 1.
		// Clamp so a token far off the reference cannot overflow.
		neg := s.Keep(s.Keep(diff.MustNeg(false)).MustClamp(s.Float(-20), s.Float(20), false))
		r := s.Keep(neg.MustExp(false))
		return s.Keep(s.Keep(r.MustSub(neg, false)).MustSubScalar(s.Float(1), false)), nil
	}
	return nil, fmt.Errorf("kl_estimator %q: want %s, %s or %s", kind, KLK1, KLK2, KLK3)
}
