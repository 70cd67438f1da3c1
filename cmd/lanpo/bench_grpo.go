package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sugarme/gotch"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/plan"
	"github.com/lanpo-rl/lanpo/trainer"
)

func benchGRPOStepCommand() *cli.Command {
	return &cli.Command{
		Name:  "grpo-step",
		Usage: "GRPO steps of a random-weight model of a real shape: seconds per phase, and peak memory against lanpo plan",
		Description: "Writes a random-weight model of --shape (0.5b: Qwen2.5-0.5B, 7b, or a config.json; --layers cuts\n" +
			"layers) with lanpo's byte-level tokenizer, and --prompts arithmetic problems, and runs --steps GRPO\n" +
			"steps through the trainer (--prompts × --samples rollouts of --new-tokens tokens at most, the update\n" +
			"in micro-batches of --micro-tokens tokens, β = 0). The model's random text earns no reward, so the\n" +
			"update's gradient is zero: the timing is the point. It prints the last step's seconds per phase (as\n" +
			"the trainer records them in metrics.jsonl: rollout, score, update, …; on CUDA every phase boundary\n" +
			"waits for the GPU) with each phase's share of the step — the baseline the phases are compared with\n" +
			"— and the peak memory of the whole run (CUDA caching allocator, or peak RSS on CPU) against\n" +
			"`lanpo plan`'s peak for the same shape and settings.\n" +
			"\n" +
			"--json prints one object: shape, device, dtype, params, steps, rows, new_tokens, step_s, phases\n" +
			"({phase: seconds} of the last step), phase_share ({phase: share of step_s}), tokens_per_s,\n" +
			"tokens_generated, peak_mb, peak_source, plan_peak_mb, peak_over_plan, first_step_s; with --lora-r also\n" +
			"lora (the same fields for the LoRA run), lora_over_full_step_s and lora_over_full_peak.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "shape", Value: "0.5b", Usage: "0.5b, 7b, or a config.json (or a directory holding one)"},
			&cli.Int64Flag{Name: "layers", Usage: "fewer layers for a quick run (0: the shape's)"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu or cuda[:N]"},
			&cli.StringFlag{Name: "dtype", Usage: "float32 or bfloat16 (default float32 on CPU, bfloat16 on CUDA)"},
			&cli.IntFlag{Name: "prompts", Value: 16, Usage: "prompts per step"},
			&cli.IntFlag{Name: "samples", Value: 8, Usage: "samples per prompt (G)"},
			&cli.IntFlag{Name: "new-tokens", Value: 256, Usage: "max new tokens per sample"},
			&cli.IntFlag{Name: "micro-tokens", Value: 16384, Usage: "tokens per update micro-batch"},
			&cli.IntFlag{Name: "steps", Value: 2, Usage: "steps to run; the last is reported (the first also warms up)"},
			&cli.BoolFlag{Name: "activation-checkpointing"},
			&cli.IntFlag{Name: "lora-r", Usage: "also run the steps with LoRA of this rank (lora.r, all seven projections) and print its step time and peak memory against full fine-tuning's, measured first in the same process"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		},
		Action: runBenchGRPOStep,
	}
}

// grpoStepBench is what `lanpo bench grpo-step --json` prints.
type grpoStepBench struct {
	Shape        string             `json:"shape"`
	Device       string             `json:"device"`
	DType        string             `json:"dtype"`
	Params       int64              `json:"params"`
	Steps        int                `json:"steps"`
	Rows         int                `json:"rows"`
	NewTokens    int                `json:"new_tokens"`
	StepS        float64            `json:"step_s"`
	FirstStepS   float64            `json:"first_step_s"`
	Phases       map[string]float64 `json:"phases"`
	PhaseShare   map[string]float64 `json:"phase_share"`
	TokensPerS   float64            `json:"tokens_per_s"`
	GenTokens    float64            `json:"tokens_generated"`
	PeakMB       float64            `json:"peak_mb"`
	PeakSource   string             `json:"peak_source"`
	PlanPeakMB   float64            `json:"plan_peak_mb"`
	PeakOverPlan float64            `json:"peak_over_plan"`
	LoRARank     int                `json:"lora_r,omitempty"`
	// With --lora-r: the LoRA run, and its ratios to this (full) one.
	LoRA          *grpoStepBench `json:"lora,omitempty"`
	LoRAStepRatio float64        `json:"lora_over_full_step_s,omitempty"`
	LoRAPeakRatio float64        `json:"lora_over_full_peak,omitempty"`
}

func runBenchGRPOStep(c *cli.Context) error {
	dev, dt, err := benchDevice(c)
	if err != nil {
		return err
	}
	cfg, err := benchShape(c)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "lanpo-bench-grpo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	modelDir, data := filepath.Join(dir, "model"), filepath.Join(dir, "problems.jsonl")
	if err := trainer.WriteRandomModel(modelDir, cfg, dt, 1); err != nil {
		return err
	}
	if err := writeArithmetic(data, 4*c.Int("prompts"), 1); err != nil {
		return err
	}
	if c.Int("lora-r") > 0 {
		// Two runs in one process: the host allocator must give the first
		// one's memory back for the second's peak to be its own.
		csrc.MeasureHostMemory()
	}
	r, err := benchGRPORun(c, cfg, dt, dev, modelDir, data, filepath.Join(dir, "full"), 0)
	if err != nil {
		return err
	}
	if rank := c.Int("lora-r"); rank > 0 {
		lr, err := benchGRPORun(c, cfg, dt, dev, modelDir, data, filepath.Join(dir, "lora"), rank)
		if err != nil {
			return err
		}
		r.LoRA, r.LoRAStepRatio, r.LoRAPeakRatio = &lr, lr.StepS/r.StepS, lr.PeakMB/r.PeakMB
	}
	steps := r.Steps
	w := c.App.Writer
	if c.Bool("json") {
		return json.NewEncoder(w).Encode(r)
	}
	fmt.Fprintf(w, "grpo-step: %s shape (%.2f B parameters), %s %s, %d prompts × %d samples, ≤ %d new tokens; step %d of %d\n",
		r.Shape, float64(r.Params)/1e9, r.Device, r.DType, c.Int("prompts"), c.Int("samples"), r.NewTokens, steps, steps)
	var names []string
	for k := range r.Phases {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return r.Phases[names[i]] > r.Phases[names[j]] })
	for _, k := range names {
		fmt.Fprintf(w, "  %-24s %8.3f s  %5.1f%%\n", k, r.Phases[k], 100*r.PhaseShare[k])
	}
	fmt.Fprintf(w, "  step                     %8.3f s (first step %.3f s), %.0f tokens/s, %.0f tokens generated\n", r.StepS, r.FirstStepS, r.TokensPerS, r.GenTokens)
	fmt.Fprintf(w, "  peak memory %.0f MiB (%s); lanpo plan %.0f MiB; measured/plan %.2f\n", r.PeakMB, r.PeakSource, r.PlanPeakMB, r.PeakOverPlan)
	if l := r.LoRA; l != nil {
		fmt.Fprintf(w, "  LoRA r %d: step %.3f s (update %.3f s), peak %.0f MiB; lanpo plan %.0f MiB\n", l.LoRARank, l.StepS, l.Phases["update"], l.PeakMB, l.PlanPeakMB)
		fmt.Fprintf(w, "  LoRA/full: step time %.2f, update %.2f, peak memory %.2f\n", r.LoRAStepRatio, l.Phases["update"]/r.Phases["update"], r.LoRAPeakRatio)
	}
	return nil
}

// benchGRPORun runs the benchmark's GRPO steps in runDir (LoRA of rank
// rank; 0: full fine-tuning) and measures them.
func benchGRPORun(c *cli.Context, cfg *model.Config, dt gotch.DType, dev gotch.Device, modelDir, data, runDir string, rank int) (grpoStepBench, error) {
	steps := max(1, c.Int("steps"))
	lora := ""
	if rank > 0 {
		lora = fmt.Sprintf("lora:\n  r: %d\n", rank)
	}
	yaml := fmt.Sprintf(`run_dir: %s
model: %s
device: %s
dtype: %s
seed: 1
total_steps: %d
data:
  train: %s
  system_prompt: "Answer with \\boxed{}."
rollout:
  prompts_per_step: %d
  samples_per_prompt: %d
  temperature: 1.0
  max_new_tokens: %d
algo:
  kl_beta: 0.0
  max_tokens_per_micro_batch: %d
train:
  activation_checkpointing: %v
checkpoint:
  every: 0
%s`, runDir, modelDir, devString(dev), csrc.DTypeName(dt), steps, data, c.Int("prompts"), c.Int("samples"),
		c.Int("new-tokens"), c.Int("micro-tokens"), c.Bool("activation-checkpointing"), lora)
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return grpoStepBench{}, err
	}
	cfgPath := filepath.Join(runDir, "run.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		return grpoStepBench{}, err
	}
	run, err := trainer.LoadConfig(cfgPath, nil)
	if err != nil {
		return grpoStepBench{}, err
	}
	peak := csrc.NewPeakMeter(dev)
	if err := trainer.RunGRPO(context.Background(), run, "", trainer.RunOptions{NoFinalCheckpoint: true}); err != nil {
		return grpoStepBench{}, err
	}
	peakBytes, peakSrc := peak.Peak()
	lines, err := readMetricLines(filepath.Join(run.RunDir, "metrics.jsonl"))
	if err != nil {
		return grpoStepBench{}, err
	}
	if len(lines) != steps {
		return grpoStepBench{}, fmt.Errorf("bench grpo-step: %d metric lines for %d steps", len(lines), steps)
	}
	last := lines[len(lines)-1]
	r := grpoStepBench{Shape: c.String("shape"), Device: devString(dev), DType: csrc.DTypeName(dt), Params: cfg.ParamCount(),
		Steps: steps, Rows: c.Int("prompts") * c.Int("samples"), NewTokens: c.Int("new-tokens"),
		Phases: last.Seconds, PhaseShare: map[string]float64{}, TokensPerS: last.TokensPerS, GenTokens: float64(last.GenTokens),
		PeakMB: float64(peakBytes) / (1 << 20), PeakSource: peakSrc, LoRARank: rank}
	for _, s := range last.Seconds {
		r.StepS += s
	}
	for _, s := range lines[0].Seconds {
		r.FirstStepS += s
	}
	for k, s := range last.Seconds {
		r.PhaseShare[k] = s / r.StepS
	}
	promptLen := int64(64) // chat template, system prompt and a short problem, bounded above
	est, err := plan.Plan(cfg, plan.Options{GPUs: 1, DTypeBytes: int64(dt.Size()), SeqLen: promptLen + int64(r.NewTokens),
		MicroTokens: int64(c.Int("micro-tokens")), Checkpointing: c.Bool("activation-checkpointing"), SDPA: dev.IsCuda(),
		RolloutRows: int64(r.Rows), RolloutGroup: int64(c.Int("samples")), RolloutPrompt: promptLen,
		RolloutTokens: promptLen + int64(r.NewTokens), LogProbChunk: csrc.DefaultLogProbChunk(dev.IsCuda()), MasterForWeight: dt.Size() < 4,
		LoRARank: int64(rank)})
	if err != nil {
		return grpoStepBench{}, err
	}
	r.PlanPeakMB = float64(max(est.Rollout, est.Update)) / (1 << 20)
	if r.PlanPeakMB > 0 {
		r.PeakOverPlan = r.PeakMB / r.PlanPeakMB
	}
	return r, nil
}

// writeArithmetic writes n problems "What is a + b?" (one- and two-digit
// sums and differences) as a JSONL dataset.
func writeArithmetic(path string, n int, seed int64) error {
	rng := rand.New(rand.NewSource(seed))
	var b strings.Builder
	for i := 0; i < n; i++ {
		a, c := rng.Intn(100), rng.Intn(10)
		op, ans := "+", a+c
		if rng.Intn(2) == 1 {
			op, ans = "-", a-c
		}
		line, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("arith-%d", i), "problem": fmt.Sprintf("What is %d %s %d?", a, op, c), "answer": fmt.Sprint(ans)})
		b.Write(line)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// readMetricLines reads a run's metrics.jsonl.
func readMetricLines(path string) ([]trainer.StepMetrics, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []trainer.StepMetrics
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for n := 1; sc.Scan(); n++ {
		var m trainer.StepMetrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, m)
	}
	return out, sc.Err()
}
