package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// LoRA (Hu et al. 2021, arXiv 2106.09685) as PEFT computes it: a frozen
// projection W gains a low-rank update, y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ with A
// [r, in], B [out, r] and s = alpha/r (alpha/√r with rsLoRA, Kalajdzievski
// 2023). The update is never merged while training: the sampler and the
// trainer run the same unmerged layers, so their log-probs agree as they
// do without LoRA. Adapters are fp32 whatever the base's dtype (fp64 with
// an fp64 base); in a 16-bit model x is cast up for the adapter and the sum
// rounded back once, as PEFT does with its fp32 adapters.

// LoRATargets are the projections LoRA may adapt, named as PEFT names them
// (the default target_modules: all seven). Embeddings and the LM head are
// not supported.
var LoRATargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// LoRAConfig is the lora: section of a run's config (PEFT's LoraConfig
// keys where PEFT has one). LoRA is on when R > 0 or InitFrom is set.
type LoRAConfig struct {
	R             int      `yaml:"r"`              // rank (0: LoRA off unless init_from)
	Alpha         float64  `yaml:"alpha"`          // 0: r (scale 1)
	Dropout       float64  `yaml:"dropout"`        // on the adapter's input while training (SFT only)
	TargetModules []string `yaml:"target_modules"` // default: LoRATargets; "all-linear" means the same
	UseRSLoRA     bool     `yaml:"use_rslora"`     // scale alpha/√r instead of alpha/r
	// Init: "default" (PEFT's: A Kaiming-uniform, B zero, so training
	// starts at the base model) or "gaussian" (A normal with std 1/r, B
	// zero).
	Init string `yaml:"init"`
	// InitFrom is a PEFT adapter directory (adapter_config.json,
	// adapter_model.safetensors) to start from; its rank, alpha, targets
	// and rsLoRA setting are the run's.
	InitFrom string `yaml:"init_from"`
}

// On reports whether the config asks for LoRA.
func (c LoRAConfig) On() bool { return c.R > 0 || c.InitFrom != "" }

// Scale is s: alpha/r, or alpha/√r with rsLoRA.
func (c LoRAConfig) Scale() float64 {
	if c.UseRSLoRA {
		return c.Alpha / math.Sqrt(float64(c.R))
	}
	return c.Alpha / float64(c.R)
}

// Resolve fills the defaults and checks every key, naming the first bad
// one (lora.…). With init_from, the adapter's own config fills r, alpha,
// targets and rsLoRA when it is read (LoadAdapter); keys set here must
// agree with it.
func (c *LoRAConfig) Resolve() error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("config key lora.%s: %s", key, fmt.Sprintf(format, args...))
	}
	if c.R < 0 {
		return bad("r", "must be ≥ 1 (0: LoRA off), got %d", c.R)
	}
	if !c.On() {
		return nil
	}
	switch {
	case c.Alpha < 0:
		return bad("alpha", "must be > 0 (0: r), got %g", c.Alpha)
	case c.Dropout < 0 || c.Dropout >= 1:
		return bad("dropout", "must be in [0, 1), got %g", c.Dropout)
	}
	switch c.Init {
	case "":
		c.Init = "default"
	case "default", "gaussian":
	default:
		return bad("init", "%q: want default (PEFT's: A Kaiming-uniform, B zero) or gaussian", c.Init)
	}
	targets, err := ResolveLoRATargets(c.TargetModules)
	if err != nil {
		return bad("target_modules", "%v", err)
	}
	if c.InitFrom == "" || len(c.TargetModules) > 0 {
		c.TargetModules = targets
	}
	if c.InitFrom == "" && c.Alpha == 0 {
		c.Alpha = float64(c.R)
	}
	return nil
}

// ResolveLoRATargets checks target module names against LoRATargets and
// puts them in its order; none (or "all-linear") means all of them.
func ResolveLoRATargets(names []string) ([]string, error) {
	if len(names) == 0 || (len(names) == 1 && names[0] == "all-linear") {
		return slices.Clone(LoRATargets), nil
	}
	var out []string
	for _, t := range LoRATargets {
		if slices.Contains(names, t) {
			out = append(out, t)
		}
	}
	for _, n := range names {
		if !slices.Contains(LoRATargets, n) {
			what := "unknown"
			if n == "lm_head" || n == "embed_tokens" {
				what = "not supported (LoRA on the embeddings or the LM head)"
			}
			return nil, fmt.Errorf("%q is %s; the projections are %s (or all-linear)", n, what, strings.Join(LoRATargets, ", "))
		}
	}
	return out, nil
}

// AdapterMode selects what the adapters contribute to a forward pass.
type AdapterMode int

const (
	// AdaptersOn: the trained adapters (the policy).
	AdaptersOn AdapterMode = iota
	// AdaptersOff: the base model alone (the reference policy of a run that
	// started from a zero update).
	AdaptersOff
	// AdaptersInitial: the adapters the run started from (the reference of
	// a run that started from lora.init_from; KeepInitial keeps them).
	AdaptersInitial
)

// Adapter is one projection's low-rank update.
type Adapter struct {
	A, B   *ts.Tensor // [r, in], [out, r]: PEFT's lora_A.weight, lora_B.weight
	A0, B0 *ts.Tensor // the initial adapter (KeepInitial), or nil
	set    *LoRA
}

// add returns y + s·(dropout(x)·Aᵀ)·Bᵀ for y = x·Wᵀ + b, rounded once to y's
// dtype.
func (a *Adapter) add(s *tensor.Scope, x, y *ts.Tensor) *ts.Tensor {
	wa, wb := a.A, a.B
	switch a.set.mode {
	case AdaptersOff:
		return y
	case AdaptersInitial:
		if a.A0 == nil {
			panic("lora: the initial adapter was not kept (KeepInitial)")
		}
		wa, wb = a.A0, a.B0
	}
	dt := wa.DType()
	xa := x
	if x.DType() != dt {
		xa = s.Keep(x.MustTotype(dt, false))
	}
	if p := a.set.Config.Dropout; p > 0 && a.set.Training {
		xa = s.Keep(ts.MustDropout(xa, p, true))
	}
	d := linear(s, linear(s, xa, wa, nil), wb, nil)
	d = s.Keep(d.MustMulScalar(s.Float(a.set.scale), false))
	if y.DType() == dt {
		return s.Keep(y.MustAdd(d, false))
	}
	sum := s.Keep(s.Keep(y.MustTotype(dt, false)).MustAdd(d, false))
	return s.Keep(sum.MustTotype(y.DType(), false))
}

// LoRA is a model's set of adapters.
type LoRA struct {
	Config LoRAConfig
	// Training turns dropout on (SFT's update); off, the adapters are
	// deterministic (sampling, scoring, RL).
	Training bool
	scale    float64
	mode     AdapterMode
	params   []NamedParam // lora_A and lora_B of every adapter, sorted by PEFT key
	adapters []*Adapter
}

// peftPrefix is what PEFT puts before the model's module names.
const peftPrefix = "base_model.model."

// adapterSlot is one projection that can carry an adapter.
type adapterSlot struct {
	module string     // PEFT module path, base_model.model.model.layers.N.self_attn.q_proj
	target string     // q_proj …
	weight *ts.Tensor // the frozen W [out, in]
	dst    **Adapter
}

// slots lists the projections of the targets, layer by layer.
func (m *Model) slots(targets []string) []adapterSlot {
	var out []adapterSlot
	for n, l := range m.Layers {
		all := []adapterSlot{
			{"self_attn.q_proj", "q_proj", l.Attn.QProj, &l.Attn.QLoRA},
			{"self_attn.k_proj", "k_proj", l.Attn.KProj, &l.Attn.KLoRA},
			{"self_attn.v_proj", "v_proj", l.Attn.VProj, &l.Attn.VLoRA},
			{"self_attn.o_proj", "o_proj", l.Attn.OProj, &l.Attn.OLoRA},
			{"mlp.gate_proj", "gate_proj", l.MLP.GateProj, &l.MLP.GateLoRA},
			{"mlp.up_proj", "up_proj", l.MLP.UpProj, &l.MLP.UpLoRA},
			{"mlp.down_proj", "down_proj", l.MLP.DownProj, &l.MLP.DownLoRA},
		}
		for _, sl := range all {
			if slices.Contains(targets, sl.target) {
				sl.module = fmt.Sprintf("%smodel.layers.%d.%s", peftPrefix, n, sl.module)
				out = append(out, sl)
			}
		}
	}
	return out
}

// adapterDType is the adapters' dtype for a base of dtype d.
func adapterDType(d gotch.DType) gotch.DType {
	if d == gotch.Double {
		return d
	}
	return gotch.Float
}

// AddLoRA gives the model fresh adapters (c resolved, without init_from),
// initialized as c.Init says from a generator of their own seeded with
// seed — not torch's global one, which other work on the thread (or other
// in-process ranks) would advance; A is drawn in the adapters' order, so
// every rank of a data-parallel run starts from the same adapters.
func (m *Model) AddLoRA(c LoRAConfig, seed int64) (err error) {
	defer tensor.Recover("add LoRA", &err)
	if m.lora != nil {
		return fmt.Errorf("add LoRA: the model has adapters already")
	}
	if c.R < 1 {
		return fmt.Errorf("add LoRA: rank %d", c.R)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6c6f7261)) // "lora"
	dt := adapterDType(m.DType)
	return m.attachLoRA(c, func(sl adapterSlot) (a, b *ts.Tensor, err error) {
		size := sl.weight.MustSize()
		out, in := size[0], size[1]
		vals := make([]float32, int64(c.R)*in)
		switch c.Init {
		case "gaussian":
			for i := range vals {
				vals[i] = float32(rng.NormFloat64() / float64(c.R))
			}
		default:
			// kaiming_uniform_(a=√5): bound = gain·√(3/fan_in) with gain
			// √(2/(1+5)), that is 1/√in.
			bound := 1 / math.Sqrt(float64(in))
			for i := range vals {
				vals[i] = float32((2*rng.Float64() - 1) * bound)
			}
		}
		var s tensor.Scope
		defer s.Close()
		u := tensor.FromSlice(&s, vals, []int64{int64(c.R), in}, m.Device)
		return u.MustTotype(dt, false), ts.MustZeros([]int64{out, int64(c.R)}, dt, m.Device), nil
	})
}

// attachLoRA makes the adapter of every target projection with init, which
// returns its A and B (owned by the LoRA from then on).
func (m *Model) attachLoRA(c LoRAConfig, init func(adapterSlot) (a, b *ts.Tensor, err error)) error {
	l := &LoRA{Config: c, scale: c.Scale()}
	for _, sl := range m.slots(c.TargetModules) {
		a, b, err := init(sl)
		if err != nil {
			l.close()
			return err
		}
		ad := &Adapter{A: a, B: b, set: l}
		l.adapters = append(l.adapters, ad)
		*sl.dst = ad
		l.params = append(l.params, NamedParam{sl.module + ".lora_A.weight", a}, NamedParam{sl.module + ".lora_B.weight", b})
	}
	slices.SortFunc(l.params, func(x, y NamedParam) int { return strings.Compare(x.Name, y.Name) })
	m.lora = l
	return nil
}

// LoRA returns the model's adapters, or nil.
func (m *Model) LoRA() *LoRA { return m.lora }

// TrainableParams are what a run trains: the adapters' A and B under LoRA
// (the base frozen), else every parameter. Sorted by name.
func (m *Model) TrainableParams() []NamedParam {
	if m.lora != nil {
		return m.lora.params
	}
	return m.params
}

// Params of the adapters, sorted by PEFT key.
func (l *LoRA) Params() []NamedParam { return l.params }

// Scale is the adapters' s.
func (l *LoRA) Scale() float64 { return l.scale }

// UseAdapters switches what the adapters contribute until the returned
// function restores the previous mode.
func (m *Model) UseAdapters(mode AdapterMode) (restore func()) {
	if m.lora == nil {
		return func() {}
	}
	prev := m.lora.mode
	m.lora.mode = mode
	return func() { m.lora.mode = prev }
}

// KeepInitial copies the adapters as they are now, for AdaptersInitial.
func (m *Model) KeepInitial() (err error) {
	defer tensor.Recover("keep the initial adapter", &err)
	if m.lora == nil {
		return fmt.Errorf("keep the initial adapter: the model has no adapters")
	}
	return csrc.NoGrad(func() error {
		for _, a := range m.lora.adapters {
			if a.A0 == nil {
				a.A0, a.B0 = a.A.MustZerosLike(false), a.B.MustZerosLike(false)
				a.A0.Copy_(a.A)
				a.B0.Copy_(a.B)
			}
		}
		return nil
	})
}

func (l *LoRA) close() {
	for _, a := range l.adapters {
		for _, t := range []*ts.Tensor{a.A, a.B, a.A0, a.B0} {
			if t != nil {
				t.MustDrop()
			}
		}
	}
	l.adapters, l.params = nil, nil
}

// dropLoRA removes the adapters from the model and frees them.
func (m *Model) dropLoRA() {
	if m.lora == nil {
		return
	}
	for _, sl := range m.slots(LoRATargets) {
		*sl.dst = nil
	}
	m.lora.close()
	m.lora = nil
}

// MergeLoRA folds the adapters into the weights, W ← W + s·B·A (computed in
// the adapters' precision and rounded once to W's dtype; PEFT rounds the
// update to a 16-bit W's dtype before adding it, so in bf16 the two may
// differ by one rounding), and removes them: the model is then a plain
// model, for Save.
func (m *Model) MergeLoRA() (err error) {
	defer tensor.Recover("merge LoRA", &err)
	if m.lora == nil {
		return fmt.Errorf("merge LoRA: the model has no adapters")
	}
	err = csrc.NoGrad(func() error {
		for _, sl := range m.slots(m.lora.Config.TargetModules) {
			a := *sl.dst
			var s tensor.Scope
			delta := s.Keep(s.Keep(a.B.MustMatmul(a.A, false)).MustMulScalar(s.Float(m.lora.scale), false))
			w := s.Keep(sl.weight.MustTotype(delta.DType(), false))
			sl.weight.Copy_(s.Keep(w.MustAdd(delta, false)))
			s.Close()
		}
		return nil
	})
	if err != nil {
		return err
	}
	m.dropLoRA()
	return nil
}
