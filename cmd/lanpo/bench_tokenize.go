package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/bench"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

func benchTokenizeCommand() *cli.Command {
	return &cli.Command{
		Name:  "tokenize",
		Usage: "encode throughput (MB/s), single-threaded and parallel, against Hugging Face tokenizers (Rust)",
		Description: "Encodes the string fields of a JSONL file (--fields) with lanpo's tokenizer: one cold pass with an\n" +
			"empty word cache, then --reps warm passes on one goroutine and on all cores; the best pass counts.\n" +
			"With --hf-python (a python with PyPI `tokenizers`) the same texts go through Hugging Face's Rust\n" +
			"tokenizer the same way; the ratio lanpo/HF is printed, and the ids of both are compared.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tokenizer", Usage: "Hugging Face tokenizer directory", Required: true},
			&cli.StringFlag{Name: "data", Usage: "JSONL file with the texts", Required: true},
			&cli.StringFlag{Name: "fields", Value: "text,problem,solution", Usage: "string fields of each line to encode (each one a text)"},
			&cli.IntFlag{Name: "reps", Value: 3, Usage: "warm passes; the fastest counts"},
			&cli.StringFlag{Name: "hf-python", Usage: "python with tokenizers for the baseline", EnvVars: []string{"LANPO_HF_PYTHON"}},
		},
		Action: runBenchTokenize,
	}
}

func runBenchTokenize(c *cli.Context) error {
	texts, err := readTextFields(c.String("data"), strings.Split(c.String("fields"), ","))
	if err != nil {
		return err
	}
	reps := max(c.Int("reps"), 1)
	bytes := 0
	for _, t := range texts {
		bytes += len(t)
	}
	mb := float64(bytes) / 1e6
	tk, err := tokenizer.Load(c.String("tokenizer"))
	if err != nil {
		return err
	}
	encodeAll := func(workers int) ([][]int, time.Duration, error) {
		start := time.Now()
		if workers == 1 {
			out := make([][]int, len(texts))
			for i, t := range texts {
				if out[i], err = tk.Encode(t, false); err != nil {
					return nil, 0, fmt.Errorf("%s: text %d: %w", c.String("data"), i, err)
				}
			}
			return out, time.Since(start), nil
		}
		out, err := tk.EncodeBatch(texts, false, workers)
		return out, time.Since(start), err
	}
	ids, cold, err := encodeAll(1)
	if err != nil {
		return err
	}
	best := func(workers int) (time.Duration, error) {
		b := time.Duration(1 << 62)
		for r := 0; r < reps; r++ {
			_, d, err := encodeAll(workers)
			if err != nil {
				return 0, err
			}
			b = min(b, d)
		}
		return b, nil
	}
	single, err := best(1)
	if err != nil {
		return err
	}
	par, err := best(runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	tokens := 0
	for _, x := range ids {
		tokens += len(x)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "corpus: %d texts, %.2f MB, %d tokens (%s)\n", len(texts), mb, tokens, c.String("data"))
	fmt.Fprintf(w, "lanpo: cold %.2f MB/s, single-threaded %.2f MB/s, parallel (%d cores) %.2f MB/s\n",
		mb/cold.Seconds(), mb/single.Seconds(), runtime.GOMAXPROCS(0), mb/par.Seconds())
	py := c.String("hf-python")
	if py == "" {
		fmt.Fprintln(w, "Hugging Face baseline: unavailable (pass --hf-python or set LANPO_HF_PYTHON to a python with `tokenizers`)")
		return nil
	}
	dir, err := os.MkdirTemp("", "lanpo-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	textsJSON, _ := json.Marshal(texts)
	if err := os.WriteFile(filepath.Join(dir, "texts.json"), textsJSON, 0o644); err != nil {
		return err
	}
	raw, err := bench.RunPython(py, bench.HFTokenize, dir,
		filepath.Join(c.String("tokenizer"), tokenizer.TokenizerFile), filepath.Join(dir, "texts.json"), strconv.Itoa(reps))
	if err != nil {
		// lanpo's own figures stand; the baseline's absence is said, as
		// bench forward and generate say theirs.
		fmt.Fprintf(w, "Hugging Face baseline: unavailable: %v\n", err)
		return nil
	}
	var hf struct {
		ColdS     float64 `json:"cold_s"`
		SingleS   float64 `json:"single_s"`
		ParallelS float64 `json:"parallel_s"`
		Tokens    int     `json:"tokens"`
		IDsSHA256 string  `json:"ids_sha256"`
		Version   string  `json:"tokenizers"`
	}
	if err := json.Unmarshal(raw, &hf); err != nil {
		return fmt.Errorf("Hugging Face baseline printed %s: %w", raw, err)
	}
	fmt.Fprintf(w, "HF tokenizers %s: cold %.2f MB/s, single-threaded %.2f MB/s, parallel %.2f MB/s\n",
		hf.Version, mb/hf.ColdS, mb/hf.SingleS, mb/hf.ParallelS)
	fmt.Fprintf(w, "ratio lanpo/HF: single-threaded %.2fx, cold %.2fx, lanpo parallel vs HF single-threaded %.2fx, parallel vs parallel %.2fx\n",
		hf.SingleS/single.Seconds(), hf.ColdS/cold.Seconds(), hf.SingleS/par.Seconds(), hf.ParallelS/par.Seconds())
	same := idsSHA256(ids) == hf.IDsSHA256
	fmt.Fprintf(w, "ids identical to HF: %v\n", same)
	if !same {
		return fmt.Errorf("lanpo and Hugging Face produced different ids on %s", c.String("data"))
	}
	return nil
}

// idsSHA256 hashes ids the way hf_tokenize_bench.py does.
func idsSHA256(ids [][]int) string {
	h := sha256.New()
	for _, row := range ids {
		strs := make([]string, len(row))
		for i, id := range row {
			strs[i] = strconv.Itoa(id)
		}
		h.Write([]byte(strings.Join(strs, ",") + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readTextFields returns the named string fields of every line of a JSONL
// file, in order, each as one text.
func readTextFields(path string, fields []string) ([]string, error) {
	var texts []string
	err := jsonl.File(path, func(n int, line []byte) error {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		for _, k := range fields {
			if s, ok := rec[k].(string); ok {
				texts = append(texts, s)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("%s: no string field among %v", path, fields)
	}
	return texts, nil
}
