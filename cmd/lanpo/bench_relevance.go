package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/trainer"
)

func benchRelevanceCommand() *cli.Command {
	return &cli.Command{
		Name:  "relevance",
		Usage: "calibrate LANPO's relevance filter: scores of same-subject vs different-subject problem pairs",
		Description: "Draws --pairs pairs of distinct problems of the same subject and as many of different subjects from\n" +
			"--data (JSONL with \"id\", \"problem\" and \"subject\", e.g. MATH train), scores them with each scorer of\n" +
			"lanpo.similarity (policy: the model rates 0-9, read from its digit probabilities; embedding: cosine of\n" +
			"centred mean-pooled hidden states; bm25: normalized BM25 over --data) and prints, per threshold γ, the\n" +
			"share of each kind that passes — on the raw scale and on the quantile scale (lanpo.similarity_scale,\n" +
			"the default: the share of random pairs a pair outscores) — the mean scores and the AUC. Choose\n" +
			"lanpo.similarity and lanpo.similarity_threshold where related problems pass and unrelated ones do not.\n" +
			"The baseline is the other kind of pair, same run.\n" +
			"Example: lanpo bench relevance --model ~/models/Qwen2.5-0.5B-Instruct --data math_train.jsonl",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "the policy's Hugging Face directory (not needed for bm25 alone)"},
			&cli.StringFlag{Name: "data", Usage: "JSONL problems with a subject field", Required: true},
			&cli.StringFlag{Name: "scorers", Value: "policy,embedding,bm25", Usage: "comma-separated"},
			&cli.IntFlag{Name: "pairs", Value: 100, Usage: "pairs of each kind"},
			&cli.Int64Flag{Name: "seed", Value: 1},
			&cli.IntFlag{Name: "max-context-tokens", Value: 1024, Usage: "as lanpo.max_context_tokens: each text is cut to half of it"},
			&cli.StringFlag{Name: "dtype", Usage: "float32 (default on CPU), bfloat16, float16"},
			&cli.StringFlag{Name: "thresholds", Value: "0.3,0.5,0.7,0.8,0.9"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
		},
		Action: func(c *cli.Context) error {
			problems, err := jsonl.Read[trainer.CalibrationProblem](c.String("data"))
			if err != nil {
				return err
			}
			var gammas []float64
			for _, g := range strings.Split(c.String("thresholds"), ",") {
				var v float64
				if _, err := fmt.Sscan(strings.TrimSpace(g), &v); err != nil {
					return usageError{fmt.Errorf("--thresholds %q: %v", c.String("thresholds"), err)}
				}
				gammas = append(gammas, v)
			}
			scorers := strings.Split(c.String("scorers"), ",")
			if c.String("model") == "" && (len(scorers) != 1 || scorers[0] != "bm25") {
				return usageError{fmt.Errorf("--model is required for the policy and embedding scorers")}
			}
			res, err := trainer.CalibrateRelevance(trainer.CalibrationOptions{Model: c.String("model"), DType: c.String("dtype"), Scorers: scorers,
				Problems: problems, Pairs: c.Int("pairs"), Seed: c.Int64("seed"), MaxContextTokens: c.Int("max-context-tokens"), Thresholds: gammas})
			if err != nil {
				return err
			}
			w := c.App.Writer
			if c.Bool("json") {
				return jsonl.Encoder(w).Encode(res)
			}
			fmt.Fprintf(w, "%d same-subject and %d other-subject pairs from %s\n", c.Int("pairs"), c.Int("pairs"), c.String("data"))
			for _, r := range res {
				fmt.Fprintf(w, "%-9s mean %.3f (same) vs %.3f (other), AUC %.3f, %.1f s\n", r.Scorer, r.MeanSame, r.MeanOther, r.AUC, r.Seconds)
				for i, p := range r.Pass {
					q := r.QuantilePass[i]
					fmt.Fprintf(w, "          γ %.2f: raw %5.1f%% same-subject vs %5.1f%% other-subject pass; quantile %5.1f%% vs %5.1f%%\n",
						p.Gamma, 100*p.Same, 100*p.Other, 100*q.Same, 100*q.Other)
				}
			}
			return nil
		},
	}
}
