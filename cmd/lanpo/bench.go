package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/bench"
	"github.com/lanpo-rl/lanpo/model"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "micro-benchmarks, each against a baseline measured in the same run",
		Subcommands: []*cli.Command{
			benchLogprobCommand(),
			benchGRPOStepCommand(),
			benchForwardCommand(),
			benchGenerateCommand(),
			benchTokenizeCommand(),
			benchVerifyCommand(),
			benchRelevanceCommand(),
			benchSummariesCommand(),
			benchMemoryCommand(),
			benchAllreduceCommand(),
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
			&cli.Int64Flag{Name: "hidden", Value: 896, Usage: "hidden size"},
			&cli.Int64Flag{Name: "v", Value: 151936, Usage: "vocabulary size"},
			&cli.BoolFlag{Name: "grad", Usage: "forward + backward instead of forward only"},
			&cli.Int64Flag{Name: "chunk", Usage: "rows per chunk (0: 256 on CPU, 4096 on CUDA)"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "float32, bfloat16, float16 or float64"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu or cuda[:N]"},
			&cli.IntFlag{Name: "reps", Value: 3, Usage: "timed runs after one warm-up (the median is reported)"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed for the random data"},
			&cli.Int64Flag{Name: "topk", Usage: "measure SDPO's pair instead: the K most likely tokens (fused top-K) and the log-probs at them (fused gather) against full logits, log_softmax, topk, gather"},
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
			for _, f := range []string{"n", "hidden", "v"} {
				if c.Int64(f) <= 0 {
					return usageError{fmt.Errorf("--%s must be > 0, got %d", f, c.Int64(f))}
				}
			}
			r, err := csrc.BenchLogProb(csrc.LogProbBench{N: c.Int64("n"), H: c.Int64("hidden"), V: c.Int64("v"), Grad: c.Bool("grad"),
				Chunk: c.Int64("chunk"), DType: dtype, Device: dev, Reps: c.Int("reps"), Seed: c.Int64("seed"), TopK: c.Int64("topk")})
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
			if r.TopK > 0 {
				mode += fmt.Sprintf(", top-%d + gather", r.TopK)
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

func benchForwardCommand() *cli.Command {
	return &cli.Command{
		Name:  "forward",
		Usage: "forward tokens/s of a random Qwen2.5-0.5B-shape model against Hugging Face transformers",
		Description: "Builds a model of Qwen2.5-0.5B's shape (24 layers, H 896, 14/2 heads, V 151936; --shape 7b or a\n" +
			"config.json for another) with random weights, saves it as a Hugging Face directory, and times the\n" +
			"forward pass (hidden states and fp32 logits) in lanpo and, through --hf-python, in transformers on\n" +
			"the same weights, ids and thread count, in this one run. Prints both and the ratio (lanpo tokens/s\n" +
			"over transformers').",
		Flags: append(benchModelFlags(),
			&cli.Int64Flag{Name: "batch", Value: 4},
			&cli.Int64Flag{Name: "seq", Value: 256},
			&cli.IntFlag{Name: "reps", Value: 3},
			&cli.StringFlag{Name: "attention", Value: "auto", Usage: "auto, sdpa or reference"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		),
		Action: func(c *cli.Context) error {
			return runBenchForward(c)
		},
	}
}

type forwardReport struct {
	Shape         string          `json:"shape"`
	Batch         int64           `json:"batch"`
	Seq           int64           `json:"seq"`
	Threads       int             `json:"threads"`
	LanpoMS       float64         `json:"lanpo_ms"`
	LanpoTokPerS  float64         `json:"lanpo_tokens_per_s"`
	HF            json.RawMessage `json:"hf,omitempty"`
	HFError       string          `json:"hf_error,omitempty"`
	HFTokPerS     float64         `json:"hf_tokens_per_s,omitempty"`
	LanpoOverHF   float64         `json:"lanpo_over_hf,omitempty"`
	AttentionSDPA bool            `json:"lanpo_sdpa"`
}

func runBenchForward(c *cli.Context) error {
	attn, err := parseAttention(c.String("attention"))
	if err != nil {
		return err
	}
	m, info, err := benchModel(c, attn)
	if err != nil {
		return err
	}
	defer m.Close()
	cfg := m.Config
	ids := model.RandomIDs(c.Int64("batch"), c.Int64("seq"), cfg.VocabSize, 1)
	r, err := m.BenchForward(ids, c.Int("reps"))
	if err != nil {
		return err
	}
	rep := forwardReport{Shape: fmt.Sprintf("%s (%d layers)", c.String("shape"), cfg.NumHiddenLayers), Batch: r.Batch, Seq: r.Seq,
		Threads: info.Threads, LanpoMS: r.MedianMS, LanpoTokPerS: r.TokensPerS, AttentionSDPA: m.UsesSDPA()}
	if py := c.String("hf-python"); py != "" {
		out, err := bench.RunHF(m, ids, py, bench.HFForward, fmt.Sprint(info.Threads), fmt.Sprint(c.Int("reps")))
		if err != nil {
			rep.HFError = err.Error()
		} else {
			var hf struct {
				MedianMS float64 `json:"median_ms"`
			}
			json.Unmarshal(out, &hf)
			rep.HF = out
			rep.HFTokPerS = float64(r.Batch*r.Seq) / (hf.MedianMS / 1000)
			rep.LanpoOverHF = rep.LanpoTokPerS / rep.HFTokPerS
		}
	}
	w := c.App.Writer
	if c.Bool("json") {
		return json.NewEncoder(w).Encode(rep)
	}
	fmt.Fprintf(w, "forward %s, batch %d × %d tokens, fp32, %d threads\n", rep.Shape, rep.Batch, rep.Seq, rep.Threads)
	fmt.Fprintf(w, "  lanpo         %9.1f ms  %9.0f tokens/s (SDPA %v)\n", rep.LanpoMS, rep.LanpoTokPerS, rep.AttentionSDPA)
	if rep.HFError != "" {
		fmt.Fprintf(w, "  transformers  unavailable: %s\n", rep.HFError)
		return nil
	}
	if rep.HF != nil {
		fmt.Fprintf(w, "  transformers  %9.1f ms  %9.0f tokens/s  %s\n", float64(rep.Batch*rep.Seq)/rep.HFTokPerS*1000, rep.HFTokPerS, rep.HF)
		fmt.Fprintf(w, "  lanpo / transformers: %.2fx\n", rep.LanpoOverHF)
	}
	return nil
}

func parseAttention(s string) (model.AttentionImpl, error) {
	switch s {
	case "auto":
		return model.AttentionAuto, nil
	case "sdpa":
		return model.AttentionSDPA, nil
	case "reference":
		return model.AttentionReference, nil
	}
	return 0, usageError{fmt.Errorf("--attention %q: want auto, sdpa or reference", s)}
}
