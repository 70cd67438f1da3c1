package pool

import (
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Near-duplicates: the same problem under another id (MATH's train and
// test splits share problems, benchmarks reuse contest problems), often
// reworded ("find x + y + z." / "what is the value of x + y + z?") or
// reformatted. A changed number, symbol or asked quantity makes another
// problem, a template of it: the best candidate for retrieval, which must
// not be dropped as a duplicate.
//
// A text is read (dedup_text.go) into formulas and prose, with diagrams
// reduced to their labels and plotted functions, sentences about the
// answer's format dropped and LaTeX spelling normalized; then into three
// groups of features, each counted ("x#2" is the second x):
//   - numbers: in formulas and prose, number words, words in capitals
//     (data: "the letters of ELLIPSE") and negations ("not");
//   - symbols: the other formula tokens, adjacent pairs inside a formula
//     ("2b - a" is not "a - 2b"), and each whole formula item ("x - y = 6"
//     is not "x - y = 12" next to "x + y = 6");
//   - words: prose content words, stemmed, with function words and the
//     phrasing of questions left out, and pairs of tokens (words, numbers,
//     formulas) at most two apart within a sentence, in either order: "3n is
//     a square and 2n a cube" is not the other way round, while "express x
//     in terms of k" is "in terms of k, what is x".
//
// Similarity is the product of the groups' Jaccard similarities, and of
// the asked quantity's (the first formula after the last question word:
// "Find $c$." is not "Find $a$."): a twin must agree on all, so one changed
// number costs more than a reworded clause. Each Jaccard counts one shared
// element more on both sides, so that a group empty in one text and
// holding one element in the other does not zero the product.
//
// Measured (TestTwins; docs/lanpo.md, "Near-duplicates") at the default
// threshold 0.9 on hand-labelled pairs (testdata/README.md): of MATH-500
// problems and their BM25 neighbours in MATH train, 5 of 5 twins found,
// 0 of 365 templates and 0 of 277 different problems flagged; of
// same-answer MATH-train neighbours, 25 of 52 twins found (the reformatted
// and lightly reworded ones; it misses renamed variables, added
// definitions, formulas rewritten in words), 0 of 483 others flagged. The
// character 5-gram Jaccard at 0.8 it replaced found 1 of 5 and 13 of 52
// and flagged 35 templates and 11 others.

// Similarity is the near-duplicate measure of two problem texts, in [0, 1]:
// 1 for the same problem reformatted, above 0.9 for light rewordings, lower
// for a template with other numbers, symbols or question, near 0 for
// unrelated problems.
func Similarity(a, b string) float64 { return shingles(a).similarity(shingles(b)) }

// features is a text reduced for Similarity: each group a sorted set of
// hashed feature names.
type features struct {
	numbers, symbols, words []uint64
	asked                   []uint64 // the asked quantity, if found
}

func (f features) similarity(g features) float64 {
	if f.empty() || g.empty() {
		return 0
	}
	return jaccard(f.numbers, g.numbers) * jaccard(f.symbols, g.symbols) * jaccard(f.words, g.words) * jaccard(f.asked, g.asked)
}

func (f features) empty() bool { return len(f.numbers)+len(f.symbols)+len(f.words) == 0 }

// jaccard of two sorted sets, with one shared element added to both (two
// empty sets agree).
func jaccard(a, b []uint64) float64 {
	both := overlap(a, b)
	return float64(both+1) / float64(len(a)+len(b)-both+1)
}

// overlap counts the elements two sorted sets share.
func overlap(a, b []uint64) int {
	both := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			both++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return both
}

// shingles reduces a problem text to its features.
func shingles(text string) features {
	g := featureNames(text)
	return features{numbers: hashSet(g[0]), symbols: hashSet(g[1]), words: hashSet(g[2]), asked: hashSet(g[3])}
}

// Feature groups.
const (
	groupNumbers = iota
	groupSymbols
	groupWords
	groupAsked
	groups
)

// featureNames lists a text's features by name, per group; a name that
// repeats is counted ("x#1", "x#2").
func featureNames(text string) [groups][]string {
	var g [groups][]string
	count := map[string]int{}
	add := func(group int, name string) {
		count[name]++
		g[group] = append(g[group], name+"#"+strconv.Itoa(count[name]))
	}
	var order []string // formula items and prose tokens in text order; "" ends a sentence
	asked := ""        // the first formula item after the last question cue
	question := false  // a question cue came, and no formula yet
	for _, seg := range tokenize(text) {
		var item []string
		for i, t := range seg.math {
			switch {
			case t == "":
			case isNumberLike(t):
				add(groupNumbers, t)
			default:
				add(groupSymbols, t)
			}
			if !seg.formula {
				continue
			}
			if t != "" && i > 0 && seg.math[i-1] != "" {
				add(groupSymbols, seg.math[i-1]+" "+t)
			}
			if t != "" {
				item = append(item, t)
			}
			if (t == "" || i == len(seg.math)-1) && len(item) > 0 {
				it := item[0] // "$15$" is "15"
				if len(item) > 1 {
					it = "[" + strings.Join(item, " ") + "]"
					add(groupSymbols, it)
				}
				if !seg.diagram {
					order = append(order, it)
					if question {
						asked, question = it, false
					}
				}
				item = item[:0]
			}
		}
		for _, w := range seg.words {
			add(groupWords, w)
		}
		for _, w := range seg.prose {
			if w == "?" {
				asked, question = "", true
			} else {
				order = append(order, w)
			}
		}
	}
	if asked != "" {
		add(groupAsked, asked)
	}
	for i := range order {
		for j := i + 1; j <= i+2 && j < len(order) && order[i] != "" && order[j] != ""; j++ {
			a, b := order[i], order[j]
			if b < a {
				a, b = b, a
			}
			add(groupWords, a+" ~ "+b)
		}
	}
	return g
}

// isNumberLike: numbers ("12", "1/2") and the tokens that weigh like them,
// marked with a quote: words in capitals and negations.
func isNumberLike(t string) bool { return t != "" && (unicode.IsDigit(rune(t[0])) || t[0] == '\'') }

// hashSet hashes names into a sorted set.
func hashSet(names []string) []uint64 {
	h := make([]uint64, len(names))
	for i, n := range names {
		h[i] = hash(n)
	}
	sort.Slice(h, func(i, j int) bool { return h[i] < h[j] })
	out := h[:0]
	for i, x := range h {
		if i == 0 || x != h[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
