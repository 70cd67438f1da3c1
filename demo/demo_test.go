package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/trainertest"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/seed"
	"github.com/lanpo-rl/lanpo/trainer"
)

// stage is a run's result of one stage (nil: none).
func stage(res Results, name string) *StageResult {
	for i := range res.Stages {
		if res.Stages[i].Stage == name {
			return &res.Stages[i]
		}
	}
	return nil
}

func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	os.Exit(m.Run())
}

func TestSplitIsDisjointAndDeterministic(t *testing.T) {
	train, held := Split(3, []int{1, 2, 3, 4}, 200, 20)
	train2, held2 := Split(3, []int{1, 2, 3, 4}, 200, 20)
	if len(train) != 800 || len(held) != 20+20+20+20 || train[17] != train2[17] || held[33] != held2[33] {
		t.Fatalf("split: %d train, %d held out, or not deterministic", len(train), len(held))
	}
	seen := map[string]bool{}
	for _, it := range held {
		seen[it.Problem] = true
	}
	levels := map[int]int{}
	for _, it := range train {
		if seen[it.Problem] {
			t.Fatalf("held-out problem %q is in the training set", it.Problem)
		}
		levels[it.Level]++
		if !strings.Contains(it.Solution, `\boxed{`+it.Answer+`}`) {
			t.Fatalf("solution %q does not box the answer %q", it.Solution, it.Answer)
		}
	}
	if len(levels) != 4 {
		t.Fatalf("levels %v", levels)
	}
}

// TestSolutionStepsAreRight evaluates every equation in the worked
// solutions of all levels: a wrong carry, borrow or product in the
// reference data would teach the model wrong arithmetic.
func TestSolutionStepsAreRight(t *testing.T) {
	eq := regexp.MustCompile(`(\d+) ([-+*]|\\times) (\d+)(?: ([-+]) (\d+))? = (\d+)`)
	w := NewWorld(7)
	for lv := 1; lv <= MaxLevel; lv++ {
		for k := 0; k < 500; k++ {
			it := w.Problem(lv)
			ms := eq.FindAllStringSubmatch(it.Solution, -1)
			if len(ms) == 0 || (lv > 1 && len(ms) != 3) {
				t.Fatalf("level %d: %q has %d equations", lv, it.Solution, len(ms))
			}
			for _, m := range ms {
				n := func(s string) int { v, _ := strconv.Atoi(s); return v }
				v := n(m[1])
				switch m[2] {
				case "+":
					v += n(m[3])
				case "-":
					v -= n(m[3])
				default:
					v *= n(m[3])
				}
				if m[4] == "+" {
					v += n(m[5])
				} else if m[4] == "-" {
					v -= n(m[5])
				}
				if v != n(m[6]) {
					t.Fatalf("level %d: %q: %q is wrong", lv, it.Solution, m[0])
				}
			}
			if last := ms[len(ms)-1]; last[6] != it.Answer {
				t.Fatalf("level %d: %q: answer %s, last equation %s", lv, it.Solution, it.Answer, last[0])
			}
		}
	}
}

// TestDemoFast runs `lanpo demo --fast` (SFT with the world's skill
// examples, then LANPO) end to end and checks that LANPO's mechanism ran —
// feedback-aware prompts sampled, reflections and plans used, entries
// written — and that the report shows the side-by-side table and charts
// (not the accuracy).
func TestDemoFast(t *testing.T) {
	dir, res := runFastDemo(t, Options{World: WorldArithmetic, Arms: []string{ArmLANPO, ArmGRPOLoRA}})
	if len(res.Stages) != 3 || res.Stages[0].Stage != "sft" || len(res.Stages[1].Modes) != 3 || len(res.Stages[1].Modes[0].Levels) != MaxLevel {
		t.Fatalf("stages %+v", res.Stages)
	}
	if res.Stages[2].Stage != ArmGRPOLoRA || !model.IsAdapterDir(stepDir(filepath.Join(dir, ArmGRPOLoRA), plan(WorldArithmetic, true).rlSteps)) {
		t.Fatalf("the grpo-lora arm: stage %q, or its checkpoint is no adapter", res.Stages[2].Stage)
	}
	u := res.Usage[ArmLANPO]
	if u.FeedbackAware == 0 || u.Reflection == 0 || u.Abstraction == 0 {
		t.Fatalf("the pool was not used: %+v", u)
	}
	rows, err := eval.ReadMetrics(filepath.Join(dir, ArmLANPO, "metrics.jsonl"))
	if err != nil || len(rows) == 0 {
		t.Fatalf("lanpo metrics: %v (%d rows)", err, len(rows))
	}
	if added, _ := rows[0]["pool_added"].(float64); added == 0 {
		t.Fatal("the first step wrote no pool entries")
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Held-out accuracy (greedy), after SFT and after each RL arm", "lanpo retrieval", "One reflection", "entries the model wrote", "tokens prefilled + generated"} {
		if !strings.Contains(string(page), want) {
			t.Fatalf("the report lacks %q", want)
		}
	}
	if n := strings.Count(string(page), "<svg"); n < 6 {
		t.Fatalf("%d charts", n)
	}
	// lanpo report regenerates it.
	os.Remove(filepath.Join(dir, "report.html"))
	if err := WriteReport(dir); err != nil {
		t.Fatal(err)
	}
}

// TestDemoFastTransfer runs the transfer world's comparison short: GRPO
// and LANPO with consolidation from one SFT model, the ceiling measured,
// the mechanism recorded per family, and the report's world sections —
// with one held-out accuracy (pooled) in the table and the curves, whose
// first point is the SFT model at step 0.
func TestDemoFastTransfer(t *testing.T) {
	dir, res := runFastDemo(t, Options{RLSeeds: 2})
	p := plan(WorldTransfer, true)
	if res.World != WorldTransfer || len(res.Stages) != 2+len(DefaultArms) || res.Stages[1].Stage != stageTold || res.Rules == nil {
		t.Fatalf("results: world %q, stages %+v", res.World, res.Stages)
	}
	for _, arm := range DefaultArms {
		r := res.Rules.Arms[arm]
		if len(r.Found) != p.families || len(r.Learned) != p.families || len(r.Learned[0]) != 1+p.rlSteps/p.evalEvery || r.Learned[0][0][0] != 0 {
			t.Fatalf("%s: found %v, learned %v", arm, r.Found, r.Learned)
		}
		if r.HeldOutInPool != 0 {
			t.Fatalf("%s: %d held-out problems in the pool", arm, r.HeldOutInPool)
		}
		if r.Groups["scratch"].Groups == 0 {
			t.Fatalf("%s: no from-scratch groups counted: %+v", arm, r.Groups)
		}
	}
	lanpo := res.Rules.Arms[ArmLANPOConsolidate]
	if lanpo.PoolEntries == 0 || res.Usage[ArmLANPOConsolidate].FeedbackAware == 0 {
		t.Fatalf("LANPO's pool %d entries, usage %+v", lanpo.PoolEntries, res.Usage[ArmLANPOConsolidate])
	}
	if lanpo.PurityRun.Prompts == 0 || lanpo.PurityRun.SameCandidates+lanpo.PurityRun.OtherCandidates == 0 {
		t.Fatalf("no retrieval candidates counted for the relevance filter's purity: %+v", lanpo.PurityRun)
	}
	// #44's target for the filter: a family's problems pass, others do not.
	for when, p := range map[string]Purity{"steps 1-10": lanpo.Purity10, "whole run": lanpo.PurityRun} {
		if p.PassSame() < 0.9 || p.PassOther() > 0.05 || p.PromptsWithOther > 0 {
			t.Fatalf("relevance filter, %s: P(pass | same) %.2f, P(pass | other) %.2f, %d prompts given another family's problem: %+v",
				when, p.PassSame(), p.PassOther(), p.PromptsWithOther, p)
		}
	}
	// The oracle: its every plan is the family's rule, given only after RL
	// found the family, and never for a held-out problem.
	oracle := res.Rules.Arms[ArmOracle]
	if oracle.Plans == 0 || oracle.PlansStateRule != oracle.Plans || oracle.PlanKinds[PlanRightRule] != oracle.Plans {
		t.Fatalf("oracle plans: %d, %d state the rule, kinds %v", oracle.Plans, oracle.PlansStateRule, oracle.PlanKinds)
	}
	d, err := readRulesSplit(dir)
	if err != nil {
		t.Fatal(err)
	}
	x := newRuleIndex(d)
	logs, _ := filepath.Glob(filepath.Join(dir, ArmOracle, "rollouts", "step-*.jsonl"))
	for _, path := range logs {
		rows, err := jsonl.Read[rolloutRow](path)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			f, ok := x.family[row.ProblemID]
			if row.Mode != "abstraction" {
				continue
			}
			if !ok || x.heldOut[row.ProblemID] {
				t.Fatalf("an oracle plan for %s, not an RL problem", row.ProblemID)
			}
			if found := oracle.Found[f]; found == 0 || row.Step <= found {
				t.Fatalf("step %d: an oracle plan for family %d, found at step %d", row.Step, f, found)
			}
		}
	}
	if st := stage(res, ArmOracle); st == nil || st.mode(eval.ModeRetrieval) == nil {
		t.Fatal("the oracle arm has no oracle-plan (retrieval) evaluation")
	}
	// --rl-seeds 2: the second RL seed's arms from the same SFT model, with
	// their own trainer seed.
	sub := filepath.Join(dir, "rl-2")
	raw, err := os.ReadFile(filepath.Join(sub, "demo_results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res2 Results
	if err := json.Unmarshal(raw, &res2); err != nil {
		t.Fatal(err)
	}
	if res.RLSeed != 1 || res2.RLSeed != 2 || res2.Seed != res.Seed || len(res2.Stages) != len(res.Stages) {
		t.Fatalf("RL seeds: %d and %d (world seeds %d, %d), %d and %d stages", res.RLSeed, res2.RLSeed, res.Seed, res2.Seed, len(res.Stages), len(res2.Stages))
	}
	if _, err := os.Stat(filepath.Join(sub, "sft")); !os.IsNotExist(err) {
		t.Fatalf("RL seed 2 trained an SFT model of its own (%v)", err)
	}
	for r, want := range map[string]uint64{dir: 1, sub: rlSeed(1, 2)} {
		cfg, err := trainer.ReadConfig(filepath.Join(r, ArmGRPO, "config.resolved.yaml"), nil)
		if err != nil || cfg.Seed != want || !strings.HasSuffix(cfg.Model, filepath.Join("sft", "checkpoints", fmt.Sprintf("step-%06d", p.sftSteps))) {
			t.Fatalf("%s: trainer seed %d (want %d), model %s: %v", r, cfg.Seed, want, cfg.Model, err)
		}
	}
	// lanpo demo paired reads both RL seeds as two pairs.
	pr, err := Paired(ArmRef{Arm: ArmGRPO, Root: dir, Label: "grpo"}, []ArmRef{{Arm: ArmOracle, Root: dir, Label: "oracle"}}, 100, 1)
	if err != nil || len(pr) != 1 || len(pr[0].Pairs) != 2 {
		t.Fatalf("paired: %+v, %v", pr, err)
	}
	rows, err := eval.ReadMetrics(filepath.Join(dir, ArmLANPOConsolidate, "metrics.jsonl"))
	if err != nil || len(rows) != p.rlSteps {
		t.Fatalf("metrics: %v (%d rows)", err, len(rows))
	}
	if _, ok := rows[0]["zero_variance_frac_feedback"]; !ok {
		t.Fatal("the LANPO arm does not log its groups' shares per prompt kind")
	}
	// One held-out accuracy: the table's pooled SFT figure is the curves'
	// step-0 point.
	sft, ok := pooledAt(filepath.Join(dir, "eval-sft"))
	if !ok || sft != res.Stages[0].Modes[0].Overall {
		t.Fatalf("pooled SFT accuracy %v (%v), table %v", sft, ok, res.Stages[0].Modes[0].Overall)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	// The retrieval controls: the SFT model and GRPO's with the LANPO arm's
	// pool, GRPO's with a pool of its own rollouts (written beside them),
	// the SFT model with the oracle's plans; every held-out problem each.
	controls := map[string]RetrievalControl{}
	for _, c := range res.Controls {
		controls[c.Model+"|"+c.Pool] = c
	}
	for _, k := range []string{"sft|" + ArmLANPOConsolidate, ArmGRPO + "|" + ArmLANPOConsolidate, ArmGRPO + "|grpo-own", "sft|" + ArmOracle} {
		c, ok := controls[k]
		n := 0
		for _, l := range c.Retrieval.Levels {
			n += l.N
		}
		if !ok || n != res.Sizes["heldout"] {
			t.Fatalf("retrieval control %s: %v, %d held-out problems (controls %v)", k, ok, n, res.Controls)
		}
	}
	if own, err := pool.Load(filepath.Join(dir, ArmGRPO, "pool-own.jsonl"), pool.DefaultConfig()); err != nil || own.Entries() == 0 {
		t.Fatalf("GRPO's own pool: %v", err)
	}
	// The diagnostics reach the metrics: consolidation's span and its
	// after-step NLL, the gradients apart, the held-out reference NLL.
	for _, key := range []string{"consolidate_nll_span", "consolidate_nll_after", "grad_norm_term"} {
		seen := false
		for _, row := range rows {
			_, ok := row[key]
			seen = seen || ok
		}
		if !seen {
			t.Fatalf("no %s in the LANPO arm's metrics", key)
		}
	}
	if _, ok := rows[p.evalEvery-1]["eval/"+res.Rules.Families[0]+"/zero-shot/reference_nll_span"]; !ok {
		t.Fatalf("no held-out reference NLL at the first evaluation: %v", rows[p.evalEvery-1])
	}
	for _, want := range []string{"Transfer world", "rule told (ceiling)", "Predicted before running", "Verdict, from this run's numbers", "The mechanism, step by step", "families found", "Per family", "step 0 is the SFT model", "The relevance filter", "lanpo demo paired", "Retrieval controls"} {
		if !strings.Contains(string(page), want) {
			t.Fatalf("the report lacks %q", want)
		}
	}
}

// The demo's splits are disjoint: no held-out problem in RL or SFT, no RL
// problem in SFT, and every RL problem recurs over the RL steps.
func TestDemoSplitsAreDisjoint(t *testing.T) {
	p := plan(WorldArithmetic, false)
	d := mathWorld{}.split(3, p)
	held, rl := map[string]bool{}, map[string]bool{}
	for _, it := range d.heldOut {
		held[it.Problem] = true
	}
	for _, it := range d.rl {
		if held[it.Problem] || rl[it.Problem] {
			t.Fatalf("RL problem %q is held out or repeated", it.Problem)
		}
		rl[it.Problem] = true
	}
	for _, it := range d.sftAnswers {
		if held[it.Problem] || rl[it.Problem] {
			t.Fatalf("SFT problem %q is held out or an RL problem", it.Problem)
		}
	}
	levels := map[int]int{}
	for _, it := range d.rl {
		levels[it.Level]++
	}
	if levels[2] != 100 || levels[3] != 100 || levels[4] != 100 || p.rlSteps*16 < 3*len(d.rl) {
		t.Fatalf("RL problems per level %v over %d draws", levels, p.rlSteps*16)
	}
}

// A --run-dir with files but no demo marker is refused and left as it is;
// an earlier demo run, an empty directory and --force are replaced.
func TestDemoRunDirIsClaimedSafely(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(dir, 0o755)
	precious := filepath.Join(dir, "precious.jsonl")
	os.WriteFile(precious, []byte("{}\n"), 0o644)
	err := Run(context.Background(), Options{RunDir: dir, World: WorldArithmetic, Seed: 1, Fast: true, Log: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("the refused directory lost its file: %v", err)
	}
	// A bad option is refused before the directory is touched.
	os.WriteFile(filepath.Join(dir, demoMarker), []byte("{}\n"), 0o644)
	if err := Run(context.Background(), Options{RunDir: dir, ModelSize: "huge", Seed: 1, Fast: true, Log: io.Discard}); err == nil || !strings.Contains(err.Error(), "huge") {
		t.Fatalf("model size huge: %v", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("a refused option emptied the directory: %v", err)
	}
	if err := claimRunDir(dir, 1, true, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(precious); !os.IsNotExist(err) {
		t.Fatal("--force kept the old files")
	}
	os.WriteFile(filepath.Join(dir, "sft.log"), nil, 0o644)
	if err := claimRunDir(dir, 1, true, false); err != nil { // an earlier demo run
		t.Fatal(err)
	}
	if err := claimRunDir(filepath.Join(t.TempDir(), "new"), 1, true, false); err != nil {
		t.Fatal(err)
	}
}

// The rule worlds' splits: a family keeps its word and rule (transfer) or
// each problem has its own rule shown by a right worked example (control);
// no held-out operand pair is an RL one; SFT never shows a family's word.
func TestRuleWorldSplits(t *testing.T) {
	for _, name := range []string{WorldTransfer, WorldControl} {
		w, _ := worldOf(name)
		p := plan(name, false)
		d := w.split(5, p)
		if len(d.families) != p.families || len(d.heldOut) != p.families*p.heldOut || len(d.rl) != p.families*p.rlPerLevel {
			t.Fatalf("%s: %d families, %d held out, %d RL", name, len(d.families), len(d.heldOut), len(d.rl))
		}
		rlPairs := map[[2]int]bool{}
		rules := map[string]map[string]bool{}
		for _, it := range d.rl {
			rlPairs[[2]int{it.A, it.B}] = true
		}
		for _, it := range append(append([]Item{}, d.rl...), d.heldOut...) {
			if it.Answer != applyRule(it.Rule, it.A, it.B) || !strings.Contains(it.Problem, fmt.Sprintf("%d %s %d?", it.A, it.Family, it.B)) {
				t.Fatalf("%s: %+v", name, it)
			}
			if rules[it.Family] == nil {
				rules[it.Family] = map[string]bool{}
			}
			rules[it.Family][it.Rule] = true
			if name == WorldControl {
				var ea, eb int
				var shown string
				fmt.Sscanf(it.Problem, "If %d "+it.Family+" %d is %s", &ea, &eb, &shown)
				if shown != applyRule(it.Rule, ea, eb)+"," {
					t.Fatalf("control problem %q: its example does not show its rule %s", it.Problem, it.Rule)
				}
			}
		}
		for _, it := range d.heldOut {
			if rlPairs[[2]int{it.A, it.B}] {
				t.Fatalf("%s: held-out operands %d, %d are an RL problem's", name, it.A, it.B)
			}
		}
		mixed := 0
		used := map[string]string{}
		for f, rs := range rules {
			if name == WorldTransfer && len(rs) != 1 {
				t.Fatalf("transfer family %s has rules %v", f, rs)
			}
			for r := range rs {
				if other, ok := used[r]; ok && name == WorldTransfer {
					t.Fatalf("transfer families %s and %s share rule %s", f, other, r)
				}
				used[r] = f
			}
			if len(rs) > 1 {
				mixed++
			}
		}
		if name == WorldControl && mixed == 0 {
			t.Fatal("control: every word kept one rule")
		}
		b, err := seed.NewBuilder(baseConfig(5, ""), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range w.sftChats(b, d, 5, demoPlan{sftDraws: 400, skillExamples: 100, rulesK: p.rulesK}) {
			for _, m := range ex.Messages {
				for _, f := range d.families {
					if strings.Contains(m.Content, " "+f+" ") {
						t.Fatalf("SFT shows family word %s: %q", f, m.Content)
					}
				}
			}
		}
	}
}

func TestStatesRule(t *testing.T) {
	for _, c := range []struct {
		text string
		want bool
	}{{"Plan: zork is aab.", true}, {"zork is aab", true}, {"zork is aabb.", false}, {"zork is not aab.", false}, {"zork is aabb. zork is aab.", true}, {"zurk is aab.", false}} {
		if got := statesRule(c.text, "zork", "aab"); got != c.want {
			t.Errorf("statesRule(%q) = %v", c.text, got)
		}
	}
}

// runFastDemo runs a --fast demo with seed 1 into a temporary directory and
// reads its results.
func runFastDemo(t *testing.T, o Options) (string, Results) {
	t.Helper()
	o.RunDir, o.Seed, o.Fast, o.Log = filepath.Join(t.TempDir(), "demo"), 1, true, io.Discard
	if err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(o.RunDir, "demo_results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res Results
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return o.RunDir, res
}

// TestDemoConfigsResolved: the demo's RL arms, in every world, are
// resolved as every entry point's config is (the SFT stage's config is
// resolved by RunSFT, which validates any config it is given).
func TestDemoConfigsResolved(t *testing.T) {
	for _, world := range []string{WorldTransfer, WorldControl, WorldArithmetic} {
		w, err := worldOf(world)
		if err != nil {
			t.Fatal(err)
		}
		arms := append(append([]string{}, Arms...), ArmGRPOBudget, ArmGRPOLoRA, ArmSDPO, ArmCritique, ArmGSPO, ArmCISPO)
		if world == WorldTransfer {
			arms = append(arms, ArmOracle)
		} else if _, err := prepare(t.TempDir(), world, w, 1, 1, plan(world, true), []string{ArmOracle}, 0.75, "", nil); err == nil {
			t.Fatalf("%s: the oracle arm was accepted outside the transfer world", world)
		}
		d, err := prepare(t.TempDir(), world, w, 1, 1, plan(world, true), arms, 0.75, "", []string{"lanpo.lesson_order=outcome", "lora.alpha=8", "sdpo.lambda=0.5"})
		if err != nil {
			t.Fatalf("%s: %v", world, err)
		}
		if l, g := d.arms[ArmGRPOLoRA], d.arms[ArmGRPO]; l.LoRA.R != LoRARank || l.LoRA.Alpha != 8 || l.Optim.LR != LoRALRScale*g.Optim.LR ||
			l.TotalSteps != g.TotalSteps || g.LoRA.On() {
			t.Fatalf("%s: grpo-lora r %d alpha %g lr %g steps %d; grpo lr %g steps %d, LoRA %v", world, l.LoRA.R, l.LoRA.Alpha, l.Optim.LR, l.TotalSteps,
				g.Optim.LR, g.TotalSteps, g.LoRA.On())
		}
		// The feedback methods: GRPO's run with their algorithm, --set applied.
		for _, arm := range []string{ArmSDPO, ArmCritique} {
			c, g := d.arms[arm], d.arms[ArmGRPO]
			if c.Algo.Name != arm || c.TotalSteps != g.TotalSteps || c.Optim.LR != g.Optim.LR || c.Rollout != g.Rollout || c.Data.Train != g.Data.Train {
				t.Fatalf("%s: arm %s is not GRPO's run with algo.name %s: %+v", world, arm, arm, c.Algo)
			}
		}
		// The policy losses: GRPO's run with another loss at its own clip
		// range.
		for arm, loss := range map[string]string{ArmGSPO: trainer.LossGSPO, ArmCISPO: trainer.LossCISPO} {
			c, g := d.arms[arm], d.arms[ArmGRPO]
			lo, hi, _ := trainer.ClipDefaults(loss)
			if c.Algo.Name != trainer.AlgoGRPO || c.Algo.PolicyLoss != loss || *c.Algo.ClipLow != lo || *c.Algo.ClipHigh != hi ||
				c.TotalSteps != g.TotalSteps || c.Optim.LR != g.Optim.LR || g.Algo.PolicyLoss != trainer.LossPPO {
				t.Fatalf("%s: arm %s is not GRPO's run with policy_loss %s at its clip range: %+v", world, arm, loss, c.Algo)
			}
		}
		if d.arms[ArmSDPO].SDPO.Lambda != 0.5 || d.arms[ArmGRPO].SDPO.Lambda == 0.5 {
			t.Fatalf("%s: --set sdpo.lambda reached sdpo %g, grpo %g", world, d.arms[ArmSDPO].SDPO.Lambda, d.arms[ArmGRPO].SDPO.Lambda)
		}
		if d.arms[ArmLANPO].LANPO.LessonOrder != "outcome" || d.arms[ArmGRPOBudget].TotalSteps != 2*d.arms[ArmGRPO].TotalSteps {
			t.Fatalf("%s: --set or the budget arm not applied: lesson_order %q, steps %d vs %d", world, d.arms[ArmLANPO].LANPO.LessonOrder,
				d.arms[ArmGRPOBudget].TotalSteps, d.arms[ArmGRPO].TotalSteps)
		}
		for _, arm := range arms {
			trainertest.AssertResolved(t, "demo "+world+" "+arm, d.arms[arm])
		}
		if world != WorldTransfer {
			continue
		}
		// An arm given the lessons context (in any spelling of the
		// override) makes the SFT teach it: one more example per skill.
		withLessons, err := prepare(t.TempDir(), world, w, 1, 1, plan(world, true), arms, 0.75, "", []string{"lanpo.context= lessons"})
		if err != nil {
			t.Fatal(err)
		}
		if want := d.sftExamples + plan(world, true).skillExamples; withLessons.sftExamples != want {
			t.Fatalf("SFT examples with lanpo.context lessons: %d, want %d", withLessons.sftExamples, want)
		}
	}
}
