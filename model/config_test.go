package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Shapes of real checkpoints' config.json (values as published).
const qwen25_05b = `{"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.0,"bos_token_id":151643,"eos_token_id":151645,
"hidden_act":"silu","hidden_size":896,"initializer_range":0.02,"intermediate_size":4864,"max_position_embeddings":32768,
"max_window_layers":21,"model_type":"qwen2","num_attention_heads":14,"num_hidden_layers":24,"num_key_value_heads":2,
"rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":32768,"tie_word_embeddings":true,"torch_dtype":"bfloat16",
"transformers_version":"4.43.1","use_cache":true,"use_sliding_window":false,"vocab_size":151936}`

const qwen3_14b = `{"architectures":["Qwen3ForCausalLM"],"attention_bias":false,"attention_dropout":0.0,"bos_token_id":151643,
"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":5120,"initializer_range":0.02,"intermediate_size":17408,
"max_position_embeddings":40960,"max_window_layers":40,"model_type":"qwen3","num_attention_heads":40,"num_hidden_layers":40,
"num_key_value_heads":8,"rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":1000000,"sliding_window":null,
"tie_word_embeddings":false,"torch_dtype":"bfloat16","transformers_version":"4.51.0","use_cache":true,"use_sliding_window":false,
"vocab_size":151936}`

const llama3_8b = `{"architectures":["LlamaForCausalLM"],"attention_bias":false,"bos_token_id":128000,"eos_token_id":[128001,128008,128009],
"hidden_act":"silu","hidden_size":4096,"intermediate_size":14336,"max_position_embeddings":131072,"mlp_bias":false,"model_type":"llama",
"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"rms_norm_eps":1e-05,
"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},
"rope_theta":500000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16","vocab_size":128256}`

func writeConfig(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigFamilies(t *testing.T) {
	c, err := LoadConfig(writeConfig(t, qwen25_05b))
	if err != nil {
		t.Fatal(err)
	}
	if !c.QKVBias || c.OBias || c.QKNorm || c.HeadDim != 64 || c.KVGroups() != 7 || !c.TieWordEmbeddings {
		t.Errorf("Qwen2.5-0.5B: %+v", c)
	}
	if ids, _ := c.EOSTokenIDs(); len(ids) != 1 || ids[0] != 151645 {
		t.Errorf("eos ids %v", ids)
	}
	c, err = LoadConfig(writeConfig(t, qwen3_14b))
	if err != nil {
		t.Fatal(err)
	}
	// Qwen3: explicit head_dim (128 ≠ 5120/40), q/k norm, no biases.
	if c.QKVBias || c.OBias || !c.QKNorm || c.HeadDim != 128 || c.KVGroups() != 5 {
		t.Errorf("Qwen3-14B: %+v", c)
	}
	// Llama-3.1 uses llama3 rope scaling, which is not implemented: refused by name.
	_, err = LoadConfig(writeConfig(t, llama3_8b))
	if err == nil || !strings.Contains(err.Error(), `rope_scaling type "llama3" is not implemented`) {
		t.Errorf("Llama-3.1: %v", err)
	}
	c, err = LoadConfig(writeConfig(t, strings.Replace(llama3_8b, `"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"}`, `"rope_scaling":null`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := c.EOSTokenIDs(); len(ids) != 3 || c.QKNorm || c.QKVBias {
		t.Errorf("Llama-3: %+v eos %v", c, ids)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct {
		name, edit, want string
	}{
		{"bad model type", `"model_type":"qwen2"→"model_type":"gpt2"`, `model_type "gpt2" is not supported`},
		{"heads vs kv heads", `"num_key_value_heads":2→"num_key_value_heads":3`, "num_attention_heads (14) must be a multiple of num_key_value_heads (3)"},
		{"zero layers", `"num_hidden_layers":24→"num_hidden_layers":0`, "num_hidden_layers must be a positive integer"},
		{"activation", `"hidden_act":"silu"→"hidden_act":"gelu"`, `hidden_act "gelu" is not supported`},
		{"rope yarn", `"rope_theta":1000000.0→"rope_theta":1000000.0,"rope_scaling":{"type":"yarn","factor":4}`, `rope_scaling type "yarn" is not implemented`},
		{"eos", `"eos_token_id":151645→"eos_token_id":"x"`, "eos_token_id must be an id or a list of ids"},
		{"dtype", `"torch_dtype":"bfloat16"→"torch_dtype":"int8"`, `torch_dtype "int8"`},
		{"json type", `"hidden_size":896→"hidden_size":"896"`, "hidden_size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			parts := strings.SplitN(c.edit, "→", 2)
			if !strings.Contains(qwen25_05b, parts[0]) {
				t.Fatalf("edit %q does not apply", parts[0])
			}
			p := writeConfig(t, strings.Replace(qwen25_05b, parts[0], parts[1], 1))
			_, err := LoadConfig(p)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), p) {
				t.Errorf("got %v, want an error naming %s and containing %q", err, p, c.want)
			}
		})
	}
}

func TestConfigSlidingWindow(t *testing.T) {
	// Turned on, but window 32768 == max_position_embeddings: it never binds,
	// so attention equals full attention and the model is accepted.
	on := strings.Replace(qwen25_05b, `"use_sliding_window":false`, `"use_sliding_window":true`, 1)
	if _, err := LoadConfig(writeConfig(t, on)); err != nil {
		t.Errorf("a sliding window that never binds was refused: %v", err)
	}
	// A window that binds on layers 21..23 would change results: refused.
	p := writeConfig(t, strings.Replace(strings.Replace(qwen25_05b, `"sliding_window":32768`, `"sliding_window":4096`, 1), `"use_sliding_window":false`, `"use_sliding_window":true`, 1))
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), "use_sliding_window with sliding_window 4096 on layers 21..23") {
		t.Errorf("active sliding window: %v", err)
	}
}
