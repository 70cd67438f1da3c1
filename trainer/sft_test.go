package trainer

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

func sftConfig(t *testing.T, sets ...string) Config {
	t.Helper()
	cfg, err := LoadConfig("../configs/tiny-sft.yaml", append([]string{
		"run_dir=" + filepath.Join(t.TempDir(), "run"), "data.train=../configs/data/tiny-arith-sft.jsonl",
		"data.eval=../configs/data/tiny-arith-sft-eval.jsonl",
	}, sets...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The loss mask covers exactly the assistant turns: their content and the
// end-of-turn marker, nothing of the system or user turns.
func TestEncodeChatMasksAssistantTurns(t *testing.T) {
	dir := t.TempDir()
	if err := WriteBuiltin("tiny", dir, 1); err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tk.SetChatFormat("qwen2.5")
	msgs := []tokenizer.Message{{Role: "system", Content: "S"}, {Role: "user", Content: "Q1"}, {Role: "assistant", Content: "A1"},
		{Role: "user", Content: "Q2"}, {Role: "assistant", Content: "\\boxed{7}"}}
	ex, err := encodeChat(tk, msgs, 1000, false)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := tk.Chat(msgs, tokenizer.ChatOptions{})
	var all, learned []int
	for i, id := range ex.ids {
		all = append(all, int(id))
		if ex.loss[i] {
			learned = append(learned, int(id))
		}
	}
	if got := tk.Decode(all, false); got != full {
		t.Fatalf("ids decode to %q, want %q", got, full)
	}
	if got := tk.Decode(learned, false); got != "A1<|im_end|>\n\\boxed{7}<|im_end|>\n" {
		t.Fatalf("learned tokens decode to %q", got)
	}
	if _, err := encodeChat(tk, msgs[:2], 1000, false); err == nil {
		t.Fatal("a conversation without an assistant turn was accepted")
	}
	// train_on: last learns only the final assistant turn.
	last, err := encodeChat(tk, msgs, 1000, true)
	if err != nil {
		t.Fatal(err)
	}
	learned = nil
	for i, id := range last.ids {
		if last.loss[i] {
			learned = append(learned, int(id))
		}
	}
	if got := tk.Decode(learned, false); got != "\\boxed{7}<|im_end|>\n" {
		t.Fatalf("train_on last learns %q", got)
	}
}

// Gradient accumulation: 1 micro-batch of 8 and 4 of 2 give the same SFT
// update (fp64, ≤ 1e-10).
func TestSFTGradAccumulation(t *testing.T) {
	run := func(micro, accum string, sets ...string) ([]float64, float64) {
		cfg := sftConfig(t, append([]string{"dtype=float64", "sft.micro_batch_size=" + micro, "sft.grad_accum=" + accum, "total_steps=1"}, sets...)...)
		s, err := openSession(cfg, "", "sft", RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r := &sftRun{session: s}
		if r.train, err = r.loadChats(cfg.Data.Train); err != nil {
			t.Fatal(err)
		}
		met, err := r.step(newPhaseTimer())
		if err != nil {
			t.Fatal(err)
		}
		var w []float64
		for _, p := range s.m.Params() {
			w = append(w, tensor.Float64s(p.Tensor)...)
		}
		return w, met.GradNorm
	}
	a, na := run("8", "1")
	for _, c := range []struct {
		name  string
		micro string
		accum string
		sets  []string
	}{{"4×2", "2", "4", nil}, {"token budget 60", "8", "1", []string{"sft.max_tokens_per_micro_batch=60"}},
		{"activation checkpointing", "8", "1", []string{"train.activation_checkpointing=true"}}} {
		b, nb := run(c.micro, c.accum, c.sets...)
		var worst float64
		for i := range a {
			worst = math.Max(worst, math.Abs(a[i]-b[i]))
		}
		t.Logf("%s: grad norm %.12g vs %.12g, max |Δw| %g", c.name, na, nb, worst)
		if na < 1e-3 || math.Abs(na-nb) > 1e-10*na || worst > 1e-10 {
			t.Fatalf("1×8 and %s differ: grad norm %v vs %v, weights by %g", c.name, na, nb, worst)
		}
	}
}

// A short SFT run lowers the eval loss.
func TestSFTLearns(t *testing.T) {
	cfg := sftConfig(t, "total_steps=60", "sft.eval_every=10", "checkpoint.every=0")
	if err := RunSFT(context.Background(), cfg, "", RunOptions{}); err != nil {
		t.Fatal(err)
	}
	m := stableMetrics(t, cfg.RunDir)
	first, last := m[9]["eval_loss"].(float64), m[59]["eval_loss"].(float64)
	t.Logf("eval loss after 10 steps %.4f, after 60 %.4f", first, last)
	if !(last < 0.9*first) {
		t.Fatalf("eval loss %v → %v: not learning", first, last)
	}
}

func TestSFTMaxLenBeyondTheContext(t *testing.T) {
	cfg, err := LoadConfig("../configs/tiny-sft.yaml", []string{"run_dir=" + filepath.Join(t.TempDir(), "run"),
		"data.train=../configs/data/tiny-arith-sft.jsonl", "sft.max_len=5000"})
	if err != nil {
		t.Fatal(err)
	}
	if err := RunSFT(context.Background(), cfg, "", RunOptions{}); err == nil || !strings.Contains(err.Error(), "sft.max_len: 5000 exceeds the model's max_position_embeddings 1024") {
		t.Fatalf("err = %v", err)
	}
}
