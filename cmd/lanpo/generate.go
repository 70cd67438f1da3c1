package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/model"
)

func generateCommand() *cli.Command {
	return &cli.Command{
		Name:      "generate",
		Usage:     "sample completions with recorded log-probs (JSONL in, JSONL out)",
		ArgsUsage: "< prompts.jsonl > samples.jsonl",
		Description: "Reads one prompt per line, {\"prompt_ids\": [..]}, and writes --samples lines per prompt, in input\n" +
			"order: {\"ids\": [generated ids], \"logprobs\": [one per id], \"finish_reason\": \"stop\"|\"length\",\n" +
			"\"prompt_index\": i, \"sample_index\": j}. logprobs are log p(id) under the model at --temperature (1\n" +
			"when greedy), as the trainer recomputes them. Each prompt is prefilled once and its KV cache shared\n" +
			"by its samples. With --seed every sample's randomness derives from (seed, prompt line, sample), so\n" +
			"results do not depend on --batch-size. Generation stops at the model's eos_token_id (config.json and\n" +
			"generation_config.json, as transformers does) unless --ignore-eos, at any --stop-id, or after --max-new-tokens.\n" +
			"{\"prompt\": ..} and {\"messages\": ..} lines need the tokenizer, which lanpo does not have yet.",
		Flags: append(modelFlags(),
			&cli.Float64Flag{Name: "temperature", Value: 1, Usage: "0 is greedy"},
			&cli.Float64Flag{Name: "top-p", Value: 1, Usage: "nucleus sampling; 1 is off"},
			&cli.Int64Flag{Name: "top-k", Usage: "keep the K most likely tokens; 0 is off"},
			&cli.Float64Flag{Name: "min-p", Usage: "drop tokens below min-p × the most likely one's probability; 0 is off"},
			&cli.IntFlag{Name: "max-new-tokens", Value: 256},
			&cli.IntFlag{Name: "samples", Aliases: []string{"n"}, Value: 1, Usage: "samples per prompt (G)"},
			&cli.Uint64Flag{Name: "seed", Value: 0},
			&cli.Int64SliceFlag{Name: "stop-id", Usage: "token ids that end a sample (repeatable)"},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "do not stop at the model's eos_token_id"},
			&cli.IntFlag{Name: "batch-size", Value: 8, Usage: "prompts generated together"},
		),
		Action: runGenerate,
	}
}

func runGenerate(c *cli.Context) error {
	p := model.SamplingParams{Temperature: c.Float64("temperature"), TopP: c.Float64("top-p"), TopK: c.Int64("top-k"),
		MinP: c.Float64("min-p"), MaxNewTokens: c.Int("max-new-tokens"), Seed: c.Uint64("seed"), StopIDs: c.Int64Slice("stop-id")}
	if err := p.Validate(); err != nil {
		return usageError{err}
	}
	if c.Int("samples") < 1 || c.Int("batch-size") < 1 {
		return usageError{fmt.Errorf("--samples and --batch-size must be ≥ 1")}
	}
	m, err := loadModel(c)
	if err != nil {
		return err
	}
	defer m.Close()
	if !c.Bool("ignore-eos") {
		eos, err := m.EOSTokenIDs()
		if err != nil {
			return err
		}
		p.StopIDs = append(p.StopIDs, eos...)
	}
	var progress func(step, finished, rows int)
	if isTerminal(os.Stderr) {
		progress = func(step, finished, rows int) {
			fmt.Fprintf(os.Stderr, "\rgenerate: step %d/%d, %d/%d samples finished ", step, p.MaxNewTokens, finished, rows)
		}
	}
	return generateLines(c.App.Reader, c.App.Writer, m, p, c.Int("samples"), c.Int("batch-size"), progress)
}

type generateIn struct {
	PromptIDs *[]int64        `json:"prompt_ids"`
	Prompt    json.RawMessage `json:"prompt"`
	Messages  json.RawMessage `json:"messages"`
}

type generateOut struct {
	IDs          []int64   `json:"ids"`
	Logprobs     []float32 `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
	PromptIndex  int       `json:"prompt_index"`
	SampleIndex  int       `json:"sample_index"`
}

func generateLines(r io.Reader, w io.Writer, m *model.Model, p model.SamplingParams, samples, batch int, progress func(int, int, int)) error {
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 1<<20), 1<<30)
	out := bufio.NewWriter(w)
	defer out.Flush()
	enc := json.NewEncoder(out)
	var reqs []model.Request
	var lines []int
	flush := func() error {
		if len(reqs) == 0 {
			return nil
		}
		// Seeds follow the prompt's line, not its place in the batch.
		res, err := m.GenerateAt(reqs, lines, p, model.GenerateOptions{Progress: progress})
		if progress != nil {
			fmt.Fprintln(os.Stderr)
		}
		if err != nil {
			return fmt.Errorf("lines %d-%d: %w", lines[0], lines[len(lines)-1], err)
		}
		for _, s := range res {
			if err := enc.Encode(generateOut{s.IDs, s.Logprobs, s.FinishReason, lines[s.Prompt] - 1, s.Index}); err != nil {
				return err
			}
		}
		reqs, lines = reqs[:0], lines[:0]
		return out.Flush()
	}
	for n := 1; in.Scan(); n++ {
		var rec generateIn
		if err := json.Unmarshal(in.Bytes(), &rec); err != nil {
			return fmt.Errorf("stdin line %d: %w", n, err)
		}
		switch {
		case rec.PromptIDs != nil:
		case rec.Prompt != nil || rec.Messages != nil:
			return fmt.Errorf("stdin line %d: \"prompt\"/\"messages\" need the tokenizer, which lanpo does not have yet; send \"prompt_ids\"", n)
		default:
			return fmt.Errorf("stdin line %d: no \"prompt_ids\" field", n)
		}
		if err := m.CheckIDs(*rec.PromptIDs); err != nil {
			return fmt.Errorf("stdin line %d: \"prompt_ids\": %w", n, err)
		}
		if mp := m.Config.MaxPositionEmbeddings; mp > 0 && int64(len(*rec.PromptIDs)+p.MaxNewTokens) > mp {
			return fmt.Errorf("stdin line %d: \"prompt_ids\": %d tokens + --max-new-tokens %d exceed the model's context (%d)", n, len(*rec.PromptIDs), p.MaxNewTokens, mp)
		}
		reqs = append(reqs, model.Request{PromptIDs: *rec.PromptIDs, Samples: samples})
		lines = append(lines, n)
		if len(reqs) == batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := in.Err(); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	return flush()
}
