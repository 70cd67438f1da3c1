package model

import (
	"path/filepath"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

func columns(s *tensor.Scope, x *ts.Tensor, start, n int64) *ts.Tensor {
	return s.Keep(s.Keep(x.MustNarrow(1, start, n, false)).MustContiguous(false))
}

// TestKVCacheMatchesFullForward: prefill the first columns of a left-padded
// batch, decode the rest one position at a time; every step's logits must
// equal the full forward's at those positions.
func TestKVCacheMatchesFullForward(t *testing.T) {
	lockThread(t)
	for _, name := range tinyModels {
		t.Run(name, func(t *testing.T) {
			var s tensor.Scope
			defer s.Close()
			m, ref, ids, pos, mask := loadTiny(t, &s, name, LoadOptions{})
			full, err := m.Forward(&s, ids, pos, mask, nil)
			if err != nil {
				t.Fatal(err)
			}
			fullLogits := m.Logits(&s, full)
			c, err := m.NewKVCache(3, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for round := 0; round < 2; round++ { // the second round reuses the cache after Reset
				c.Reset()
				const prefill = 3
				steps := [][2]int64{{0, prefill}}
				for p := int64(prefill); p < 7; p++ {
					steps = append(steps, [2]int64{p, 1})
				}
				for _, st := range steps {
					h, err := m.Forward(&s, columns(&s, ids, st[0], st[1]), columns(&s, pos, st[0], st[1]), columns(&s, mask, st[0], st[1]), c)
					if err != nil {
						t.Fatal(err)
					}
					got := tensor.Float64s(m.Logits(&s, h))
					want := tensor.Float64s(s.Keep(fullLogits.MustNarrow(1, st[0], st[1], false)))
					v := int64(m.Config.VocabSize)
					d := 0.0
					for b := int64(0); b < 3; b++ {
						for j := int64(0); j < st[1]; j++ {
							if ref.AttentionMask[b][st[0]+j] == 0 {
								continue
							}
							off := (b*st[1] + j) * v
							d = max(d, tensor.MaxAbsDiff(got[off:off+v], want[off:off+v]))
						}
					}
					if d > 1e-5 {
						t.Errorf("round %d, positions %d..%d: cached logits differ from the full forward by %g", round, st[0], st[0]+st[1]-1, d)
					}
				}
				if c.Len != 7 {
					t.Errorf("cache length %d after 7 positions", c.Len)
				}
			}
			if _, err := m.Forward(&s, columns(&s, ids, 0, 2), columns(&s, pos, 0, 2), columns(&s, mask, 0, 2), c); err == nil {
				t.Error("writing past the cache's capacity was accepted")
			}
		})
	}
}

// TestKVCacheCopyRows: a prompt prefilled once and copied into three rows
// decodes exactly like the original row.
func TestKVCacheCopyRows(t *testing.T) {
	lockThread(t)
	var s tensor.Scope
	defer s.Close()
	m, err := Load(filepath.Join("testdata", "tiny", "qwen3-gqa3"), LoadOptions{Device: gotch.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	one, _ := m.NewKVCache(1, 8)
	defer one.Close()
	three, _ := m.NewKVCache(3, 8)
	defer three.Close()
	prompt := [][]int64{{5, 9, 2, 7, 1}}
	if _, err := m.Forward(&s, int64Tensor(&s, prompt), int64Tensor(&s, [][]int64{{0, 1, 2, 3, 4}}), int64Tensor(&s, [][]int64{{1, 1, 1, 1, 1}}), one); err != nil {
		t.Fatal(err)
	}
	if err := three.CopyRows(one, []int64{0, 0, 0}, []int64{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	hOne, err := m.Forward(&s, int64Tensor(&s, [][]int64{{11}}), int64Tensor(&s, [][]int64{{5}}), int64Tensor(&s, [][]int64{{1}}), one)
	if err != nil {
		t.Fatal(err)
	}
	hThree, err := m.Forward(&s, int64Tensor(&s, [][]int64{{11}, {11}, {11}}), int64Tensor(&s, [][]int64{{5}, {5}, {5}}), int64Tensor(&s, [][]int64{{1}, {1}, {1}}), three)
	if err != nil {
		t.Fatal(err)
	}
	// The copies agree with each other and with the batch-of-one decode to
	// rounding (BLAS kernels may sum rows of one batch in different orders).
	a, b := tensor.Float64s(hOne), tensor.Float64s(hThree)
	n := len(a)
	for r := 1; r < 3; r++ {
		if d := tensor.MaxAbsDiff(b[:n], b[r*n:(r+1)*n]); d > 1e-6 {
			t.Errorf("row %d differs from row 0 by %g", r, d)
		}
	}
	if d := tensor.MaxAbsDiff(a, b[:n]); d > 1e-5 {
		t.Errorf("copied rows differ from the prompt's own decode by %g", d)
	}
	cfg := m.Config
	want := cfg.NumHiddenLayers*2*3*cfg.NumKeyValueHeads*8*cfg.HeadDim*4 + 3*8*8
	if three.Bytes() != want {
		t.Errorf("cache bytes %d, want %d", three.Bytes(), want)
	}
}
