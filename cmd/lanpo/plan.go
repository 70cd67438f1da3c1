package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/plan"
)

func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "per-GPU memory of a training run, before renting GPUs",
		Description: "Adds up, per GPU: weights, the KL reference model (none at --kl-beta 0), gradients, fp32 master weights\n" +
			"and Adam moments (sharded by --zero 1, gradients too by --zero 2), activations of one micro-batch of\n" +
			"--micro-tokens tokens (each layer's input only with --activation-checkpointing), the fused log-prob's\n" +
			"fp32 chunk buffer, SDPO's EMA teacher and its outputs (--sdpo-top-k), a generation batch (KV cache and decode buffers; split into batches of whole groups\n" +
			"when the step's rows do not fit beside the persistent state) and headroom, and says whether it fits --gpu-mem. The activation\n" +
			"figures follow what lanpo's forward keeps for backward; `lanpo bench memory` measures them on CPU.\n" +
			"Example: lanpo plan --model configs/models/qwen2.5-7b.json --gpus 8 --zero 1 --seq-len 4096 --micro-tokens 16384",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "a Hugging Face model directory or its config.json"},
			&cli.IntFlag{Name: "gpus", Value: 8},
			&cli.IntFlag{Name: "zero", Value: 1, Usage: "ZeRO stage: 0, 1 or 2"},
			&cli.Int64Flag{Name: "seq-len", Value: 4096, Usage: "longest training sequence (prompt + response)"},
			&cli.Int64Flag{Name: "micro-tokens", Value: 16384, Usage: "tokens per micro-batch (algo.max_tokens_per_micro_batch)"},
			&cli.BoolFlag{Name: "activation-checkpointing"},
			&cli.Float64Flag{Name: "kl-beta", Usage: "algo.kl_beta; > 0 keeps a reference model"},
			&cli.BoolFlag{Name: "ref-offload", Usage: "the reference model lives on the host (algo.ref_device: cpu)"},
			&cli.StringFlag{Name: "gpu-mem", Value: "80GiB", Usage: "memory per GPU (GiB, GB, or bytes)"},
			&cli.StringFlag{Name: "dtype", Value: "bfloat16", Usage: "parameters and activations"},
			&cli.Int64Flag{Name: "rollout-rows", Value: 64, Usage: "sequences a step generates per GPU (prompts per GPU × samples per prompt)"},
			&cli.Int64Flag{Name: "samples", Value: 8, Usage: "samples per prompt (G): generation batches hold whole groups"},
			&cli.Int64Flag{Name: "prompt-len", Usage: "longest prompt in tokens (default: a quarter of --rollout-tokens)"},
			&cli.Int64Flag{Name: "rollout-tokens", Usage: "longest prompt + max_new_tokens (default: --seq-len)"},
			&cli.BoolFlag{Name: "reference-attention", Usage: "attention without SDPA (keeps the probabilities; lanpo's CPU default)"},
			&cli.BoolFlag{Name: "cuda-graphs", Usage: "rollout.cuda_graphs: count the CUDA graphs' memory pool (a decode step's transients again)"},
			&cli.Float64Flag{Name: "headroom", Value: 0.08},
			&cli.Int64Flag{Name: "logprob-chunk", Value: csrc.DefaultLogProbChunk(true), Usage: "rows of the fused log-prob's fp32 buffer"},
			&cli.Int64Flag{Name: "lora-r", Usage: "plan a LoRA run of this rank (lora.r): frozen base, fp32 adapters, no reference copy"},
			&cli.StringSliceFlag{Name: "lora-targets", Usage: "lora.target_modules (default: all seven projections)"},
			&cli.Int64Flag{Name: "sdpo-top-k", Usage: "plan algo.name sdpo with this sdpo.top_k: the EMA teacher's copy of the weights and its outputs per micro-batch"},
			&cli.BoolFlag{Name: "consolidate-own-step", Usage: "plan LANPO's consolidation in optimizer steps of its own (lanpo.consolidate_lr > 0): a second set of Adam moments"},
			&cli.BoolFlag{Name: "json"},
		},
		Action: func(c *cli.Context) error {
			cfg, path, err := loadModelConfig(c.String("model"))
			if err != nil {
				return err
			}
			mem, err := parseBytes(c.String("gpu-mem"))
			if err != nil {
				return usageError{fmt.Errorf("--gpu-mem: %w", err)}
			}
			dt, err := csrc.ParseDType(c.String("dtype"))
			if err != nil {
				return usageError{fmt.Errorf("--dtype: %w", err)}
			}
			rt := c.Int64("rollout-tokens")
			if rt == 0 {
				rt = c.Int64("seq-len")
			}
			o := plan.Options{GPUs: c.Int("gpus"), Zero: c.Int("zero"), DTypeBytes: int64(dt.Size()), SeqLen: c.Int64("seq-len"),
				MicroTokens: c.Int64("micro-tokens"), Checkpointing: c.Bool("activation-checkpointing"), SDPA: !c.Bool("reference-attention"), CUDAGraphs: c.Bool("cuda-graphs"),
				KLBeta: c.Float64("kl-beta"), RefOffload: c.Bool("ref-offload"), RolloutRows: c.Int64("rollout-rows"), RolloutGroup: c.Int64("samples"), RolloutPrompt: c.Int64("prompt-len"), RolloutTokens: rt,
				LogProbChunk: c.Int64("logprob-chunk"), GPUMem: mem, Headroom: c.Float64("headroom"), MasterForWeight: dt.Size() < 4,
				LoRARank: c.Int64("lora-r"), LoRATargets: c.StringSlice("lora-targets"), SDPOTopK: c.Int64("sdpo-top-k"), ConsolidateOwnStep: c.Bool("consolidate-own-step")}
			if o.LoRARank < 0 {
				return usageError{fmt.Errorf("--lora-r must be ≥ 0")}
			}
			if o.SDPOTopK < 0 || (o.SDPOTopK > 0 && o.LoRARank > 0) {
				return usageError{fmt.Errorf("--sdpo-top-k must be ≥ 0, and SDPO is not supported with LoRA (--lora-r)")}
			}
			if _, err := model.ResolveLoRATargets(o.LoRATargets); err != nil {
				return usageError{fmt.Errorf("--lora-targets: %w", err)}
			}
			r, err := plan.Plan(cfg, o)
			if err != nil {
				return usageError{err}
			}
			if c.Bool("json") {
				return jsonl.Encoder(c.App.Writer).Encode(r)
			}
			w := c.App.Writer
			lora := "full fine-tuning"
			if o.LoRARank > 0 {
				lora = fmt.Sprintf("LoRA r %d", o.LoRARank)
			}
			if o.SDPOTopK > 0 {
				lora += fmt.Sprintf(", SDPO (EMA teacher, top-%d)", o.SDPOTopK)
			}
			fmt.Fprintf(w, "%s: %.2f B parameters; %s; %d GPUs, ZeRO-%d, %s, micro-batch %d tokens, sequences up to %d, activation checkpointing %v, kl_beta %g\n",
				path, float64(r.Params)/1e9, lora, o.GPUs, o.Zero, c.String("dtype"), o.MicroTokens, o.SeqLen, o.Checkpointing, o.KLBeta)
			fmt.Fprint(w, r.String())
			if mem > 0 {
				verdict := "fits"
				if !r.Fits {
					verdict = "does NOT fit"
				}
				fmt.Fprintf(w, "%s in %.0f GiB\n", verdict, float64(mem)/(1<<30))
				for _, n := range r.Notes {
					fmt.Fprintf(w, "  - %s\n", n)
				}
				// The token budget that fits, with and without activation
				// checkpointing: what to set algo.max_tokens_per_micro_batch to.
				for _, ck := range []bool{true, false} {
					q := o
					q.Checkpointing = ck
					n, err := plan.MaxMicroTokens(cfg, q)
					if err != nil {
						return err
					}
					what := "fits"
					if n < o.SeqLen {
						what = fmt.Sprintf("does not fit one %d-token sequence", o.SeqLen)
					}
					fmt.Fprintf(w, "largest update micro-batch, activation checkpointing %-5v: %d tokens (%s)\n", ck, n, what)
				}
			}
			return nil
		},
	}
}

// parseBytes reads "80GiB", "80GB", "80G" or a number of bytes.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"GiB", 1 << 30}, {"GB", 1e9}, {"G", 1 << 30}, {"MiB", 1 << 20}, {"MB", 1e6}} {
		if strings.HasSuffix(s, u.suffix) {
			v, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
			return int64(v * u.mult), err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// loadModelConfig reads a Hugging Face config.json, given as the file or
// the model directory holding it; it returns the file's path too.
func loadModelConfig(path string) (*model.Config, string, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	cfg, err := model.LoadConfig(path)
	return cfg, path, err
}
