package model

import (
	"fmt"

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
	lp, _, err := m.TokenLogProbs(&s, ids, pos, mask, tensor.FromSlice(&s, targets, shape, m.Device),
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
