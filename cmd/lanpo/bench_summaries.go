package main

import (
	"fmt"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/trainer"
)

func benchSummariesCommand() *cli.Command {
	return &cli.Command{
		Name:  "summaries",
		Usage: "LANPO's pool summaries in one decode per attempt against one generation per field",
		Description: "Takes the first --attempts entries of a pool file (a checkpoint's pool.jsonl) and summarizes\n" +
			"them twice with the run config's model and lanpo section: field by field (the baseline: each\n" +
			"field a separate generation that prefills the prompt and the fields before it again, how lanpo\n" +
			"wrote summaries before) and in one decode (what training does: each later header fed inside\n" +
			"the decode). Prints each one's seconds and tokens prefilled and generated, and the ratio.\n" +
			"Example: lanpo bench summaries --config run.yaml --pool runs/x/checkpoints/step-000002/pool.jsonl",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "a training config (model, rollout, lanpo)", Required: true},
			&cli.StringSliceFlag{Name: "set", Usage: "override a config key (repeatable)"},
			&cli.StringFlag{Name: "pool", Usage: "a pool.jsonl", Required: true},
			&cli.IntFlag{Name: "attempts", Value: 6, Usage: "entries to summarize (one batch)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := trainer.LoadConfig(c.String("config"), c.StringSlice("set"))
			if err != nil {
				return err
			}
			runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
			defer runtime.UnlockOSThread()
			m, err := model.Load(cfg.Model, cfg.LoadOptions())
			if err != nil {
				return err
			}
			defer m.Close()
			tk, err := tokenizer.Load(cfg.Model)
			if err != nil {
				return err
			}
			by, one, err := feedback.BenchSummariesFromPool(m, tk, cfg.FeedbackSettings(), c.String("pool"), c.Int("attempts"))
			if err != nil {
				return err
			}
			w := c.App.Writer
			if c.Bool("json") {
				return jsonl.Encoder(w).Encode(map[string]any{"by_field": by, "one_pass": one, "speedup": by.Seconds / one.Seconds})
			}
			fmt.Fprintf(w, "%d attempts, summary_field_tokens %d\n", len(one.Summaries), cfg.LANPO.SummaryFieldTokens)
			for _, r := range []struct {
				name string
				b    feedback.SummaryBench
			}{{"by field (baseline)", by}, {"one pass", one}} {
				fmt.Fprintf(w, "%-20s %7.1f s  prefilled %6d  generated %5d\n", r.name, r.b.Seconds, r.b.Prefilled, r.b.Generated)
			}
			fmt.Fprintf(w, "one pass is %.2f× the baseline's speed\n", by.Seconds/one.Seconds)
			return nil
		},
	}
}
