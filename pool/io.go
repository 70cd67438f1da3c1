package pool

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// File is the pool's file in a checkpoint directory.
const File = "pool.jsonl"

// The file is JSON Lines: a header, then each problem (in the pool's order)
// followed by its entries (oldest first). Indexes are not stored; Load
// rebuilds them, so the file stays readable and the index code can change.
type header struct {
	Format   string `json:"format"`
	Version  int    `json:"version"`
	Seq      uint64 `json:"seq"`
	Problems int    `json:"problems"`
	Entries  int    `json:"entries"`
	Config   Config `json:"config"`
}

type problemLine struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

type line struct {
	Header  *header      `json:"header,omitempty"`
	Problem *problemLine `json:"problem,omitempty"`
	Entry   *Entry       `json:"entry,omitempty"`
}

const formatName = "lanpo-pool"

// Write writes the pool to w.
func (p *Pool) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := jsonl.Encoder(bw)
	h := header{Format: formatName, Version: 1, Seq: p.seq, Problems: len(p.problems), Entries: p.entries, Config: p.cfg}
	if err := enc.Encode(line{Header: &h}); err != nil {
		return err
	}
	for _, pr := range p.problems {
		if err := enc.Encode(line{Problem: &problemLine{pr.id, pr.text}}); err != nil {
			return err
		}
		for _, e := range pr.entries {
			if err := enc.Encode(line{Entry: e}); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// Save writes the pool into dir/pool.jsonl (fsynced: checkpoints are
// durable).
func (p *Pool) Save(dir string) error {
	f, err := os.CreateTemp(dir, File+".tmp")
	if err != nil {
		return err
	}
	if err := p.Write(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), dir+string(os.PathSeparator)+File); err != nil {
		return err
	}
	return fsutil.SyncDir(dir)
}

// Load reads a pool file written by Save. cfg bounds the pool from now on
// (the run's configuration; the file's own is only informative). Errors
// name the file and line.
func Load(path string, cfg Config) (*Pool, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	var cur *problem
	var h *header
	err = jsonl.File(path, func(n int, raw []byte) error {
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		switch {
		case l.Header != nil:
			if h != nil || l.Header.Format != formatName || l.Header.Version != 1 {
				return fmt.Errorf("%s:%d: not a lanpo pool header (format %q version %d)", path, n, l.Header.Format, l.Header.Version)
			}
			h = l.Header
		case h == nil:
			return fmt.Errorf("%s:%d: the first line must be the pool header", path, n)
		case l.Problem != nil:
			if p.byID[l.Problem.ID] != nil {
				return fmt.Errorf("%s:%d: problem %q appears twice", path, n, l.Problem.ID)
			}
			cur = &problem{id: l.Problem.ID, text: l.Problem.Text, shingles: shingles(l.Problem.Text)}
			p.problems = append(p.problems, cur)
			p.byID[cur.id] = cur
			p.index.add(cur.id, cur.text)
		case l.Entry != nil:
			if cur == nil || l.Entry.ProblemID != cur.id {
				return fmt.Errorf("%s:%d: entry of problem %q outside that problem's section", path, n, l.Entry.ProblemID)
			}
			e := *l.Entry
			cur.entries = append(cur.entries, &e)
			p.bytes += e.bytes()
			p.entries++
		default:
			return fmt.Errorf("%s:%d: want a header, problem or entry", path, n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%s: empty (no pool header)", path)
	}
	for _, pr := range p.problems {
		if len(pr.entries) == 0 {
			return nil, fmt.Errorf("%s: problem %q has no entries", path, pr.id)
		}
		sort.SliceStable(pr.entries, func(i, j int) bool { return pr.entries[i].Seq < pr.entries[j].Seq })
	}
	if p.entries != h.Entries || len(p.problems) != h.Problems {
		return nil, fmt.Errorf("%s: %d problems and %d entries, the header says %d and %d (cut short?)", path, len(p.problems), p.entries, h.Problems, h.Entries)
	}
	p.seq = h.Seq
	return p, nil
}
