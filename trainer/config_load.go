package trainer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/rs/zerolog/log"
	"gopkg.in/yaml.v3"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/tools"
)

// LoadConfig reads a YAML file onto the defaults, applies --set overrides
// and validates (Validate: the run's required keys, then Resolve). Unknown
// keys are errors naming the file and line (or the override).
func LoadConfig(path string, sets []string) (Config, error) {
	cfg, err := ReadConfig(path, sets)
	if err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	if cfg.TotalSteps > 0 && cfg.Optim.WarmupSteps > cfg.TotalSteps {
		log.Warn().Int("optim.warmup_steps", cfg.Optim.WarmupSteps).Int("total_steps", cfg.TotalSteps).
			Msg("the warm-up is longer than the run: the learning rate never reaches optim.lr")
	}
	if cfg.Algo.looseSequenceClip() {
		log.Warn().Float64("algo.clip_low", *cfg.Algo.ClipLow).Float64("algo.clip_high", *cfg.Algo.ClipHigh).
			Msgf("algo.policy_loss gspo clips a sequence ratio, which moves far less than a token's: ranges of this size clip nothing (GSPO's own: %g/%g; unset the keys to get them)", GSPOClipLow, GSPOClipHigh)
	}
	return cfg, nil
}

// ReadConfig reads a YAML file onto the defaults and applies --set
// overrides, without resolving: a command that takes settings from its
// own flags too (lanpo seed, lanpo eval) applies them and then calls
// Resolve, so that defaults derived from a key see the flag's value.
func ReadConfig(path string, sets []string) (Config, error) {
	cfg := DefaultConfig()
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, err
	}
	if err := decodeStrict(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	if len(sets) > 0 {
		// Overrides go through a generic tree, so a key the file does not
		// mention can still be set; the strict decode then checks names.
		if cfg, err = withSets(raw, sets); err != nil {
			return cfg, err // raw decoded above: the error is an override's
		}
	}
	if cfg.RunDir == "" {
		cfg.RunDir = filepath.Join("runs", strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
	}
	return cfg, nil
}

// WithSets applies --set overrides to a config in memory, as ReadConfig
// applies them to a file.
func WithSets(cfg Config, sets []string) (Config, error) {
	out, err := withSets([]byte(cfg.YAML()), sets)
	if err != nil {
		return cfg, err
	}
	return out, nil
}

// withSets decodes raw YAML onto the defaults with key=value overrides
// applied to its tree first.
func withSets(raw []byte, sets []string) (Config, error) {
	cfg := DefaultConfig()
	var tree map[string]any
	if err := yaml.Unmarshal(raw, &tree); err != nil {
		return cfg, err
	}
	if tree == nil {
		tree = map[string]any{}
	}
	for _, kv := range sets {
		if err := setPath(tree, kv); err != nil {
			return cfg, err
		}
	}
	merged, err := yaml.Marshal(tree)
	if err != nil {
		return cfg, err
	}
	if err := decodeStrict(merged, &cfg); err != nil {
		return cfg, fmt.Errorf("--set: %w", err)
	}
	return cfg, nil
}

func decodeStrict(raw []byte, cfg *Config) error {
	var tree map[string]any
	if err := yaml.Unmarshal(raw, &tree); err == nil {
		if err := checkIntegers(tree, reflect.TypeOf(*cfg), ""); err != nil {
			return err
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// checkIntegers refuses a fractional number for an integer key (the YAML
// decoder would silently truncate samples_per_prompt: 4.9 to 4).
func checkIntegers(tree map[string]any, t reflect.Type, prefix string) error {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		v, ok := tree[name]
		if !ok || name == "" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch ft.Kind() {
		case reflect.Struct:
			if sub, ok := v.(map[string]any); ok {
				if err := checkIntegers(sub, ft, prefix+name+"."); err != nil {
					return err
				}
			}
		case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64, reflect.Uint32, reflect.Uint:
			if x, ok := v.(float64); ok && x != math.Trunc(x) {
				return fmt.Errorf("config key %s%s: want a whole number, got %v", prefix, name, x)
			}
		}
	}
	return nil
}

// setPath applies one key=value override (dotted key, YAML value).
func setPath(tree map[string]any, kv string) error {
	key, val, ok := strings.Cut(kv, "=")
	if !ok || key == "" {
		return fmt.Errorf("--set %q: want key=value", kv)
	}
	var v any
	if err := yaml.Unmarshal([]byte(val), &v); err != nil {
		return fmt.Errorf("--set %s: %w", key, err)
	}
	parts := strings.Split(key, ".")
	node := tree
	for _, p := range parts[:len(parts)-1] {
		next, ok := node[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			node[p] = next
		}
		node = next
	}
	node[parts[len(parts)-1]] = v
	return nil
}

func bad(key string, format string, args ...any) error {
	return fmt.Errorf("config key %s: %s", key, fmt.Sprintf(format, args...))
}

// Validate checks a training run's config (lanpo train and sft, RunGRPO,
// RunSFT): the keys a run needs (run_dir, model), then Resolve. It names
// the first bad key.
func (c *Config) Validate() error {
	switch {
	case c.RunDir == "":
		return bad("run_dir", "is required")
	case c.Model == "":
		return bad("model", "is required (a Hugging Face model directory, or builtin:tiny)")
	case c.TotalSteps < 0:
		return bad("total_steps", "must be ≥ 1 (0: one pass over data.train), got %d", c.TotalSteps)
	}
	return c.Resolve()
}

// Resolve fills every default that depends on another key and checks
// every value, naming the first bad key. It is the one place such
// defaults are filled — the lanpo section's relevance floor (from
// lanpo.similarity), attempt caps (from rollout.max_new_tokens) and mode
// weights (from lanpo.train_prompt), algo.name, eval.max_new_tokens (from
// rollout.max_new_tokens) and eval.modes (zero-shot) — and every entry point goes
// through it: train and sft (LoadConfig, and RunGRPO and RunSFT for a
// Config built in Go), seed and eval (after their flags), the demo's
// stages and lanpo pool. It fills only what is unset, so running it
// twice changes nothing. The lanpo section is resolved whatever algo.name
// says: lanpo eval and lanpo seed use it with any run's config.
func (c *Config) Resolve() error {
	if len(c.Tools) > 0 {
		if _, err := tools.NewSet(c.Tools, nil); err != nil {
			return err
		}
	}
	switch {
	case c.StopAfterSteps < 0:
		return bad("stop_after_steps", "must be ≥ 0")
	case c.Rollout.PromptsPerStep < 1:
		return bad("rollout.prompts_per_step", "must be ≥ 1")
	case c.Rollout.SamplesPerPrompt < 1:
		return bad("rollout.samples_per_prompt", "must be ≥ 1")
	case c.Rollout.SamplesPerPrompt < 2:
		return bad("rollout.samples_per_prompt", "GRPO and LANPO need ≥ 2 samples per prompt: advantages are relative to the prompt's group, so with 1 every advantage is 0 and nothing is learned")
	case c.Rollout.MaxNewTokens < 1:
		return bad("rollout.max_new_tokens", "must be ≥ 1")
	case c.Rollout.Temperature < 0:
		return bad("rollout.temperature", "must be ≥ 0")
	case c.Rollout.TopP <= 0 || c.Rollout.TopP > 1:
		return bad("rollout.top_p", "must be in (0, 1]")
	case c.Rollout.GPUMemoryFraction < 0 || c.Rollout.GPUMemoryFraction > 1:
		return bad("rollout.gpu_memory_fraction", "must be in [0, 1] (0: no cap), got %g", c.Rollout.GPUMemoryFraction)
	case c.Rollout.SyncEvery < 0:
		return bad("rollout.sync_every", "must be ≥ 0 (0: the default, %d)", model.DefaultSyncEvery)
	case c.Rollout.MaxBatchRows < 0:
		return bad("rollout.max_batch_rows", "must be ≥ 0 (0: no cap)")
	case c.Rollout.MaxTurns < 0:
		return bad("rollout.max_turns", "must be ≥ 0 (0: the default, %d)", defaultMaxTurns)
	case c.Rollout.MaxToolOutputTokens < 0:
		return bad("rollout.max_tool_output_tokens", "must be ≥ 0 (0: the default, %d)", defaultMaxToolOutputTokens)
	case c.Rollout.ToolSandbox != "" && c.Rollout.ToolSandbox != reward.SandboxNamespaces && c.Rollout.ToolSandbox != reward.SandboxNone:
		return bad("rollout.tool_sandbox", "%q: want %s (the default) or %s (no isolation: only for code you trust)", c.Rollout.ToolSandbox, reward.SandboxNamespaces, reward.SandboxNone)
	case c.Rollout.ToolFormat != "" && c.Rollout.ToolFormat != tools.FormatHermes && c.Rollout.ToolFormat != tools.FormatFenced:
		return bad("rollout.tool_format", "%q: want %s (the chat template's tool calls, the default) or %s (```python blocks, python only)", c.Rollout.ToolFormat, tools.FormatHermes, tools.FormatFenced)
	case c.Rollout.ToolFormat == tools.FormatFenced && (len(c.Tools) > 1 || len(c.Tools) == 1 && (c.Tools[0].Name != tools.Python || len(c.Tools[0].Command) > 0)):
		return bad("rollout.tool_format", "fenced runs the built-in python tool alone; the tools: section declares others")
	case len(c.Tools) == 0 && len(c.Eval.Tools) == 0 && (c.Rollout.MaxTurns != 0 || c.Rollout.MaxToolOutputTokens != 0 || c.Rollout.ToolSandbox != "" || c.Rollout.ToolFormat != "" || c.Rollout.ToolLockstep):
		return bad("rollout.max_turns", "rollout.max_turns, max_tool_output_tokens, tool_sandbox, tool_format and tool_lockstep belong to a run with tools: (none declared)")
	case c.Algo.KLBeta < 0:
		return bad("algo.kl_beta", "must be ≥ 0")
	case c.Dist.ZeroStage < 0 || c.Dist.ZeroStage > 2:
		return bad("dist.zero_stage", "%d: want 0, 1 or 2 (parameter sharding, stage 3, is not implemented)", c.Dist.ZeroStage)
	case c.Dist.BucketMB < 1:
		return bad("dist.bucket_mb", "must be ≥ 1")
	case c.Dist.Backend != "" && c.Dist.Backend != "gloo" && c.Dist.Backend != "nccl":
		return bad("dist.backend", "%q: want gloo, nccl or empty (nccl on CUDA, else gloo)", c.Dist.Backend)
	case c.Log.PhaseEvery != "" && c.Log.PhaseEvery != "0" && c.Log.PhaseInterval() <= 0:
		return bad("log.phase_every", "%q: want a duration such as 30s, or 0 (off)", c.Log.PhaseEvery)
	case c.Dist.TimeoutDuration() <= 0:
		return bad("dist.timeout", "%q: want a positive duration such as 5m or 90s", c.Dist.Timeout)
	case c.Algo.TISCap < 1:
		return bad("algo.tis_cap", "must be ≥ 1, got %g", c.Algo.TISCap)
	case c.Algo.Epochs < 1:
		return bad("algo.epochs", "must be ≥ 1")
	case c.Algo.MicroBatchSize < 1:
		return bad("algo.micro_batch_size", "must be ≥ 1")
	case c.SFT.MicroBatchSize < 1 || c.SFT.GradAccum < 1 || c.SFT.MaxLen == 1 || c.SFT.MaxLen < 0:
		return bad("sft", "micro_batch_size and grad_accum must be ≥ 1, max_len ≥ 2 (0: the model's context, at most %d)", DefaultSFTMaxLen)
	case c.SFT.MaxTokensPerMicroBatch < 0 || c.Algo.MaxTokensPerMicroBatch < 0:
		return bad("max_tokens_per_micro_batch", "must be ≥ 0 (0: off)")
	case c.Optim.LR <= 0:
		return bad("optim.lr", "must be > 0")
	case c.Optim.WarmupSteps < 0:
		return bad("optim.warmup_steps", "must be ≥ 0")
	case c.Checkpoint.Every < 0 || c.Checkpoint.Keep < 1:
		return bad("checkpoint", "every must be ≥ 0 and keep ≥ 1")
	case c.MaxBadSteps < 1:
		return bad("max_bad_steps", "must be ≥ 1")
	case c.Eval.Every < 0 || c.Eval.K < 1 || c.Eval.Limit < 0 || c.Eval.BatchSize < 1:
		return bad("eval", "every and limit must be ≥ 0, k and batch_size ≥ 1")
	case c.Eval.Every > 0 && len(c.Eval.Bench) == 0:
		return bad("eval.bench", "is required with eval.every > 0")
	case c.Eval.Temperature == 0 && c.Eval.K > 1:
		return bad("eval.k", "%d samples at eval.temperature 0 are all the same", c.Eval.K)
	}
	if err := c.checkMethods(); err != nil {
		return err
	}
	if err := c.Algo.resolveLoss(); err != nil {
		return err
	}
	if err := c.Reward.Validate(); err != nil {
		return err
	}
	if c.Reward.Kind != reward.KindMath && c.Algo.FormatReward != 0 {
		return bad("algo.format_reward", "is the math verifier's \\boxed{} bonus; with reward.kind %s the reward is the program's or server's alone (set it 0)", c.Reward.Kind)
	}
	c.Data.answerOptional = c.Reward.Kind != reward.KindMath
	// LANPO's prompts and answer stripping for code (pool.CodePrompts,
	// pool.StripCode): a code run's lessons never carry another problem's
	// program.
	c.LANPO.Code = c.Reward.Kind == reward.KindCode
	if c.Reward.Kind == reward.KindCode && c.Data.PromptTemplate == DefaultConfig().Data.PromptTemplate {
		c.Data.PromptTemplate = CodePromptTemplate
	}
	if err := c.LoRA.Resolve(); err != nil {
		return err
	}
	if c.LoRA.On() {
		switch {
		case c.LoRA.Dropout > 0 && c.Train.ActivationCheckpointing:
			return bad("lora.dropout", "must be 0 with train.activation_checkpointing: the recomputed layers would draw other dropout masks than the forward did")
		case c.Algo.RefDevice != "":
			return bad("algo.ref_device", "must be empty with LoRA: the KL reference is the policy with its adapters off (or at lora.init_from), no second model to place")
		}
	}
	if c.Eval.MaxNewTokens == 0 {
		c.Eval.MaxNewTokens = c.Rollout.MaxNewTokens
	}
	if len(c.Eval.Modes) == 0 {
		c.Eval.Modes = []string{eval.ModeZeroShot}
	}
	if len(c.Eval.Tools) > 0 && !slices.Contains(c.Eval.Modes, eval.ModeTools) {
		c.Eval.Modes = append(c.Eval.Modes, eval.ModeTools) // beside the others: the summary compares
	}
	if slices.Contains(c.Eval.Modes, eval.ModeTools) && len(c.Eval.Tools) == 0 {
		return bad("eval.modes", "tools needs eval.tools (lanpo eval: --tools): python, or names from the tools: section")
	}
	if _, err := EvalToolSpecs(*c); err != nil {
		return err
	}
	if _, err := TokenWeights([]int{1}, nil, c.Algo.LossAggMode, 1); err != nil {
		return bad("algo.loss_agg_mode", "%v", err)
	}
	switch c.Algo.KLEstimator {
	case KLK1, KLK2, KLK3:
	default:
		return bad("algo.kl_estimator", "%q: want k1, k2 or k3", c.Algo.KLEstimator)
	}
	if _, err := optim.LR(0, 1, 0, 1, 0, c.Optim.Schedule); err != nil {
		return bad("optim.lr_schedule", "%v", err)
	}
	if c.DType != "" {
		if _, err := csrc.ParseDType(c.DType); err != nil {
			return bad("dtype", "%v", err)
		}
	}
	if _, err := ParseDevice(c.Device); err != nil {
		return bad("device", "%v", err)
	}
	if _, err := ParseDevice(c.Algo.RefDevice); err != nil {
		return bad("algo.ref_device", "%v", err)
	}
	if f := c.Data.AnswerFormat; f != "" && f != AnswerGSM8K {
		return bad("data.answer_format", "%q: want gsm8k or nothing (the answer as it is)", f)
	}
	if !strings.Contains(c.Data.PromptTemplate, "{problem}") {
		return bad("data.prompt_template", "must contain {problem}")
	}
	return nil
}

// finite: neither NaN nor ±Inf.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// YAML renders the resolved configuration (written into the run
// directory and printed by --dry-run).
func (c Config) YAML() string {
	b, _ := yaml.Marshal(c)
	return string(b)
}
