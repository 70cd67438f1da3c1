package demo

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/pool"
)

// The demo's part of the report: the held-out table side by side, the
// split sizes and feedback availability, the arms' curves on shared charts
// (against step, compute and wall time), LANPO's feedback accuracy and pool
// growth, and what the model wrote into its pool and in one reflection.

// stages are a demo's stage directories in the order shown.
var stages = []eval.Stage{{Dir: "sft", Title: "Stage 1: SFT"}, {Dir: ArmGRPO, Title: "Stage 2: GRPO"}, {Dir: ArmLANPO, Title: "Stage 2: LANPO"},
	{Dir: ArmLANPOOriginal, Title: "Stage 2: LANPO (train_prompt: original)"}, {Dir: "rl", Title: "Stage 2: GRPO"}}

// WriteReport writes RUN_DIR/report.html for any run (eval.WriteReport),
// with the demo's sections and stages when RUN_DIR is a demo's.
func WriteReport(runDir string) error { return eval.WriteReport(runDir, stages, writeDemo) }

func writeDemo(b *strings.Builder, runDir string) error {
	raw, err := os.ReadFile(filepath.Join(runDir, "demo_results.json"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var res Results
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(runDir, "demo_results.json"), err)
	}
	heldOutTable(b, res)
	fmt.Fprintf(b, "<h2>Data</h2><p>Disjoint problem sets: %d held out, %d distinct RL problems (levels 2-4; %d prompt draws, so each recurs about %.1f times), %d distinct SFT problems (%d answer examples plus skill examples the world wrote).</p>",
		res.Sizes["heldout"], res.Sizes["rl_distinct"], res.Sizes["rl_prompt_draws"], float64(res.Sizes["rl_prompt_draws"])/float64(max(res.Sizes["rl_distinct"], 1)),
		res.Sizes["sft_distinct"], res.Sizes["sft_answers"])
	if len(res.Usage) > 0 {
		b.WriteString("<table><tr><th>arm</th><th>prompts</th><th>feedback-aware</th><th>reflection</th><th>abstraction</th><th>fell back to scratch</th></tr>")
		for _, arm := range sortedArms(res.Usage) {
			u := res.Usage[arm]
			fmt.Fprintf(b, "<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>", arm, u.Prompts, u.FeedbackAware, u.Reflection, u.Abstraction, u.Fallback)
		}
		b.WriteString("</table>")
	}
	armCurves(b, runDir)
	poolSamples(b, runDir)
	return nil
}

func sortedArms(m map[string]FeedbackUsage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// heldOutTable: levels down, stage × mode across.
func heldOutTable(b *strings.Builder, res Results) {
	type col struct {
		name string
		m    ModeResult
	}
	var cols []col
	for _, st := range res.Stages {
		for _, m := range st.Modes {
			name := st.Stage
			if st.Stage != "sft" {
				name += " " + m.Mode
			} else {
				name = "after SFT"
			}
			cols = append(cols, col{name, m})
		}
	}
	if len(cols) == 0 {
		return
	}
	b.WriteString("<h2>Held-out accuracy (greedy), after SFT and after each RL arm</h2><p>Same SFT checkpoint, seeds and rollout budget for every arm. Cells: accuracy (answers showing column steps).</p><table><tr><th>level</th><th>problems</th>")
	for _, c := range cols {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(c.name))
	}
	b.WriteString("</tr>")
	for i, la := range cols[0].m.Levels {
		name := ""
		if la.Level < len(Levels) {
			name = Levels[la.Level]
		}
		fmt.Fprintf(b, "<tr><td>%d: %s</td><td>%d</td>", la.Level, html.EscapeString(name), la.N)
		for _, c := range cols {
			if i < len(c.m.Levels) {
				fmt.Fprintf(b, "<td>%.3f (%d)</td>", c.m.Levels[i].Accuracy, c.m.Levels[i].Worked)
			}
		}
		b.WriteString("</tr>")
	}
	b.WriteString("<tr><th>all</th><td></td>")
	for _, c := range cols {
		fmt.Fprintf(b, "<th>%.3f (%d)</th>", c.m.Overall, c.m.Worked)
	}
	b.WriteString("</tr></table>")
}

// armCurves draws the RL arms on shared charts.
func armCurves(b *strings.Builder, runDir string) {
	type arm struct {
		name string
		rows []map[string]any
	}
	var arms []arm
	for _, s := range stages[1:] {
		if rows, err := eval.ReadMetrics(filepath.Join(runDir, s.Dir, "metrics.jsonl")); err == nil {
			arms = append(arms, arm{s.Dir, rows})
		}
	}
	if len(arms) == 0 {
		return
	}
	b.WriteString("<h2>Training curves, all arms</h2><p>Compute counts every token prefilled or generated: rollouts, and for LANPO also relevance scoring, condensed plans and summaries.</p>")
	xs := []struct{ key, label string }{{"step", "step"}, {"compute", "tokens prefilled + generated (cumulative)"}, {"wall", "wall time, s (cumulative)"}}
	for _, metric := range []struct{ key, label string }{{"heldout", "held-out accuracy (greedy, zero-shot)"}, {"accuracy", "training accuracy (sampled)"}} {
		for _, x := range xs {
			c := eval.Chart{Title: metric.label + " vs " + x.key, XLabel: x.label, YLabel: "accuracy"}
			for _, a := range arms {
				c.Series = append(c.Series, armSeries(a.name, a.rows, metric.key, x.key))
			}
			eval.WriteChart(b, c)
		}
	}
	fb := eval.Chart{Title: "LANPO: accuracy of feedback-aware vs from-scratch prompts", XLabel: "step", YLabel: "training accuracy"}
	growth := eval.Chart{Title: "LANPO: pool size", XLabel: "step", YLabel: "entries"}
	for _, a := range arms {
		for _, k := range []string{"accuracy_feedback", "accuracy_scratch"} {
			s := eval.MetricSeries(a.rows, k)
			s.Name = a.name + " " + strings.TrimPrefix(k, "accuracy_")
			fb.Series = append(fb.Series, s)
		}
		s := eval.MetricSeries(a.rows, "pool_entries")
		s.Name = a.name
		growth.Series = append(growth.Series, s)
	}
	eval.WriteChart(b, fb)
	eval.WriteChart(b, growth)
}

// armSeries is one arm's metric against step, cumulative compute or wall
// time; "heldout" is the held-out zero-shot accuracy over all levels (the
// mean of the eval/levelN/zero-shot/mean@k keys weighted by problems is
// not known here: levels are weighted equally, the curve's shape is what
// it shows).
func armSeries(name string, rows []map[string]any, metric, x string) eval.Series {
	s := eval.Series{Name: name}
	var compute, wall float64
	for _, r := range rows {
		num := func(k string) float64 { v, _ := r[k].(float64); return v }
		compute += num("tokens_prefilled") + num("tokens_generated") + num("tokens_trained")
		if secs, ok := r["seconds"].(map[string]any); ok {
			for _, v := range secs {
				f, _ := v.(float64)
				wall += f
			}
		}
		var y float64
		switch metric {
		case "heldout":
			n := 0
			for k, v := range r {
				if strings.HasPrefix(k, "eval/") && strings.HasSuffix(k, "/zero-shot/mean@k") {
					y += v.(float64)
					n++
				}
			}
			if n == 0 {
				continue
			}
			y /= float64(n)
		default:
			v, ok := r[metric].(float64)
			if !ok {
				continue
			}
			y = v
		}
		xv := map[string]float64{"step": num("step"), "compute": compute, "wall": wall}[x]
		s.Points = append(s.Points, [2]float64{xv, y})
	}
	return s
}

// poolSamples shows a few entries of the LANPO arm's final pool and one
// reflection as the model wrote them.
func poolSamples(b *strings.Builder, runDir string) {
	dir := filepath.Join(runDir, ArmLANPO)
	ckpts, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "step-*", pool.File))
	if len(ckpts) == 0 {
		return
	}
	sort.Strings(ckpts)
	lines, err := jsonl.Read[map[string]json.RawMessage](ckpts[len(ckpts)-1])
	if err != nil {
		return
	}
	b.WriteString("<h2>LANPO's pool: entries the model wrote</h2><table><tr><th>problem</th><th>attempt</th><th>flow of thought</th><th>principles</th><th>pitfalls</th><th>right</th></tr>")
	shown := 0
	for _, l := range lines {
		raw, ok := l["entry"]
		if !ok || shown == 4 {
			continue
		}
		var e pool.Entry
		if json.Unmarshal(raw, &e) != nil {
			continue
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%v</td></tr>", html.EscapeString(e.ProblemID), html.EscapeString(e.Attempt),
			html.EscapeString(e.Summary.FlowOfThought), html.EscapeString(e.Summary.Principles), html.EscapeString(e.Summary.Pitfalls), e.Correct)
		shown++
	}
	b.WriteString("</table>")
	logs, _ := filepath.Glob(filepath.Join(dir, "rollouts", "step-*.jsonl"))
	sort.Strings(logs)
	for i := len(logs) - 1; i >= 0; i-- {
		rows, err := jsonl.Read[map[string]any](logs[i])
		if err != nil {
			continue
		}
		for _, r := range rows {
			if r["mode"] == "reflection" {
				fmt.Fprintf(b, "<h3>One reflection (%s, step %v)</h3><p>Prompt:</p><pre>%s</pre><p>Response (reward %v):</p><pre>%s</pre>",
					html.EscapeString(fmt.Sprint(r["problem_id"])), r["step"], html.EscapeString(fmt.Sprint(r["prompt"])), r["reward"], html.EscapeString(fmt.Sprint(r["response"])))
				return
			}
		}
	}
}
