package trainer

import (
	"encoding/json"
	"fmt"
	"math/rand"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// Problem is one line of a math dataset: {"id","problem","answer"} (other
// fields are ignored).
type Problem struct {
	ID      string `json:"id"`
	Problem string `json:"problem"`
	Answer  string `json:"answer"`
	Where   string `json:"-"` // file:line it was read from
}

// LoadProblems reads a JSONL dataset. A malformed line, or an id an
// earlier line already used (the pool, the cursor and the logs key
// problems by id: two problems under one id would mix their attempts), is
// an error naming file:line, or, with skipBad, is counted, logged and
// skipped.
func LoadProblems(path string, skipBad bool) ([]Problem, error) {
	var out []Problem
	skipped := 0
	seen := map[string]int{}
	err := jsonl.File(path, func(n int, line []byte) error {
		var p Problem
		err := json.Unmarshal(line, &p)
		if err == nil && (p.Problem == "" || p.Answer == "") {
			err = fmt.Errorf(`want non-empty "problem" and "answer" strings`)
		}
		if first, dup := seen[p.ID]; err == nil && p.ID != "" && dup {
			err = fmt.Errorf("id %q already used on line %d", p.ID, first)
		}
		if err != nil {
			if skipBad {
				skipped++
				log.Warn().Str("file", path).Int("line", n).Err(err).Msg("skipping malformed line")
				return nil
			}
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		p.Where = fmt.Sprintf("%s:%d", path, n)
		seen[p.ID] = n
		if p.ID == "" {
			p.ID = p.Where
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no problems (%d malformed lines skipped)", path, skipped)
	}
	if skipped > 0 {
		log.Warn().Str("file", path).Int("skipped", skipped).Int("kept", len(out)).Msg("malformed lines skipped")
	}
	return out, nil
}

// Cursor walks a dataset in epochs, each a permutation drawn from (seed,
// epoch): its whole state is two integers, saved in checkpoints.
type Cursor struct {
	Seed  uint64 `json:"seed"`
	Epoch int    `json:"epoch"`
	Pos   int    `json:"pos"` // next index into the epoch's permutation
	n     int
	perm  []int
}

// Next returns the indices of the next k items.
func (c *Cursor) Next(n, k int) []int {
	c.n = n
	out := make([]int, 0, k)
	for len(out) < k {
		if c.perm == nil {
			c.perm = rand.New(rand.NewSource(int64(c.Seed) + int64(c.Epoch)*1_000_003)).Perm(n)
		}
		if c.Pos >= n {
			c.Epoch++
			c.Pos = 0
			c.perm = nil
			continue
		}
		out = append(out, c.perm[c.Pos])
		c.Pos++
	}
	return out
}
