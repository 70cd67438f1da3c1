package optim

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
	Hyper
	Step int64 // updates done

	params     []model.NamedParam
	master     []*ts.Tensor // fp32 copy for 16-bit params, else the param itself
	m, v       []*ts.Tensor // first and second moments (fp32 or fp64 as the master)
	groups     []moments    // the moment groups (ApplyGroup 1, 2, …)
	groupNames []string
}

// moments are a moment group's state: AdamW's m and v of every parameter
// (of this rank's chunks under ZeRO) and its own update count, which its
// bias correction uses.
type moments struct {
	name string
	m, v []*ts.Tensor
	step int64
}

// NewAdamW sets every parameter to require grad and allocates the state
// (groups: the moment groups' names, Hyper).
func NewAdamW(params []model.NamedParam, beta1, beta2, eps, weightDecay float64, groups ...string) (o *AdamW, err error) {
	defer tensor.Recover("optimizer init", &err)
	o = &AdamW{Hyper: Hyper{beta1, beta2, eps, weightDecay}, params: params, groupNames: groups}
	for _, name := range groups {
		o.groups = append(o.groups, moments{name: name})
	}
	for _, p := range params {
		p.Tensor.MustSetRequiresGrad(true, false).MustDrop()
		master := p.Tensor
		if dt := p.Tensor.DType(); dt != gotch.Float && dt != gotch.Double {
			master = p.Tensor.MustTotype(gotch.Float, false)
		}
		o.master = append(o.master, master)
		o.m = append(o.m, master.MustZerosLike(false))
		o.v = append(o.v, master.MustZerosLike(false))
		for g := range o.groups {
			o.groups[g].m = append(o.groups[g].m, master.MustZerosLike(false))
			o.groups[g].v = append(o.groups[g].v, master.MustZerosLike(false))
		}
	}
	return o, nil
}

// moments returns moment group g's state (0: the default one).
func (o *AdamW) moments(g int) (m, v []*ts.Tensor, step *int64) {
	if g == 0 {
		return o.m, o.v, &o.Step
	}
	gr := &o.groups[g-1]
	return gr.m, gr.v, &gr.step
}

// checkGroup names a group that does not exist.
func checkGroup(g int, groups []string) error {
	if g < 0 || g > len(groups) {
		return fmt.Errorf("optimizer moment group %d: this optimizer has %d besides the default (%v)", g, len(groups), groups)
	}
	return nil
}

// Close frees the optimizer state.
func (o *AdamW) Close() {
	for i := range o.params {
		if o.master[i] != o.params[i].Tensor {
			o.master[i].MustDrop()
		}
		o.m[i].MustDrop()
		o.v[i].MustDrop()
		for _, gr := range o.groups {
			gr.m[i].MustDrop()
			gr.v[i].MustDrop()
		}
	}
	o.master, o.m, o.v, o.groups = nil, nil, nil, nil
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
		// One parameter's float64 copy and square at a time: kept for
		// all of them, they were four times the gradients' bytes.
		var ps tensor.Scope
		g := ps.Keep(p.Tensor.MustGrad(false))
		if g.MustDefined() {
			sq = append(sq, s.Keep(sumSquares(&ps, g)))
		}
		ps.Close()
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

// sumSquares is Σ g² in float64, a new scalar tensor the caller keeps; the
// float64 copy and the squares are registered in s (one parameter's scope,
// so they never coexist for all parameters).
func sumSquares(s *tensor.Scope, g *ts.Tensor) *ts.Tensor {
	g64 := s.Keep(g.MustTotype(gotch.Double, false))
	return s.Keep(g64.MustSquare(false)).MustSum(gotch.Double, false)
}

// Hyper are AdamW's hyper-parameters.
//
// Moment groups: an optimizer made with group names (NewOptimizer's
// groups) keeps, beside its default m and v, one more moment set per
// name; ApplyGroup(g) (g ≥ 1: groups[g−1]) steps the same parameters —
// the same fp32 masters — with that set's own m, v and update count, at
// its own learning rate. A loss trained in steps of its own (LANPO's
// consolidation with lanpo.consolidate_lr) then neither enters nor reads
// the policy's moments. Each group costs the moments' memory again.
type Hyper struct {
	Beta1, Beta2, Eps, WeightDecay float64
}

// step updates w in place from gradient g with moments m and v (all of
// w's dtype and shape, g converted first), at learning rate lr and update
// number t: the one AdamW formula, shared by the plain and the sharded
// optimizer, so a shard's update is bit for bit the whole tensor's.
func (h Hyper) step(s *tensor.Scope, w, m, v, g *ts.Tensor, lr float64, t int64) {
	bc1 := 1 - math.Pow(h.Beta1, float64(t))
	bc2 := 1 - math.Pow(h.Beta2, float64(t))
	if g.DType() != w.DType() {
		g = s.Keep(g.MustTotype(w.DType(), false))
	}
	// m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g². Each temporary is
	// w's size and is dropped as soon as it is used, and the rest are
	// computed in place (the same kernels, so the same bits): at most two
	// exist at once, which for the embedding matrix is what bounds the
	// step's transient memory.
	m.MustMulScalar_(s.Float(h.Beta1))
	tmp := g.MustMulScalar(s.Float(1-h.Beta1), false)
	m.MustAdd_(tmp)
	tmp.MustDrop()
	v.MustMulScalar_(s.Float(h.Beta2))
	tmp = g.MustSquare(false)
	tmp.MustMulScalar_(s.Float(1 - h.Beta2))
	v.MustAdd_(tmp)
	tmp.MustDrop()
	// w −= lr·wd·w (decoupled), then w −= lr · m̂ / (√v̂ + eps)
	if h.WeightDecay != 0 {
		w.MustMulScalar_(s.Float(1 - lr*h.WeightDecay))
	}
	denom := v.MustDivScalar(s.Float(bc2), false)
	denom.MustSqrt_()
	denom.MustAddScalar_(s.Float(h.Eps))
	upd := m.MustDiv(denom, false)
	denom.MustDrop()
	upd.MustMulScalar_(s.Float(lr / bc1))
	w.MustSub_(upd)
	upd.MustDrop()
}

// Update applies one AdamW step with learning rate lr to every parameter
// that has a gradient.
func (o *AdamW) Update(lr float64) error { return o.update(0, lr) }

// update is Update with moment group g.
func (o *AdamW) update(group int, lr float64) error {
	m, v, step := o.moments(group)
	*step++
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
			o.step(&s, w, m[i], v[i], g, lr, *step)
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
	// ZeRO checkpoints: the stage and world size that wrote them and their
	// per-rank files (ShardFile); absent for plain AdamW's single file.
	ZeroStage int      `json:",omitempty"`
	World     int      `json:",omitempty"`
	Files     []string `json:",omitempty"`
	// Moment groups (Hyper) and their update counts; their
	// tensors are GROUP.exp_avg.NAME and GROUP.exp_avg_sq.NAME.
	Groups     []string `json:",omitempty"`
	GroupSteps []int64  `json:",omitempty"`
}

// groupKind is the tensor-name prefix of a moment kind in group name
// ("": the default group's).
func groupKind(name, kind string) string {
	if name == "" {
		return kind
	}
	return name + "." + kind
}

const (
	TensorsFile = "optimizer.safetensors"
	MetaFile    = "optimizer.json"
)

// CheckFiles requires the state's tensor files among listed (the names
// and sizes a checkpoint's manifest lists for dir): plain AdamW's one
// file, or every shard optimizer.json names.
func CheckFiles(dir string, listed map[string]int64) error {
	if _, ok := listed[TensorsFile]; ok {
		return nil
	}
	raw, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return err
	}
	var meta adamMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, MetaFile), err)
	}
	if len(meta.Files) == 0 {
		return fmt.Errorf("%s: no %s", dir, TensorsFile)
	}
	for _, f := range meta.Files {
		if _, ok := listed[f]; !ok {
			return fmt.Errorf("%s: no %s", dir, f)
		}
	}
	return nil
}

// Save writes the state into dir: moments and fp32 masters as
// safetensors (exact bytes), hyper-parameters and step as JSON.
func (o *AdamW) Save(dir string) error {
	meta := adamMeta{Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Step: o.Step}
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
		for _, gr := range o.groups {
			if err := add(groupKind(gr.name, "exp_avg"), gr.m[i]); err != nil {
				return err
			}
			if err := add(groupKind(gr.name, "exp_avg_sq"), gr.v[i]); err != nil {
				return err
			}
		}
		if o.master[i] != p.Tensor {
			if err := add("master", o.master[i]); err != nil {
				return err
			}
		}
	}
	for _, gr := range o.groups {
		meta.Groups, meta.GroupSteps = append(meta.Groups, gr.name), append(meta.GroupSteps, gr.step)
	}
	if err := model.WriteSafetensors(filepath.Join(dir, TensorsFile), srcs, nil); err != nil {
		return err
	}
	return writeOptimMeta(dir, meta)
}

// writeOptimMeta writes optimizer.json, the state's JSON part.
func writeOptimMeta(dir string, meta adamMeta) error {
	js, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileSync(filepath.Join(dir, MetaFile), append(js, '\n'))
}

// Load restores the state from a checkpoint of plain AdamW or of ZeRO at
// any world size (optimState); the parameter names must match.
func (o *AdamW) Load(dir string) (err error) {
	defer tensor.Recover("load optimizer", &err)
	st, err := openOptimState(dir, o.params)
	if err != nil {
		return err
	}
	defer st.Close()
	for i, p := range o.params {
		n := int64(p.Tensor.Numel())
		if err := st.restore("exp_avg", p.Name, n, 0, n, o.m[i]); err != nil {
			return err
		}
		if err := st.restore("exp_avg_sq", p.Name, n, 0, n, o.v[i]); err != nil {
			return err
		}
		for _, gr := range o.groups {
			if !st.hasGroup(gr.name) {
				continue
			}
			if err := st.restore(groupKind(gr.name, "exp_avg"), p.Name, n, 0, n, gr.m[i]); err != nil {
				return err
			}
			if err := st.restore(groupKind(gr.name, "exp_avg_sq"), p.Name, n, 0, n, gr.v[i]); err != nil {
				return err
			}
		}
		if o.master[i] != p.Tensor {
			if err := st.restore("master", p.Name, n, 0, n, o.master[i]); err != nil {
				return err
			}
		}
	}
	m := st.meta
	o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.Step = m.Beta1, m.Beta2, m.Eps, m.WeightDecay, m.Step
	for g := range o.groups {
		o.groups[g].step = st.groupStep(o.groups[g].name)
	}
	return nil
}

// Apply ends an accumulation of gradients with one optimizer step: it
// clips the gradients to global norm maxNorm (0: no clipping), refuses the
// step with ErrBadLoss when the loss or the norm is NaN/Inf (the weights
// and moments stay as they were), else updates with learning rate lr. It
// returns the norm before clipping. GRPO and SFT call only this, so a
// sharded optimizer changes one place.
func (o *AdamW) Apply(lr, maxNorm, loss float64) (norm float64, err error) {
	return o.ApplyGroup(0, lr, maxNorm, loss)
}

// ApplyGroup is Apply with moment group g (0: the default; Hyper.Groups).
func (o *AdamW) ApplyGroup(g int, lr, maxNorm, loss float64) (norm float64, err error) {
	if err := checkGroup(g, o.groupNames); err != nil {
		return 0, err
	}
	if norm, err = o.ClipGradNorm(maxNorm); err != nil {
		return norm, err
	}
	if !finite(loss, norm) {
		return norm, ErrBadLoss
	}
	return norm, o.update(g, lr)
}

var ErrBadLoss = errors.New("loss or gradient is NaN/Inf")

// finite reports whether every value is a finite number.
func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}
