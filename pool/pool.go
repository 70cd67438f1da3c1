package pool

import (
	"fmt"
	"math"
	"strings"
)

// Config bounds the pool.
type Config struct {
	// MaxEntriesPerProblem caps each problem's entries (the paper's 32).
	MaxEntriesPerProblem int `json:"max_entries_per_problem"`
	// MaxBytes caps the text the whole pool holds (it is written into
	// every checkpoint); 0: no cap.
	MaxBytes int64 `json:"max_pool_bytes"`
	// Eviction says which entry goes when a cap is reached:
	//   oldest   — the problem's oldest entry: entries written by an older
	//              policy describe behaviour it has moved away from.
	//   balanced — the oldest entry of the problem's more common outcome,
	//              so right and wrong attempts both stay (for abstraction's
	//              principles and pitfalls); this makes the attempts
	//              reflection can show depend on outcomes.
	// Under the byte cap the entry comes from the problem with the most
	// entries, so no problem loses its only attempt while others have many.
	Eviction string `json:"eviction"`
	// MaxAttemptChars caps the raw attempt stored, in characters (its end
	// is kept: the final answer is there). What a reflection prompt shows
	// of it is decided later, in tokens (the trainer's attempt rule); this
	// cap only bounds storage, so it should hold a whole attempt.
	MaxAttemptChars int `json:"max_attempt_chars"`
	// NearDuplicate is the Similarity (dedup.go) at or above which two
	// problem texts are the same problem. The default, 0.9, is chosen on
	// hand-labelled MATH pairs (TestTwins): every MATH-500 twin is at or
	// above it and every template below.
	NearDuplicate float64 `json:"near_duplicate_threshold"`
	// Code is set for a code run (reward.kind: code; the trainer sets it
	// through lanpo's Config): Lessons then remove the programs the
	// summaries quote (StripCode) besides answers. omitempty: a math
	// pool's header is written as before.
	Code bool `json:"code,omitempty"`
}

// Eviction policies.
const (
	EvictOldest   = "oldest"
	EvictBalanced = "balanced"
)

// DefaultConfig is the pool lanpo uses unless configured otherwise.
func DefaultConfig() Config {
	return Config{MaxEntriesPerProblem: 32, MaxBytes: 256 << 20, Eviction: EvictOldest, MaxAttemptChars: 6000, NearDuplicate: 0.9}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.MaxEntriesPerProblem < 1:
		return fmt.Errorf("max_entries_per_problem must be ≥ 1, got %d", c.MaxEntriesPerProblem)
	case c.MaxBytes < 0:
		return fmt.Errorf("max_pool_bytes must be ≥ 0, got %d", c.MaxBytes)
	case c.Eviction != EvictOldest && c.Eviction != EvictBalanced:
		return fmt.Errorf("eviction %q: want %s or %s", c.Eviction, EvictOldest, EvictBalanced)
	case c.MaxAttemptChars < 1:
		return fmt.Errorf("max_attempt_chars must be ≥ 1, got %d", c.MaxAttemptChars)
	case c.NearDuplicate <= 0 || c.NearDuplicate > 1:
		return fmt.Errorf("near_duplicate_threshold must be in (0, 1], got %g", c.NearDuplicate)
	}
	return nil
}

// problem is one problem's text and entries (oldest first).
type problem struct {
	id, text string
	entries  []*Entry
	shingles features // for near-duplicate checks (dedup.go)
}

// Pool holds entries by problem. Problems are kept in the order they first
// got an entry; nothing depends on map iteration order. Not safe for
// concurrent use: the trainer updates it between steps.
type Pool struct {
	cfg      Config
	problems []*problem // first-insertion order; a problem without entries is removed
	byID     map[string]*problem
	index    *bm25
	bytes    int64
	entries  int
	seq      uint64
}

// New returns an empty pool.
func New(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Pool{cfg: cfg, byID: map[string]*problem{}, index: newBM25()}, nil
}

// Config returns the pool's bounds.
func (p *Pool) Config() Config { return p.cfg }

// Problems, Entries and Bytes are the pool's size.
func (p *Pool) Problems() int { return len(p.problems) }
func (p *Pool) Entries() int  { return p.entries }
func (p *Pool) Bytes() int64  { return p.bytes }

// ProblemAt returns the id and text of the i-th problem (insertion order).
func (p *Pool) ProblemAt(i int) (id, text string) { return p.problems[i].id, p.problems[i].text }

// Has reports whether the pool holds entries of a problem.
func (p *Pool) Has(problemID string) bool { return p.byID[problemID] != nil }

// Add stores e as an attempt at the problem (id, text), caps its attempt
// text, gives it the next sequence number and evicts what the caps
// require; it returns how many entries were evicted. A batch of entries
// must be added in a fixed order (the trainer adds them in global group
// order) for the pool to be the same however the batch was computed.
func (p *Pool) Add(problemText string, e Entry) int {
	problemText = strings.ToValidUTF8(problemText, "\uFFFD")
	e.sanitize(p.cfg.MaxAttemptChars)
	pr := p.byID[e.ProblemID]
	if pr == nil {
		pr = &problem{id: e.ProblemID, text: problemText, shingles: shingles(problemText)}
		p.problems = append(p.problems, pr)
		p.byID[e.ProblemID] = pr
		p.index.add(e.ProblemID, problemText)
	}
	p.seq++
	e.Seq = p.seq
	pr.entries = append(pr.entries, &e)
	p.bytes += e.bytes()
	p.entries++
	evicted := 0
	for len(pr.entries) > p.cfg.MaxEntriesPerProblem {
		p.evictFrom(pr)
		evicted++
	}
	for p.cfg.MaxBytes > 0 && p.bytes > p.cfg.MaxBytes && p.entries > 1 {
		p.evictFrom(p.largest())
		evicted++
	}
	return evicted
}

// largest is the problem with the most entries; among equals, the one whose
// oldest entry is oldest.
func (p *Pool) largest() *problem {
	var best *problem
	for _, pr := range p.problems {
		if best == nil || len(pr.entries) > len(best.entries) ||
			len(pr.entries) == len(best.entries) && pr.entries[0].Seq < best.entries[0].Seq {
			best = pr
		}
	}
	return best
}

// evictFrom removes one entry of pr as the eviction policy says.
func (p *Pool) evictFrom(pr *problem) {
	victim := 0
	if p.cfg.Eviction == EvictBalanced {
		right := 0
		for _, e := range pr.entries {
			if e.Correct {
				right++
			}
		}
		majority := 2*right >= len(pr.entries) // ties: the right ones go first
		for i, e := range pr.entries {
			if e.Correct == majority {
				victim = i
				break
			}
		}
	}
	e := pr.entries[victim]
	pr.entries = append(pr.entries[:victim], pr.entries[victim+1:]...)
	p.bytes -= e.bytes()
	p.entries--
	if len(pr.entries) == 0 {
		p.removeProblem(pr)
	}
}

func (p *Pool) removeProblem(pr *problem) {
	delete(p.byID, pr.id)
	p.index.remove(pr.id)
	for i, q := range p.problems {
		if q == pr {
			p.problems = append(p.problems[:i], p.problems[i+1:]...)
			break
		}
	}
}

// AttemptFor picks one earlier attempt at a problem for reflection, with u
// in [0, 1) from the caller's seeded draw. Every stored attempt is equally
// likely whatever its outcome: choosing by outcome would itself tell the
// model something ("the attempt shown is usually wrong").
func (p *Pool) AttemptFor(problemID string, u float64) (Attempt, bool) {
	pr := p.byID[problemID]
	if pr == nil {
		return Attempt{}, false
	}
	e := pr.entries[pick(u, len(pr.entries))]
	return Attempt{ProblemID: e.ProblemID, Text: e.Attempt}, true
}

// FailedAttempt picks one earlier attempt that was wrong (lanpo.reflect_on:
// failed). It looks at outcomes, so a reflection prompt built from it says,
// by being shown at all, that the attempt failed; the trainer documents
// that trade-off.
func (p *Pool) FailedAttempt(problemID string, u float64) (Attempt, bool) {
	pr := p.byID[problemID]
	if pr == nil {
		return Attempt{}, false
	}
	var failed []*Entry
	for _, e := range pr.entries {
		if !e.Correct {
			failed = append(failed, e)
		}
	}
	if len(failed) == 0 {
		return Attempt{}, false
	}
	e := failed[pick(u, len(failed))]
	return Attempt{ProblemID: e.ProblemID, Text: e.Attempt}, true
}

func pick(u float64, n int) int {
	return min(n-1, int(math.Floor(u*float64(n))))
}

// Lessons returns up to max lessons of a problem, newest first, with
// boxed answers and the problem's gold answer where stated removed
// (StripAnswers, strip.go), and with Config.Code its code too (StripCode,
// strip_code.go). With correctFirst, the lessons of
// verified-correct attempts come first (newest first), then the others.
func (p *Pool) Lessons(problemID string, max int, gold string, correctFirst bool) []Lesson {
	pr := p.byID[problemID]
	if pr == nil {
		return nil
	}
	var out []Lesson
	take := func(correct bool) {
		for i := len(pr.entries) - 1; i >= 0 && len(out) < max; i-- {
			e := pr.entries[i]
			if correctFirst && e.Correct != correct {
				continue
			}
			l := Lesson{ProblemID: problemID, Principles: StripForeign(e.Summary.Principles, pr.text, p.cfg.Code, gold),
				Pitfalls: StripForeign(e.Summary.Pitfalls, pr.text, p.cfg.Code, gold)}
			if l.Principles != "" || l.Pitfalls != "" {
				out = append(out, l)
			}
		}
	}
	take(true)
	if correctFirst {
		take(false)
	}
	return out
}

// EntriesOf returns a problem's entries, oldest first (copies).
func (p *Pool) EntriesOf(problemID string) []Entry {
	pr := p.byID[problemID]
	if pr == nil {
		return nil
	}
	out := make([]Entry, len(pr.entries))
	for i, e := range pr.entries {
		out[i] = *e
	}
	return out
}

// ProblemStats is one problem's line in Stats.
type ProblemStats struct {
	ID      string `json:"id"`
	Entries int    `json:"entries"`
	Correct int    `json:"correct"`
	Bytes   int64  `json:"bytes"`
}

// Stats lists every problem's entry counts, in insertion order.
func (p *Pool) Stats() []ProblemStats {
	out := make([]ProblemStats, 0, len(p.problems))
	for _, pr := range p.problems {
		st := ProblemStats{ID: pr.id, Entries: len(pr.entries)}
		for _, e := range pr.entries {
			if e.Correct {
				st.Correct++
			}
			st.Bytes += e.bytes()
		}
		out = append(out, st)
	}
	return out
}

// Candidate is another problem retrieval found for a query.
type Candidate struct {
	ProblemID string  `json:"problem_id"`
	Text      string  `json:"text"`
	BM25      float64 `json:"bm25"`
	// Normalized is BM25 divided by the query's score against itself, in
	// [0, 1]: the cheap relevance (lanpo.similarity: bm25).
	Normalized float64 `json:"bm25_normalized"`
	// Relevance is the relevance filter's score, in [0, 1] (set by the
	// trainer's filter).
	Relevance float64 `json:"relevance"`
}

// Candidates returns the k problems whose texts score highest against the
// query under BM25 (one document per problem), best first. The query's own
// problem and every near-duplicate of the query (the same problem under
// another id) are left out: they are not "other problems"; and a problem
// held under several ids is one candidate.
func (p *Pool) Candidates(problemID, text string, k int) []Candidate {
	if k <= 0 {
		return nil
	}
	self := p.index.selfScore(text)
	q := shingles(text)
	var out []Candidate
	var kept []*problem
	// Near-duplicates rank high; ask for more than k so removing them still
	// leaves k.
	for _, h := range p.index.search(text, k+8) {
		if h.id == problemID {
			continue
		}
		pr := p.byID[h.id]
		if q.similarity(pr.shingles) >= p.cfg.NearDuplicate || p.sameAsKept(pr, kept) {
			continue
		}
		kept = append(kept, pr)
		c := Candidate{ProblemID: h.id, Text: pr.text, BM25: h.score}
		if self > 0 {
			c.Normalized = math.Min(1, h.score/self)
		}
		out = append(out, c)
		if len(out) == k {
			break
		}
	}
	return out
}

// sameAsKept reports whether pr is the same problem as one already chosen
// under another id (datasets such as the raw DAPO-17k repeat problems):
// one candidate per problem, however many ids it has.
func (p *Pool) sameAsKept(pr *problem, kept []*problem) bool {
	for _, o := range kept {
		if pr.text == o.text || pr.shingles.similarity(o.shingles) >= p.cfg.NearDuplicate {
			return true
		}
	}
	return false
}

// NormalizedBM25 is the normalized BM25 of problemID's text for a query
// (as Candidates computes it), for any problem in the pool.
func (p *Pool) NormalizedBM25(problemID, query string) float64 {
	self := p.index.selfScore(query)
	if self == 0 {
		return 0
	}
	return math.Min(1, p.index.scoreDoc(query, problemID)/self)
}

// NearestProblem returns the pool problem most similar to text by the
// near-duplicate measure (dedup.go) and that similarity, for contamination
// reports; ok is false for an empty pool. It looks at BM25's top 32.
func (p *Pool) NearestProblem(text string) (id string, sim float64, ok bool) {
	q := shingles(text)
	for _, h := range p.index.search(text, 32) {
		if s := q.similarity(p.byID[h.id].shingles); !ok || s > sim {
			id, sim, ok = h.id, s, true
		}
	}
	return id, sim, ok
}
