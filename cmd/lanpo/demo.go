package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/demo"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "train a small model on an embedded world: SFT, then GRPO and LANPO side by side, with a report",
		Description: "Generates a world (--world; disjoint SFT, RL and held-out problems from --seed), builds a small Qwen2\n" +
			"model and tokenizer from scratch, runs SFT on the world's answers and on LANPO's skills written by the\n" +
			"world as teacher (summaries, reflections, condensed plans), then RL arms from the SFT checkpoint with\n" +
			"the same problems, seeds and steps, each evaluated on the same held-out problems. Every stage uses the\n" +
			"code of lanpo sft, lanpo train and lanpo eval. No downloads.\n\n" +
			"Worlds (docs/demo.md):\n" +
			"  transfer    families of an invented word (\"What is 7 zorp 3?\") whose unstated rule is one of K\n" +
			"              patterns: found only by exploring, and once found one sentence that answers the family\n" +
			"  control     the same surface, every problem with its own rule and a worked example of it: lessons\n" +
			"              from one problem say nothing about another\n" +
			"  arithmetic  one- and two-digit arithmetic: errors are digit facts\n\n" +
			"Arms: grpo; lanpo (lanpo.train_prompt sampled); lanpo-original (original, truncated importance\n" +
			"weights); lanpo-consolidate (sampled, lanpo.consolidate " + fmt.Sprint(demo.ConsolidateLambda) + "); lanpo-oracle (transfer world: the\n" +
			"consolidation arm with the family's true rule as its plan once RL has found it — an upper bound, not a\n" +
			"method); grpo-budget (GRPO with --budget-steps); grpo-lora (GRPO with LoRA adapters); sdpo and critique-grpo\n" +
			"(the other language-feedback methods at their defaults, docs/feedback-methods.md); grpo-gspo and grpo-cispo (GRPO\n" +
			"with algo.policy_loss gspo or cispo at its own clip range). In the rule worlds the LANPO arms read lessons in outcome\n" +
			"order (the fair test's choice, docs/benchmarks.md). Default: " + strings.Join(demo.DefaultArms, ", ") + " (no oracle\n" +
			"outside the transfer world); --compare runs " + strings.Join(demo.Arms, ", ") + ".\n" +
			"--rl-seeds N runs every arm with N RL seeds from one SFT model (RUN_DIR, RUN_DIR/rl-2, …); `lanpo demo\n" +
			"paired` compares arms over such runs with intervals. --model-size medium or large trains a larger model.\n" +
			"RUN_DIR/report.html: held-out accuracy per group after SFT and each arm (LANPO also retrieval-augmented\n" +
			"and self-corrective), curves against step, tokens and wall time with the SFT model at step 0; in the\n" +
			"rule worlds the ceiling (SFT with the rule told), predictions beside outcomes, and each step of LANPO's\n" +
			"mechanism per arm and family. Times on 2 CPU cores: docs/benchmarks.md (\"Demo\"); --fast is a short run.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "world", Value: demo.WorldTransfer, Usage: "the world: " + strings.Join(demo.WorldNames, ", ")},
			&cli.StringFlag{Name: "run-dir", Value: "runs/demo"},
			&cli.Int64Flag{Name: "seed", Value: 1},
			&cli.BoolFlag{Name: "fast", Usage: "a short variant (for tests and a first look)"},
			&cli.BoolFlag{Name: "compare", Usage: "run every RL arm: " + strings.Join(demo.Arms, ", ")},
			&cli.StringFlag{Name: "arms", Usage: "RL arms to run, comma-separated (default " + strings.Join(demo.DefaultArms, ",") + ")"},
			&cli.Float64Flag{Name: "p-t", Usage: "lanpo.feedback_ratio of the LANPO arms (default: 0.75)"},
			&cli.StringFlag{Name: "sft-from", Usage: "start the arms from this SFT checkpoint instead of training one (same --seed as the run that made it; the transfer and control worlds share one SFT)"},
			&cli.IntFlag{Name: "rl-seeds", Value: 1, Usage: "RL seeds per arm, sharing one SFT model: seed 1 in --run-dir, seed r in --run-dir/rl-r"},
			&cli.StringSliceFlag{Name: "set", Usage: "override a config key of every arm but grpo and grpo-budget: --set lanpo.lesson_order=outcome, --set lora.r=8, --set sdpo.lambda=0.5 (repeatable)"},
			&cli.StringFlag{Name: "model-size", Value: "small", Usage: "the built-in model: small (≈ 0.8 M parameters), medium (≈ 8 M) or large (≈ 76 M, for a GPU)"},
			&cli.BoolFlag{Name: "sft-lessons", Usage: "the rule worlds' SFT also teaches solving with lessons shown (lanpo.context: lessons; on by itself with --set lanpo.context=lessons)"},
			&cli.IntFlag{Name: "budget-steps", Usage: "steps of the grpo-budget arm (default: twice the other arms')"},
			&cli.BoolFlag{Name: "force", Usage: "replace --run-dir even if it is not an earlier demo run (by default a non-empty directory without demo.json is refused)"},
		},
		Subcommands: []*cli.Command{demoPairedCommand()},
		Action: func(c *cli.Context) error {
			o := demo.Options{RunDir: c.String("run-dir"), World: c.String("world"), Seed: c.Int64("seed"), Fast: c.Bool("fast"), Force: c.Bool("force"), Log: c.App.Writer,
				PT: c.Float64("p-t"), SFT: c.String("sft-from"), RLSeeds: c.Int("rl-seeds"), Set: c.StringSlice("set"), BudgetSteps: c.Int("budget-steps"),
				ModelSize: c.String("model-size"), SFTLessons: c.Bool("sft-lessons")}
			if o.RLSeeds < 1 {
				return usageError{cliError(fmt.Sprintf("--rl-seeds %d: want ≥ 1", o.RLSeeds))}
			}
			switch {
			case c.Bool("compare"):
				o.Arms = demo.Arms
			case c.String("arms") != "":
				o.Arms = strings.Split(c.String("arms"), ",")
			}
			if isTerminal(os.Stderr) {
				o.Progress = os.Stderr
			}
			return demo.Run(c.Context, o)
		},
	}
}

func demoPairedCommand() *cli.Command {
	return &cli.Command{
		Name:      "paired",
		Usage:     "compare demo arms over seeds: paired differences, intervals and sign-flip tests over SFT models, a hierarchical bootstrap",
		ArgsUsage: " ",
		Description: "Reads every demo_results.json under each ARM@RUN_DIR (the run directory and those below it, as\n" +
			"--rl-seeds writes them) and pairs the baseline's runs with each --arm's by world, --seed, the SFT\n" +
			"checkpoint the arms started from (its digest), --model-size, --fast and RL seed — the same SFT model and\n" +
			"RL problems; the same world, seed and RL seed from another SFT model, or a results file without these, is\n" +
			"an error naming the file. RL seeds share their SFT model, so the statistics are over SFT models: each\n" +
			"one's mean difference over its RL seeds, their mean, its 95% t-interval and the exact two-sided\n" +
			"sign-flip p (with k SFT models the smallest possible is 2/2^k), and d_z (mean over their spread); for\n" +
			"the outcomes measured per family also a hierarchical bootstrap (SFT models, then RL seeds and families\n" +
			"within each). Outcomes: held-out zero-shot accuracy, families learned (≥ 0.75 of a family's held-out\n" +
			"problems right), the area under the held-out curve (rule worlds), and the held-out canonical answers'\n" +
			"bare-prompt log-likelihood, whole and over the rule they name (a continuous endpoint). Markdown tables per\n" +
			"--arm; LABEL=ARM@RUN_DIR names a row.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "baseline", Required: true, Usage: "ARM@RUN_DIR of the baseline, e.g. grpo@runs/fair/confirm"},
			&cli.StringSliceFlag{Name: "arm", Required: true, Usage: "ARM@RUN_DIR compared with the baseline (repeatable)"},
			&cli.IntFlag{Name: "bootstrap", Value: 10000, Usage: "bootstrap rounds (0: none)"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "the bootstrap's seed"},
		},
		Action: func(c *cli.Context) error {
			base, err := demo.ParseArmRef(c.String("baseline"))
			if err != nil {
				return usageError{fmt.Errorf("--baseline %w", err)}
			}
			var arms []demo.ArmRef
			for _, s := range c.StringSlice("arm") {
				a, err := demo.ParseArmRef(s)
				if err != nil {
					return usageError{fmt.Errorf("--arm %w", err)}
				}
				arms = append(arms, a)
			}
			res, err := demo.Paired(base, arms, c.Int("bootstrap"), c.Int64("seed"))
			if err != nil {
				return err
			}
			demo.WritePaired(c.App.Writer, res)
			return nil
		},
	}
}

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write RUN_DIR/report.html from a run's metrics and evaluations",
		ArgsUsage: "RUN_DIR",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errMissingRunDir}
			}
			dir := c.Args().First()
			if err := demo.WriteReport(dir); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "report: %s\n", filepath.Join(dir, "report.html"))
			return nil
		},
	}
}

var errMissingRunDir = cliError("report: want exactly one RUN_DIR argument")

type cliError string

func (e cliError) Error() string { return string(e) }
