package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainLANPOAndReadItsPool: lanpo train on configs/tiny-lanpo.yaml writes
// a pool into its checkpoints, rollout logs and LANPO metrics; lanpo pool
// stats, show and query read it from the run directory or a checkpoint.
func TestTrainLANPOAndReadItsPool(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	if out, err := runWithStdin(t, "", "--log-level", "error", "train", "--config", "../../configs/tiny-lanpo.yaml",
		"--set", "run_dir="+run, "--set", "data.train=../../configs/data/tiny-arith-lanpo.jsonl", "--set", "model="+warmTiny(t),
		"--set", "total_steps=2"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	out, err := runWithStdin(t, "", "pool", "stats", run)
	var st struct {
		Problems, Entries int
		PerProblem        []struct{ ID string } `json:"per_problem"`
	}
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Entries != 2*4*2 || len(st.PerProblem) != st.Problems {
		t.Fatalf("stats: %v %s", err, out)
	}
	out, err = runWithStdin(t, "", "pool", "show", "--problem", st.PerProblem[0].ID, filepath.Join(run, "checkpoints", "step-000002"))
	if err != nil || !strings.Contains(out, `"attempt"`) || !strings.Contains(out, `"principles"`) {
		t.Fatalf("show: %v %s", err, out)
	}
	out, err = runWithStdin(t, "", "pool", "query", "--text", "What is 9 + 1?", "--k", "2", filepath.Join(run, "checkpoints", "step-000002", "pool.jsonl"))
	if err != nil || strings.Count(out, "bm25_normalized") != 2 {
		t.Fatalf("query: %v %s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pool", "stats"}, "want exactly one CHECKPOINT_DIR"},
		{[]string{"pool", "stats", t.TempDir()}, "neither a checkpoint"},
		{[]string{"pool", "show", "--problem", "nope", run}, `no entries of problem "nope"`},
	} {
		if _, err := runWithStdin(t, "", c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
