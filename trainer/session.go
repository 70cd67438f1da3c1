package trainer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/progress"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
)

// ErrInterrupted is returned when a run stopped on a signal after saving a
// checkpoint.
var ErrInterrupted = errors.New("interrupted")

// RunOptions are the caller's switches that are not part of the config.
type RunOptions struct {
	Progress io.Writer // a terminal for the progress line, or nil
	// Evaluate runs the eval: section's benchmarks on the current policy
	// every eval.every steps (lanpo train wires in eval's evaluator; nil: no
	// evaluation). It must leave the model as it found it and draw no
	// randomness from the run; its results go into that step's metrics line
	// as eval/… keys.
	Evaluate Evaluator
	// Comm is the process group of a data-parallel run (dist.Init under
	// lanpo launch or torchrun); nil: one process. Every rank runs the same
	// loop; rank 0 writes metrics, the progress line and the shared parts
	// of checkpoints.
	Comm dist.Comm
	// NoFinalCheckpoint skips the checkpoint written when the run ends
	// (benchmarks: a 7B model's optimizer state is tens of GB to write).
	NoFinalCheckpoint bool
	// AllowChanges are config keys (or sections) a resume may change
	// although they change what the run computes (--allow-change);
	// SetAsideNewer moves run_dir's checkpoints newer than the resumed one
	// aside instead of refusing (--set-aside-newer). See resume.go.
	AllowChanges  []string
	SetAsideNewer bool
	// Oracle writes LANPO's abstraction plans in place of retrieval and the
	// condenser (feedback.Oracle; lanpo demo's oracle arm); nil: LANPO's own.
	Oracle feedback.Oracle
	// Span marks the part of a response that carries its decision, for
	// diagnostics only (rl.Span; the demo's rule name): consolidation's
	// NLL and the evaluations' reference NLL are then also reported inside
	// and outside it. nil: none.
	Span rl.Span
}

// Evaluator evaluates the policy after a step and returns named results;
// p is the run's experience pool (nil for GRPO and SFT), which it must not
// change. Check runs before the first step: what can be checked without
// evaluating, so that a bad benchmark stops the run at its start.
type Evaluator interface {
	Check(m *model.Model, tk *tokenizer.Tokenizer) error
	Evaluate(step int, m *model.Model, tk *tokenizer.Tokenizer, p *pool.Pool) (map[string]float64, error)
}

// session is what SFT and GRPO share: the policy, tokenizer, optimizer,
// state, metrics and the step loop with its checkpoints.
type session struct {
	cfg         Config
	kind        string
	modelDir    string      // the initial model (reference, tokenizer source)
	tokFiles    []namedFile // the tokenizer's files, written into every checkpoint
	m           *model.Model
	tk          *tokenizer.Tokenizer
	opt         optim.Optimizer
	noFinalSave bool            // RunOptions.NoFinalCheckpoint
	oracle      feedback.Oracle // RunOptions.Oracle
	span        rl.Span         // RunOptions.Span
	comm        dist.Comm
	state       TrainerState
	metrics     *metricsLog
	prog        *progress.Bar
	lastSave    int
	// resumedFrom is the checkpoint the run resumed from ("" for a fresh
	// run); saveExtra write more state into each checkpoint directory (the
	// LANPO pool).
	resumedFrom string
	// configYAML is the config as the user gave it, resolved (the one a
	// resume compares with), kept in every checkpoint.
	configYAML string
	saveExtra  []func(dir string) error
	evaluate   Evaluator
	// undoDeterministic restores torch's deterministic-algorithms setting
	// a CUDA run changed (nil: unchanged).
	undoDeterministic func()
	// hb logs the step's phase where no progress bar shows (rank 0;
	// nil: off).
	hb *heartbeat
}

// openSession loads the policy (from the resume checkpoint if any), the
// tokenizer and the optimizer, and writes the resolved config.
func openSession(cfg Config, resume, kind string, opts RunOptions) (s *session, err error) {
	// A Config built in Go (the library API) is resolved and checked as
	// LoadConfig's are; a loaded one is left as it was.
	if err := cfg.Validate(); err != nil {
		return nil, ConfigError{err}
	}
	runtime.LockOSThread() // all torch work of the run happens on this thread (CONTRIBUTING.md, Threads)
	// Whatever ran on this thread before may have left autograd off.
	csrc.SetGradEnabled(true)
	if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	sess := &session{cfg: cfg, kind: kind, lastSave: -1, evaluate: withSpan(opts.Evaluate, opts.Span), comm: opts.Comm, noFinalSave: opts.NoFinalCheckpoint, oracle: opts.Oracle, span: opts.Span, configYAML: cfg.YAML()}
	if sess.comm == nil {
		sess.comm = dist.Single()
	}
	s = sess
	defer func() {
		if err != nil {
			sess.Close()
		}
	}()
	// The device is made current on this thread before any CUDA work
	// (UseDevice), and a CUDA run computes deterministically unless
	// train.deterministic is false.
	dev, err := UseDevice(cfg.Device)
	if err != nil {
		return nil, ConfigError{fmt.Errorf("config key device: %w", err)}
	}
	if dev.IsCuda() && cfg.Train.DeterministicCUDA() {
		if s.undoDeterministic, err = deterministicCUDA(); err != nil {
			return nil, err
		}
	}
	// Rank 0 verifies the checkpoint (and sets a corrupt one aside); every
	// rank resumes from its choice.
	var ckpt string
	if s.comm.Rank() == 0 {
		ckpt, err = ResolveResume(cfg.RunDir, resume)
	}
	chosen, err := agree(s.comm, err, ckpt)
	if err != nil {
		return nil, err
	}
	ckpt = chosen[0]
	if err := s.seesCheckpoint(ckpt); err != nil {
		return nil, err
	}
	var saved TrainerState
	var rc resumeCheck
	if ckpt != "" {
		if saved, err = readState(ckpt); err != nil {
			return nil, err
		}
		// A Go-built config without algo.name once recorded kind "": grpo.
		if saved.Kind == "" && kind == AlgoGRPO {
			saved.Kind = AlgoGRPO
		}
		if saved.Kind != kind {
			return nil, ConfigError{fmt.Errorf("--resume %s: a %s checkpoint, this is %s", ckpt, saved.Kind, kind)}
		}
		if rc, err = checkResume(cfg, ckpt, saved.Step, opts); err != nil {
			return nil, err
		}
	} else if resume == "auto" {
		log.Warn().Str("run_dir", cfg.RunDir).Msg("--resume auto: no complete checkpoint in the run directory; starting from step 0")
	}
	if _, builtin := strings.CutPrefix(cfg.Model, builtinPrefix); !builtin && (ckpt == "" || cfg.LoRA.On()) {
		// The run loads cfg.Model: say so plainly before writing anything.
		if err := model.CheckDir(cfg.Model); err != nil {
			return nil, bad("model", "%v; put the model there or --set model=DIR", err)
		}
	}
	if s.modelDir, err = s.prepareRunDir(cfg, ckpt, rc); err != nil {
		return nil, err
	}
	from, tokDir := s.modelDir, s.modelDir
	if cfg.Tokenizer != "" {
		tokDir = cfg.Tokenizer
	}
	if ckpt != "" {
		tokDir = ckpt
		if !cfg.LoRA.On() {
			from = ckpt // with LoRA a checkpoint holds the adapters; the base is the model's
		}
	}
	if s.m, err = model.Load(from, cfg.LoadOptions()); err != nil {
		return nil, err
	}
	if cfg.LoRA.On() {
		if err := s.attachLoRA(ckpt, kind != "sft" && cfg.Algo.KLBeta > 0 && cfg.LoRA.InitFrom != ""); err != nil {
			return nil, err
		}
	}
	log.Info().Str("device", devName(s.m.Device)).Str("dtype", csrc.DTypeName(s.m.DType)).
		Str("logprob_kernel", csrc.LogProbKernel(s.m.Device, s.m.DType)).Str("attention", s.m.AttentionName()).Bool("activation_checkpointing", cfg.Train.ActivationCheckpointing).
		Str("model", from).Msg("run")
	if s.tk, err = tokenizer.Load(tokDir); err != nil {
		return nil, err
	}
	if s.tokFiles, err = readTokenizerFiles(tokDir); err != nil {
		return nil, err
	}
	if format := cfg.ChatFormat; format != "" {
		if err := s.tk.SetChatFormat(format); err != nil {
			return nil, fmt.Errorf("config key chat_format: %w", err)
		}
	}
	o := cfg.Optim
	if s.opt, err = optim.NewOptimizer(s.m.TrainableParams(), optim.Hyper{Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay}, s.comm, cfg.Dist.ZeroStage,
		int64(cfg.Dist.BucketMB)<<20, cfg.Train.ActivationCheckpointing, cfg.momentGroups(kind)...); err != nil {
		return nil, err
	}
	s.state = TrainerState{Kind: kind, Seed: cfg.Seed, Cursor: Cursor{Seed: cfg.Seed}}
	if ckpt != "" {
		if err := s.opt.Load(ckpt); err != nil {
			return nil, err
		}
		s.state = saved
		s.lastSave, s.resumedFrom = s.state.Step, ckpt
		log.Info().Str("checkpoint", ckpt).Int("step", s.state.Step).Msg("resumed")
	}
	s.metrics = &metricsLog{}
	if s.comm.Rank() == 0 {
		if s.metrics, err = openMetrics(cfg.RunDir, cfg.Log.TensorBoardOn(), s.state.Step); err != nil {
			return nil, err
		}
	} else {
		opts.Progress = nil
	}
	s.prog = progress.New(opts.Progress, kind, cfg.TotalSteps, s.state.Step)
	// Rank 0 logs phase lines where no progress bar shows; every rank
	// reports its progress to lanpo launch (hang detection).
	var logEvery time.Duration
	if s.comm.Rank() == 0 && !s.prog.Shown() {
		logEvery = cfg.Log.PhaseInterval()
	}
	s.hb = startHeartbeat(logEvery, dist.NewProgressFile(s.comm.Rank()))
	if s.comm.Rank() == 0 {
		ev := log.Info().Str("run_dir", cfg.RunDir).Str("metrics", filepath.Join(cfg.RunDir, metricsFile))
		if cfg.Log.TensorBoardOn() {
			ev = ev.Str("tensorboard", filepath.Join(cfg.RunDir, tensorboardDir))
		}
		ev.Int("from_step", s.state.Step).Int("total_steps", cfg.TotalSteps).Msg(kind + " run")
	}
	return s, nil
}

// runDirHook, when set (tests), sees the run directory's preparation:
// "writing" and "written" on rank 0 around its writes, "ready" on every
// rank before it reads anything from the run directory.
var runDirHook func(rank int, event string)

// prepareRunDir writes what a run puts into run_dir before training — on
// a resume the newer checkpoints set aside and the config changes
// recorded (rc), the built-in model's directory when the config names one,
// config.resolved.yaml, and the metrics file (the checkpoint's, or none) —
// on rank 0 alone; the other ranks wait for it and then read the same
// files (before, every rank wrote them at once and a rank could read
// another's half-written tokenizer.json). It returns the model directory.
func (s *session) prepareRunDir(cfg Config, ckpt string, rc resumeCheck) (string, error) {
	hook := func(event string) {
		if runDirHook != nil {
			runDirHook(s.comm.Rank(), event)
		}
	}
	var err error
	if s.comm.Rank() == 0 {
		hook("writing")
		err = func() error {
			if err := rc.apply(cfg.RunDir); err != nil {
				return err
			}
			if _, err := resolveModel(&cfg); err != nil {
				return err
			}
			if err := fsutil.WriteFileSync(filepath.Join(cfg.RunDir, "config.resolved.yaml"), []byte(cfg.YAML())); err != nil {
				return err
			}
			if ckpt != "" {
				return restoreMetrics(ckpt, cfg.RunDir)
			}
			if err := os.Remove(filepath.Join(cfg.RunDir, metricsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}()
		hook("written")
	}
	if _, err := agree(s.comm, err, ""); err != nil {
		return "", fmt.Errorf("preparing %s: %w", cfg.RunDir, err)
	}
	hook("ready")
	return modelDir(cfg), nil
}

func (s *session) Close() {
	s.hb.Close()
	if s.metrics != nil {
		s.metrics.Close()
	}
	if s.opt != nil {
		s.opt.Close()
	}
	if s.m != nil {
		s.m.Close()
	}
	if s.undoDeterministic != nil {
		s.undoDeterministic()
	}
	runtime.UnlockOSThread()
}

// seesCheckpoint checks that every rank sees the checkpoint rank 0 chose
// (every rank must see the same run directory).
func (s *session) seesCheckpoint(ckpt string) error {
	var err error
	if ckpt != "" {
		if _, serr := os.Stat(filepath.Join(ckpt, manifestFile)); serr != nil {
			err = fmt.Errorf("--resume checkpoint %s, chosen by rank 0, is not there for rank %d (every rank must see the same run directory): %w", ckpt, s.comm.Rank(), serr)
		}
	}
	_, err = agree(s.comm, err, "")
	return err
}

// LoadOptions are the model options the config asks for (checked by
// Validate and by checkDevice at the start of a run).
func (c Config) LoadOptions() model.LoadOptions {
	var o model.LoadOptions
	if c.DType != "" {
		o.DType, _ = csrc.ParseDType(c.DType)
	}
	o.Device, _ = ParseDevice(c.Device)
	return o
}
