package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/eval"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "train a tiny model on an embedded math world: SFT, then GRPO, with a report",
		Description: "Generates a math world (one-digit ±, two-digit ± one-digit, two-digit ± two-digit, two-digit ×\n" +
			"one-digit; train and held-out splits from --seed), builds a small Qwen2 model and tokenizer from\n" +
			"scratch, runs SFT on a mix of worked column-method solutions (40%) and bare results, then GRPO from\n" +
			"the SFT checkpoint on unseen level 2-4 problems, through the same code as `lanpo sft` and\n" +
			"`lanpo train`, and writes RUN_DIR/report.html: held-out greedy accuracy per level after SFT and after\n" +
			"GRPO (and how many answers show their work), training curves, sample completions.\n" +
			"No downloads. About 8 minutes on 2 CPU cores; --fast takes under 2 minutes.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "run-dir", Value: "runs/demo"},
			&cli.Int64Flag{Name: "seed", Value: 1},
			&cli.BoolFlag{Name: "fast", Usage: "a short variant (for tests and a first look)"},
			&cli.BoolFlag{Name: "force", Usage: "replace --run-dir even if it is not an earlier demo run (by default a non-empty directory without demo.json is refused)"},
		},
		Action: func(c *cli.Context) error {
			o := eval.DemoOptions{RunDir: c.String("run-dir"), Seed: c.Int64("seed"), Fast: c.Bool("fast"), Force: c.Bool("force"), Log: c.App.Writer}
			if isTerminal(os.Stderr) {
				o.Progress = os.Stderr
			}
			return eval.RunDemo(c.Context, o)
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
			return eval.WriteReport(c.Args().First())
		},
	}
}

var errMissingRunDir = cliError("report: want exactly one RUN_DIR argument")

type cliError string

func (e cliError) Error() string { return string(e) }
