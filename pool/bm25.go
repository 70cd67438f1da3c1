package pool

import (
	"math"
	"sort"
	"strings"
	"unicode"
)

// BM25 (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25
// and Beyond", 2009) over problem texts, one document per problem, so a
// problem with 32 entries weighs as much as one with a single entry.
// Documents are indexed with every term; a query scores without its
// single digits (queryTerms): they are a problem's operands and
// coefficients, and counted as terms they make two problems alike for
// sharing a digit.
//
//	score(q, d) = Σ_{t ∈ q, distinct} idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 − b + b·|d|/avgdl))
//	idf(t)      = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))   (never negative)
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

type bm25 struct {
	docs     map[string]map[string]int // id → term → count
	lengths  map[string]int
	df       map[string]int
	postings map[string]map[string]int // term → id → count
	totalLen int
}

func newBM25() *bm25 {
	return &bm25{docs: map[string]map[string]int{}, lengths: map[string]int{}, df: map[string]int{}, postings: map[string]map[string]int{}}
}

func (x *bm25) add(id, text string) {
	if _, ok := x.docs[id]; ok {
		return
	}
	terms := terms(text)
	tf := map[string]int{}
	for _, t := range terms {
		tf[t]++
	}
	x.docs[id], x.lengths[id] = tf, len(terms)
	x.totalLen += len(terms)
	for t, n := range tf {
		x.df[t]++
		if x.postings[t] == nil {
			x.postings[t] = map[string]int{}
		}
		x.postings[t][id] = n
	}
}

func (x *bm25) remove(id string) {
	tf, ok := x.docs[id]
	if !ok {
		return
	}
	for t := range tf {
		x.df[t]--
		delete(x.postings[t], id)
		if x.df[t] == 0 {
			delete(x.df, t)
			delete(x.postings, t)
		}
	}
	x.totalLen -= x.lengths[id]
	delete(x.docs, id)
	delete(x.lengths, id)
}

func (x *bm25) idf(t string) float64 {
	n, df := float64(len(x.docs)), float64(x.df[t])
	return math.Log(1 + (n-df+0.5)/(df+0.5))
}

func (x *bm25) avgdl() float64 {
	if len(x.docs) == 0 {
		return 0
	}
	return float64(x.totalLen) / float64(len(x.docs))
}

// termScore is one term's contribution for a document with tf occurrences
// and length dl.
func (x *bm25) termScore(t string, tf, dl int, avgdl float64) float64 {
	if avgdl == 0 {
		avgdl = float64(dl)
	}
	f := float64(tf)
	return x.idf(t) * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(dl)/avgdl))
}

type hit struct {
	id    string
	score float64
}

// search returns the k best-scoring documents for the query, best first
// (ties by id, so the order is deterministic).
func (x *bm25) search(query string, k int) []hit {
	avg := x.avgdl()
	scores := map[string]float64{}
	for _, t := range queryTerms(query) { // fixed term order: fixed float sums
		for id, tf := range x.postings[t] {
			scores[id] += x.termScore(t, tf, x.lengths[id], avg)
		}
	}
	hits := make([]hit, 0, len(scores))
	for id, s := range scores {
		hits = append(hits, hit{id, s})
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].score != hits[j].score {
			return hits[i].score > hits[j].score
		}
		return hits[i].id < hits[j].id
	})
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits
}

// scoreDoc is the query's score against document id (0 if it is not in
// the index).
func (x *bm25) scoreDoc(query, id string) float64 {
	tf, ok := x.docs[id]
	if !ok {
		return 0
	}
	avg := x.avgdl()
	var s float64
	for _, t := range queryTerms(query) {
		if n := tf[t]; n > 0 {
			s += x.termScore(t, n, x.lengths[id], avg)
		}
	}
	return s
}

// selfScore is the query's score against itself as a document under the
// index's statistics: the most any document can score for it, short of
// repeating its terms. Normalized BM25 divides by it.
func (x *bm25) selfScore(query string) float64 {
	ts := terms(query)
	tf := map[string]int{}
	for _, t := range ts {
		tf[t]++
	}
	avg := x.avgdl()
	var s float64
	for _, t := range queryTerms(query) {
		s += x.termScore(t, tf[t], len(ts), avg)
	}
	return s
}

// queryTerms are the distinct terms a query scores with, in order: its
// words, LaTeX commands and numbers of two or more digits. Single digits
// are left out — in "What is 7 zorp 3?" and "What is 7 vink 3?" they are
// operands, and in MATH mostly coefficients and exponents: a shared digit
// says nothing about what two problems ask, while a longer number may
// (360 degrees, 100 percent, a year) — unless the query has no other term
// ("3 + 5 ="): then its digits are all it has (docs/lanpo.md).
func queryTerms(query string) []string {
	all := distinct(terms(query))
	var words []string
	for _, t := range all {
		if !singleDigit(t) {
			words = append(words, t)
		}
	}
	if len(words) == 0 {
		return all
	}
	return words
}

// singleDigit reports whether a term is a single digit.
func singleDigit(t string) bool { return len(t) == 1 && unicode.IsDigit(rune(t[0])) }

// stopwords are left out of the index: they say nothing about a problem.
var stopwords = map[string]bool{"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true,
	"for": true, "from": true, "if": true, "in": true, "is": true, "it": true, "its": true, "of": true, "on": true, "or": true,
	"that": true, "the": true, "this": true, "to": true, "was": true, "what": true, "which": true, "with": true, "we": true,
	"how": true, "many": true, "find": true, "let": true, "your": true, "answer": true, "express": true}

// terms splits text into BM25 terms: lower-case words, numbers and LaTeX
// commands (\frac stays one term), stopwords left out.
func terms(text string) []string {
	var out []string
	rs := []rune(strings.ToLower(text))
	for i := 0; i < len(rs); {
		r := rs[i]
		j := i + 1
		switch {
		case r == '\\' && j < len(rs) && unicode.IsLetter(rs[j]):
			for j < len(rs) && unicode.IsLetter(rs[j]) {
				j++
			}
		case unicode.IsLetter(r):
			for j < len(rs) && unicode.IsLetter(rs[j]) {
				j++
			}
		case unicode.IsDigit(r):
			for j < len(rs) && (unicode.IsDigit(rs[j]) || rs[j] == '.' && j+1 < len(rs) && unicode.IsDigit(rs[j+1])) {
				j++
			}
		default:
			i = j
			continue
		}
		if t := string(rs[i:j]); !stopwords[t] {
			out = append(out, t)
		}
		i = j
	}
	return out
}

func distinct(ts []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range ts {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}
