package main

import (
	"encoding/json"
	"fmt"

	"github.com/sugarme/gotch"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/csrc"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "micro-benchmarks, each against a baseline measured in the same run",
		Subcommands: []*cli.Command{
			benchLogprobCommand(),
		},
	}
}

func benchLogprobCommand() *cli.Command {
	return &cli.Command{
		Name:  "logprob",
		Usage: "fused linear+log-softmax+gather against full logits + log_softmax + gather",
		Description: "Times csrc's fused log-prob op and the naive computation (fp32 [N, V] logits, log_softmax,\n" +
			"gather; autograd for --grad) on the same random data in one process, and reports the median of\n" +
			"--reps runs after a warm-up, the peak memory of each (CUDA allocator peak on GPU, peak RSS above\n" +
			"the pre-op RSS on CPU), their ratios, and the largest |difference| of the log-probs.",
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "n", Value: 2048, Usage: "tokens (rows)"},
			&cli.Int64Flag{Name: "h", Value: 896, Usage: "hidden size"},
			&cli.Int64Flag{Name: "v", Value: 151936, Usage: "vocabulary size"},
			&cli.BoolFlag{Name: "grad", Usage: "forward + backward instead of forward only"},
			&cli.Int64Flag{Name: "chunk", Usage: "rows per chunk (0: 256 on CPU, 4096 on CUDA)"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "float32, bfloat16, float16 or float64"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu or cuda[:N]"},
			&cli.IntFlag{Name: "reps", Value: 3, Usage: "timed runs after one warm-up (the median is reported)"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed for the random data"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		},
		Action: func(c *cli.Context) error {
			dtype, err := parseDTypeFlag(c.String("dtype"))
			if err != nil {
				return err
			}
			dev, err := parseDevice(c.String("device"))
			if err != nil {
				return usageError{err}
			}
			for _, f := range []string{"n", "h", "v"} {
				if c.Int64(f) <= 0 {
					return usageError{fmt.Errorf("--%s must be > 0, got %d", f, c.Int64(f))}
				}
			}
			r, err := csrc.BenchLogProb(csrc.LogProbBench{N: c.Int64("n"), H: c.Int64("h"), V: c.Int64("v"), Grad: c.Bool("grad"),
				Chunk: c.Int64("chunk"), DType: dtype, Device: dev, Reps: c.Int("reps"), Seed: c.Int64("seed")})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(r)
			}
			w := c.App.Writer
			mode := "forward"
			if r.Grad {
				mode = "forward+backward"
			}
			fmt.Fprintf(w, "logprob %s  N=%d H=%d V=%d %s on %s, chunk %d\n", mode, r.N, r.H, r.V, r.DType, r.Device, r.Chunk)
			fmt.Fprintf(w, "  fused  %9.1f ms  %8.1f MB peak  %6.2f TFLOP/s\n", r.FusedMS, r.FusedPeakMB, r.FusedTFLOPS)
			fmt.Fprintf(w, "  naive  %9.1f ms  %8.1f MB peak  %6.2f TFLOP/s\n", r.NaiveMS, r.NaivePeakMB, r.NaiveTFLOPS)
			fmt.Fprintf(w, "  time naive/fused %.2fx   peak fused/naive %.3f   max |Δlogp| %.2g", r.SpeedRatio, r.PeakRatio, r.MaxAbsErr)
			if r.Grad {
				fmt.Fprintf(w, "   max |Δdhidden| %.2g", r.MaxAbsGradErr)
			}
			fmt.Fprintf(w, "\n  peak: %s\n", r.PeakSource)
			return nil
		},
	}
}

func parseDevice(s string) (gotch.Device, error) {
	switch {
	case s == "cpu":
		return gotch.CPU, nil
	case s == "cuda":
		return gotch.CudaBuilder(0), nil
	default:
		var n uint
		if _, err := fmt.Sscanf(s, "cuda:%d", &n); err == nil {
			return gotch.CudaBuilder(n), nil
		}
	}
	return gotch.CPU, fmt.Errorf("--device %q: want cpu, cuda or cuda:N", s)
}

func parseDTypeFlag(s string) (gotch.DType, error) {
	d, err := csrc.ParseDType(s)
	if err != nil {
		return 0, usageError{fmt.Errorf("--dtype: %w", err)}
	}
	return d, nil
}
