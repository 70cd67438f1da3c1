package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/bench"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/reward"
)

func benchVerifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "verifications per second against math-verify on the same pairs",
		Description: "Verifies every {\"pred\", \"gold\"} line of --data with lanpo, on one goroutine and on all cores, and,\n" +
			"with --hf-python (a python with PyPI math-verify), with math-verify one pair at a time. Prints\n" +
			"verifications/s, the ratio, and how often the two verdicts agree.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Usage: "JSONL of {\"pred\", \"gold\"} (e.g. reward/testdata/verify_corpus.jsonl)", Required: true},
			&cli.StringFlag{Name: "hf-python", Usage: "python with math-verify for the baseline", EnvVars: []string{"LANPO_HF_PYTHON"}},
		},
		Action: runBenchVerify,
	}
}

func runBenchVerify(c *cli.Context) error {
	path := c.String("data")
	var pairs []reward.Pair
	var raw [][2]string
	err := jsonl.File(path, func(n int, line []byte) error {
		var rec struct{ Pred, Gold *string }
		if err := json.Unmarshal(line, &rec); err != nil || rec.Pred == nil || rec.Gold == nil {
			return fmt.Errorf("%s:%d: want {\"pred\": string, \"gold\": string}", path, n)
		}
		pairs = append(pairs, reward.Pair{Response: *rec.Pred, Gold: *rec.Gold})
		raw = append(raw, [2]string{*rec.Pred, *rec.Gold})
		return nil
	})
	if err != nil {
		return err
	}
	if len(pairs) == 0 {
		return fmt.Errorf("%s: no pairs", path)
	}
	start := time.Now()
	ours := reward.VerifyBatch(pairs, 1, reward.Options{})
	single := time.Since(start)
	start = time.Now()
	reward.VerifyBatch(pairs, runtime.GOMAXPROCS(0), reward.Options{})
	par := time.Since(start)
	w := c.App.Writer
	n := float64(len(pairs))
	fmt.Fprintf(w, "pairs: %d (%s)\n", len(pairs), path)
	fmt.Fprintf(w, "lanpo: %.0f verifications/s single-threaded, %.0f on %d cores\n", n/single.Seconds(), n/par.Seconds(), runtime.GOMAXPROCS(0))
	py := c.String("hf-python")
	if py == "" {
		fmt.Fprintln(w, "math-verify baseline: unavailable (pass --hf-python or set LANPO_HF_PYTHON to a python with math-verify)")
		return nil
	}
	dir, err := os.MkdirTemp("", "lanpo-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	js, _ := json.Marshal(raw)
	if err := os.WriteFile(filepath.Join(dir, "pairs.json"), js, 0o644); err != nil {
		return err
	}
	out, err := bench.RunPython(py, bench.MathVerify, dir, filepath.Join(dir, "pairs.json"))
	if err != nil {
		fmt.Fprintf(w, "math-verify baseline: unavailable: %v\n", err)
		return nil
	}
	var mv struct {
		Seconds  float64 `json:"seconds"`
		Verdicts []bool  `json:"verdicts"`
		Version  string  `json:"math_verify"`
	}
	if err := json.Unmarshal(out, &mv); err != nil || len(mv.Verdicts) != len(pairs) {
		return fmt.Errorf("math-verify baseline printed %.200s: %v", out, err)
	}
	agree := 0
	for i, v := range mv.Verdicts {
		if v == ours[i].Correct {
			agree++
		}
	}
	fmt.Fprintf(w, "math-verify %s: %.0f verifications/s single-threaded\n", mv.Version, n/mv.Seconds)
	fmt.Fprintf(w, "ratio lanpo/math-verify: single-threaded %.1fx, lanpo on %d cores %.1fx\n", mv.Seconds/single.Seconds(), runtime.GOMAXPROCS(0), mv.Seconds/par.Seconds())
	fmt.Fprintf(w, "verdicts agree: %d/%d (%.2f%%)\n", agree, len(pairs), 100*float64(agree)/n)
	return nil
}
