package demo

import (
	"fmt"
	"math/rand"

	"github.com/lanpo-rl/lanpo/seed"
)

// A world is a demo's problems: its splits, the held-out benchmarks they
// form, and the SFT data its teacher writes.
type world interface {
	split(seed int64, p demoPlan) demoSplit
	// groups names the held-out benchmarks; Item.Level is the 1-based index
	// of an item's.
	groups(d demoSplit) []string
	sftChats(b *seed.Builder, d demoSplit, seed int64, p demoPlan) []seed.Example
}

// Worlds (lanpo demo --world).
const (
	WorldTransfer   = "transfer"
	WorldControl    = "control"
	WorldArithmetic = "arithmetic"
)

// WorldNames lists the worlds, the default first.
var WorldNames = []string{WorldTransfer, WorldControl, WorldArithmetic}

func worldOf(name string) (world, error) {
	switch name {
	case WorldTransfer:
		return rulesWorld{transfer: true}, nil
	case WorldControl:
		return rulesWorld{}, nil
	case WorldArithmetic:
		return mathWorld{}, nil
	}
	return nil, fmt.Errorf("demo world %q: want %s, %s or %s", name, WorldTransfer, WorldControl, WorldArithmetic)
}

// isRules reports whether a world is one of the rule worlds.
func isRules(name string) bool { return name == WorldTransfer || name == WorldControl }

// demoPlan is a demo's schedule and split sizes.
type demoPlan struct {
	sftSteps, rlSteps int
	heldOut           int // held-out problems per level or family
	rlPerLevel        int // distinct RL problems per RL level or family
	sftDraws          int // SFT answer examples (per level in the arithmetic world)
	rlLR              float64
	budgetSteps       int    // the grpo-budget arm's steps (0: 2 × rlSteps)
	modelSize         string // the built-in model (small, medium, large)
	// sftLessons: the rule worlds' SFT also teaches solving with lessons
	// shown (lanpo.context: lessons).
	sftLessons    bool
	rlLevels      []int
	workedFrac    float64 // arithmetic: share of SFT answers with worked (column-method) solutions
	skillExamples int     // examples of each LANPO skill the world writes for SFT
	evalEvery     int     // held-out evaluation during RL
	maxNew        int     // generated tokens per response
	// Rule worlds: families (words with a rule each), SFT-only words, and K
	// candidate rules.
	families, sftWords, rulesK int
}

// The arithmetic world's SFT answers mix two forms: worked column-method
// solutions for 40% of the problems and the bare result for the rest. The
// SFT model then usually answers briefly and is mostly wrong on two-digit
// problems, yet it can work them in columns when it samples that form: RL
// has something to discover (docs/benchmarks.md, "Demo"). RL problems are
// 100 distinct ones per level 2-4, so over 60 steps of 16 prompts each
// recurs about three times (reflection needs an earlier attempt) while RL
// still sees many distinct problems.
//
// The rule worlds' sizes and K: docs/demo.md ("Think before running").
func plan(worldName string, fast bool) demoPlan {
	if isRules(worldName) {
		p := demoPlan{sftSteps: 1600, rlSteps: 50, heldOut: 8, rlPerLevel: 8, sftDraws: 12000, rlLR: 3e-4, skillExamples: 2500, evalEvery: 5, maxNew: 48,
			families: 12, sftWords: 80, rulesK: 12}
		if fast {
			p.sftSteps, p.rlSteps, p.heldOut, p.rlPerLevel, p.sftDraws, p.skillExamples, p.evalEvery, p.families = 120, 6, 4, 4, 1500, 300, 3, 6
		}
		return p
	}
	p := demoPlan{sftSteps: 1400, rlSteps: 60, heldOut: 100, rlPerLevel: 100, sftDraws: 3000, rlLR: 1e-4, rlLevels: []int{2, 3, 4},
		workedFrac: 0.4, skillExamples: 400, evalEvery: 20, maxNew: 112}
	if fast {
		p.sftSteps, p.rlSteps, p.heldOut, p.rlPerLevel, p.sftDraws, p.evalEvery, p.skillExamples = 150, 8, 24, 12, 400, 4, 80
	}
	return p
}

// demoSplit is a demo's data: disjoint SFT, RL and held-out problems.
type demoSplit struct {
	heldOut, rl, sft []Item // sft: distinct problems, answers drawn from them
	sftAnswers       []Item
	// Rule worlds: the families' words and rules, the SFT words, and the
	// operand pairs RL and SFT may use (the held-out ones excluded).
	families, familyRules, sftWords []string
	trainPairs                      [][2]int
}

// mathWorld is the arithmetic world.
type mathWorld struct{}

// split draws held-out problems first, then distinct RL problems, then SFT
// problems from what is left (SFT answers may repeat problems; the skill
// examples use each distinct SFT problem once).
func (mathWorld) split(seed int64, p demoPlan) demoSplit {
	w := NewWorld(seed)
	seen := map[string]bool{}
	var d demoSplit
	for lv := 1; lv <= MaxLevel; lv++ {
		d.heldOut = append(d.heldOut, w.draw(lv, min(p.heldOut, distinctProblems[lv]/4), 200*p.heldOut, seen, true, "heldout")...)
	}
	for _, lv := range p.rlLevels {
		d.rl = append(d.rl, w.draw(lv, min(p.rlPerLevel, distinctProblems[lv]/4), 200*p.rlPerLevel, seen, true, "rl")...)
	}
	sftSeen := map[string]bool{}
	for lv := 1; lv <= MaxLevel; lv++ {
		for _, it := range w.draw(lv, p.sftDraws, 100*p.sftDraws, seen, false, "sft") {
			d.sftAnswers = append(d.sftAnswers, it)
			if !sftSeen[it.Problem] {
				sftSeen[it.Problem] = true
				d.sft = append(d.sft, it)
			}
		}
	}
	return d
}

func (mathWorld) groups(demoSplit) []string {
	var out []string
	for lv := 1; lv <= MaxLevel; lv++ {
		out = append(out, fmt.Sprintf("level%d", lv))
	}
	return out
}

// sftChats: answers in two forms, and the world's skill examples.
func (mathWorld) sftChats(b *seed.Builder, d demoSplit, runSeed int64, p demoPlan) []seed.Example {
	pick := rand.New(rand.NewSource(runSeed + 2000)) // its own stream: the problems do not depend on the mix
	var chats []seed.Example
	for _, it := range d.sftAnswers {
		answer := it.Brief
		if pick.Float64() < p.workedFrac {
			answer = it.Solution
		}
		chats = append(chats, b.Answer(it.ID, it.Problem, answer))
	}
	return append(chats, worldSeed(b, d.sft, runSeed+3000, p.skillExamples)...)
}

// groupName is a held-out group's row label in the report.
func groupName(worldName string, lv int, name string) string {
	if isRules(worldName) {
		return name
	}
	if lv < len(Levels) {
		return fmt.Sprintf("%d: %s", lv, Levels[lv])
	}
	return name
}
