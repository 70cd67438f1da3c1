package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// AdamW is decoupled-weight-decay Adam (Loshchilov & Hutter, 2019) with
// state lanpo can save: gotch's optimizer exposes none. Parameters are
// updated in the model's fixed order (model.Params: safetensors key
// order). Parameters stored in 16-bit get an fp32 master copy, which is
// what the update and the checkpoint use.
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	Step                           int64 // updates done

	params []model.NamedParam
	master []*ts.Tensor // fp32 copy for 16-bit params, else the param itself
	m, v   []*ts.Tensor // first and second moments (fp32 or fp64 as the master)
}

// NewAdamW sets every parameter to require grad and allocates the state.
func NewAdamW(params []model.NamedParam, beta1, beta2, eps, weightDecay float64) (o *AdamW, err error) {
	defer tensor.Recover("optimizer init", &err)
	o = &AdamW{Beta1: beta1, Beta2: beta2, Eps: eps, WeightDecay: weightDecay, params: params}
	for _, p := range params {
		p.Tensor.MustSetRequiresGrad(true, false).MustDrop()
		master := p.Tensor
		if dt := p.Tensor.DType(); dt != gotch.Float && dt != gotch.Double {
			master = p.Tensor.MustTotype(gotch.Float, false)
		}
		o.master = append(o.master, master)
		o.m = append(o.m, master.MustZerosLike(false))
		o.v = append(o.v, master.MustZerosLike(false))
	}
	return o, nil
}

// Close frees the optimizer state.
func (o *AdamW) Close() {
	for i := range o.params {
		if o.master[i] != o.params[i].Tensor {
			o.master[i].MustDrop()
		}
		o.m[i].MustDrop()
		o.v[i].MustDrop()
	}
	o.master, o.m, o.v = nil, nil, nil
}

// ZeroGrad zeroes the accumulated gradients (keeping their storage).
func (o *AdamW) ZeroGrad() {
	for _, p := range o.params {
		g := p.Tensor.MustGrad(false)
		if g.MustDefined() {
			g.MustZero_()
		}
		g.MustDrop()
	}
}

// ClipGradNorm scales the gradients so their global L2 norm is at most
// maxNorm (0: no clipping) and returns the norm before clipping (fp64
// accumulation; sync: one read).
func (o *AdamW) ClipGradNorm(maxNorm float64) (norm float64, err error) {
	defer tensor.Recover("clip grad norm", &err)
	var s tensor.Scope
	defer s.Close()
	var sq []*ts.Tensor
	for _, p := range o.params {
		g := s.Keep(p.Tensor.MustGrad(false))
		if !g.MustDefined() {
			continue
		}
		g64 := s.Keep(g.MustTotype(gotch.Double, false))
		sq = append(sq, s.Keep(s.Keep(g64.MustSquare(false)).MustSum(gotch.Double, false)))
	}
	if len(sq) == 0 {
		return 0, nil
	}
	total := tensor.Float64s(s.Keep(s.Keep(ts.MustStack(sq, 0)).MustSum(gotch.Double, false)))[0] // sync
	norm = math.Sqrt(total)
	if maxNorm > 0 && norm > maxNorm && !math.IsInf(norm, 0) && !math.IsNaN(norm) {
		scale := maxNorm / (norm + 1e-6)
		for _, p := range o.params {
			g := s.Keep(p.Tensor.MustGrad(false))
			if g.MustDefined() {
				g.MustMulScalar_(s.Float(scale))
			}
		}
	}
	return norm, nil
}

// Update applies one AdamW step with learning rate lr to every parameter
// that has a gradient.
func (o *AdamW) Update(lr float64) error {
	o.Step++
	bc1 := 1 - math.Pow(o.Beta1, float64(o.Step))
	bc2 := 1 - math.Pow(o.Beta2, float64(o.Step))
	return csrc.NoGrad(func() (err error) {
		defer tensor.Recover("optimizer step", &err)
		for i, p := range o.params {
			var s tensor.Scope
			g := s.Keep(p.Tensor.MustGrad(false))
			if !g.MustDefined() {
				s.Close()
				continue
			}
			w := o.master[i]
			if g.DType() != w.DType() {
				g = s.Keep(g.MustTotype(w.DType(), false))
			}
			// m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²
			o.m[i].MustMulScalar_(s.Float(o.Beta1))
			o.m[i].MustAdd_(s.Keep(g.MustMulScalar(s.Float(1-o.Beta1), false)))
			o.v[i].MustMulScalar_(s.Float(o.Beta2))
			o.v[i].MustAdd_(s.Keep(s.Keep(g.MustSquare(false)).MustMulScalar(s.Float(1-o.Beta2), false)))
			// w −= lr·wd·w (decoupled), then w −= lr · m̂ / (√v̂ + eps)
			if o.WeightDecay != 0 {
				w.MustMulScalar_(s.Float(1 - lr*o.WeightDecay))
			}
			denom := s.Keep(s.Keep(s.Keep(o.v[i].MustDivScalar(s.Float(bc2), false)).MustSqrt(false)).MustAddScalar(s.Float(o.Eps), false))
			upd := s.Keep(s.Keep(o.m[i].MustDiv(denom, false)).MustMulScalar(s.Float(lr/bc1), false))
			w.MustSub_(upd)
			if w != p.Tensor {
				p.Tensor.Copy_(w)
			}
			s.Close()
		}
		return nil
	})
}

// adamMeta is the optimizer's JSON state beside its tensors.
type adamMeta struct {
	Beta1, Beta2, Eps, WeightDecay float64
	Step                           int64
	Params                         []string
}

const (
	optimTensorsFile = "optimizer.safetensors"
	optimMetaFile    = "optimizer.json"
)

// Save writes the state into dir: moments and fp32 masters as
// safetensors (exact bytes), hyper-parameters and step as JSON.
func (o *AdamW) Save(dir string) error {
	meta := adamMeta{o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.Step, nil}
	var srcs []model.TensorSource
	for i, p := range o.params {
		meta.Params = append(meta.Params, p.Name)
		add := func(kind string, t *ts.Tensor) error {
			b, err := csrc.ToBytes(t)
			if err != nil {
				return fmt.Errorf("optimizer %s of %s: %w", kind, p.Name, err)
			}
			dt, err := model.STDTypeOf(t.DType())
			if err != nil {
				return err
			}
			srcs = append(srcs, model.Bytes(kind+"."+p.Name, dt, t.MustSize(), b))
			return nil
		}
		if err := add("exp_avg", o.m[i]); err != nil {
			return err
		}
		if err := add("exp_avg_sq", o.v[i]); err != nil {
			return err
		}
		if o.master[i] != p.Tensor {
			if err := add("master", o.master[i]); err != nil {
				return err
			}
		}
	}
	if err := model.WriteSafetensors(filepath.Join(dir, optimTensorsFile), srcs, nil); err != nil {
		return err
	}
	js, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileSync(filepath.Join(dir, optimMetaFile), append(js, '\n'))
}

// Load restores the state Save wrote; the parameter names must match.
func (o *AdamW) Load(dir string) (err error) {
	defer tensor.Recover("load optimizer", &err)
	raw, err := os.ReadFile(filepath.Join(dir, optimMetaFile))
	if err != nil {
		return err
	}
	var meta adamMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, optimMetaFile), err)
	}
	if len(meta.Params) != len(o.params) {
		return fmt.Errorf("%s: %d parameters, the model has %d", filepath.Join(dir, optimMetaFile), len(meta.Params), len(o.params))
	}
	f, err := model.OpenSafetensors(filepath.Join(dir, optimTensorsFile))
	if err != nil {
		return err
	}
	defer f.Close()
	restore := func(name string, into *ts.Tensor) error {
		b, info, err := f.Bytes(name)
		if err != nil {
			return fmt.Errorf("%s: %w", optimTensorsFile, err)
		}
		src, err := info.DType.Gotch()
		if err != nil {
			return err
		}
		t, err := csrc.FromBytes(b, info.Shape, src, into.DType(), into.MustDevice())
		if err != nil {
			return err
		}
		defer t.MustDrop()
		return csrc.NoGrad(func() error { into.Copy_(t); return nil })
	}
	for i, p := range o.params {
		if meta.Params[i] != p.Name {
			return fmt.Errorf("%s: parameter %d is %q, the model's is %q", optimMetaFile, i, meta.Params[i], p.Name)
		}
		if err := restore("exp_avg."+p.Name, o.m[i]); err != nil {
			return err
		}
		if err := restore("exp_avg_sq."+p.Name, o.v[i]); err != nil {
			return err
		}
		if o.master[i] != p.Tensor {
			if err := restore("master."+p.Name, o.master[i]); err != nil {
				return err
			}
		}
	}
	o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.Step = meta.Beta1, meta.Beta2, meta.Eps, meta.WeightDecay, meta.Step
	return nil
}

// Apply ends an accumulation of gradients with one optimizer step: it
// clips the gradients to global norm maxNorm (0: no clipping), refuses the
// step with errBadLoss when the loss or the norm is NaN/Inf (the weights
// and moments stay as they were), else updates with learning rate lr. It
// returns the norm before clipping. GRPO and SFT call only this, so a
// sharded optimizer changes one place.
func (o *AdamW) Apply(lr, maxNorm, loss float64) (norm float64, err error) {
	if norm, err = o.ClipGradNorm(maxNorm); err != nil {
		return norm, err
	}
	if !finite(loss, norm) {
		return norm, errBadLoss
	}
	return norm, o.Update(lr)
}

var errBadLoss = errors.New("loss or gradient is NaN/Inf")

// finite reports whether every value is a finite number.
func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}
