package main

import (
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/demo"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "train a small model on an embedded math world: SFT, then LANPO (or all RL arms with --compare), with a report",
		Description: "Generates a math world (one-digit ±, two-digit ± one-digit, two-digit ± two-digit, two-digit ×\n" +
			"one-digit; disjoint SFT, RL and held-out problems from --seed), builds a small Qwen2 model and tokenizer\n" +
			"from scratch, and runs SFT on answers (worked column-method solutions for 40%, bare results for the rest)\n" +
			"plus LANPO's skills written by the world (summaries, reflections, condensed plans). Then RL from the SFT\n" +
			"checkpoint on unseen level 2-4 problems, each arm with the same seeds and rollout budget: LANPO by default;\n" +
			"--compare runs GRPO, LANPO and LANPO training feedback-guided samples on the bare problem. Every stage\n" +
			"uses the code of lanpo sft, lanpo train and lanpo eval. RUN_DIR/report.html: held-out greedy accuracy per\n" +
			"level after SFT and after each arm (LANPO zero-shot, retrieval-augmented and self-corrective), curves of\n" +
			"the arms against step, compute and wall time, LANPO's feedback accuracy and pool, a reflection as the\n" +
			"model wrote it. No downloads. Times on 2 CPU cores: docs/benchmarks.md (\"Demo\"); --fast is a short run.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "run-dir", Value: "runs/demo"},
			&cli.Int64Flag{Name: "seed", Value: 1},
			&cli.BoolFlag{Name: "fast", Usage: "a short variant (for tests and a first look)"},
			&cli.BoolFlag{Name: "compare", Usage: "run every RL arm: " + strings.Join(demo.Arms, ", ")},
			&cli.StringFlag{Name: "arms", Usage: "RL arms to run, comma-separated (default lanpo)"},
			&cli.Float64Flag{Name: "p-t", Usage: "lanpo.feedback_ratio of the LANPO arms (default 0.75)"},
			&cli.StringFlag{Name: "sft-from", Usage: "start the arms from this SFT checkpoint instead of training one (same --seed as the run that made it)"},
			&cli.BoolFlag{Name: "force", Usage: "replace --run-dir even if it is not an earlier demo run (by default a non-empty directory without demo.json is refused)"},
		},
		Action: func(c *cli.Context) error {
			o := demo.Options{RunDir: c.String("run-dir"), Seed: c.Int64("seed"), Fast: c.Bool("fast"), Force: c.Bool("force"), Log: c.App.Writer,
				PT: c.Float64("p-t"), SFT: c.String("sft-from")}
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

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write RUN_DIR/report.html from a run's metrics and evaluations",
		ArgsUsage: "RUN_DIR",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errMissingRunDir}
			}
			return demo.WriteReport(c.Args().First())
		},
	}
}

var errMissingRunDir = cliError("report: want exactly one RUN_DIR argument")

type cliError string

func (e cliError) Error() string { return string(e) }
