package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/trainer"
)

// DemoOptions choose the demo's size.
type DemoOptions struct {
	RunDir   string
	Seed     int64
	Fast     bool      // ≤ 2 minutes: fewer steps, for tests
	Progress io.Writer // terminal for the trainers' progress lines, or nil
	Log      io.Writer // where the stage lines go
}

// demoMaxNew bounds generated tokens: a column-method solution of a
// level-3 problem is ≈ 70 byte-level tokens (64 cut them before the
// closing brace of \boxed{}).
const demoMaxNew = 96

// demoSystem is the system prompt of every demo conversation.
const demoSystem = "Answer with \\boxed{}."

func demoPrompt(it Item) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: demoSystem}, {Role: "user", Content: it.Problem}}
}

// demoPlan is the demo's schedule.
type demoPlan struct {
	sftSteps, rlSteps int
	heldOut           int // problems per level
	estimate          time.Duration
}

func plan(fast bool) demoPlan {
	if fast {
		return demoPlan{sftSteps: 150, rlSteps: 10, heldOut: 24, estimate: 75 * time.Second}
	}
	return demoPlan{sftSteps: 1000, rlSteps: 60, heldOut: 100, estimate: 7 * time.Minute}
}

// RunDemo runs the embedded math world end to end: data, a tiny model from
// scratch, SFT, held-out evaluation, GRPO from the SFT checkpoint on the
// harder levels, evaluation again, and the report.
func RunDemo(ctx context.Context, o DemoOptions) error {
	start := time.Now()
	p := plan(o.Fast)
	fmt.Fprintf(o.Log, "demo: estimated time on 2 CPU cores: %s (run directory %s)\n", p.estimate, o.RunDir)
	if err := os.RemoveAll(o.RunDir); err != nil {
		return err
	}
	dataDir := filepath.Join(o.RunDir, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	train, heldOut := Split(o.Seed, []int{1, 2, 3, 4}, 3000, p.heldOut)
	var sftChats, rlProblems []any
	for _, it := range train {
		sftChats = append(sftChats, map[string]any{"messages": append(demoPrompt(it), tokenizer.Message{Role: "assistant", Content: it.Solution})})
	}
	// GRPO gets problems neither SFT nor the evaluation has seen, on the
	// harder levels 2-3. (With SFT's own problems, RL rewarded what SFT had
	// memorized: training accuracy rose while held-out accuracy fell, on
	// two seeds.)
	for _, it := range Fresh(o.Seed+1000, []int{2, 3}, 3000, append(append([]Item(nil), train...), heldOut...)) {
		rlProblems = append(rlProblems, it)
	}
	heldAny := make([]any, len(heldOut))
	for i := range heldOut {
		heldAny[i] = heldOut[i]
	}
	for name, rows := range map[string][]any{"sft.jsonl": sftChats, "rl.jsonl": rlProblems, "heldout.jsonl": heldAny} {
		if err := writeJSONL(filepath.Join(dataDir, name), rows); err != nil {
			return err
		}
	}

	base := trainer.DefaultConfig()
	base.Model = "builtin:small"
	base.Seed = uint64(o.Seed)
	base.Data.SystemPrompt = demoSystem
	base.Data.PromptTemplate = "{problem}"
	base.Checkpoint = trainer.CheckpointConfig{Every: 0, Keep: 1}

	// Stage 1: SFT from scratch on worked solutions.
	sft := base
	sft.RunDir = filepath.Join(o.RunDir, "sft")
	sft.TotalSteps = p.sftSteps
	sft.Data.Train = filepath.Join(dataDir, "sft.jsonl")
	sft.SFT = trainer.SFTConfig{MaxLen: 128, MicroBatchSize: 32, GradAccum: 1}
	sft.Optim = trainer.OptimConfig{LR: 3e-3, Schedule: "cosine", WarmupSteps: 50, MinLRRatio: 0.1, Beta1: 0.9, Beta2: 0.98, Eps: 1e-8, GradClip: 1}
	fmt.Fprintf(o.Log, "demo: stage 1: SFT, %d steps\n", sft.TotalSteps)
	if err := trainer.RunSFT(ctx, sft, "", trainer.RunOptions{Progress: o.Progress}); err != nil {
		return fmt.Errorf("demo SFT: %w", err)
	}
	sftCkpt := filepath.Join(sft.RunDir, "checkpoints", fmt.Sprintf("step-%06d", sft.TotalSteps))
	before, err := evaluate(sftCkpt, heldOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "demo: held-out accuracy after SFT: %.3f\n", before.Overall)

	// Stage 2: GRPO from the SFT checkpoint on levels 2-4.
	rl := base
	rl.Model = sftCkpt
	rl.ChatFormat = "qwen2.5"
	rl.RunDir = filepath.Join(o.RunDir, "rl")
	rl.TotalSteps = p.rlSteps
	rl.Data.Train = filepath.Join(dataDir, "rl.jsonl")
	rl.Rollout = trainer.RolloutConfig{PromptsPerStep: 16, SamplesPerPrompt: 8, Temperature: 1, TopP: 1, MaxNewTokens: demoMaxNew}
	rl.Algo.MicroBatchSize = 64
	rl.Algo.LossAggMode = trainer.AggTokenMean
	// 1e-4: at 5e-4 and 1e-3 the policy drifted and held-out accuracy fell
	// below the SFT model's (see the closing note of the demo issue).
	rl.Optim = trainer.OptimConfig{LR: 1e-4, Schedule: "constant", Beta1: 0.9, Beta2: 0.98, Eps: 1e-8, GradClip: 1}
	fmt.Fprintf(o.Log, "demo: stage 2: GRPO, %d steps\n", rl.TotalSteps)
	if err := trainer.RunGRPO(ctx, rl, "", trainer.RunOptions{Progress: o.Progress}); err != nil {
		return fmt.Errorf("demo GRPO: %w", err)
	}
	after, err := evaluate(filepath.Join(rl.RunDir, "checkpoints", fmt.Sprintf("step-%06d", rl.TotalSteps)), heldOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "demo: held-out accuracy after GRPO: %.3f (after SFT %.3f)\n", after.Overall, before.Overall)
	for _, r := range []struct {
		name string
		res  Result
	}{{"eval_sft.json", before}, {"eval_rl.json", after}} {
		b, _ := json.MarshalIndent(r.res, "", " ")
		if err := os.WriteFile(filepath.Join(o.RunDir, r.name), b, 0o644); err != nil {
			return err
		}
	}
	if err := WriteReport(o.RunDir); err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "demo: report %s; elapsed %s\n", filepath.Join(o.RunDir, "report.html"), time.Since(start).Round(time.Second))
	return nil
}

// evaluate loads a checkpoint and measures greedy held-out accuracy.
func evaluate(dir string, items []Item) (Result, error) {
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		return Result{}, err
	}
	defer m.Close()
	tk, err := tokenizer.Load(dir)
	if err != nil {
		return Result{}, err
	}
	if err := tk.SetChatFormat("qwen2.5"); err != nil {
		return Result{}, err
	}
	return Greedy(m, tk, items, demoPrompt, demoMaxNew, 128)
}

func writeJSONL(path string, rows []any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
