package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Config is a Hugging Face config.json of the Qwen2 family (Qwen2, Qwen2.5,
// Qwen3) or Llama; the JSON tags are the HF keys. Keys lanpo does not use
// are ignored; keys whose values would change results and that lanpo does
// not implement are rejected by validate.
type Config struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	VocabSize             int64           `json:"vocab_size"`
	HiddenSize            int64           `json:"hidden_size"`
	IntermediateSize      int64           `json:"intermediate_size"`
	NumHiddenLayers       int64           `json:"num_hidden_layers"`
	NumAttentionHeads     int64           `json:"num_attention_heads"`
	NumKeyValueHeads      int64           `json:"num_key_value_heads"`
	HeadDim               int64           `json:"head_dim"`
	MaxPositionEmbeddings int64           `json:"max_position_embeddings"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta"`
	RopeScaling           map[string]any  `json:"rope_scaling,omitempty"`
	TieWordEmbeddings     bool            `json:"tie_word_embeddings"`
	HiddenAct             string          `json:"hidden_act"`
	AttentionBias         *bool           `json:"attention_bias,omitempty"`
	MLPBias               bool            `json:"mlp_bias"`
	UseSlidingWindow      bool            `json:"use_sliding_window"`
	SlidingWindow         *int64          `json:"sliding_window,omitempty"`
	MaxWindowLayers       *int64          `json:"max_window_layers,omitempty"`
	TorchDType            string          `json:"torch_dtype,omitempty"` // "" is no key: transformers 4.x reads "" as torch.""
	BOSTokenID            *int64          `json:"bos_token_id,omitempty"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"` // an id or a list of ids

	// Derived by validate from model_type and the keys above.
	QKVBias bool `json:"-"` // q/k/v projections carry a bias
	OBias   bool `json:"-"` // o_proj carries a bias
	QKNorm  bool `json:"-"` // per-head RMSNorm on q and k before RoPE (Qwen3)
}

// LoadConfig reads and validates dir/config.json.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// validate fills defaults the way transformers does for each model type and
// names the first bad key.
func (c *Config) validate() error {
	bias := func(def bool) bool {
		if c.AttentionBias != nil {
			return *c.AttentionBias
		}
		return def
	}
	switch c.ModelType {
	case "qwen2":
		// Qwen2Attention: q/k/v with bias, o_proj without, whatever the config says.
		c.QKVBias, c.OBias = true, false
	case "qwen3":
		c.QKVBias, c.QKNorm = bias(false), true
		c.OBias = c.QKVBias
	case "llama":
		c.QKVBias = bias(false)
		c.OBias = c.QKVBias
	case "":
		return errors.New("model_type is missing (want qwen2, qwen3 or llama)")
	default:
		return fmt.Errorf("model_type %q is not supported (want qwen2, qwen3 or llama)", c.ModelType)
	}
	for _, k := range []struct {
		key string
		v   int64
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads}} {
		if k.v <= 0 {
			return fmt.Errorf("%s must be a positive integer, got %d", k.key, k.v)
		}
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.NumKeyValueHeads < 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return fmt.Errorf("hidden_size (%d) is not divisible by num_attention_heads (%d) and head_dim is not set", c.HiddenSize, c.NumAttentionHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.HeadDim < 0 || c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim must be a positive even number for RoPE, got %d", c.HeadDim)
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.RMSNormEps < 0 {
		return fmt.Errorf("rms_norm_eps must be > 0, got %g", c.RMSNormEps)
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RopeTheta < 0 {
		return fmt.Errorf("rope_theta must be > 0, got %g", c.RopeTheta)
	}
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	if c.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act %q is not supported (only silu)", c.HiddenAct)
	}
	if c.MLPBias {
		return errors.New("mlp_bias true is not supported")
	}
	if c.RopeScaling != nil {
		kind, _ := c.RopeScaling["rope_type"].(string)
		if kind == "" {
			kind, _ = c.RopeScaling["type"].(string)
		}
		if kind != "default" {
			return fmt.Errorf("rope_scaling type %q is not implemented; it would change every position's rotation, so the model is refused rather than run wrong", kind)
		}
	}
	if c.UseSlidingWindow && c.SlidingWindow != nil && *c.SlidingWindow > 0 {
		start := c.NumHiddenLayers
		if c.MaxWindowLayers != nil {
			start = *c.MaxWindowLayers
		}
		if start < c.NumHiddenLayers && *c.SlidingWindow < c.MaxPositionEmbeddings {
			return fmt.Errorf("use_sliding_window with sliding_window %d on layers %d..%d is not implemented (attention would differ from full attention)",
				*c.SlidingWindow, start, c.NumHiddenLayers-1)
		}
	}
	if c.TorchDType != "" {
		switch c.TorchDType {
		case "float32", "bfloat16", "float16", "float64": // float64: what lanpo's fp64 runs (tests, references) save
		default:
			return fmt.Errorf("torch_dtype %q: want float32, bfloat16, float16 or float64", c.TorchDType)
		}
	}
	if _, err := c.EOSTokenIDs(); err != nil {
		return err
	}
	return nil
}

// EOSTokenIDs returns eos_token_id as a list (configs store one id or a list).
func (c *Config) EOSTokenIDs() ([]int64, error) {
	if len(c.EOSTokenID) == 0 || string(c.EOSTokenID) == "null" {
		return nil, nil
	}
	var one int64
	if err := json.Unmarshal(c.EOSTokenID, &one); err == nil {
		return []int64{one}, nil
	}
	var many []int64
	if err := json.Unmarshal(c.EOSTokenID, &many); err != nil {
		return nil, fmt.Errorf("eos_token_id must be an id or a list of ids, got %s", c.EOSTokenID)
	}
	return many, nil
}

// KVGroups is how many query heads share one key/value head.
func (c *Config) KVGroups() int64 { return c.NumAttentionHeads / c.NumKeyValueHeads }

// Fits reports whether a sequence of n tokens fits the model's context
// (max_position_embeddings; none given: any does). The trainer's and the
// feedback builder's prompt checks go through it.
func (c *Config) Fits(n int) bool {
	return c.MaxPositionEmbeddings <= 0 || int64(n) <= c.MaxPositionEmbeddings
}
