package demo

import (
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/seed"
)

// TestRuleOracle: the oracle's plan is the family's rule, given to the
// family's RL problems only after a verified-correct rollout on one of
// them whose operands tell the rules apart; a wrong rollout or another
// family's success gives nothing, and a held-out problem never gets a
// plan.
func TestRuleOracle(t *testing.T) {
	d := rulesWorld{transfer: true}.split(1, plan(WorldTransfer, false))
	o := newRuleOracle(d)
	byFamily := map[int][]Item{}
	for _, it := range d.rl {
		byFamily[it.Level-1] = append(byFamily[it.Level-1], it)
	}
	first, second := byFamily[0], byFamily[1]
	if _, ok := o.Plan(first[0].ID); ok {
		t.Fatal("a plan before the family was found")
	}
	o.Observe(first[0].ID, false)
	o.Observe(second[0].ID, true)
	if _, ok := o.Plan(first[1].ID); ok {
		t.Fatal("a plan after a wrong rollout or another family's success")
	}
	o.Observe(first[0].ID, true)
	for _, it := range first {
		plan, ok := o.Plan(it.ID)
		if want := ruleStatement(it.Family, it.Rule); !ok || plan != want || !statesRule(plan, it.Family, it.Rule) {
			t.Fatalf("%s: plan %q (%v), want %q", it.ID, plan, ok, want)
		}
	}
	for _, it := range d.heldOut {
		if plan, ok := o.Plan(it.ID); ok {
			t.Fatalf("held-out %s got the plan %q", it.ID, plan)
		}
	}
	// Operands that some wrong rule answers right do not count as finding.
	if discriminates(3, 3, 12) || !discriminates(3, 7, 12) {
		t.Fatal("discriminates: (3, 3) tells no rules apart; (3, 7) tells all 12 apart")
	}
	o2 := newRuleOracle(d)
	o2.discriminating[first[0].ID] = false
	o2.Observe(first[0].ID, true)
	if _, ok := o2.Plan(first[1].ID); ok {
		t.Fatal("a right answer on operands that do not discriminate found the family")
	}
}

// TestTeacherLessonsExamples: the rule worlds' SFT teaches solving with
// lessons shown only when asked, and then a solve applies the rule a
// lesson states, or a rule no lesson ruled out; without it the SFT data
// are those of a run before the option existed (the same chats).
func TestTeacherLessonsExamples(t *testing.T) {
	w := rulesWorld{transfer: true}
	p := plan(WorldTransfer, true)
	d := w.split(1, p)
	b, err := seed.NewBuilder(baseConfig(1, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	count := func(chats []seed.Example) (n int) {
		for _, c := range chats {
			if c.Part == "solve-lessons" {
				n++
			}
		}
		return n
	}
	plain := w.sftChats(b, d, 1, p)
	p.sftLessons = true
	with := w.sftChats(b, d, 1, p)
	if count(plain) != 0 || count(with) != p.skillExamples || len(with) != len(plain)+p.skillExamples {
		t.Fatalf("solve-with-lessons examples: %d without the option, %d with (of %d chats, %d without)", count(plain), count(with), len(with), len(plain))
	}
	for _, c := range with {
		if c.Part != "solve-lessons" {
			continue
		}
		user, answer := c.Messages[len(c.Messages)-2].Content, c.Messages[len(c.Messages)-1].Content
		word := strings.Fields(answer)[0]
		rule := strings.TrimSuffix(strings.Fields(answer)[2], ":")
		if strings.Contains(user, notStatement(word, rule)) {
			t.Fatalf("a solve applies a rule its lessons ruled out:\n%s\n→ %s", user, answer)
		}
		for _, r := range rulePatterns[:p.rulesK] {
			if r != rule && statesRule(user, word, r) {
				t.Fatalf("a lesson states %s but the solve applies %s:\n%s", r, rule, user)
			}
		}
	}
}
