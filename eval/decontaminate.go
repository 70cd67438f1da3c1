package eval

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/pool"
)

// Decontamination (lanpo eval --decontaminate): a benchmark problem whose
// twin is in the training data measures what the model remembers, not how
// it reasons, and in retrieval mode the twin's lessons can reach the plan.
// Such problems are dropped before the evaluation runs; what was dropped,
// and for which twin, goes to decontaminated.jsonl.

// DecontaminatedFile lists the dropped problems, beside summary.json.
const DecontaminatedFile = "decontaminated.jsonl"

// Contaminated is a benchmark problem dropped for its twin in a training
// file: a line of decontaminated.jsonl.
type Contaminated struct {
	Bench      string  `json:"bench"`
	ID         string  `json:"id"`
	TwinID     string  `json:"twin_id"`
	TwinFile   string  `json:"twin_file"`
	Similarity float64 `json:"similarity"`
}

// Decontaminate drops from each benchmark the problems with a twin in the
// training files (JSONL with "problem" and, optionally, "id"; a line
// without an id is named by its line number): a training problem whose
// pool.Similarity to the benchmark problem is at least threshold, among
// the 32 training problems BM25 ranks highest for it (pool.NearestProblem).
// It returns the benchmarks that are left and what was dropped, in
// benchmark and problem order.
func Decontaminate(benches []Benchmark, files []string, threshold float64) ([]Benchmark, []Contaminated, error) {
	if len(files) == 0 {
		return benches, nil, nil
	}
	cfg := pool.DefaultConfig()
	cfg.MaxBytes, cfg.NearDuplicate = 0, threshold
	index, err := pool.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--decontaminate: %w", err)
	}
	// The index is a pool of the training problems, one empty entry each,
	// under keys that keep files apart; twins maps a key back.
	type twin struct{ file, id string }
	twins := map[string]twin{}
	for i, path := range files {
		err := jsonl.File(path, func(n int, line []byte) error {
			var p struct {
				ID      string `json:"id"`
				Problem string `json:"problem"`
			}
			if err := json.Unmarshal(line, &p); err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
			if p.Problem == "" {
				return fmt.Errorf("%s:%d: no \"problem\"", path, n)
			}
			if p.ID == "" {
				p.ID = "line " + strconv.Itoa(n)
			}
			key := strconv.Itoa(i) + "/" + p.ID
			if _, dup := twins[key]; !dup {
				twins[key] = twin{path, p.ID}
				index.Add(p.Problem, pool.Entry{ProblemID: key})
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("--decontaminate: %w", err)
		}
	}
	var out []Benchmark
	var dropped []Contaminated
	for _, b := range benches {
		kept := b
		kept.Problems = nil
		for _, p := range b.Problems {
			key, sim, ok := index.NearestProblem(p.Problem)
			if ok && sim >= threshold {
				t := twins[key]
				dropped = append(dropped, Contaminated{Bench: b.Name, ID: p.ID, TwinID: t.id, TwinFile: t.file, Similarity: sim})
				continue
			}
			kept.Problems = append(kept.Problems, p)
		}
		if len(kept.Problems) == 0 {
			return nil, nil, fmt.Errorf("--decontaminate: every problem of %s has a twin in the training files", b.Name)
		}
		out = append(out, kept)
	}
	return out, dropped, nil
}
