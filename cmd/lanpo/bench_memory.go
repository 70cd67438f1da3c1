package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sugarme/gotch"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/plan"

	"github.com/lanpo-rl/lanpo/model"
)

func benchMemoryCommand() *cli.Command {
	return &cli.Command{
		Name:  "memory",
		Usage: "lanpo plan's figures against peak memory measured on this CPU, with and without activation checkpointing",
		Description: "Builds a random float32 model (default: 8 layers, H 512, V 32000; or --model's config.json), runs one\n" +
			"micro-batch of --rows × --seq tokens through the trainer's log-prob path, its backward and an AdamW\n" +
			"step, and prints for each component what `lanpo plan` computes and what the process's resident set\n" +
			"grew by (peak RSS, reset through /proc/self/clear_refs before each phase, with the host allocator\n" +
			"returning large frees at once), and their ratio. The activation lines run the update without and with\n" +
			"activation checkpointing in the same process.\n" +
			"\n" +
			"--zero measures ZeRO instead, on every rank of a launched job: one update (checkpointed, so ZeRO-2\n" +
			"reduce-scatters each layer's gradients as its backward completes) under plain data parallelism,\n" +
			"ZeRO-1 and ZeRO-2, each rank's optimizer state and peak RSS above its RSS before the model:\n" +
			"  lanpo launch --nproc-per-node 2 -- bench memory --zero --rows 2 --seq 512",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "a config.json (or a directory holding one) whose shape to build; default a small Qwen3 shape"},
			&cli.Int64Flag{Name: "rows", Value: 4},
			&cli.Int64Flag{Name: "seq", Value: 1024},
			&cli.Int64Flag{Name: "seed", Value: 1},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.IntFlag{Name: "vocab", Usage: "override the vocabulary size (a small one makes the decoder layers, which ZeRO-2 shards as the backward goes, most of the model, as in a 7B)"},
			&cli.BoolFlag{Name: "zero", Usage: "measure ZeRO-1/2 against plain data parallelism on every rank (run under lanpo launch)"},
		},
		Action: func(c *cli.Context) error {
			cfg := model.MemoryBenchShape()
			if path := c.String("model"); path != "" {
				var err error
				if cfg, _, err = loadModelConfig(path); err != nil {
					return err
				}
			}
			if v := c.Int("vocab"); v > 0 {
				cfg.VocabSize = int64(v)
			}
			if c.Bool("zero") {
				return benchZeroMemory(c, cfg)
			}
			checks, err := plan.MeasureMemory(cfg, c.Int64("rows"), c.Int64("seq"), c.Int64("seed"))
			if err != nil {
				return err
			}
			w := c.App.Writer
			if c.Bool("json") {
				return json.NewEncoder(w).Encode(map[string]any{"params": cfg.ParamCount(), "rows": c.Int64("rows"), "seq": c.Int64("seq"), "checks": checks})
			}
			fmt.Fprintf(w, "memory: %.1f M parameters (%d layers, H %d, V %d), float32 on CPU, micro-batch %d × %d tokens\n",
				float64(cfg.ParamCount())/1e6, cfg.NumHiddenLayers, cfg.HiddenSize, cfg.VocabSize, c.Int64("rows"), c.Int64("seq"))
			fmt.Fprintf(w, "  %-42s %10s %10s %8s\n", "component", "plan MiB", "measured", "ratio")
			for _, k := range checks {
				fmt.Fprintf(w, "  %-42s %10.1f %10.1f %8.3f\n", k.Name, float64(k.Planned)/(1<<20), float64(k.Measured)/(1<<20), k.Ratio)
			}
			if n := len(checks); n >= 2 {
				fmt.Fprintf(w, "  activation checkpointing: update peak %.1f → %.1f MiB measured (×%.3f), %.1f → %.1f MiB planned (×%.3f)\n",
					float64(checks[n-2].Measured)/(1<<20), float64(checks[n-1].Measured)/(1<<20), float64(checks[n-1].Measured)/float64(max(checks[n-2].Measured, 1)),
					float64(checks[n-2].Planned)/(1<<20), float64(checks[n-1].Planned)/(1<<20), float64(checks[n-1].Planned)/float64(max(checks[n-2].Planned, 1)))
			}
			return nil
		},
	}
}

// benchZeroMemory is bench memory --zero: every rank measures, rank 0
// prints every rank's lines.
func benchZeroMemory(c *cli.Context, cfg *model.Config) error {
	env, launched, err := dist.FromEnv()
	if err != nil {
		return usageError{err}
	}
	if !launched || env.World < 2 {
		return usageError{errors.New("bench memory --zero compares sharding across ranks: run it under a launcher, " +
			"e.g. lanpo launch --nproc-per-node 2 -- bench memory --zero")}
	}
	comm, err := dist.Init(env, dist.Options{Backend: "gloo", Device: gotch.CPU})
	if err != nil {
		return err
	}
	defer comm.Close()
	mine, err := plan.MeasureZeroMemory(cfg, c.Int64("rows"), c.Int64("seq"), c.Int64("seed"), comm)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(mine)
	all, err := comm.AllGatherBytes(b)
	if err != nil || comm.Rank() != 0 {
		return err
	}
	var lines []plan.ZeroMemory
	for _, r := range all {
		var l []plan.ZeroMemory
		if err := json.Unmarshal(r, &l); err != nil {
			return err
		}
		lines = append(lines, l...)
	}
	w := c.App.Writer
	if c.Bool("json") {
		return json.NewEncoder(w).Encode(map[string]any{"params": cfg.ParamCount(), "rows": c.Int64("rows"), "seq": c.Int64("seq"), "ranks": lines})
	}
	fmt.Fprintf(w, "memory --zero: %.1f M parameters (%d layers), float32 on CPU, micro-batch %d × %d tokens, checkpointed, %d ranks\n",
		float64(cfg.ParamCount())/1e6, cfg.NumHiddenLayers, c.Int64("rows"), c.Int64("seq"), env.World)
	fmt.Fprintf(w, "  %-4s %-20s %12s %8s %16s %8s\n", "rank", "mode", "state MiB", "×plain", "update peak MiB", "×plain")
	plain := map[int]plan.ZeroMemory{}
	for _, l := range lines {
		if l.Mode == lines[0].Mode {
			plain[l.Rank] = l
		}
	}
	for _, l := range lines {
		p := plain[l.Rank]
		fmt.Fprintf(w, "  %-4d %-20s %12.1f %8.3f %16.1f %8.3f\n", l.Rank, l.Mode, float64(l.State)/(1<<20), float64(l.State)/float64(max(p.State, 1)),
			float64(l.Peak)/(1<<20), float64(l.Peak)/float64(max(p.Peak, 1)))
	}
	return nil
}
