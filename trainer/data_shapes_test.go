package trainer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataShapes: data as users have it — GSM8K's own {"question",
// "answer": "… #### 18"}, nested records with numeric answers and ids —
// reads through data.*_key and data.answer_format, and trains a step.
func TestDataShapes(t *testing.T) {
	for _, c := range []struct {
		file    string
		sets    []string
		answers []string
		id0     string
	}{
		{"gsm8k.jsonl", []string{"data.problem_key=question", "data.answer_format=gsm8k"},
			[]string{"18", "3", "70000", "540", "20", "64"}, "testdata/shapes/gsm8k.jsonl:1"},
		{"nested.jsonl", []string{"data.problem_key=input.text", "data.answer_key=gold", "data.id_key=meta.uid"},
			[]string{"36", "5", "-1", "13", "8.75", "8.5"}, "math_train-2"},
		{"verl.parquet", []string{"data.problem_key=prompt", "data.answer_key=reward_model.ground_truth", "data.id_key=extra_info.index"},
			[]string{"8+4i", "36", "5", "-1", "13"}, "0"},
		{"plain.parquet", nil, []string{"8+4i", "36", "5", "-1", "13"}, "math_train-1"},
	} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata", "shapes", c.file)
			cfg := tinyConfig(t, append(c.sets, "data.train="+path, "total_steps=1", "rollout.prompts_per_step=2")...)
			ps, err := ReadProblems(path, cfg.Data)
			if err != nil {
				t.Fatal(err)
			}
			var answers []string
			for _, p := range ps {
				answers = append(answers, p.Answer)
			}
			if strings.Join(answers, " ") != strings.Join(c.answers, " ") || ps[0].ID != c.id0 || ps[0].Problem == "" {
				t.Fatalf("answers %q, first id %q", answers, ps[0].ID)
			}
			chat := strings.HasPrefix(c.file, "verl")
			if ps[0].Chat != chat || (chat && !strings.HasSuffix(ps[0].Problem, `output the final answer within \boxed{}.`)) {
				t.Fatalf("chat %v, problem %q", ps[0].Chat, ps[0].Problem)
			}
			runGRPO(t, cfg, "")
			if n := len(stableMetrics(t, cfg.RunDir)); n != 1 {
				t.Fatalf("%d metric lines", n)
			}
			if chat {
				// The record's messages are the chat: the instruction once,
				// no prompt_template around it.
				d := cfg.Data
				if err := chatData(&d, ps); err != nil || d.PromptTemplate != "{problem}" || d.SystemPrompt != "" {
					t.Fatalf("chat data settings %+v, %v", d, err)
				}
			}
		})
	}
	// The default keys on a GSM8K file: the error lists the record's keys
	// and names the config key.
	_, err := ReadProblems("testdata/shapes/gsm8k.jsonl", DataConfig{})
	if err == nil || !strings.Contains(err.Error(), `gsm8k.jsonl:1: no "problem" in the record (keys: answer, question); set data.problem_key`) {
		t.Fatalf("default keys on GSM8K: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(`{"problem": "x", "answer": "no marker"}`+"\n"), 0o644)
	if _, err := ReadProblems(bad, DataConfig{AnswerFormat: AnswerGSM8K}); err == nil || !strings.Contains(err.Error(), `no "####"`) {
		t.Fatalf("a GSM8K answer without ####: %v", err)
	}
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"data.answer_format=gsm"}); err == nil || !strings.Contains(err.Error(), "data.answer_format") {
		t.Fatalf("a bad answer_format: %v", err)
	}
}
