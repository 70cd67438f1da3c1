package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	if targets, err = resolveTargets(targets); err != nil {
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
	path := filepath.Join(dir, AdapterWeightsFile)
	f, err := OpenSafetensors(path)
	if err != nil {
		return fmt.Errorf("load adapter: %w", err)
	}
	defer f.Close()
	// PEFT writes keys without the adapter's name; a state dict saved by
	// hand may have it (lora_A.default.weight).
	byKey := map[string]string{}
	for _, t := range f.Tensors() {
		k := strings.Replace(t.Name, ".default.weight", ".weight", 1)
		byKey[k] = t.Name
	}
	var missing, misShaped, unexpected []string
	want := map[string]bool{}
	for _, sl := range m.slots(c.TargetModules) {
		size := sl.weight.MustSize()
		for _, e := range []struct {
			key   string
			shape []int64
		}{{sl.module + ".lora_A.weight", []int64{int64(c.R), size[1]}}, {sl.module + ".lora_B.weight", []int64{size[0], int64(c.R)}}} {
			want[e.key] = true
			name, ok := byKey[e.key]
			if !ok {
				missing = append(missing, e.key)
				continue
			}
			if info, _ := f.Info(name); !slices.Equal(info.Shape, e.shape) {
				misShaped = append(misShaped, fmt.Sprintf("%s is %v, want %v", e.key, info.Shape, e.shape))
			}
		}
	}
	for k := range byKey {
		if !want[k] {
			unexpected = append(unexpected, k)
		}
	}
	slices.Sort(unexpected)
	var msgs []string
	for _, x := range []struct {
		what  string
		names []string
	}{{"missing", missing}, {"unexpected", unexpected}, {"mis-shaped", misShaped}} {
		if len(x.names) > 0 {
			msgs = append(msgs, x.what+": "+strings.Join(x.names, "; "))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("load adapter %s: its tensors do not match adapter_config.json and this model (r %d, target_modules %v):\n  %s",
			dir, c.R, c.TargetModules, strings.Join(msgs, "\n  "))
	}
	dt := adapterDType(m.DType)
	read := func(key string) (*ts.Tensor, error) {
		b, info, err := f.Bytes(byKey[key])
		if err != nil {
			return nil, err
		}
		src, err := info.DType.Gotch()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, key, err)
		}
		return csrc.FromBytes(b, info.Shape, src, dt, m.Device)
	}
	return m.attachLoRA(c, func(sl adapterSlot) (a, b *ts.Tensor, err error) {
		if a, err = read(sl.module + ".lora_A.weight"); err != nil {
			return nil, nil, err
		}
		if b, err = read(sl.module + ".lora_B.weight"); err != nil {
			a.MustDrop()
			return nil, nil, err
		}
		return a, b, nil
	})
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
	var srcs []TensorSource
	for _, np := range m.lora.params {
		np := np
		st, err := STDTypeOf(np.Tensor.DType())
		if err != nil {
			return err
		}
		srcs = append(srcs, TensorSource{Name: np.Name, DType: st, Shape: np.Tensor.MustSize(), Write: func(w io.Writer) error {
			b, err := csrc.ToBytes(np.Tensor)
			if err != nil {
				return err
			}
			_, err = w.Write(b)
			return err
		}})
	}
	if err := WriteSafetensors(filepath.Join(dir, AdapterWeightsFile), srcs, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, AdapterConfigFile), append(js, '\n')); err != nil {
		return err
	}
	return fsutil.SyncDir(dir)
}
