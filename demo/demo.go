package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/seed"
	"github.com/lanpo-rl/lanpo/trainer"
)

// The demo: a small model learns the math world by SFT (answers, and
// LANPO's skills written by the world as teacher), then RL arms start from
// the same SFT checkpoint with the same seeds and rollout budget — GRPO,
// LANPO (feedback on the prompt it samples from), LANPO training feedback-
// guided samples on the bare problem — and each is evaluated on the same
// held-out problems: greedy zero-shot for all, and for LANPO also
// retrieval-augmented (its own pool) and self-corrective.

// DemoOptions choose the demo's size and arms.
type DemoOptions struct {
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

// demoRun is one demo's data and stage configurations.
type demoRun struct {
	split demoSplit
	sft   trainer.Config
	arms  map[string]trainer.Config
	bench []Benchmark // held out, one benchmark per level
}

// prepare writes the demo's data under runDir and returns the SFT and RL
// configurations.
func prepare(runDir string, runSeed int64, p demoPlan, arms []string, pt float64, sftFrom string) (demoRun, error) {
	dataDir := filepath.Join(runDir, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return demoRun{}, err
	}
	d := demoRun{split: split(runSeed, p), arms: map[string]trainer.Config{}}
	promptsPath := filepath.Join(dataDir, "prompts.yaml")
	if err := os.WriteFile(promptsPath, []byte(demoPrompts), 0o644); err != nil {
		return d, err
	}

	base := trainer.DefaultConfig()
	base.Model = "builtin:small"
	base.Seed = uint64(runSeed)
	base.Data.SystemPrompt = demoSystem
	base.Data.PromptTemplate = "{problem}"
	base.Checkpoint = trainer.CheckpointConfig{Every: 0, Keep: 1}
	base.LANPO.Prompts = promptsPath

	// SFT data: answers in two forms, and the world's skill examples.
	b, err := seed.NewBuilder(base, nil)
	if err != nil {
		return d, err
	}
	pick := rand.New(rand.NewSource(runSeed + 2000)) // its own stream: the problems do not depend on the mix
	var chats []seed.Example
	for _, it := range d.split.sftAnswers {
		answer := it.Brief
		if pick.Float64() < p.workedFrac {
			answer = it.Solution
		}
		chats = append(chats, b.Answer(it.ID, it.Problem, answer))
	}
	chats = append(chats, worldSeed(b, d.split.sft, runSeed+3000, p.skillExamples)...)
	rng := rand.New(rand.NewSource(runSeed + 4000))
	rng.Shuffle(len(chats), func(i, j int) { chats[i], chats[j] = chats[j], chats[i] })
	for _, f := range []struct {
		name string
		rows any
	}{{"sft.jsonl", chats}, {"rl.jsonl", d.split.rl}, {"heldout.jsonl", d.split.heldOut}} {
		var err error
		switch rows := f.rows.(type) {
		case []seed.Example:
			err = jsonl.WriteFile(filepath.Join(dataDir, f.name), rows)
		case []Item:
			err = jsonl.WriteFile(filepath.Join(dataDir, f.name), rows)
		}
		if err != nil {
			return d, err
		}
	}
	for lv := 1; lv <= MaxLevel; lv++ {
		var items []Item
		for _, it := range d.split.heldOut {
			if it.Level == lv {
				items = append(items, it)
			}
		}
		path := filepath.Join(dataDir, fmt.Sprintf("heldout-L%d.jsonl", lv))
		if err := jsonl.WriteFile(path, items); err != nil {
			return d, err
		}
		bench, err := LoadBenchmark(fmt.Sprintf("level%d", lv), path, 0)
		if err != nil {
			return d, err
		}
		d.bench = append(d.bench, bench)
	}

	// Stage 1: SFT from scratch.
	sft := base
	sft.RunDir = filepath.Join(runDir, "sft")
	sft.TotalSteps = p.sftSteps
	sft.Data.Train = filepath.Join(dataDir, "sft.jsonl")
	// Skill examples are ≈ 160-220 tokens, answers ≈ 70-120: packing by length
	// keeps short ones from paying for the long ones' padding.
	sft.SFT = trainer.SFTConfig{MaxLen: 224, MicroBatchSize: 32, GradAccum: 1, MaxTokensPerMicroBatch: 2048}
	sft.Optim = trainer.OptimConfig{LR: 3e-3, Schedule: "cosine", WarmupSteps: 50, MinLRRatio: 0.1, Beta1: 0.9, Beta2: 0.98, Eps: 1e-8, GradClip: 1}
	d.sft = sft

	// Stage 2: the RL arms from the SFT checkpoint, same seeds and budget.
	rl := base
	rl.Model = stepDir(sft.RunDir, sft.TotalSteps)
	if sftFrom != "" {
		rl.Model = sftFrom
	}
	rl.TotalSteps = p.rlSteps
	rl.Data.Train = filepath.Join(dataDir, "rl.jsonl")
	rl.Rollout = trainer.RolloutConfig{PromptsPerStep: 16, SamplesPerPrompt: 8, Temperature: 1, TopP: 1, MaxNewTokens: demoMaxNew}
	rl.Algo.MicroBatchSize = 64
	rl.Algo.MaxTokensPerMicroBatch = 6144
	rl.Algo.LossAggMode = trainer.AggTokenMean
	rl.Optim = trainer.OptimConfig{LR: p.rlLR, Schedule: "constant", Beta1: 0.9, Beta2: 0.98, Eps: 1e-8, GradClip: 1}
	rl.Eval = trainer.EvalConfig{Every: p.evalEvery, K: 1, TopP: 1, MaxNewTokens: demoMaxNew, BatchSize: 64, Seed: 1}
	for _, bench := range d.bench {
		rl.Eval.Bench = append(rl.Eval.Bench, bench.Path)
	}
	rl.LANPO.SummaryFieldTokens, rl.LANPO.PlanTokens, rl.LANPO.MaxContextTokens = 32, 48, 160
	rl.LANPO.SummariesPerGroup, rl.LANPO.MaxRelatedProblems, rl.LANPO.LessonsPerProblem = 1, 1, 1
	// The relevance floor's default is calibrated on a real 0.5B model's
	// hidden states; the demo's tiny model has its own scale, and the
	// demo's measured comparison (docs) ran with γ alone.
	noFloor := 0.0
	rl.LANPO.RelevanceFloor = &noFloor
	// The fixed centre is a set of MATH problems; the demo world's own
	// problems are the meaningful "problems in general" here, as when its
	// comparison was measured.
	rl.LANPO.EmbeddingCentre = "batch"
	if pt > 0 {
		rl.LANPO.FeedbackRatio = pt
	}
	for _, arm := range arms {
		c := rl
		c.RunDir = filepath.Join(runDir, arm)
		switch arm {
		case ArmGRPO:
			c.Algo.Name = trainer.AlgoGRPO
		case ArmLANPO:
			c.Algo.Name = trainer.AlgoLANPO
		case ArmLANPOOriginal:
			c.Algo.Name = trainer.AlgoLANPO
			c.LANPO.TrainPrompt = "original"
		default:
			return d, fmt.Errorf("demo arm %q: want %s, %s or %s", arm, ArmGRPO, ArmLANPO, ArmLANPOOriginal)
		}
		c.Log.Rollouts = arm != ArmGRPO
		if err := c.Validate(); err != nil {
			return d, fmt.Errorf("demo arm %s: %w", arm, err)
		}
		d.arms[arm] = c
	}
	return d, nil
}

// stepDir is the checkpoint directory of a step of a run.
func stepDir(runDir string, step int) string {
	return filepath.Join(runDir, "checkpoints", fmt.Sprintf("step-%06d", step))
}

// DemoResults is RUN_DIR/demo_results.json: each stage's held-out accuracy
// by mode and level, the split sizes and how often feedback was available.
type DemoResults struct {
	Seed   int64                    `json:"seed"`
	Sizes  map[string]int           `json:"sizes"`
	Stages []StageResult            `json:"stages"`
	Usage  map[string]FeedbackUsage `json:"feedback_usage,omitempty"` // per LANPO arm
}

// StageResult is one model's held-out evaluation.
type StageResult struct {
	Stage string       `json:"stage"` // sft, grpo, lanpo, lanpo-original
	Modes []ModeResult `json:"modes"`
}

// ModeResult is one mode's accuracy per level.
type ModeResult struct {
	Mode    string          `json:"mode"`
	Levels  []LevelAccuracy `json:"levels"`
	Overall float64         `json:"overall"`
	Worked  int             `json:"worked"`
}

// LevelAccuracy is greedy accuracy on one difficulty level.
type LevelAccuracy struct {
	Level    int     `json:"level"`
	N        int     `json:"n"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
	Worked   int     `json:"worked"` // answers that show column steps (ShowsSteps)
}

// FeedbackUsage totals a LANPO arm's prompts by what they got.
type FeedbackUsage struct {
	Prompts       int `json:"prompts"`
	FeedbackAware int `json:"feedback_aware"`
	Reflection    int `json:"reflection"`
	Abstraction   int `json:"abstraction"`
	Fallback      int `json:"fallback"`
}

// RunDemo runs the embedded math world end to end: data, a small model
// from scratch, SFT, the RL arms, held-out evaluations and the report.
func RunDemo(ctx context.Context, o DemoOptions) error {
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
	res := DemoResults{Seed: o.Seed, Usage: map[string]FeedbackUsage{}, Sizes: map[string]int{
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
		if opts.Evaluate, err = TrainingEvaluator(cfg, true); err != nil {
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
	modes := []string{ModeZeroShot}
	if p != nil {
		modes = append(modes, ModeRetrieval, ModeSelfCorrect)
	}
	cfg.Data.SystemPrompt, cfg.Data.PromptTemplate = demoSystem, "{problem}"
	out := filepath.Join(runDir, "eval-"+stage)
	os.RemoveAll(out)
	if _, err := Run(m, tk, Options{Benchmarks: d.bench, Modes: modes, K: 1, Config: cfg, Pool: p, Out: out, Batch: 128,
		Sampling: model.SamplingParams{Temperature: 0, MaxNewTokens: demoMaxNew, Seed: 1}}); err != nil {
		return StageResult{}, err
	}
	lines, err := jsonl.Read[SampleLine](filepath.Join(out, SamplesFile))
	if err != nil {
		return StageResult{}, err
	}
	return stageResult(stage, modes, lines), nil
}

// stageResult tallies sample lines per mode and level (self-correct: the
// answers after reflection).
func stageResult(stage string, modes []string, lines []SampleLine) StageResult {
	r := StageResult{Stage: stage}
	for _, mode := range modes {
		mr := ModeResult{Mode: mode}
		byLevel := map[int]*LevelAccuracy{}
		for _, l := range lines {
			if l.Mode != mode || l.Stage == "first" {
				continue
			}
			var lv int
			fmt.Sscanf(l.Bench, "level%d", &lv)
			la := byLevel[lv]
			if la == nil {
				la = &LevelAccuracy{Level: lv}
				byLevel[lv] = la
			}
			la.N++
			if l.Correct {
				la.Correct++
			}
			if ShowsSteps(l.Response) {
				la.Worked++
			}
		}
		total, correct := 0, 0
		for lv := 1; lv <= MaxLevel; lv++ {
			if la := byLevel[lv]; la != nil {
				la.Accuracy = float64(la.Correct) / float64(la.N)
				mr.Levels = append(mr.Levels, *la)
				total += la.N
				correct += la.Correct
				mr.Worked += la.Worked
			}
		}
		if total > 0 {
			mr.Overall = float64(correct) / float64(total)
		}
		r.Modes = append(r.Modes, mr)
	}
	return r
}

// feedbackUsage totals a LANPO run's prompt counters from metrics.jsonl.
func feedbackUsage(runDir string) FeedbackUsage {
	var u FeedbackUsage
	rows, err := readMetrics(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		return u
	}
	num := func(r map[string]any, k string) int { v, _ := r[k].(float64); return int(v) }
	for _, r := range rows {
		u.Prompts += num(r, "lanpo_prompts")
		u.FeedbackAware += num(r, "lanpo_feedback_aware")
		u.Reflection += num(r, "lanpo_reflection")
		u.Abstraction += num(r, "lanpo_abstraction")
		u.Fallback += num(r, "lanpo_fallback_no_material") + num(r, "lanpo_fallback_not_relevant") + num(r, "lanpo_fallback_too_long")
	}
	return u
}
