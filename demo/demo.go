package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

// The demo: a small model learns the math world by SFT (answers, and
// LANPO's skills written by the world as teacher), then RL arms start from
// the same SFT checkpoint with the same seeds and rollout budget — GRPO,
// LANPO (feedback on the prompt it samples from), LANPO training feedback-
// guided samples on the bare problem — and each is evaluated on the same
// held-out problems: greedy zero-shot for all, and for LANPO also
// retrieval-augmented (its own pool) and self-corrective.

// Options choose the demo's size and arms.
type Options struct {
	RunDir string
	Seed   int64
	Fast   bool      // ≤ 2 minutes: fewer steps, for tests
	Arms   []string  // RL arms (default: lanpo)
	PT     float64   // lanpo.feedback_ratio of the LANPO arms (0: the default 0.75)
	SFT    string    // an SFT checkpoint to start the arms from instead of training one
	Force  bool      // replace RunDir even if it is not an earlier demo run
	Log    io.Writer // where the stage lines go
	// Progress is a terminal for the trainers' progress lines, or nil.
	Progress io.Writer
}

// demoMarker marks a directory as a demo run, which a later demo may
// replace.
const demoMarker = "demo.json"

// claimRunDir empties dir for a new demo. It refuses a directory that has
// files but no demo marker unless force: a mistyped --run-dir must not
// delete someone's data.
func claimRunDir(dir string, seed int64, fast, force bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if len(entries) > 0 && !force {
		if _, err := os.Stat(filepath.Join(dir, demoMarker)); err != nil {
			return fmt.Errorf("--run-dir %s is not empty and is not an earlier demo run (it has no %s): choose another directory, or pass --force to replace it", dir, demoMarker)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(map[string]any{"seed": seed, "fast": fast, "started": time.Now().UTC().Format(time.RFC3339)})
	return os.WriteFile(filepath.Join(dir, demoMarker), append(b, '\n'), 0o644)
}

// RL arms.
const (
	ArmGRPO          = "grpo"
	ArmLANPO         = "lanpo"
	ArmLANPOOriginal = "lanpo-original"
)

// Arms lists the arms --compare runs.
var Arms = []string{ArmGRPO, ArmLANPO, ArmLANPOOriginal}

// demoMaxNew bounds generated tokens: a column-method solution of a level-3
// problem is ≈ 70 byte-level tokens, a checked redo ≈ 90.
const demoMaxNew = 112

// demoSystem is the system prompt of every demo conversation.
const demoSystem = "Answer with \\boxed{}."

// demoPlan is the demo's schedule and split sizes.
type demoPlan struct {
	sftSteps, rlSteps int
	heldOut           int // problems per level
	rlPerLevel        int // distinct RL problems per RL level
	sftDraws          int // SFT answer examples per level (problems may repeat)
	rlLR              float64
	rlLevels          []int
	workedFrac        float64 // share of SFT answers with worked (column-method) solutions
	skillExamples     int     // examples of each LANPO skill the world writes for SFT
	evalEvery         int     // held-out evaluation during RL
}

// The SFT answers mix two forms: worked column-method solutions for 40% of
// the problems and the bare result for the rest. The SFT model then usually
// answers briefly and is mostly wrong on two-digit problems, yet it can
// work them in columns when it samples that form: RL has something to
// discover (docs/benchmarks.md, "Demo"). RL problems are 100 distinct ones
// per level 2-4, so over 60 steps of 16 prompts each recurs about three
// times (reflection needs an earlier attempt) while RL still sees many
// distinct problems.
func plan(fast bool) demoPlan {
	p := demoPlan{sftSteps: 1400, rlSteps: 60, heldOut: 100, rlPerLevel: 100, sftDraws: 3000, rlLR: 1e-4, rlLevels: []int{2, 3, 4},
		workedFrac: 0.4, skillExamples: 400, evalEvery: 20}
	if fast {
		p.sftSteps, p.rlSteps, p.heldOut, p.rlPerLevel, p.sftDraws, p.evalEvery, p.skillExamples = 150, 8, 24, 12, 400, 4, 80
	}
	return p
}

// demoSplit is the demo's data: disjoint SFT, RL and held-out problems.
type demoSplit struct {
	heldOut, rl, sft []Item // sft: distinct problems, answers drawn from them
	sftAnswers       []Item
}

// split draws held-out problems first, then distinct RL problems, then SFT
// problems from what is left (SFT answers may repeat problems; the skill
// examples use each distinct SFT problem once).
func split(seed int64, p demoPlan) demoSplit {
	w := NewWorld(seed)
	seen := map[string]bool{}
	var d demoSplit
	for lv := 1; lv <= MaxLevel; lv++ {
		d.heldOut = append(d.heldOut, w.draw(lv, min(p.heldOut, distinctProblems[lv]/4), 200*p.heldOut, seen, true, "heldout")...)
	}
	for _, lv := range p.rlLevels {
		d.rl = append(d.rl, w.draw(lv, min(p.rlPerLevel, distinctProblems[lv]/4), 200*p.rlPerLevel, seen, true, "rl")...)
	}
	sftSeen := map[string]bool{}
	for lv := 1; lv <= MaxLevel; lv++ {
		for _, it := range w.draw(lv, p.sftDraws, 100*p.sftDraws, seen, false, "sft") {
			d.sftAnswers = append(d.sftAnswers, it)
			if !sftSeen[it.Problem] {
				sftSeen[it.Problem] = true
				d.sft = append(d.sft, it)
			}
		}
	}
	return d
}

// Run runs the embedded math world end to end: data, a small model
// from scratch, SFT, the RL arms, held-out evaluations and the report.
func Run(ctx context.Context, o Options) error {
	start := time.Now()
	p := plan(o.Fast)
	if len(o.Arms) == 0 {
		o.Arms = []string{ArmLANPO}
	}
	fmt.Fprintf(o.Log, "demo: arms %v, run directory %s\n", o.Arms, o.RunDir)
	if err := claimRunDir(o.RunDir, o.Seed, o.Fast, o.Force); err != nil {
		return err
	}
	d, err := prepare(o.RunDir, o.Seed, p, o.Arms, o.PT, o.SFT)
	if err != nil {
		return err
	}
	res := Results{Seed: o.Seed, Usage: map[string]FeedbackUsage{}, Sizes: map[string]int{
		"heldout": len(d.split.heldOut), "rl_distinct": len(d.split.rl), "sft_distinct": len(d.split.sft), "sft_answers": len(d.split.sftAnswers),
		"rl_prompt_draws": p.rlSteps * 16}}
	sftModel := stepDir(d.sft.RunDir, d.sft.TotalSteps)
	if o.SFT == "" {
		fmt.Fprintf(o.Log, "demo: stage 1: SFT, %d steps (%d answers, %d distinct problems with skill examples)\n", d.sft.TotalSteps, len(d.split.sftAnswers), len(d.split.sft))
		if err := trainer.RunSFT(ctx, d.sft, "", trainer.RunOptions{Progress: o.Progress}); err != nil {
			return fmt.Errorf("demo SFT: %w", err)
		}
	} else {
		sftModel = o.SFT
	}
	after, err := d.evaluate(o.RunDir, "sft", sftModel, trainer.DefaultConfig(), nil)
	if err != nil {
		return err
	}
	res.Stages = append(res.Stages, after)
	fmt.Fprintf(o.Log, "demo: held-out accuracy after SFT: %.3f (%d answers show column steps)\n", after.Modes[0].Overall, after.Modes[0].Worked)
	for _, arm := range o.Arms {
		cfg := d.arms[arm]
		fmt.Fprintf(o.Log, "demo: stage 2: %s, %d steps\n", arm, cfg.TotalSteps)
		opts := trainer.RunOptions{Progress: o.Progress}
		if opts.Evaluate, err = trainer.TrainingEvaluator(cfg, true); err != nil {
			return err
		}
		if err := trainer.RunGRPO(ctx, cfg, "", opts); err != nil {
			return fmt.Errorf("demo %s: %w", arm, err)
		}
		final := stepDir(cfg.RunDir, cfg.TotalSteps)
		var p *pool.Pool
		if cfg.Algo.Name == trainer.AlgoLANPO {
			if p, err = pool.Load(filepath.Join(final, pool.File), cfg.LANPO.PoolConfig()); err != nil {
				return err
			}
			res.Usage[arm] = feedbackUsage(cfg.RunDir)
		}
		r, err := d.evaluate(o.RunDir, arm, final, cfg, p)
		if err != nil {
			return err
		}
		res.Stages = append(res.Stages, r)
		for _, m := range r.Modes {
			fmt.Fprintf(o.Log, "demo: held-out accuracy after %s, %s: %.3f (after SFT %.3f); %d answers show column steps\n", arm, m.Mode, m.Overall, after.Modes[0].Overall, m.Worked)
		}
	}
	js, _ := json.MarshalIndent(res, "", " ")
	if err := fsutil.WriteFileSync(filepath.Join(o.RunDir, "demo_results.json"), append(js, '\n')); err != nil {
		return err
	}
	if err := WriteReport(o.RunDir); err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "demo: report %s; elapsed %s\n", filepath.Join(o.RunDir, "report.html"), time.Since(start).Round(time.Second))
	return nil
}

// evaluate measures greedy held-out accuracy per level of a checkpoint:
// zero-shot, and with a pool also retrieval-augmented and self-corrective,
// through the same evaluation as lanpo eval (results in RUN/eval-STAGE/).
func (d demoRun) evaluate(runDir, stage, dir string, cfg trainer.Config, p *pool.Pool) (StageResult, error) {
	runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
	defer runtime.UnlockOSThread()
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		return StageResult{}, err
	}
	defer m.Close()
	tk, err := tokenizer.Load(dir)
	if err != nil {
		return StageResult{}, err
	}
	modes := []string{eval.ModeZeroShot}
	if p != nil {
		modes = append(modes, eval.ModeRetrieval, eval.ModeSelfCorrect)
	}
	cfg.Data.SystemPrompt, cfg.Data.PromptTemplate = demoSystem, "{problem}"
	out := filepath.Join(runDir, "eval-"+stage)
	os.RemoveAll(out)
	if _, err := eval.Run(m, tk, eval.Options{Benchmarks: d.bench, Modes: modes, K: 1, Feedback: cfg.FeedbackSettings(), Pool: p, Out: out, Batch: 128,
		Sampling: model.SamplingParams{Temperature: 0, MaxNewTokens: demoMaxNew, Seed: 1}}); err != nil {
		return StageResult{}, err
	}
	lines, err := jsonl.Read[eval.SampleLine](filepath.Join(out, eval.SamplesFile))
	if err != nil {
		return StageResult{}, err
	}
	return stageResult(stage, modes, lines), nil
}
