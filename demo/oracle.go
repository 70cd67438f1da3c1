package demo

import (
	"fmt"
	"path/filepath"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/seed"
	"github.com/lanpo-rl/lanpo/trainer"
)

// The oracle bound (the lanpo-oracle arm, transfer world): the plan a
// perfect condenser would write — the family's true rule, "zorp is aab." —
// given to a family's RL problems only once RL itself has found the rule,
// that is once some RL problem of the family had a verified-correct
// rollout whose operands no wrong rule answers right (distinct digits: the
// K patterns give K different answers). It knows the RL split only: a
// held-out problem's id gets no plan. Everything else is the consolidation
// arm's. If the oracle does not beat GRPO, good context is not enough at
// this scale; if it does, the gap to the real arms is what retrieval, the
// summaries and the condenser lose.

// ruleOracle implements feedback.Oracle for the transfer world.
type ruleOracle struct {
	family map[string]int // RL problem id → family
	words  []string
	rules  []string
	found  []bool
	// discriminating: RL problems whose operands tell the rules apart.
	discriminating map[string]bool
}

func newRuleOracle(d demoSplit) *ruleOracle {
	o := &ruleOracle{family: map[string]int{}, words: d.families, rules: d.familyRules, found: make([]bool, len(d.families)),
		discriminating: map[string]bool{}}
	for _, it := range d.rl {
		o.family[it.ID] = it.Level - 1
		o.discriminating[it.ID] = discriminates(it.A, it.B, len(rulePatterns))
	}
	return o
}

// discriminates reports whether operands a, b give every one of the first
// k rule patterns a different answer: a right answer then names the rule.
func discriminates(a, b, k int) bool {
	seen := map[string]bool{}
	for _, p := range rulePatterns[:k] {
		ans := applyRule(p, a, b)
		if seen[ans] {
			return false
		}
		seen[ans] = true
	}
	return true
}

// Plan is the family's rule once found; nothing for any other id.
func (o *ruleOracle) Plan(problemID string) (string, bool) {
	f, ok := o.family[problemID]
	if !ok || !o.found[f] {
		return "", false
	}
	return ruleStatement(o.words[f], o.rules[f]), true
}

// Observe marks a family found at its first verified-correct rollout on a
// discriminating RL problem.
func (o *ruleOracle) Observe(problemID string, correct bool) {
	if f, ok := o.family[problemID]; ok && correct && o.discriminating[problemID] {
		o.found[f] = true
	}
}

// Found lists the families found so far.
func (o *ruleOracle) Found() []bool { return append([]bool(nil), o.found...) }

// evaluateOracle adds the oracle arm's "retrieval" mode to its zero-shot
// result: the held-out problems of the families it found during training
// with their rule given as the plan (the families it did not find, bare) —
// what its retrieval would give at test time.
func (d demoRun) evaluateOracle(runDir string, r StageResult, model string, cfg trainer.Config, o *ruleOracle) (StageResult, error) {
	b, err := seed.NewBuilder(cfg, nil)
	if err != nil {
		return r, err
	}
	found := o.Found()
	var bench []eval.Benchmark
	for i, name := range d.groups {
		var items []Item
		for _, it := range d.split.heldOut {
			if it.Level != i+1 {
				continue
			}
			if found[i] {
				it = withRuleTold(it, b.Prompts())
			}
			items = append(items, it)
		}
		bm, err := writeBenchmark(filepath.Join(runDir, "data", "heldout-oracle"), name, items)
		if err != nil {
			return r, err
		}
		bench = append(bench, bm)
	}
	told, err := d.evaluate(runDir, r.Stage+"-oracle-plans", model, bench, cfg, nil)
	if err != nil {
		return r, fmt.Errorf("oracle evaluation: %w", err)
	}
	m := told.Modes[0]
	m.Mode = eval.ModeRetrieval
	r.Modes = append(r.Modes, m)
	return r, nil
}
