package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/trainer"
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
			"activation checkpointing in the same process.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "a config.json (or a directory holding one) whose shape to build; default a small Qwen3 shape"},
			&cli.Int64Flag{Name: "rows", Value: 4},
			&cli.Int64Flag{Name: "seq", Value: 1024},
			&cli.Int64Flag{Name: "seed", Value: 1},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		},
		Action: func(c *cli.Context) error {
			cfg := model.MemoryBenchShape()
			if path := c.String("model"); path != "" {
				if st, err := os.Stat(path); err == nil && st.IsDir() {
					path = filepath.Join(path, "config.json")
				}
				var err error
				if cfg, err = model.LoadConfig(path); err != nil {
					return err
				}
			}
			checks, err := trainer.MeasureMemory(cfg, c.Int64("rows"), c.Int64("seq"), c.Int64("seed"))
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
