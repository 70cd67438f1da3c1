package demo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The relevance filter's purity, from an arm's rollout logs: every prompt
// that drew retrieval candidates counts (also one whose candidates all
// failed and that fell back to scratch), candidates of the problem's own
// family against other families', a prompt given another family's problem
// once; steps 1–10 apart from the whole run; candidates of unknown
// problems (held out, or not in the split) are left out.
func TestRelevancePurity(t *testing.T) {
	d := demoSplit{families: []string{"zorp", "blic"}, familyRules: []string{"aab", "ba"}, rl: []Item{
		{ID: "z1", Level: 1, Rule: "aab"}, {ID: "z2", Level: 1, Rule: "aab"}, {ID: "z3", Level: 1, Rule: "aab"},
		{ID: "b1", Level: 2, Rule: "ba"}, {ID: "b2", Level: 2, Rule: "ba"}}}
	dir := t.TempDir()
	write := func(step int, rows []rolloutRow) {
		var b strings.Builder
		for _, r := range rows {
			r.Step = step
			js, _ := json.Marshal(r)
			b.Write(append(js, '\n'))
		}
		path := filepath.Join(dir, "rollouts", fmt.Sprintf("step-%06d.jsonl", step))
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rel := func(id string, passed bool) relatedRow { return relatedRow{ProblemID: id, Passed: passed} }
	write(1, []rolloutRow{
		// a plan prompt: its family's z2 passed, z3 not; blic's b1 passed
		{ProblemID: "z1", Group: 0, Mode: "abstraction", Prompt: "Plan: zorp is aab.", Related: []relatedRow{rel("z2", true), rel("z3", false), rel("b1", true)}},
		{ProblemID: "z1", Group: 0, Sample: 1, Mode: "abstraction", Prompt: "Plan: zorp is aab."},
		// every candidate failed: fell back to scratch, still counted
		{ProblemID: "b1", Group: 1, Mode: "scratch", Related: []relatedRow{rel("b2", false), rel("z1", false), rel("held-out-9", true)}},
		// no retrieval at all
		{ProblemID: "b2", Group: 2, Mode: "scratch"},
	})
	write(12, []rolloutRow{
		{ProblemID: "b2", Group: 0, Mode: "abstraction", Prompt: "Plan: blic is ba.", Related: []relatedRow{rel("b1", true), rel("z2", false)}},
	})
	var r ArmRules
	r.Groups = map[string]ModeGroups{}
	r.readRollouts(dir, newRuleIndex(d))
	want10 := Purity{SameCandidates: 3, SamePassed: 1, OtherCandidates: 2, OtherPassed: 1, Prompts: 2, PromptsWithOther: 1}
	wantRun := Purity{SameCandidates: 4, SamePassed: 2, OtherCandidates: 3, OtherPassed: 1, Prompts: 3, PromptsWithOther: 1}
	if r.Purity10 != want10 || r.PurityRun != wantRun {
		t.Fatalf("purity: steps 1–10 %+v, want %+v; whole run %+v, want %+v", r.Purity10, want10, r.PurityRun, wantRun)
	}
	if r.PurityRun.PassSame() != 0.5 || r.PurityRun.PassOther() != 1.0/3 || r.PurityRun.OtherShare() != 1.0/3 || (Purity{}).PassSame() != -1 {
		t.Fatalf("rates: %v %v %v", r.PurityRun.PassSame(), r.PurityRun.PassOther(), r.PurityRun.OtherShare())
	}
	var b strings.Builder
	purityTable(&b, &RulesAnalysis{Arms: map[string]ArmRules{"lanpo": r, "grpo": {}}}, []string{"grpo", "lanpo"})
	if !strings.Contains(b.String(), "<td>lanpo</td><td>whole run</td><td>0.50 (4)</td><td>0.33 (3)</td><td>0.33 (3)</td>") || strings.Contains(b.String(), "<td>grpo</td>") {
		t.Fatalf("the report's table:\n%s", b.String())
	}
}

// TestPlanKinds: each plan is classified by what it says of its problem's
// word, first match winning, and a plan is credited with carrying the rule
// from its lessons only when a lesson it read stated it.
func TestPlanKinds(t *testing.T) {
	d := demoSplit{families: []string{"zorp", "blic"}, familyRules: []string{"aab", "ba"}, rl: []Item{
		{ID: "z1", Level: 1, Rule: "aab"}, {ID: "b1", Level: 2, Rule: "ba"}}}
	x := newRuleIndex(d)
	for plan, want := range map[string]string{
		"Plan: zorp is aab.":                 PlanRightRule,
		"Plan: zorp is not ba. zorp is aab.": PlanRightRule,
		"Plan: zorp is aabb.":                PlanWrongRule,
		"Plan: zorp is not aab. blic is ba.": PlanOtherFamily,
		"Plan: zorp is not ba.":              PlanNotX,
		"Plan: use the rule.":                PlanOther,
		"Plan: zorq is bb.":                  PlanMiscopied,
		"Notes:\n- Principle: zorp is aab.":  PlanRightRule,
	} {
		if got := x.planKind(planOf(plan), "z1"); got != want {
			t.Errorf("%q: %s, want %s", plan, got, want)
		}
	}
	dir := t.TempDir()
	rows := []rolloutRow{
		{Step: 1, ProblemID: "z1", Group: 0, Mode: "abstraction", Prompt: "Plan: zorp is aab.", Lessons: []string{"zorp is not ba.", "zorp is aab. None."}},
		{Step: 1, ProblemID: "z1", Group: 1, Mode: "abstraction", Prompt: "Plan: zorp is not ba.", Lessons: []string{"zorp is aab. None."}},
		{Step: 1, ProblemID: "z1", Group: 2, Mode: "abstraction", Prompt: "Plan: zorp is aab.", Lessons: []string{"zorp is not ba."}},
	}
	var b strings.Builder
	for _, r := range rows {
		js, _ := json.Marshal(r)
		b.Write(append(js, '\n'))
	}
	os.MkdirAll(filepath.Join(dir, "rollouts"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "rollouts", "step-000001.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := ArmRules{Groups: map[string]ModeGroups{}}
	r.readRollouts(dir, x)
	if r.Plans != 3 || r.PlanKinds[PlanRightRule] != 2 || r.PlanKinds[PlanNotX] != 1 || r.PlansLessonStates != 2 || r.PlansLessonStatesCarried != 1 || r.PlansRuleWithoutLesson != 1 {
		t.Fatalf("plans %d, kinds %v, lesson states %d, carried %d, without %d", r.Plans, r.PlanKinds, r.PlansLessonStates, r.PlansLessonStatesCarried, r.PlansRuleWithoutLesson)
	}
}
