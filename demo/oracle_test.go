package demo

import "testing"

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
