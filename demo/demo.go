package demo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

// The demo: a small model learns a world by SFT (answers, and LANPO's
// skills written by the world as teacher), then RL arms start from the same
// SFT checkpoint with the same seeds and rollout budget — GRPO and the
// LANPO variants — and each is evaluated on the same held-out problems:
// greedy zero-shot for all, and for LANPO also retrieval-augmented (its
// own pool) and self-corrective. Worlds: world.go; what each is for:
// docs/demo.md.

// Options choose the demo's world, size and arms.
type Options struct {
	RunDir string
	World  string // WorldNames (default transfer)
	Seed   int64
	Fast   bool     // ≤ 2 minutes: fewer steps, for tests
	Arms   []string // RL arms (default: DefaultArms)
	PT     float64  // lanpo.feedback_ratio of the LANPO arms (0: the default 0.75)
	SFT    string   // an SFT checkpoint to start the arms from instead of training one
	// RLSeeds runs every arm with RL seeds 1..RLSeeds from the one SFT
	// model (0 or 1: RL seed 1 alone): seed 1 in RunDir, seed r in
	// RunDir/rl-r. RL seed 1 is the world seed, as in a run without it;
	// RL seed r > 1 is the trainer seed Seed·1000 + r (rlSeed).
	RLSeeds int
	// Set overrides config keys of the LANPO arms ("lanpo.lesson_order=outcome").
	Set []string
	// ModelSize is the built-in model trained from scratch: small (""; ≈ 0.8 M
	// parameters), medium (≈ 10×) or large (≈ 100×; for a GPU).
	ModelSize string
	// SFTLessons makes the rule worlds' SFT also teach solving with lessons
	// shown (lanpo.context: lessons); on by itself when Set asks for that
	// context and the SFT is trained here.
	SFTLessons bool
	// BudgetSteps is the grpo-budget arm's steps (0: 2× the other arms').
	BudgetSteps int
	rlSeed      int       // which RL seed this run is (0: 1)
	Force       bool      // replace RunDir even if it is not an earlier demo run
	Log         io.Writer // where the stage lines go
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
	ArmGRPO             = "grpo"
	ArmLANPO            = "lanpo"             // train_prompt: sampled
	ArmLANPOOriginal    = "lanpo-original"    // train_prompt: original, truncated importance weights
	ArmLANPOConsolidate = "lanpo-consolidate" // sampled, plus lanpo.consolidate
	// ArmOracle is the oracle bound of the rule worlds: consolidation with
	// the family's true rule as the plan, once RL has found it (oracle.go).
	ArmOracle = "lanpo-oracle"
	// ArmGRPOBudget is GRPO given more steps (Options.BudgetSteps): the
	// LANPO arms' token budget, measured.
	ArmGRPOBudget = "grpo-budget"
	// ArmGRPOLoRA is GRPO with LoRA adapters on the frozen SFT model, the
	// same steps as GRPO (LoRARank, LoRALRScale).
	ArmGRPOLoRA = "grpo-lora"
	// ArmSDPO and ArmCritique are the other language-feedback methods
	// (docs/feedback-methods.md) at their defaults, the same steps as GRPO.
	ArmSDPO     = "sdpo"
	ArmCritique = "critique-grpo"
	// ArmGSPO and ArmCISPO are GRPO with another policy loss
	// (algo.policy_loss gspo or cispo at its own clip range), the same
	// steps as GRPO; opt-in.
	ArmGSPO  = "grpo-gspo"
	ArmCISPO = "grpo-cispo"
)

// The grpo-lora arm's adapters: rank 16 with alpha 32 on all seven
// projections, at LoRALRScale times GRPO's learning rate (LoRA's updates
// live in a small subspace and are commonly run at about ten times full
// fine-tuning's rate); --set lora.… and optim.lr=… change them.
const (
	LoRARank    = 16
	LoRAAlpha   = 32
	LoRALRScale = 10
)

// Arms lists the arms --compare runs; DefaultArms those a plain lanpo demo
// runs in the transfer world (the oracle only there: DefaultArmsOf).
var (
	Arms        = []string{ArmGRPO, ArmLANPO, ArmLANPOOriginal, ArmLANPOConsolidate}
	DefaultArms = []string{ArmGRPO, ArmLANPOConsolidate, ArmOracle}
	// AllArms are every arm --arms accepts.
	AllArms = append(append([]string{}, Arms...), ArmOracle, ArmGRPOBudget, ArmGRPOLoRA, ArmSDPO, ArmCritique, ArmGSPO, ArmCISPO)
)

// DefaultArmsOf are a world's default arms: DefaultArms, less the oracle
// outside the transfer world.
func DefaultArmsOf(world string) []string {
	if world == WorldTransfer {
		return DefaultArms
	}
	var out []string
	for _, a := range DefaultArms {
		if a != ArmOracle {
			out = append(out, a)
		}
	}
	return out
}

// ModelSizes are the built-in models the demo trains (--model-size).
var ModelSizes = []string{"small", "medium", "large"}

// rlSeed is the trainer seed of RL seed r of a world seed: the world seed
// itself for r ≤ 1 (a run without --rl-seeds), Seed·1000 + r otherwise.
func rlSeed(seed int64, r int) uint64 {
	if r <= 1 {
		return uint64(seed)
	}
	return uint64(seed*1000 + int64(r))
}

// ConsolidateLambda is lanpo.consolidate (λ) of the consolidation and
// oracle arms: 4, chosen by #55's dose experiment (docs/demo.md, "LANPO's
// update") over λ 0.25 and 1 and over consolidation in a step of its own —
// with the policy's gradient sharing Adam's moments, λ sets
// consolidation's share of each step, and 0.25 (the fair test's) left the
// oracle at the SFT model's score for 50 steps.
const ConsolidateLambda = 4

// demoSystem is the system prompt of every demo conversation.
const demoSystem = "Answer with \\boxed{}."

// Run runs a demo world end to end: data, a small model from scratch, SFT,
// the RL arms, held-out evaluations and the report.
func Run(ctx context.Context, o Options) error {
	start := time.Now()
	if o.World == "" {
		o.World = WorldTransfer
	}
	w, err := worldOf(o.World)
	if err != nil {
		return err
	}
	p := plan(o.World, o.Fast)
	if len(o.Arms) == 0 {
		o.Arms = DefaultArmsOf(o.World)
	}
	fmt.Fprintf(o.Log, "demo: %s world, arms %v, run directory %s\n", o.World, o.Arms, o.RunDir)
	if o.BudgetSteps > 0 {
		p.budgetSteps = o.BudgetSteps
	}
	if o.ModelSize == "" {
		o.ModelSize = "small"
	}
	if !slices.Contains(ModelSizes, o.ModelSize) {
		return fmt.Errorf("demo model size %q: want %s", o.ModelSize, strings.Join(ModelSizes, ", "))
	}
	p.modelSize = o.ModelSize
	p.sftLessons = o.SFTLessons
	if err := claimRunDir(o.RunDir, o.Seed, o.Fast, o.Force); err != nil {
		return err
	}
	d, err := prepare(o.RunDir, o.World, w, o.Seed, max(o.rlSeed, 1), p, o.Arms, o.PT, o.SFT, o.Set)
	if err != nil {
		return err
	}
	res := Results{World: o.World, Seed: o.Seed, RLSeed: max(o.rlSeed, 1), Set: o.Set, ModelSize: o.ModelSize, Usage: map[string]FeedbackUsage{}, Sizes: map[string]int{
		"heldout": len(d.split.heldOut), "rl_distinct": len(d.split.rl), "sft_distinct": len(d.split.sft), "sft_answers": len(d.split.sftAnswers),
		"rl_prompt_draws": p.rlSteps * 16, "sft_examples": d.sftExamples, "families": len(d.split.families), "rules_k": p.rulesK}}
	sftModel := stepDir(d.sft.RunDir, d.sft.TotalSteps)
	if o.SFT == "" {
		fmt.Fprintf(o.Log, "demo: stage 1: SFT, %d steps (%d examples)\n", d.sft.TotalSteps, d.sftExamples)
		if err := trainer.RunSFT(ctx, d.sft, "", trainer.RunOptions{Progress: o.Progress}); err != nil {
			return fmt.Errorf("demo SFT: %w", err)
		}
	} else {
		sftModel = o.SFT
	}
	digest, err := weightsDigest(sftModel)
	if err != nil {
		return fmt.Errorf("demo: the SFT checkpoint: %w", err)
	}
	res.Pairing = &Pairing{SFTDigest: digest, ModelSize: o.ModelSize, Fast: o.Fast}
	after, err := d.evaluate(o.RunDir, "sft", sftModel, d.bench, trainer.DefaultConfig(), nil)
	if err != nil {
		return err
	}
	res.Stages = append(res.Stages, after)
	fmt.Fprintf(o.Log, "demo: held-out accuracy after SFT: %.3f\n", after.Modes[0].Overall)
	if len(d.benchTold) > 0 {
		told, err := d.evaluate(o.RunDir, stageTold, sftModel, d.benchTold, trainer.DefaultConfig(), nil)
		if err != nil {
			return err
		}
		res.Stages = append(res.Stages, told)
		fmt.Fprintf(o.Log, "demo: held-out accuracy after SFT with the rule told (the ceiling): %.3f\n", told.Modes[0].Overall)
	}
	finals := map[string]string{}    // each arm's final checkpoint
	pools := map[string]*pool.Pool{} // each LANPO arm's final pool (not the oracle's)
	var oracleFound *ruleOracle
	for _, arm := range o.Arms {
		cfg := d.arms[arm]
		fmt.Fprintf(o.Log, "demo: stage 2: %s, %d steps\n", arm, cfg.TotalSteps)
		opts := trainer.RunOptions{Progress: o.Progress, Span: d.span}
		if opts.Evaluate, err = trainer.TrainingEvaluator(cfg, true); err != nil {
			return err
		}
		var oracle *ruleOracle
		if arm == ArmOracle {
			oracle = newRuleOracle(d.split)
			opts.Oracle = oracle
		}
		armStart := time.Now()
		if err := trainer.RunGRPO(ctx, cfg, "", opts); err != nil {
			return fmt.Errorf("demo %s: %w", arm, err)
		}
		res.Seconds = append(res.Seconds, ArmSeconds{Arm: arm, Seconds: time.Since(armStart).Seconds()})
		final := stepDir(cfg.RunDir, cfg.TotalSteps)
		var p *pool.Pool
		if cfg.Algo.Name == trainer.AlgoLANPO {
			if p, err = pool.Load(filepath.Join(final, pool.File), cfg.LANPO.PoolConfig()); err != nil {
				return err
			}
			res.Usage[arm] = feedbackUsage(cfg.RunDir)
		}
		if oracle != nil {
			p = nil // the oracle's retrieval is its found rules (evaluateOracle), not the pool
			oracleFound = oracle
		}
		finals[arm] = final
		if p != nil {
			pools[arm] = p
		}
		r, err := d.evaluate(o.RunDir, arm, final, d.bench, cfg, p)
		if err != nil {
			return err
		}
		if oracle != nil {
			if r, err = d.evaluateOracle(o.RunDir, r, final, cfg, oracle); err != nil {
				return err
			}
		}
		res.Stages = append(res.Stages, r)
		for _, m := range r.Modes {
			fmt.Fprintf(o.Log, "demo: held-out accuracy after %s, %s: %.3f (after SFT %.3f)\n", arm, m.Mode, m.Overall, after.Modes[0].Overall)
		}
	}
	if isRules(o.World) {
		fmt.Fprintf(o.Log, "demo: retrieval controls (the SFT model and GRPO's with each pool, GRPO's own pool)\n")
		if res.Controls, err = d.retrievalControls(o.RunDir, o.Arms, sftModel, finals, pools, oracleFound); err != nil {
			return err
		}
		for _, c := range res.Controls {
			fmt.Fprintf(o.Log, "demo: held-out accuracy with retrieval, %s's model with %s: %.3f\n", c.Model, c.Pool, c.Retrieval.Overall)
		}
	}
	// WriteReport adds the rule worlds' analysis to demo_results.json.
	js, _ := json.MarshalIndent(res, "", " ")
	if err := fsutil.WriteFileSync(filepath.Join(o.RunDir, "demo_results.json"), append(js, '\n')); err != nil {
		return err
	}
	if err := WriteReport(o.RunDir); err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "demo: report %s; elapsed %s\n", filepath.Join(o.RunDir, "report.html"), time.Since(start).Round(time.Second))
	for r := max(o.rlSeed, 1) + 1; o.rlSeed == 0 && r <= o.RLSeeds; r++ {
		sub := o
		sub.RunDir, sub.SFT, sub.rlSeed, sub.Force = filepath.Join(o.RunDir, fmt.Sprintf("rl-%d", r)), sftModel, r, false
		fmt.Fprintf(o.Log, "demo: RL seed %d of %d, from the same SFT model\n", r, o.RLSeeds)
		if err := Run(ctx, sub); err != nil {
			return fmt.Errorf("RL seed %d: %w", r, err)
		}
	}
	return nil
}

// retrievalControls say which part of a LANPO arm's gain with retrieval
// belongs to its pool and which to its training (docs/demo.md): the SFT
// model and GRPO's final model, each with every LANPO arm's final pool;
// GRPO's model with a pool made the same way from GRPO's own rollouts,
// summarized by GRPO's final model (trainer.BuildPool, as lanpo pool build
// does; written to RUN/grpo/pool-own.jsonl); and the SFT model with the
// oracle's plans for the families the oracle found.
func (d demoRun) retrievalControls(runDir string, arms []string, sftModel string, finals map[string]string, pools map[string]*pool.Pool, oracle *ruleOracle) ([]RetrievalControl, error) {
	var out []RetrievalControl
	add := func(model, modelDir, poolName, summarizer, arm string, p *pool.Pool) error {
		r, err := d.evaluateModes(runDir, "control-"+model+"-"+poolName, modelDir, d.bench, d.arms[arm], p, []string{eval.ModeRetrieval})
		if err != nil {
			return fmt.Errorf("retrieval control (%s with %s): %w", model, poolName, err)
		}
		out = append(out, RetrievalControl{Model: model, Pool: poolName, Summarizer: summarizer, Retrieval: r.Modes[0]})
		return nil
	}
	grpo, hasGRPO := finals[ArmGRPO]
	for _, arm := range arms {
		p, ok := pools[arm]
		if !ok {
			continue
		}
		if err := add("sft", sftModel, arm, "", arm, p); err != nil {
			return nil, err
		}
		if hasGRPO {
			if err := add(ArmGRPO, grpo, arm, "", arm, p); err != nil {
				return nil, err
			}
		}
	}
	if cfg := d.arms[ArmGRPO]; hasGRPO && cfg.Log.Rollouts {
		own, err := trainer.BuildPool(cfg, grpo, filepath.Join(cfg.RunDir, "rollouts"))
		if err != nil {
			return nil, fmt.Errorf("GRPO's own pool: %w", err)
		}
		if err := trainer.WritePool(own, filepath.Join(cfg.RunDir, "pool-own.jsonl")); err != nil {
			return nil, err
		}
		if err := add(ArmGRPO, grpo, "grpo-own", ArmGRPO, ArmGRPO, own); err != nil {
			return nil, err
		}
	}
	if oracle != nil {
		r, err := d.evaluateOracle(runDir, StageResult{Stage: "control-sft"}, sftModel, d.arms[ArmOracle], oracle)
		if err != nil {
			return nil, err
		}
		out = append(out, RetrievalControl{Model: "sft", Pool: ArmOracle, Retrieval: *r.mode(eval.ModeRetrieval)})
	}
	return out, nil
}

// stageTold is the SFT model's evaluation with each problem's rule told in
// the prompt, as a plan: the rule worlds' ceiling.
const stageTold = "sft-told"

// evaluate measures greedy held-out accuracy per level of a checkpoint:
// zero-shot, and with a pool also retrieval-augmented and self-corrective,
// through the same evaluation as lanpo eval (results in RUN/eval-STAGE/).
func (d demoRun) evaluate(runDir, stage, dir string, bench []eval.Benchmark, cfg trainer.Config, p *pool.Pool) (StageResult, error) {
	modes := []string{eval.ModeZeroShot}
	if p != nil {
		modes = append(modes, eval.ModeRetrieval, eval.ModeSelfCorrect)
	}
	return d.evaluateModes(runDir, stage, dir, bench, cfg, p, modes)
}

// evaluateModes is evaluate in the given modes.
func (d demoRun) evaluateModes(runDir, stage, dir string, bench []eval.Benchmark, cfg trainer.Config, p *pool.Pool, modes []string) (StageResult, error) {
	runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
	defer runtime.UnlockOSThread()
	m, err := model.LoadWithAdapter(dir, "", model.LoadOptions{}) // a grpo-lora checkpoint: the adapter on its base
	if err != nil {
		return StageResult{}, err
	}
	defer m.Close()
	tk, err := tokenizer.Load(dir)
	if err != nil {
		return StageResult{}, err
	}
	cfg.Data.SystemPrompt, cfg.Data.PromptTemplate = demoSystem, "{problem}"
	if err := cfg.Resolve(); err != nil {
		return StageResult{}, fmt.Errorf("demo %s evaluation: %w", stage, err)
	}
	out := filepath.Join(runDir, "eval-"+stage)
	os.RemoveAll(out)
	if _, err := eval.Run(m, tk, eval.Options{Benchmarks: bench, Modes: modes, K: 1, Feedback: cfg.FeedbackSettings(), Pool: p, Out: out, Batch: 128,
		ReferenceNLL: true, ReferenceSpan: d.span,
		Sampling: model.SamplingParams{Temperature: 0, MaxNewTokens: d.maxNew, Seed: 1}}); err != nil {
		return StageResult{}, err
	}
	lines, err := jsonl.Read[eval.SampleLine](filepath.Join(out, eval.SamplesFile))
	if err != nil {
		return StageResult{}, err
	}
	return stageResult(stage, modes, d.groups, lines), nil
}

// weightsDigest is the first 16 hex digits of the SHA-256 of a checkpoint's
// weights (model.safetensors): what identifies the SFT model the arms of a
// run started from (Pairing).
func weightsDigest(dir string) (string, error) {
	f, err := os.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
