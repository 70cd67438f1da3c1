package demo

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/seed"
	"github.com/lanpo-rl/lanpo/trainer"
)

// demoRun is one demo's data and stage configurations.
type demoRun struct {
	split demoSplit
	sft   trainer.Config
	arms  map[string]trainer.Config
	bench []eval.Benchmark // held out, one benchmark per level
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

	base := baseConfig(runSeed, promptsPath)
	if err := d.writeData(dataDir, base, runSeed, p); err != nil {
		return d, err
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

// baseConfig is what every stage of the demo shares.
func baseConfig(runSeed int64, promptsPath string) trainer.Config {
	base := trainer.DefaultConfig()
	base.Model = "builtin:small"
	base.Seed = uint64(runSeed)
	base.Data.SystemPrompt = demoSystem
	base.Data.PromptTemplate = "{problem}"
	base.Checkpoint = trainer.CheckpointConfig{Every: 0, Keep: 1}
	base.LANPO.Prompts = promptsPath
	return base
}

// writeData writes the demo's data files into dataDir — the SFT chats
// (answers in two forms, and the world's skill examples, shuffled), the
// RL problems, the held-out problems whole and per level — and loads the
// per-level held-out benchmarks.
func (d *demoRun) writeData(dataDir string, base trainer.Config, runSeed int64, p demoPlan) error {
	// SFT data: answers in two forms, and the world's skill examples.
	b, err := seed.NewBuilder(base, nil)
	if err != nil {
		return err
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
			return err
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
			return err
		}
		bench, err := eval.LoadBenchmark(fmt.Sprintf("level%d", lv), path, 0)
		if err != nil {
			return err
		}
		d.bench = append(d.bench, bench)
	}
	return nil
}

// stepDir is the checkpoint directory of a step of a run.
func stepDir(runDir string, step int) string {
	return filepath.Join(runDir, "checkpoints", fmt.Sprintf("step-%06d", step))
}
