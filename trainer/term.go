package trainer

import "github.com/lanpo-rl/lanpo/rl"

// updateTerm is the GRPO step's second seam, beside Explorer: what a
// method adds to the update. Explorer changes what the policy sees while
// exploring; an updateTerm adds rows to the update and a term to its loss —
// LANPO's consolidation (consolidate.go), SDPO's distillation toward a
// feedback-conditioned teacher (sdpo.go), Critique-GRPO's refinements
// (critique.go). A run has at most one. The step calls it in this order:
//
//	collect (rollout, reward, filter) → rows → train: the policy's
//	micro-batches, then microBatch over the rows, in the same optimizer
//	step; after each optimizer step, stepped
//
// Its rows are *rollout values the term makes (a prompt, response ids and
// whatever its loss reads); the update splits them into micro-batches as
// it does the policy's, so every rank issues the same backward passes.
type updateTerm interface {
	// rows runs once per step, after the step's rollouts are scored and
	// filtered. sampled is every rollout this rank sampled (every round,
	// kept or not), kept those the policy loss trains on. It returns this
	// rank's rows and their totals over every rank; it may also return
	// another kept (Critique-GRPO puts refinements into groups, which
	// changes the groups' advantages and which groups have any).
	rows(step int, kept, sampled []*rollout, ph rl.Phases) (newKept, rows []*rollout, tot termRows, err error)
	// policyScale multiplies the policy loss's token weights (1: the
	// policy loss as GRPO has it).
	policyScale() float64
	// microBatch runs one micro-batch of rows: forward, its loss, backward
	// (gradients accumulate with the policy's). The loss it returns is
	// weighted by the global batch, so the ranks' sum is the term's loss.
	microBatch(mb []*rollout, first int, tot termRows) (microResult, error)
	// stepped runs after each optimizer step that updated the policy.
	stepped() error
	// metrics puts the term's figures into the step's: tot as rows
	// returned it, loss the term's loss and extra its micro-batches' extra
	// sums (first epoch, summed over ranks), policyTokens the policy loss's
	// tokens over every rank.
	metrics(met *StepMetrics, tot termRows, loss float64, extra []float64, policyTokens int)
}

// termRows are a term's rows over every rank.
type termRows struct {
	rows   int // rows
	tokens int // their response tokens
	// joinPolicy: the rows are normalized with the policy's (algo.loss_agg_mode
	// over both): update sets their weight as for the policy's rows, and
	// their loss adds to the policy's.
	joinPolicy bool
	// extra is how many sums beside the loss each of the term's
	// micro-batches returns (microResult.extra): the update adds them up
	// over micro-batches and ranks for metrics, so a term needs no
	// collective of its own for its figures.
	extra int
}

// newTerm is the run's update term (nil: none).
func (g *grpoRun) newTerm() (updateTerm, error) {
	switch {
	case g.cfg.Algo.Name == AlgoSDPO:
		return newSDPO(g)
	case g.cfg.Algo.Name == AlgoCritique:
		return newCritique(g)
	case g.explorer != nil && g.cfg.LANPO.Consolidate > 0:
		return &consolidation{g: g}, nil
	}
	return nil, nil
}
