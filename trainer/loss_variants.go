package trainer

import (
	"fmt"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Policy-loss kinds beside PPO's clipped surrogate (ppoSurrogate in
// grpo.go), PolicyLossConfig.Kind. Each is a per-token surrogate ℓ [B, T];
// PolicyLoss adds the KL penalty, multiplies by TIS and sums with the
// aggregation weights the same way for every kind.
const (
	LossPPO   = "ppo"   // PPO's clipped token ratio (GRPO, DAPO); also ""
	LossGSPO  = "gspo"  // clipped sequence ratio (Zheng et al. 2025, arXiv 2507.18071)
	LossCISPO = "cispo" // clipped, detached token ratio weighting log π (MiniMax-M1, arXiv 2506.13585)
)

// Default clip ranges ε_low, ε_high of each kind.
const (
	// DAPO's clip-higher (arXiv 2503.14476), lanpo's default for PPO.
	PPOClipLow, PPOClipHigh = 0.2, 0.28
	// GSPO paper (arXiv 2507.18071 v2), sec. 5.1: 3e-4 and 4e-4, two
	// orders of magnitude below PPO's because the sequence ratio is a
	// geometric mean over the response and moves far less than a token's.
	// verl's recipe/gspo/test_gspo_3b_math.sh uses the same values.
	GSPOClipLow, GSPOClipHigh = 3e-4, 4e-4
	// MiniMax-M1 (arXiv 2506.13585), sec. 3.1, sets no lower bound on the
	// IS weight (ε_low "large") and tunes only ε_high, whose value it does
	// not publish. ε_low = 1 puts the lower bound at 0, below every ratio,
	// as verl's clip_ratio_low=10 does; ε_high = 0.2 is verl's
	// (examples/cispo_trainer/run_cispo_qwen2_5_0_5b_gsm8k.sh).
	CISPOClipLow, CISPOClipHigh = 1, 0.2
)

// ClipDefaults returns the default ε_low, ε_high of a policy-loss kind.
func ClipDefaults(kind string) (low, high float64, err error) {
	switch kind {
	case LossPPO, "":
		return PPOClipLow, PPOClipHigh, nil
	case LossGSPO:
		return GSPOClipLow, GSPOClipHigh, nil
	case LossCISPO:
		return CISPOClipLow, CISPOClipHigh, nil
	}
	return 0, 0, unknownKind(kind)
}

func unknownKind(kind string) error {
	return fmt.Errorf("policy loss kind %q: want %s (or empty), %s or %s", kind, LossPPO, LossGSPO, LossCISPO)
}

// gspoSurrogate is GSPO's clipped surrogate. The importance ratio is the
// whole response's, normalized by its length:
//
//	s_i = (π(y_i)/π_old(y_i))^(1/|y_i|) = exp(mean_t (log π(y_t) − log π_old(y_t)))
//
// over the tokens of in.Mask, clipped to [1−ε_low, 1+ε_high] once per
// sequence: a response whose likelihood moved too far is clipped as a
// whole. It is written in the paper's GSPO-token form,
//
//	s_{i,t} = sg[s_i] · π(y_t)/sg[π(y_t)],  ℓ_t = max(−A·s_{i,t}, −A·clip(s_{i,t}))
//
// whose value is s_i at every token and whose gradient is s_i·∇log π(y_t)
// (verl's compute_policy_loss_gspo does the same): under
// seq-mean-token-mean and without TIS the summed gradient is exactly
// GSPO's, s_i·A·(1/|y_i|)·Σ_t ∇log π(y_t). Other aggregation modes weight
// each sequence's (equal) token losses by their own weights instead, e.g.
// token-mean by its length.
//
// TIS multiplies ℓ_t per token (PolicyLoss), as under PPO: the sequence
// ratio corrects π_old → π, the truncated weights correct μ → π_old token by
// token and do not enter s_i. Each token's gradient s_i·∇log π(y_t) is then
// scaled by its own weight — where the token form and GSPO's sequence form
// part ways, the latter spreading the mean weight over every token.
func gspoSurrogate(s *tensor.Scope, in PolicyLossInput, cfg PolicyLossConfig) surrogate {
	// sg[log s_i] [B, 1]: the mean log-ratio over the response, all detached.
	logp := s.Keep(in.Logp.MustDetach(false))
	logRatio := s.Keep(s.Keep(logp.MustSub(in.OldLogp, false)).MustMul(in.Mask, false))
	sum := s.Keep(logRatio.MustSumDimIntlist([]int64{1}, true, logRatio.DType(), false))
	// A row with no response token (length 0) gets s = 1; its weights are 0.
	length := s.Keep(s.Keep(in.Mask.MustSumDimIntlist([]int64{1}, true, in.Mask.DType(), false)).MustClampMin(s.Float(1), false))
	seqLogRatio := s.Keep(sum.MustDiv(length, false))
	// Clamp before exp as in PPO; such a sequence is clipped anyway.
	seqLogRatio = s.Keep(seqLogRatio.MustClamp(s.Float(-20), s.Float(20), false))
	seqRatio := s.Keep(seqLogRatio.MustExp(false))
	// π(y_t)/sg[π(y_t)] = exp(log π − sg[log π]): 1 in value, gradient
	// ∇log π(y_t).
	tokenFactor := s.Keep(s.Keep(in.Logp.MustSub(logp, false)).MustExp(false))
	ratio := s.Keep(tokenFactor.MustMul(seqRatio, false)) // s_{i,t} [B, T]
	// Every token of a sequence has the same value of s and of A: the
	// clip decides for all of them or for none.
	return clippedSurrogate(s, in, cfg, ratio)
}

// cispoSurrogate is CISPO's surrogate (MiniMax-M1, arXiv 2506.13585, sec.
// 3.1): REINFORCE with a clipped, detached importance weight,
//
//	ℓ_t = −sg[clip(ρ_t, 1−ε_low, 1+ε_high)] · A · log π(y_t),  ρ_t = π(y_t)/π_old(y_t).
//
// Unlike PPO's, no token loses its gradient when the clip is active: the
// clip bounds the weight, −clip(ρ)·A·∇log π, not the update. That gradient
// is PPO's −A·∇ρ = −A·ρ·∇log π only where ρ = 1 and the clip is inactive;
// the loss value is not comparable with PPO's (it carries log π, not ρ).
func cispoSurrogate(s *tensor.Scope, in PolicyLossInput, cfg PolicyLossConfig) surrogate {
	// ρ from the detached log π: the stop-gradient is the point of CISPO.
	logp := s.Keep(in.Logp.MustDetach(false))
	logRatio := s.Keep(logp.MustSub(in.OldLogp, false))
	// Clamp before exp as in PPO: the weight of such a token is clipped.
	logRatio = s.Keep(logRatio.MustClamp(s.Float(-20), s.Float(20), false))
	ratio := s.Keep(logRatio.MustExp(false))
	isWeight := s.Keep(ratio.MustClamp(s.Float(1-cfg.ClipLow), s.Float(1+cfg.ClipHigh), false))
	negAdv := s.Keep(in.Adv.MustNeg(false))
	pgLoss := s.Keep(s.Keep(negAdv.MustMul(isWeight, false)).MustMul(in.Logp, false))
	clipUsed := s.Keep(s.Keep(isWeight.MustNeTensor(ratio, false)).MustTotype(in.Weight.DType(), false))
	return surrogate{loss: pgLoss, clipUsed: clipUsed, ratio: ratio}
}
