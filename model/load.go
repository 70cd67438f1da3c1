package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// LoadOptions chooses where and in what precision the parameters live.
type LoadOptions struct {
	Device gotch.Device // zero: the CPU
	// DType of the parameters; 0 means float32 on CPU and the checkpoint's
	// torch_dtype (else bfloat16) on CUDA.
	DType     gotch.DType
	Attention AttentionImpl
}

var stToGotch = map[STDType]gotch.DType{"F32": gotch.Float, "BF16": gotch.BFloat16, "F16": gotch.Half, "F64": gotch.Double}

// paramSpec is one expected parameter: its key and shape.
type paramSpec struct {
	name  string
	shape []int64
	set   func(*ts.Tensor)
}

// specs lists every parameter the config implies, with where it goes.
func (m *Model) specs() []paramSpec {
	c := m.Config
	h, i, v := c.HiddenSize, c.IntermediateSize, c.VocabSize
	qd, kvd := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	sp := []paramSpec{
		{"model.embed_tokens.weight", []int64{v, h}, func(t *ts.Tensor) { m.Embed = t }},
		{"model.norm.weight", []int64{h}, func(t *ts.Tensor) { m.Norm = t }},
	}
	if !c.TieWordEmbeddings {
		sp = append(sp, paramSpec{"lm_head.weight", []int64{v, h}, func(t *ts.Tensor) { m.LMHead = t }})
	}
	m.Layers = make([]*DecoderLayer, c.NumHiddenLayers)
	for n := range m.Layers {
		l := &DecoderLayer{}
		m.Layers[n] = l
		p := fmt.Sprintf("model.layers.%d.", n)
		add := func(name string, shape []int64, dst **ts.Tensor) {
			sp = append(sp, paramSpec{p + name, shape, func(t *ts.Tensor) { *dst = t }})
		}
		add("input_layernorm.weight", []int64{h}, &l.InputNorm)
		add("post_attention_layernorm.weight", []int64{h}, &l.PostAttnNorm)
		add("self_attn.q_proj.weight", []int64{qd, h}, &l.Attn.QProj)
		add("self_attn.k_proj.weight", []int64{kvd, h}, &l.Attn.KProj)
		add("self_attn.v_proj.weight", []int64{kvd, h}, &l.Attn.VProj)
		add("self_attn.o_proj.weight", []int64{h, qd}, &l.Attn.OProj)
		if c.QKVBias {
			add("self_attn.q_proj.bias", []int64{qd}, &l.Attn.QBias)
			add("self_attn.k_proj.bias", []int64{kvd}, &l.Attn.KBias)
			add("self_attn.v_proj.bias", []int64{kvd}, &l.Attn.VBias)
		}
		if c.OBias {
			add("self_attn.o_proj.bias", []int64{h}, &l.Attn.OBias)
		}
		if c.QKNorm {
			add("self_attn.q_norm.weight", []int64{c.HeadDim}, &l.Attn.QNorm)
			add("self_attn.k_norm.weight", []int64{c.HeadDim}, &l.Attn.KNorm)
		}
		add("mlp.gate_proj.weight", []int64{i, h}, &l.MLP.GateProj)
		add("mlp.up_proj.weight", []int64{i, h}, &l.MLP.UpProj)
		add("mlp.down_proj.weight", []int64{h, i}, &l.MLP.DownProj)
	}
	sort.Slice(sp, func(a, b int) bool { return sp[a].name < sp[b].name })
	return sp
}

// CheckDir names a directory that cannot hold a model because it has no
// config.json (Load's first check; callers that write before loading run
// it first).
func CheckDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s has no config.json: want a Hugging Face model directory (config.json, *.safetensors, the tokenizer files)", dir)
	}
	return nil
}

// Load reads a Hugging Face model directory (config.json and safetensors,
// single or sharded). The checkpoint's tensors must be exactly the ones the
// config implies: missing, unexpected and mis-shaped tensors are all
// reported, by name, in one error.
func Load(dir string, opt LoadOptions) (m *Model, err error) {
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "config.json")
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		return nil, err
	}
	rawConfig, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	companions, err := readCompanions(dir)
	if err != nil {
		return nil, err
	}
	set, err := OpenTensorSet(dir)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	opt.Device = opt.device()
	model := &Model{Config: cfg, Device: opt.Device, DType: opt.DType, rawConfig: rawConfig, sourceDir: dir, companions: companions}
	m = model
	if m.DType == 0 {
		m.DType = gotch.Float
		if opt.Device.IsCuda() {
			m.DType = gotch.BFloat16
			if cfg.TorchDType != "" {
				m.DType, _ = csrc.ParseDType(cfg.TorchDType)
			}
		}
	}
	defer func() {
		if err != nil {
			model.Close() // frees whatever was loaded before the error
			m = nil
		}
	}()
	defer tensor.Recover("load "+dir, &err)
	specs := m.specs()
	if err := checkTensors(dir, set, specs); err != nil {
		return nil, err
	}
	for _, sp := range specs {
		b, info, err := set.Bytes(sp.name)
		if err != nil {
			return nil, err
		}
		t, err := csrc.FromBytes(b, info.Shape, stToGotch[info.DType], m.DType, m.Device)
		if err != nil {
			return nil, fmt.Errorf("load %s: %s: %w", dir, sp.name, err)
		}
		m.params = append(m.params, NamedParam{Name: sp.name, Tensor: t})
		sp.set(t)
	}
	if err := model.finish(opt.Attention); err != nil {
		return nil, err
	}
	return m, nil
}

// finish ties the head, builds the RoPE tables and picks attention.
func (m *Model) finish(attn AttentionImpl) error {
	if m.Config.TieWordEmbeddings {
		m.LMHead = m.Embed
	}
	maxPos := m.Config.MaxPositionEmbeddings
	if maxPos <= 0 {
		maxPos = 4096
	}
	m.rope = newRope(m.Config.HeadDim, m.Config.RopeTheta, maxPos, m.Device)
	return m.SetAttention(attn)
}

// checkTensors compares the checkpoint's tensors with the expected ones and
// reports every difference.
func checkTensors(dir string, set *TensorSet, specs []paramSpec) error {
	msgs := tensorDiffs(specs, set.Names(), func(name string) (TensorInfo, bool) {
		_, info, err := set.Bytes(name)
		return info, err == nil
	})
	if len(msgs) > 0 {
		return fmt.Errorf("load %s: the checkpoint does not match config.json:\n  %s", dir, strings.Join(msgs, "\n  "))
	}
	return nil
}

// tensorDiffs compares the tensors a file holds (names, sorted; info looks
// one up) with the expected specs and returns one line per kind of
// difference, each naming every tensor: missing, unexpected, mis-shaped,
// not a float dtype. None: they match.
func tensorDiffs(specs []paramSpec, names []string, info func(name string) (TensorInfo, bool)) []string {
	var missing, misShaped, badType []string
	want := map[string]bool{}
	for _, sp := range specs {
		want[sp.name] = true
		in, ok := info(sp.name)
		if !ok {
			missing = append(missing, sp.name)
			continue
		}
		if !slices.Equal(in.Shape, sp.shape) {
			misShaped = append(misShaped, fmt.Sprintf("%s is %v, want %v", sp.name, in.Shape, sp.shape))
		}
		if _, ok := stToGotch[in.DType]; !ok {
			badType = append(badType, fmt.Sprintf("%s is %s", sp.name, in.DType))
		}
	}
	var unexpected []string
	for _, n := range names {
		if !want[n] {
			unexpected = append(unexpected, n)
		}
	}
	var msgs []string
	if len(missing) > 0 {
		msgs = append(msgs, "missing: "+strings.Join(missing, ", "))
	}
	if len(unexpected) > 0 {
		msgs = append(msgs, "unexpected: "+strings.Join(unexpected, ", "))
	}
	if len(misShaped) > 0 {
		msgs = append(msgs, "mis-shaped: "+strings.Join(misShaped, "; "))
	}
	if len(badType) > 0 {
		msgs = append(msgs, "not a float dtype: "+strings.Join(badType, "; "))
	}
	return msgs
}

// AttentionName names the attention a model on dev uses by default
// (AttentionAuto): SDPA on CUDA where libtorch has it, else the reference.
func AttentionName(dev gotch.Device) string {
	if sdpaAvailable() && dev.IsCuda() {
		return "SDPA (scaled_dot_product_attention)"
	}
	return "reference (matmul, fp32 softmax)"
}

// AttentionName names the attention this model uses now.
func (m *Model) AttentionName() string {
	if m.useSDPA {
		return "SDPA (scaled_dot_product_attention)"
	}
	return "reference (matmul, fp32 softmax)"
}

func sdpaAvailable() bool {
	return !slices.Contains(libtch.LanpoUnavailableOps, "atg_scaled_dot_product_attention")
}

func csrcVersion() string { return libtch.LanpoLibtorchVersion }

// device is the device to use: the zero Device means the CPU (gotch's own
// zero value is not a device and would end the process).
func (o LoadOptions) device() gotch.Device {
	if o.Device.Name == "" {
		return gotch.CPU
	}
	return o.Device
}

// NewRandom builds a model of the given config with random weights (normal,
// std 0.02; norm weights 1), seeded, for benchmarks, tests and models
// trained from scratch. cfg is validated first.
func NewRandom(cfg *Config, opt LoadOptions, seed int64) (m *Model, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if opt.DType == 0 {
		opt.DType = gotch.Float
	}
	opt.Device = opt.device()
	model := &Model{Config: cfg, Device: opt.Device, DType: opt.DType, rawConfig: raw}
	m = model
	defer func() {
		if err != nil {
			model.Close()
			m = nil
		}
	}()
	defer tensor.Recover("random init", &err)
	if err := csrc.ManualSeed(seed); err != nil {
		return nil, err
	}
	for _, sp := range model.specs() {
		var t *ts.Tensor
		if strings.HasSuffix(sp.name, "norm.weight") || strings.HasSuffix(sp.name, "layernorm.weight") {
			t = ts.MustOnes(sp.shape, opt.DType, opt.Device)
		} else {
			r := ts.MustRandn(sp.shape, gotch.Float, opt.Device)
			std := ts.FloatScalar(0.02)
			t = r.MustMulScalar(std, true).MustTotype(opt.DType, true)
			runtime.KeepAlive(std) // see tensor.Scope.Float
		}
		model.params = append(model.params, NamedParam{Name: sp.name, Tensor: t})
		sp.set(t)
	}
	if err := model.finish(opt.Attention); err != nil {
		return nil, err
	}
	return model, nil
}
