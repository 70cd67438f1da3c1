package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// editTokenizer copies the qwen3 fixture with tokenizer.json changed by edit.
func editTokenizer(t *testing.T, edit func(m map[string]any)) string {
	t.Helper()
	dir := copyTokenizer(t, "qwen3")
	path := filepath.Join(dir, TokenizerFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadErrorsNameFileAndField(t *testing.T) {
	cases := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"wordpiece", func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" }, `model.type "WordPiece" is not supported`},
		{"gpt2 pattern", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
		}, `pre_tokenizer.type "ByteLevel"`},
		{"other regex", func(m map[string]any) {
			pt := m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
			pt["pattern"] = map[string]any{"Regex": `\w+|\s+`}
		}, `pre_tokenizer.pretokenizers[0].pattern.Regex "\\w+|\\s+" is not supported`},
		{"nfkc", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFKC"} }, `normalizer.type "NFKC"`},
		{"bad merge", func(m map[string]any) {
			m["model"].(map[string]any)["merges"].([]any)[3] = []any{"zzz-not-a-token", "q"}
		}, `model.merges[3] ("zzz-not-a-token", "q")`},
		{"merge form", func(m map[string]any) { m["model"].(map[string]any)["merges"].([]any)[5] = 7 }, `model.merges[5]: 7 is neither`},
		{"decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }, `decoder.type "WordPiece"`},
		{"added id", func(m map[string]any) { delete(m["added_tokens"].([]any)[2].(map[string]any), "id") }, `added_tokens[2]: id is missing`},
		{"missing byte", func(m map[string]any) { delete(m["model"].(map[string]any)["vocab"].(map[string]any), "Ġ") }, `model.vocab has no token for byte 0x20`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := editTokenizer(t, c.edit)
			_, err := Load(dir)
			if err == nil {
				t.Fatal("loaded")
			}
			msg := err.Error()
			if !strings.Contains(msg, filepath.Join(dir, TokenizerFile)) || !strings.Contains(msg, c.want) {
				t.Fatalf("error %q does not name the file and %q", msg, c.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := Load(t.TempDir())
		if err == nil || !strings.Contains(err.Error(), TokenizerFile) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		dir := copyTokenizer(t, "qwen3")
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"eos_token": "<|nope|>"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), ConfigFile) || !strings.Contains(err.Error(), `eos_token "<|nope|>"`) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestEncodeRejectsInvalidUTF8(t *testing.T) {
	tk := load(t, "qwen3")
	_, err := tk.Encode("ok \xff bad", false)
	if err == nil || !strings.Contains(err.Error(), "byte 3") {
		t.Fatalf("err = %v", err)
	}
	_, err = tk.EncodeBatch([]string{"fine", "also fine", "\xc3"}, false, 2)
	if err == nil || !strings.Contains(err.Error(), "text 2") {
		t.Fatalf("batch err = %v", err)
	}
}

func TestEncodeBatchKeepsOrder(t *testing.T) {
	tk := load(t, "qwen3")
	texts := corpus(t)
	got, err := tk.EncodeBatch(texts, true, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range texts {
		want, _ := tk.Encode(text, true)
		if !slices.Equal(got[i], want) {
			t.Fatalf("text %d out of order or different", i)
		}
	}
}

// Added-token flags the fixtures do not use: lstrip/rstrip swallow white
// space around the token, single_word requires non-word neighbours, and
// normalized tokens are matched after normalization.
func TestAddedTokenFlags(t *testing.T) {
	dir := editTokenizer(t, func(m map[string]any) {
		m["added_tokens"] = append(m["added_tokens"].([]any),
			map[string]any{"id": 151700, "content": "<L>", "lstrip": true, "special": true},
			map[string]any{"id": 151701, "content": "<R>", "rstrip": true, "special": true},
			map[string]any{"id": 151702, "content": "word", "single_word": true},
			map[string]any{"id": 151703, "content": "é!", "normalized": true})
	})
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(s string) []int { ids, _ := tk.Encode(s, false); return ids }
	x := enc("x")[0]
	if got := enc("x  <L>x"); !slices.Equal(got, []int{x, 151700, x}) {
		t.Fatalf("lstrip: %v", got)
	}
	if got := enc("x<R> \n x"); !slices.Equal(got, []int{x, 151701, x}) {
		t.Fatalf("rstrip: %v", got)
	}
	if got := enc("a word b"); !slices.Contains(got, 151702) {
		t.Fatalf("single word alone: %v", got)
	}
	if got := enc("swordfish"); slices.Contains(got, 151702) {
		t.Fatalf("single word inside a word: %v", got)
	}
	if got := enc("e\u0301!"); !slices.Equal(got, []int{151703}) {
		t.Fatalf("normalized: %v", got)
	}
	if got := tk.Decode([]int{x, 151700, 151702}, true); got != "xword" {
		t.Fatalf("skip special: %q", got)
	}
}

func TestDecodeLossyLikeRust(t *testing.T) {
	// E2 82 is an unfinished "€" (E2 82 AC): one U+FFFD for both bytes, as
	// Rust's from_utf8_lossy gives; then a lone continuation byte, one more.
	got := string(appendLossy(nil, []byte("a\xe2\x82b\x80c\xf0\x9f\x98")))
	if want := "a\uFFFDb\uFFFDc\uFFFD"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	if n := incompleteTail([]byte("ab\xf0\x9f\x98")); n != 3 {
		t.Fatalf("incompleteTail = %d", n)
	}
	if n := incompleteTail([]byte("ab\xe2\x82\xac")); n != 0 {
		t.Fatalf("complete rune held back: %d", n)
	}
}

func TestWriteByteLevel(t *testing.T) {
	dir := t.TempDir()
	merges := [][2]string{{"a", "b"}, {"Ġ", "+"}}
	if err := WriteByteLevel(dir, merges, []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, "<|im_end|>", "<|endoftext|>", "qwen2.5"); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tk.VocabSize() != 256+2+3 {
		t.Fatalf("vocab %d", tk.VocabSize())
	}
	ids, _ := tk.Encode("ab + 3<|im_end|>", false)
	end, _ := tk.TokenID("<|im_end|>")
	if want := []int{256, 257, ' ', '3', end}; !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if got := tk.Decode(ids, true); got != "ab + 3" {
		t.Fatalf("decode %q", got)
	}
	// The chat family recorded in tokenizer_config.json renders chats.
	if f, err := tk.ChatFormat(); err != nil || f != "qwen2.5" {
		t.Fatalf("chat format %q, %v", f, err)
	}
	chat, err := tk.Chat([]Message{{Role: "user", Content: "1+1?"}}, ChatOptions{AddGenerationPrompt: true})
	if err != nil || !strings.HasSuffix(chat, "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n") {
		t.Fatalf("chat %q, %v", chat, err)
	}
	// Each family's template is written as chat_template, the official one
	// byte for byte (its hash is the recognised one), so transformers
	// renders it too; the legacy lanpo_chat_format key still loads.
	for _, fam := range ChatFormatNames() {
		d := t.TempDir()
		if err := WriteByteLevel(d, nil, []string{"<|im_end|>"}, "<|im_end|>", "", fam); err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		raw, _ := os.ReadFile(filepath.Join(d, ConfigFile))
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		tpl, _ := cfg["chat_template"].(string)
		sum := sha256.Sum256([]byte(tpl))
		if knownTemplates[hex.EncodeToString(sum[:])] != fam {
			t.Fatalf("%s: chat_template is not the official template (sha256 %x)", fam, sum[:8])
		}
		if _, ok := cfg[chatFormatKey]; ok {
			t.Fatalf("%s: %s written beside chat_template", fam, chatFormatKey)
		}
		delete(cfg, "chat_template")
		cfg[chatFormatKey] = fam
		raw, _ = json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(d, ConfigFile), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		if tk, err := Load(d); err != nil {
			t.Fatal(err)
		} else if f, err := tk.ChatFormat(); err != nil || f != fam {
			t.Fatalf("legacy %s %q: chat format %q, %v", chatFormatKey, fam, f, err)
		}
	}
	if err := WriteByteLevel(dir, [][2]string{{"ab", "c"}}, nil, "", "", ""); err == nil {
		t.Fatal("a merge of unknown tokens was accepted")
	}
	if err := WriteByteLevel(dir, nil, nil, "", "", "jinja"); err == nil {
		t.Fatal("an unknown chat format was accepted")
	}
}
