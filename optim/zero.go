package optim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// Optimizer is one optimizer step behind one call, whatever the world
// size and sharding: GRPO and SFT accumulate gradients with backward and
// call Apply once per update.
type Optimizer interface {
	// ZeroGrad starts an accumulation of gradients.
	ZeroGrad()
	// Apply reduces the accumulated gradients over the ranks (summed: each
	// rank's loss is normalized by the global count), clips them to global
	// norm maxNorm (0: no clipping), refuses the step with ErrBadLoss when
	// loss or norm is NaN/Inf (weights and state unchanged), else updates
	// at learning rate lr and leaves every rank with the same weights. It
	// returns the global norm before clipping.
	Apply(lr, maxNorm, loss float64) (norm float64, err error)
	// LayerDone is called by the checkpointed backward when decoder layer
	// layer's gradients are complete for this micro-batch (ZeRO-2
	// reduce-scatters and frees them there).
	LayerDone(layer int) error
	// SkipBackward stands for a backward this rank does not run because
	// its share of the step has fewer micro-batches than another rank's: it
	// issues the collectives that backward's LayerDone calls would have.
	SkipBackward() error
	// Updates is the number of updates done.
	Updates() int64
	// Save writes this rank's part of the state into a checkpoint
	// directory; Load reads it back, resharding by parameter name when the
	// checkpoint was written by another world size or sharding.
	Save(dir string) error
	Load(dir string) error
	// StateBytes is the memory of this rank's optimizer state (masters,
	// moments, sharded gradient accumulators).
	StateBytes() int64
	Close()
}

// NewOptimizer returns AdamW for params as dist.zero_stage asks: plain
// (every rank the whole state; gradients all-reduced in buckets), or ZeRO
// stage 1 or 2 (state sharded by rank; stage 2 shards the gradients too,
// layer by layer when layerwise, i.e. with activation checkpointing).
func NewOptimizer(params []model.NamedParam, h Hyper, c dist.Comm, zeroStage int, bucketBytes int64, layerwise bool) (Optimizer, error) {
	if c == nil {
		c = dist.Single()
	}
	if zeroStage == 0 {
		o, err := NewAdamW(params, h.Beta1, h.Beta2, h.Eps, h.WeightDecay)
		if err != nil {
			return nil, err
		}
		if c.Size() == 1 {
			return o, nil
		}
		return &dpAdamW{AdamW: o, c: c, bucketBytes: bucketBytes}, nil
	}
	return newZeroAdamW(params, h, c, zeroStage, bucketBytes, layerwise)
}

// AdamW in a world of one.

func (o *AdamW) LayerDone(int) error { return nil }
func (o *AdamW) SkipBackward() error { return nil }
func (o *AdamW) Updates() int64      { return o.Step }

// StateBytes counts the masters kept beside 16-bit parameters and the
// moments.
func (o *AdamW) StateBytes() int64 {
	var n int64
	for i, p := range o.params {
		n += tensorBytes(o.m[i]) + tensorBytes(o.v[i])
		if o.master[i] != p.Tensor {
			n += tensorBytes(o.master[i])
		}
	}
	return n
}

func tensorBytes(t *ts.Tensor) int64 { return int64(t.Numel()) * int64(t.DType().Size()) }

// dpAdamW is plain AdamW on every rank: gradients are summed over the
// ranks in buckets, then every rank takes the same step. Rank 0 saves.
type dpAdamW struct {
	*AdamW
	c           dist.Comm
	bucketBytes int64
}

func (o *dpAdamW) Apply(lr, maxNorm, loss float64) (float64, error) {
	if err := allReduceGrads(o.c, o.params, o.bucketBytes); err != nil {
		return 0, err
	}
	return o.AdamW.Apply(lr, maxNorm, loss)
}

func (o *dpAdamW) Save(dir string) error {
	if o.c.Rank() != 0 {
		return nil
	}
	return o.AdamW.Save(dir)
}

// allReduceGrads sums every parameter's gradient over the ranks, in place:
// parameters (in their fixed order) are packed into flat buffers of at
// most bucketBytes, one all-reduce each; a gradient at least that large
// is reduced where it is. A parameter without a gradient (a rank whose
// share was empty) takes part with zeros.
func allReduceGrads(c dist.Comm, params []model.NamedParam, bucketBytes int64) (err error) {
	defer tensor.Recover("gradient all-reduce", &err)
	return csrc.NoGrad(func() error {
		var s tensor.Scope // gradient handles (dropping one leaves the gradient alone)
		defer s.Close()
		var bucket []*ts.Tensor
		var size int64
		flush := func() error {
			defer func() { bucket, size = nil, 0 }()
			if len(bucket) == 0 {
				return nil
			}
			var bs tensor.Scope
			defer bs.Close()
			flat := make([]*ts.Tensor, len(bucket))
			for i, g := range bucket {
				flat[i] = bs.Keep(g.MustView([]int64{-1}, false))
			}
			buf := bs.Keep(ts.MustCat(flat, 0))
			if err := c.AllReduceSum(buf); err != nil {
				return err
			}
			var off int64
			for i, g := range bucket {
				n := int64(g.Numel())
				flat[i].Copy_(bs.Keep(buf.MustNarrow(0, off, n, false)))
				off += n
			}
			return nil
		}
		for _, p := range params {
			if err := csrc.EnsureGrad(p.Tensor); err != nil {
				return err
			}
			g := s.Keep(p.Tensor.MustGrad(false))
			b := tensorBytes(g)
			if len(bucket) > 0 && (size+b > bucketBytes || g.DType() != bucket[0].DType()) {
				if err := flush(); err != nil {
					return err
				}
			}
			if b >= bucketBytes {
				if err := c.AllReduceSum(g); err != nil {
					return err
				}
				continue
			}
			bucket, size = append(bucket, g), size+b
		}
		return flush()
	})
}

// layerOf is the decoder layer a parameter belongs to, or -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return -1
	}
	n := 0
	for i, r := range rest {
		if r == '.' {
			if i == 0 {
				return -1
			}
			return n
		}
		if r < '0' || r > '9' {
			return -1
		}
		n = n*10 + int(r-'0')
	}
	return -1
}

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
	n, chunk, lo, hi int64      // numel, chunk size, this rank's range [lo, hi)
	master, m, v     *ts.Tensor // length hi−lo; master is a view of the parameter for fp32/fp64 parameters
	ownMaster        bool
	grad             *ts.Tensor // stage 2: the reduced gradient chunk (master dtype), length hi−lo
}

type zbucket struct {
	params []int
	layer  int // decoder layer, or -1
}

func newZeroAdamW(params []model.NamedParam, h Hyper, c dist.Comm, stage int, bucketBytes int64, layerwise bool) (o *zeroAdamW, err error) {
	defer tensor.Recover("ZeRO optimizer init", &err)
	if stage != 1 && stage != 2 {
		return nil, fmt.Errorf("dist.zero_stage %d: want 0, 1 or 2", stage)
	}
	o = &zeroAdamW{Hyper: h, stage: stage, c: c, params: params, layerBucket: map[int]int{}, layerwise: layerwise && stage == 2, bucketBytes: bucketBytes}
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
		for _, t := range []*ts.Tensor{z.master, z.m, z.v, z.grad} {
			if t != nil {
				t.MustDrop()
			}
		}
	}
	o.sh = nil
}

func (o *zeroAdamW) Updates() int64 { return o.step }

func (o *zeroAdamW) StateBytes() int64 {
	var n int64
	for _, z := range o.sh {
		n += tensorBytes(z.m) + tensorBytes(z.v)
		if z.ownMaster {
			n += tensorBytes(z.master)
		}
		if z.grad != nil {
			n += tensorBytes(z.grad)
		}
	}
	return n
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
	o.step++
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
			o.step_(&s, z, g, lr)
			s.Close()
		}
		return nil
	})
	if err != nil {
		return norm, err
	}
	return norm, o.gatherParams()
}

func (o *zeroAdamW) step_(s *tensor.Scope, z zshard, g *ts.Tensor, lr float64) {
	o.Hyper.step(s, z.master, z.m, z.v, g, lr, o.step)
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

// Checkpoints. Plain AdamW writes optimizer.safetensors (every parameter's
// moments and 16-bit masters, whole) and optimizer.json. ZeRO writes
// optimizer.json (rank 0) and one optimizer-rank-RRRRR-of-WWWWW.safetensors
// per rank holding its chunks, 1-D, under the same names. Either format
// loads into either optimizer at any world size: optimState reads any
// element range of a parameter's state from whichever files hold it.

func ShardFile(rank, world int) string {
	return fmt.Sprintf("optimizer-rank-%05d-of-%05d.safetensors", rank, world)
}

func (o *zeroAdamW) Save(dir string) error {
	W := o.c.Size()
	var srcs []model.TensorSource
	for i, z := range o.sh {
		name := o.params[i].Name
		add := func(kind string, t *ts.Tensor) error {
			b, err := csrc.ToBytes(t)
			if err != nil {
				return fmt.Errorf("optimizer %s of %s: %w", kind, name, err)
			}
			dt, err := model.STDTypeOf(t.DType())
			if err != nil {
				return err
			}
			srcs = append(srcs, model.Bytes(kind+"."+name, dt, []int64{z.hi - z.lo}, b))
			return nil
		}
		if err := add("exp_avg", z.m); err != nil {
			return err
		}
		if err := add("exp_avg_sq", z.v); err != nil {
			return err
		}
		if z.ownMaster {
			if err := add("master", z.master); err != nil {
				return err
			}
		}
	}
	if err := model.WriteSafetensors(filepath.Join(dir, ShardFile(o.c.Rank(), W)), srcs, nil); err != nil {
		return err
	}
	if o.c.Rank() != 0 {
		return nil
	}
	meta := adamMeta{Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Step: o.step, ZeroStage: o.stage, World: W}
	for _, p := range o.params {
		meta.Params = append(meta.Params, p.Name)
	}
	for r := 0; r < W; r++ {
		meta.Files = append(meta.Files, ShardFile(r, W))
	}
	return writeOptimMeta(dir, meta)
}

func (o *zeroAdamW) Load(dir string) (err error) {
	defer tensor.Recover("load optimizer", &err)
	st, err := openOptimState(dir, o.params)
	if err != nil {
		return err
	}
	defer st.Close()
	for i, z := range o.sh {
		name := o.params[i].Name
		if z.hi == z.lo {
			continue
		}
		if err := st.restore("exp_avg", name, z.n, z.lo, z.hi, z.m); err != nil {
			return err
		}
		if err := st.restore("exp_avg_sq", name, z.n, z.lo, z.hi, z.v); err != nil {
			return err
		}
		if z.ownMaster {
			if err := st.restore("master", name, z.n, z.lo, z.hi, z.master); err != nil {
				return err
			}
		}
	}
	m := st.meta
	o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.step = m.Beta1, m.Beta2, m.Eps, m.WeightDecay, m.Step
	return nil
}

// optimState reads a checkpoint's optimizer state in either format.
type optimState struct {
	dir     string
	meta    adamMeta
	files   []*model.File // the whole-tensor file, or one per rank that wrote it
	sharded bool
}

func openOptimState(dir string, params []model.NamedParam) (*optimState, error) {
	raw, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil, err
	}
	st := &optimState{dir: dir}
	if err := json.Unmarshal(raw, &st.meta); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, MetaFile), err)
	}
	if len(st.meta.Params) != len(params) {
		return nil, fmt.Errorf("%s: %d parameters, the model has %d", filepath.Join(dir, MetaFile), len(st.meta.Params), len(params))
	}
	for i, p := range params {
		if st.meta.Params[i] != p.Name {
			return nil, fmt.Errorf("%s: parameter %d is %q, the model's is %q", MetaFile, i, st.meta.Params[i], p.Name)
		}
	}
	names := []string{TensorsFile}
	if st.meta.ZeroStage > 0 {
		st.sharded = true
		names = st.meta.Files
		if len(names) != st.meta.World || st.meta.World < 1 {
			return nil, fmt.Errorf("%s: %d shard files for world size %d", filepath.Join(dir, MetaFile), len(names), st.meta.World)
		}
	}
	for _, n := range names {
		f, err := model.OpenSafetensors(filepath.Join(dir, n))
		if err != nil {
			st.Close()
			return nil, err
		}
		st.files = append(st.files, f)
	}
	return st, nil
}

func (st *optimState) Close() {
	for _, f := range st.files {
		f.Close()
	}
}

// read returns elements [lo, hi) of the flattened state kind.name of a
// parameter of n elements, as bytes of dtype dt.
func (st *optimState) read(kind, name string, n, lo, hi int64) (out []byte, dt model.STDType, err error) {
	key := kind + "." + name
	if !st.sharded {
		b, info, err := st.files[0].Bytes(key)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", TensorsFile, err)
		}
		es := info.DType.Size()
		return b[lo*es : hi*es], info.DType, nil
	}
	W := int64(st.meta.World)
	chunk := (n + W - 1) / W
	for r := lo / max(chunk, 1); r < W && r*chunk < hi; r++ {
		b, info, err := st.files[r].Bytes(key)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", st.meta.Files[r], err)
		}
		es := info.DType.Size()
		start := r * chunk
		a, e := max(lo, start), min(hi, start+int64(len(b))/es)
		if a < e {
			out = append(out, b[(a-start)*es:(e-start)*es]...)
		}
		dt = info.DType
	}
	if int64(len(out)) != (hi-lo)*dt.Size() {
		return nil, "", fmt.Errorf("%s: the shards hold %d of elements [%d, %d) of %s", st.dir, int64(len(out))/max(dt.Size(), 1), lo, hi, key)
	}
	return out, dt, nil
}

// restore copies elements [lo, hi) of kind.name into into (of hi−lo
// elements, any shape).
func (st *optimState) restore(kind, name string, n, lo, hi int64, into *ts.Tensor) error {
	b, dt, err := st.read(kind, name, n, lo, hi)
	if err != nil {
		return err
	}
	src, err := dt.Gotch()
	if err != nil {
		return err
	}
	t, err := csrc.FromBytes(b, into.MustSize(), src, into.DType(), into.MustDevice())
	if err != nil {
		return err
	}
	defer t.MustDrop()
	return csrc.NoGrad(func() error { into.Copy_(t); return nil })
}
