package pool

import (
	"strings"
	"unicode"
)

// CharOverlap is the Jaccard similarity of two texts' character 5-grams,
// with case, whitespace, $ and LaTeX spacing ignored: how much of one text
// is copied into the other, word order and all. It was the pool's
// near-duplicate measure until Similarity (dedup.go) replaced it — it
// misses reworded twins and flags templates with other numbers — and it
// stays the right measure of copying (lanpo seed rejects a summary that
// copies its attempt) and the baseline TestTwins reports.
func CharOverlap(a, b string) float64 {
	sa, sb := charShingles(a), charShingles(b)
	if len(sa) == 0 || len(sb) == 0 {
		return 0
	}
	both := 0
	for k := range sa {
		if sb[k] {
			both++
		}
	}
	return float64(both) / float64(len(sa)+len(sb)-both)
}

var charSpacing = strings.NewReplacer(`\left`, "", `\right`, "", `\!`, "", `\,`, "", `\;`, "", `\quad`, "", `\displaystyle`, "",
	`\dfrac`, `\frac`, `\tfrac`, `\frac`, "$", "")

func charShingles(s string) map[string]bool {
	var rs []rune
	for _, r := range charSpacing.Replace(strings.ToLower(s)) {
		if !unicode.IsSpace(r) {
			rs = append(rs, r)
		}
	}
	out := map[string]bool{}
	if len(rs) > 0 && len(rs) < 5 {
		out[string(rs)] = true
	}
	for i := 0; i+5 <= len(rs); i++ {
		out[string(rs[i:i+5])] = true
	}
	return out
}
