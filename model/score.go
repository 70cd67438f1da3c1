package model

import (
	"fmt"

	"github.com/sugarme/gotch/ts"

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
	defer recoverTorch("score", &err)
	var tmax int64
	for i, ids := range seqs {
		if err := m.CheckIDs(ids); err != nil {
			return nil, fmt.Errorf("sequence %d: %w", i, err)
		}
		tmax = max(tmax, int64(len(ids)))
	}
	b := int64(len(seqs))
	ids := make([]int64, b*tmax)
	pos := make([]int64, b*tmax)
	mask := make([]int64, b*tmax)
	targets := make([]int64, b*tmax)
	tmask := make([]bool, b*tmax)
	for r, seq := range seqs {
		pad := tmax - int64(len(seq))
		for j, id := range seq {
			k := int64(r)*tmax + pad + int64(j)
			ids[k], pos[k], mask[k] = id, int64(j), 1
			if j+1 < len(seq) {
				targets[k], tmask[k] = seq[j+1], true
			}
		}
	}
	var s tensor.Scope
	defer s.Close()
	shape := []int64{b, tmax}
	mk := func(v any) *ts.Tensor {
		return s.Keep(s.Keep(s.Keep(ts.MustOfSlice(v)).MustView(shape, false)).MustTo(m.Device, false))
	}
	lp, _, err := m.TokenLogProbs(&s, mk(ids), mk(pos), mk(mask), mk(targets), mk(tmask), csrc.LogProbOptions{})
	if err != nil {
		return nil, err
	}
	vals := tensor.Float64s(lp)
	for r, seq := range seqs {
		pad := tmax - int64(len(seq))
		row := make([]float32, len(seq)-1)
		for j := range row {
			row[j] = float32(vals[int64(r)*tmax+pad+int64(j)])
		}
		out = append(out, row)
	}
	return out, nil
}
