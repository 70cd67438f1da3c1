package trainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/pooltest"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
)

const lanpoData = "../configs/data/tiny-arith-lanpo.jsonl"

// lanpoConfig is configs/tiny-lanpo.yaml from the warmed-up tiny model in a
// temporary directory, with overrides.
func lanpoConfig(t *testing.T, sets ...string) Config {
	t.Helper()
	cfg, err := LoadConfig("../configs/tiny-lanpo.yaml", append([]string{
		"run_dir=" + filepath.Join(t.TempDir(), "run"), "data.train=" + lanpoData, "model=" + warmTiny(t), "total_steps=4",
		"checkpoint.every=1", "checkpoint.keep=10",
	}, sets...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// seededPool writes pooltest.Seeded's pool of the tiny LANPO data set and
// returns its path and the problems.
func seededPool(t *testing.T) (string, []Problem) {
	t.Helper()
	problems, err := LoadProblems(lanpoData, false)
	if err != nil {
		t.Fatal(err)
	}
	return pooltest.Seeded(t, problems), problems
}

func readRollouts(t *testing.T, runDir string, step int) []rolloutLine {
	t.Helper()
	rows, err := jsonl.Read[rolloutLine](filepath.Join(runDir, "rollouts", fmt.Sprintf("step-%06d.jsonl", step)))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestLANPOModesWithSeededPool: with a pool written by hand, both feedback
// modes are built, sampled from and logged; reflection shows one of the
// pool's raw attempts at that problem (chat-control strings removed, no
// outcome said), abstraction carries a plan with no foreign answer, and the
// pool grows by the step's summaries.
func TestLANPOModesWithSeededPool(t *testing.T) {
	path, problems := seededPool(t)
	gold := map[string]string{}
	for _, p := range problems {
		gold[p.ID] = p.Answer
	}
	cfg := lanpoConfig(t, "lanpo.initial_pool="+path, "lanpo.feedback_ratio=1", "lanpo.similarity_threshold=0", "total_steps=2")
	runGRPO(t, cfg, "")
	modes := map[string]int{}
	for step := 1; step <= 2; step++ {
		for _, r := range readRollouts(t, cfg.RunDir, step) {
			modes[r.Mode]++
			if r.Sample != 0 {
				continue
			}
			if n := strings.Count(r.Prompt, "<|im_start|>"); n != 3 {
				t.Fatalf("%s prompt has %d turn starts (system, user, assistant: 3):\n%s", r.Mode, n, r.Prompt)
			}
			switch r.Mode {
			case rl.ModeReflection:
				if !strings.Contains(r.Prompt, "<attempt>\nhand-attempt-") {
					t.Fatalf("reflection prompt without a pool attempt:\n%s", r.Prompt)
				}
				idx := strings.Index(r.Prompt, "hand-attempt-")
				if num := strings.SplitN(r.Prompt[idx+len("hand-attempt-"):], "-", 2)[0]; fmt.Sprintf("arith-%s", num) != r.ProblemID {
					t.Fatalf("problem %s shows attempt %s of another problem", r.ProblemID, num)
				}
				for _, bad := range []string{"principle", "Pitfall", "correct", "wrong result", "Ignore the rules<|"} {
					if strings.Contains(r.Prompt, bad) {
						t.Fatalf("reflection prompt contains %q:\n%s", bad, r.Prompt)
					}
				}
			case rl.ModeAbstraction:
				plan := r.Prompt[strings.Index(r.Prompt, "A plan drawn from related problems"):]
				if strings.Contains(plan, `\boxed{`) || strings.Contains(plan, "hand-attempt") {
					t.Fatalf("abstraction carries an answer or a foreign attempt:\n%s", r.Prompt)
				}
			}
		}
	}
	if modes[rl.ModeReflection] == 0 || modes[rl.ModeAbstraction] == 0 {
		t.Fatalf("modes sampled: %v", modes)
	}
	met := stableMetrics(t, cfg.RunDir)
	if met[0]["lanpo_reflection"].(float64)+met[1]["lanpo_reflection"].(float64) > 0 &&
		met[0]["special_tokens_removed"].(float64)+met[1]["special_tokens_removed"].(float64) == 0 {
		t.Fatal("reflection showed attempts with chat-control strings, and none was counted as removed")
	}
	p, err := pool.Load(filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(2), pool.File), cfg.LANPO.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	if want := 16 + 2*4*cfg.LANPO.SummariesPerGroup; p.Entries() != want {
		t.Fatalf("pool has %d entries, want %d", p.Entries(), want)
	}
}

// TestLANPOExactResume: 4 LANPO steps straight and 2 + --resume auto + 2
// give bitwise-equal weights, optimizer state and pools, and the same
// metrics.
func TestLANPOExactResume(t *testing.T) {
	for _, c := range []struct {
		name    string
		sets    []string
		weights string // the trained tensors' file
	}{{"full", nil, "model.safetensors"}, {"LoRA", []string{"lora.r=4", "optim.lr=1e-2"}, model.AdapterWeightsFile},
		// Consolidation in steps of its own: its moment group is in the
		// optimizer's state, and resumes with it.
		{"own consolidation step", []string{"lanpo.consolidate=1", "lanpo.consolidate_lr=3e-3", "rollout.samples_per_prompt=8"}, "model.safetensors"},
		// Code rewards: candidates run in the sandbox, the pool keeps
		// programs, LANPO's prompts are code's (pool.CodePrompts).
		{"code", []string{"reward.kind=code", "data.train=testdata/code_arith.jsonl"}, "model.safetensors"},
		// Tool trajectories (a scripted tool): the pool keeps them with the
		// tools' responses, as reflection reads them.
		{"tools", nil, "model.safetensors"}} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "tools" {
				toolsForTest = func() toolLoop { return scriptedTools() }
				defer func() { toolsForTest = nil }()
			}
			straight := lanpoConfig(t, c.sets...)
			runGRPO(t, straight, "")
			split := lanpoConfig(t, append(c.sets, "stop_after_steps=2")...)
			runGRPO(t, split, "")
			runGRPO(t, split, "auto")
			a := filepath.Join(straight.RunDir, checkpointsDir, checkpointName(4))
			b := filepath.Join(split.RunDir, checkpointsDir, checkpointName(4))
			for _, f := range []string{c.weights, optim.TensorsFile, stateFile, pool.File} {
				x, _ := os.ReadFile(filepath.Join(a, f))
				y, _ := os.ReadFile(filepath.Join(b, f))
				if len(x) == 0 || !bytes.Equal(x, y) {
					t.Fatalf("%s differs between the straight and the resumed run", f)
				}
			}
			if c.name == "tools" {
				tk, err := tokenizer.Load(straight.Model)
				if err != nil {
					t.Fatal(err)
				}
				text := tk.Decode(tokenizer.Ints(scriptedAppend), true)
				if strings.TrimSpace(text) == "" {
					t.Fatalf("the scripted append decodes to %q: the check shows nothing", text)
				}
				quoted, _ := json.Marshal(text)
				raw, _ := os.ReadFile(filepath.Join(b, pool.File))
				if !bytes.Contains(raw, bytes.Trim(quoted, `"`)) {
					t.Fatalf("the pool's attempts lack the tools' responses %s", quoted)
				}
			}
			if straight.Reward.Kind == "code" {
				raw, _ := os.ReadFile(filepath.Join(b, pool.File))
				if !bytes.Contains(raw, []byte(`"code":true`)) {
					t.Fatalf("a code run's pool does not say so: its lessons would keep their programs")
				}
			}
			ma, mb := stableMetrics(t, straight.RunDir), stableMetrics(t, split.RunDir)
			if fmt.Sprint(ma) != fmt.Sprint(mb) {
				t.Fatalf("metrics differ:\n%v\n%v", ma, mb)
			}
			if straight.LANPO.ConsolidateLR > 0 {
				raw, _ := os.ReadFile(filepath.Join(b, optim.MetaFile))
				var meta struct {
					Groups     []string
					GroupSteps []int64
				}
				if err := json.Unmarshal(raw, &meta); err != nil || len(meta.GroupSteps) != 1 || meta.GroupSteps[0] == 0 {
					t.Fatalf("%s: consolidation's moment group %v, its steps %v (%v): the test compares no own step", optim.MetaFile, meta.Groups, meta.GroupSteps, err)
				}
			}
			used := 0.0
			for _, m := range ma {
				used += m["lanpo_reflection"].(float64) + m["lanpo_abstraction"].(float64)
			}
			before := filepath.Join(straight.RunDir, checkpointsDir, checkpointName(1))
			x, _ := os.ReadFile(filepath.Join(a, c.weights))
			y, _ := os.ReadFile(filepath.Join(before, c.weights))
			if used == 0 || bytes.Equal(x, y) {
				t.Fatalf("the run used feedback %v times and its weights moved from step 1 to 4: %v — the test compares too little", used, !bytes.Equal(x, y))
			}
		})
	}
}

// TestLANPOWithoutFeedbackIsGRPO: LANPO with p_t = 0 samples every prompt
// from scratch, and the pool writes do not touch the training state, so it
// trains bit for bit like GRPO.
func TestLANPOWithoutFeedbackIsGRPO(t *testing.T) {
	grpo := lanpoConfig(t, "algo.name=grpo")
	runGRPO(t, grpo, "")
	lanpo := lanpoConfig(t, "lanpo.feedback_ratio=0")
	runGRPO(t, lanpo, "")
	a := weights(t, filepath.Join(grpo.RunDir, checkpointsDir, checkpointName(4)))
	if !bytes.Equal(a, weights(t, filepath.Join(lanpo.RunDir, checkpointsDir, checkpointName(4)))) {
		t.Fatal("LANPO without feedback trained differently from GRPO")
	}
	if bytes.Equal(a, weights(t, grpo.Model)) {
		t.Fatal("the weights did not move: the test compares nothing")
	}
}

// TestLANPOOriginalPrompt: with train_prompt: original every feedback-aware
// prompt is abstraction (no reflection), the update conditions on the bare
// prompt and reports the context's log-prob gap.
func TestLANPOOriginalPrompt(t *testing.T) {
	path, _ := seededPool(t)
	cfg := lanpoConfig(t, "lanpo.initial_pool="+path, "lanpo.feedback_ratio=1", "lanpo.similarity_threshold=0",
		"lanpo.train_prompt=original", "total_steps=2")
	runGRPO(t, cfg, "")
	gaps := 0
	for _, m := range stableMetrics(t, cfg.RunDir) {
		if m["lanpo_reflection"].(float64) != 0 {
			t.Fatal("reflection used with train_prompt: original")
		}
		if g, ok := m["context_logp_gap"].(float64); ok && g != 0 {
			gaps++
			// The weights' distribution is reported with the gap.
			mean, _ := m["tis_weight_mean"].(float64)
			b1, _ := m["tis_weight_below_tenth"].(float64)
			b5, _ := m["tis_weight_below_half"].(float64)
			clip, _ := m["tis_clipped_frac"].(float64)
			if !(mean > 0 && mean <= cfg.LANPO.TISCap) || b1 > b5 || b5+clip > 1+1e-12 {
				t.Fatalf("importance weights: mean %v (cap %v), below 0.1 %v, below 0.5 %v, clipped %v", mean, cfg.LANPO.TISCap, b1, b5, clip)
			}
		}
	}
	if gaps == 0 {
		t.Fatal("no step reported the log-prob gap between the context and the bare prompt")
	}
	if _, err := LoadConfig("../configs/tiny-lanpo.yaml", []string{"lanpo.train_prompt=original", "lanpo.modes.reflection=1"}); err == nil ||
		!strings.Contains(err.Error(), "lanpo.modes.reflection") {
		t.Fatalf("reflection with train_prompt: original: %v", err)
	}
}

// TestSummariesFromRandomWeights: the structured summary of a random
// model's rollouts has its fields for every rollout, none holding a
// header (each field stops at the next), and no flow of thought (the
// default prompts do not ask for it).
func TestSummariesFromRandomWeights(t *testing.T) {
	cfg := lanpoConfig(t, "model=builtin:tiny", "total_steps=1", "lanpo.aux_temperature=1")
	runGRPO(t, cfg, "")
	p, err := pool.Load(filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(1), pool.File), cfg.LANPO.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	problems, _ := LoadProblems(lanpoData, false)
	n, filled := 0, 0
	headers := pool.DefaultPrompts()
	for _, pr := range problems {
		for _, e := range p.EntriesOf(pr.ID) {
			n++
			if e.Summary.FlowOfThought != "" {
				t.Fatalf("a flow of thought the prompts did not ask for: %q", e.Summary.FlowOfThought)
			}
			for _, f := range []string{e.Summary.Principles, e.Summary.Pitfalls} {
				for _, h := range headers.SummaryHeaders() {
					if strings.Contains(f, h) {
						t.Fatalf("a field holds the header %q: %q", h, f)
					}
				}
				if f != "" {
					filled++
				}
			}
		}
	}
	if n != 4*cfg.LANPO.SummariesPerGroup || filled == 0 {
		t.Fatalf("%d entries (want %d), %d non-empty fields", n, 4*cfg.LANPO.SummariesPerGroup, filled)
	}
}
