// Package model is lanpo's Qwen2-family transformer over gotch: Hugging Face
// config.json, safetensors reading and writing, the forward pass, the KV
// cache, sampling, the rollout engine — prefill, then a decode loop that
// stays on the device between the host's looks and can replay its steps as
// CUDA graphs (decode.go, graphs.go) —, and the tokenizer with its chat
// template.
//
// It never imports trainer/ and never calls collectives. Its forward and
// backward passes run in libtorch; kernels libtorch lacks come from csrc/.
//
// The tokenizer and chat templates live in the subpackage model/tokenizer.
package model
