package pool

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBM25HandComputed: three documents, query "triangle area", scores
// worked out from the formula in bm25.go.
func TestBM25HandComputed(t *testing.T) {
	x := newBM25()
	x.add("d1", "The triangle area is base times height") // triangle area base times height: 5 terms
	x.add("d2", "circle area radius")                     // 3 terms
	x.add("d3", "triangle angles sum")                    // 3 terms
	// N = 3, avgdl = 11/3; df(triangle) = df(area) = 2: idf = ln(1 + 1.5/2.5).
	idf := math.Log(1.6)
	term := func(dl float64) float64 { return idf * 2.2 / (1 + 1.2*(0.25+0.75*dl/(11.0/3))) }
	want := []hit{{"d1", 2 * term(5)}, {"d2", term(3)}, {"d3", term(3)}} // d2, d3 tie: by id
	got := x.search("What is the triangle area?", 10)
	if len(got) != 3 {
		t.Fatalf("hits %v", got)
	}
	for i := range want {
		if got[i].id != want[i].id || math.Abs(got[i].score-want[i].score) > 1e-12 {
			t.Fatalf("hit %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// The query against itself: both terms once, length 2.
	self := 2 * idf * 2.2 / (1 + 1.2*(0.25+0.75*2/(11.0/3)))
	if s := x.selfScore("triangle area"); math.Abs(s-self) > 1e-12 {
		t.Fatalf("self score %v, want %v", s, self)
	}
	x.remove("d1")
	if got := x.search("triangle", 10); len(got) != 1 || got[0].id != "d3" {
		t.Fatalf("after removing d1: %v", got)
	}
}

func entry(problem string, correct bool, attempt string) Entry {
	return Entry{ProblemID: problem, Attempt: attempt, Correct: correct,
		Summary: Summary{FlowOfThought: "flow " + attempt, Principles: "principle of " + problem, Pitfalls: "pitfall of " + problem}}
}

func TestCandidates(t *testing.T) {
	p := newPool(t, DefaultConfig())
	p.Add("Find the area of a triangle with base 4 and height 6.", entry("tri", true, "12"))
	p.Add("Find the area of a circle of radius 3.", entry("circle", false, "9"))
	p.Add("How many ways can 5 books be arranged on a shelf?", entry("books", true, "120"))
	cands := p.Candidates("q", "What is the area of a triangle with base 10 and height 3?", 2)
	if len(cands) != 2 || cands[0].ProblemID != "tri" || cands[1].ProblemID != "circle" {
		t.Fatalf("candidates %+v", cands)
	}
	if !(cands[0].Normalized > cands[1].Normalized && cands[0].Normalized <= 1 && cands[1].Normalized > 0) {
		t.Fatalf("normalized scores %v %v", cands[0].Normalized, cands[1].Normalized)
	}
	// The query's own problem is never a candidate.
	for _, c := range p.Candidates("tri", "Find the area of a triangle with base 4 and height 6.", 5) {
		if c.ProblemID == "tri" {
			t.Fatal("a problem retrieved itself")
		}
	}
	for _, c := range cands {
		if got := p.NormalizedBM25(c.ProblemID, "What is the area of a triangle with base 10 and height 3?"); got != c.Normalized {
			t.Fatalf("NormalizedBM25(%s) = %v, Candidates said %v", c.ProblemID, got, c.Normalized)
		}
	}
}

func TestEvictionPerProblem(t *testing.T) {
	for _, c := range []struct {
		policy string
		// outcomes of the 4 added entries (cap 3) and which attempts stay
		outcomes []bool
		want     string
	}{
		{EvictOldest, []bool{true, false, false, true}, "a1 a2 a3"},
		// balanced: 2 right, 2 wrong → ties evict a right one (the oldest: a0).
		{EvictBalanced, []bool{true, false, false, true}, "a1 a2 a3"},
		// 3 wrong, 1 right: the oldest wrong one (a1) goes, the right one stays.
		{EvictBalanced, []bool{true, false, false, false}, "a0 a2 a3"},
	} {
		t.Run(c.policy, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxEntriesPerProblem, cfg.Eviction = 3, c.policy
			p := newPool(t, cfg)
			evicted := 0
			for i, ok := range c.outcomes {
				evicted += p.Add("x", entry("p", ok, fmt.Sprintf("a%d", i)))
			}
			var got []string
			for _, e := range p.EntriesOf("p") {
				got = append(got, e.Attempt)
			}
			if strings.Join(got, " ") != c.want || evicted != 1 || p.Entries() != 3 {
				t.Fatalf("kept %v (evicted %d), want %s", got, evicted, c.want)
			}
		})
	}
}

// Under the byte cap the largest problem loses its oldest entry; a problem
// with a single entry keeps it.
func TestEvictionByBytes(t *testing.T) {
	cfg := DefaultConfig()
	big, small := entry("big", true, strings.Repeat("x", 100)), entry("small", true, strings.Repeat("x", 100))
	cfg.MaxBytes = small.bytes() + 3*big.bytes() // room for one small and three big entries
	p := newPool(t, cfg)
	p.Add("small problem", entry("small", true, strings.Repeat("x", 100)))
	for i := 0; i < 4; i++ {
		p.Add("big problem", entry("big", true, strings.Repeat("x", 99)+fmt.Sprint(i)))
	}
	if p.Bytes() > cfg.MaxBytes || len(p.EntriesOf("small")) != 1 || len(p.EntriesOf("big")) != 3 {
		t.Fatalf("bytes %d (cap %d), small %d, big %d", p.Bytes(), cfg.MaxBytes, len(p.EntriesOf("small")), len(p.EntriesOf("big")))
	}
	if first := p.EntriesOf("big")[0].Attempt; !strings.HasSuffix(first, "1") {
		t.Fatalf("big kept %q first; its oldest (…0) should have gone", first)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEntriesPerProblem = 4
	p := newPool(t, cfg)
	problems := realProblems(t)[:30]
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		pr := problems[rng.Intn(len(problems))]
		e := entry(pr.ID, rng.Intn(2) == 0, fmt.Sprintf("attempt %d with a tab\t, a \"quote\" and <|im_end|>", i))
		e.Step, e.Group, e.Sample, e.Reward = i/16, i%16, i%4, float64(rng.Intn(2))
		p.Add(pr.Problem, e)
	}
	q := saveAndLoad(t, p, cfg)
	var a, b bytes.Buffer
	p.Write(&a)
	q.Write(&b)
	if !bytes.Equal(a.Bytes(), b.Bytes()) || q.Bytes() != p.Bytes() || q.Entries() != p.Entries() {
		t.Fatal("the reloaded pool differs")
	}
	// The rebuilt index answers as the original, and both evolve alike.
	query := problems[3].Problem
	if fmt.Sprint(p.Candidates("z", query, 5)) != fmt.Sprint(q.Candidates("z", query, 5)) {
		t.Fatal("retrieval differs after reload")
	}
	p.Add(problems[0].Problem, entry(problems[0].ID, true, "next"))
	q.Add(problems[0].Problem, entry(problems[0].ID, true, "next"))
	a.Reset()
	b.Reset()
	p.Write(&a)
	q.Write(&b)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the reloaded pool evolves differently")
	}
}

func TestLoadErrorsNameTheLine(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ body, want string }{
		{`{"problem":{"id":"a","text":"x"}}`, ":1: the first line must be the pool header"},
		{`{"header":{"format":"lanpo-pool","version":1,"problems":1,"entries":1}}` + "\n" + `{"entry":{"problem_id":"a"}}`, ":2: entry of problem \"a\" outside"},
		{`{"header":{"format":"lanpo-pool","version":1,"problems":1,"entries":2}}` + "\n" + `{"problem":{"id":"a","text":"x"}}` + "\n" + `{"entry":{"problem_id":"a"}}`, "cut short"},
		{`{"header":{"format":"other","version":1}}`, ":1: not a lanpo pool header"},
	} {
		path := filepath.Join(dir, File)
		os.WriteFile(path, []byte(c.body+"\n"), 0o644)
		if _, err := Load(path, DefaultConfig()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.body, err, c.want)
		}
	}
}

// TestOneCandidatePerProblem: the same problem text under two ids is one
// candidate (the first BM25 ranks), and never a candidate for itself.
func TestOneCandidatePerProblem(t *testing.T) {
	p := newPool(t, DefaultConfig())
	tri := "Find the area of a triangle with base 4 and height 6."
	p.Add(tri, entry("tri-a", true, "12"))
	p.Add(tri, entry("tri-b", false, "24"))
	p.Add("Find the area of a circle of radius 3.", entry("circle", false, "9"))
	cands := p.Candidates("q", "What is the area of a triangle with base 10 and height 3?", 3)
	var ids []string
	for _, c := range cands {
		ids = append(ids, c.ProblemID)
	}
	if len(cands) != 2 || cands[0].ProblemID != "tri-a" || cands[1].ProblemID != "circle" {
		t.Fatalf("candidates %v, want [tri-a circle]", ids)
	}
	for _, c := range p.Candidates("tri-a", tri, 3) {
		if c.ProblemID == "tri-b" {
			t.Fatal("the same problem under another id is a candidate for itself")
		}
	}
}

// saveAndLoad writes p to a temporary directory and reads it back.
func saveAndLoad(t *testing.T, p *Pool, cfg Config) *Pool {
	t.Helper()
	dir := t.TempDir()
	if err := p.Save(dir); err != nil {
		t.Fatal(err)
	}
	q, err := Load(filepath.Join(dir, File), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// Lessons come newest first whatever their outcome (lanpo.lesson_order:
// recency), or with correctFirst (outcome) the verified-correct attempts'
// lessons first, newest first, then the others newest first; max applies
// after the order.
func TestLessonsOrder(t *testing.T) {
	p, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i, correct := range []bool{true, false, true, false, false} {
		p.Add("What is 7 zorp 3?", Entry{ProblemID: "z1", Step: i + 1, Correct: correct,
			Summary: Summary{Principles: fmt.Sprintf("lesson %d", i+1)}})
	}
	got := func(max int, correctFirst bool) string {
		var out []string
		for _, l := range p.Lessons("z1", max, "", correctFirst) {
			out = append(out, l.Principles)
		}
		return strings.Join(out, ", ")
	}
	if s := got(5, false); s != "lesson 5, lesson 4, lesson 3, lesson 2, lesson 1" {
		t.Errorf("recency: %s", s)
	}
	if s := got(5, true); s != "lesson 3, lesson 1, lesson 5, lesson 4, lesson 2" {
		t.Errorf("outcome: %s", s)
	}
	if s := got(2, true); s != "lesson 3, lesson 1" {
		t.Errorf("outcome, 2 lessons: %s", s)
	}
	if s := got(2, false); s != "lesson 5, lesson 4" {
		t.Errorf("recency, 2 lessons: %s", s)
	}
}

// TestNumbersDoNotMakeProblemsRelated: a shared single digit is no
// relation. "7 vink 3" shares both digits with the query and "8 zorp 9"
// its word: only the word's problem is a candidate, at the query's own
// score. Longer numbers still count, and a query of digits alone falls
// back to them.
func TestNumbersDoNotMakeProblemsRelated(t *testing.T) {
	p := newPool(t, DefaultConfig())
	p.Add("What is 7 vink 3?", entry("vink", true, "73"))
	p.Add("What is 8 zorp 9?", entry("zorp", true, "89"))
	p.Add("3 + 5 =", entry("sum", true, "8"))
	p.Add("The angles of a pentagon sum to 540 degrees.", entry("pentagon", true, "540"))
	cands := p.Candidates("q", "What is 7 zorp 3?", 5)
	if len(cands) != 1 || cands[0].ProblemID != "zorp" || math.Abs(cands[0].Normalized-1) > 1e-12 {
		t.Fatalf("candidates %+v: want zorp alone, normalized 1", cands)
	}
	if got := p.NormalizedBM25("vink", "What is 7 zorp 3?"); got != 0 {
		t.Fatalf("a problem sharing only numbers scores %v, want 0", got)
	}
	if cands := p.Candidates("q", "5 + 4 =", 5); len(cands) != 1 || cands[0].ProblemID != "sum" {
		t.Fatalf("a query of digits alone: candidates %+v, want sum", cands)
	}
	if cands := p.Candidates("q", "What is 540 zorp 2?", 5); len(cands) != 2 || cands[0].ProblemID != "pentagon" && cands[1].ProblemID != "pentagon" {
		t.Fatalf("a number of three digits: candidates %+v, want pentagon among them", cands)
	}
}
