package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/reward"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "check math answers against gold answers (JSONL in, JSONL out)",
		ArgsUsage: "< pairs.jsonl > verdicts.jsonl",
		Description: "Reads one {\"pred\": .., \"gold\": ..} per line and writes {\"correct\": bool, \"extracted\": ..} for each, in\n" +
			"order. pred may be a whole model response: the answer is taken from its last \\boxed{..} (or \\fbox,\n" +
			"\"final answer is ..\", \"Answer: ..\", display math, else the last number). gold is a dataset answer\n" +
			"such as \"\\frac{1}{2}\" or \"(3, \\frac{\\pi}{2})\". Equivalence is mathematical (fractions, decimals,\n" +
			"roots, symbolic expressions, tuples, intervals, sets, matrices, percentages, units) and never\n" +
			"evaluates text as code; every check is bounded by --timeout.",
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
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 1<<20), 1<<30)
	out := bufio.NewWriter(w)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
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
	for n := 1; in.Scan(); n++ {
		var rec struct {
			Pred *string `json:"pred"`
			Gold *string `json:"gold"`
		}
		if err := json.Unmarshal(in.Bytes(), &rec); err != nil {
			return fmt.Errorf("stdin line %d: %w", n, err)
		}
		if rec.Pred == nil || rec.Gold == nil {
			return fmt.Errorf("stdin line %d: want {\"pred\": string, \"gold\": string}", n)
		}
		pairs = append(pairs, reward.Pair{Response: *rec.Pred, Gold: *rec.Gold})
		if len(pairs) == verifyBlock {
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
