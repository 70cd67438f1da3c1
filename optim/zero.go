package optim

import (
	"fmt"
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// zeroAdamW is AdamW with its state sharded over the ranks (ZeRO stage 1
// or 2). Every parameter's flattened elements are cut into Size() chunks
// of ceil(n/Size()) (the last ones shorter or empty); rank r keeps the
// fp32 master (a view of the parameter itself when that is fp32 or
// fp64), the moments and, at stage 2, the reduced gradient of chunk r of
// every parameter, and updates only those. After the update each bucket
// of parameters is all-gathered back into every rank's weights.
//
// Stage 1 sums the whole gradients with the bucketed all-reduce and uses
// its own chunk of them. Stage 2 reduce-scatters each bucket — with
// layerwise (activation checkpointing), a decoder layer's bucket as soon
// as the backward finishes that layer, every micro-batch — accumulates
// its chunk in fp32 and frees the full gradients, so they never exist for
// the whole model at once; the other parameters (embeddings, final norm,
// head) are reduced at Apply.
type zeroAdamW struct {
	Hyper
	step        int64
	groups      []string // the moment groups' names (Hyper)
	gsteps      []int64  // and their update counts
	stage       int
	c           dist.Comm
	params      []model.NamedParam
	sh          []zshard
	buckets     []zbucket
	layerBucket map[int]int
	layerwise   bool
	bucketBytes int64
}

// ShardedGrad is this rank's reduced gradient of parameter i and the
// offset of its chunk in the flattened parameter, under ZeRO-2 (ok false
// otherwise: the gradient is the parameter's own .grad).
func (o *zeroAdamW) ShardedGrad(i int) (grad *ts.Tensor, lo int64, ok bool) {
	if o.stage != 2 {
		return nil, 0, false
	}
	return o.sh[i].grad, o.sh[i].lo, true
}

type zshard struct {
	n, chunk, lo, hi int64        // numel, chunk size, this rank's range [lo, hi)
	master, m, v     *ts.Tensor   // length hi−lo; master is a view of the parameter for fp32/fp64 parameters
	gm, gv           []*ts.Tensor // the moment groups' m and v, length hi−lo
	ownMaster        bool
	grad             *ts.Tensor // stage 2: the reduced gradient chunk (master dtype), length hi−lo
}

type zbucket struct {
	params []int
	layer  int // decoder layer, or -1
}

func newZeroAdamW(params []model.NamedParam, h Hyper, c dist.Comm, stage int, bucketBytes int64, layerwise bool, groups ...string) (o *zeroAdamW, err error) {
	defer tensor.Recover("ZeRO optimizer init", &err)
	if stage != 1 && stage != 2 {
		return nil, fmt.Errorf("dist.zero_stage %d: want 0, 1 or 2", stage)
	}
	o = &zeroAdamW{Hyper: h, stage: stage, c: c, params: params, layerBucket: map[int]int{}, layerwise: layerwise && stage == 2, bucketBytes: bucketBytes,
		groups: groups, gsteps: make([]int64, len(groups))}
	W, r := int64(c.Size()), int64(c.Rank())
	err = csrc.NoGrad(func() error {
		for _, p := range params {
			p.Tensor.MustSetRequiresGrad(true, false).MustDrop()
			n := p.Tensor.Numel()
			chunk := (int64(n) + W - 1) / W
			lo, hi := min(r*chunk, int64(n)), min((r+1)*chunk, int64(n))
			z := zshard{n: int64(n), chunk: chunk, lo: lo, hi: hi}
			flat := p.Tensor.MustView([]int64{-1}, false)
			own := flat.MustNarrow(0, lo, hi-lo, false)
			flat.MustDrop()
			if dt := p.Tensor.DType(); dt == gotch.Float || dt == gotch.Double {
				z.master = own
			} else {
				z.master, z.ownMaster = own.MustTotype(gotch.Float, false), true
				own.MustDrop()
			}
			z.m, z.v = z.master.MustZerosLike(false), z.master.MustZerosLike(false)
			for range groups {
				z.gm, z.gv = append(z.gm, z.master.MustZerosLike(false)), append(z.gv, z.master.MustZerosLike(false))
			}
			if stage == 2 {
				z.grad = z.master.MustZerosLike(false)
			}
			o.sh = append(o.sh, z)
		}
		return nil
	})
	if err != nil {
		o.Close()
		return nil, err
	}
	// Buckets: each decoder layer's parameters together (the unit of
	// stage 2's layer-by-layer reduction), the others in groups of at most
	// bucketBytes.
	var cur []int
	var size int64
	flush := func() {
		if len(cur) > 0 {
			o.buckets = append(o.buckets, zbucket{params: cur, layer: -1})
		}
		cur, size = nil, 0
	}
	for i, p := range params {
		if l := layerOf(p.Name); l >= 0 {
			flush()
			b, ok := o.layerBucket[l]
			if !ok {
				b = len(o.buckets)
				o.layerBucket[l] = b
				o.buckets = append(o.buckets, zbucket{layer: l})
			}
			o.buckets[b].params = append(o.buckets[b].params, i)
			continue
		}
		b := tensorBytes(p.Tensor)
		if len(cur) > 0 && size+b > bucketBytes {
			flush()
		}
		cur, size = append(cur, i), size+b
	}
	flush()
	return o, nil
}

func (o *zeroAdamW) Close() {
	for _, z := range o.sh {
		for _, t := range append([]*ts.Tensor{z.master, z.m, z.v, z.grad}, append(z.gm, z.gv...)...) {
			if t != nil {
				t.MustDrop()
			}
		}
	}
	o.sh = nil
}

func (o *zeroAdamW) ZeroGrad() {
	for i, p := range o.params {
		g := p.Tensor.MustGrad(false)
		if g.MustDefined() {
			if o.stage == 2 {
				_ = csrc.ClearGrad(p.Tensor)
			} else {
				g.MustZero_()
			}
		}
		g.MustDrop()
		if z := o.sh[i]; z.grad != nil {
			z.grad.MustZero_()
		}
	}
}

// reduceScatter sums bucket b's gradients over the ranks into each rank's
// chunks (stage 2) and frees the full gradients. The bucket is laid out as
// [Size, S]: row r holds chunk r of every parameter, zero-padded to the
// chunk size, so one reduce-scatter leaves row Rank() on this rank.
func (o *zeroAdamW) reduceScatter(b int) (err error) {
	defer tensor.Recover("gradient reduce-scatter", &err)
	return csrc.NoGrad(func() error {
		var s tensor.Scope
		defer s.Close()
		W := int64(o.c.Size())
		var cols []*ts.Tensor
		var dt gotch.DType
		for _, i := range o.buckets[b].params {
			p, z := o.params[i].Tensor, o.sh[i]
			g := s.Keep(p.MustGrad(false))
			if !g.MustDefined() {
				g = s.Keep(p.MustZerosLike(false))
			}
			dt = g.DType()
			flat := s.Keep(g.MustReshape([]int64{-1}, false))
			if pad := W*z.chunk - z.n; pad > 0 {
				flat = s.Keep(ts.MustCat([]*ts.Tensor{flat, s.Keep(ts.MustZeros([]int64{pad}, dt, p.MustDevice()))}, 0))
			}
			cols = append(cols, s.Keep(flat.MustView([]int64{W, z.chunk}, false)))
		}
		in := s.Keep(s.Keep(ts.MustCat(cols, 1)).MustView([]int64{-1}, false))
		S := int64(in.Numel()) / W
		out := s.Keep(ts.MustEmpty([]int64{S}, dt, o.params[0].Tensor.MustDevice()))
		if err := o.c.ReduceScatterSum(in, out); err != nil {
			return err
		}
		var off int64
		for _, i := range o.buckets[b].params {
			z := o.sh[i]
			if z.hi > z.lo {
				part := s.Keep(out.MustNarrow(0, off, z.hi-z.lo, false))
				if part.DType() != z.grad.DType() {
					part = s.Keep(part.MustTotype(z.grad.DType(), false))
				}
				z.grad.MustAdd_(part)
			}
			off += z.chunk
			if err := csrc.ClearGrad(o.params[i].Tensor); err != nil {
				return err
			}
		}
		return nil
	})
}

// gradChunk is this rank's chunk of parameter i's reduced gradient.
func (o *zeroAdamW) gradChunk(s *tensor.Scope, i int) *ts.Tensor {
	z := o.sh[i]
	if o.stage == 2 {
		return z.grad
	}
	g := s.Keep(o.params[i].Tensor.MustGrad(false))
	flat := s.Keep(g.MustView([]int64{-1}, false))
	return s.Keep(flat.MustNarrow(0, z.lo, z.hi-z.lo, false))
}

func (o *zeroAdamW) Apply(lr, maxNorm, loss float64) (norm float64, err error) {
	return o.ApplyGroup(0, lr, maxNorm, loss)
}

func (o *zeroAdamW) ApplyGroup(group int, lr, maxNorm, loss float64) (norm float64, err error) {
	if err := checkGroup(group, o.groups); err != nil {
		return 0, err
	}
	// Reduce: stage 1 all of it; stage 2 the buckets the backward did not.
	if o.stage == 1 {
		if err := allReduceGrads(o.c, o.params, o.bucketBytes); err != nil {
			return 0, err
		}
	} else {
		for b, bk := range o.buckets {
			if bk.layer >= 0 && o.layerwise {
				continue
			}
			if err := o.reduceScatter(b); err != nil {
				return 0, err
			}
		}
	}
	// The global norm from every rank's chunks (fp64, summed in rank order).
	var local float64
	err = csrc.NoGrad(func() (err error) {
		defer tensor.Recover("clip grad norm", &err)
		var s tensor.Scope
		defer s.Close()
		var sq []*ts.Tensor
		for i, z := range o.sh {
			if z.hi == z.lo {
				continue
			}
			var ps tensor.Scope
			sq = append(sq, s.Keep(sumSquares(&ps, o.gradChunk(&ps, i))))
			ps.Close()
		}
		if len(sq) > 0 {
			local = tensor.Float64s(s.Keep(s.Keep(ts.MustStack(sq, 0)).MustSum(gotch.Double, false)))[0]
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	total, err := dist.SumFloats(o.c, []float64{local})
	if err != nil {
		return 0, err
	}
	norm = math.Sqrt(total[0])
	if !finite(loss, norm) {
		return norm, ErrBadLoss
	}
	step := &o.step
	if group > 0 {
		step = &o.gsteps[group-1]
	}
	*step++
	err = csrc.NoGrad(func() (err error) {
		defer tensor.Recover("optimizer step", &err)
		scale := 1.0
		if maxNorm > 0 && norm > maxNorm {
			scale = maxNorm / (norm + 1e-6)
		}
		for i, z := range o.sh {
			if z.hi == z.lo {
				continue
			}
			var s tensor.Scope
			g := o.gradChunk(&s, i)
			if scale != 1 {
				g = s.Keep(g.MustMulScalar(s.Float(scale), false))
			}
			m, v := z.m, z.v
			if group > 0 {
				m, v = z.gm[group-1], z.gv[group-1]
			}
			o.Hyper.step(&s, z.master, m, v, g, lr, *step)
			s.Close()
		}
		return nil
	})
	if err != nil {
		return norm, err
	}
	return norm, o.gatherParams()
}

// gatherParams all-gathers every bucket's updated chunks into the
// parameters of every rank.
func (o *zeroAdamW) gatherParams() (err error) {
	defer tensor.Recover("parameter all-gather", &err)
	W := int64(o.c.Size())
	return csrc.NoGrad(func() error {
		for _, bk := range o.buckets {
			var s tensor.Scope
			var parts []*ts.Tensor
			var S int64
			for _, i := range bk.params {
				p, z := o.params[i].Tensor, o.sh[i]
				own := z.master
				if own.DType() != p.DType() {
					own = s.Keep(own.MustTotype(p.DType(), false))
				}
				if pad := z.chunk - (z.hi - z.lo); pad > 0 {
					own = s.Keep(ts.MustCat([]*ts.Tensor{own, s.Keep(ts.MustZeros([]int64{pad}, p.DType(), p.MustDevice()))}, 0))
				}
				parts = append(parts, own)
				S += z.chunk
			}
			in := s.Keep(ts.MustCat(parts, 0))
			out := s.Keep(ts.MustEmpty([]int64{W * S}, in.DType(), in.MustDevice()))
			if err := o.c.AllGather(in, out); err != nil {
				s.Close()
				return err
			}
			rows := s.Keep(out.MustView([]int64{W, S}, false))
			var off int64
			for _, i := range bk.params {
				p, z := o.params[i].Tensor, o.sh[i]
				col := s.Keep(s.Keep(rows.MustNarrow(1, off, z.chunk, false)).MustContiguous(false))
				full := s.Keep(s.Keep(col.MustView([]int64{-1}, false)).MustNarrow(0, 0, z.n, false))
				p.Copy_(s.Keep(full.MustView(p.MustSize(), false)))
				off += z.chunk
			}
			s.Close()
		}
		return nil
	})
}

func (o *zeroAdamW) Updates() int64 { return o.step }

func (o *zeroAdamW) StateBytes() int64 {
	var n int64
	for _, z := range o.sh {
		n += tensorBytes(z.m) + tensorBytes(z.v)
		for g := range z.gm {
			n += tensorBytes(z.gm[g]) + tensorBytes(z.gv[g])
		}
		if z.ownMaster {
			n += tensorBytes(z.master)
		}
		if z.grad != nil {
			n += tensorBytes(z.grad)
		}
	}
	return n
}

func (o *zeroAdamW) LayerDone(layer int) error {
	if !o.layerwise {
		return nil
	}
	b, ok := o.layerBucket[layer]
	if !ok {
		return nil
	}
	return o.reduceScatter(b)
}

func (o *zeroAdamW) SkipBackward() error {
	if !o.layerwise {
		return nil
	}
	// The checkpointed backward finishes layers last to first.
	for l := len(o.layerBucket) - 1; l >= 0; l-- {
		if err := o.LayerDone(l); err != nil {
			return err
		}
	}
	return nil
}
