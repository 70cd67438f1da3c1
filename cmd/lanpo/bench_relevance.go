package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

func benchRelevanceCommand() *cli.Command {
	return &cli.Command{
		Name:  "relevance",
		Usage: "calibrate LANPO's relevance filter: scores of same-subject vs different-subject problem pairs",
		Description: "Draws pairs of distinct problems from --data (JSONL with \"id\", \"problem\" and \"subject\", e.g. MATH\n" +
			"train) and labels them same-subject or other-subject. --draw retrieval (default) draws them as training\n" +
			"does: --pairs query problems, each with its --candidates BM25 candidates among the other problems, so\n" +
			"the pass rates describe the filter's decisions in a run; --draw random draws --pairs random pairs of\n" +
			"each kind. Each scorer of lanpo.similarity (policy: the model rates 0-9, read from its digit\n" +
			"probabilities; embedding: cosine of centred mean-pooled hidden states; bm25: normalized BM25 over\n" +
			"--data) scores them; printed per threshold: the share of each kind that passes on the raw scale (the\n" +
			"threshold as lanpo.relevance_floor), on the quantile scale (lanpo.similarity_scale, the default: the\n" +
			"share of random pairs a pair outscores), and the combined filter training applies (quantile ≥ --gamma\n" +
			"and raw ≥ the threshold); with the mean scores and the AUC. --pair 'ID ID' reports one pair's scores.\n" +
			"The baseline is the other kind of pair, same run.\n" +
			"Example: lanpo bench relevance --model ~/models/Qwen2.5-0.5B-Instruct --data math_train.jsonl",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "the policy's Hugging Face directory (not needed for bm25 alone)"},
			&cli.StringFlag{Name: "data", Usage: "JSONL problems with a subject field", Required: true},
			&cli.StringFlag{Name: "scorers", Value: "policy,embedding,bm25", Usage: "comma-separated"},
			&cli.StringFlag{Name: "draw", Value: feedback.DrawRetrieval, Usage: "retrieval (as training draws candidates) or random"},
			&cli.IntFlag{Name: "pairs", Value: 100, Usage: "query problems (--draw retrieval) or pairs of each kind (random)"},
			&cli.IntFlag{Name: "candidates", Value: 8, Usage: "BM25 candidates per query, as lanpo.retrieval_candidates (--draw retrieval)"},
			&cli.Float64Flag{Name: "gamma", Value: 0.9, Usage: "quantile γ of the combined filter, as lanpo.similarity_threshold"},
			&cli.StringSliceFlag{Name: "pair", Usage: "'QUERY_ID CANDIDATE_ID': report this pair's scores (repeatable)"},
			&cli.StringFlag{Name: "centre", Value: "fixed", Usage: "the embedding scorer's centre, as lanpo.embedding_centre: fixed (a built-in set of MATH problems) or batch (the texts scored together)"},
			&cli.Int64Flag{Name: "seed", Value: 1},
			&cli.IntFlag{Name: "max-context-tokens", Value: 1024, Usage: "as lanpo.max_context_tokens: each text is cut to half of it"},
			&cli.StringFlag{Name: "dtype", Usage: "float32 (default on CPU), bfloat16, float16"},
			&cli.StringFlag{Name: "thresholds", Value: "0.1,0.2,0.3,0.4,0.5,0.7,0.9"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
		},
		Action: func(c *cli.Context) error {
			problems, err := jsonl.Read[feedback.CalibrationProblem](c.String("data"))
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
			var named [][2]string
			for _, p := range c.StringSlice("pair") {
				ids := strings.Fields(p)
				if len(ids) != 2 {
					return usageError{fmt.Errorf("--pair %q: want two ids separated by a space", p)}
				}
				named = append(named, [2]string{strings.TrimSpace(ids[0]), strings.TrimSpace(ids[1])})
			}
			res, err := feedback.CalibrateRelevance(feedback.CalibrationOptions{Model: c.String("model"), DType: c.String("dtype"), Scorers: scorers,
				Problems: problems, Draw: c.String("draw"), Candidates: c.Int("candidates"), Pairs: c.Int("pairs"), Seed: c.Int64("seed"),
				MaxContextTokens: c.Int("max-context-tokens"), Thresholds: gammas, Gamma: c.Float64("gamma"), Centre: c.String("centre"), Named: named})
			if err != nil {
				return err
			}
			w := c.App.Writer
			if c.Bool("json") {
				return jsonl.Encoder(w).Encode(res)
			}
			if len(res) > 0 {
				fmt.Fprintf(w, "%d same-subject and %d other-subject pairs from %s (--draw %s)\n", res[0].Same, res[0].Other, c.String("data"), c.String("draw"))
			}
			for _, r := range res {
				fmt.Fprintf(w, "%-9s mean %.3f (same) vs %.3f (other), AUC %.3f, %.1f s\n", r.Scorer, r.MeanSame, r.MeanOther, r.AUC, r.Seconds)
				for i, p := range r.Pass {
					q, b := r.QuantilePass[i], r.CombinedPass[i]
					fmt.Fprintf(w, "          %.2f: raw %5.1f%% same vs %5.1f%% other pass; quantile %5.1f%% vs %5.1f%%; quantile ≥ %.2f and raw ≥ %.2f: %5.1f%% vs %5.1f%%\n",
						p.Gamma, 100*p.Same, 100*p.Other, 100*q.Same, 100*q.Other, c.Float64("gamma"), p.Gamma, 100*b.Same, 100*b.Other)
				}
				for _, n := range r.Named {
					fmt.Fprintf(w, "          pair %s, %s: raw %.3f, quantile %.3f\n", n.A, n.B, n.Raw, n.Quantile)
				}
			}
			return nil
		},
	}
}
