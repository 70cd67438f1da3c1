package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/progress"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

func generateCommand() *cli.Command {
	return &cli.Command{
		Name:      "generate",
		Usage:     "sample completions with recorded log-probs (JSONL in, JSONL out)",
		ArgsUsage: "< prompts.jsonl > samples.jsonl",
		Description: "Reads one prompt per line, {\"prompt\": \"text\"}, {\"messages\": [{\"role\", \"content\"}, ..]} (rendered\n" +
			"with the chat template, assistant header added) or {\"prompt_ids\": [..]}, and writes --samples lines per\n" +
			"prompt, in input order: {\"text\": .., \"ids\": [generated ids], \"logprobs\": [one per id], \"finish_reason\":\n" +
			"\"stop\"|\"length\", \"prompt_index\": i, \"sample_index\": j}. \"text\" is the decoded output (special tokens\n" +
			"skipped, cut before a --stop string) and needs a tokenizer: --tokenizer, or the --model directory's own.\n" +
			"logprobs are log p(id) under the model at --temperature (1\n" +
			"when greedy), as the trainer recomputes them. Each prompt is prefilled once and its KV cache shared\n" +
			"by its samples. With --seed every sample's randomness derives from (seed, prompt line, sample), so\n" +
			"results do not depend on --batch-size. Generation stops at the model's eos_token_id (config.json and\n" +
			"generation_config.json, as transformers does) unless --ignore-eos, at any --stop-id or --stop string,\n" +
			"or after --max-new-tokens. Decoding stays on the device between reads of the sampled tokens every\n" +
			"--sync-every steps; with --cuda-graphs a CUDA device replays each step as a graph. Neither changes\n" +
			"what is sampled.",
		Flags: append(append(modelFlags(), tokenizerFlags(false)...),
			skipBadLinesFlag,
			&cli.Float64Flag{Name: "temperature", Value: 1, Usage: "0 is greedy"},
			&cli.Float64Flag{Name: "top-p", Value: 1, Usage: "nucleus sampling; 1 is off"},
			&cli.Int64Flag{Name: "top-k", Usage: "keep the K most likely tokens; 0 is off"},
			&cli.Float64Flag{Name: "min-p", Usage: "drop tokens below min-p × the most likely one's probability; 0 is off"},
			&cli.IntFlag{Name: "max-new-tokens", Value: 256},
			&cli.IntFlag{Name: "samples", Aliases: []string{"n"}, Value: 1, Usage: "samples per prompt (G)"},
			&cli.Uint64Flag{Name: "seed", Value: 0},
			&cli.Int64SliceFlag{Name: "stop-id", Usage: "token ids that end a sample (repeatable)"},
			&cli.StringSliceFlag{Name: "stop", Usage: "strings that end a sample, found across token boundaries (repeatable; needs the tokenizer)"},
			&cli.BoolFlag{Name: "add-generation-prompt", Value: true, Usage: "messages: end the prompt with the assistant header"},
			&cli.BoolFlag{Name: "skip-special-tokens", Value: true, Usage: "leave special tokens out of \"text\""},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "do not stop at the model's eos_token_id"},
			&cli.IntFlag{Name: "batch-size", Value: 8, Usage: "prompts generated together"},
			&cli.IntFlag{Name: "sync-every", Value: model.DefaultSyncEvery, Usage: "decode steps between two reads of the sampled tokens by the host (speed only)"},
			&cli.BoolFlag{Name: "cuda-graphs", Usage: "on CUDA, replay decode steps as CUDA graphs (speed only)"},
		),
		Action: runGenerate,
	}
}

func runGenerate(c *cli.Context) error {
	p := model.SamplingParams{Temperature: c.Float64("temperature"), TopP: c.Float64("top-p"), TopK: c.Int64("top-k"),
		MinP: c.Float64("min-p"), MaxNewTokens: c.Int("max-new-tokens"), Seed: c.Uint64("seed"), StopIDs: c.Int64Slice("stop-id"),
		StopStrings: c.StringSlice("stop")}
	if err := p.Validate(); err != nil {
		return usageError{err}
	}
	if c.Int("samples") < 1 || c.Int("batch-size") < 1 {
		return usageError{fmt.Errorf("--samples and --batch-size must be ≥ 1")}
	}
	for _, st := range p.StopStrings {
		if st == "" {
			return usageError{fmt.Errorf("--stop: empty string")}
		}
	}
	chatOpt, err := chatOptions(c)
	if err != nil {
		return err
	}
	chatOpt.AddGenerationPrompt = c.Bool("add-generation-prompt")
	tk, err := loadTokenizer(c)
	if err != nil {
		return err
	}
	if tk == nil && len(p.StopStrings) > 0 {
		return usageError{fmt.Errorf("--stop needs a tokenizer: pass --tokenizer (the --model directory has no %s)", tokenizer.TokenizerFile)}
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
	if c.Int("sync-every") < 1 {
		return usageError{fmt.Errorf("--sync-every must be ≥ 1, got %d", c.Int("sync-every"))}
	}
	g := generator{m: m, tk: tk, p: p, samples: c.Int("samples"), batch: c.Int("batch-size"),
		chat: chatOpt, skipSpecial: c.Bool("skip-special-tokens"), skipBad: c.Bool("skip-bad-lines"),
		opt: model.GenerateOptions{SyncEvery: c.Int("sync-every"), CUDAGraphs: c.Bool("cuda-graphs")}}
	if isTerminal(os.Stderr) {
		g.progress = os.Stderr
	}
	return g.run(c.App.Reader, c.App.Writer)
}

type generateIn struct {
	PromptIDs *[]int64             `json:"prompt_ids"`
	Prompt    *string              `json:"prompt"`
	Messages  *[]tokenizer.Message `json:"messages"`
}

type generateOut struct {
	Text         *string   `json:"text,omitempty"`
	IDs          []int64   `json:"ids"`
	Logprobs     []float32 `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
	PromptIndex  int       `json:"prompt_index"`
	SampleIndex  int       `json:"sample_index"`
}

// generator streams JSONL prompts through the rollout engine in batches.
type generator struct {
	m           *model.Model
	tk          *tokenizer.Tokenizer // nil: ids only
	p           model.SamplingParams
	samples     int
	batch       int
	chat        tokenizer.ChatOptions
	skipSpecial bool
	progress    io.Writer // a terminal for the progress line, or nil
	skipBad     bool
	opt         model.GenerateOptions // the engine's switches
}

func (g *generator) run(r io.Reader, w io.Writer) error {
	s := newLineStream(w, g.skipBad)
	opt := g.opt
	if g.tk != nil {
		opt.Detokenize = func() func(int64) string {
			s := g.tk.NewStream(g.skipSpecial)
			return func(id int64) string { return s.Add(int(id)) }
		}
	}
	var bar *progress.Bar // one per batch: decode steps of the batch
	opt.Progress = func(step, finished, rows int) { bar.Update(step, fmt.Sprintf("%d/%d rows done", finished, rows)) }
	parse := func(line []byte) (model.Request, error) {
		ids, err := g.promptIDs(line)
		return model.Request{PromptIDs: ids, Samples: g.samples}, err
	}
	flush := func(reqs []model.Request, lines []int) error {
		// Seeds follow the prompt's line, not its place in the batch.
		bar = progress.New(g.progress, "generate", g.p.MaxNewTokens, 0)
		res, err := g.m.GenerateAt(reqs, lines, g.p, opt)
		bar.Done(fmt.Sprintf("lines %d-%d", lines[0], lines[len(lines)-1]))
		if err != nil {
			return fmt.Errorf("lines %d-%d: %w", lines[0], lines[len(lines)-1], err)
		}
		for _, smp := range res {
			o := generateOut{IDs: smp.IDs, Logprobs: smp.Logprobs, FinishReason: smp.FinishReason, PromptIndex: lines[smp.Prompt] - 1, SampleIndex: smp.Index}
			if g.tk != nil {
				text := g.text(smp.IDs)
				o.Text = &text
			}
			if err := s.enc.Encode(o); err != nil {
				return err
			}
		}
		return s.out.Flush()
	}
	return s.done(jsonl.Batched(r, "stdin", g.batch, parse, flush, s.bad()))
}

// promptIDs reads one input line into prompt ids, checked against the model.
func (g *generator) promptIDs(line []byte) ([]int64, error) {
	var rec generateIn
	if err := json.Unmarshal(line, &rec); err != nil {
		return nil, err
	}
	field := "prompt_ids"
	var ids []int64
	switch {
	case rec.PromptIDs != nil:
		ids = *rec.PromptIDs
	case rec.Prompt != nil || rec.Messages != nil:
		if g.tk == nil {
			return nil, fmt.Errorf("\"prompt\"/\"messages\" need a tokenizer: pass --tokenizer (the --model directory has no %s), or send \"prompt_ids\"", tokenizer.TokenizerFile)
		}
		var x []int
		var err error
		if rec.Prompt != nil {
			field = "prompt"
			x, err = g.tk.Encode(*rec.Prompt, true)
		} else {
			field = "messages"
			x, err = g.tk.ChatIDs(*rec.Messages, g.chat)
		}
		if err != nil {
			return nil, fmt.Errorf("%q: %w", field, err)
		}
		ids = tokenizer.Int64s(x)
	default:
		return nil, fmt.Errorf("no \"prompt\", \"messages\" or \"prompt_ids\" field")
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%q: empty prompt", field)
	}
	if err := g.m.CheckIDs(ids); err != nil {
		return nil, fmt.Errorf("%q: %w", field, err)
	}
	if mp := g.m.Config.MaxPositionEmbeddings; mp > 0 && int64(len(ids)+g.p.MaxNewTokens) > mp {
		return nil, fmt.Errorf("%q: %d tokens + --max-new-tokens %d exceed the model's context (%d)", field, len(ids), g.p.MaxNewTokens, mp)
	}
	return ids, nil
}

// text decodes a sample, cut before the first stop string it holds.
func (g *generator) text(ids []int64) string {
	text := g.tk.Decode(tokenizer.Ints(ids), g.skipSpecial)
	cut := len(text)
	for _, st := range g.p.StopStrings {
		if i := strings.Index(text, st); i >= 0 && i < cut {
			cut = i
		}
	}
	return text[:cut]
}
