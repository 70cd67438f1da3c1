package dist

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Data parallelism. Every rank holds the whole model and runs the same
// loop; a step's global batch (the prompts or SFT examples every rank
// draws alike from the shared data cursor) is cut into contiguous shares,
// one per rank (Share). Random streams are keyed by global indices, so a
// sample does not depend on the world size. What one rank cannot know
// alone — rewards and metrics of the whole batch, the loss normalizer,
// dynamic sampling's kept-group count, the pool's new entries — is
// all-gathered; each rank's loss is normalized by the global count, so
// gradients are summed over ranks (never averaged). Collectives are
// issued in the same order on every rank, from the run's one torch
// thread.

// Share is rank's contiguous part [lo, hi) of n items cut into size
// nearly equal parts (the first n mod size parts one longer).
func Share(n, rank, size int) (lo, hi int) {
	q, r := n/size, n%size
	lo = rank*q + min(rank, r)
	hi = lo + q
	if rank < r {
		hi++
	}
	return lo, hi
}

// GatherJSON all-gathers v from every rank, decoded into a slice indexed
// by rank.
func GatherJSON[T any](c Comm, v T) ([]T, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	parts, err := c.AllGatherBytes(b)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(parts))
	for i, p := range parts {
		if err := json.Unmarshal(p, &out[i]); err != nil {
			return nil, fmt.Errorf("rank %d's data: %w", i, err)
		}
	}
	return out, nil
}

// GatherOrdered all-gathers every rank's items and returns them all, on
// every rank, sorted by the global key (major, minor) — e.g. group and
// sample — so the result does not depend on which rank held what.
func GatherOrdered[T any](c Comm, mine []T, key func(T) (int, int)) ([]T, error) {
	parts, err := GatherJSON(c, mine)
	if err != nil {
		return nil, err
	}
	var all []T
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(a, b T) int {
		a1, a2 := key(a)
		b1, b2 := key(b)
		if a1 != b1 {
			return a1 - b1
		}
		return a2 - b2
	})
	return all, nil
}

// GatherFloats all-gathers a fixed-length vector from every rank (exact
// bits); sums and maxima are then taken in Go in rank order, so every rank
// gets the same bits.
func GatherFloats(c Comm, xs []float64) ([][]float64, error) {
	if c.Size() == 1 {
		return [][]float64{xs}, nil
	}
	all, err := AllGatherFloat64s(c, xs)
	if err != nil {
		return nil, err
	}
	for i, a := range all {
		if len(a) != len(xs) {
			return nil, fmt.Errorf("rank %d sent %d values, this rank %d: the ranks are out of step", i, len(a), len(xs))
		}
	}
	return all, nil
}

// SumFloats returns the element-wise sum over ranks of xs.
func SumFloats(c Comm, xs []float64) ([]float64, error) {
	all, err := GatherFloats(c, xs)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(xs))
	for _, a := range all {
		for i, x := range a {
			out[i] += x
		}
	}
	return out, nil
}

// MaxFloat returns the maximum over ranks of x.
func MaxFloat(c Comm, x float64) (float64, error) {
	if c.Size() == 1 {
		return x, nil
	}
	return AllReduceMaxFloat64(c, x)
}

// AnyRank reports whether flag is true on any rank.
func AnyRank(c Comm, flag bool) (bool, error) {
	if c.Size() == 1 {
		return flag, nil
	}
	v := 0.0
	if flag {
		v = 1
	}
	m, err := MaxFloat(c, v)
	return m > 0, err
}
