package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

// qwen3Tokenizer is the npm Qwen3 tokenizer that `make fixtures` caches.
func qwen3Tokenizer(t *testing.T) string {
	t.Helper()
	root := os.Getenv("LANPO_TOKENIZERS")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".cache", "lanpo", "tokenizers")
	}
	dir := filepath.Join(root, "qwen3")
	if _, err := os.Stat(filepath.Join(dir, tokenizer.TokenizerFile)); err != nil {
		t.Fatalf("Qwen3 tokenizer fixture is missing (%v): run `make fixtures`", err)
	}
	return dir
}

func runWithStdin(t *testing.T, in string, args ...string) (string, error) {
	t.Helper()
	var out strings.Builder
	app := newApp()
	app.Reader = strings.NewReader(in)
	app.Writer = &out
	app.ErrWriter = &out
	err := app.Run(append([]string{"lanpo"}, args...))
	return out.String(), err
}

func outputIDs(t *testing.T, out string) [][]int {
	t.Helper()
	var rows [][]int
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r struct{ IDs []int }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		rows = append(rows, r.IDs)
	}
	return rows
}

func TestTokenizeCLIText(t *testing.T) {
	corpus, err := os.ReadFile("../../model/tokenizer/testdata/corpus.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	refs, err := os.ReadFile("../../model/tokenizer/testdata/ids_qwen3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runWithStdin(t, string(corpus), "--log-level", "error", "tokenize", "--tokenizer", qwen3Tokenizer(t), "--workers", "2")
	if err != nil {
		t.Fatal(err)
	}
	got, want := outputIDs(t, out), outputIDs(t, string(refs))
	if len(got) != len(want) || len(got) < 700 {
		t.Fatalf("%d output lines for %d inputs", len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) && !(len(got[i]) == 0 && len(want[i]) == 0) {
			t.Fatalf("line %d: got %v want %v", i+1, got[i], want[i])
		}
	}
}

func TestTokenizeCLIChat(t *testing.T) {
	dir := qwen3Tokenizer(t)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	in := `{"messages": [{"role": "user", "content": "What is $1+1$?"}]}
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nx\n</think>\n\nHello"}]}
`
	out, err := runWithStdin(t, in, "--log-level", "error", "tokenize", "--tokenizer", dir, "--chat", "--add-generation-prompt", "--enable-thinking", "false")
	if err != nil {
		t.Fatal(err)
	}
	got := outputIDs(t, out)
	want := []string{
		"<|im_start|>user\nWhat is $1+1$?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
		"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nx\n</think>\n\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines", len(got))
	}
	for i, text := range want {
		if dec := tk.Decode(got[i], false); dec != text {
			t.Fatalf("line %d decodes to %q, want %q", i+1, dec, text)
		}
	}
}

func TestTokenizeCLINamesBadLines(t *testing.T) {
	dir := qwen3Tokenizer(t)
	cases := []struct {
		in   string
		args []string
		want string
	}{
		{"{\"text\": \"ok\"}\n{\"text\": \"bad \xff\"}\n", nil, "stdin line 2: not valid UTF-8"},
		{"{\"text\": \"ok\"}\n{\"txt\": \"x\"}\n", nil, "stdin line 2: no \"text\" field"},
		{"{\"text\": \"ok\"}\nnot json\n", nil, "stdin line 2: invalid character"},
		{"{\"messages\": [{\"role\": \"ipython\", \"content\": \"x\"}]}\n", []string{"--chat"}, "stdin line 1: messages[0].role \"ipython\""},
		{"{\"text\": \"x\"}\n", []string{"--chat"}, "stdin line 1: no \"messages\" field"},
	}
	for _, c := range cases {
		_, err := runWithStdin(t, c.in, append([]string{"--log-level", "error", "tokenize", "--tokenizer", dir}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.in, err, c.want)
		}
	}
	_, err := runWithStdin(t, "", "tokenize", "--tokenizer", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("missing files: err = %v", err)
	}
	_, err = runWithStdin(t, "", "tokenize", "--tokenizer", dir, "--enable-thinking", "maybe")
	if ue, ok := err.(usageError); !ok || ue.ExitCode() != 2 {
		t.Errorf("--enable-thinking maybe: err = %v, want a usage error", err)
	}
}

func TestBenchTokenizeWithoutBaseline(t *testing.T) {
	out, err := runWithStdin(t, "", "--log-level", "error", "bench", "tokenize", "--tokenizer", qwen3Tokenizer(t),
		"--data", "../../model/tokenizer/testdata/corpus.jsonl", "--reps", "1", "--hf-python", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"corpus: 800 texts", "lanpo: cold ", "single-threaded ", "baseline: unavailable"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	_, err = runWithStdin(t, "", "bench", "tokenize", "--tokenizer", qwen3Tokenizer(t), "--data", "../../model/tokenizer/testdata/corpus.jsonl", "--fields", "nope", "--hf-python", "")
	if err == nil || !strings.Contains(err.Error(), "corpus.jsonl: no string field") {
		t.Errorf("err = %v", err)
	}
}
