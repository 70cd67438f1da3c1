package optim

import (
	"strings"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// dpAdamW is plain AdamW on every rank: gradients are summed over the
// ranks in buckets, then every rank takes the same step. Rank 0 saves.
type dpAdamW struct {
	*AdamW
	c           dist.Comm
	bucketBytes int64
}

func (o *dpAdamW) Apply(lr, maxNorm, loss float64) (float64, error) {
	return o.ApplyGroup(0, lr, maxNorm, loss)
}

func (o *dpAdamW) ApplyGroup(g int, lr, maxNorm, loss float64) (float64, error) {
	if err := allReduceGrads(o.c, o.params, o.bucketBytes); err != nil {
		return 0, err
	}
	return o.AdamW.ApplyGroup(g, lr, maxNorm, loss)
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
	// A LoRA adapter's key carries PEFT's prefix before the module's name.
	rest, ok := strings.CutPrefix(strings.TrimPrefix(name, "base_model.model."), "model.layers.")
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
