package main

import (
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
			skipBadLinesFlag,
		},
		Action: func(c *cli.Context) error {
			return verifyLines(c.App.Reader, c.App.Writer, c.Int("workers"), reward.Options{Timeout: c.Duration("timeout")}, c.Bool("skip-bad-lines"))
		},
	}
}

const verifyBlock = 4096

func verifyLines(r io.Reader, w io.Writer, workers int, opt reward.Options, skipBad bool) error {
	s := newLineStream(w, skipBad)
	parse := func(line []byte) (reward.Pair, error) {
		var rec struct {
			Pred         *string `json:"pred"`
			Gold         *string `json:"gold"`
			FinishReason string  `json:"finish_reason"`
			Truncated    bool    `json:"truncated"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return reward.Pair{}, err
		}
		if rec.Pred == nil || rec.Gold == nil {
			return reward.Pair{}, fmt.Errorf("want {\"pred\": string, \"gold\": string}")
		}
		return reward.Pair{Response: *rec.Pred, Gold: *rec.Gold, Truncated: rec.Truncated || rec.FinishReason == "length"}, nil
	}
	flush := func(pairs []reward.Pair, _ []int) error {
		for _, res := range reward.VerifyBatch(pairs, workers, opt) {
			if err := s.enc.Encode(res); err != nil {
				return err
			}
		}
		return s.out.Flush()
	}
	return s.done(jsonl.Batched(r, "stdin", verifyBlock, parse, flush, s.bad()))
}
