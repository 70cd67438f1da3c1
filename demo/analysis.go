package demo

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/pool"
)

// What a rule world's arms did, step by step of the mechanism (docs/demo.md):
// when each family's rule was first sampled (found) and when the bare
// prompt answered its held-out problems (learned); whether the pool's
// summaries state the rule, whether plans carry it and are followed;
// how many groups had no variance, per prompt mode.

// RulesAnalysis is a rule world's families and each arm's mechanism.
type RulesAnalysis struct {
	Families    []string            `json:"families"`
	FamilyRules []string            `json:"family_rules"`
	Arms        map[string]ArmRules `json:"arms"`
}

// ArmRules is one arm's record in a rule world.
type ArmRules struct {
	// Per family: the first step with a verified-correct rollout (any
	// prompt) and with one from the bare prompt; 0: never.
	Found        []int `json:"found"`
	FoundScratch []int `json:"found_scratch"`
	// Per family: zero-shot held-out accuracy at step 0 (the SFT model) and
	// at each training evaluation, as (step, accuracy).
	Learned [][][2]float64 `json:"learned"`
	// Per prompt mode (scratch, reflection, abstraction): groups, those
	// whose rewards are all equal, those all correct, and rollouts right.
	Groups map[string]ModeGroups `json:"groups"`
	// Abstraction plans (one per group): how many, how many state the
	// problem's rule, and the accuracy of rollouts under a plan that does.
	Plans            int     `json:"plans"`
	PlansStateRule   int     `json:"plans_state_rule"`
	PlanRuleAccuracy float64 `json:"plan_rule_accuracy"`
	// PlanKinds classifies every plan (lessons, with lanpo.context:
	// lessons) by what it says of the problem's word: planKind.
	PlanKinds map[string]int `json:"plan_kinds,omitempty"`
	// Plans whose lessons (as logged) state the problem's rule, and of
	// those the plans that carry it: P(plan states the rule | a lesson it
	// read does); and the plans that state it with no lesson stating it.
	PlansLessonStates        int `json:"plans_lesson_states_rule"`
	PlansLessonStatesCarried int `json:"plans_lesson_states_rule_carried"`
	PlansRuleWithoutLesson   int `json:"plans_rule_without_lesson"`
	// The final pool: entries, entries of a correct attempt, and of those
	// the ones whose principles state their problem's rule; held-out problems
	// in the pool (must be 0); one entry that states a rule, quoted.
	PoolEntries           int         `json:"pool_entries"`
	PoolCorrect           int         `json:"pool_correct"`
	PoolCorrectStatesRule int         `json:"pool_correct_states_rule"`
	HeldOutInPool         int         `json:"heldout_in_pool"`
	Quote                 *pool.Entry `json:"quote,omitempty"`
	// Consolidation's rows as the rollout logs show them (the verified
	// feedback-aware answers; an arm with lanpo.consolidate trains them on
	// the bare prompt): how many, and how many name the problem's own word
	// (a plan's miscopied word is copied into the answer, and consolidation
	// teaches it to the bare prompt).
	FeedbackCorrect        int `json:"feedback_correct"`
	FeedbackCorrectOwnWord int `json:"feedback_correct_own_word"`
	// The relevance filter's purity over the abstraction prompts' logged
	// retrieval candidates: over the first 10 steps and the whole run.
	Purity10  Purity `json:"relevance_purity_first10"`
	PurityRun Purity `json:"relevance_purity"`
}

// Purity is how well the relevance filter told a problem's family from
// the others, counted over abstraction prompts' retrieval candidates: a
// same-family candidate should pass, another family's should not.
type Purity struct {
	SameCandidates  int `json:"same_family_candidates"`
	SamePassed      int `json:"same_family_passed"`
	OtherCandidates int `json:"other_family_candidates"`
	OtherPassed     int `json:"other_family_passed"`
	// Prompts that drew retrieval candidates (one per group), and those
	// whose passed related problems include another family's.
	Prompts          int `json:"plan_prompts"`
	PromptsWithOther int `json:"plan_prompts_with_other_family"`
}

// PassSame is P(pass | same family); PassOther P(pass | other family);
// OtherShare the share of plan prompts holding another family's problem
// (each -1 when nothing was counted).
func (p Purity) PassSame() float64   { return ratio(p.SamePassed, p.SameCandidates) }
func (p Purity) PassOther() float64  { return ratio(p.OtherPassed, p.OtherCandidates) }
func (p Purity) OtherShare() float64 { return ratio(p.PromptsWithOther, p.Prompts) }

func ratio(a, b int) float64 {
	if b == 0 {
		return -1
	}
	return float64(a) / float64(b)
}

// add counts one abstraction prompt of a family-f problem with its
// retrieval candidates.
func (p *Purity) add(f int, related []relatedRow, x ruleIndex) {
	p.Prompts++
	other := false
	for _, c := range related {
		cf, ok := x.family[c.ProblemID]
		if !ok {
			continue
		}
		if cf == f {
			p.SameCandidates++
			if c.Passed {
				p.SamePassed++
			}
			continue
		}
		p.OtherCandidates++
		if c.Passed {
			p.OtherPassed++
			other = true
		}
	}
	if other {
		p.PromptsWithOther++
	}
}

// ModeGroups counts the groups sampled under one prompt mode.
type ModeGroups struct {
	Groups       int `json:"groups"`
	ZeroVariance int `json:"zero_variance"`
	AllCorrect   int `json:"all_correct"`
	Rollouts     int `json:"rollouts"`
	Correct      int `json:"correct"`
}

// rolloutRow is what the analysis reads of a rollout log line.
type rolloutRow struct {
	Step      int      `json:"step"`
	ProblemID string   `json:"problem_id"`
	Lessons   []string `json:"lessons"`
	Group     int      `json:"group"`
	Sample    int      `json:"sample"`
	Mode      string   `json:"mode"`
	Prompt    string   `json:"prompt"`
	Response  string   `json:"response"`
	Reward    float64  `json:"reward"`
	Correct   bool     `json:"correct"`
	// An abstraction prompt's retrieval candidates and whether each passed
	// the relevance filter.
	Related []relatedRow `json:"related"`
}

type relatedRow struct {
	ProblemID string `json:"problem_id"`
	Passed    bool   `json:"passed"`
}

// ruleIndex answers, per problem ID, its family and the rule that answers
// it, and whether a problem (by ID or text) is held out.
type ruleIndex struct {
	d       demoSplit
	family  map[string]int
	rule    map[string]string
	heldOut map[string]bool
}

func newRuleIndex(d demoSplit) ruleIndex {
	x := ruleIndex{d: d, family: map[string]int{}, rule: map[string]string{}, heldOut: map[string]bool{}}
	for _, it := range append(append([]Item{}, d.rl...), d.heldOut...) {
		x.family[it.ID], x.rule[it.ID] = it.Level-1, it.Rule
	}
	for _, it := range d.heldOut {
		x.heldOut[it.ID], x.heldOut[it.Problem] = true, true
	}
	return x
}

// Plan kinds (ArmRules.PlanKinds), first match wins: the problem's rule;
// its word with another rule; another family's word (a plan carrying
// another problem's specifics); only "not X" of its word; anything else.
const (
	PlanRightRule   = "right rule"
	PlanWrongRule   = "a wrong rule"
	PlanOtherFamily = "another family's word"
	PlanNotX        = "\"not X\" only"
	PlanMiscopied   = "its word miscopied"
	PlanOther       = "other"
)

// PlanKindOrder lists the kinds as reports show them.
var PlanKindOrder = []string{PlanRightRule, PlanWrongRule, PlanOtherFamily, PlanNotX, PlanMiscopied, PlanOther}

// planKind classifies a plan of problem id.
func (x ruleIndex) planKind(plan, id string) string {
	word := x.d.families[x.family[id]]
	switch {
	case x.statesRule(plan, id):
		return PlanRightRule
	case strings.Contains(strings.ReplaceAll(plan, word+" is not ", ""), word+" is "):
		return PlanWrongRule
	}
	for _, w := range x.d.families {
		if w != word && strings.Contains(plan, w) {
			return PlanOtherFamily
		}
	}
	if strings.Contains(plan, word+" is not ") {
		return PlanNotX
	}
	// "qolq is bb." for qolk: a word one or two letters off its own, the
	// byte-level model's copying error.
	for _, f := range strings.Fields(plan) {
		f = strings.Trim(f, ".,:;")
		if f != word && len(f) == len(word) && hamming(f, word) <= 2 {
			return PlanMiscopied
		}
	}
	return PlanOther
}

// hamming counts the positions where two strings of equal length differ.
func hamming(a, b string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// statesRule is whether text states the rule of problem id's family.
func (x ruleIndex) statesRule(text, id string) bool {
	return statesRule(text, x.d.families[x.family[id]], x.rule[id])
}

// analyzeRules reads each arm's rollout logs, evaluations and final pool.
func analyzeRules(runDir string, d demoSplit, arms []string) *RulesAnalysis {
	a := &RulesAnalysis{Families: d.families, FamilyRules: d.familyRules, Arms: map[string]ArmRules{}}
	x := newRuleIndex(d)
	sft := learnedAt(filepath.Join(runDir, "eval-sft"), d.families)
	for _, arm := range arms {
		dir := filepath.Join(runDir, arm)
		r := ArmRules{Groups: map[string]ModeGroups{}}
		r.readRollouts(dir, x)
		r.Learned = learnedCurves(dir, d.families, sft)
		r.readPool(dir, x)
		a.Arms[arm] = r
	}
	return a
}

// readRollouts fills what an arm's rollout logs show: families found, the
// groups per prompt mode, and the plans.
func (r *ArmRules) readRollouts(dir string, x ruleIndex) {
	F := len(x.d.families)
	r.Found, r.FoundScratch = make([]int, F), make([]int, F)
	logs, _ := filepath.Glob(filepath.Join(dir, "rollouts", "step-*.jsonl"))
	sort.Strings(logs)
	var planRight, planN int
	for _, path := range logs {
		rows, err := jsonl.Read[rolloutRow](path)
		if err != nil {
			continue
		}
		groups := map[int][]rolloutRow{} // by the prompt's index in the step
		for _, row := range rows {
			f, ok := x.family[row.ProblemID]
			if !ok {
				continue
			}
			if row.Correct {
				if r.Found[f] == 0 {
					r.Found[f] = row.Step
				}
				if row.Mode == "scratch" && r.FoundScratch[f] == 0 {
					r.FoundScratch[f] = row.Step
				}
			}
			groups[row.Group] = append(groups[row.Group], row)
			if row.Correct && row.Mode != "scratch" {
				r.FeedbackCorrect++
				if strings.HasPrefix(row.Response, x.d.families[f]+" is ") {
					r.FeedbackCorrectOwnWord++
				}
			}
		}
		for _, g := range groups {
			mode := g[0].Mode
			mg := r.Groups[mode]
			mg.Groups++
			same, all := true, true
			for _, row := range g {
				mg.Rollouts++
				if row.Correct {
					mg.Correct++
				} else {
					all = false
				}
				same = same && row.Reward == g[0].Reward
			}
			if same {
				mg.ZeroVariance++
			}
			if all {
				mg.AllCorrect++
			}
			r.Groups[mode] = mg
			// The relevance filter's purity, over every prompt that drew
			// retrieval candidates (one that passed none fell back to
			// scratch, and counts).
			if len(g[0].Related) > 0 {
				f := x.family[g[0].ProblemID]
				r.PurityRun.add(f, g[0].Related, x)
				if g[0].Step <= 10 {
					r.Purity10.add(f, g[0].Related, x)
				}
			}
			if mode != "abstraction" {
				continue
			}
			r.Plans++
			if r.PlanKinds == nil {
				r.PlanKinds = map[string]int{}
			}
			r.PlanKinds[x.planKind(planOf(g[0].Prompt), g[0].ProblemID)]++
			lessonStates := false
			for _, ls := range g[0].Lessons {
				lessonStates = lessonStates || x.statesRule(ls, g[0].ProblemID)
			}
			carried := x.statesRule(planOf(g[0].Prompt), g[0].ProblemID)
			switch {
			case lessonStates:
				r.PlansLessonStates++
				if carried {
					r.PlansLessonStatesCarried++
				}
			case carried:
				r.PlansRuleWithoutLesson++
			}
			if carried {
				r.PlansStateRule++
				planN += len(g)
				for _, row := range g {
					if row.Correct {
						planRight++
					}
				}
			}
		}
	}
	if planN > 0 {
		r.PlanRuleAccuracy = float64(planRight) / float64(planN)
	}
}

// learnedCurves is, per family, zero-shot held-out accuracy at step 0 (the
// SFT model's, sft) and at each of an arm's training evaluations.
func learnedCurves(dir string, families []string, sft []float64) [][][2]float64 {
	evals, _ := filepath.Glob(filepath.Join(dir, "eval", "step-*"))
	type stepAcc struct {
		step int
		acc  []float64
	}
	var curve []stepAcc
	for _, e := range evals {
		step, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(e), "step-"))
		if err != nil {
			continue
		}
		curve = append(curve, stepAcc{step, learnedAt(e, families)})
	}
	sort.Slice(curve, func(i, j int) bool { return curve[i].step < curve[j].step })
	out := make([][][2]float64, len(families))
	for f := range families {
		if sft != nil {
			out[f] = append(out[f], [2]float64{0, sft[f]})
		}
		for _, c := range curve {
			if c.acc != nil {
				out[f] = append(out[f], [2]float64{float64(c.step), c.acc[f]})
			}
		}
	}
	return out
}

// readPool counts what an arm's final pool holds: its entries, the correct
// ones and those stating their problem's rule (the first quoted), and
// held-out problems.
func (r *ArmRules) readPool(dir string, x ruleIndex) {
	pools, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "step-*", pool.File))
	sort.Strings(pools)
	if len(pools) == 0 {
		return
	}
	lines, _ := jsonl.Read[map[string]json.RawMessage](pools[len(pools)-1])
	for _, l := range lines {
		if raw, ok := l["problem"]; ok {
			var p struct{ ID, Text string }
			if json.Unmarshal(raw, &p) == nil && (x.heldOut[p.ID] || x.heldOut[p.Text]) {
				r.HeldOutInPool++
			}
		}
		raw, ok := l["entry"]
		if !ok {
			continue
		}
		var e pool.Entry
		if json.Unmarshal(raw, &e) != nil {
			continue
		}
		if _, ok := x.family[e.ProblemID]; !ok {
			continue
		}
		r.PoolEntries++
		if !e.Correct {
			continue
		}
		r.PoolCorrect++
		if x.statesRule(e.Summary.Principles, e.ProblemID) {
			r.PoolCorrectStatesRule++
			if r.Quote == nil {
				q := e
				r.Quote = &q
			}
		}
	}
}

// planOf is the context an abstraction prompt carried: the text after the
// prompt's last "Plan:" or "Notes:" (the demo's abstraction and lessons
// contexts).
func planOf(prompt string) string {
	i := max(strings.LastIndex(prompt, "Plan:"), strings.LastIndex(prompt, "Notes:"))
	if i < 0 {
		return ""
	}
	return prompt[i:]
}

// learnedAt is zero-shot accuracy per family of an evaluation directory's
// samples (nil when it has none).
func learnedAt(dir string, families []string) []float64 {
	counts, ok := zeroShotCounts(dir)
	if !ok {
		return nil
	}
	out := make([]float64, len(families))
	for f, word := range families {
		if c := counts[word]; c[1] > 0 {
			out[f] = float64(c[0]) / float64(c[1])
		}
	}
	return out
}

// zeroShotCounts is, per benchmark, the zero-shot samples right and all of
// an evaluation directory (false when it has none).
func zeroShotCounts(dir string) (map[string][2]int, bool) {
	lines, err := jsonl.Read[eval.SampleLine](filepath.Join(dir, eval.SamplesFile))
	if err != nil {
		return nil, false
	}
	counts := map[string][2]int{}
	for _, l := range lines {
		if l.Mode != eval.ModeZeroShot {
			continue
		}
		c := counts[l.Bench]
		if l.Correct {
			c[0]++
		}
		c[1]++
		counts[l.Bench] = c
	}
	return counts, len(counts) > 0
}

// readRulesSplit rebuilds a rule world's families and problems from its
// run directory's data files (lanpo report recomputes the analysis with
// the code that reads it).
func readRulesSplit(runDir string) (demoSplit, error) {
	var d demoSplit
	var err error
	if d.rl, err = jsonl.Read[Item](filepath.Join(runDir, "data", "rl.jsonl")); err != nil {
		return d, err
	}
	if d.heldOut, err = jsonl.Read[Item](filepath.Join(runDir, "data", "heldout.jsonl")); err != nil {
		return d, err
	}
	for _, it := range append(append([]Item{}, d.rl...), d.heldOut...) {
		f := it.Level - 1
		if f < 0 || it.Family == "" {
			return d, fmt.Errorf("%s: problem %s has no family", filepath.Join(runDir, "data"), it.ID)
		}
		for len(d.families) <= f {
			d.families, d.familyRules = append(d.families, ""), append(d.familyRules, "")
		}
		if d.families[f] == "" {
			d.families[f], d.familyRules[f] = it.Family, it.Rule
		} else if d.familyRules[f] != it.Rule {
			d.familyRules[f] = "" // each problem its own (control)
		}
	}
	return d, nil
}
