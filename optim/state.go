package optim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// Checkpoints. Plain AdamW writes optimizer.safetensors (every parameter's
// moments and 16-bit masters, whole) and optimizer.json. ZeRO writes
// optimizer.json (rank 0) and one optimizer-rank-RRRRR-of-WWWWW.safetensors
// per rank holding its chunks, 1-D, under the same names. Either format
// loads into either optimizer at any world size: optimState reads any
// element range of a parameter's state from whichever files hold it.

// ShardFile is rank's state file of a ZeRO checkpoint of world ranks.
func ShardFile(rank, world int) string {
	return fmt.Sprintf("optimizer-rank-%05d-of-%05d.safetensors", rank, world)
}

// Save writes this rank's chunks into its shard file; rank 0 writes
// optimizer.json naming every rank's.
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
		for g, name := range o.groups {
			if err := add(groupKind(name, "exp_avg"), z.gm[g]); err != nil {
				return err
			}
			if err := add(groupKind(name, "exp_avg_sq"), z.gv[g]); err != nil {
				return err
			}
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
	meta.Groups, meta.GroupSteps = o.groups, o.gsteps
	return writeOptimMeta(dir, meta)
}

// Load restores this rank's chunks from a checkpoint of any sharding.
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
		for g, gname := range o.groups {
			if !st.hasGroup(gname) {
				continue
			}
			if err := st.restore(groupKind(gname, "exp_avg"), name, z.n, z.lo, z.hi, z.gm[g]); err != nil {
				return err
			}
			if err := st.restore(groupKind(gname, "exp_avg_sq"), name, z.n, z.lo, z.hi, z.gv[g]); err != nil {
				return err
			}
		}
		if z.ownMaster {
			if err := st.restore("master", name, z.n, z.lo, z.hi, z.master); err != nil {
				return err
			}
		}
	}
	m := st.meta
	o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.step = m.Beta1, m.Beta2, m.Eps, m.WeightDecay, m.Step
	for g, name := range o.groups {
		o.gsteps[g] = st.groupStep(name)
	}
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

// hasGroup reports whether the checkpoint holds moment group name's
// tensors. A group it lacks (a run that turned lanpo.consolidate_lr on at
// a resume) starts from zero moments, as a fresh optimizer does.
func (st *optimState) hasGroup(name string) bool {
	for _, g := range st.meta.Groups {
		if g == name {
			return true
		}
	}
	return false
}

// groupStep is moment group name's update count in the checkpoint (0
// where it has none).
func (st *optimState) groupStep(name string) int64 {
	for i, g := range st.meta.Groups {
		if g == name && i < len(st.meta.GroupSteps) {
			return st.meta.GroupSteps[i]
		}
	}
	return 0
}
