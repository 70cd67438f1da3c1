package pool

import (
	"bytes"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAttemptCapCutsOnCharacters: the stored attempt keeps its last
// max_attempt_chars characters, never starting inside one (math text is
// full of multi-byte ones: ≤ × √ π), whatever the cap.
func TestAttemptCapCutsOnCharacters(t *testing.T) {
	attempt := "Let x ≤ 3 × √2; then π·x² ≥ 0, so the answer is 𝟙 ≤ 9."
	n := utf8.RuneCountInString(attempt)
	for cap := 1; cap <= n+2; cap++ {
		cfg := DefaultConfig()
		cfg.MaxAttemptChars = cap
		p := newPool(t, cfg)
		p.Add("x", entry("p", true, attempt))
		got := p.EntriesOf("p")[0].Attempt
		if !utf8.ValidString(got) {
			t.Fatalf("cap %d: stored attempt is not valid UTF-8: %q", cap, got)
		}
		if want := string([]rune(attempt)[max(0, n-cap):]); got != want {
			t.Fatalf("cap %d: stored %q, want %q", cap, got, want)
		}
	}
}

// TestSaveLoadKeepsEveryValidByte: random valid UTF-8 texts (ASCII, math
// symbols, CJK, 4-byte characters, control characters, JSON's escapes)
// come back from pool.jsonl byte for byte, entries and problems alike; and
// an invalid byte sequence is made valid at Add, so the pool in memory
// equals the pool read back (a resumed run sees what a straight one saw).
func TestSaveLoadKeepsEveryValidByte(t *testing.T) {
	alphabet := []rune("ab 09\n\t\"\\/<>&≤≥×√π∑∫αβ中文𝟙😀\u2028\u2029\x00\x1f\u007f\uFFFD")
	rng := rand.New(rand.NewSource(7))
	text := func() string {
		rs := make([]rune, rng.Intn(40))
		for i := range rs {
			rs[i] = alphabet[rng.Intn(len(alphabet))]
		}
		return string(rs)
	}
	cfg := DefaultConfig()
	cfg.MaxAttemptChars = 25 // cuts some attempts, on character boundaries
	p := newPool(t, cfg)
	for i := 0; i < 200; i++ {
		e := Entry{ProblemID: "p" + string(rune('a'+rng.Intn(20))), Attempt: text(),
			Summary: Summary{FlowOfThought: text(), Principles: text(), Pitfalls: text()}}
		if i%17 == 0 { // a response decoded from a cut byte-level token
			e.Attempt = "ends in half a character \xe2\x89"
			e.Summary.Principles = "\xff\xfe bad bytes"
		}
		p.Add("problem "+e.ProblemID+" "+text(), e)
	}
	q := saveAndLoad(t, p, cfg)
	if p.Problems() != q.Problems() || p.Entries() != q.Entries() || p.Bytes() != q.Bytes() {
		t.Fatalf("sizes differ: %d/%d/%d vs %d/%d/%d", p.Problems(), p.Entries(), p.Bytes(), q.Problems(), q.Entries(), q.Bytes())
	}
	for i := 0; i < p.Problems(); i++ {
		id, a := p.ProblemAt(i)
		id2, b := q.ProblemAt(i)
		if id != id2 || a != b {
			t.Fatalf("problem %d: %q %q vs %q %q", i, id, a, id2, b)
		}
		if !reflect.DeepEqual(p.EntriesOf(id), q.EntriesOf(id)) {
			t.Fatalf("problem %s: entries differ after Save/Load:\n%+v\n%+v", id, p.EntriesOf(id), q.EntriesOf(id))
		}
		for _, e := range p.EntriesOf(id) {
			if !utf8.ValidString(e.Attempt) || !utf8.ValidString(e.Summary.Principles) {
				t.Fatalf("invalid UTF-8 kept in memory: %q", e.Attempt)
			}
		}
	}
	// And written again, the file is the same bytes.
	var w1, w2 bytes.Buffer
	if err := p.Write(&w1); err != nil {
		t.Fatal(err)
	}
	if err := q.Write(&w2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w1.Bytes(), w2.Bytes()) {
		t.Fatal("the loaded pool writes different bytes")
	}
	if !strings.Contains(w1.String(), "≤") {
		t.Fatal("non-ASCII text was escaped or lost")
	}
}
