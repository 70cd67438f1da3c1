package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The files of a Hugging Face tokenizer directory.
const (
	TokenizerFile = "tokenizer.json"
	ConfigFile    = "tokenizer_config.json"
	TemplateFile  = "chat_template.jinja" // newer transformers save the template here
)

type fileJSON struct {
	AddedTokens   []addedJSON     `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *modelJSON      `json:"model"`
}

type addedJSON struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]int    `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

type typed struct {
	Type string `json:"type"`
}

// Load reads the tokenizer of a Hugging Face model directory: tokenizer.json
// (required) and tokenizer_config.json with its chat template (optional: a
// tokenizer without it encodes and decodes, and Chat says what is missing).
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, TokenizerFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := t.loadConfig(dir); err != nil {
		return nil, err
	}
	return t, nil
}

func parse(raw []byte) (*Tokenizer, error) {
	var f fileJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	t := &Tokenizer{}
	if err := t.parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.parseModel(f.Model); err != nil {
		return nil, err
	}
	if err := t.parseAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	if err := t.parsePostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	t.cache = newWordCache()
	return t, nil
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var n typed
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("normalizer: %w", err)
	}
	if n.Type != "NFC" {
		return fmt.Errorf("normalizer.type %q is not supported (this tokenizer handles NFC or none, as in Qwen2/2.5/3 and Llama-3)", n.Type)
	}
	t.nfc = true
	return nil
}

func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage) error {
	var seq struct {
		Type          string            `json:"type"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if isNull(raw) {
		return errors.New("pre_tokenizer is missing (want a Sequence of Split and ByteLevel, as in Qwen2/2.5/3 and Llama-3)")
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	if seq.Type != "Sequence" || len(seq.PreTokenizers) != 2 {
		return fmt.Errorf("pre_tokenizer.type %q with %d parts is not supported (want a Sequence of Split and ByteLevel, as in Qwen2/2.5/3 and Llama-3)", seq.Type, len(seq.PreTokenizers))
	}
	var split struct {
		Type    string `json:"type"`
		Pattern struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(seq.PreTokenizers[0], &split); err != nil {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0]: %w", err)
	}
	if split.Type != "Split" {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].type %q is not supported (want Split)", split.Type)
	}
	switch {
	case split.Pattern.Regex == nil:
		return errors.New("pre_tokenizer.pretokenizers[0].pattern: want a Regex")
	case *split.Pattern.Regex == qwenPattern:
		t.split, t.Family = splitter{maxDigits: 1}, "qwen"
	case *split.Pattern.Regex == llama3Pattern:
		t.split, t.Family = splitter{maxDigits: 3}, "llama3"
	default:
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].pattern.Regex %q is not supported (lanpo implements the Qwen2/2.5/3 and Llama-3 split patterns exactly)", *split.Pattern.Regex)
	}
	if split.Behavior != "Isolated" || split.Invert {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0]: behavior %q, invert %v is not supported (want Isolated, false)", split.Behavior, split.Invert)
	}
	var bl struct {
		Type           string `json:"type"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		UseRegex       bool   `json:"use_regex"`
	}
	if err := json.Unmarshal(seq.PreTokenizers[1], &bl); err != nil {
		return fmt.Errorf("pre_tokenizer.pretokenizers[1]: %w", err)
	}
	if bl.Type != "ByteLevel" || bl.AddPrefixSpace || bl.UseRegex {
		return fmt.Errorf("pre_tokenizer.pretokenizers[1]: type %q, add_prefix_space %v, use_regex %v is not supported (want ByteLevel, false, false)", bl.Type, bl.AddPrefixSpace, bl.UseRegex)
	}
	return nil
}

func (t *Tokenizer) parseModel(m *modelJSON) error {
	switch {
	case m == nil:
		return errors.New("model is missing")
	case m.Type != "BPE":
		return fmt.Errorf("model.type %q is not supported (want BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("model.dropout %v is not supported (BPE dropout is a training-time option)", *m.Dropout)
	case m.ByteFallback:
		return errors.New("model.byte_fallback true is not supported (byte-level BPE vocabularies cover every byte)")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	case len(m.Vocab) == 0:
		return errors.New("model.vocab is missing or empty")
	}
	for b := 0; b < 256; b++ {
		if _, ok := m.Vocab[string(byteRune[b])]; !ok {
			return fmt.Errorf("model.vocab has no token for byte 0x%02x (%q): not a byte-level BPE vocabulary", b, string(byteRune[b]))
		}
	}
	n := 0
	for tok, id := range m.Vocab {
		if id < 0 {
			return fmt.Errorf("model.vocab[%q] = %d: ids must be non-negative", tok, id)
		}
		n = max(n, id+1)
	}
	t.tokens = make([]string, n)
	for tok, id := range m.Vocab {
		t.tokens[id] = tok
	}
	ranks := make(map[uint64]mergeVal, len(m.Merges))
	for rank, raw := range m.Merges {
		a, b, err := mergePair(raw)
		if err != nil {
			return fmt.Errorf("model.merges[%d]: %w", rank, err)
		}
		ia, oka := m.Vocab[a]
		ib, okb := m.Vocab[b]
		ic, okc := m.Vocab[a+b]
		if !oka || !okb || !okc {
			return fmt.Errorf("model.merges[%d] (%q, %q): a part or the merged token is not in model.vocab", rank, a, b)
		}
		k := pairKey(int32(ia), int32(ib))
		if _, dup := ranks[k]; !dup { // the first (lowest) rank wins, as in Hugging Face
			ranks[k] = mergeVal{rank: int32(rank), id: int32(ic)}
		}
	}
	t.vocab = m.Vocab
	t.merger = merger{ranks: ranks}
	t.ignoreMerges = m.IgnoreMerges
	return nil
}

// mergePair reads a merge in either form tokenizer.json uses: "a b" (older
// files, Qwen2/2.5) or ["a", "b"] (newer ones, Qwen3).
func mergePair(raw json.RawMessage) (string, string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("%q is not two tokens separated by one space", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("%s is neither \"a b\" nor [\"a\", \"b\"]", raw)
	}
	return pair[0], pair[1], nil
}

func (t *Tokenizer) parseAdded(list []addedJSON) error {
	t.special = map[int]bool{}
	t.addedByID = map[int]string{}
	t.addedByContent = map[string]int{}
	for i, a := range list {
		if a.ID == nil || *a.ID < 0 {
			return fmt.Errorf("added_tokens[%d]: id is missing or negative", i)
		}
		if a.Content == "" {
			return fmt.Errorf("added_tokens[%d]: content is empty", i)
		}
		id := *a.ID
		if id >= len(t.tokens) {
			t.tokens = append(t.tokens, make([]string, id+1-len(t.tokens))...)
		}
		if t.tokens[id] != "" && t.tokens[id] != a.Content {
			if _, inVocab := t.vocab[t.tokens[id]]; inVocab {
				return fmt.Errorf("added_tokens[%d]: id %d is token %q in model.vocab, not %q", i, id, t.tokens[id], a.Content)
			}
		}
		t.tokens[id] = a.Content
		t.addedByID[id] = a.Content
		t.addedByContent[a.Content] = id
		if a.Special {
			t.special[id] = true
		}
		t.added = append(t.added, addedToken{
			id: id, content: a.Content, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: a.Normalized,
		})
	}
	// Longest first, so that at one position the longest token wins, as
	// Hugging Face's leftmost-longest matcher does.
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	for i := range t.added {
		a := &t.added[i]
		if a.normalized {
			t.hasNormalizedAdded = true
		}
		t.firstBytes[a.content[0]] = true
	}
	return nil
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var p struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int `json:"ids"`
		} `json:"special_tokens"`
		AddPrefixSpace bool `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	switch p.Type {
	case "ByteLevel": // only moves offsets
		return nil
	case "Sequence":
		for i, sub := range p.Processors {
			if err := t.parsePostProcessor(sub); err != nil {
				return fmt.Errorf("post_processor.processors[%d]: %w", i, err)
			}
		}
		return nil
	case "TemplateProcessing":
		seen := false
		for _, piece := range p.Single {
			switch {
			case piece.Sequence != nil:
				if seen || piece.Sequence.ID != "A" {
					return fmt.Errorf("post_processor.single: sequence %q is not supported (want one sequence A)", piece.Sequence.ID)
				}
				seen = true
			case piece.SpecialToken != nil:
				st, ok := p.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("post_processor.single: special token %q is not in post_processor.special_tokens", piece.SpecialToken.ID)
				}
				if seen {
					t.suffix = append(t.suffix, st.IDs...)
				} else {
					t.prefix = append(t.prefix, st.IDs...)
				}
			default:
				return errors.New("post_processor.single: an entry is neither SpecialToken nor Sequence")
			}
		}
		return nil
	}
	return fmt.Errorf("post_processor.type %q is not supported (want ByteLevel, TemplateProcessing or a Sequence of them)", p.Type)
}

func parseDecoder(raw json.RawMessage) error {
	var d typed
	if isNull(raw) {
		return errors.New("decoder is missing (want ByteLevel)")
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	if d.Type != "ByteLevel" {
		return fmt.Errorf("decoder.type %q is not supported (want ByteLevel)", d.Type)
	}
	return nil
}

// loadConfig reads tokenizer_config.json (special token names, chat template)
// and chat_template.jinja when present.
func (t *Tokenizer) loadConfig(dir string) error {
	path := filepath.Join(dir, ConfigFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	var c map[string]json.RawMessage
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%s: invalid JSON: %w", path, err)
	}
	for _, key := range []string{"bos_token", "eos_token", "pad_token"} {
		s, err := tokenName(c[key])
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, key, err)
		}
		if s != "" {
			if _, ok := t.TokenID(s); !ok {
				return fmt.Errorf("%s: %s %q is not a token of %s", path, key, s, TokenizerFile)
			}
		}
		switch key {
		case "bos_token":
			t.BOS = s
		case "eos_token":
			t.EOS = s
		case "pad_token":
			t.Pad = s
		}
	}
	if raw, ok := c[chatFormatKey]; ok {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return fmt.Errorf("%s: %s: %w", path, chatFormatKey, err)
		}
		if err := t.SetChatFormat(name); err != nil {
			return fmt.Errorf("%s: %s: %w", path, chatFormatKey, err)
		}
	}
	if tpl, ok := c["chat_template"]; ok && !isNull(tpl) {
		s, err := chatTemplateText(tpl)
		if err != nil {
			return fmt.Errorf("%s: chat_template: %w", path, err)
		}
		t.template, t.templateSource = s, path+": chat_template"
	}
	jpath := filepath.Join(dir, TemplateFile)
	if b, err := os.ReadFile(jpath); err == nil {
		t.template, t.templateSource = string(b), jpath
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tokenizer: %w", err)
	}
	return nil
}

// tokenName reads a special-token entry: a string, {"content": …}, or null.
func tokenName(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("want a string or {\"content\": …}, got %s", raw)
	}
	return *obj.Content, nil
}

// chatTemplateText reads chat_template: a string, or a list of named
// templates of which lanpo uses "default".
func chatTemplateText(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("want a string or a list of {\"name\", \"template\"}")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New("the list has no template named \"default\"")
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}
