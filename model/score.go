package model

import (
	"fmt"
	"slices"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// CheckIDs reports why a token sequence cannot go through the model: empty,
// an id outside the vocabulary, or longer than max_position_embeddings.
func (m *Model) CheckIDs(ids []int64) error {
	if len(ids) == 0 {
		return fmt.Errorf("no token ids")
	}
	for i, id := range ids {
		if id < 0 || id >= m.Config.VocabSize {
			return fmt.Errorf("token id %d at index %d is outside the vocabulary [0, %d)", id, i, m.Config.VocabSize)
		}
	}
	if mp := m.Config.MaxPositionEmbeddings; mp > 0 && int64(len(ids)) > mp {
		return fmt.Errorf("%d tokens exceed max_position_embeddings %d", len(ids), mp)
	}
	return nil
}

// Score returns, for each sequence, log p(ids[i] | ids[<i]) for i ≥ 1 (so
// len(ids)−1 values), computed for the whole batch at once with left
// padding, through the fused log-prob op.
func (m *Model) Score(seqs [][]int64) (out [][]float32, err error) {
	defer tensor.Recover("score", &err)
	for i, ids := range seqs {
		if err := m.CheckIDs(ids); err != nil {
			return nil, fmt.Errorf("sequence %d: %w", i, err)
		}
	}
	var s tensor.Scope
	defer s.Close()
	l, ids, pos, mask := m.leftPad(&s, seqs)
	targets := make([]int64, l.b*l.t)
	tmask := make([]bool, l.b*l.t)
	for r, seq := range seqs {
		for j := 0; j+1 < len(seq); j++ {
			k := l.at(r, j)
			targets[k], tmask[k] = seq[j+1], true
		}
	}
	shape := []int64{l.b, l.t}
	lp, _, err := m.TokenLogProbs(&s, ids, pos, l.attention(mask), tensor.FromSlice(&s, targets, shape, m.Device),
		tensor.FromSlice(&s, tmask, shape, m.Device), csrc.LogProbOptions{})
	if err != nil {
		return nil, err
	}
	vals := tensor.Float64s(lp)
	for r, seq := range seqs {
		row := make([]float32, len(seq)-1)
		for j := range row {
			row[j] = float32(vals[l.at(r, j)])
		}
		out = append(out, row)
	}
	return out, nil
}

// NextTokenLogProbs returns, for each prompt, log p(t | prompt) of each of
// the given tokens at the position after the prompt (softmax over the whole
// vocabulary, fp32): one forward pass per batch of at most batch prompts,
// no generation. LANPO's relevance rating reads the policy's probabilities
// of the digits 0-9 with it. Never differentiable.
func (m *Model) NextTokenLogProbs(prompts [][]int64, tokens []int64, batch int) (out [][]float64, err error) {
	defer tensor.Recover("next-token log-probs", &err)
	for i, ids := range prompts {
		if err := m.CheckIDs(ids); err != nil {
			return nil, fmt.Errorf("prompt %d: %w", i, err)
		}
	}
	if err := m.CheckIDs(tokens); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	out = make([][]float64, len(prompts))
	err = csrc.NoGrad(func() error {
		for _, part := range byLength(prompts, batch) {
			seqs := make([][]int64, len(part))
			for r, i := range part {
				seqs[r] = prompts[i]
			}
			var s tensor.Scope
			l, ids, pos, mask := m.leftPad(&s, seqs)
			h, err := m.Forward(&s, ids, pos, l.attention(mask), nil)
			if err != nil {
				s.Close()
				return err
			}
			last := s.Keep(s.Keep(h.MustNarrow(1, l.t-1, 1, false)).MustSqueezeDim(1, false)) // [b, H]
			lp := s.Keep(m.Logits(&s, last).MustLogSoftmax(-1, gotch.Float, false))           // [b, V]
			idx := tensor.FromSlice(&s, tokens, nil, m.Device)
			vals := tensor.Float64s(s.Keep(lp.MustIndexSelect(1, idx, false))) // sync: [b, K]
			for r, i := range part {
				out[i] = vals[r*len(tokens) : (r+1)*len(tokens)]
			}
			s.Close()
		}
		return nil
	})
	return out, err
}

// MeanHidden returns, for each sequence, the mean of its final hidden
// states (after the last norm) over its tokens, in fp32: a text embedding
// from the model itself, batch sequences per forward pass. Never
// differentiable.
func (m *Model) MeanHidden(seqs [][]int64, batch int) (out [][]float32, err error) {
	defer tensor.Recover("mean hidden states", &err)
	for i, ids := range seqs {
		if err := m.CheckIDs(ids); err != nil {
			return nil, fmt.Errorf("sequence %d: %w", i, err)
		}
	}
	out = make([][]float32, len(seqs))
	err = csrc.NoGrad(func() error {
		for _, part := range byLength(seqs, batch) {
			group := make([][]int64, len(part))
			for r, i := range part {
				group[r] = seqs[i]
			}
			var s tensor.Scope
			l, ids, pos, mask := m.leftPad(&s, group)
			h, err := m.Forward(&s, ids, pos, l.attention(mask), nil)
			if err != nil {
				s.Close()
				return err
			}
			h32 := s.Keep(h.MustTotype(gotch.Float, false))
			w := s.Keep(s.Keep(mask.MustTotype(gotch.Float, false)).MustUnsqueeze(-1, false))                     // [b, T, 1]
			sum := s.Keep(s.Keep(h32.MustMul(w, false)).MustSumDimIntlist([]int64{1}, false, gotch.Float, false)) // [b, H]
			vals := tensor.Float64s(sum)                                                                          // sync
			hs := int(m.Config.HiddenSize)
			for r, i := range part {
				v := make([]float32, hs)
				for j := range v {
					v[j] = float32(vals[r*hs+j] / float64(len(seqs[i])))
				}
				out[i] = v
			}
			s.Close()
		}
		return nil
	})
	return out, err
}

// byLength groups the indexes of seqs into batches of at most size whose
// members have similar lengths (sorted, stable): left padding to a
// batch's longest sequence then wastes little compute.
func byLength(seqs [][]int64, size int) [][]int {
	order := make([]int, len(seqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(seqs[a]) - len(seqs[b]) })
	return slices.Collect(slices.Chunk(order, max(size, 1)))
}
