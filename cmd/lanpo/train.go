package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/trainer"
)

// runFlags are shared by sft and train.
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "run config (YAML)", Required: true},
		&cli.StringSliceFlag{Name: "set", Usage: "override a config key: --set algo.clip_high=0.28 (repeatable)"},
		&cli.BoolFlag{Name: "dry-run", Usage: "validate the config, print it resolved, and exit"},
		&cli.StringFlag{Name: "resume", Usage: "auto (the run's newest complete checkpoint) or a checkpoint directory; the config is compared with the one the checkpoint was trained with"},
		&cli.StringSliceFlag{Name: "allow-change", Usage: "on --resume, accept a changed config KEY (or a whole section) that changes what the run computes, e.g. optim.lr (repeatable; every change is recorded in run_dir/config_changes.jsonl)"},
		&cli.BoolFlag{Name: "set-aside-newer", Usage: "on --resume from an older checkpoint, move run_dir's newer checkpoints and metrics to run_dir/set-aside/TIME/ instead of refusing"},
		&cli.StringFlag{Name: "device", Usage: "auto (the GPU where this build and machine have one, else cpu), cpu, cuda (cuda:$LOCAL_RANK under torchrun or lanpo launch) or cuda:N; overrides the config's device (default: the config's, auto unless set)"},
	}
}

func trainCommand() *cli.Command {
	return &cli.Command{
		Name:  "train",
		Usage: "GRPO, LANPO, SDPO or Critique-GRPO training from verified math rewards or your own (config file + overrides)",
		Description: "Runs GRPO as the config says: prompts from data.train ({\"id\",\"problem\",\"answer\"} JSONL) through the\n" +
			"chat template, rollout.samples_per_prompt samples each, rewards from reward.kind (math: the verifier, the\n" +
			"default; command or http: your program or server, docs/rewards.md), group-normalized\n" +
			"advantages, clipped policy loss (clip_low/clip_high), optional KL to the initial policy, AdamW.\n" +
			"algo.name: lanpo adds LANPO: with probability lanpo.feedback_ratio a prompt carries feedback from the\n" +
			"experience pool — the model's own earlier attempt to critique and redo (reflection) or a plan condensed\n" +
			"from related problems' principles and pitfalls (abstraction); after each step the policy summarizes\n" +
			"its rollouts into the pool, which every checkpoint holds (see lanpo pool, docs/lanpo.md). lanpo.consolidate λ\n" +
			"> 0 also trains each verified answer found with feedback as the answer to the bare problem — the path from\n" +
			"what the context found to the weights; the recipe uses 4 (lanpo.consolidate_norm, lanpo.consolidate_lr: docs/lanpo.md,\n" +
			"\"Consolidation\"). log.update_diagnostics measures what the update does with it (docs/metrics.md).\n" +
			"algo.name, one of (docs/feedback-methods.md):\n" + trainer.MethodsHelp() +
			"algo.policy_loss: ppo (the default), gspo or cispo: the policy loss, with any algo.name (docs/feedback-methods.md, \"Policy losses\").\n" +
			"lora.r > 0 (or lora.init_from) trains LoRA adapters on the frozen model; a checkpoint then holds a PEFT\n" +
			"adapter directory instead of the model, and the KL reference is the model with its adapters off\n" +
			"(docs/lora.md; lanpo export --merge writes a full model).\n" +
			"Writes RUN_DIR/metrics.jsonl, config.resolved.yaml and checkpoints/step-NNNNNN/ (a Hugging Face model\n" +
			"directory plus optimizer and trainer state, and the resolved config as config.yaml). SIGINT/SIGTERM: the\n" +
			"step finishes, a checkpoint is saved, exit 130; a second signal exits 130 at once without saving the step\n" +
			"in progress. Continue with --resume auto. A resume compares the config with the checkpoint's: changes to\n" +
			"total_steps, checkpoint.*, log.*, eval.*, dist.*, device and run_dir are accepted, any other needs\n" +
			"--allow-change KEY; each is recorded in RUN_DIR/config_changes.jsonl. A resume from a checkpoint older\n" +
			"than run_dir's newest refuses unless --set-aside-newer. Example: lanpo train --config configs/tiny-grpo.yaml",
		Flags:  runFlags(),
		Action: func(c *cli.Context) error { return runTraining(c, "train", trainer.RunGRPO) },
	}
}

func sftCommand() *cli.Command {
	return &cli.Command{
		Name:  "sft",
		Usage: "supervised fine-tuning on chat JSONL (loss on assistant tokens)",
		Description: "Fine-tunes on data.train ({\"messages\": [...]} JSONL): the loss is the mean negative log-likelihood of\n" +
			"assistant tokens, sequences up to sft.max_len, sft.micro_batch_size × sft.grad_accum per step, AdamW\n" +
			"with the optim.* schedule, eval loss on data.eval every sft.eval_every steps. Checkpoints, metrics and\n" +
			"resume as in `lanpo train`; LoRA too (lora.r > 0, with lora.dropout on the adapters' inputs here: docs/lora.md).\n" +
			"Example: lanpo sft --config configs/tiny-sft.yaml",
		Flags:  runFlags(),
		Action: func(c *cli.Context) error { return runTraining(c, "sft", trainer.RunSFT) },
	}
}

type runFunc func(context.Context, trainer.Config, string, trainer.RunOptions) error

func runTraining(c *cli.Context, command string, run runFunc) error {
	sets := c.StringSlice("set")
	if d := c.String("device"); d != "" {
		sets = append(sets, "device="+d)
	}
	cfg, err := trainer.LoadConfig(c.String("config"), sets)
	if err != nil {
		return usageError{err}
	}
	if c.Bool("dry-run") {
		kind := "sft"
		if command == "train" {
			kind = cfg.Algo.Name
		}
		if err := cfg.ResolveRun(kind); err != nil {
			return usageError{err}
		}
		fmt.Fprint(c.App.Writer, cfg.YAML())
		return nil
	}
	resume := c.String("resume")
	// A worker restarted by lanpo launch --max-restarts or torchrun
	// (TORCHELASTIC_RESTART_COUNT > 0) continues from the run's newest
	// checkpoint, as --resume auto; before the first checkpoint it starts
	// as the command line says.
	if n, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT")); n > 0 && resume != "auto" {
		if dir := trainer.NewestCheckpoint(cfg.RunDir); dir != "" {
			log.Warn().Int("restart", n).Str("newest", dir).Str("resume_flag", resume).Msg("restarted worker: resuming from the newest checkpoint (--resume auto)")
			resume = "auto"
		}
	}
	if resume == "" {
		if dir := trainer.NewestCheckpoint(cfg.RunDir); dir != "" {
			return usageError{fmt.Errorf("run_dir %s already has checkpoints (newest: %s): pass --resume auto to continue it, or choose another run_dir", cfg.RunDir, dir)}
		}
	}
	ctx, stop := interruptible(c.Context, cfg.RunDir)
	defer stop()
	opts := trainer.RunOptions{AllowChanges: c.StringSlice("allow-change"), SetAsideNewer: c.Bool("set-aside-newer")}
	if isTerminal(os.Stderr) {
		opts.Progress = os.Stderr
	}
	comm, err := joinGroup(cfg)
	if err != nil {
		return err
	}
	if comm != nil {
		defer comm.Close()
		opts.Comm = comm
		if comm.Rank() != 0 {
			opts.Progress = nil
		}
	}
	if cfg.Eval.Every > 0 {
		// Every rank evaluates alike; rank 0 writes the samples.
		if opts.Evaluate, err = trainer.TrainingEvaluator(cfg, comm == nil || comm.Rank() == 0); err != nil {
			return usageError{err}
		}
	}
	err = run(ctx, cfg, resume, opts)
	if errors.Is(err, trainer.ErrInterrupted) {
		log.Warn().Str("run_dir", cfg.RunDir).Msg("interrupted: checkpoint saved; continue with --resume auto")
		return cli.Exit("", 130)
	}
	return err
}

// joinGroup joins the data-parallel process group when lanpo launch or
// torchrun started this process (WORLD_SIZE set), else returns nil.
func joinGroup(cfg trainer.Config) (dist.Comm, error) {
	env, launched, err := dist.FromEnv()
	if err != nil {
		return nil, usageError{err}
	}
	if !launched || env.World == 1 {
		return nil, nil
	}
	if _, err := trainer.ParseDevice(cfg.Device); err != nil {
		return nil, usageError{fmt.Errorf("config key device: %w", err)}
	}
	if gloo, nccl, why := dist.Available(); !gloo && !nccl {
		return nil, fmt.Errorf("WORLD_SIZE=%d, but this lanpo has no distributed support: %s", env.World, why)
	}
	// This rank's GPU (LOCAL_RANK's) becomes current before NCCL or anything
	// else touches CUDA; the run itself happens on this same locked thread.
	dev, err := trainer.UseDevice(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("config key device: %w", err)
	}
	log.Info().Int("rank", env.Rank).Int("world_size", env.World).Int("local_rank", env.LocalRank).Str("master", fmt.Sprintf("%s:%d", env.MasterAddr, env.MasterPort)).
		Bool("agent_store", env.AgentStore).Msg("joining the process group")
	return dist.Init(env, dist.Options{Backend: cfg.Dist.Backend, Timeout: cfg.Dist.TimeoutDuration(), Device: dev})
}

// secondSignal says what a second signal leaves behind.
func secondSignal(runDir string) string {
	if ckpt := trainer.NewestCheckpoint(runDir); ckpt != "" {
		return "second signal: exiting now; the step in progress is not saved; the newest complete checkpoint, " + ckpt + ", is intact: continue with --resume auto"
	}
	return "second signal: exiting now; no checkpoint of " + runDir + " has been saved yet, so nothing of this run is kept: a rerun starts from step 0"
}

// interruptible returns a context that the first SIGINT or SIGTERM cancels:
// the trainer finishes its step, saves a checkpoint and returns. A second
// signal exits at once with status 130, without saving the step in
// progress; checkpoints are written to a temporary directory and renamed,
// so the newest complete one stays intact and --resume auto continues
// from it.
func interruptible(parent context.Context, runDir string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			log.Warn().Str("signal", sig.String()).Msg("finishing the step and saving a checkpoint; a second signal stops at once without saving it")
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			log.Error().Str("signal", sig.String()).Msg(secondSignal(runDir))
			os.Exit(130)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
