package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/stats"
)

// Paired comparison of demo arms over seeds (lanpo demo paired): runs are
// paired by what makes two arms comparable — the world, its seed, the SFT
// checkpoint the arms started from (its digest), the model size, --fast and
// the RL seed — so every difference is between two arms that started from
// the same SFT model and drew the same RL problems. A results file without
// that key, or a partner that differs in it, is an error naming the file.
//
// The design is clustered: a world seed makes one SFT model (and its own
// family words and rules), and RL seeds share it. So the primary interval
// and the sign-flip test are over SFT-level means — each SFT model's mean
// difference over its RL seeds — not over pairs, which are not
// independent. A hierarchical bootstrap (SFT models, then RL seeds and
// families within each) gives a second interval for the outcomes measured
// per family. With k SFT models the smallest two-sided sign-flip p is
// 2/2^k.

// ArmRef names an arm in the demo runs under a directory: ARM@DIR (DIR and
// every directory below it holding a demo_results.json).
type ArmRef struct {
	Arm, Root string
	Label     string // how the tables name it (default ARM@DIR)
}

// ParseArmRef reads ARM@DIR, optionally LABEL=ARM@DIR.
func ParseArmRef(s string) (ArmRef, error) {
	label, rest, hasLabel := strings.Cut(s, "=")
	if !hasLabel {
		label, rest = "", s
	}
	arm, root, ok := strings.Cut(rest, "@")
	if !ok || arm == "" || root == "" {
		return ArmRef{}, fmt.Errorf("%q: want ARM@RUN_DIR (or LABEL=ARM@RUN_DIR)", s)
	}
	if label == "" {
		label = rest
	}
	return ArmRef{Arm: arm, Root: root, Label: label}, nil
}

// pairKey identifies an SFT model and RL seed.
type pairKey struct {
	World     string
	Seed      int64
	SFT       string // the SFT checkpoint's digest (Pairing.SFTDigest)
	ModelSize string
	Fast      bool
	RLSeed    int
}

func (k pairKey) String() string {
	s := fmt.Sprintf("%s seed %d, RL seed %d", k.World, k.Seed, k.RLSeed)
	if k.ModelSize != "" && k.ModelSize != "small" {
		s += ", " + k.ModelSize
	}
	if k.Fast {
		s += ", fast"
	}
	return s
}

// sftModel is the key less the RL seed: one SFT model, a cluster.
func (k pairKey) sftModel() pairKey { k.RLSeed = 0; return k }

// armRun is one arm's outcomes in one run.
type armRun struct {
	file     string
	zeroShot float64
	families []float64    // final zero-shot accuracy per held-out group
	refLogp  []float64    // per held-out group: the canonical answers' mean bare-prompt log-likelihood (nil: not measured)
	spanLogp []float64    // the same over the rule they name
	curve    [][2]float64 // mean held-out accuracy per training evaluation (rule worlds)
	// retrieval is the arm's held-out accuracy with retrieval from its own
	// pool (-1: not evaluated so); controls the run's retrieval controls,
	// keyed MODEL|POOL (RetrievalControl).
	retrieval float64
	controls  map[string]float64
}

// collectArm reads every demo_results.json under ref.Root that has the
// arm, keyed by pair; two runs with the same key are an error naming both.
func collectArm(ref ArmRef) (map[pairKey]armRun, error) {
	out := map[pairKey]armRun{}
	err := filepath.WalkDir(ref.Root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "demo_results.json" {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var res Results
		if err := json.Unmarshal(raw, &res); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		r, ok := armOutcomes(res, ref.Arm)
		if !ok {
			return nil
		}
		r.file = path
		if res.Pairing == nil || res.Pairing.SFTDigest == "" {
			return fmt.Errorf("%s: no \"pairing\" (the SFT checkpoint's digest, model size and --fast): written by a lanpo demo before they were recorded; runs cannot be paired without them — run it again", path)
		}
		k := pairKey{World: res.World, Seed: res.Seed, SFT: res.Pairing.SFTDigest, ModelSize: res.Pairing.ModelSize, Fast: res.Pairing.Fast, RLSeed: max(res.RLSeed, 1)}
		if prev, dup := out[k]; dup {
			return fmt.Errorf("%s and %s both hold %s for %s: give each its own ARM@DIR", prev.file, path, ref.Arm, k)
		}
		out[k] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s@%s: %w", ref.Arm, ref.Root, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no demo run under %s has arm %s (demo_results.json)", ref.Label, ref.Root, ref.Arm)
	}
	return out, nil
}

func armOutcomes(res Results, arm string) (armRun, bool) {
	for _, st := range res.Stages {
		zs := st.mode(eval.ModeZeroShot)
		if st.Stage != arm || zs == nil {
			continue
		}
		r := armRun{zeroShot: zs.Overall}
		measured := false
		for _, l := range zs.Levels {
			r.families = append(r.families, l.Accuracy)
			r.refLogp, r.spanLogp = append(r.refLogp, l.RefLogp), append(r.spanLogp, l.RefSpanLogp)
			measured = measured || l.RefLogp != 0
		}
		if !measured {
			r.refLogp, r.spanLogp = nil, nil
		}
		r.retrieval = -1
		if rt := st.mode(eval.ModeRetrieval); rt != nil {
			r.retrieval = rt.Overall
		}
		r.controls = map[string]float64{}
		for _, c := range res.Controls {
			r.controls[c.Model+"|"+c.Pool] = c.Retrieval.Overall
		}
		if res.Rules != nil {
			if a, ok := res.Rules.Arms[arm]; ok {
				r.curve = meanCurve(a.Learned)
			}
		}
		return r, true
	}
	return armRun{}, false
}

// meanCurve averages the families' (step, accuracy) curves point by point
// (the families have equally many held-out problems).
func meanCurve(fam [][][2]float64) [][2]float64 {
	if len(fam) == 0 {
		return nil
	}
	n := len(fam[0])
	for _, c := range fam {
		n = min(n, len(c))
	}
	out := make([][2]float64, n)
	for i := 0; i < n; i++ {
		out[i][0] = fam[0][i][0]
		for _, c := range fam {
			out[i][1] += c[i][1] / float64(len(fam))
		}
	}
	return out
}

// areaUpTo is the mean of a curve over steps [0, T] (trapezoids; a curve
// ending before T is not extended: -1).
func areaUpTo(c [][2]float64, T float64) float64 {
	if len(c) < 2 || c[len(c)-1][0] < T || T <= 0 {
		return -1
	}
	var a float64
	for i := 1; i < len(c) && c[i-1][0] < T; i++ {
		x0, y0, x1, y1 := c[i-1][0], c[i-1][1], c[i][0], c[i][1]
		if x1 > T { // cut the segment at T
			y1 = y0 + (y1-y0)*(T-x0)/(x1-x0)
			x1 = T
		}
		a += (x1 - x0) * (y0 + y1) / 2
	}
	return a / T
}

// PairedStat is one outcome's paired comparison, clustered by SFT model.
type PairedStat struct {
	Outcome   string
	Treatment []float64 // per pair (in key order)
	Baseline  []float64
	Diffs     []float64 // treatment − baseline, per pair
	// Clusters are the SFT models' mean differences (over their RL seeds),
	// in key order: the units of the interval and the test.
	Clusters  []float64
	Mean      float64 // mean of Clusters: each SFT model weighs the same
	Lo, Hi    float64 // 95% t-interval of Mean over Clusters (NaN with one)
	SignFlipP float64 // exact two-sided sign-flip p over Clusters
	Positive  int     // SFT models whose mean difference is > 0
	Negative  int
	// DZ is Mean over the Clusters' standard deviation (Cohen's d_z): how
	// large the difference is against its spread between SFT models.
	DZ float64
	// BootLo, BootHi: the hierarchical bootstrap's 95% percentile interval
	// (SFT models, then RL seeds and families within each), for outcomes
	// measured per family; NaN otherwise.
	BootLo, BootHi float64
	BootRounds     int
}

// PairedResult compares one arm with the baseline over their common pairs.
type PairedResult struct {
	Baseline, Treatment string
	Pairs               []pairKey
	Stats               []PairedStat
}

// Paired compares each arm with the baseline. Pairs are matched on the
// whole key; a treatment run whose SFT model the baseline also ran under
// another key (another checkpoint, size or --fast for the same world and
// seeds) is an error naming both files.
func Paired(baseline ArmRef, arms []ArmRef, bootRounds int, seed int64) ([]PairedResult, error) {
	base, err := collectArm(baseline)
	if err != nil {
		return nil, err
	}
	var out []PairedResult
	for _, ref := range arms {
		tr, err := collectArm(ref)
		if err != nil {
			return nil, err
		}
		var keys []pairKey
		for k, t := range tr {
			if _, ok := base[k]; ok {
				keys = append(keys, k)
				continue
			}
			for bk, b := range base {
				if bk.World == k.World && bk.Seed == k.Seed && bk.RLSeed == k.RLSeed {
					return nil, fmt.Errorf("%s and %s: the same world, seed and RL seed from different SFT models or settings (%s: SFT %s, %s, fast %v; %s: SFT %s, %s, fast %v): not a pair",
						t.file, b.file, t.file, k.SFT, k.ModelSize, k.Fast, b.file, bk.SFT, bk.ModelSize, bk.Fast)
				}
			}
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("%s and %s share no (world, seed, SFT model, RL seed): nothing to pair", baseline.Label, ref.Label)
		}
		sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
		pr := PairedResult{Baseline: baseline.Label, Treatment: ref.Label, Pairs: keys}
		var zb, zt, lb, lt, ab, at, rb, rt, sb, st []float64
		var fb, ft, cb, ct, pb, pt [][]float64
		for _, k := range keys {
			b, t := base[k], tr[k]
			zb, zt = append(zb, b.zeroShot), append(zt, t.zeroShot)
			lb, lt = append(lb, learnedCount(b.families)), append(lt, learnedCount(t.families))
			T := 0.0
			if len(b.curve) > 0 {
				T = b.curve[len(b.curve)-1][0]
			}
			ab, at = append(ab, areaUpTo(b.curve, T)), append(at, areaUpTo(t.curve, T))
			fb, ft = append(fb, b.families), append(ft, t.families)
			cb, ct = append(cb, b.refLogp), append(ct, t.refLogp)
			pb, pt = append(pb, b.spanLogp), append(pt, t.spanLogp)
			rb, rt = append(rb, stats.Mean(b.refLogp)), append(rt, stats.Mean(t.refLogp))
			sb, st = append(sb, stats.Mean(b.spanLogp)), append(st, stats.Mean(t.spanLogp))
		}
		clusters := clusterOf(keys)
		rng := rand.New(rand.NewSource(seed))
		z := clusteredStat("held-out zero-shot", zt, zb, clusters)
		z.BootLo, z.BootHi = bootInterval(ft, fb, clusters, bootRounds, rng)
		z.BootRounds = bootRounds
		pr.Stats = append(pr.Stats, z, clusteredStat("families learned (≥ 0.75 held out)", lt, lb, clusters))
		if !hasNegative(ab) && !hasNegative(at) {
			pr.Stats = append(pr.Stats, clusteredStat("area under the held-out curve (mean accuracy over the baseline's steps)", at, ab, clusters))
		}
		if allMeasured(cb) && allMeasured(ct) {
			c := clusteredStat("canonical answer's bare-prompt log-likelihood (nats, per answer)", rt, rb, clusters)
			c.BootLo, c.BootHi = bootInterval(ct, cb, clusters, bootRounds, rng)
			c.BootRounds = bootRounds
			r := clusteredStat("the same over the rule it names", st, sb, clusters)
			r.BootLo, r.BootHi = bootInterval(pt, pb, clusters, bootRounds, rng)
			r.BootRounds = bootRounds
			pr.Stats = append(pr.Stats, c, r)
		}
		pr.Stats = append(pr.Stats, controlStats(ref.Arm, baseline.Arm, keys, base, tr, clusters)...)
		out = append(out, pr)
	}
	return out, nil
}

// controlStats are the retrieval controls' comparisons (docs/demo.md),
// where every pair has them: the arm with its pool against the SFT model
// and against the baseline's model with the same pool (the training's
// share of the gain), and against the baseline's model with a pool of its
// own rollouts (each method with its own pool).
func controlStats(arm, baseArm string, keys []pairKey, base, tr map[pairKey]armRun, clusters []int) []PairedStat {
	var out []PairedStat
	for _, c := range []struct {
		outcome string
		control func(b, t armRun) (float64, bool)
	}{
		{"with retrieval from the arm's pool: the arm's model − the SFT model", func(_, t armRun) (float64, bool) {
			v, ok := t.controls["sft|"+arm]
			return v, ok
		}},
		{"with retrieval from the arm's pool: the arm's model − " + baseArm + "'s", func(_, t armRun) (float64, bool) {
			v, ok := t.controls[baseArm+"|"+arm]
			return v, ok
		}},
		{"with retrieval, each from its own pool: the arm − " + baseArm + " (its pool built from its rollouts)", func(b, _ armRun) (float64, bool) {
			v, ok := b.controls[baseArm+"|"+baseArm+"-own"]
			return v, ok
		}},
	} {
		var t, b []float64
		for _, k := range keys {
			v, ok := c.control(base[k], tr[k])
			if !ok || tr[k].retrieval < 0 {
				break
			}
			t, b = append(t, tr[k].retrieval), append(b, v)
		}
		if len(t) == len(keys) {
			out = append(out, clusteredStat(c.outcome, t, b, clusters))
		}
	}
	return out
}

func keyLess(a, b pairKey) bool {
	if a.World != b.World {
		return a.World < b.World
	}
	if a.Seed != b.Seed {
		return a.Seed < b.Seed
	}
	if a.SFT != b.SFT {
		return a.SFT < b.SFT
	}
	if a.ModelSize != b.ModelSize {
		return a.ModelSize < b.ModelSize
	}
	if a.Fast != b.Fast {
		return !a.Fast
	}
	return a.RLSeed < b.RLSeed
}

// clusterOf numbers each pair's SFT model (0, 1, … in key order; keys
// sorted, so a cluster's pairs are adjacent).
func clusterOf(keys []pairKey) []int {
	out := make([]int, len(keys))
	c := -1
	for i, k := range keys {
		if i == 0 || k.sftModel() != keys[i-1].sftModel() {
			c++
		}
		out[i] = c
	}
	return out
}

func allMeasured(xs [][]float64) bool {
	for _, x := range xs {
		if len(x) == 0 {
			return false
		}
	}
	return len(xs) > 0
}

func hasNegative(xs []float64) bool {
	for _, x := range xs {
		if x < 0 {
			return true
		}
	}
	return false
}

// learnedThreshold: a family is learned when this share of its held-out
// problems is answered right zero-shot.
const learnedThreshold = 0.75

func learnedCount(fam []float64) float64 {
	n := 0
	for _, a := range fam {
		if a >= learnedThreshold {
			n++
		}
	}
	return float64(n)
}

// clusteredStat compares treatment with baseline per pair, then over the
// SFT models' mean differences (cluster[i]: pair i's SFT model).
func clusteredStat(outcome string, treatment, baseline []float64, cluster []int) PairedStat {
	s := PairedStat{Outcome: outcome, Treatment: treatment, Baseline: baseline, BootLo: math.NaN(), BootHi: math.NaN()}
	for i := range treatment {
		s.Diffs = append(s.Diffs, treatment[i]-baseline[i])
	}
	s.Clusters = clusterMeans(s.Diffs, cluster)
	for _, d := range s.Clusters {
		switch {
		case d > 0:
			s.Positive++
		case d < 0:
			s.Negative++
		}
	}
	s.Mean, s.Lo, s.Hi = tInterval(s.Clusters)
	s.SignFlipP = signFlipP(s.Clusters)
	s.DZ = math.NaN()
	if sd := stats.StdDev(s.Clusters); sd > 0 {
		s.DZ = s.Mean / sd
	}
	return s
}

// clusterMeans averages xs within each cluster (cluster numbers 0…k−1).
func clusterMeans(xs []float64, cluster []int) []float64 {
	k := 0
	for _, c := range cluster {
		k = max(k, c+1)
	}
	sum, n := make([]float64, k), make([]float64, k)
	for i, x := range xs {
		sum[cluster[i]] += x
		n[cluster[i]]++
	}
	for c := range sum {
		sum[c] /= n[c]
	}
	return sum
}

// tInterval is the mean of xs with its 95% Student-t interval.
func tInterval(xs []float64) (mean, lo, hi float64) {
	n := float64(len(xs))
	for _, x := range xs {
		mean += x / n
	}
	if len(xs) < 2 {
		return mean, math.NaN(), math.NaN()
	}
	h := tQuantile975(len(xs)-1) * stats.StdDev(xs) / math.Sqrt(n)
	return mean, mean - h, mean + h
}

// tQuantile975 is Student's t 0.975 quantile for df degrees of freedom
// (table to 30, then the normal's 1.96 with the first correction term).
func tQuantile975(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
		2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df >= 1 && df < len(table) {
		return table[df]
	}
	const z = 1.959964
	return z + (z*z*z+z)/(4*float64(df))
}

// signFlipP is the exact two-sided randomization p of the mean difference
// under the null that each unit's sign is a coin flip: the share of the
// 2^n sign assignments whose |mean| reaches the observed one (n ≤ 24;
// beyond, 2^20 random assignments).
func signFlipP(d []float64) float64 {
	n := len(d)
	if n == 0 {
		return math.NaN()
	}
	var obs float64
	for _, x := range d {
		obs += x
	}
	obs = math.Abs(obs) - 1e-12 // ties count as reaching it
	count, total := 0, 0
	try := func(mask uint64) {
		var s float64
		for i, x := range d {
			if mask>>uint(i)&1 == 1 {
				s -= x
			} else {
				s += x
			}
		}
		total++
		if math.Abs(s) >= obs {
			count++
		}
	}
	if n <= 24 {
		for mask := uint64(0); mask < 1<<uint(n); mask++ {
			try(mask)
		}
	} else {
		rng := rand.New(rand.NewSource(1))
		for i := 0; i < 1<<20; i++ {
			try(rng.Uint64())
		}
	}
	return float64(count) / float64(total)
}

// bootInterval is the hierarchical bootstrap's 95% percentile interval of
// the mean difference (treatment − baseline) of values measured per family
// (t[i][f]: pair i, family f), pairs clustered by SFT model: each round
// draws SFT models with replacement, then within each drawn model its RL
// seeds (pairs) and its families, each with replacement, and averages the
// drawn models' means. The families are a world seed's own (each draws its
// words and rules), so they are drawn within a model, never across. NaN
// when rounds ≤ 0 or the pairs' families differ in number.
func bootInterval(t, b [][]float64, cluster []int, rounds int, rng *rand.Rand) (lo, hi float64) {
	if rounds <= 0 || len(t) == 0 {
		return math.NaN(), math.NaN()
	}
	nf := len(t[0])
	for i := range t {
		if len(t[i]) != nf || len(b[i]) != nf || nf == 0 {
			return math.NaN(), math.NaN()
		}
	}
	var members [][]int // pairs per SFT model
	for i, c := range cluster {
		for len(members) <= c {
			members = append(members, nil)
		}
		members[c] = append(members[c], i)
	}
	means := make([]float64, rounds)
	for r := range means {
		var total float64
		for range members {
			m := members[rng.Intn(len(members))]
			var s float64
			for range m {
				i := m[rng.Intn(len(m))]
				for range nf {
					f := rng.Intn(nf)
					s += t[i][f] - b[i][f]
				}
			}
			total += s / float64(len(m)*nf)
		}
		means[r] = total / float64(len(members))
	}
	sort.Float64s(means)
	return means[int(0.025*float64(rounds))], means[min(rounds-1, int(0.975*float64(rounds)))]
}

// WritePaired writes the comparisons as Markdown tables.
func WritePaired(w io.Writer, results []PairedResult) {
	for _, pr := range results {
		models := len(pr.Stats[0].Clusters)
		fmt.Fprintf(w, "### %s − %s (%d pairs, %d SFT models)\n\n", pr.Treatment, pr.Baseline, len(pr.Pairs), models)
		fmt.Fprintf(w, "Intervals and tests over the %d SFT models' mean differences (df %d; the smallest sign-flip p %d SFT models allow is %.3g).\n\n",
			models, models-1, models, math.Ldexp(2, -models))
		fmt.Fprintf(w, "| outcome | %s | %s | mean difference | 95%% t-interval | sign-flip p | SFT models +/− | d_z | hierarchical bootstrap 95%% |\n|---|---|---|---|---|---|---|---|---|\n", pr.Treatment, pr.Baseline)
		for _, s := range pr.Stats {
			boot := "—"
			if !math.IsNaN(s.BootLo) {
				boot = fmt.Sprintf("[%+.3f, %+.3f] (%d rounds)", s.BootLo, s.BootHi, s.BootRounds)
			}
			dz := "—"
			if !math.IsNaN(s.DZ) {
				dz = fmt.Sprintf("%+.2f", s.DZ)
			}
			fmt.Fprintf(w, "| %s | %.3f | %.3f | %+.3f | %s | %.3g | %d / %d | %s | %s |\n", s.Outcome, stats.Mean(s.Treatment), stats.Mean(s.Baseline), s.Mean,
				interval(s.Lo, s.Hi), s.SignFlipP, s.Positive, s.Negative, dz, boot)
		}
		fmt.Fprintf(w, "\nPer pair:\n\n| pair |")
		for _, s := range pr.Stats {
			fmt.Fprintf(w, " %s |", strings.SplitN(s.Outcome, " (", 2)[0])
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|", len(pr.Stats)))
		for i, k := range pr.Pairs {
			fmt.Fprintf(w, "| %s |", k)
			for _, s := range pr.Stats {
				fmt.Fprintf(w, " %.3f − %.3f = %+.3f |", s.Treatment[i], s.Baseline[i], s.Diffs[i])
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
}

func interval(lo, hi float64) string {
	if math.IsNaN(lo) {
		return "— (one SFT model)"
	}
	return fmt.Sprintf("[%+.3f, %+.3f]", lo, hi)
}
