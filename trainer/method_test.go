package trainer

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMethodTable: algo.name's values, its error and --help come from the
// table; every row's section has its defaults in DefaultConfig and its
// checks in Resolve, whatever algo.name says.
func TestMethodTable(t *testing.T) {
	seen := map[string]bool{}
	help := MethodsHelp()
	for _, m := range methods {
		if m.name == "" || seen[m.name] || m.about == "" {
			t.Fatalf("row %+v: a name of its own and an about", m)
		}
		seen[m.name] = true
		if !strings.Contains(help, m.name) || !strings.Contains(help, m.about) {
			t.Errorf("--help's list lacks %s: %s", m.name, help)
		}
		if (m.section != "") != (m.defaults != nil) {
			t.Errorf("%s: a section (%q) without defaults, or defaults without a section", m.name, m.section)
		}
	}
	c := DefaultConfig()
	c.Algo.Name = "ppo2"
	err := c.Resolve()
	for _, name := range MethodNames() {
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "algo.name") {
			t.Fatalf("algo.name ppo2: %v, want an error naming algo.name and %s", err, name)
		}
	}
	// A bad value in a section is an error whatever algo.name says; the
	// combination checks apply to the chosen method only.
	for _, set := range []string{"sdpo.top_k=0", "critique.gamma=0", "lanpo.feedback_ratio=2"} {
		key, _, _ := strings.Cut(set, "=")
		c, err := WithSets(DefaultConfig(), []string{set, "algo.name=grpo"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Resolve(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s with algo.name grpo: %v, want an error naming %s", set, err, key)
		}
	}
	for _, name := range []string{AlgoGRPO, AlgoSDPO} {
		c, err := WithSets(DefaultConfig(), []string{"algo.name=" + name, "lora.r=8"})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Resolve()
		if refused := err != nil && strings.Contains(err.Error(), "algo.name sdpo"); refused != (name == AlgoSDPO) {
			t.Errorf("LoRA with algo.name %s: %v", name, err)
		}
	}
}

// TestEmptyAlgoNameIsGRPO: a Config built in Go with no algo.name runs as
// grpo and its checkpoints say so (the kind is read after algo.name is
// resolved).
func TestEmptyAlgoNameIsGRPO(t *testing.T) {
	cfg := tinyConfig(t, "total_steps=1")
	cfg.Algo.Name = ""
	runGRPO(t, cfg, "")
	b, err := os.ReadFile(filepath.Join(NewestCheckpoint(cfg.RunDir), stateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st TrainerState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Kind != AlgoGRPO {
		t.Fatalf("checkpoint kind %q, want %q", st.Kind, AlgoGRPO)
	}
	if err := RunGRPO(context.Background(), cfg, "auto", RunOptions{}); err != nil {
		t.Fatalf("resuming it with algo.name still empty: %v", err)
	}
}
