package trainer

import (
	"slices"
	"sort"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// batch is one micro-batch of prompt+response sequences, right-padded to
// T: row i holds prompt then response; the targets at response positions
// are the response tokens (position t predicts token t+1). Every row starts
// at column 0, so causal attention alone is exact for its tokens: the model
// gets no attention mask (and SDPA runs its causal kernel).
type batch struct {
	ids, pos         *ts.Tensor // [B, T] int64
	targets, tmask   *ts.Tensor // [B, T] int64, bool
	tmaskF           *ts.Tensor // [B, T] float64
	old, ref, weight *ts.Tensor // [B, T] float64 (ref nil without reference log-probs)
	tis              *ts.Tensor // [B, T] float64 importance weights, nil when every rollout is on-policy
	adv              *ts.Tensor // [B, 1] float64
	t                int64
	starts           []int // first target position of each row's response
}

// buildBatch lays out rolls, each token weighted by its rollout's weight
// (0 when only log-probs are wanted).
func buildBatch(s *tensor.Scope, dev gotch.Device, rolls []*rollout) *batch {
	b := &batch{}
	for _, r := range rolls {
		b.t = max(b.t, int64(len(r.promptIDs)+len(r.ids)))
	}
	n := int64(len(rolls)) * b.t
	ids, pos, targets := make([]int64, n), make([]int64, n), make([]int64, n)
	tmask := make([]bool, n)
	tmaskF, old, ref, w := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	adv := make([]float64, len(rolls))
	hasRef, hasTIS := true, false
	for _, r := range rolls {
		hasTIS = hasTIS || r.tis != nil
	}
	var tis []float64
	if hasTIS {
		tis = make([]float64, n)
	}
	for i, r := range rolls {
		row := int64(i) * b.t
		seq := append(append([]int64(nil), r.promptIDs...), r.ids...)
		for j, id := range seq {
			ids[row+int64(j)], pos[row+int64(j)] = id, int64(j)
		}
		start := len(r.promptIDs) - 1
		b.starts = append(b.starts, start)
		own := sampledMask(len(r.ids), r.appended)
		for k := range r.ids {
			if own != nil && !own[k] {
				continue // a tool's output: input, never a target (no loss, KL, entropy or weight)
			}
			at := row + int64(start+k)
			targets[at], tmask[at], tmaskF[at], old[at] = r.ids[k], true, 1, r.oldLogp[k]
			w[at] = r.weight
			if r.refLogp != nil {
				ref[at] = r.refLogp[k]
			}
			if hasTIS {
				tis[at] = 1
				if r.tis != nil {
					tis[at] = float64(r.tis[k])
				}
			}
		}
		if r.refLogp == nil {
			hasRef = false
		}
		adv[i] = r.adv
	}
	shape := []int64{int64(len(rolls)), b.t}
	b.ids = tensor.FromSlice(s, ids, shape, dev)
	b.pos = tensor.FromSlice(s, pos, shape, dev)
	b.targets = tensor.FromSlice(s, targets, shape, dev)
	b.tmask = tensor.FromSlice(s, tmask, shape, dev)
	b.tmaskF = tensor.FromSlice(s, tmaskF, shape, dev)
	b.old = tensor.FromSlice(s, old, shape, dev)
	b.weight = tensor.FromSlice(s, w, shape, dev)
	b.adv = tensor.FromSlice(s, adv, []int64{int64(len(rolls)), 1}, dev)
	if hasRef {
		b.ref = tensor.FromSlice(s, ref, shape, dev)
	}
	if hasTIS {
		b.tis = tensor.FromSlice(s, tis, shape, dev)
	}
	return b
}

// gather returns row i's values at its n response positions.
func (b *batch) gather(vals []float64, i, n int) []float64 {
	out := make([]float64, n)
	row := i * int(b.t)
	for k := range out {
		out[k] = vals[row+b.starts[i]+k]
	}
	return out
}

// packByTokens splits items with the given lengths into micro-batches whose
// padded size (rows × the longest row) stays within budget tokens: items
// sorted longest first, each batch filled while it fits. Short items then
// share batches with short ones, so little compute goes to padding; an item
// longer than the budget gets a batch of its own. It returns the items'
// indexes per batch. The loss does not depend on the split: every token's
// weight is fixed for the whole step.
func packByTokens(lengths []int, budget int) [][]int {
	order := make([]int, len(lengths))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lengths[order[a]] > lengths[order[b]] })
	var out [][]int
	for _, i := range order {
		if n := len(out); n > 0 {
			last := out[n-1]
			longest := lengths[last[0]] // sorted: the first is the longest
			if (len(last)+1)*longest <= budget {
				out[n-1] = append(last, i)
				continue
			}
		}
		out = append(out, []int{i})
	}
	return out
}

// splitMicroBatches splits items into micro-batches: size each, or, with
// budget > 0, packed by length (packByTokens) under budget padded tokens.
// SFT's examples and the GRPO update's rollouts both go through it.
func splitMicroBatches[T any](items []T, size, budget int, length func(T) int) [][]T {
	if budget <= 0 {
		return slices.Collect(slices.Chunk(items, size))
	}
	lengths := make([]int, len(items))
	for i, x := range items {
		lengths[i] = length(x)
	}
	var out [][]T
	for _, idx := range packByTokens(lengths, budget) {
		mb := make([]T, len(idx))
		for j, i := range idx {
			mb[j] = items[i]
		}
		out = append(out, mb)
	}
	return out
}
