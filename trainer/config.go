package trainer

import (
	"time"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/tools"
)

// Config is a run's configuration, mapped 1:1 onto the YAML keys (and onto
// --set key=value overrides with dotted paths, e.g. algo.clip_high=0.28).
// Validate fills defaults and names the bad key.
type Config struct {
	RunDir         string `yaml:"run_dir"`   // default in a config file: runs/<the file's name without .yaml>
	Model          string `yaml:"model"`     // HF model directory, or builtin:tiny
	Tokenizer      string `yaml:"tokenizer"` // default: the model directory
	ChatFormat     string `yaml:"chat_format"`
	DType          string `yaml:"dtype"`  // parameters: float32, bfloat16, float64 ("": float32 on CPU, the checkpoint's on CUDA)
	Device         string `yaml:"device"` // auto (default: cuda where this build and machine have one, else cpu), cpu, cuda or cuda:N (cuda: cuda:$LOCAL_RANK under a torchrun-style launch)
	Seed           uint64 `yaml:"seed"`
	TotalSteps     int    `yaml:"total_steps"`      // defines the LR schedule (0: one pass over data.train)
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
	// Reward is how rollouts are scored (reward.Config: kind math — the
	// verifier, the default — command or http, the user's own).
	Reward reward.Config `yaml:"reward"`
	// LoRA trains low-rank adapters on a frozen base (model/lora.go;
	// docs/lora.md): off unless lora.r > 0 or lora.init_from is set.
	LoRA model.LoRAConfig `yaml:"lora"`
	// The feedback methods' own sections (their rows in method.go; docs/feedback-methods.md).
	SDPO     SDPOConfig     `yaml:"sdpo"`
	Critique CritiqueConfig `yaml:"critique"`
	// Tools the policy may call inside a rollout (tools.Spec: the built-in
	// python, or a user's command); declared in the system turn. Empty: one
	// turn, no tools. docs/tools.md.
	Tools []tools.Spec `yaml:"tools,omitempty"`
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
	// SkipLongPrompts leaves out (and counts) the problems whose prompt
	// and max_new_tokens exceed the model's context; otherwise such a
	// problem stops the run before its first step (lanpo eval:
	// --skip-long-prompts).
	SkipLongPrompts bool `yaml:"skip_long_prompts"`
	// ReferenceNLL: zero-shot, also score each problem's reference
	// solution (its "solution" field, where it has one) teacher-forced
	// after the prompt — eval/BENCH/zero-shot/reference_nll, a continuous
	// measure beside accuracy (lanpo eval: --reference-nll).
	ReferenceNLL bool `yaml:"reference_nll"`
	// Tools adds lanpo eval's tools mode beside zero-shot: these tools
	// (python, or names from the tools: section) declared and run,
	// multi-turn; the summary compares with and without (lanpo eval:
	// --tools; docs/tools.md).
	Tools []string `yaml:"tools,omitempty"`
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
	// answerOptional: a record may lack the answer (a reward kind other
	// than math judges without one); Resolve sets it.
	answerOptional bool
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
	// (weights, optimizer state, reference model); a prompt whose group
	// alone cannot fit is an error. MaxBatchRows caps the rows at once on
	// any device (0: no cap). With more rows than that, the rows decode in
	// slots: a finished row's slot takes the next waiting sample
	// (model/slots.go). Neither changes the samples.
	GPUMemoryFraction float64 `yaml:"gpu_memory_fraction"`
	MaxBatchRows      int     `yaml:"max_batch_rows"`
	// SyncEvery: decode steps run on the device without the host between
	// two reads of the sampled tokens (0: 16): fewer host round trips
	// against a few wasted steps per finished row. A response that ends in
	// between drops what it sampled after its end; any value up to 16
	// samples bit for bit the same (model.GenerateOptions.SyncEvery).
	SyncEvery int `yaml:"sync_every"`
	// CUDAGraphs replays decode steps as CUDA graphs on a CUDA device
	// (fewer kernel launches from the host; the same samples). Off by
	// default: not yet measured on a GPU.
	CUDAGraphs bool `yaml:"cuda_graphs"`
	// With tools: MaxTurns tool turns per trajectory (0: 4),
	// MaxToolOutputTokens per call's output (0: 512), ToolSandbox where the
	// python tool runs (namespaces, the default, or none: only for code
	// you trust); docs/tools.md.
	MaxTurns            int    `yaml:"max_turns,omitempty"`
	MaxToolOutputTokens int    `yaml:"max_tool_output_tokens,omitempty"`
	ToolSandbox         string `yaml:"tool_sandbox,omitempty"`
	// ToolFormat is how the model calls: hermes (the chat template's
	// <tool_call> blocks, declared in the system turn; the default) or
	// fenced (```python blocks run as their fence closes, answered with
	// ```output blocks; python only; nothing declared).
	ToolFormat string `yaml:"tool_format,omitempty"`
	// ToolLockstep: each look of the engine waits for every parked
	// trajectory's tool answer, so which rows share a decode step never
	// depends on the tools' timing — with deterministic tools a run then
	// resumes bit for bit; a slow tool stalls the batch (docs/tools.md).
	ToolLockstep bool `yaml:"tool_lockstep,omitempty"`
}

// GenerateOptions are the generation engine's settings from the rollout
// section.
func (r RolloutConfig) GenerateOptions() model.GenerateOptions {
	return model.GenerateOptions{MaxRows: r.MaxBatchRows, MemoryFraction: r.GPUMemoryFraction, SyncEvery: r.SyncEvery, CUDAGraphs: r.CUDAGraphs}
}

// AlgoConfig are GRPO's loss settings (LANPO's update is GRPO's).
type AlgoConfig struct {
	Name     string `yaml:"name"` // a training method (method.go's table): grpo (the default), lanpo, …
	AdvNoStd bool   `yaml:"adv_no_std"`
	// PolicyLoss is the policy surrogate: ppo (PPO's clipped token ratio,
	// the default), gspo (a clipped sequence ratio) or cispo (the clipped
	// token ratio as a detached weight on log π); loss_variants.go.
	PolicyLoss string `yaml:"policy_loss"`
	// ClipLow, ClipHigh are ε_low, ε_high; unset: the policy loss's own
	// (ClipDefaults: ppo 0.2/0.28, gspo 3e-4/4e-4, cispo 1/0.2).
	ClipLow        *float64 `yaml:"clip_low"`
	ClipHigh       *float64 `yaml:"clip_high"`
	KLBeta         float64  `yaml:"kl_beta"`
	KLEstimator    string   `yaml:"kl_estimator"`
	LossAggMode    string   `yaml:"loss_agg_mode"`
	Epochs         int      `yaml:"epochs"` // μ: passes over each batch
	MicroBatchSize int      `yaml:"micro_batch_size"`
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

// policyLossConfig is the policy loss's settings (clip ranges resolved).
func (a AlgoConfig) policyLossConfig() PolicyLossConfig {
	return PolicyLossConfig{Kind: a.PolicyLoss, ClipLow: *a.ClipLow, ClipHigh: *a.ClipHigh, Beta: a.KLBeta, KL: a.KLEstimator}
}

// resolveLoss checks algo.policy_loss and fills unset clip ranges with
// its defaults.
func (a *AlgoConfig) resolveLoss() error {
	if a.PolicyLoss == "" {
		a.PolicyLoss = LossPPO
	}
	lo, hi, err := ClipDefaults(a.PolicyLoss)
	if err != nil {
		return bad("algo.policy_loss", "%v", err)
	}
	if a.ClipLow == nil {
		a.ClipLow = &lo
	}
	if a.ClipHigh == nil {
		a.ClipHigh = &hi
	}
	// CISPO's lower bound may reach 0 (ε_low 1: no lower bound), a ratio's
	// may not.
	maxLow := 1.0
	if a.PolicyLoss == LossCISPO {
		maxLow = 1.0 + 1e-12
	}
	switch {
	case !finite(*a.ClipLow) || *a.ClipLow < 0 || *a.ClipLow >= maxLow:
		return bad("algo.clip_low", "must be in [0, 1) (cispo: [0, 1]), got %g", *a.ClipLow)
	case !finite(*a.ClipHigh) || *a.ClipHigh < 0:
		return bad("algo.clip_high", "must be ≥ 0, got %g", *a.ClipHigh)
	}
	return nil
}

// looseSequenceClip: GSPO with a clip range of a token ratio's size —
// the sequence ratio (a geometric mean over the response) moves far less,
// so such a range clips nothing.
func (a AlgoConfig) looseSequenceClip() bool {
	return a.PolicyLoss == LossGSPO && a.ClipLow != nil && a.ClipHigh != nil && (*a.ClipLow >= 0.01 || *a.ClipHigh >= 0.01)
}

// SFTConfig are the supervised fine-tuning settings.
type SFTConfig struct {
	// MaxLen bounds an example in tokens (0: the model's
	// max_position_embeddings, at most DefaultSFTMaxLen).
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
	// PhaseEvery: where no progress bar shows (stderr not a terminal),
	// a line this often while a step runs says its phase and progress
	// (trainer/heartbeat.go); "0" turns it off. A duration such as 30s.
	PhaseEvery string `yaml:"phase_every"`
	// UpdateDiagnostics adds what it costs to measure (docs/metrics.md):
	// an update term's rows measured again after the optimizer step (one
	// more forward over them), and on one process the policy's and the
	// term's gradients apart (one more copy of the gradients).
	UpdateDiagnostics bool `yaml:"update_diagnostics"`
}

// PhaseInterval is log.phase_every parsed (validated at load).
func (l LogConfig) PhaseInterval() time.Duration {
	d, _ := time.ParseDuration(l.PhaseEvery)
	return d
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
	c := Config{
		Seed: 1, MaxBadSteps: 3, Device: DeviceAuto,
		Data:    DataConfig{PromptTemplate: "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."},
		Rollout: RolloutConfig{PromptsPerStep: 8, SamplesPerPrompt: 8, Temperature: 1, TopP: 1, MaxNewTokens: 1024, GPUMemoryFraction: 0.9},
		Algo: AlgoConfig{PolicyLoss: LossPPO, KLEstimator: KLK3, LossAggMode: AggTokenMean, Epochs: 1, TISCap: 2,
			MicroBatchSize: 8, MaxResample: 2},
		SFT:        SFTConfig{MicroBatchSize: 4, GradAccum: 1},
		Optim:      OptimConfig{LR: 1e-6, Schedule: "constant", MinLRRatio: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, GradClip: 1},
		Checkpoint: CheckpointConfig{Every: 50, Keep: 3},
		Eval:       EvalConfig{K: 1, TopP: 1, BatchSize: 8, Seed: 1},
		Dist:       DistConfig{Timeout: "5m", BucketMB: 16},
		Log:        LogConfig{PhaseEvery: "30s"},
		Reward:     reward.DefaultConfig(),
	}
	for _, m := range methods { // each method's own section
		if m.defaults != nil {
			m.defaults(&c)
		}
	}
	return c
}

// PromptFormat is how the config turns a problem into the chat the policy
// solves.
func (c Config) PromptFormat() rl.PromptFormat {
	f := rl.PromptFormat{SystemPrompt: c.Data.SystemPrompt, PromptTemplate: c.Data.PromptTemplate, EnableThinking: c.Rollout.EnableThinking}
	if len(c.Tools) > 0 && c.Rollout.ToolFormat != tools.FormatFenced {
		if set, err := tools.NewSet(c.Tools, nil); err == nil { // validated at load
			f.Tools = set.Declarations()
		}
	}
	return f
}

// FeedbackSettings are what LANPO's feedback builder takes from the config
// (training, lanpo eval, lanpo seed). Its prompts declare no tools: only
// the rollout answers tool calls (a run's LANPO explorer adds the
// declarations back: buildLANPO), and lanpo eval's tools mode adds them
// itself.
func (c Config) FeedbackSettings() feedback.Settings {
	f := c.PromptFormat()
	f.Tools = nil
	return feedback.Settings{LANPO: c.LANPO, Format: f, MaxNewTokens: c.Rollout.MaxNewTokens,
		Generate: c.Rollout.GenerateOptions(), Seed: c.Seed}
}
