package tokenizer

import (
	"embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// templates holds the official Jinja chat template of each family with a
// native renderer (templates/NAME.jinja, byte for byte from the sources
// named at knownTemplates), so a tokenizer lanpo writes carries a template
// that transformers' apply_chat_template renders as lanpo does.
//
//go:embed templates/*.jinja
var templates embed.FS

// FamilyTemplate returns the official Jinja chat template of a family (one
// of ChatFormatNames).
func FamilyTemplate(name string) (string, error) {
	if _, ok := chatFormats[name]; !ok {
		return "", fmt.Errorf("chat format %q is not one of %v", name, ChatFormatNames())
	}
	b, err := templates.ReadFile("templates/" + name + ".jinja")
	return string(b), err
}

// WriteByteLevel writes a minimal byte-level BPE tokenizer in Hugging Face's
// format into dir: one token per byte (ids 0–255, in byte order), the given
// merges (pairs of byte-level token strings, highest priority first, each
// adding a token), then the special tokens. It loads here and in Hugging
// Face's tokenizers. lanpo's built-in tiny models use it: a vocabulary of a
// few hundred keeps their embedding and head small. chatFormat ("" for
// none) names the chat family its conversations are rendered in; its
// official Jinja template goes into tokenizer_config.json's chat_template,
// so the tokenizer and every checkpoint made from it render chats the same
// in lanpo and in transformers. (Earlier versions wrote lanpo_chat_format
// instead; Load still reads it.)
func WriteByteLevel(dir string, merges [][2]string, special []string, eos, pad, chatFormat string) error {
	var template string
	if chatFormat != "" {
		var err error
		if template, err = FamilyTemplate(chatFormat); err != nil {
			return err
		}
	}
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteRune[b])] = b
	}
	var mergeList [][2]string
	for _, m := range merges {
		if _, ok := vocab[m[0]]; !ok {
			return fmt.Errorf("merge %q: %q is not a token yet", m, m[0])
		}
		if _, ok := vocab[m[1]]; !ok {
			return fmt.Errorf("merge %q: %q is not a token yet", m, m[1])
		}
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
		mergeList = append(mergeList, m)
	}
	var added []map[string]any
	for _, s := range special {
		added = append(added, map[string]any{"id": len(vocab) + len(added), "content": s, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	tj := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwenPattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		"post_processor": byteLevel, "decoder": byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": mergeList},
	}
	cfg := map[string]any{"eos_token": eos, "pad_token": pad, "add_bos_token": false, "tokenizer_class": "Qwen2Tokenizer",
		"clean_up_tokenization_spaces": false, "model_max_length": 32768}
	if template != "" {
		cfg["chat_template"] = template
	}
	for name, v := range map[string]any{TokenizerFile: tj, ConfigFile: cfg} {
		b, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
