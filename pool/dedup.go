package pool

import (
	"hash/fnv"
	"strings"
	"unicode"
)

// Near-duplicates: the same problem under another id (MATH's train and test
// splits are not de-duplicated, and benchmarks reuse contest problems). Two
// texts are compared as sets of character 5-grams of a normalized form
// (lower case; whitespace, $ and LaTeX spacing and sizing commands removed),
// by Jaccard similarity: reformatting leaves it near 1, a changed number
// or word drops it by a few percent per change, unrelated problems sit
// near 0 (measured in dedup_test.go on real MATH problems).

const shingleLen = 5

// Similarity is the near-duplicate measure of two problem texts, in [0, 1].
func Similarity(a, b string) float64 { return jaccard(shingles(a), shingles(b)) }

var spacing = strings.NewReplacer(`\left`, "", `\right`, "", `\!`, "", `\,`, "", `\;`, "", `\quad`, "", `\displaystyle`, "",
	`\dfrac`, `\frac`, `\tfrac`, `\frac`, "$", "")

func normalizeText(s string) string {
	s = spacing.Replace(strings.ToLower(s))
	var b strings.Builder
	for _, r := range s {
		if !unicode.IsSpace(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func shingles(s string) map[uint64]struct{} {
	rs := []rune(normalizeText(s))
	out := map[uint64]struct{}{}
	if len(rs) < shingleLen {
		if len(rs) > 0 {
			out[hash(string(rs))] = struct{}{}
		}
		return out
	}
	for i := 0; i+shingleLen <= len(rs); i++ {
		out[hash(string(rs[i:i+shingleLen]))] = struct{}{}
	}
	return out
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

func jaccard(a, b map[uint64]struct{}) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	if len(a) > len(b) {
		a, b = b, a
	}
	both := 0
	for k := range a {
		if _, ok := b[k]; ok {
			both++
		}
	}
	return float64(both) / float64(len(a)+len(b)-both)
}
