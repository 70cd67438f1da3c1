package trainer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/pool"
)

// TestBuildPoolIsTheLoopsPool: a LANPO run whose policy does not move
// (a learning rate too small to change a float32 weight) summarizes every
// step with the model it started from, so the pool BuildPool makes from its
// rollout log with that model is the run's own pool, byte for byte; a GRPO
// run's log builds a pool too (what lanpo demo's retrieval control needs),
// and a log naming a problem the data lacks is refused with its file and
// line.
func TestBuildPoolIsTheLoopsPool(t *testing.T) {
	cfg := lanpoConfig(t, "optim.lr=1e-30", "log.rollouts=true", "total_steps=3")
	runGRPO(t, cfg, "")
	own, err := os.ReadFile(filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(3), pool.File))
	if err != nil {
		t.Fatal(err)
	}
	built, err := BuildPool(cfg, cfg.Model, filepath.Join(cfg.RunDir, "rollouts"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := built.Write(&b); err != nil {
		t.Fatal(err)
	}
	if built.Entries() == 0 || !bytes.Equal(b.Bytes(), own) {
		t.Fatalf("the built pool (%d entries) differs from the run's own:\n%s\n---\n%s", built.Entries(), b.Bytes(), own)
	}

	g := lanpoConfig(t, "algo.name=grpo", "log.rollouts=true", "total_steps=2")
	runGRPO(t, g, "")
	gp, err := BuildPool(g, filepath.Join(g.RunDir, checkpointsDir, checkpointName(2)), filepath.Join(g.RunDir, "rollouts"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * 4 * g.LANPO.SummariesPerGroup; gp.Entries() != want {
		t.Fatalf("GRPO's rollouts gave %d entries, want %d (summaries per group × groups × steps)", gp.Entries(), want)
	}

	bad := t.TempDir()
	raw, _ := os.ReadFile(filepath.Join(g.RunDir, "rollouts", "step-000001.jsonl"))
	lines := strings.SplitAfter(string(raw), "\n")
	lines[1] = strings.Replace(lines[1], `"problem_id":"`, `"problem_id":"nowhere-`, 1)
	os.WriteFile(filepath.Join(bad, "step-000001.jsonl"), []byte(strings.Join(lines, "")), 0o644)
	if _, err := BuildPool(g, g.Model, bad); err == nil || !strings.Contains(err.Error(), "step-000001.jsonl:2") {
		t.Fatalf("a foreign problem: %v", err)
	}
}
