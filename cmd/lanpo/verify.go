package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/trainer"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "check math answers against gold answers, or programs against their tests (JSONL in, JSONL out)",
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
			"\"Answer: ..\"); its last number is never taken as one.\n\n" +
			"With --config, each line is scored as training scores a rollout, by the config's reward: section\n" +
			"(math, or your program or server: docs/rewards.md): {\"problem\": {the data record, mapped with the\n" +
			"config's data.*_key}, \"response\": .., \"prompt\": .. (optional), \"finish_reason\" or \"truncated\"}\n" +
			"in, {\"reward\": .., \"correct\": .., \"reason\": .., \"extracted\": ..} out (\"reward_error\" where\n" +
			"reward.on_error zero scored a failure 0). Example: lanpo verify --config run.yaml < rollouts.jsonl\n\n" +
			"With --code, each line is a program checked in the code reward's sandbox (docs/rewards.md), as\n" +
			"training with reward.kind: code scores it: {\"problem\": {\"prompt\": .., \"test\": .., \"entry_point\": ..}\n" +
			"(a HumanEval record as it is) or {\"problem\": {\"tests\": \"assert f(1) == 2\"}}, \"response\": ..} in\n" +
			"(the program is the response's last fenced block that defines the entry point, else its last fenced\n" +
			"block, else all of it), {\"reward\": .., \"correct\": ..,\n" +
			"\"reason\": ..} out. Example: echo '{\"problem\": {\"tests\": \"assert f(1) == 2\"}, \"response\":\n" +
			"\"def f(x):\\n    return x + 1\"}' | lanpo verify --code",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "score with this run config's reward: section (its algo.format_reward too) instead of pred/gold pairs"},
			&cli.BoolFlag{Name: "code", Usage: "check programs against their problems' tests in the sandbox (reward.kind: code with its defaults; with --config, the config's reward.code and reward.sandbox)"},
			&cli.StringSliceFlag{Name: "set", Usage: "override a config key (with --config), e.g. --set reward.timeout=10s"},
			&cli.IntFlag{Name: "workers", Usage: "parallel checks (default: all cores)"},
			&cli.DurationFlag{Name: "timeout", Value: time.Second, Usage: "longest one check may take (then: not correct)"},
			skipBadLinesFlag,
		},
		Action: func(c *cli.Context) error {
			if path := c.String("config"); path != "" || c.Bool("code") {
				return rewardLines(c.App.Reader, c.App.Writer, path, c.StringSlice("set"), c.Bool("code"), c.Bool("skip-bad-lines"))
			}
			return verifyLines(c.App.Reader, c.App.Writer, c.Int("workers"), reward.Options{Timeout: c.Duration("timeout")}, c.Bool("skip-bad-lines"))
		},
	}
}

const verifyBlock = 4096

// rewardLines scores {"problem", "response"} lines with the reward kind of
// the config at path (lanpo verify --config), or with code's (--code: the
// config's reward section made kind code, or the defaults without one).
func rewardLines(r io.Reader, w io.Writer, path string, sets []string, code, skipBad bool) error {
	cfg := trainer.DefaultConfig()
	if path != "" {
		var err error
		if cfg, err = trainer.ReadConfig(path, sets); err != nil {
			return usageError{err}
		}
	} else if len(sets) > 0 {
		return usageError{fmt.Errorf("--set needs --config")}
	}
	if code && cfg.Reward.Kind != reward.KindCode {
		if cfg.Reward.Kind != reward.KindMath {
			return usageError{fmt.Errorf("--code: %s says reward.kind %s", path, cfg.Reward.Kind)}
		}
		cfg.Reward.Kind, cfg.Algo.FormatReward = reward.KindCode, 0
	}
	if err := cfg.Resolve(); err != nil {
		return usageError{fmt.Errorf("%s: %w", path, err)}
	}
	scorer, err := reward.New(cfg.Reward, cfg.Algo.FormatReward)
	if err != nil {
		return usageError{err}
	}
	defer scorer.Close()
	s := newLineStream(w, skipBad)
	parse := func(line []byte) (reward.Request, error) {
		var rec struct {
			Problem      json.RawMessage `json:"problem"`
			Response     *string         `json:"response"`
			Prompt       string          `json:"prompt"`
			FinishReason string          `json:"finish_reason"`
			Truncated    bool            `json:"truncated"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return reward.Request{}, err
		}
		if len(rec.Problem) == 0 || rec.Response == nil {
			return reward.Request{}, fmt.Errorf("want {\"problem\": {the data record}, \"response\": string}")
		}
		if code {
			// A code problem's fields are read by the code reward itself
			// (HumanEval's as they are), not through the data mapping.
			var m map[string]any
			if err := json.Unmarshal(rec.Problem, &m); err != nil || m == nil {
				return reward.Request{}, fmt.Errorf("\"problem\": want an object")
			}
			id, _ := m["task_id"].(string)
			if s, ok := m["id"].(string); ok {
				id = s
			}
			return reward.Request{Problem: m, ID: id, Prompt: rec.Prompt, Response: *rec.Response,
				Truncated: rec.Truncated || rec.FinishReason == "length"}, nil
		}
		p, err := trainer.ReadRecord(rec.Problem, cfg.Data)
		if err != nil {
			return reward.Request{}, fmt.Errorf("\"problem\": %w", err)
		}
		return reward.Request{Problem: p.Record, ID: p.ID, Answer: p.Answer, Prompt: rec.Prompt, Response: *rec.Response,
			Truncated: rec.Truncated || rec.FinishReason == "length"}, nil
	}
	type out struct {
		reward.Verdict
		RewardError string `json:"reward_error,omitempty"`
	}
	flush := func(reqs []reward.Request, lines []int) error {
		vs, err := reward.ScoreChecked(context.Background(), scorer, reqs, func(i int) string { return fmt.Sprintf("stdin line %d", lines[i]) })
		if err != nil {
			return err
		}
		for _, v := range vs {
			if err := s.enc.Encode(out{v, v.Err}); err != nil {
				return err
			}
		}
		return s.out.Flush()
	}
	return s.done(jsonl.Batched(r, "stdin", verifyBlock, parse, flush, s.bad()))
}

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
