package demo

import (
	"encoding/json"
	"fmt"
	"html"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/pool"
)

// The demo's part of the report: the held-out table side by side, the
// split sizes and feedback availability, the arms' curves on shared charts
// (against step, compute and wall time), LANPO's feedback accuracy and pool
// growth, and what the model wrote into its pool and in one reflection.

// stages are a demo's stage directories in the order shown.
var stages = []eval.Stage{{Dir: "sft", Title: "Stage 1: SFT"}, {Dir: ArmGRPO, Title: "Stage 2: GRPO"}, {Dir: ArmLANPO, Title: "Stage 2: LANPO"},
	{Dir: ArmLANPOOriginal, Title: "Stage 2: LANPO (train_prompt: original)"}, {Dir: ArmLANPOConsolidate, Title: "Stage 2: LANPO with consolidation"},
	{Dir: ArmOracle, Title: "Stage 2: LANPO with consolidation, oracle plans (an upper bound, not a method)"}, {Dir: ArmGRPOBudget, Title: "Stage 2: GRPO with the LANPO arms' token budget"},
	{Dir: ArmGRPOLoRA, Title: "Stage 2: GRPO with LoRA (frozen SFT model, adapters r 16)"},
	{Dir: ArmSDPO, Title: "Stage 2: SDPO (EMA teacher with a verified sibling in context)"},
	{Dir: ArmCritique, Title: "Stage 2: Critique-GRPO (self-critique, refinement under the bare problem)"},
	{Dir: ArmGSPO, Title: "Stage 2: GRPO with GSPO's loss (clipped sequence ratio)"},
	{Dir: ArmCISPO, Title: "Stage 2: GRPO with CISPO's loss (clipped detached token weights)"},
	{Dir: "rl", Title: "Stage 2: GRPO"}}

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
	if isRules(res.World) {
		// The analysis from the run's files, with the code that shows it;
		// demo_results.json is brought up to date.
		d, err := readRulesSplit(runDir)
		if err != nil {
			return err
		}
		var arms []string
		for _, st := range res.Stages {
			if st.Stage != "sft" && st.Stage != stageTold {
				arms = append(arms, st.Stage)
			}
		}
		res.Rules = analyzeRules(runDir, d, arms)
		js, _ := json.MarshalIndent(res, "", " ")
		if err := fsutil.WriteFileSync(filepath.Join(runDir, "demo_results.json"), append(js, '\n')); err != nil {
			return err
		}
	}
	worldIntro(b, res)
	heldOutTable(b, res)
	if isRules(res.World) {
		fmt.Fprintf(b, "<h2>Data</h2><p>%d families, %d candidate rules; %d held-out problems and %d distinct RL problems (%d prompt draws, so each recurs about %.1f times), no operand pair shared between them; %d SFT examples over words that are no family's.</p>",
			res.Sizes["families"], res.Sizes["rules_k"], res.Sizes["heldout"], res.Sizes["rl_distinct"], res.Sizes["rl_prompt_draws"],
			float64(res.Sizes["rl_prompt_draws"])/float64(max(res.Sizes["rl_distinct"], 1)), res.Sizes["sft_examples"])
	} else {
		fmt.Fprintf(b, "<h2>Data</h2><p>Disjoint problem sets: %d held out, %d distinct RL problems (levels 2-4; %d prompt draws, so each recurs about %.1f times), %d distinct SFT problems (%d answer examples plus skill examples the world wrote).</p>",
			res.Sizes["heldout"], res.Sizes["rl_distinct"], res.Sizes["rl_prompt_draws"], float64(res.Sizes["rl_prompt_draws"])/float64(max(res.Sizes["rl_distinct"], 1)),
			res.Sizes["sft_distinct"], res.Sizes["sft_answers"])
	}
	if len(res.Usage) > 0 {
		b.WriteString("<table><tr><th>arm</th><th>prompts</th><th>feedback-aware</th><th>reflection</th><th>abstraction</th><th>fell back to scratch</th></tr>")
		for _, arm := range slices.Sorted(maps.Keys(res.Usage)) {
			u := res.Usage[arm]
			fmt.Fprintf(b, "<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>", arm, u.Prompts, u.FeedbackAware, u.Reflection, u.Abstraction, u.Fallback)
		}
		b.WriteString("</table>")
	}
	armCurves(b, runDir)
	if res.Rules != nil {
		rulesSections(b, res)
	}
	poolSamples(b, runDir)
	return nil
}

// heldOutTable: levels down, stage × mode across.
func heldOutTable(b *strings.Builder, res Results) {
	type col struct {
		name string
		m    ModeResult
	}
	var cols []col
	for _, st := range res.Stages {
		if st.Stage == stageTold && res.World != WorldTransfer {
			continue // the control's problems carry their rule: its ceiling is the SFT column
		}
		for _, m := range st.Modes {
			name := st.Stage + " " + m.Mode
			switch st.Stage {
			case "sft":
				name = "after SFT"
			case stageTold:
				name = "SFT, rule told (ceiling)"
			}
			cols = append(cols, col{name, m})
		}
	}
	if len(cols) == 0 {
		return
	}
	worked := !isRules(res.World)
	cells := "Cells: accuracy, the share of the group's problems answered right."
	if worked {
		cells = "Cells: accuracy (answers showing column steps)."
	}
	fmt.Fprintf(b, "<h2>Held-out accuracy (greedy), after SFT and after each RL arm</h2><p>Same SFT checkpoint, seeds and rollout budget for every arm. %s The last row pools every held-out problem: the accuracy this report uses everywhere.</p><table><tr><th>%s</th><th>problems</th>",
		cells, map[bool]string{true: "level", false: "family (rule)"}[worked])
	for _, c := range cols {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(c.name))
	}
	b.WriteString("</tr>")
	for i, la := range cols[0].m.Levels {
		name := groupName(res.World, la.Level, la.Name)
		if res.Rules != nil && la.Level-1 < len(res.Rules.FamilyRules) && res.Rules.FamilyRules[la.Level-1] != "" {
			name += " (" + res.Rules.FamilyRules[la.Level-1] + ")"
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td>%d</td>", html.EscapeString(name), la.N)
		for _, c := range cols {
			if i < len(c.m.Levels) {
				if worked {
					fmt.Fprintf(b, "<td>%.3f (%d)</td>", c.m.Levels[i].Accuracy, c.m.Levels[i].Worked)
				} else {
					fmt.Fprintf(b, "<td>%.3f</td>", c.m.Levels[i].Accuracy)
				}
			}
		}
		b.WriteString("</tr>")
	}
	b.WriteString("<tr><th>all</th><td></td>")
	for _, c := range cols {
		if worked {
			fmt.Fprintf(b, "<th>%.3f (%d)</th>", c.m.Overall, c.m.Worked)
		} else {
			fmt.Fprintf(b, "<th>%.3f</th>", c.m.Overall)
		}
	}
	b.WriteString("</tr></table>")
}

// armCurves draws the RL arms on shared charts.
func armCurves(b *strings.Builder, runDir string) {
	type arm struct {
		name    string
		rows    []map[string]any
		cum     map[int][2]float64 // step → cumulative compute, wall time
		heldOut [][2]float64       // (step, pooled held-out accuracy)
	}
	var arms []arm
	sft, sftOK := pooledAt(filepath.Join(runDir, "eval-sft"))
	for _, s := range stages[1:] {
		if rows, err := eval.ReadMetrics(filepath.Join(runDir, s.Dir, "metrics.jsonl")); err == nil {
			a := arm{name: s.Dir, rows: rows, cum: cumulative(rows)}
			if sftOK {
				a.heldOut = [][2]float64{{0, sft}}
			}
			a.heldOut = append(a.heldOut, heldOutCurve(filepath.Join(runDir, s.Dir))...)
			arms = append(arms, a)
		}
	}
	if len(arms) == 0 {
		return
	}
	b.WriteString("<h2>Training curves, all arms</h2><p>Compute counts every token prefilled, generated or trained: rollouts and the update, and for LANPO also relevance scoring, condensed plans, summaries and (with consolidation) the distilled responses.</p>")
	xs := []struct{ key, label string }{{"step", "step"}, {"compute", "tokens prefilled + generated + trained (cumulative)"}, {"wall", "wall time, s (cumulative)"}}
	for _, x := range xs {
		c := eval.Chart{Title: "held-out accuracy (greedy, zero-shot; step 0 is the SFT model) vs " + x.key, XLabel: x.label, YLabel: "share of held-out problems right", Measured: true}
		for _, a := range arms {
			c.Series = append(c.Series, onAxis(a.name, a.heldOut, a.cum, x.key))
		}
		eval.WriteChart(b, c)
	}
	for _, x := range xs {
		c := eval.Chart{Title: "training accuracy (sampled) vs " + x.key, XLabel: x.label, YLabel: "accuracy"}
		for _, a := range arms {
			c.Series = append(c.Series, onAxis(a.name, eval.MetricSeries(a.rows, "accuracy").Points, a.cum, x.key))
		}
		eval.WriteChart(b, c)
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

// cumulative is an arm's compute (tokens prefilled + generated + trained)
// and wall time summed over its metrics rows up to each step.
func cumulative(rows []map[string]any) map[int][2]float64 {
	out := map[int][2]float64{0: {}}
	var compute, wall float64
	for _, r := range rows {
		num := func(k string) float64 { v, _ := r[k].(float64); return v }
		compute += num("tokens_prefilled") + num("tokens_generated") + num("tokens_trained")
		if secs, ok := r["seconds"].(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(secs)) { // a fixed order: the same sum every time
				f, _ := secs[k].(float64)
				wall += f
			}
		}
		out[int(num("step"))] = [2]float64{compute, wall}
	}
	return out
}

// onAxis is an arm's series of (step, value) points placed on a chart's x
// axis: the step, or the arm's cumulative compute or wall time there (cum).
func onAxis(name string, pts [][2]float64, cum map[int][2]float64, x string) eval.Series {
	s := eval.Series{Name: name}
	for _, p := range pts {
		xv := p[0]
		switch x {
		case "compute":
			xv = cum[int(p[0])][0]
		case "wall":
			xv = cum[int(p[0])][1]
		}
		s.Points = append(s.Points, [2]float64{xv, p[1]})
	}
	return s
}

// pooledAt is the share of an evaluation directory's held-out problems
// answered right zero-shot — the report's one held-out accuracy.
func pooledAt(dir string) (float64, bool) {
	counts, ok := zeroShotCounts(dir)
	right, n := 0, 0
	for _, c := range counts {
		right, n = right+c[0], n+c[1]
	}
	return float64(right) / float64(max(n, 1)), ok
}

// heldOutCurve is an arm's pooled held-out accuracy at each of its training
// evaluations (ARM_DIR/eval/step-N), as (step, accuracy).
func heldOutCurve(armDir string) [][2]float64 {
	var out [][2]float64
	dirs, _ := filepath.Glob(filepath.Join(armDir, "eval", "step-*"))
	sort.Strings(dirs)
	for _, d := range dirs {
		var step int
		if _, err := fmt.Sscanf(filepath.Base(d), "step-%d", &step); err != nil {
			continue
		}
		if acc, ok := pooledAt(d); ok {
			out = append(out, [2]float64{float64(step), acc})
		}
	}
	return out
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
