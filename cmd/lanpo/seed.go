package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/seed"
	"github.com/lanpo-rl/lanpo/trainer"
)

func seedCommand() *cli.Command {
	return &cli.Command{
		Name:  "seed",
		Usage: "build SFT data that teaches LANPO's skills (answer, summarize, reflect, abstract) from your problems",
		Description: "Generates candidates with --teacher (or the model itself: self-distillation) and keeps what the\n" +
			"verifier and format checks accept: answers that verify (rejection sampling); summaries of right and\n" +
			"wrong attempts whose three fields parse, fit their budget and do not copy the attempt; reflections on\n" +
			"an attempt (the prompt never says whether it was right) whose redo verifies, balanced between right\n" +
			"and wrong shown attempts; plans condensed from related problems' lessons (the trainer's retrieval and\n" +
			"relevance filter over a pool of the other problems' summaries) whose solve verifies. Every prompt is the\n" +
			"trainer's own (--config: data.prompt_template, data.system_prompt, lanpo.*). No gold answer reaches a\n" +
			"prompt: only the verifier sees them. Writes chat JSONL ({\"messages\", \"skill\", \"problem_id\"}) that\n" +
			"lanpo sft trains on unchanged, statistics per skill to OUT.stats.json (without .jsonl) and stderr, and\n" +
			"state beside it: a killed run continues with --resume and writes the same file.\n" +
			"Example: lanpo seed --model ~/models/Qwen2.5-1.5B-Instruct --data math_train.jsonl --out seed.jsonl --n 3000",
		Flags: append(append([]cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "the model to be trained (and the teacher without --teacher)"},
			&cli.StringFlag{Name: "teacher", Usage: "a stronger model that writes the candidates"},
			&cli.StringFlag{Name: "adapter", Usage: "a PEFT LoRA adapter directory applied to the model that writes the candidates (--teacher, else --model)"},
			&cli.StringFlag{Name: "device", Value: "auto", Usage: "auto (the GPU where this build and machine have one, else cpu), cpu or cuda[:N]"},
			&cli.StringFlag{Name: "dtype", Usage: "parameter dtype (default: float32 on CPU, the checkpoint's on CUDA)"},
		}, tokenizerFlags(false)...), []cli.Flag{
			&cli.StringFlag{Name: "data", Required: true, Usage: `problems: JSONL of {"id","problem","answer"}`},
			&cli.StringFlag{Name: "out", Value: "seed.jsonl"},
			&cli.IntFlag{Name: "n", Value: 3000, Usage: "examples wanted in all"},
			&cli.StringFlag{Name: "mix", Value: "answer=0.4,summarize=0.2,reflect=0.2,abstract=0.2", Usage: "share of each skill"},
			&cli.IntFlag{Name: "k", Value: 4, Usage: "answers sampled per problem"},
			&cli.IntFlag{Name: "batch-size", Value: 8, Usage: "problems per batch (the unit of resume)"},
			&cli.StringFlag{Name: "config", Usage: "a run config (YAML) for the prompts, lanpo.* and rollout.temperature/max_new_tokens"},
			&cli.StringSliceFlag{Name: "set", Usage: "override a config key (repeatable)"},
			&cli.Float64Flag{Name: "temperature", Value: -1, Usage: "sampling temperature (default: the config's rollout.temperature)"},
			&cli.IntFlag{Name: "max-new-tokens", Usage: "per answer (default: the config's rollout.max_new_tokens)"},
			&cli.Uint64Flag{Name: "seed", Value: 1},
			&cli.BoolFlag{Name: "resume", Usage: "continue the run that wrote --out"},
			&cli.StringFlag{Name: "rejected", Usage: "also write every rejected candidate with its reason to this JSONL"},
			&cli.IntFlag{Name: "stop-after-batches", Usage: "stop after this many batches (continue with --resume)"},
		}...),
		Action: runSeed,
	}
}

// seedConfig is lanpo seed's config: --config (or the defaults) with
// --temperature, --max-new-tokens and --seed applied, resolved.
func seedConfig(c *cli.Context) (trainer.Config, error) {
	cfg, err := optionalRunConfig(c)
	if err != nil {
		return cfg, err
	}
	if t := c.Float64("temperature"); t >= 0 {
		cfg.Rollout.Temperature = t
	}
	if n := c.Int("max-new-tokens"); n > 0 {
		cfg.Rollout.MaxNewTokens = n
	}
	cfg.Seed = c.Uint64("seed")
	return cfg, resolveConfig(c, &cfg)
}

func runSeed(c *cli.Context) error {
	cfg, err := seedConfig(c)
	if err != nil {
		return err
	}
	mix := map[string]float64{}
	for _, kv := range strings.Split(c.String("mix"), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		var w float64
		if _, err := fmt.Sscan(v, &w); !ok || err != nil {
			return usageError{fmt.Errorf("--mix %q: want skill=weight pairs, e.g. answer=0.4,summarize=0.2", c.String("mix"))}
		}
		mix[k] = w
	}
	problems, err := trainer.ReadProblems(c.String("data"), cfg.Data)
	if err != nil {
		return err
	}
	teacher := c.String("model")
	if t := c.String("teacher"); t != "" {
		teacher = t
	}
	m, tk, err := loadModelAndTokenizer(c, teacher)
	if err != nil {
		return err
	}
	defer m.Close()
	if f := c.String("chat-format"); f == "" && cfg.ChatFormat != "" {
		if err := tk.SetChatFormat(cfg.ChatFormat); err != nil {
			return usageError{fmt.Errorf("config key chat_format: %w", err)}
		}
	}
	o := seed.Options{Config: cfg, Problems: problems, Out: c.String("out"), N: c.Int("n"), Mix: mix, K: c.Int("k"),
		Batch: c.Int("batch-size"), Resume: c.Bool("resume"), StopAfterBatches: c.Int("stop-after-batches")}
	if isTerminal(os.Stderr) {
		o.Progress = os.Stderr
	}
	if path := c.String("rejected"); path != "" {
		flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
		if o.Resume {
			flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
		}
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		o.Rejected = f
	}
	stats, err := seed.Run(m, tk, o)
	if err != nil {
		return err
	}
	js, _ := json.MarshalIndent(stats, "", "  ")
	statsPath := strings.TrimSuffix(o.Out, ".jsonl") + ".stats.json"
	if err := fsutil.WriteFileSync(statsPath, append(js, '\n')); err != nil {
		return err
	}
	w := c.App.ErrWriter
	for _, k := range seed.Skills {
		st := stats[k]
		fmt.Fprintf(w, "seed %-9s kept %4d of %4d tried (target %d)", k, st.Kept, st.Tried, st.Target)
		for _, why := range sortedKeys(st.Rejected) {
			fmt.Fprintf(w, "; %s %d", why, st.Rejected[why])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "seed: %s, statistics in %s\n", o.Out, statsPath)
	return nil
}

func sortedKeys(m map[string]int) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
