package trainer

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

// The built-in model the round-trip fixture was made from.
const (
	roundTripModel = "tiny"
	roundTripSeed  = 1
)

// TestHFRoundTrip: a directory lanpo writes for its built-in model (what
// every builtin run and checkpoint starts from), loaded by transformers
// alone (scripts/ref/hf_roundtrip.py → testdata/hf_roundtrip.json), renders
// chats through its Jinja chat_template to the text and ids lanpo renders,
// and scores them with lanpo's log-probs within 1e-4.
// LANPO_HF_ROUNDTRIP_DIR=DIR keeps the directory, for the script to read.
func TestHFRoundTrip(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var fx struct {
		Transformers string `json:"transformers"`
		Cases        []struct {
			Messages            []tokenizer.Message `json:"messages"`
			AddGenerationPrompt bool                `json:"add_generation_prompt"`
			Text                string              `json:"text"`
			IDs                 []int64             `json:"ids"`
			LogProbs            []float64           `json:"logprobs"`
		} `json:"cases"`
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "hf_roundtrip.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) == 0 {
		t.Fatal("the fixture has no chats")
	}
	dir := os.Getenv("LANPO_HF_ROUNDTRIP_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := WriteBuiltin(roundTripModel, dir, roundTripSeed); err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.LoadOptions{Device: gotch.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var seqs [][]int64
	for i, c := range fx.Cases {
		opt := tokenizer.ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt}
		text, err := tk.Chat(c.Messages, opt)
		if err != nil {
			t.Fatal(err)
		}
		if text != c.Text {
			t.Errorf("chat %d: lanpo renders\n%q\ntransformers %s renders\n%q", i, text, fx.Transformers, c.Text)
		}
		ids, err := tk.ChatIDs(c.Messages, opt)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]int64, len(ids))
		for j, id := range ids {
			got[j] = int64(id)
		}
		if !slices.Equal(got, c.IDs) {
			t.Fatalf("chat %d: ids differ from transformers'\nlanpo        %v\ntransformers %v", i, got, c.IDs)
		}
		seqs = append(seqs, got)
	}
	scores, err := m.Score(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range fx.Cases {
		if len(scores[i]) != len(c.LogProbs) {
			t.Fatalf("chat %d: %d log-probs, the fixture has %d", i, len(scores[i]), len(c.LogProbs))
		}
		d := 0.0
		for j, lp := range c.LogProbs {
			d = math.Max(d, math.Abs(float64(scores[i][j])-lp))
		}
		t.Logf("chat %d: %d tokens, ids equal, log-probs within %.2g of transformers %s", i, len(c.IDs), d, fx.Transformers)
		if d > 1e-4 {
			t.Errorf("chat %d: log-probs differ from transformers' by %g (limit 1e-4; if the built-in model changed on purpose, regenerate the fixture: scripts/ref/hf_roundtrip.py)", i, d)
		}
	}
}
