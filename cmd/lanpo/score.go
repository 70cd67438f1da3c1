package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
)

func scoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "score",
		Usage:     "per-token log-probabilities of token sequences under a model (JSONL in, JSONL out)",
		ArgsUsage: "< in.jsonl > out.jsonl",
		Description: "Reads one JSON object per line, {\"ids\": [..]}, and writes one line per input line, in order:\n" +
			"{\"logprobs\": [..]} with logprobs[i-1] = log p(ids[i] | ids[<i]) for i >= 1 (fp32).\n" +
			"--model is a Hugging Face directory (config.json + model.safetensors or shards).",
		Flags: append(modelFlags(),
			&cli.IntFlag{Name: "batch-size", Value: 8, Usage: "lines scored together (left-padded)"},
			skipBadLinesFlag,
		),
		Action: func(c *cli.Context) error {
			if c.Int("batch-size") < 1 {
				return usageError{fmt.Errorf("--batch-size must be >= 1")}
			}
			m, err := loadModel(c)
			if err != nil {
				return err
			}
			defer m.Close()
			return scoreLines(c.App.Reader, c.App.Writer, m, c.Int("batch-size"), c.Bool("skip-bad-lines"))
		},
	}
}

// scoreLines streams JSONL through the model in batches, keeping order.
func scoreLines(r io.Reader, w io.Writer, m *model.Model, batch int, skipBad bool) error {
	s := newLineStream(w, skipBad)
	parse := func(line []byte) ([]int64, error) {
		var rec struct {
			IDs *[]int64 `json:"ids"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, err
		}
		if rec.IDs == nil {
			return nil, fmt.Errorf("no \"ids\" field")
		}
		if err := m.CheckIDs(*rec.IDs); err != nil {
			return nil, fmt.Errorf("\"ids\": %w", err)
		}
		return *rec.IDs, nil
	}
	flush := func(seqs [][]int64, lines []int) error {
		res, err := m.Score(seqs)
		if err != nil {
			return fmt.Errorf("lines %d-%d: %w", lines[0], lines[len(lines)-1], err)
		}
		for _, lp := range res {
			if err := s.enc.Encode(struct {
				Logprobs []float32 `json:"logprobs"`
			}{lp}); err != nil {
				return err
			}
		}
		return s.out.Flush()
	}
	return s.done(jsonl.Batched(r, "stdin", batch, parse, flush, s.bad()))
}
