package demo

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/seed"
	"github.com/lanpo-rl/lanpo/trainer"
)

// demoRun is one demo's data and stage configurations.
type demoRun struct {
	split       demoSplit
	sft         trainer.Config
	arms        map[string]trainer.Config
	groups      []string         // the held-out benchmarks' names
	bench       []eval.Benchmark // held out, one benchmark per group (level or family)
	benchTold   []eval.Benchmark // rule worlds: the same problems with the rule told as a plan
	maxNew      int
	sftExamples int
	span        rl.Span // the rule worlds' diagnostic span: the rule an answer names (nil elsewhere)
}

// prepare writes the demo's data under runDir and returns the SFT and RL
// configurations.
func prepare(runDir, worldName string, w world, runSeed int64, rlSeedIndex int, p demoPlan, arms []string, pt float64, sftFrom string, sets []string) (demoRun, error) {
	dataDir := filepath.Join(runDir, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return demoRun{}, err
	}
	d := demoRun{split: w.split(runSeed, p), arms: map[string]trainer.Config{}, maxNew: p.maxNew}
	d.groups = w.groups(d.split)
	if isRules(worldName) {
		d.span = ruleNamed
	}
	promptsPath := filepath.Join(dataDir, "prompts.yaml")
	if err := os.WriteFile(promptsPath, []byte(demoPrompts), 0o644); err != nil {
		return d, err
	}

	base := baseConfig(runSeed, promptsPath)
	// The SFT teaches the lessons context when an arm's --set asks for it
	// (however spelled: read from the config the overrides make).
	if len(sets) > 0 {
		c, err := trainer.WithSets(base, sets)
		if err != nil {
			return d, fmt.Errorf("demo --set: %w", err)
		}
		p.sftLessons = p.sftLessons || c.LANPO.GivesLessons()
	}
	if p.modelSize != "" {
		base.Model = "builtin:" + p.modelSize
	}
	if err := d.writeData(dataDir, worldName, w, base, runSeed, p); err != nil {
		return d, err
	}

	// Stage 1: SFT from scratch.
	sft := base
	sft.RunDir = filepath.Join(runDir, "sft")
	sft.TotalSteps = p.sftSteps
	sft.Data.Train = filepath.Join(dataDir, "sft.jsonl")
	// Arithmetic: skill examples are ≈ 160-220 tokens, answers ≈ 70-120;
	// packing by length keeps short ones from paying for the long ones'
	// padding. Rule worlds: ≈ 60-130.
	sft.SFT = trainer.SFTConfig{MaxLen: 224, MicroBatchSize: 32, GradAccum: 1, MaxTokensPerMicroBatch: 2048}
	sft.Optim = trainer.OptimConfig{LR: 3e-3, Schedule: "cosine", WarmupSteps: 50, MinLRRatio: 0.1, Beta1: 0.9, Beta2: 0.98, Eps: 1e-8, GradClip: 1}
	d.sft = sft

	// Stage 2: the RL arms from the SFT checkpoint, same seeds and budget.
	rl := base
	rl.Seed = rlSeed(runSeed, rlSeedIndex)
	rl.Model = stepDir(sft.RunDir, sft.TotalSteps)
	if sftFrom != "" {
		rl.Model = sftFrom
	}
	rl.TotalSteps = p.rlSteps
	rl.Data.Train = filepath.Join(dataDir, "rl.jsonl")
	rl.Rollout = trainer.RolloutConfig{PromptsPerStep: 16, SamplesPerPrompt: 8, Temperature: 1, TopP: 1, MaxNewTokens: p.maxNew}
	rl.Algo.MicroBatchSize = 64
	rl.Algo.MaxTokensPerMicroBatch = 6144
	rl.Algo.LossAggMode = trainer.AggTokenMean
	rl.Optim = trainer.OptimConfig{LR: p.rlLR, Schedule: "constant", Beta1: 0.9, Beta2: 0.98, Eps: 1e-8, GradClip: 1}
	rl.Eval = trainer.EvalConfig{Every: p.evalEvery, K: 1, TopP: 1, MaxNewTokens: p.maxNew, BatchSize: 64, Seed: 1}
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
	if isRules(worldName) {
		// BM25 scores a query by its words, not its operands (pool/bm25.go),
		// so another family's problem shares no term with the query and a
		// same-family one scores as the query itself: γ 0.9 on BM25's own
		// normalized scale (as the paper's γ, a raw similarity) keeps a
		// family's problems and nothing else — the quantile scale suits
		// continuous scorers, not one whose scores are 0 or 1 here. The
		// filter's purity is in every report (docs/demo.md). A shown attempt is a
		// failed one (its rule is ruled out; the world's teacher writes redos
		// that try another rule). Two summaries per group (lanpo's default;
		// drawn without looking at outcomes) give a found rule two chances
		// to enter the pool.
		rl.LANPO.Similarity, rl.LANPO.SimilarityScale, rl.LANPO.SimilarityThreshold = "bm25", "raw", 0.9
		rl.LANPO.RelevanceFloor = nil // bm25's calibrated floor (0.7), below γ here
		rl.LANPO.ReflectOn = "failed"
		// Lessons come newest first and most are failed attempts' ("zorp is
		// not ba."): two related problems with two lessons each give a found
		// rule more than one chance to reach the condenser (maxLessons).
		rl.LANPO.SummariesPerGroup, rl.LANPO.MaxRelatedProblems, rl.LANPO.LessonsPerProblem, rl.LANPO.MaxContextTokens = 2, ruleRelated, ruleLessons, 320
		// The fair test's screen chose outcome order, with plans (docs/
		// benchmarks.md, "The fair test"): a related problem's solved lesson
		// first.
		rl.LANPO.LessonOrder = "outcome"
		rl.Log.Rollouts = true
		// What the update does with a found rule, measured (docs/metrics.md):
		// consolidation's rows before and after each optimizer step and the
		// gradients apart, and at every evaluation the bare prompt's NLL of
		// the held-out problems' canonical answers.
		rl.Log.UpdateDiagnostics = true
	}
	rl.Eval.ReferenceNLL = true
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
		case ArmLANPOConsolidate:
			c.Algo.Name = trainer.AlgoLANPO
			c.LANPO.Consolidate = ConsolidateLambda
		case ArmOracle:
			if !isRules(worldName) || worldName == WorldControl {
				return d, fmt.Errorf("demo arm %s: only in the transfer world (a family there has one rule to know)", arm)
			}
			// As the consolidation arm, every plan from the oracle; no
			// reflection, so every feedback-aware prompt is a plan prompt.
			c.Algo.Name = trainer.AlgoLANPO
			c.LANPO.Consolidate = ConsolidateLambda
			zero := 0.0
			c.LANPO.Modes.Reflection = &zero
		case ArmGRPOBudget:
			c.Algo.Name = trainer.AlgoGRPO
			c.TotalSteps = p.budgetSteps
			if c.TotalSteps == 0 {
				c.TotalSteps = 2 * p.rlSteps
			}
		case ArmGRPOLoRA:
			c.Algo.Name = trainer.AlgoGRPO
			c.LoRA = model.LoRAConfig{R: LoRARank, Alpha: LoRAAlpha}
			c.Optim.LR *= LoRALRScale
		case ArmSDPO:
			c.Algo.Name = trainer.AlgoSDPO
		case ArmCritique:
			c.Algo.Name = trainer.AlgoCritique
		case ArmGSPO, ArmCISPO:
			c.Algo.Name = trainer.AlgoGRPO
			c.Algo.PolicyLoss = map[string]string{ArmGSPO: trainer.LossGSPO, ArmCISPO: trainer.LossCISPO}[arm]
			c.Algo.ClipLow, c.Algo.ClipHigh = nil, nil // the loss's own range
		default:
			return d, fmt.Errorf("demo arm %q: want one of %s", arm, strings.Join(AllArms, ", "))
		}
		if (c.Algo.Name != trainer.AlgoGRPO || arm == ArmGRPOLoRA || arm == ArmGSPO || arm == ArmCISPO) && len(sets) > 0 {
			var err error
			if c, err = trainer.WithSets(c, sets); err != nil {
				return d, fmt.Errorf("demo --set: %w", err)
			}
		}
		c.Log.Rollouts = c.Log.Rollouts || arm != ArmGRPO
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
// (the world's answers and skill examples, shuffled), the RL problems, the
// held-out problems whole and per group (and, in the rule worlds, with the
// transfer world, with the rule told) — and loads the held-out benchmarks.
func (d *demoRun) writeData(dataDir, worldName string, w world, base trainer.Config, runSeed int64, p demoPlan) error {
	b, err := seed.NewBuilder(base, nil)
	if err != nil {
		return err
	}
	chats := w.sftChats(b, d.split, runSeed, p)
	d.sftExamples = len(chats)
	rng := rand.New(rand.NewSource(runSeed + 4000))
	rng.Shuffle(len(chats), func(i, j int) { chats[i], chats[j] = chats[j], chats[i] })
	if err := jsonl.WriteFile(filepath.Join(dataDir, "sft.jsonl"), chats); err != nil {
		return err
	}
	for name, rows := range map[string][]Item{"rl.jsonl": d.split.rl, "heldout.jsonl": d.split.heldOut} {
		if err := jsonl.WriteFile(filepath.Join(dataDir, name), rows); err != nil {
			return err
		}
	}
	prompts := b.Prompts()
	for i, name := range d.groups {
		var items, told []Item
		for _, it := range d.split.heldOut {
			if it.Level == i+1 {
				items = append(items, it)
				if worldName == WorldTransfer { // the control's problems carry their rule already
					told = append(told, withRuleTold(it, prompts))
				}
			}
		}
		for _, f := range []struct {
			dir   string
			items []Item
			into  *[]eval.Benchmark
		}{{"heldout", items, &d.bench}, {"heldout-told", told, &d.benchTold}} {
			if len(f.items) == 0 {
				continue
			}
			bench, err := writeBenchmark(filepath.Join(dataDir, f.dir), name, f.items)
			if err != nil {
				return err
			}
			*f.into = append(*f.into, bench)
		}
	}
	return nil
}

// withRuleTold is a rule-world problem with its family's rule given as
// the plan (the ceiling's and the oracle's held-out prompts).
func withRuleTold(it Item, prompts pool.Prompts) Item {
	it.Problem = pool.WithContext(it.Problem, prompts.AbstractionContext(ruleStatement(it.Family, it.Rule)))
	return it
}

// writeBenchmark writes a held-out group's items to DIR/NAME.jsonl and
// loads it as benchmark NAME.
func writeBenchmark(dir, name string, items []Item) (eval.Benchmark, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return eval.Benchmark{}, err
	}
	path := filepath.Join(dir, name+".jsonl")
	if err := jsonl.WriteFile(path, items); err != nil {
		return eval.Benchmark{}, err
	}
	return eval.LoadBenchmark(name, path, 0)
}

// stepDir is the checkpoint directory of a step of a run.
func stepDir(runDir string, step int) string {
	return filepath.Join(runDir, "checkpoints", fmt.Sprintf("step-%06d", step))
}
