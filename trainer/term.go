package trainer

import (
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/tools"
)

// updateTerm is the GRPO step's second seam, beside Explorer: what a
// method adds to the update. Explorer changes what the policy sees while
// exploring; an updateTerm adds rows to the update and a term to its loss
// (LANPO's consolidation in consolidate.go; each other method's in its own
// file). A run has at most one; its method's row (method.go) builds it
// with a termView, all it sees of the run. The step calls it in
// this order:
//
//	collect (rollout, reward, filter) → rows (the step sums their
//	totals over every rank) → train: the policy's micro-batches, then
//	microBatch over the rows, in the same optimizer step; after each
//	optimizer step, stepped → metrics
//
// Its rows are *rollout values the term makes (a prompt, response ids and
// whatever its loss reads); the update splits them into micro-batches as
// it does the policy's, so every rank issues the same backward passes. A
// term issues no collective: what it needs over every rank (its rows'
// totals, its metrics' sums) the step and the update sum for it.
type updateTerm interface {
	// rows runs once per step, after the step's rollouts are scored and
	// filtered. sampled is every rollout this rank sampled (every round,
	// kept or not), kept those the policy loss trains on. It returns this
	// rank's rows and their totals on this rank (rows, tokens and any sums
	// of its own, which the step adds up over every rank); it may also
	// return another kept (a term that puts new rows into groups,
	// which changes the groups' advantages and which groups have any).
	rows(step int, kept, sampled []*rollout, ph rl.Phases) (newKept, rows []*rollout, mine termRows, err error)
	// policyScale multiplies the policy loss's token weights (1: the
	// policy loss as GRPO has it).
	policyScale() float64
	// microBatch runs one micro-batch of rows through termView.micro:
	// forward, its loss, backward (gradients accumulate with the
	// policy's). The loss it returns is weighted by the global batch, so
	// the ranks' sum is the term's loss.
	microBatch(mb []*rollout, first int, tot termRows) (microResult, error)
	// stepped runs after each optimizer step that updated the policy.
	stepped() error
	// metrics is the term's figures for the step's line: a struct whose
	// JSON object's members join it (as an explorer's do). tot is the
	// rows' totals over every rank, loss the term's loss and extra its
	// micro-batches' extra sums (first epoch, summed over ranks),
	// policyTokens the policy loss's tokens over every rank.
	metrics(tot termRows, loss float64, extra []float64, policyTokens int) any
	// close frees what the term holds (a teacher model).
	close()
}

// termRows are a term's rows: their count and response tokens, and the
// term's own sums (its metrics' counts), on one rank as rows returns
// them and over every rank as the step passes them on.
type termRows struct {
	rows   int // rows
	tokens int // their response tokens
	sums   []float64
	// joinPolicy: the rows are normalized with the policy's (algo.loss_agg_mode
	// over both): update sets their weight as for the policy's rows, and
	// their loss adds to the policy's.
	joinPolicy bool
	// extra is how many sums beside the loss each of the term's
	// micro-batches returns (microResult.extra): the update adds them up
	// over micro-batches and ranks for metrics.
	extra int
}

// sum is the term's own sum i (0 when it gave none).
func (t termRows) sum(i int) float64 {
	if i < len(t.sums) {
		return t.sums[i]
	}
	return 0
}

// termView is what an update term sees of the run: the config, the
// policy and its tokenizer, the problems with their bare prompts, and the
// step's services.
type termView struct {
	cfg      *Config
	m        *model.Model
	tk       *tokenizer.Tokenizer
	problems []Problem
	prompts  [][]int64 // each problem's bare prompt ids
	// resumedFrom is the checkpoint the run resumed from ("": a fresh
	// start), for a term's own state.
	resumedFrom string
	step        stepServices
}

// stepServices are the step's machinery a term calls (grpoRun's).
type stepServices interface {
	// micro runs one micro-batch: its batch, loss (forward included) and
	// backward, with the trained tokens counted and errors placed (what:
	// "consolidation micro-batch at response", …).
	micro(what string, mb []*rollout, first int, loss lossFunc) (microResult, error)
	// logProbs is the policy's log-probs of a batch for the update (with
	// activation checkpointing when configured: the Checkpointed then
	// finishes the backward).
	logProbs(s *tensor.Scope, b *batch, opt csrc.LogProbOptions) (lp, ent *ts.Tensor, c *model.Checkpointed, err error)
	microBatches(rows []*rollout) [][]*rollout
	// fitsContext: a sequence of n tokens fits the model's context.
	fitsContext(n int) bool
	// generate samples with the rollout's settings (maxNew tokens, the
	// draw keyed by seed).
	generate(reqs []model.Request, streams []int, maxNew int, seed uint64) ([]model.Sample, error)
	// trajectories is generate through the run's tools, when it has them
	// (grpoRun.trajectories).
	trajectories(reqs []model.Request, streams []int, maxNew int, seed uint64) ([]model.Sample, []tools.Trajectory, error)
	// score scores rollouts as the step's own (the run's reward kind).
	score(rolls []*rollout) error
	// spanOf is the run's diagnostic span in a response (nil: none).
	spanOf(problem int, ids []int64) []bool
	// countTrained adds tokens of a trainer forward outside micro.
	countTrained(mb []*rollout) int
	// prefilled counts n prompt tokens prefilled outside generate.
	prefilled(n int)
}

// lossFunc is a micro-batch's loss: from its batch b (in scope s), the
// scalar loss to backpropagate and the Checkpointed that finishes the
// backward (nil: none); it may fill r's extra sums.
type lossFunc func(s *tensor.Scope, b *batch, r *microResult) (loss *ts.Tensor, ckpt *model.Checkpointed, err error)

// view is the termView of the run.
func (g *grpoRun) view() termView {
	return termView{cfg: &g.cfg, m: g.m, tk: g.tk, problems: g.problems, prompts: g.prompts, resumedFrom: g.resumedFrom, step: g}
}
