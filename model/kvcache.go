package model

import (
	"fmt"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// KVCache is a static key/value cache: per layer K and V of [B, Hkv, Tmax,
// D], allocated once and written in place, plus the key mask [B, Tmax]
// (1 for tokens, 0 for padding and unfilled slots). All rows advance
// together: Len positions are filled in every row (prompts of different
// lengths are left-padded).
type KVCache struct {
	K, V []*ts.Tensor
	Mask *ts.Tensor
	B    int64
	Tmax int64
	Len  int64
}

// NewKVCache allocates a cache for b rows of up to tmax positions.
func (m *Model) NewKVCache(b, tmax int64) (c *KVCache, err error) {
	defer tensor.Recover("allocate KV cache", &err)
	cfg := m.Config
	c = &KVCache{B: b, Tmax: tmax}
	shape := []int64{b, cfg.NumKeyValueHeads, tmax, cfg.HeadDim}
	for range m.Layers {
		c.K = append(c.K, ts.MustZeros(shape, m.DType, m.Device))
		c.V = append(c.V, ts.MustZeros(shape, m.DType, m.Device))
	}
	c.Mask = ts.MustZeros([]int64{b, tmax}, gotch.Int64, m.Device)
	return c, nil
}

// Bytes is the memory the cache holds.
func (c *KVCache) Bytes() int64 {
	var n int64
	for i := range c.K {
		n += 2 * int64(c.K[i].Numel()) * int64(c.K[i].DType().Size())
	}
	return n + int64(c.Mask.Numel())*8
}

// Reset empties the cache without freeing it.
func (c *KVCache) Reset() {
	c.Len = 0
	c.Mask.MustZero_()
}

// Close frees the cache.
func (c *KVCache) Close() {
	for i := range c.K {
		c.K[i].MustDrop()
		c.V[i].MustDrop()
	}
	c.Mask.MustDrop()
	c.K, c.V, c.Mask = nil, nil, nil
}

// CopyRows copies rows src[srcRows[i]] into c[dstRows[i]] for the first
// src.Len positions (a prompt prefilled once, fanned out to its G samples)
// and sets c.Len = src.Len. Rows of c not named keep their contents, so
// every row should be written before decoding continues.
func (c *KVCache) CopyRows(src *KVCache, srcRows, dstRows []int64) (err error) {
	defer tensor.Recover("copy KV cache rows", &err)
	if len(srcRows) != len(dstRows) || src.Len > c.Tmax || len(src.K) != len(c.K) {
		return fmt.Errorf("copy KV cache rows: %d source rows, %d destination rows, source length %d, capacity %d",
			len(srcRows), len(dstRows), src.Len, c.Tmax)
	}
	var s tensor.Scope
	defer s.Close()
	dev := c.Mask.MustDevice()
	from := tensor.FromSlice(&s, srcRows, nil, dev)
	to := tensor.FromSlice(&s, dstRows, nil, dev)
	rows := func(dst, srcT *ts.Tensor, dim int64) {
		part := s.Keep(s.Keep(srcT.MustNarrow(dim, 0, src.Len, false)).MustIndexSelect(0, from, false))
		s.Keep(dst.MustNarrow(dim, 0, src.Len, false)).MustIndexCopy_(0, to, part)
	}
	for l := range c.K {
		rows(c.K[l], src.K[l], 2)
		rows(c.V[l], src.V[l], 2)
	}
	rows(c.Mask, src.Mask, 1)
	c.Len = src.Len
	return nil
}

// rowCache copies row i's first n positions into a new one-row cache.
func (c *KVCache) rowCache(i, n int64) (out *KVCache, err error) {
	defer tensor.Recover("copy a KV cache row", &err)
	out = &KVCache{B: 1, Tmax: n, Len: n}
	// A copy of its own: the source's storage is freed with the source.
	copyOf := func(t *ts.Tensor, dim int64) *ts.Tensor {
		var s tensor.Scope
		defer s.Close()
		part := s.Keep(s.Keep(t.MustNarrow(0, i, 1, false)).MustNarrow(dim, 0, n, false))
		dst := part.MustZerosLike(false)
		dst.Copy_(part)
		return dst
	}
	for l := range c.K {
		out.K = append(out.K, copyOf(c.K[l], 2))
		out.V = append(out.V, copyOf(c.V[l], 2))
	}
	out.Mask = copyOf(c.Mask, 1)
	return out, nil
}

// Keep shrinks the cache to rows keep (in that order), freeing the others:
// generation drops finished samples so later steps cost only the running
// ones. The kept rows are copied once into new, smaller tensors.
func (c *KVCache) Keep(keep []int64) (err error) {
	defer tensor.Recover("compact KV cache", &err)
	var s tensor.Scope
	defer s.Close()
	idx := csrc.Upload(&s, keep, nil, c.Mask.MustDevice())
	sel := func(t *ts.Tensor) *ts.Tensor {
		kept := t.MustIndexSelect(0, idx, false)
		t.MustDrop()
		return kept
	}
	for l := range c.K {
		c.K[l] = sel(c.K[l])
		c.V[l] = sel(c.V[l])
	}
	c.Mask = sel(c.Mask)
	c.B = int64(len(keep))
	return nil
}

// layerCache is one layer's slice of the cache for one call: new keys and
// values go to [start, start+n); attention reads [0, start+n).
type layerCache struct {
	k, v     *ts.Tensor
	start, n int64
}

// update writes k and v [B, Hkv, n, D] into the cache and returns the
// filled part [B, Hkv, start+n, D] (views, no copies).
func (lc *layerCache) update(s *tensor.Scope, k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
	s.Keep(lc.k.MustNarrow(2, lc.start, lc.n, false)).Copy_(k)
	s.Keep(lc.v.MustNarrow(2, lc.start, lc.n, false)).Copy_(v)
	return s.Keep(lc.k.MustNarrow(2, 0, lc.start+lc.n, false)), s.Keep(lc.v.MustNarrow(2, 0, lc.start+lc.n, false))
}
