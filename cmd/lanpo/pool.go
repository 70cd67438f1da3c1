package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

func poolCommand() *cli.Command {
	where := "CHECKPOINT_DIR is a LANPO checkpoint (runs/NAME/checkpoints/step-NNNNNN), a run directory (its newest\n" +
		"checkpoint) or a pool.jsonl file. Flags go before it."
	return &cli.Command{
		Name:  "pool",
		Usage: "inspect a LANPO experience pool: sizes, entries of a problem, retrieval for a text",
		Description: "Reads the pool a LANPO run writes into each checkpoint and prints JSON.\n" + where + "\n" +
			"Examples:\n" +
			"  lanpo pool stats runs/tiny-lanpo\n" +
			"  lanpo pool show --problem arith-3 runs/tiny-lanpo\n" +
			"  lanpo pool query --text 'What is 7 + 5?' runs/tiny-lanpo\n" +
			"  lanpo pool build --config runs/tiny-grpo/config.resolved.yaml --model runs/tiny-grpo/checkpoints/step-000004 --out grpo-pool.jsonl",
		Subcommands: []*cli.Command{
			{
				Name:  "build",
				Usage: "make the pool LANPO's loop would have made from a run's logged rollouts (GRPO's too), summarized by --model",
				Description: "Reads RUN_DIR/rollouts/step-NNNNNN.jsonl (a run writes them with log.rollouts: true) in step order and\n" +
					"does what a LANPO run does after each step: the same seeded choice of lanpo.summaries_per_group rollouts\n" +
					"per group, their summaries written by --model, answers stripped, the pool's bounds. The config gives the\n" +
					"problems (data.train), the prompts and the lanpo section: the run's config.resolved.yaml. Unlike the run's\n" +
					"own pool, one model writes every summary (in a LANPO run, the policy at each step). The pool goes to --out,\n" +
					"for lanpo eval --pool or lanpo.initial_pool. lanpo demo builds GRPO's own pool this way (docs/demo.md).",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "config", Required: true, Usage: "the run's config (its config.resolved.yaml)"},
					&cli.StringSliceFlag{Name: "set", Usage: "override a config key (repeatable)"},
					&cli.StringFlag{Name: "model", Required: true, Usage: "the summarizer: a model directory or checkpoint"},
					&cli.StringFlag{Name: "rollouts", Usage: "the rollout logs (default: the config's run_dir/rollouts)"},
					&cli.StringFlag{Name: "out", Required: true, Usage: "the pool file to write (pool.jsonl)"},
				},
				Action: func(c *cli.Context) error {
					cfg, err := trainer.ReadConfig(c.String("config"), c.StringSlice("set"))
					if err != nil {
						return usageError{err}
					}
					dir := c.String("rollouts")
					if dir == "" {
						dir = filepath.Join(cfg.RunDir, "rollouts")
					}
					p, err := trainer.BuildPool(cfg, c.String("model"), dir)
					if err != nil {
						return err
					}
					if err := trainer.WritePool(p, c.String("out")); err != nil {
						return err
					}
					return jsonl.Encoder(c.App.Writer).Encode(map[string]any{"pool": c.String("out"), "problems": p.Problems(), "entries": p.Entries()})
				},
			},
			{
				Name:      "stats",
				Usage:     "sizes: problems, entries, bytes, and per problem entries and right answers",
				ArgsUsage: "CHECKPOINT_DIR",
				Action: func(c *cli.Context) error {
					p, err := openPool(c)
					if err != nil {
						return err
					}
					return jsonl.Encoder(c.App.Writer).Encode(map[string]any{"problems": p.Problems(), "entries": p.Entries(),
						"bytes": p.Bytes(), "config": p.Config(), "per_problem": p.Stats()})
				},
			},
			{
				Name:      "show",
				Usage:     "the entries of one problem (one JSON line each, oldest first)",
				ArgsUsage: "CHECKPOINT_DIR",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "problem", Usage: "problem id", Required: true}},
				Action: func(c *cli.Context) error {
					p, err := openPool(c)
					if err != nil {
						return err
					}
					entries := p.EntriesOf(c.String("problem"))
					if entries == nil {
						return fmt.Errorf("the pool has no entries of problem %q", c.String("problem"))
					}
					enc := jsonl.Encoder(c.App.Writer)
					for _, e := range entries {
						if err := enc.Encode(e); err != nil {
							return err
						}
					}
					return nil
				},
			},
			{
				Name:  "query",
				Usage: "retrieval for a problem text: the other problems BM25 finds, with scores and near-duplicate similarity",
				Description: "Prints the candidates abstraction would consider for --text: BM25, normalized BM25 (the bm25\n" +
					"relevance), and the near-duplicate similarity (near-duplicates are never candidates). The policy's\n" +
					"own relevance rating needs the model: it is what training logs as relevance_mean.",
				ArgsUsage: "CHECKPOINT_DIR",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "text", Usage: "the problem text to retrieve for", Required: true},
					&cli.StringFlag{Name: "problem", Usage: "its id, if it is in the pool (left out of the candidates)"},
					&cli.IntFlag{Name: "k", Value: 8, Usage: "how many candidates"},
					&cli.Float64Flag{Name: "threshold", Value: -1, Usage: "also report which pass normalized BM25 ≥ this"},
				},
				Action: func(c *cli.Context) error {
					p, err := openPool(c)
					if err != nil {
						return err
					}
					enc := jsonl.Encoder(c.App.Writer)
					for _, cand := range p.Candidates(c.String("problem"), c.String("text"), c.Int("k")) {
						row := map[string]any{"problem_id": cand.ProblemID, "text": cand.Text, "bm25": cand.BM25,
							"bm25_normalized": cand.Normalized, "similarity": pool.Similarity(c.String("text"), cand.Text)}
						if g := c.Float64("threshold"); g >= 0 {
							row["passes"] = cand.Normalized >= g
						}
						if err := enc.Encode(row); err != nil {
							return err
						}
					}
					return nil
				},
			},
		},
	}
}

// openPool loads the pool the command's argument names.
func openPool(c *cli.Context) (*pool.Pool, error) {
	if c.NArg() != 1 {
		return nil, usageError{fmt.Errorf("pool %s: want exactly one CHECKPOINT_DIR argument", c.Command.Name)}
	}
	return loadPool(c.Args().First())
}

// poolRunConfig is the config lanpo pool and eval --pool read a pool
// with: the defaults, resolved as every entry point's config is, without
// a byte cap (they only read).
func poolRunConfig() (trainer.Config, error) {
	cfg := trainer.DefaultConfig()
	cfg.LANPO.MaxPoolBytes = 0
	return cfg, cfg.Resolve()
}

// loadPool loads a pool from a checkpoint directory, a run directory (its
// newest checkpoint) or a pool.jsonl file.
func loadPool(path string) (*pool.Pool, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		if _, err := os.Stat(filepath.Join(path, pool.File)); err != nil {
			// A run directory: its newest complete checkpoint.
			ckpt := trainer.NewestCheckpoint(path) // read only: nothing verified or moved
			if ckpt == "" {
				return nil, fmt.Errorf("%s: neither a checkpoint with %s nor a run directory with checkpoints", path, pool.File)
			}
			path = ckpt
		}
		path = filepath.Join(path, pool.File)
	}
	cfg, err := poolRunConfig()
	if err != nil {
		return nil, err
	}
	p, err := pool.Load(path, cfg.LANPO.PoolConfig())
	if err != nil {
		return nil, err
	}
	return p, nil
}
