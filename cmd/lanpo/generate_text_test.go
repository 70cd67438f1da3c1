package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

// tinyQwen3Dir saves a tiny random model with Qwen3's vocabulary next to the
// real Qwen3 tokenizer files: a Hugging Face directory generate can read
// text with.
func tinyQwen3Dir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := &model.Config{Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3", VocabSize: 151936, HiddenSize: 16,
		IntermediateSize: 32, NumHiddenLayers: 1, NumAttentionHeads: 2, NumKeyValueHeads: 1, HeadDim: 8,
		MaxPositionEmbeddings: 512, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, HiddenAct: "silu"}
	m, err := model.NewRandom(cfg, model.LoadOptions{}, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	src := qwen3Tokenizer(t)
	for _, f := range []string{tokenizer.TokenizerFile, tokenizer.ConfigFile} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestGenerateText(t *testing.T) {
	dir := tinyQwen3Dir(t)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	in := `{"prompt": "Solve $x^2=4$."}
{"messages": [{"role": "user", "content": "What is 2+2?"}]}
`
	rows, err := runGenerateCLIIn(t, dir, in, "--samples", "3", "--max-new-tokens", "12", "--seed", "5", "--ignore-eos")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d lines", len(rows))
	}
	for i, r := range rows {
		ids := toInts(r["ids"].([]any))
		text, ok := r["text"].(string)
		if !ok {
			t.Fatalf("line %d has no text: %v", i+1, r)
		}
		if want := tk.Decode(ids, true); text != want {
			t.Fatalf("line %d: text %q, decode(ids) %q", i+1, text, want)
		}
	}
	// A stop string: pick text the first sample produced across a token
	// boundary and check the sample now ends at the token completing it.
	ids := toInts(rows[0]["ids"].([]any))
	var stop string
	var end int
	for k := 2; k < len(ids); k++ {
		a, b := tk.Decode(ids[k-1:k], true), tk.Decode(ids[k:k+1], true)
		if a != "" && b != "" && !strings.Contains(tk.Decode(ids[:k], true), a[len(a)-1:]+b[:1]) {
			stop, end = a[len(a)-1:]+b[:1], k+1
			break
		}
	}
	if stop == "" {
		t.Fatalf("no token boundary in %v gives a stop string that does not occur earlier; change the seed", ids)
	}
	again, err := runGenerateCLIIn(t, dir, in, "--samples", "3", "--max-new-tokens", "12", "--seed", "5", "--ignore-eos", "--stop", stop)
	if err != nil {
		t.Fatal(err)
	}
	got := toInts(again[0]["ids"].([]any))
	if len(got) != end || again[0]["finish_reason"] != "stop" {
		t.Fatalf("stop %q: ids %v (%v), want the first %d of %v", stop, got, again[0]["finish_reason"], end, ids)
	}
	if text := again[0]["text"].(string); strings.Contains(text, stop) || !strings.HasPrefix(tk.Decode(got, true), text) {
		t.Fatalf("stop %q: text %q should end before it", stop, text)
	}
}

func toInts(v []any) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x.(float64))
	}
	return out
}
