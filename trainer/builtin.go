package trainer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

// Builtin models are made on the spot from a seed: a tiny Qwen2 with a
// byte-level vocabulary, small enough that a GRPO step runs in seconds on
// two CPU cores. `model: builtin:tiny` in a config selects it.
const builtinPrefix = "builtin:"

// tinyMerges are a few merges that shorten math text in the byte-level
// vocabulary (the split pattern keeps digits apart, so none join digits).
var tinyMerges = [][2]string{{"i", "s"}, {"t", "h"}, {"th", "e"}, {"a", "n"}, {"an", "s"}, {"ans", "w"}, {"answ", "e"},
	{"answe", "r"}, {"b", "o"}, {"bo", "x"}, {"box", "e"}, {"boxe", "d"}, {"W", "h"}, {"Wh", "a"}, {"Wha", "t"},
	{"Ġ", "+"}, {"Ġ", "="}, {"Ġ", "is"}, {"Ġ", "the"}, {"Ġ", "answer"}, {"\\", "boxed"}, {"Ġ", "What"},
	{"Ġ", "-"}, {"Ġ", "*"}, {"t", "i"}, {"ti", "m"}, {"tim", "e"}, {"time", "s"}, {"\\", "times"}, {"Ġ", "\\times"},
	{"T", "h"}, {"Th", "e"}, {"}", "."}}

var tinySpecial = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// builtinShapes are the built-in models: hidden size, layers, heads, KV
// heads, MLP width. tiny runs a GRPO step in tens of milliseconds; small
// (≈ 0.8 M parameters) learns the demo's arithmetic in minutes; medium
// (≈ 10×, 8.0 M) and large (≈ 100×, 76 M) are the demo's larger sizes
// (lanpo demo --model-size), large meant for a GPU.
var builtinShapes = map[string][5]int64{
	"tiny":   {64, 2, 4, 2, 128},
	"small":  {128, 4, 4, 2, 384},
	"medium": {256, 10, 8, 4, 768},
	"large":  {512, 24, 8, 4, 1536},
}

// BuiltinNames are the built-in models, smallest first.
var BuiltinNames = []string{"tiny", "small", "medium", "large"}

// TinyConfig is the built-in tiny model's shape for a vocabulary of v.
func TinyConfig(v int64) *model.Config { return builtinConfig(builtinShapes["tiny"], v) }

func builtinConfig(s [5]int64, v int64) *model.Config {
	return &model.Config{Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: v, HiddenSize: s[0],
		IntermediateSize: s[4], NumHiddenLayers: s[1], NumAttentionHeads: s[2], NumKeyValueHeads: s[3],
		MaxPositionEmbeddings: 1024, RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}
}

// WriteBuiltin writes the named built-in model (weights from seed) as a
// Hugging Face directory.
func WriteBuiltin(name, dir string, seed int64) error {
	shape, ok := builtinShapes[name]
	if !ok {
		return fmt.Errorf("model %s%s: the built-in models are %s%s", builtinPrefix, name, builtinPrefix, strings.Join(BuiltinNames, ", "+builtinPrefix))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := tokenizer.WriteByteLevel(dir, tinyMerges, tinySpecial, "<|im_end|>", "<|endoftext|>", "qwen2.5"); err != nil {
		return err
	}
	tk, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	v := int64(tk.VocabSize()+15) / 16 * 16 // padded, as real checkpoints are
	cfg := builtinConfig(shape, v)
	eos, _ := tk.TokenID("<|im_end|>")
	cfg.EOSTokenID = json.RawMessage(fmt.Sprint(eos))
	m, err := model.NewRandom(cfg, model.LoadOptions{}, seed)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Save(dir)
}

// WriteRandomModel writes a Hugging Face directory with random weights of
// cfg's shape in dtype and the built-in byte-level tokenizer: for
// benchmarks of a real model's shape (lanpo bench grpo-step). The model's
// vocabulary keeps cfg's size, which must hold the tokenizer's; ids beyond
// the tokenizer decode to nothing.
func WriteRandomModel(dir string, cfg *model.Config, dtype gotch.DType, seed int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := tokenizer.WriteByteLevel(dir, tinyMerges, tinySpecial, "<|im_end|>", "<|endoftext|>", "qwen2.5"); err != nil {
		return err
	}
	tk, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	if int64(tk.VocabSize()) > cfg.VocabSize {
		return fmt.Errorf("random model: vocabulary %d is smaller than the tokenizer's %d", cfg.VocabSize, tk.VocabSize())
	}
	c := *cfg
	eos, _ := tk.TokenID("<|im_end|>")
	c.EOSTokenID = json.RawMessage(fmt.Sprint(eos))
	m, err := model.NewRandom(&c, model.LoadOptions{DType: dtype}, seed)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Save(dir)
}

// modelDir is the model directory a config names: a builtin's is under
// the run directory.
func modelDir(cfg Config) string {
	if name, ok := strings.CutPrefix(cfg.Model, builtinPrefix); ok {
		return filepath.Join(cfg.RunDir, "init-"+name)
	}
	return cfg.Model
}

// resolveModel returns the model directory a config names, writing a
// builtin's once under the run directory (rank 0 alone: prepareRunDir).
func resolveModel(cfg *Config) (string, error) {
	name, ok := strings.CutPrefix(cfg.Model, builtinPrefix)
	dir := modelDir(*cfg)
	if !ok {
		return dir, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return dir, nil
	}
	if err := WriteBuiltin(name, dir, int64(cfg.Seed)); err != nil {
		return "", err
	}
	return dir, nil
}
