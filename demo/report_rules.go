package demo

import (
	"fmt"
	"html"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/eval"
)

// The report's world sections: what the world is and what was predicted
// before running (docs/demo.md), and for the rule worlds each step of
// LANPO's mechanism with its numbers.

// worldAbout says what each world tests.
var worldAbout = map[string]string{
	WorldTransfer:   "Transfer world: problems come in families, each an invented word (\"What is 7 zorp 3?\") whose rule is one of K candidate patterns over the operands' digits, the same for every problem of the family and never stated. SFT taught the candidate rules and LANPO's skills on other words; a family's rule is found only by exploring, and once found it is one sentence (\"zorp is aab.\") that answers every problem of the family. Retrieval is easy here by construction: the word is the problem's one rare term, so BM25 finds the family's problems.",
	WorldControl:    "Control world: the same words and answers, but every problem draws its own rule and shows one worked example of it in the prompt. Each problem is solvable alone, and a lesson from another problem of the same word names a rule that is, most of the time, not this problem's.",
	WorldArithmetic: "Arithmetic world: four levels of one- and two-digit arithmetic. Its errors are digit facts and carries, which no plan or reflection supplies.",
}

// predictions are what docs/demo.md wrote down before the comparison ran,
// per world and arm.
var predictions = map[string]map[string]string{
	WorldTransfer: {
		ArmGRPO:             "learns a family once a group mixes right and wrong (≈ 1 − (1 − 1/K)^G of its groups); every family found within a few visits, learned gradually",
		ArmLANPO:            "plans state found rules, plan groups saturate (all right, no gradient); the bare prompt learns from the 25% scratch prompts only: below GRPO zero-shot, far above it with retrieval",
		ArmLANPOOriginal:    "saturated plan groups carry no advantage either, and weights ≈ 1/K damp the mixed ones: at or below GRPO zero-shot",
		ArmLANPOConsolidate: "every right plan-guided answer is trained on the bare prompt: families learned sooner than GRPO, zero-shot above GRPO",
		ArmOracle:           "see docs/demo.md, \"Predictions for the fair test\"",
		ArmGRPOBudget:       "see docs/demo.md, \"Predictions for the fair test\"",
	},
	WorldControl: {
		ArmGRPO:             "sharpens reading the example; modest gain",
		ArmLANPO:            "plans name another problem's rule and mislead: below GRPO",
		ArmLANPOOriginal:    "as LANPO, damped: below or at GRPO",
		ArmLANPOConsolidate: "distils what plans made right, which is rare when they mislead: at or below GRPO",
	},
}

func worldIntro(b *strings.Builder, res Results) {
	if about, ok := worldAbout[res.World]; ok {
		fmt.Fprintf(b, "<h2>The world</h2><p>%s</p>", html.EscapeString(about))
	}
	// Retrieval's effect per group, for every LANPO arm: the largest drop,
	// or that there was none.
	group := "level"
	if isRules(res.World) {
		group = "family"
	}
	for _, st := range res.Stages {
		zs, rt := st.mode(eval.ModeZeroShot), st.mode(eval.ModeRetrieval)
		if zs == nil || rt == nil || len(zs.Levels) != len(rt.Levels) {
			continue
		}
		worst := -1 // the group whose accuracy dropped most; -1: none dropped
		for i := range zs.Levels {
			change := rt.Levels[i].Accuracy - zs.Levels[i].Accuracy
			if change < 0 && (worst < 0 || change < rt.Levels[worst].Accuracy-zs.Levels[worst].Accuracy) {
				worst = i
			}
		}
		fmt.Fprintf(b, "<p>%s: retrieval moves held-out accuracy %.3f → %.3f over all problems; ", html.EscapeString(st.Stage), zs.Overall, rt.Overall)
		if worst < 0 {
			fmt.Fprintf(b, "no %s dropped.</p>", group)
			continue
		}
		fmt.Fprintf(b, "its largest drop is on %s, %.2f → %.2f.</p>", html.EscapeString(groupName(res.World, zs.Levels[worst].Level, zs.Levels[worst].Name)),
			zs.Levels[worst].Accuracy, rt.Levels[worst].Accuracy)
	}
}

// rulesSections shows each arm's mechanism, family by family.
func rulesSections(b *strings.Builder, res Results) {
	a := res.Rules
	arms := slices.Sorted(maps.Keys(a.Arms))
	final := map[string]float64{}
	for _, st := range res.Stages {
		if zs := st.mode(eval.ModeZeroShot); zs != nil {
			final[st.Stage] = zs.Overall
		}
	}
	b.WriteString("<h2>Predicted before running, and what happened</h2><table><tr><th>arm</th><th>predicted (docs/demo.md)</th><th>held-out zero-shot after SFT → after the arm</th></tr>")
	for _, arm := range arms {
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%.3f → %.3f</td></tr>", arm, html.EscapeString(predictions[res.World][arm]), final["sft"], final[arm])
	}
	b.WriteString("</table>")

	verdict(b, res, final)
	controlsTable(b, res, final)

	b.WriteString("<h2>The mechanism, step by step</h2><p>Found: families with a verified-correct rollout (median step of the first). Learned: families whose held-out problems the bare prompt answers ≥ 75% right at the end. Groups per prompt mode: share with no reward variance (no gradient), share all right, rollout accuracy. Plans: abstraction plans that state the problem's rule, and the accuracy under those (is the plan followed?). Pool: correct-attempt entries whose principles state the rule.</p>")
	b.WriteString("<table><tr><th>arm</th><th>found</th><th>learned</th><th>scratch groups: no variance / all right / acc.</th><th>reflection</th><th>abstraction</th><th>plans stating the rule; their acc.</th><th>pool: correct entries stating the rule</th><th>held-out problems in pool</th></tr>")
	F := len(a.Families)
	for _, arm := range arms {
		r := a.Arms[arm]
		found, learned := 0, 0
		var steps []int
		for f := range F {
			if r.Found[f] > 0 {
				found++
				steps = append(steps, r.Found[f])
			}
			if c := r.Learned[f]; len(c) > 0 && c[len(c)-1][1] >= 0.75 {
				learned++
			}
		}
		sort.Ints(steps)
		med := "—"
		if len(steps) > 0 {
			med = fmt.Sprint(steps[len(steps)/2])
		}
		mode := func(m string) string {
			g, ok := r.Groups[m]
			if !ok || g.Groups == 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f / %.2f / %.2f (%d)", float64(g.ZeroVariance)/float64(g.Groups), float64(g.AllCorrect)/float64(g.Groups), float64(g.Correct)/float64(max(g.Rollouts, 1)), g.Groups)
		}
		plans := "—"
		if r.Plans > 0 {
			plans = fmt.Sprintf("%d of %d; %.2f", r.PlansStateRule, r.Plans, r.PlanRuleAccuracy)
		}
		pool := "—"
		if r.PoolEntries > 0 {
			pool = fmt.Sprintf("%d of %d (%d entries)", r.PoolCorrectStatesRule, r.PoolCorrect, r.PoolEntries)
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td>%d of %d (median step %s)</td><td>%d of %d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td></tr>",
			arm, found, F, med, learned, F, mode("scratch"), mode("reflection"), mode("abstraction"), plans, pool, r.HeldOutInPool)
	}
	b.WriteString("</table>")
	planKindTable(b, a, arms)
	purityTable(b, a, arms)

	// Families found and learned over steps, per arm.
	foundC := eval.Chart{Title: "families found (a verified-correct rollout so far) vs step", XLabel: "step", YLabel: "families"}
	learnedC := eval.Chart{Title: "families learned (held-out zero-shot ≥ 0.75) vs step", XLabel: "step", YLabel: "families"}
	for _, arm := range arms {
		r := a.Arms[arm]
		fs := eval.Series{Name: arm}
		last := 0
		for _, s := range r.Found {
			last = max(last, s)
		}
		if F > 0 && len(r.Learned[0]) > 0 {
			last = max(last, int(r.Learned[0][len(r.Learned[0])-1][0]))
		}
		for step := 0; step <= last; step++ {
			n := 0
			for _, s := range r.Found {
				if s > 0 && s <= step {
					n++
				}
			}
			fs.Points = append(fs.Points, [2]float64{float64(step), float64(n)})
		}
		foundC.Series = append(foundC.Series, fs)
		ls := eval.Series{Name: arm}
		if F > 0 {
			for k := range r.Learned[0] {
				n := 0
				for f := range F {
					if k < len(r.Learned[f]) && r.Learned[f][k][1] >= 0.75 {
						n++
					}
				}
				ls.Points = append(ls.Points, [2]float64{r.Learned[0][k][0], float64(n)})
			}
		}
		learnedC.Series = append(learnedC.Series, ls)
	}
	eval.WriteChart(b, foundC)
	eval.WriteChart(b, learnedC)

	// Per family: found step and final zero-shot accuracy, per arm.
	b.WriteString("<h3>Per family: step first found / held-out zero-shot at the end</h3><table><tr><th>family</th><th>rule</th>")
	for _, arm := range arms {
		fmt.Fprintf(b, "<th>%s</th>", arm)
	}
	b.WriteString("</tr>")
	for f, word := range a.Families {
		rule := a.FamilyRules[f]
		if rule == "" {
			rule = "each problem its own"
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td>", word, rule)
		for _, arm := range arms {
			r := a.Arms[arm]
			found := "never"
			if r.Found[f] > 0 {
				found = fmt.Sprint(r.Found[f])
			}
			acc := "—"
			if c := r.Learned[f]; len(c) > 0 {
				acc = fmt.Sprintf("%.2f", c[len(c)-1][1])
			}
			fmt.Fprintf(b, "<td>%s / %s</td>", found, acc)
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>")
	for _, arm := range arms {
		if q := a.Arms[arm].Quote; q != nil {
			fmt.Fprintf(b, "<h3>A pool entry that carried a rule (%s, problem %s, step %d)</h3><pre>Attempt: %s\nPrinciples: %s\nPitfalls: %s</pre>",
				arm, html.EscapeString(q.ProblemID), q.Step, html.EscapeString(q.Attempt), html.EscapeString(q.Summary.Principles), html.EscapeString(q.Summary.Pitfalls))
			break
		}
	}
}

// verdict is the run's outcome in a paragraph written from its numbers:
// the best LANPO arm against GRPO zero-shot and with retrieval, and the
// first step of the mechanism that falls short (docs/demo.md).
func verdict(b *strings.Builder, res Results, final map[string]float64) {
	grpo, ok := final[ArmGRPO]
	if !ok {
		return
	}
	best, bestAcc := "", -1.0
	for _, arm := range Arms[1:] { // the LANPO arms, in a fixed order: ties go to the first
		if acc, ok := final[arm]; ok && acc > bestAcc {
			best, bestAcc = arm, acc
		}
	}
	if best == "" {
		return
	}
	r := res.Rules.Arms[best]
	var text strings.Builder
	fmt.Fprintf(&text, "Held out, zero-shot: GRPO %.3f, the best LANPO arm (%s) %.3f (%+.3f).", grpo, best, bestAcc, bestAcc-grpo)
	for _, st := range res.Stages {
		if rt := st.mode(eval.ModeRetrieval); st.Stage == best && rt != nil {
			fmt.Fprintf(&text, " With retrieval from its pool: %.3f.", rt.Overall)
		}
	}
	share := func(n, d int) float64 { return float64(n) / float64(max(d, 1)) }
	fb := r.Groups["abstraction"]
	switch {
	case r.PoolCorrect == 0:
		text.WriteString(" The mechanism fails at the start: no correct attempt entered the pool.")
	case share(r.PoolCorrectStatesRule, r.PoolCorrect) < 0.5:
		fmt.Fprintf(&text, " The mechanism fails at the summaries: %.0f%% of correct-attempt entries state the rule.", 100*share(r.PoolCorrectStatesRule, r.PoolCorrect))
	case share(r.PlansStateRule, r.Plans) < 0.5:
		fmt.Fprintf(&text, " Summaries state the rule (%.0f%% of correct-attempt entries), but the condenser rarely carries the problem's rule into the plan: %d of %d plans state it.",
			100*share(r.PoolCorrectStatesRule, r.PoolCorrect), r.PlansStateRule, r.Plans)
	case r.PlanRuleAccuracy < 0.9:
		fmt.Fprintf(&text, " Plans state the rule (%d of %d), but the solver follows them only %.0f%% of the time.", r.PlansStateRule, r.Plans, 100*r.PlanRuleAccuracy)
	default:
		fmt.Fprintf(&text, " Plans state the rule (%d of %d) and are followed (%.0f%% right).", r.PlansStateRule, r.Plans, 100*r.PlanRuleAccuracy)
	}
	if fb.Groups > 0 {
		fmt.Fprintf(&text, " Plan-guided groups: %.0f%% all right (saturated, no advantage), %.0f%% with no variance.", 100*share(fb.AllCorrect, fb.Groups), 100*share(fb.ZeroVariance, fb.Groups))
	}
	if r.FeedbackCorrect > 0 {
		fmt.Fprintf(&text, " Verified answers found with feedback — what consolidation trains on the bare prompt: %d, %.0f%% of them naming the problem's own word (the rest name another: a plan's miscopy is copied into the answer).",
			r.FeedbackCorrect, 100*share(r.FeedbackCorrectOwnWord, r.FeedbackCorrect))
	}
	if bestAcc <= grpo {
		text.WriteString(" The bare prompt did not learn more than GRPO's.")
	}
	fmt.Fprintf(b, "<h2>Verdict, from this run's numbers</h2><p>%s</p>", html.EscapeString(text.String()))
	b.WriteString("<p>One seed is not a result: GRPO alone spans 0.10–0.72 over seeds here. The comparison over world seeds, " +
		"with intervals over SFT models, the oracle's dose and the retrieval controls, is in docs/benchmarks.md (\"LANPO's update\"; " +
		"before it, \"The fair test\"); <code>lanpo demo --rl-seeds N</code> and <code>lanpo demo paired</code> reproduce it.</p>")
}

// planKindTable classifies each LANPO arm's plans (or shown lessons) by
// what they say of the problem's word.
func planKindTable(b *strings.Builder, a *RulesAnalysis, arms []string) {
	var rows []string
	for _, arm := range arms {
		r := a.Arms[arm]
		if r.Plans == 0 {
			continue
		}
		row := "<tr><td>" + html.EscapeString(arm) + "</td>"
		for _, k := range PlanKindOrder {
			row += fmt.Sprintf("<td>%d (%.0f%%)</td>", r.PlanKinds[k], 100*float64(r.PlanKinds[k])/float64(r.Plans))
		}
		carried := "—"
		if r.PlansLessonStates > 0 {
			carried = fmt.Sprintf("%d of %d (%.2f)", r.PlansLessonStatesCarried, r.PlansLessonStates, float64(r.PlansLessonStatesCarried)/float64(r.PlansLessonStates))
		}
		row += fmt.Sprintf("<td>%s</td><td>%d</td>", carried, r.PlansRuleWithoutLesson)
		rows = append(rows, row+"</tr>")
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("<h3>What the plans say</h3><p>Every abstraction prompt's plan (with <code>lanpo.context: lessons</code>, the lessons shown), by what it says of the problem's word, first match: its rule; its word with another rule; another family's word (another problem's specifics); only \"not X\" of its word; a word one or two letters off its own (a copying error); other.</p><table><tr><th>arm</th>")
	for _, k := range PlanKindOrder {
		b.WriteString("<th>" + html.EscapeString(k) + "</th>")
	}
	b.WriteString("<th>a lesson read states the rule: the plan carries it</th><th>the plan states it, no lesson did</th>")
	b.WriteString("</tr>" + strings.Join(rows, "") + "</table>")
}

// purityTable reports the relevance filter's purity per LANPO arm: of the
// retrieval candidates of the prompts that drew any, the share of the
// problem's own family that passed and of other families that passed, and
// the share of those prompts given another family's problem.
func purityTable(b *strings.Builder, a *RulesAnalysis, arms []string) {
	var rows []string
	pct := func(v float64, n int) string {
		if v < 0 {
			return "none retrieved"
		}
		return fmt.Sprintf("%.2f (%d)", v, n)
	}
	for _, arm := range arms {
		r := a.Arms[arm]
		if r.PurityRun.Prompts == 0 {
			continue
		}
		for _, c := range []struct {
			when string
			p    Purity
		}{{"steps 1–10", r.Purity10}, {"whole run", r.PurityRun}} {
			rows = append(rows, fmt.Sprintf("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>", arm, c.when,
				pct(c.p.PassSame(), c.p.SameCandidates), pct(c.p.PassOther(), c.p.OtherCandidates), pct(c.p.OtherShare(), c.p.Prompts)))
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("<h2>The relevance filter</h2><p>Of the retrieval candidates of every prompt that drew any (a prompt whose candidates all failed fell back to scratch and counts): the share of the problem's own family that passed (target ≥ 0.90) and of other families that passed (target ≤ 0.05), and the share of those prompts given at least one other family's problem. In parentheses: candidates, or prompts.</p>")
	b.WriteString("<table><tr><th>arm</th><th>when</th><th>P(pass | same family)</th><th>P(pass | other family)</th><th>prompts given another family's problem</th></tr>")
	b.WriteString(strings.Join(rows, ""))
	b.WriteString("</table>")
}

// controlsTable shows whose the gain with retrieval is: each LANPO arm's
// model with its own pool beside the SFT model and GRPO's with that pool,
// and GRPO's model with a pool of its own rollouts (retrievalControls).
func controlsTable(b *strings.Builder, res Results, final map[string]float64) {
	if len(res.Controls) == 0 {
		return
	}
	own := map[string]float64{} // an arm's retrieval with its own pool
	for _, st := range res.Stages {
		if rt := st.mode(eval.ModeRetrieval); rt != nil {
			own[st.Stage] = rt.Overall
		}
	}
	b.WriteString("<h2>Retrieval controls: the pool's gain or the training's?</h2><p>Held-out accuracy with retrieval (the model condenses a plan from the pool's lessons, as in training). " +
		"The SFT model with an arm's final pool measures what the pool gives an untrained model; GRPO's model with it, what it gives GRPO's; GRPO's model with a pool made the same way from GRPO's own rollouts " +
		"(summarized by GRPO's final model: <code>lanpo pool build</code>) what GRPO would get had it kept one. For the oracle, its plans for the families it found.</p>")
	b.WriteString("<table><tr><th>model</th><th>pool</th><th>held out with retrieval</th><th>the model zero-shot</th></tr>")
	row := func(model, pool string, acc float64) {
		zs := "—"
		if v, ok := final[model]; ok {
			zs = fmt.Sprintf("%.3f", v)
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%.3f</td><td>%s</td></tr>", html.EscapeString(model), html.EscapeString(pool), acc, zs)
	}
	var text []string
	for _, c := range res.Controls {
		if acc, ok := own[c.Pool]; ok && c.Model == "sft" {
			row(c.Pool, c.Pool+" (its own)", acc)
			text = append(text, fmt.Sprintf("%s: with its pool %.3f; the untrained SFT model with the same pool %.3f — the training's share %+.3f, the pool's (over the SFT model zero-shot) %+.3f.",
				c.Pool, acc, c.Retrieval.Overall, acc-c.Retrieval.Overall, c.Retrieval.Overall-final["sft"]))
		}
		pool := c.Pool
		if pool == "grpo-own" {
			pool = "GRPO's own rollouts, summarized by GRPO's model"
		} else if pool == ArmOracle {
			pool = "the oracle's plans (found families)"
		}
		row(c.Model, pool, c.Retrieval.Overall)
	}
	b.WriteString("</table>")
	if len(text) > 0 {
		fmt.Fprintf(b, "<p>%s</p>", html.EscapeString(strings.Join(text, " ")))
	}
}
