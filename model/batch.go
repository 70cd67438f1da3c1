package model

import (
	"slices"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// padLayout places sequences of different lengths in a [B, T] batch, each
// row left-padded to the longest.
type padLayout struct {
	b, t int64
	pads []int64 // left padding of each row
}

func newPadLayout(seqs [][]int64) padLayout {
	l := padLayout{b: int64(len(seqs))}
	for _, q := range seqs {
		l.t = max(l.t, int64(len(q)))
	}
	for _, q := range seqs {
		l.pads = append(l.pads, l.t-int64(len(q)))
	}
	return l
}

// attention is the mask to give Forward: mask, or nil when no row is
// padded (causal attention alone is then exact, and SDPA's causal kernel
// runs without a mask).
func (l padLayout) attention(mask *ts.Tensor) *ts.Tensor {
	if slices.ContainsFunc(l.pads, func(p int64) bool { return p > 0 }) {
		return mask
	}
	return nil
}

// at is the flat index of token j of row r.
func (l padLayout) at(r, j int) int64 { return int64(r)*l.t + l.pads[r] + int64(j) }

// leftPad builds ids, positions (0 at each row's first real token) and the
// attention mask [B, T] for seqs on the model's device, in s.
func (m *Model) leftPad(s *tensor.Scope, seqs [][]int64) (l padLayout, ids, pos, mask *ts.Tensor) {
	l = newPadLayout(seqs)
	n := l.b * l.t
	idv, posv, maskv := make([]int64, n), make([]int64, n), make([]int64, n)
	for r, q := range seqs {
		for j, id := range q {
			k := l.at(r, j)
			idv[k], posv[k], maskv[k] = id, int64(j), 1
		}
	}
	shape := []int64{l.b, l.t}
	return l, tensor.FromSlice(s, idv, shape, m.Device), tensor.FromSlice(s, posv, shape, m.Device), tensor.FromSlice(s, maskv, shape, m.Device)
}
