package trainer

import (
	"bytes"
	"math"
	"path/filepath"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/rl"
)

// consolidated is one consolidationUpdate's outcome.
type consolidated struct {
	met StepMetrics
	w   []float64 // the weights after the update
	// nll and after are the distill rows' token-mean NLL before and after
	// the update as lanpo score computes it (an independent path: a
	// left-padded forward, float32 log-probs); span and rest the same
	// before, inside and outside the rows' span masks.
	nll, after, span, rest float64
}

// consolidationUpdate runs one update of the tiny model (float64) over the
// policy rollouts rolls and the consolidation rows distill with the config
// overrides sets.
func consolidationUpdate(t *testing.T, rolls, distill []rollout, sets ...string) consolidated {
	t.Helper()
	cfg := tinyConfig(t, append([]string{"dtype=float64", "rollout.temperature=1"}, sets...)...)
	s, err := openSession(cfg, "", "grpo", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &grpoRun{session: s}
	g.term = newConsolidation(g.view())
	ptrs := func(rs []rollout) []*rollout {
		out := make([]*rollout, len(rs))
		for i := range rs {
			r := rs[i]
			out[i] = &r
		}
		return out
	}
	c := termRows{extra: consExtra, joinPolicy: cfg.LANPO.ConsolidatePerToken()}
	for _, r := range distill {
		c.rows++
		c.tokens += len(r.ids)
	}
	// score is the rows' NLL sums over all tokens, the span's and the rest.
	score := func() (all, span, rest, nSpan float64) {
		var seqs [][]int64
		for _, r := range distill {
			seqs = append(seqs, append(append([]int64(nil), r.promptIDs...), r.ids...))
		}
		if len(seqs) == 0 {
			return
		}
		lp, err := s.m.Score(seqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range distill {
			for k, v := range lp[i][len(r.promptIDs)-1:] {
				all -= float64(v)
				if r.span != nil && r.span[k] {
					span -= float64(v)
					nSpan++
				} else {
					rest -= float64(v)
				}
			}
		}
		return
	}
	var out consolidated
	all, span, rest, nSpan := score()
	n := float64(max(c.tokens, 1))
	out.nll, out.span, out.rest = all/n, span/max(nSpan, 1), rest/max(n-nSpan, 1)
	if err := g.update(ptrs(rolls), ptrs(distill), c, &out.met); err != nil {
		t.Fatal(err)
	}
	all, _, _, _ = score()
	out.after = all / n
	for _, p := range s.m.Params() {
		out.w = append(out.w, tensor.Float64s(p.Tensor)...)
	}
	return out
}

// TestConsolidationLoss: the consolidation term is λ times the token-mean
// NLL of the distilled responses under their (bare) prompts, it adds to the
// policy loss in the same optimizer step, and neither the micro-batch split
// nor its order changes the update.
func TestConsolidationLoss(t *testing.T) {
	rolls, distill := madeUpRollouts(6, 3), madeUpRollouts(5, 4)
	const lambda = 0.5
	lam := "lanpo.consolidate=0.5"

	alone := consolidationUpdate(t, nil, distill, lam, "algo.micro_batch_size=2")
	met, nll := alone.met, alone.nll
	if consMet(met).Consolidated != 5 || consMet(met).ConsolidatedTokenFrac != 1 || met.GradNorm == 0 {
		t.Fatalf("consolidation alone: %+v", met)
	}
	if math.Abs(consMet(met).ConsolidateNLL-nll) > 1e-6*nll || math.Abs(met.Loss-lambda*nll) > 1e-6*nll {
		t.Errorf("NLL %v and loss %v, want %v (lanpo score's) and λ· that", consMet(met).ConsolidateNLL, met.Loss, nll)
	}

	policy := consolidationUpdate(t, rolls, nil, lam)
	both := consolidationUpdate(t, rolls, distill, lam, "algo.micro_batch_size=1")
	wPolicy, wBoth := policy.w, both.w
	if math.Abs(both.met.Loss-(policy.met.Loss+lambda*nll)) > 1e-6 {
		t.Errorf("loss with both %v, want policy %v + λ·NLL %v", both.met.Loss, policy.met.Loss, lambda*nll)
	}
	tokens := 0
	for _, r := range rolls {
		tokens += len(r.ids)
	}
	dtok := 0
	for _, r := range distill {
		dtok += len(r.ids)
	}
	if want := float64(dtok) / float64(dtok+tokens); math.Abs(consMet(both.met).ConsolidatedTokenFrac-want) > 1e-12 {
		t.Errorf("consolidated_token_frac %v, want %v", consMet(both.met).ConsolidatedTokenFrac, want)
	}
	if d := maxAbsDiff(wBoth, wPolicy); d < 1e-8 {
		t.Fatalf("the consolidation rows moved nothing (%g)", d)
	}
	packed := consolidationUpdate(t, rolls, distill, lam, "algo.max_tokens_per_micro_batch=24")
	if d := maxAbsDiff(wBoth, packed.w); d > 1e-12 {
		t.Errorf("micro-batches of 1 vs packed by tokens: weights differ by %g", d)
	}
}

// TestConsolidationInALANPORun: with lanpo.consolidate set, each step
// distills exactly the verified-correct rollouts sampled with feedback in
// context (counted from the rollout log), the loss carries the term, and
// the run trains differently from λ = 0.
func TestConsolidationInALANPORun(t *testing.T) {
	path, _ := seededPool(t)
	sets := []string{"lanpo.initial_pool=" + path, "lanpo.feedback_ratio=0.5", "lanpo.similarity_threshold=0",
		"rollout.samples_per_prompt=8", "total_steps=4"}
	on := lanpoConfig(t, append(sets, "lanpo.consolidate=1")...)
	runGRPO(t, on, "")
	rows := stableMetrics(t, on.RunDir)
	any, scratch := 0, 0
	for i, row := range rows {
		want := 0
		log := readRollouts(t, on.RunDir, i+1)
		checkGroupShares(t, i+1, row, log)
		for _, r := range log {
			switch {
			case r.Correct && r.Mode != rl.ModeScratch:
				want++
			case r.Correct:
				scratch++
			}
		}
		got, _ := row["consolidated"].(float64)
		if int(got) != want {
			t.Errorf("step %d: consolidated %v, the rollout log has %d correct feedback-aware responses", i+1, row["consolidated"], want)
		}
		if want > 0 {
			any++
			if nll, _ := row["consolidate_nll"].(float64); !(nll > 0) {
				t.Errorf("step %d: consolidate_nll %v", i+1, row["consolidate_nll"])
			}
		}
	}
	if any == 0 || scratch == 0 {
		t.Fatalf("%d steps with a correct feedback-aware response, %d correct from-scratch ones: the test needs both", any, scratch)
	}
	off := lanpoConfig(t, sets...)
	runGRPO(t, off, "")
	if bytes.Equal(weights(t, filepath.Join(on.RunDir, checkpointsDir, checkpointName(4))),
		weights(t, filepath.Join(off.RunDir, checkpointsDir, checkpointName(4)))) {
		t.Error("consolidation trained the same weights as λ = 0")
	}
}

// checkGroupShares compares a step's per-kind group shares (no variance,
// all right) with the groups of its rollout log.
func checkGroupShares(t *testing.T, step int, row map[string]any, log []rolloutLine) {
	t.Helper()
	type tally struct{ groups, zero, all float64 }
	kinds := map[string]*tally{"feedback": {}, "scratch": {}}
	byGroup := map[int][]rolloutLine{}
	for _, r := range log {
		byGroup[r.Group] = append(byGroup[r.Group], r)
	}
	for _, grp := range byGroup {
		k := kinds["feedback"]
		if grp[0].Mode == rl.ModeScratch {
			k = kinds["scratch"]
		}
		k.groups++
		same, all := true, true
		for _, r := range grp {
			same, all = same && r.Reward == grp[0].Reward, all && r.Correct
		}
		if same {
			k.zero++
		}
		if all {
			k.all++
		}
	}
	for name, k := range kinds {
		var zero, all float64
		if k.groups > 0 {
			zero, all = k.zero/k.groups, k.all/k.groups
		}
		if got, _ := row["zero_variance_frac_"+name].(float64); math.Abs(got-zero) > 1e-12 {
			t.Errorf("step %d: zero_variance_frac_%s %v, the rollout log's groups give %v", step, name, got, zero)
		}
		if got, _ := row["all_correct_frac_"+name].(float64); math.Abs(got-all) > 1e-12 {
			t.Errorf("step %d: all_correct_frac_%s %v, the rollout log's groups give %v", step, name, got, all)
		}
	}
}

// termMet is a step's update-term metrics as the term's own type (its
// zero value when the step has none of that type).
func termMet[T any](m StepMetrics) T {
	v, _ := m.Term.(T)
	return v
}

// consMet is a step's consolidation metrics (zero: none).
func consMet(m StepMetrics) *consolidationMetrics {
	if c := termMet[*consolidationMetrics](m); c != nil {
		return c
	}
	return &consolidationMetrics{}
}
