package eval

import (
	"github.com/rs/zerolog/log"

	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// Benchmarks lanpo knows by name, and the file each is in (JSONL of
// {"id","problem","answer"}, or for code HumanEval's {"task_id","prompt",
// "test","entry_point"}; ../shared/data in lanpo's own environment,
// docs/eval.md for where to get them).
var Benchmarks = map[string]string{
	"aime24":        "aime24.jsonl",
	"aime25":        "aime25.jsonl",
	"amc23":         "amc23.jsonl",
	"math500":       "math500.jsonl",
	"gsm8k":         "gsm8k_test.jsonl",
	"humaneval":     "humaneval.jsonl",
	"minerva":       "minerva_math.jsonl",
	"olympiadbench": "olympiadbench.jsonl",
}

// BenchmarkNames lists the known names, sorted.
func BenchmarkNames() []string {
	var names []string
	for n := range Benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Problem is one benchmark problem.
type Problem struct {
	ID      string `json:"id"`
	Problem string `json:"problem"`
	Answer  string `json:"answer"`
	// Solution is an optional reference response (a worked solution that
	// ends in the answer): zero-shot evaluation then also reports its
	// teacher-forced log-likelihood under the bare prompt (reference_nll),
	// a continuous measure of how close the model is to writing it.
	Solution string `json:"solution,omitempty"`
	// Record is the line as the file holds it (every field), for a user's
	// reward (reward.Request.Problem).
	Record map[string]any `json:"-"`
}

// codeProblem: a record with tests and no answer is a code problem
// (reward.CodeTask reads its fields); its text is "problem", else
// HumanEval's "prompt", and its id "id", else "task_id".
func codeProblem(p *Problem) bool {
	_, test := p.Record["test"]
	_, tests := p.Record["tests"]
	if !(test || tests) || strings.TrimSpace(p.Answer) != "" {
		return false
	}
	if strings.TrimSpace(p.Problem) == "" {
		p.Problem, _ = p.Record["prompt"].(string)
	}
	p.Problem = strings.TrimSpace(p.Problem)
	if p.ID == "" {
		p.ID, _ = p.Record["task_id"].(string)
	}
	return true
}

// Benchmark is a loaded benchmark (possibly a subset).
type Benchmark struct {
	Name     string
	Path     string
	Problems []Problem
	Total    int // problems in the file, before --limit
	// SkippedLong: problems left out because their prompt and the
	// generation budget exceed the model's context (--skip-long-prompts).
	SkippedLong int
	// Code: the problems are programs to write, scored by running their
	// tests (reward.kind code; Options.CodeScorer), not answers.
	Code bool
}

// DataDirEnv names the directory benchmark names resolve in when --data-dir
// is not given.
const DataDirEnv = "LANPO_DATA"

// ResolveBenchmark finds a benchmark: a path to a JSONL file (it contains a
// path separator or ends in .jsonl), or a known name looked up in dataDir,
// then $LANPO_DATA. The error says every place it looked.
func ResolveBenchmark(spec, dataDir string) (name, path string, err error) {
	if strings.ContainsRune(spec, os.PathSeparator) || strings.HasSuffix(spec, ".jsonl") {
		if _, err := os.Stat(spec); err != nil {
			return "", "", fmt.Errorf("benchmark file %s: %w", spec, err)
		}
		return strings.TrimSuffix(filepath.Base(spec), ".jsonl"), spec, nil
	}
	file, ok := Benchmarks[spec]
	if !ok {
		return "", "", fmt.Errorf("--bench %q: not a benchmark name (%s) nor a path to a JSONL file", spec, strings.Join(BenchmarkNames(), ", "))
	}
	var looked []string
	for _, c := range []struct{ dir, from string }{{dataDir, "--data-dir"}, {os.Getenv(DataDirEnv), "$" + DataDirEnv}} {
		if c.dir == "" {
			looked = append(looked, c.from+" (not set)")
			continue
		}
		p := filepath.Join(c.dir, file)
		if _, err := os.Stat(p); err == nil {
			return spec, p, nil
		}
		looked = append(looked, p)
	}
	return "", "", fmt.Errorf("benchmark %s: %s not found; looked in %s. Pass --data-dir DIR (or set %s) to the directory that holds it",
		spec, file, strings.Join(looked, " and "), DataDirEnv)
}

func kindName(code bool) string {
	if code {
		return "code"
	}
	return "math"
}

// LoadBenchmark reads a benchmark file; limit > 0 keeps that many problems,
// evenly spaced through the file (the same subset every time, spread over
// the file's order, which often follows difficulty or year). A malformed
// line is an error naming file:line.
func LoadBenchmark(name, path string, limit int) (Benchmark, error) {
	b := Benchmark{Name: name, Path: path}
	seen := map[string]int{}
	err := jsonl.File(path, func(n int, line []byte) error {
		var p Problem
		if err := json.Unmarshal(line, &p); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if err := json.Unmarshal(line, &p.Record); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		code := codeProblem(&p)
		switch {
		case n == 1:
			b.Code = code
		case code != b.Code:
			return fmt.Errorf("%s:%d: a %s problem in a file whose first line is a %s problem", path, n, kindName(code), kindName(b.Code))
		}
		if code && strings.TrimSpace(p.Problem) == "" {
			return fmt.Errorf("%s:%d: a code problem (it has tests) wants a non-empty \"problem\" or \"prompt\" string", path, n)
		}
		if !code && (strings.TrimSpace(p.Problem) == "" || strings.TrimSpace(p.Answer) == "") {
			return fmt.Errorf("%s:%d: want non-empty \"problem\" and \"answer\" strings (or, for code, \"prompt\" with \"test\"/\"tests\")", path, n)
		}
		if p.ID == "" {
			p.ID = fmt.Sprintf("%s-%d", name, n)
		}
		if first, dup := seen[p.ID]; dup {
			return fmt.Errorf("%s:%d: id %q already used on line %d", path, n, p.ID, first)
		}
		seen[p.ID] = n
		b.Problems = append(b.Problems, p)
		return nil
	})
	if err != nil {
		return b, err
	}
	if len(b.Problems) == 0 {
		return b, fmt.Errorf("%s: no problems", path)
	}
	b.Total = len(b.Problems)
	if limit > b.Total {
		log.Warn().Str("benchmark", name).Int("limit", limit).Int("problems", b.Total).Msg("the limit exceeds the benchmark: all its problems are evaluated")
	}
	if limit > 0 && limit < b.Total {
		sub := make([]Problem, limit)
		for i := range sub {
			sub[i] = b.Problems[i*b.Total/limit]
		}
		b.Problems = sub
	}
	return b, nil
}
