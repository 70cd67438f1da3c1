package eval

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// A run's report: RUN_DIR/report.html, charts inline as SVG. It reads what
// the run wrote — metrics.jsonl of each stage (RUN_DIR itself, or the
// stage directories the caller names: the demo's), evaluation
// summaries (RUN_DIR/summary.json for an evaluation directory,
// RUN_DIR/eval/*/summary.json for a run) and config.resolved.yaml — so
// `lanpo report RUN_DIR` can regenerate it.

// Stage is a training stage's directory under a run and its title.
type Stage struct{ Dir, Title string }

// Section writes a part of a report's body from a run's files (nothing
// when they are absent).
type Section func(b *strings.Builder, runDir string) error

// WriteReport writes RUN_DIR/report.html from the files of a run: the
// sections first (the demo's), each evaluation summary, then the curves of
// every stage whose directory holds a metrics.jsonl (none: RUN_DIR itself,
// "Training").
func WriteReport(runDir string, stages []Stage, sections ...Section) error {
	var found []Stage
	for _, s := range stages {
		if _, err := os.Stat(filepath.Join(runDir, s.Dir, "metrics.jsonl")); err == nil {
			found = append(found, s)
		}
	}
	if len(found) == 0 {
		if _, err := os.Stat(filepath.Join(runDir, "metrics.jsonl")); err == nil {
			found = []Stage{{".", "Training"}}
		}
	}
	evals := evalSummaries(runDir)
	if len(found) == 0 && len(evals) == 0 {
		return fmt.Errorf("report %s: no metrics.jsonl in it (or in sft/, rl/) and no evaluation summary", runDir)
	}
	var body strings.Builder
	fmt.Fprintf(&body, "<h1>lanpo run report</h1><p>%s</p>", html.EscapeString(runDir))
	for _, section := range sections {
		if err := section(&body, runDir); err != nil {
			return err
		}
	}
	for _, e := range evals {
		fmt.Fprintf(&body, "<h2>Evaluation: %s</h2>", html.EscapeString(e.name))
		writeEvalTable(&body, e.sums)
	}
	for _, stage := range found {
		rows, err := ReadMetrics(filepath.Join(runDir, stage.Dir, "metrics.jsonl"))
		if err != nil {
			return err
		}
		fmt.Fprintf(&body, "<h2>%s</h2>", stage.Title)
		charts := [][]string{{"loss"}, {"eval_loss"}, {"reward_mean", "accuracy"}, {"response_length_mean"}, {"entropy"}, {"kl", "clip_frac"},
			{"accuracy_feedback", "accuracy_scratch"}, {"pool_entries"}}
		for _, keys := range charts {
			c := Chart{Title: strings.Join(keys, ", "), XLabel: "step", YLabel: strings.Join(keys, ", ")}
			for _, k := range keys {
				c.Series = append(c.Series, MetricSeries(rows, k))
			}
			WriteChart(&body, c)
		}
		for _, c := range evalCurves(rows) {
			WriteChart(&body, c)
		}
		if cfg, err := os.ReadFile(filepath.Join(runDir, stage.Dir, "config.resolved.yaml")); err == nil {
			fmt.Fprintf(&body, "<details><summary>config</summary><pre>%s</pre></details>", html.EscapeString(string(cfg)))
		}
	}
	page := "<!doctype html><meta charset=utf-8><title>lanpo report</title><style>body{font-family:sans-serif;max-width:1200px;margin:2em auto}" +
		"table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;padding:4px 8px;font-size:14px}.ok{background:#dfd}.bad{background:#fdd}" +
		"figure{display:inline-block;margin:8px}</style>" + body.String()
	return os.WriteFile(filepath.Join(runDir, "report.html"), []byte(page), 0o644)
}

// MetricSeries is a metric against step (NaN/Inf and missing values left out).
func MetricSeries(rows []map[string]any, key string) Series {
	s := Series{Name: key}
	for _, r := range rows {
		if v, ok := r[key].(float64); ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			s.Points = append(s.Points, [2]float64{r["step"].(float64), v})
		}
	}
	return s
}

// WriteChart adds a chart unless it has nothing to show (no points, or
// only zeros: accuracy during SFT, KL without a reference).
func WriteChart(b *strings.Builder, c Chart) {
	var kept []Series
	nonzero := false
	for _, s := range c.Series {
		if len(s.Points) == 0 {
			continue
		}
		kept = append(kept, s)
		for _, p := range s.Points {
			nonzero = nonzero || p[1] != 0
		}
	}
	if len(kept) == 0 || !nonzero && !c.Measured {
		return
	}
	c.Series = kept
	fmt.Fprintf(b, "<figure>%s</figure>", c.SVG())
}

// evalCurves are the eval/BENCH/MODE/METRIC keys of metrics.jsonl, one chart
// per benchmark with a series per mode and metric.
func evalCurves(rows []map[string]any) []Chart {
	var keys []string
	seen := map[string]bool{}
	for _, r := range rows {
		for k := range r {
			if strings.HasPrefix(k, "eval/") && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	byBench := map[string]*Chart{}
	var order []string
	for _, k := range keys {
		parts := strings.SplitN(strings.TrimPrefix(k, "eval/"), "/", 2)
		if len(parts) != 2 || !(strings.HasSuffix(k, "mean@k") || strings.HasSuffix(k, "first_attempt")) {
			continue
		}
		c := byBench[parts[0]]
		if c == nil {
			c = &Chart{Title: "evaluation: " + parts[0], XLabel: "training step", YLabel: "accuracy"}
			byBench[parts[0]] = c
			order = append(order, parts[0])
		}
		s := MetricSeries(rows, k)
		s.Name = parts[1]
		c.Series = append(c.Series, s)
	}
	var out []Chart
	for _, b := range order {
		out = append(out, *byBench[b])
	}
	return out
}

type evalSection struct {
	name string
	sums []Summary
}

// evalSummaries finds evaluation summaries: RUN_DIR/summary.json (an
// evaluation directory) and RUN_DIR/eval/*/summary.json.
func evalSummaries(runDir string) []evalSection {
	var out []evalSection
	paths := []string{filepath.Join(runDir, SummaryFile)}
	more, _ := filepath.Glob(filepath.Join(runDir, "eval", "*", SummaryFile))
	sort.Strings(more)
	for _, p := range append(paths, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var sums []Summary
		if json.Unmarshal(b, &sums) == nil && len(sums) > 0 {
			rel, _ := filepath.Rel(runDir, filepath.Dir(p))
			out = append(out, evalSection{rel, sums})
		}
	}
	return out
}

func writeEvalTable(b *strings.Builder, sums []Summary) {
	b.WriteString("<table><tr><th>benchmark</th><th>mode</th><th>problems</th><th>k</th><th>mean@k</th>")
	for _, kv := range sums[0].PassAtK {
		fmt.Fprintf(b, "<th>pass@%d</th>", kv.K)
	}
	b.WriteString("<th>maj@k</th><th>tokens</th><th>truncated</th><th>notes</th></tr>")
	for _, s := range sums {
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%.3f</td>", html.EscapeString(s.Bench), s.Mode, s.N, s.K, s.MeanAtK)
		for _, kv := range s.PassAtK {
			fmt.Fprintf(b, "<td>%.3f</td>", kv.Value)
		}
		notes := ""
		switch s.Mode {
		case ModeSelfCorrect:
			notes = fmt.Sprintf("first attempt %.3f → after reflection %.3f; wrong→right %d, right→wrong %d", s.FirstAttempt, s.AfterReflection, s.WrongToRight, s.RightToWrong)
		case ModeRetrieval:
			notes = fmt.Sprintf("plan for %d of %d; %d with a near-duplicate in the pool", s.WithContext, s.N, s.NearDuplicates)
		}
		maj := fmt.Sprintf("%.3f", s.MajAtK)
		if s.Code {
			maj = "—"
		}
		fmt.Fprintf(b, "<td>%s</td><td>%.0f</td><td>%.3f</td><td>%s</td></tr>", maj, s.ResponseTokens, s.Truncated, html.EscapeString(notes))
	}
	b.WriteString("</table>")
}

// ReadMetrics reads a metrics.jsonl.
func ReadMetrics(path string) ([]map[string]any, error) { return jsonl.Read[map[string]any](path) }
