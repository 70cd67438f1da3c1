package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

func tokenizeCommand() *cli.Command {
	return &cli.Command{
		Name:      "tokenize",
		Usage:     "text or chat messages to token ids, exactly as Hugging Face tokenizers (JSONL in, JSONL out)",
		ArgsUsage: "< in.jsonl > out.jsonl",
		Description: "Reads one JSON object per line and writes {\"ids\": [..]} for each, in order.\n" +
			"Without --chat a line is {\"text\": \"..\"}; special tokens written in the text (<|im_start|>, <think>, ..)\n" +
			"become their ids, as in Hugging Face. With --chat a line is {\"messages\": [{\"role\", \"content\"}, ..]},\n" +
			"rendered with the model's chat template (Qwen3, Qwen2.5 and its variants, Llama-3) and then encoded\n" +
			"like apply_chat_template(tokenize=True).\n" +
			"--tokenizer is a Hugging Face model directory (tokenizer.json, tokenizer_config.json).",
		Flags: append(tokenizerFlags(true),
			&cli.BoolFlag{Name: "chat", Usage: "lines are {\"messages\": [..]} rendered with the chat template"},
			&cli.BoolFlag{Name: "add-special-tokens", Value: true, Usage: "text mode: add the post-processor's tokens (Llama-3's BOS; none for Qwen)"},
			&cli.BoolFlag{Name: "add-generation-prompt", Usage: "chat mode: end with the header of an assistant turn"},
			&cli.IntFlag{Name: "workers", Usage: "encoding goroutines (default: all cores)"},
			skipBadLinesFlag,
		),
		Action: func(c *cli.Context) error {
			tk, err := loadTokenizer(c)
			if err != nil {
				return err
			}
			opt, err := chatOptions(c)
			if err != nil {
				return err
			}
			return tokenizeLines(c.App.Reader, c.App.Writer, tk, tokenizeMode{
				chat: c.Bool("chat"), addSpecial: c.Bool("add-special-tokens"), chatOpt: opt, workers: c.Int("workers"),
				skipBad: c.Bool("skip-bad-lines"),
			})
		},
	}
}

// tokenizerFlags are shared by every command that reads text. Where the
// tokenizer is optional it defaults to the --model directory.
func tokenizerFlags(required bool) []cli.Flag {
	usage := "Hugging Face tokenizer directory (tokenizer.json ...)"
	if !required {
		usage += " (default: --model, when it has tokenizer.json)"
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "tokenizer", Usage: usage, Required: required},
		&cli.StringFlag{Name: "chat-format", Usage: "render an unrecognised chat template as this family: " + fmt.Sprint(tokenizer.ChatFormatNames())},
		&cli.StringFlag{Name: "enable-thinking", Usage: "Qwen3 chat template switch: true or false (default: left undefined, thinking on)"},
	}
}

// loadTokenizer loads --tokenizer; without it (where it is optional), the
// --model directory's tokenizer if there is one, else nil.
func loadTokenizer(c *cli.Context) (*tokenizer.Tokenizer, error) {
	dir := c.String("tokenizer")
	if dir == "" {
		dir = c.String("model")
		if _, err := os.Stat(filepath.Join(dir, tokenizer.TokenizerFile)); dir == "" || err != nil {
			return nil, nil
		}
	}
	tk, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	if f := c.String("chat-format"); f != "" {
		if err := tk.SetChatFormat(f); err != nil {
			return nil, usageError{fmt.Errorf("--chat-format: %w", err)}
		}
	}
	return tk, nil
}

func chatOptions(c *cli.Context) (tokenizer.ChatOptions, error) {
	opt := tokenizer.ChatOptions{AddGenerationPrompt: c.Bool("add-generation-prompt")}
	switch v := c.String("enable-thinking"); v {
	case "":
	case "true", "false":
		on := v == "true"
		opt.EnableThinking = &on
	default:
		return opt, usageError{fmt.Errorf("--enable-thinking %q: want true or false", v)}
	}
	return opt, nil
}

type tokenizeMode struct {
	chat, addSpecial bool
	chatOpt          tokenizer.ChatOptions
	workers          int
	skipBad          bool
}

// tokenizeBlock is how many lines are encoded in parallel before writing.
const tokenizeBlock = 4096

// tokenizeLines streams JSONL through the tokenizer, keeping line order.
func tokenizeLines(r io.Reader, w io.Writer, tk *tokenizer.Tokenizer, mode tokenizeMode) error {
	s := newLineStream(w, mode.skipBad)
	parse := func(line []byte) (string, error) { return lineText(line, tk, mode) }
	flush := func(texts []string, _ []int) error {
		ids, err := tk.EncodeBatch(texts, mode.addSpecial && !mode.chat, mode.workers)
		if err != nil {
			return fmt.Errorf("stdin: %w", err) // cannot happen: lines were checked
		}
		for _, x := range ids {
			if err := writeIDs(s.out, x); err != nil {
				return err
			}
		}
		return s.out.Flush()
	}
	return s.done(jsonl.Batched(r, "stdin", tokenizeBlock, parse, flush, s.bad()))
}

// lineText returns the text to encode for one input line.
func lineText(line []byte, tk *tokenizer.Tokenizer, mode tokenizeMode) (string, error) {
	if mode.chat {
		var rec struct {
			Messages *[]tokenizer.Message `json:"messages"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return "", err
		}
		if rec.Messages == nil {
			return "", fmt.Errorf("no \"messages\" field (--chat reads {\"messages\": [..]})")
		}
		return tk.Chat(*rec.Messages, mode.chatOpt)
	}
	var rec struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return "", err
	}
	if rec.Text == nil {
		return "", fmt.Errorf("no \"text\" field (use --chat for {\"messages\": [..]})")
	}
	return *rec.Text, nil
}

func writeIDs(w *bufio.Writer, ids []int) error {
	b := append(make([]byte, 0, 16+len(ids)*7), `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", id)
	}
	b = append(b, "]}\n"...)
	_, err := w.Write(b)
	return err
}
