package pool

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// How the labelled sets of testdata/twins_*.jsonl are made and checked
// against more of MATH: the candidate pairs (TestRegenerateTwinCandidates),
// and a scan for what the measure flags beyond them (TestScanForTwins).
// The measure Similarity replaced, the baseline, is CharOverlap
// (overlap.go).

var twinsData = flag.String("twins.data", "", "with TestRegenerateTwinCandidates: the directory of math_train.jsonl and math500.jsonl")

// mathRow is a line of the MATH files in -twins.data.
type mathRow struct{ ID, Problem, Answer string }

// readMATH reads math_train.jsonl and math500.jsonl from -twins.data.
func readMATH(t *testing.T) (train, bench []mathRow) {
	t.Helper()
	read := func(name string) []mathRow {
		rows, err := jsonl.Read[mathRow](filepath.Join(*twinsData, name))
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	return read("math_train.jsonl"), read("math500.jsonl")
}

// TestRegenerateTwinCandidates rewrites the labelled sets' pairs from the
// MATH files (go test ./pool -run TestRegenerateTwinCandidates
// -twins.data DIR), keeping the labels of pairs already there; new pairs
// come without one and make TestTwins fail until they are read and
// labelled by hand. The pairs:
//   - twins_math500: each MATH-500 problem with its BM25 top 1 in MATH
//     train, and ranks 2-10 where the character 5-gram similarity is at
//     least 0.5 (templates that look like twins), and the pairs already
//     there;
//   - twins_math_train: each MATH-train problem with those of its BM25
//     top 4 (itself left out) that have the same answer string, each
//     unordered pair once.
func TestRegenerateTwinCandidates(t *testing.T) {
	if *twinsData == "" {
		t.Skip("needs -twins.data DIR")
	}
	train, bench := readMATH(t)
	x := newBM25()
	byID := map[string]mathRow{}
	for _, r := range train {
		x.add(r.ID, r.Problem)
		byID[r.ID] = r
	}
	old := map[string]twinPair{}
	for _, path := range twinSets {
		ps, err := jsonl.Read[twinPair](path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, p := range ps {
			old[p.ID+" "+p.TrainID] = p
		}
	}
	pair := func(a mathRow, rank int, b mathRow) twinPair {
		return twinPair{ID: a.ID, TrainID: b.ID, BM25Rank: rank, Label: old[a.ID+" "+b.ID].Label,
			Problem: a.Problem, Answer: a.Answer, TrainProblem: b.Problem, TrainAnswer: b.Answer}
	}
	var sets [2][]twinPair
	for _, q := range bench {
		for i, h := range x.search(q.Problem, 10) {
			_, kept := old[q.ID+" "+h.id]
			if i == 0 || kept || CharOverlap(q.Problem, byID[h.id].Problem) >= 0.5 {
				sets[0] = append(sets[0], pair(q, i+1, byID[h.id]))
			}
		}
	}
	seen := map[string]bool{}
	for _, q := range train {
		rank := 0
		for _, h := range x.search(q.Problem, 4) {
			if h.id == q.ID {
				continue
			}
			rank++
			b := byID[h.id]
			key := min(q.ID, b.ID) + " " + max(q.ID, b.ID)
			if b.Answer != q.Answer || seen[key] {
				continue
			}
			seen[key] = true
			sets[1] = append(sets[1], pair(q, rank, b))
		}
	}
	for i, path := range twinSets {
		unlabelled := 0
		for _, p := range sets[i] {
			if p.Label == "" {
				unlabelled++
			}
		}
		if err := jsonl.WriteFile(path, sets[i]); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d pairs, %d without a label", path, len(sets[i]), unlabelled)
	}
}

// TestScanForTwins lists what Similarity flags among BM25 neighbours
// beyond the labelled sets (go test ./pool -run TestScanForTwins
// -twins.data DIR -v): each MATH-500 problem's top 10 and each MATH-train
// problem's top 5 in MATH train. A flagged pair whose answers differ is a
// template flagged, or a twin whose answer is written another way: the log
// lists those, to be read.
func TestScanForTwins(t *testing.T) {
	if *twinsData == "" {
		t.Skip("needs -twins.data DIR")
	}
	train, bench := readMATH(t)
	x := newBM25()
	byID, feat := map[string]mathRow{}, map[string]features{}
	for _, r := range train {
		x.add(r.ID, r.Problem)
		byID[r.ID], feat[r.ID] = r, shingles(r.Problem)
	}
	labelled := map[string]bool{}
	for _, path := range twinSets {
		for _, p := range readTwins(t, path) {
			labelled[p.ID+" "+p.TrainID], labelled[p.TrainID+" "+p.ID] = true, true
		}
	}
	threshold := DefaultConfig().NearDuplicate
	seen := map[string]bool{}
	flagged, oldFlagged, pairs := 0, 0, 0
	scan := func(q mathRow, k int) {
		qf := shingles(q.Problem)
		for _, h := range x.search(q.Problem, k) {
			key := min(q.ID, h.id) + " " + max(q.ID, h.id)
			if h.id == q.ID || seen[key] {
				continue
			}
			seen[key] = true
			pairs++
			b := byID[h.id]
			if CharOverlap(q.Problem, b.Problem) >= 0.8 {
				oldFlagged++
			}
			s := qf.similarity(feat[h.id])
			if s < threshold {
				continue
			}
			flagged++
			if !labelled[q.ID+" "+h.id] && q.Answer != b.Answer {
				t.Logf("%s ~ %s: similarity %.3f, answers %q and %q", q.ID, h.id, s, q.Answer, b.Answer)
			}
		}
	}
	for _, q := range bench {
		scan(q, 10)
	}
	for _, q := range train {
		scan(q, 6) // itself and 5 others
	}
	t.Logf("%d pairs: Similarity ≥ %.2f flags %d; the character 5-gram Jaccard ≥ 0.8 flags %d", pairs, threshold, flagged, oldFlagged)
}
