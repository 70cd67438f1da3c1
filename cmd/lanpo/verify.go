package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/reward"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "check math answers against gold answers (JSONL in, JSONL out)",
		ArgsUsage: "< pairs.jsonl > verdicts.jsonl",
		Description: "Reads one {\"pred\": .., \"gold\": ..} per line and writes {\"correct\": bool, \"extracted\": ..} for each, in\n" +
			"order. pred may be a whole model response: the answer is taken from its last \\boxed{..} (or \\fbox,\n" +
			"\"final answer is ..\", \"Answer: ..\"), else from its final non-empty line (display math, \"the answer\n" +
			"is ..\", inline math, the last number). gold is a dataset answer such as \"\\frac{1}{2}\" or\n" +
			"\"(3, \\frac{\\pi}{2})\". Equivalence is mathematical (fractions, decimals, roots, symbolic expressions,\n" +
			"tuples, intervals and inequalities, sets, matrices, percentages, units) and never evaluates text as\n" +
			"code; every check is bounded by --timeout.\n\n" +
			"A line may also say that pred was cut off by the token limit: \"finish_reason\": \"length\" (as\n" +
			"inference servers report it; any other value is a finished response) or \"truncated\": true. A\n" +
			"truncated pred is correct only with an explicit, complete answer (\\boxed{..}, \"final answer is ..\",\n" +
			"\"Answer: ..\"); its last number is never taken as one.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "workers", Usage: "parallel checks (default: all cores)"},
			&cli.DurationFlag{Name: "timeout", Value: time.Second, Usage: "longest one check may take (then: not correct)"},
		},
		Action: func(c *cli.Context) error {
			return verifyLines(c.App.Reader, c.App.Writer, c.Int("workers"), reward.Options{Timeout: c.Duration("timeout")})
		},
	}
}

const verifyBlock = 4096

func verifyLines(r io.Reader, w io.Writer, workers int, opt reward.Options) error {
	out := bufio.NewWriter(w)
	defer out.Flush()
	enc := jsonl.Encoder(out)
	var pairs []reward.Pair
	flush := func() error {
		for _, res := range reward.VerifyBatch(pairs, workers, opt) {
			if err := enc.Encode(res); err != nil {
				return err
			}
		}
		pairs = pairs[:0]
		return out.Flush()
	}
	err := jsonl.Lines(r, "stdin", func(n int, line []byte) error {
		var rec struct {
			Pred         *string `json:"pred"`
			Gold         *string `json:"gold"`
			FinishReason string  `json:"finish_reason"`
			Truncated    bool    `json:"truncated"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("stdin line %d: %w", n, err)
		}
		if rec.Pred == nil || rec.Gold == nil {
			return fmt.Errorf("stdin line %d: want {\"pred\": string, \"gold\": string}", n)
		}
		pairs = append(pairs, reward.Pair{Response: *rec.Pred, Gold: *rec.Gold,
			Truncated: rec.Truncated || rec.FinishReason == "length"})
		if len(pairs) == verifyBlock {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}
