package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Adapters on disk are PEFT's: adapter_config.json and
// adapter_model.safetensors with PEFT's keys
// (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight …), so
// PeftModel.from_pretrained and vLLM's LoRA loader read what lanpo writes,
// and lanpo reads what PEFT writes.

const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

// peftConfig is the part of PEFT's adapter_config.json lanpo writes and
// reads; other keys are checked only where their value would change the
// network (checkUnsupported).
type peftConfig struct {
	PeftType      string   `json:"peft_type"`
	TaskType      string   `json:"task_type"`
	BaseModel     string   `json:"base_model_name_or_path"`
	R             int      `json:"r"`
	Alpha         float64  `json:"lora_alpha"`
	Dropout       float64  `json:"lora_dropout"`
	TargetModules any      `json:"target_modules"` // a list, or a string (PEFT: a regex, or "all-linear")
	UseRSLoRA     bool     `json:"use_rslora"`
	Bias          string   `json:"bias"`
	FanInFanOut   bool     `json:"fan_in_fan_out"`
	InitWeights   any      `json:"init_lora_weights"`
	InferenceMode bool     `json:"inference_mode"`
	UseDoRA       bool     `json:"use_dora"`
	ModulesToSave []string `json:"modules_to_save"`
	Layers        any      `json:"layers_to_transform"`
	RankPattern   any      `json:"rank_pattern"`
	AlphaPattern  any      `json:"alpha_pattern"`
	// Newer PEFT keys that change the network when set.
	LoRABias         bool `json:"lora_bias,omitempty"`
	UseQALoRA        bool `json:"use_qalora,omitempty"`
	Exclude          any  `json:"exclude_modules,omitempty"`
	LayerReplication any  `json:"layer_replication,omitempty"`
	TargetParameters any  `json:"target_parameters,omitempty"`
	TrainableTokens  any  `json:"trainable_token_indices,omitempty"`
}

// IsAdapterDir reports whether dir holds a PEFT adapter.
func IsAdapterDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, AdapterConfigFile))
	return err == nil
}

// ReadAdapterConfig reads dir's adapter_config.json as a LoRAConfig
// (InitFrom dir) and the base model it names.
func ReadAdapterConfig(dir string) (c LoRAConfig, base string, err error) {
	path := filepath.Join(dir, AdapterConfigFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, "", fmt.Errorf("%s is not a PEFT adapter directory: no %s", dir, AdapterConfigFile)
	}
	if err != nil {
		return c, "", err
	}
	var p peftConfig
	if err := json.Unmarshal(b, &p); err != nil {
		return c, "", fmt.Errorf("%s: %w", path, err)
	}
	if err := p.checkUnsupported(); err != nil {
		return c, "", fmt.Errorf("%s: %w", path, err)
	}
	var targets []string
	switch t := p.TargetModules.(type) {
	case string:
		targets = []string{t}
	case []any:
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return c, "", fmt.Errorf("%s: key target_modules: %v is not a name", path, x)
			}
			targets = append(targets, s)
		}
	case nil:
	default:
		return c, "", fmt.Errorf("%s: key target_modules: want a list of names, got %v", path, t)
	}
	if targets, err = ResolveLoRATargets(targets); err != nil {
		return c, "", fmt.Errorf("%s: key target_modules: %w (a regex is not supported)", path, err)
	}
	if p.R < 1 || p.Alpha <= 0 {
		return c, "", fmt.Errorf("%s: keys r and lora_alpha must be positive, got %d and %g", path, p.R, p.Alpha)
	}
	c = LoRAConfig{R: p.R, Alpha: p.Alpha, Dropout: p.Dropout, TargetModules: targets, UseRSLoRA: p.UseRSLoRA, Init: "default", InitFrom: dir}
	return c, p.BaseModel, nil
}

// checkUnsupported names the first key whose value lanpo cannot reproduce.
func (p peftConfig) checkUnsupported() error {
	switch {
	case p.PeftType != "LORA":
		return fmt.Errorf("key peft_type: %q is not supported (LORA is)", p.PeftType)
	case p.UseDoRA:
		return fmt.Errorf("key use_dora: DoRA is not supported")
	case p.Bias != "" && p.Bias != "none":
		return fmt.Errorf("key bias: %q is not supported (none is)", p.Bias)
	case p.FanInFanOut:
		return fmt.Errorf("key fan_in_fan_out: true is not supported (it is for GPT-2's Conv1D layers)")
	case len(p.ModulesToSave) > 0:
		return fmt.Errorf("key modules_to_save: %v is not supported (fully trained extra modules)", p.ModulesToSave)
	case !emptyJSON(p.Layers):
		return fmt.Errorf("key layers_to_transform: %v is not supported (every layer is adapted)", p.Layers)
	case !emptyJSON(p.RankPattern) || !emptyJSON(p.AlphaPattern):
		return fmt.Errorf("keys rank_pattern, alpha_pattern: per-module ranks are not supported")
	case p.LoRABias:
		return fmt.Errorf("key lora_bias: a bias in lora_B is not supported")
	case p.UseQALoRA:
		return fmt.Errorf("key use_qalora: QA-LoRA is not supported")
	case !emptyJSON(p.Exclude), !emptyJSON(p.LayerReplication), !emptyJSON(p.TargetParameters), !emptyJSON(p.TrainableTokens):
		return fmt.Errorf("keys exclude_modules, layer_replication, target_parameters, trainable_token_indices: not supported")
	}
	return nil
}

func emptyJSON(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// LoadAdapter gives the model the PEFT adapter in dir (see
// ReadAdapterConfig). Its tensors must be exactly those its config implies
// for this model: missing, unexpected and mis-shaped ones are reported by
// name. Weights are read into the adapters' dtype (fp32).
func (m *Model) LoadAdapter(dir string) (err error) {
	defer tensor.Recover("load adapter "+dir, &err)
	if m.lora != nil {
		return fmt.Errorf("load adapter %s: the model has adapters already", dir)
	}
	c, _, err := ReadAdapterConfig(dir)
	if err != nil {
		return err
	}
	ws, err := m.readAdapter(dir, c)
	if err != nil {
		return err
	}
	return m.attachLoRA(c, func(sl adapterSlot) (a, b *ts.Tensor, err error) {
		return ws[sl.module+".lora_A.weight"], ws[sl.module+".lora_B.weight"], nil
	})
}

// LoadInitialAdapter reads the PEFT adapter in dir as the initial adapter
// (AdaptersInitial): a resumed run's reference when it started from
// lora.init_from. Its config must be the model's adapters'.
func (m *Model) LoadInitialAdapter(dir string) (err error) {
	defer tensor.Recover("load adapter "+dir, &err)
	if m.lora == nil {
		return fmt.Errorf("load adapter %s: the model has no adapters", dir)
	}
	c, _, err := ReadAdapterConfig(dir)
	if err != nil {
		return err
	}
	if have := m.lora.Config; c.R != have.R || c.Alpha != have.Alpha || c.UseRSLoRA != have.UseRSLoRA || !slices.Equal(c.TargetModules, have.TargetModules) {
		return fmt.Errorf("load adapter %s: r %d, alpha %g, rslora %v, targets %v; the model's adapters are r %d, alpha %g, rslora %v, targets %v",
			dir, c.R, c.Alpha, c.UseRSLoRA, c.TargetModules, have.R, have.Alpha, have.UseRSLoRA, have.TargetModules)
	}
	ws, err := m.readAdapter(dir, c)
	if err != nil {
		return err
	}
	for _, sl := range m.slots(c.TargetModules) {
		a := *sl.dst
		for _, t := range []*ts.Tensor{a.A0, a.B0} {
			if t != nil {
				t.MustDrop()
			}
		}
		a.A0, a.B0 = ws[sl.module+".lora_A.weight"], ws[sl.module+".lora_B.weight"]
	}
	return nil
}

// readAdapter reads dir's adapter_model.safetensors for config c, checking
// its tensors against what c implies for this model, into tensors of the
// adapters' dtype keyed by PEFT name.
func (m *Model) readAdapter(dir string, c LoRAConfig) (ws map[string]*ts.Tensor, err error) {
	path := filepath.Join(dir, AdapterWeightsFile)
	f, err := OpenSafetensors(path)
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	defer f.Close()
	// PEFT writes keys without the adapter's name; a state dict saved by
	// hand may have it (lora_A.default.weight).
	byKey := map[string]string{}
	for _, t := range f.Tensors() {
		k := strings.Replace(t.Name, ".default.weight", ".weight", 1)
		byKey[k] = t.Name
	}
	var specs []paramSpec
	for _, sl := range m.slots(c.TargetModules) {
		size := sl.weight.MustSize()
		specs = append(specs, paramSpec{name: sl.module + ".lora_A.weight", shape: []int64{int64(c.R), size[1]}},
			paramSpec{name: sl.module + ".lora_B.weight", shape: []int64{size[0], int64(c.R)}})
	}
	names := slices.Sorted(maps.Keys(byKey))
	msgs := tensorDiffs(specs, names, func(key string) (TensorInfo, bool) {
		name, ok := byKey[key]
		if !ok {
			return TensorInfo{}, false
		}
		return f.Info(name)
	})
	if len(msgs) > 0 {
		return nil, fmt.Errorf("load adapter %s: its tensors do not match adapter_config.json and this model (r %d, target_modules %v):\n  %s",
			dir, c.R, c.TargetModules, strings.Join(msgs, "\n  "))
	}
	ws = map[string]*ts.Tensor{}
	defer func() {
		if err != nil {
			for _, t := range ws {
				t.MustDrop()
			}
		}
	}()
	dt := adapterDType(m.DType)
	for _, sp := range specs {
		b, info, err := f.Bytes(byKey[sp.name])
		if err != nil {
			return nil, err
		}
		t, err := csrc.FromBytes(b, info.Shape, stToGotch[info.DType], dt, m.Device)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, sp.name, err)
		}
		ws[sp.name] = t
	}
	return ws, nil
}

// SaveAdapter writes the adapters to dir as PEFT does:
// adapter_config.json (naming base as base_model_name_or_path) and
// adapter_model.safetensors (fp32).
func (m *Model) SaveAdapter(dir, base string) error {
	if m.lora == nil {
		return fmt.Errorf("save adapter %s: the model has no adapters", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c := m.lora.Config
	p := peftConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: base, R: c.R, Alpha: c.Alpha, Dropout: c.Dropout,
		TargetModules: c.TargetModules, UseRSLoRA: c.UseRSLoRA, Bias: "none", InitWeights: c.Init != "gaussian", InferenceMode: true,
		RankPattern: map[string]any{}, AlphaPattern: map[string]any{}}
	if c.Init == "gaussian" {
		p.InitWeights = "gaussian"
	}
	js, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	st, err := STDTypeOf(adapterDType(m.DType))
	if err != nil {
		return err
	}
	if err := writeParams(filepath.Join(dir, AdapterWeightsFile), m.lora.params, st); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, AdapterConfigFile), append(js, '\n')); err != nil {
		return err
	}
	return fsutil.SyncDir(dir)
}

// LoadWithAdapter loads the model in dir with the PEFT adapter in adapter
// ("" none). A dir that holds an adapter and no config.json (a LoRA run's
// checkpoint, or PEFT's save_pretrained output) is loaded onto the base
// model its adapter_config.json names, which must be a directory here.
func LoadWithAdapter(dir, adapter string, opt LoadOptions) (*Model, error) {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, fs.ErrNotExist) && IsAdapterDir(dir) {
		if adapter != "" {
			return nil, fmt.Errorf("%s is a LoRA adapter, not a model: pass the base model with it and --adapter %s", dir, adapter)
		}
		_, base, err := ReadAdapterConfig(dir)
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(filepath.Join(base, "config.json")); base == "" || err != nil || st.IsDir() {
			return nil, fmt.Errorf("%s is a LoRA adapter whose base model (%s base_model_name_or_path %q) is not a model directory here: pass the base model and --adapter %s",
				dir, AdapterConfigFile, base, dir)
		}
		dir, adapter = base, dir
	}
	m, err := Load(dir, opt)
	if err != nil || adapter == "" {
		return m, err
	}
	if err := m.LoadAdapter(adapter); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}
