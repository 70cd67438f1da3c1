package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/tensorboard"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "math and code benchmarks (mean@k, pass@k, maj@k) in LANPO's three inference modes",
		Description: "Samples --k answers to every problem of each benchmark, verifies them (the trainer's verifier) and\n" +
			"prints a table: mean@k (average accuracy over the k samples; greedy: --k 1 --temperature 0), unbiased\n" +
			"pass@k for k = 1, 2, 4, …, maj@k (majority over extracted answers, equivalence-aware), mean response\n" +
			"length and truncation rate. Modes (--mode, repeatable): zero-shot (the problem alone), retrieval (a plan\n" +
			"condensed from related problems of --pool, through the trainer's retrieval, γ filter and condenser; the\n" +
			"table also reports pool problems that are near-duplicates of benchmark problems) and self-correct (the\n" +
			"model's first attempt, then the training run's reflection prompt and a second attempt; first-attempt and\n" +
			"after-reflection accuracy, wrong→right and right→wrong counts).\n\n" +
			"--bench takes names (" + strings.Join(eval.BenchmarkNames(), ", ") + "), resolved in --data-dir or\n" +
			"$" + eval.DataDirEnv + " (README: where to get the files), or paths to JSONL files of {\"id\",\"problem\",\"answer\"}.\n" +
			"Prompts come from --config (data.prompt_template, data.system_prompt, the lanpo section) or the flags.\n" +
			"Results go to --out (default RUN/eval/step-N for a checkpoint RUN/checkpoints/step-N, else\n" +
			"runs/eval/MODEL; -2, -3, … beside it when it holds another evaluation): samples.jsonl (appended per\n" +
			"batch) and summary.json. --resume continues a killed\n" +
			"evaluation; the final summary is the same, byte for byte. The numbers also go to TensorBoard (--tensorboard).\n" +
			"--decontaminate FILE (repeatable or comma-separated; JSONL with \"problem\" and \"id\") drops the benchmark\n" +
			"problems that have a twin in a training file (pool.Similarity ≥ lanpo.near_duplicate_threshold, the threshold\n" +
			"the contamination count uses too), lists them with their twin in decontaminated.jsonl beside summary.json and\n" +
			"reports how many each benchmark lost.\n" +
			"Example: lanpo eval --model runs/x/checkpoints/step-000100 --bench gsm8k,math500 --limit 100 --data-dir data",
		Flags: append(append([]cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "Hugging Face model directory or checkpoint (default: the config's model; a LoRA run's checkpoint loads onto its base model)"},
			adapterFlag,
			&cli.StringFlag{Name: "device", Value: "auto", Usage: "auto (the GPU where this build and machine have one, else cpu), cpu or cuda[:N]"},
			&cli.StringFlag{Name: "dtype", Usage: "parameter dtype (default: float32 on CPU, the checkpoint's on CUDA)"},
		}, tokenizerFlags(false)...), []cli.Flag{
			&cli.StringFlag{Name: "bench", Usage: "benchmark names or JSONL paths, comma-separated (default: the config's eval.bench)"},
			&cli.StringFlag{Name: "data-dir", Usage: "directory holding the benchmark files", EnvVars: []string{eval.DataDirEnv}},
			&cli.IntFlag{Name: "k", Usage: "samples per problem (default: eval.k, 1)"},
			&cli.IntFlag{Name: "limit", Usage: "evaluate this many problems per benchmark, evenly spaced through the file"},
			&cli.StringSliceFlag{Name: "mode", Usage: "zero-shot, retrieval, self-correct or tools (repeatable or comma-separated; default zero-shot, and tools with --tools)"},
			&cli.StringFlag{Name: "pool", Usage: "retrieval's pool: a LANPO checkpoint directory, run directory or pool.jsonl"},
			&cli.StringFlag{Name: "tool-format", Usage: "with --tools: hermes (the chat template's tool calls, declared in the system turn; default) or fenced (markdown python code blocks, run as their fence closes and answered with an output block; python only); rollout.tool_format"},
			&cli.StringFlag{Name: "tools", Usage: "adds the tools mode beside zero-shot: these tools declared and run, multi-turn (python, or names from --config's tools:; comma-separated; eval.tools); the summary compares with and without (docs/tools.md)"},
			&cli.StringSliceFlag{Name: "decontaminate", Usage: "training JSONL files: drop benchmark problems with a twin in them (repeatable)"},
			&cli.StringFlag{Name: "config", Usage: "a run config (YAML) for prompts, the lanpo section and eval defaults"},
			&cli.StringSliceFlag{Name: "set", Usage: "override a config key (repeatable)"},
			&cli.StringFlag{Name: "prompt-template", Usage: "user message, {problem} replaced (default: the config's)"},
			&cli.StringFlag{Name: "system-prompt", Usage: "system message (default: the config's)"},
			&cli.Float64Flag{Name: "temperature", Value: -1, Usage: "sampling temperature; 0 greedy (default: eval.temperature, 0)"},
			&cli.Float64Flag{Name: "top-p", Value: 1},
			&cli.Int64Flag{Name: "top-k"},
			&cli.IntFlag{Name: "max-new-tokens", Usage: "per answer (default: eval.max_new_tokens, else rollout.max_new_tokens)"},
			&cli.Uint64Flag{Name: "seed", Value: 1},
			&cli.IntFlag{Name: "batch-size", Value: 8, Usage: "problems per generation batch (each with its k samples)"},
			&cli.StringFlag{Name: "out", Usage: "results directory"},
			&cli.BoolFlag{Name: "resume", Usage: "continue the evaluation in --out"},
			&cli.BoolFlag{Name: "skip-long-prompts", Usage: "leave out (and count in the summary) the problems whose prompt and --max-new-tokens exceed the model's context, instead of refusing before the first one runs"},
			&cli.BoolFlag{Name: "reference-nll", Usage: "zero-shot: also score each problem's reference solution (its \"solution\" field) teacher-forced after the prompt, and report its token-mean NLL (reference_nll; eval.reference_nll)"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON instead of a table"},
			&cli.BoolFlag{Name: "tensorboard", Value: true, Usage: "also write the results as TensorBoard scalars eval/BENCH/MODE/METRIC: for a checkpoint RUN/checkpoints/step-N into RUN/tensorboard at step N (beside the training curves), else into OUT/tensorboard at step 0"},
		}...),
		Action: runEval,
	}
}

func runEval(c *cli.Context) error {
	cfg, err := evalConfig(c)
	if err != nil {
		return err
	}
	ec := cfg.Eval
	if len(ec.Bench) == 0 {
		return usageError{fmt.Errorf("--bench is required (or eval.bench in --config)")}
	}
	var benches []eval.Benchmark
	for _, spec := range ec.Bench {
		name, path, err := eval.ResolveBenchmark(strings.TrimSpace(spec), ec.DataDir)
		if err != nil {
			return usageError{err}
		}
		b, err := eval.LoadBenchmark(name, path, ec.Limit)
		if err != nil {
			return err
		}
		benches = append(benches, b)
	}
	training := c.StringSlice("decontaminate")
	for _, f := range training {
		if _, err := os.Stat(f); err != nil {
			return usageError{fmt.Errorf("--decontaminate: %w", err)}
		}
	}
	modelDir := c.String("model")
	if modelDir == "" {
		modelDir = cfg.Model
	}
	if modelDir == "" || strings.HasPrefix(modelDir, "builtin:") {
		return usageError{fmt.Errorf("--model is required (a Hugging Face model directory or checkpoint)")}
	}
	var p *pool.Pool
	if c.String("pool") != "" {
		var err error
		if p, err = loadPool(c.String("pool")); err != nil {
			return err
		}
	}
	m, tk, err := loadModelAndTokenizer(c, modelDir)
	if err != nil {
		return err
	}
	defer m.Close()
	thinking, err := chatOptions(c)
	if err != nil {
		return err
	}
	if thinking.EnableThinking != nil {
		cfg.Rollout.EnableThinking = thinking.EnableThinking
	}
	if f := c.String("chat-format"); f == "" && cfg.ChatFormat != "" {
		if err := tk.SetChatFormat(cfg.ChatFormat); err != nil {
			return usageError{fmt.Errorf("config key chat_format: %w", err)}
		}
	}
	o := eval.Options{Benchmarks: benches, Modes: ec.Modes, K: ec.K, Feedback: cfg.FeedbackSettings(), Pool: p, Resume: c.Bool("resume"), Batch: c.Int("batch-size"),
		SkipLongPrompts: ec.SkipLongPrompts, NearDuplicate: cfg.LANPO.NearDuplicate, Decontaminate: training, ReferenceNLL: ec.ReferenceNLL, Reward: cfg.Reward.Describe(),
		Sampling: model.SamplingParams{Temperature: ec.Temperature, TopP: c.Float64("top-p"), TopK: c.Int64("top-k"), MaxNewTokens: ec.MaxNewTokens, Seed: c.Uint64("seed")}}
	// With --adapter the adapter is what is evaluated: a LoRA run's
	// checkpoint gets its results beside it, as a full one does.
	evaluated := modelDir
	if a := c.String("adapter"); a != "" {
		evaluated = a
	}
	out := c.String("out")
	if out == "" {
		base := defaultEvalDir(evaluated)
		if out = eval.FreeDir(base, o); out != base {
			log.Info().Str("results", out).Msg(base + " holds another evaluation of this model: this one goes beside it")
		}
	}
	o.Out = out
	if isTerminal(os.Stderr) {
		o.Progress = os.Stderr
	}
	if o.Scorer, err = trainer.NewScorer(cfg); err != nil {
		return usageError{err}
	}
	defer o.Scorer.Close()
	if eval.HasCode(benches) {
		if o.CodeScorer, err = trainer.NewCodeScorer(cfg); err != nil {
			return usageError{err}
		}
		defer o.CodeScorer.Close()
		if !c.IsSet("prompt-template") {
			o.CodePromptTemplate = trainer.CodeTemplate(cfg)
		}
	}
	if len(ec.Tools) > 0 {
		specs, err := trainer.EvalToolSpecs(cfg)
		if err != nil {
			return usageError{err}
		}
		eos, err := m.EOSTokenIDs()
		if err != nil {
			return err
		}
		if o.Tools, err = trainer.ToolLoop(cfg, specs, tk, eos); err != nil {
			return err
		}
	}
	sums, err := eval.Run(m, tk, o)
	if err != nil {
		return err
	}
	tb := ""
	if c.Bool("tensorboard") {
		dir, step := evalTensorBoard(evaluated, out)
		if err := writeEvalScalars(dir, step, sums); err != nil {
			return fmt.Errorf("--tensorboard: %w", err)
		}
		tb = fmt.Sprintf(" (TensorBoard: %s, step %d)", dir, step)
	}
	if c.Bool("json") {
		return jsonl.Encoder(c.App.Writer).Encode(sums)
	}
	eval.PrintTable(c.App.Writer, sums)
	fmt.Fprintf(c.App.Writer, "results: %s%s\n", out, tb)
	return nil
}

// evalConfig is lanpo eval's config: --config (or the defaults) with the
// flags applied — the prompt, eval.bench, data_dir, k, limit, temperature,
// modes and skip_long_prompts — and resolved (modes: zero-shot unless
// given), with the evaluation's token budget (--max-new-tokens, else
// eval.max_new_tokens, else rollout.max_new_tokens) as
// rollout.max_new_tokens: the lanpo section's attempt caps follow it (a
// self-correct prompt shows the whole first attempt unless
// lanpo.max_attempt_tokens says otherwise).
func evalConfig(c *cli.Context) (trainer.Config, error) {
	cfg, err := optionalRunConfig(c)
	if err != nil {
		return cfg, err
	}
	if v := c.String("prompt-template"); v != "" {
		if !strings.Contains(v, "{problem}") {
			return cfg, usageError{fmt.Errorf("--prompt-template must contain {problem}")}
		}
		cfg.Data.PromptTemplate = v
	}
	if c.IsSet("system-prompt") {
		cfg.Data.SystemPrompt = c.String("system-prompt")
	}
	ec := &cfg.Eval
	if v := c.String("bench"); v != "" {
		ec.Bench = strings.Split(v, ",")
	}
	if v := c.String("data-dir"); v != "" {
		ec.DataDir = v
	}
	if c.IsSet("k") {
		ec.K = c.Int("k")
	}
	if c.IsSet("limit") {
		ec.Limit = c.Int("limit")
		if ec.Limit < 1 {
			return cfg, usageError{fmt.Errorf("--limit %d: want ≥ 1 problems per benchmark (leave it out for all)", ec.Limit)}
		}
	}
	if c.Float64("temperature") >= 0 {
		ec.Temperature = c.Float64("temperature")
	}
	if ec.K > 1 && ec.Temperature == 0 {
		return cfg, usageError{fmt.Errorf("--k %d with --temperature 0 (eval.temperature, the default): greedy samples are all the same; use --k 1 or a temperature", ec.K)}
	}
	var modes []string
	for _, m := range c.StringSlice("mode") { // repeatable or comma-separated
		modes = append(modes, strings.Split(m, ",")...)
	}
	if len(modes) > 0 {
		ec.Modes = modes
	}
	if v := c.String("tools"); v != "" {
		ec.Tools = strings.Split(v, ",")
	}
	if v := c.String("tool-format"); v != "" {
		cfg.Rollout.ToolFormat = v
	}
	if c.Bool("skip-long-prompts") {
		ec.SkipLongPrompts = true
	}
	if c.Bool("reference-nll") {
		ec.ReferenceNLL = true
	}
	if n := c.Int("max-new-tokens"); n > 0 {
		ec.MaxNewTokens = n
	}
	if ec.MaxNewTokens > 0 {
		cfg.Rollout.MaxNewTokens = ec.MaxNewTokens
	}
	return cfg, resolveConfig(c, &cfg)
}

// checkpointRun splits a checkpoint directory RUN/checkpoints/NAME into
// RUN and NAME; ok is false for any other directory.
func checkpointRun(modelDir string) (run, name string, ok bool) {
	clean := filepath.Clean(modelDir)
	parent := filepath.Dir(clean)
	if filepath.Base(parent) != "checkpoints" {
		return "", filepath.Base(clean), false
	}
	return filepath.Dir(parent), filepath.Base(clean), true
}

// defaultEvalDir is RUN/eval/step-N for a checkpoint RUN/checkpoints/step-N,
// else runs/eval/<model directory name>.
func defaultEvalDir(modelDir string) string {
	run, name, ok := checkpointRun(modelDir)
	if ok {
		return filepath.Join(run, "eval", name)
	}
	return filepath.Join("runs", "eval", name)
}

// evalTensorBoard is where an evaluation's TensorBoard scalars go and at
// which step: a checkpoint RUN/checkpoints/step-N's into its run's
// tensorboard directory at step N, so they join the training curves (and
// the in-training evaluations' eval/ tags); anything else's into
// OUT/tensorboard at step 0.
func evalTensorBoard(modelDir, out string) (string, int64) {
	var step int64
	if run, name, ok := checkpointRun(modelDir); ok {
		if _, err := fmt.Sscanf(name, "step-%d", &step); err == nil {
			return filepath.Join(run, "tensorboard"), step
		}
	}
	return filepath.Join(out, "tensorboard"), 0
}

// writeEvalScalars writes a new events file in dir holding the summaries'
// numbers under the tags metrics.jsonl gives in-training evaluations
// (eval/BENCH/MODE/METRIC).
func writeEvalScalars(dir string, step int64, sums []eval.Summary) error {
	values := map[string]float64{}
	for k, v := range eval.Flatten(sums) {
		values["eval/"+k] = v
	}
	w, err := tensorboard.Create(dir, time.Now())
	if err != nil {
		return err
	}
	if err := w.Scalars(step, time.Now(), values); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// loadModelAndTokenizer loads the model with --device and --dtype and its
// tokenizer (the directory's own, or --tokenizer), with --chat-format.
func loadModelAndTokenizer(c *cli.Context, dir string) (*model.Model, *tokenizer.Tokenizer, error) {
	dev, err := parseDevice(c.String("device"))
	if err != nil {
		return nil, nil, usageError{err}
	}
	opts := model.LoadOptions{Device: dev}
	if d := c.String("dtype"); d != "" {
		if opts.DType, err = parseDTypeFlag(d); err != nil {
			return nil, nil, err
		}
	}
	if !model.IsAdapterDir(dir) { // before the tokenizer, whose error would hide this one
		if err := model.CheckDir(dir); err != nil {
			return nil, nil, usageError{fmt.Errorf("%w, or a LoRA adapter directory", err)}
		}
	}
	tokDir := dir
	if t := c.String("tokenizer"); t != "" {
		tokDir = t
	}
	tk, err := tokenizer.Load(tokDir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s has no usable tokenizer (%w); pass --tokenizer DIR", tokDir, err)
	}
	if f := c.String("chat-format"); f != "" {
		if err := tk.SetChatFormat(f); err != nil {
			return nil, nil, usageError{fmt.Errorf("--chat-format: %w", err)}
		}
	}
	m, err := model.LoadWithAdapter(dir, c.String("adapter"), opts)
	if err != nil {
		return nil, nil, err
	}
	return m, tk, nil
}

// optionalRunConfig is --config with its --set overrides, or the default
// config when --config is absent (then --set is a usage error: it has
// nothing to override). It is not resolved yet: the command applies its
// own flags, then resolveConfig.
func optionalRunConfig(c *cli.Context) (trainer.Config, error) {
	if c.String("config") == "" {
		if len(c.StringSlice("set")) > 0 {
			return trainer.Config{}, usageError{fmt.Errorf("--set needs --config (it overrides the config's keys)")}
		}
		return trainer.DefaultConfig(), nil
	}
	cfg, err := trainer.ReadConfig(c.String("config"), c.StringSlice("set"))
	if err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// resolveConfig fills a command's config's derived defaults once its
// flags are in (trainer.Config.Resolve); a bad value names the key, and
// the file when it came from --config.
func resolveConfig(c *cli.Context, cfg *trainer.Config) error {
	if err := cfg.Resolve(); err != nil {
		if path := c.String("config"); path != "" {
			return usageError{fmt.Errorf("%s: %w", path, err)}
		}
		return usageError{err}
	}
	return nil
}
