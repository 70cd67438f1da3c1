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
)

// Paired comparison of demo arms over seeds (lanpo demo paired): runs are
// paired by (world, world seed, RL seed), so every difference is between
// two arms that started from the same SFT model and drew the same RL
// problems. Per outcome it reports each pair's difference, their mean with
// a 95% t-interval, an exact two-sided sign-flip test, and — for held-out
// accuracy — a crossed bootstrap that resamples pairs and families
// independently (the families are a sample of possible rules too).

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
	World  string
	Seed   int64
	RLSeed int
}

func (k pairKey) String() string {
	return fmt.Sprintf("%s seed %d, RL seed %d", k.World, k.Seed, k.RLSeed)
}

// armRun is one arm's outcomes in one run.
type armRun struct {
	file     string
	zeroShot float64
	families []float64    // final zero-shot accuracy per held-out group
	curve    [][2]float64 // mean held-out accuracy per training evaluation (rule worlds)
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
		k := pairKey{res.World, res.Seed, max(res.RLSeed, 1)}
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
		for _, l := range zs.Levels {
			r.families = append(r.families, l.Accuracy)
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

// PairedStat is one outcome's paired comparison.
type PairedStat struct {
	Outcome    string
	Diffs      []float64 // treatment − baseline, per pair (in key order)
	Mean       float64
	Lo, Hi     float64 // 95% t-interval of the mean (NaN with one pair)
	SignFlipP  float64 // exact two-sided sign-flip (randomization) p
	BootLo     float64 // crossed bootstrap 95% interval (zero-shot only; NaN otherwise)
	BootHi     float64
	Treatment  []float64
	Baseline   []float64
	Positive   int // pairs with a difference > 0
	Negative   int
	BootRounds int
}

// PairedResult compares one arm with the baseline over their common pairs.
type PairedResult struct {
	Baseline, Treatment string
	Pairs               []pairKey
	Stats               []PairedStat
}

// Paired compares each arm with the baseline.
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
		for k := range tr {
			if _, ok := base[k]; ok {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("%s and %s share no (world, seed, RL seed): nothing to pair", baseline.Label, ref.Label)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := keys[i], keys[j]
			if a.World != b.World {
				return a.World < b.World
			}
			if a.Seed != b.Seed {
				return a.Seed < b.Seed
			}
			return a.RLSeed < b.RLSeed
		})
		pr := PairedResult{Baseline: baseline.Label, Treatment: ref.Label, Pairs: keys}
		var zb, zt, lb, lt, ab, at []float64
		var fb, ft [][]float64
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
		}
		z := pairedStat("held-out zero-shot", zt, zb)
		z.BootLo, z.BootHi = crossedBootstrap(ft, fb, bootRounds, seed)
		z.BootRounds = bootRounds
		pr.Stats = append(pr.Stats, z, pairedStat("families learned (≥ 0.75 held out)", lt, lb))
		if !hasNegative(ab) && !hasNegative(at) {
			pr.Stats = append(pr.Stats, pairedStat("area under the held-out curve (mean accuracy over the baseline's steps)", at, ab))
		}
		out = append(out, pr)
	}
	return out, nil
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

func pairedStat(outcome string, treatment, baseline []float64) PairedStat {
	s := PairedStat{Outcome: outcome, Treatment: treatment, Baseline: baseline, BootLo: math.NaN(), BootHi: math.NaN()}
	for i := range treatment {
		d := treatment[i] - baseline[i]
		s.Diffs = append(s.Diffs, d)
		switch {
		case d > 0:
			s.Positive++
		case d < 0:
			s.Negative++
		}
	}
	s.Mean, s.Lo, s.Hi = tInterval(s.Diffs)
	s.SignFlipP = signFlipP(s.Diffs)
	return s
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
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	se := math.Sqrt(ss/(n-1)) / math.Sqrt(n)
	h := tQuantile975(len(xs)-1) * se
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
// under the null that each pair's sign is a coin flip: the share of the
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

// crossedBootstrap is the 95% percentile interval of the mean per-family
// difference (treatment − baseline) when pairs and families are resampled
// independently, each with replacement.
func crossedBootstrap(t, b [][]float64, rounds int, seed int64) (lo, hi float64) {
	if rounds <= 0 || len(t) == 0 || len(t[0]) == 0 {
		return math.NaN(), math.NaN()
	}
	nf := len(t[0])
	for i := range t {
		if len(t[i]) != nf || len(b[i]) != nf {
			return math.NaN(), math.NaN()
		}
	}
	rng := rand.New(rand.NewSource(seed))
	means := make([]float64, rounds)
	for r := range means {
		var s float64
		for range t {
			i := rng.Intn(len(t))
			for range nf {
				f := rng.Intn(nf)
				s += t[i][f] - b[i][f]
			}
		}
		means[r] = s / float64(len(t)*nf)
	}
	sort.Float64s(means)
	return means[int(0.025*float64(rounds))], means[min(rounds-1, int(0.975*float64(rounds)))]
}

// WritePaired writes the comparisons as Markdown tables.
func WritePaired(w io.Writer, results []PairedResult) {
	for _, pr := range results {
		fmt.Fprintf(w, "### %s − %s (%d pairs)\n\n", pr.Treatment, pr.Baseline, len(pr.Pairs))
		fmt.Fprintf(w, "| outcome | %s | %s | mean difference | 95%% t-interval | sign-flip p | pairs +/− | crossed bootstrap 95%% |\n|---|---|---|---|---|---|---|---|\n", pr.Treatment, pr.Baseline)
		for _, s := range pr.Stats {
			boot := "—"
			if !math.IsNaN(s.BootLo) {
				boot = fmt.Sprintf("[%+.3f, %+.3f] (%d rounds)", s.BootLo, s.BootHi, s.BootRounds)
			}
			fmt.Fprintf(w, "| %s | %.3f | %.3f | %+.3f | %s | %.3g | %d / %d | %s |\n", s.Outcome, mean(s.Treatment), mean(s.Baseline), s.Mean,
				interval(s.Lo, s.Hi), s.SignFlipP, s.Positive, s.Negative, boot)
		}
		fmt.Fprintf(w, "\nPer pair (%s):\n\n| pair |", pr.Stats[0].Outcome)
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

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

func interval(lo, hi float64) string {
	if math.IsNaN(lo) {
		return "— (one pair)"
	}
	return fmt.Sprintf("[%+.3f, %+.3f]", lo, hi)
}
