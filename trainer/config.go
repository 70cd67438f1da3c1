package trainer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"gopkg.in/yaml.v3"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/rl"
)

// Config is a run's configuration, mapped 1:1 onto the YAML keys (and onto
// --set key=value overrides with dotted paths, e.g. algo.clip_high=0.28).
// Validate fills defaults and names the bad key.
type Config struct {
	RunDir         string `yaml:"run_dir"`
	Model          string `yaml:"model"`     // HF model directory, or builtin:tiny
	Tokenizer      string `yaml:"tokenizer"` // default: the model directory
	ChatFormat     string `yaml:"chat_format"`
	DType          string `yaml:"dtype"`  // parameters: float32, bfloat16, float64 ("": float32 on CPU, the checkpoint's on CUDA)
	Device         string `yaml:"device"` // auto (default: cuda where this build and machine have one, else cpu), cpu, cuda or cuda:N (cuda: cuda:$LOCAL_RANK under a torchrun-style launch)
	Seed           uint64 `yaml:"seed"`
	TotalSteps     int    `yaml:"total_steps"`      // defines the LR schedule
	StopAfterSteps int    `yaml:"stop_after_steps"` // checkpoint and exit 0 after this many steps (0: run to total_steps)
	MaxBadSteps    int    `yaml:"max_bad_steps"`    // NaN/Inf losses in a row before giving up

	Train      TrainConfig      `yaml:"train"`
	Data       DataConfig       `yaml:"data"`
	Rollout    RolloutConfig    `yaml:"rollout"`
	Algo       AlgoConfig       `yaml:"algo"`
	SFT        SFTConfig        `yaml:"sft"`
	Optim      OptimConfig      `yaml:"optim"`
	Checkpoint CheckpointConfig `yaml:"checkpoint"`
	LANPO      feedback.Config  `yaml:"lanpo"`
	Log        LogConfig        `yaml:"log"`
	Eval       EvalConfig       `yaml:"eval"`
	Dist       DistConfig       `yaml:"dist"`
}

// DistConfig is multi-process data parallelism (lanpo launch or torchrun
// start the ranks; a single process ignores it but for zero_stage, which
// then shards over one rank).
type DistConfig struct {
	// Timeout bounds every collective and the rendezvous: a rank that died
	// or hangs ends the others' wait with an error after at most this long.
	Timeout string `yaml:"timeout"`
	// Backend: gloo, nccl or "" (nccl on CUDA devices, else gloo).
	Backend string `yaml:"backend"`
	// ZeroStage shards AdamW's state over the ranks: 0 none, 1 masters and
	// moments, 2 gradients too (layer by layer with activation
	// checkpointing).
	ZeroStage int `yaml:"zero_stage"`
	// BucketMB is the size of the flat buffers gradients are reduced in.
	BucketMB int `yaml:"bucket_mb"`
}

// TimeoutDuration is Timeout parsed (validated at load).
func (d DistConfig) TimeoutDuration() time.Duration {
	t, _ := time.ParseDuration(d.Timeout)
	return t
}

// EvalConfig is benchmark evaluation: during training (every > 0: the
// current policy, every that many steps, results as eval/… keys in
// metrics.jsonl) and the defaults of lanpo eval --config.
type EvalConfig struct {
	Every        int      `yaml:"every"`
	Bench        []string `yaml:"bench"` // names (gsm8k, math500, …) or JSONL paths
	DataDir      string   `yaml:"data_dir"`
	K            int      `yaml:"k"`
	Limit        int      `yaml:"limit"` // problems per benchmark (0: all)
	Modes        []string `yaml:"modes"` // zero-shot (default), retrieval, self-correct
	Temperature  float64  `yaml:"temperature"`
	TopP         float64  `yaml:"top_p"`
	MaxNewTokens int      `yaml:"max_new_tokens"` // 0: rollout.max_new_tokens
	BatchSize    int      `yaml:"batch_size"`
	Seed         uint64   `yaml:"seed"`
}

// TrainConfig are memory switches of the update (SFT and RL).
type TrainConfig struct {
	// ActivationCheckpointing keeps only each decoder layer's input during
	// the forward and recomputes one layer at a time in backward
	// (model.ForwardCheckpointed): the same gradients, activation memory of
	// one layer instead of all, about a third more compute.
	ActivationCheckpointing bool `yaml:"activation_checkpointing"`
	// Deterministic turns torch's deterministic algorithms on for a run on
	// CUDA (default true): the same run gives the same bits and a resumed
	// run those of an uninterrupted one; an op without a deterministic CUDA
	// implementation is then an error naming it. false trades that for
	// whatever faster nondeterministic kernels torch has. No effect on CPU,
	// which is deterministic anyway.
	Deterministic *bool `yaml:"deterministic"`
}

// DeterministicCUDA is train.deterministic with its default.
func (t TrainConfig) DeterministicCUDA() bool { return t.Deterministic == nil || *t.Deterministic }

// DataConfig names the dataset and how problems become prompts.
type DataConfig struct {
	Train          string `yaml:"train"`           // JSONL: {"id","problem","answer"} (GRPO) or {"messages"} (SFT)
	Eval           string `yaml:"eval"`            // SFT: held-out chat JSONL for the eval loss
	PromptTemplate string `yaml:"prompt_template"` // {problem} is replaced
	SystemPrompt   string `yaml:"system_prompt"`
	SkipBadLines   bool   `yaml:"skip_bad_lines"` // count and skip malformed lines instead of failing
	// Where a record's fields are (dotted paths into nested records):
	// defaults problem, answer, id (an id-less record gets file:line).
	ProblemKey string `yaml:"problem_key"`
	AnswerKey  string `yaml:"answer_key"`
	IDKey      string `yaml:"id_key"`
	// AnswerFormat: "" (the answer as it is) or gsm8k (a worked solution
	// ending in "#### 72": the final answer is what follows).
	AnswerFormat string `yaml:"answer_format"`
}

// RolloutConfig are the sampling settings of GRPO's rollouts.
type RolloutConfig struct {
	PromptsPerStep   int     `yaml:"prompts_per_step"`
	SamplesPerPrompt int     `yaml:"samples_per_prompt"` // G
	Temperature      float64 `yaml:"temperature"`
	TopP             float64 `yaml:"top_p"`
	TopK             int64   `yaml:"top_k"`
	MaxNewTokens     int     `yaml:"max_new_tokens"`
	EnableThinking   *bool   `yaml:"enable_thinking"`
	// GPUMemoryFraction: on CUDA, generation decodes at once only as many
	// rows as fit in this share of the device beside what is allocated
	// (weights, optimizer state, reference model), splitting a step's
	// prompts into several generation batches; a prompt whose group alone
	// cannot fit is an error. MaxBatchRows caps the rows at once on any
	// device (0: no cap). Neither changes the samples.
	GPUMemoryFraction float64 `yaml:"gpu_memory_fraction"`
	MaxBatchRows      int     `yaml:"max_batch_rows"`
}

// GenerateOptions are the generation engine's memory caps from the
// rollout section.
func (r RolloutConfig) GenerateOptions() model.GenerateOptions {
	return model.GenerateOptions{MaxRows: r.MaxBatchRows, MemoryFraction: r.GPUMemoryFraction}
}

// AlgoConfig are GRPO's loss settings (LANPO's update is GRPO's).
type AlgoConfig struct {
	Name           string  `yaml:"name"` // grpo or lanpo (lanpo: the lanpo section applies)
	AdvNoStd       bool    `yaml:"adv_no_std"`
	ClipLow        float64 `yaml:"clip_low"`
	ClipHigh       float64 `yaml:"clip_high"`
	KLBeta         float64 `yaml:"kl_beta"`
	KLEstimator    string  `yaml:"kl_estimator"`
	LossAggMode    string  `yaml:"loss_agg_mode"`
	Epochs         int     `yaml:"epochs"` // μ: passes over each batch
	MicroBatchSize int     `yaml:"micro_batch_size"`
	// MaxTokensPerMicroBatch packs rollouts by length into micro-batches of
	// at most this many padded tokens instead of micro_batch_size rollouts
	// (0: off): long responses do not run out of memory, short ones do not
	// pay for padding.
	MaxTokensPerMicroBatch int     `yaml:"max_tokens_per_micro_batch"`
	DynamicSampling        bool    `yaml:"dynamic_sampling"` // drop zero-variance groups and sample more
	MaxResample            int     `yaml:"max_resample"`     // extra rollout rounds dynamic sampling may take
	OverlongMask           bool    `yaml:"overlong_mask"`    // truncated responses get no loss
	FormatReward           float64 `yaml:"format_reward"`    // weight of the \boxed{} format reward (0: off)
	// RecomputeOldLogp takes π_old from a trainer forward over the step's
	// rollouts before the update instead of the sampler's record, and
	// weights each token's loss by the truncated importance weight
	// min(π_old/π_sampler, TISCap) (detached) for the remaining gap. On a
	// GPU in bf16 the sampler's and the trainer's log-probs differ (other
	// kernels, other batch shapes); this keeps PPO's ratio at exactly 1 on
	// the first epoch and corrects for the difference instead of clipping
	// on it. Metrics: sampler_logp_gap_mean/max, sampler_tis_clipped_frac.
	RecomputeOldLogp bool    `yaml:"recompute_old_logp"`
	TISCap           float64 `yaml:"tis_cap"`
	// RefDevice puts the KL term's reference model on another device than
	// the policy ("": the same; cpu: offloaded to the host, in the policy's
	// dtype), freeing its weights' memory on the GPU at the price of
	// computing its log-probs there.
	RefDevice string `yaml:"ref_device"`
}

// SFTConfig are the supervised fine-tuning settings.
type SFTConfig struct {
	MaxLen         int `yaml:"max_len"`
	MicroBatchSize int `yaml:"micro_batch_size"`
	GradAccum      int `yaml:"grad_accum"`
	EvalEvery      int `yaml:"eval_every"`
	// MaxTokensPerMicroBatch packs the step's micro_batch_size × grad_accum
	// examples by length into micro-batches of at most this many padded
	// tokens (0: micro_batch_size examples each).
	MaxTokensPerMicroBatch int `yaml:"max_tokens_per_micro_batch"`
}

// OptimConfig are AdamW's and the schedule's settings.
type OptimConfig struct {
	LR          float64 `yaml:"lr"`
	Schedule    string  `yaml:"lr_schedule"` // constant or cosine
	WarmupSteps int     `yaml:"warmup_steps"`
	MinLRRatio  float64 `yaml:"min_lr_ratio"`
	WeightDecay float64 `yaml:"weight_decay"`
	Beta1       float64 `yaml:"beta1"`
	Beta2       float64 `yaml:"beta2"`
	Eps         float64 `yaml:"eps"`
	GradClip    float64 `yaml:"grad_clip"`
}

// LogConfig are optional run logs.
type LogConfig struct {
	// Rollouts writes RUN_DIR/rollouts/step-NNNNNN.jsonl: every rollout's
	// problem, mode, full prompt text, response and reward.
	Rollouts bool `yaml:"rollouts"`
	// TensorBoard also writes every metric as a TensorBoard scalar under
	// RUN_DIR/tensorboard/ (default on): tensorboard --logdir runs/.
	TensorBoard *bool `yaml:"tensorboard"`
}

// TensorBoardOn is log.tensorboard (default on).
func (l LogConfig) TensorBoardOn() bool { return l.TensorBoard == nil || *l.TensorBoard }

// CheckpointConfig says when to save and how many to keep.
type CheckpointConfig struct {
	Every int `yaml:"every"`
	Keep  int `yaml:"keep"`
}

// DefaultConfig is what unset keys mean.
func DefaultConfig() Config {
	return Config{
		Seed: 1, MaxBadSteps: 3, Device: DeviceAuto,
		Data:    DataConfig{PromptTemplate: "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."},
		Rollout: RolloutConfig{PromptsPerStep: 8, SamplesPerPrompt: 8, Temperature: 1, TopP: 1, MaxNewTokens: 1024, GPUMemoryFraction: 0.9},
		Algo: AlgoConfig{ClipLow: 0.2, ClipHigh: 0.28, KLEstimator: KLK3, LossAggMode: AggTokenMean, Epochs: 1, TISCap: 2,
			MicroBatchSize: 8, MaxResample: 2},
		SFT:        SFTConfig{MaxLen: 2048, MicroBatchSize: 4, GradAccum: 1},
		Optim:      OptimConfig{LR: 1e-6, Schedule: "constant", MinLRRatio: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, GradClip: 1},
		Checkpoint: CheckpointConfig{Every: 50, Keep: 3},
		LANPO:      feedback.Default(),
		Eval:       EvalConfig{K: 1, TopP: 1, BatchSize: 8, Seed: 1},
		Dist:       DistConfig{Timeout: "5m", BucketMB: 16},
	}
}

// LoadConfig reads a YAML file onto the defaults, applies --set overrides
// and validates. Unknown keys are errors naming the file and line (or the
// override).
func LoadConfig(path string, sets []string) (Config, error) {
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
		var tree map[string]any
		if err := yaml.Unmarshal(raw, &tree); err != nil {
			return cfg, fmt.Errorf("%s: %w", path, err)
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
		cfg = DefaultConfig()
		if err := decodeStrict(merged, &cfg); err != nil {
			return cfg, fmt.Errorf("--set: %w", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	if cfg.Optim.WarmupSteps > cfg.TotalSteps {
		log.Warn().Int("optim.warmup_steps", cfg.Optim.WarmupSteps).Int("total_steps", cfg.TotalSteps).
			Msg("the warm-up is longer than the run: the learning rate never reaches optim.lr")
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

// Validate checks values and names the first bad key.
func (c *Config) Validate() error {
	bad := func(key string, format string, args ...any) error {
		return fmt.Errorf("config key %s: %s", key, fmt.Sprintf(format, args...))
	}
	switch {
	case c.RunDir == "":
		return bad("run_dir", "is required")
	case c.Model == "":
		return bad("model", "is required (a Hugging Face model directory, or builtin:tiny)")
	case c.TotalSteps < 1:
		return bad("total_steps", "must be ≥ 1, got %d", c.TotalSteps)
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
	case c.Rollout.MaxBatchRows < 0:
		return bad("rollout.max_batch_rows", "must be ≥ 0 (0: no cap)")
	case c.Rollout.MaxBatchRows > 0 && c.Rollout.MaxBatchRows < c.Rollout.SamplesPerPrompt:
		return bad("rollout.max_batch_rows", "%d is less than one prompt's group (samples_per_prompt %d)", c.Rollout.MaxBatchRows, c.Rollout.SamplesPerPrompt)
	case c.Algo.ClipLow < 0 || c.Algo.ClipLow >= 1:
		return bad("algo.clip_low", "must be in [0, 1)")
	case c.Algo.ClipHigh < 0:
		return bad("algo.clip_high", "must be ≥ 0")
	case c.Algo.KLBeta < 0:
		return bad("algo.kl_beta", "must be ≥ 0")
	case c.Dist.ZeroStage < 0 || c.Dist.ZeroStage > 2:
		return bad("dist.zero_stage", "%d: want 0, 1 or 2 (parameter sharding, stage 3, is not implemented)", c.Dist.ZeroStage)
	case c.Dist.BucketMB < 1:
		return bad("dist.bucket_mb", "must be ≥ 1")
	case c.Dist.Backend != "" && c.Dist.Backend != "gloo" && c.Dist.Backend != "nccl":
		return bad("dist.backend", "%q: want gloo, nccl or empty (nccl on CUDA, else gloo)", c.Dist.Backend)
	case c.Dist.TimeoutDuration() <= 0:
		return bad("dist.timeout", "%q: want a positive duration such as 5m or 90s", c.Dist.Timeout)
	case c.Algo.TISCap < 1:
		return bad("algo.tis_cap", "must be ≥ 1, got %g", c.Algo.TISCap)
	case c.Algo.Epochs < 1:
		return bad("algo.epochs", "must be ≥ 1")
	case c.Algo.MicroBatchSize < 1:
		return bad("algo.micro_batch_size", "must be ≥ 1")
	case c.SFT.MicroBatchSize < 1 || c.SFT.GradAccum < 1 || c.SFT.MaxLen < 2:
		return bad("sft", "micro_batch_size and grad_accum must be ≥ 1, max_len ≥ 2")
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
	switch c.Algo.Name {
	case "", AlgoGRPO:
		c.Algo.Name = AlgoGRPO
	case AlgoLANPO:
		if err := c.LANPO.Validate(c.Rollout.MaxNewTokens); err != nil {
			return err
		}
	default:
		return bad("algo.name", "%q: want %s or %s", c.Algo.Name, AlgoGRPO, AlgoLANPO)
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

// Algorithms (algo.name).
const (
	AlgoGRPO  = "grpo"
	AlgoLANPO = "lanpo"
)

// YAML renders the resolved configuration (written into the run
// directory and printed by --dry-run).
func (c Config) YAML() string {
	b, _ := yaml.Marshal(c)
	return string(b)
}

// PromptFormat is how the config turns a problem into the chat the policy
// solves.
func (c Config) PromptFormat() rl.PromptFormat {
	return rl.PromptFormat{SystemPrompt: c.Data.SystemPrompt, PromptTemplate: c.Data.PromptTemplate, EnableThinking: c.Rollout.EnableThinking}
}

// FeedbackSettings are what LANPO's feedback builder takes from the config
// (training, lanpo eval, lanpo seed).
func (c Config) FeedbackSettings() feedback.Settings {
	return feedback.Settings{LANPO: c.LANPO, Format: c.PromptFormat(), MaxNewTokens: c.Rollout.MaxNewTokens,
		Generate: c.Rollout.GenerateOptions(), Seed: c.Seed}
}
