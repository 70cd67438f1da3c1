// Package model is lanpo's Qwen2-family transformer over gotch: Hugging Face
// config.json, safetensors reading and writing, the forward pass, the KV
// cache, sampling, and the tokenizer with its chat template.
//
// It never imports trainer/ and never calls collectives. Its forward and
// backward passes run in libtorch; kernels libtorch lacks come from csrc/.
package model

// The tokenizer is built on sugarme/tokenizer (pinned in go.mod); the
// tokenizer issue adds the code that uses it.
import _ "github.com/sugarme/tokenizer"
