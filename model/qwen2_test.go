package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

var tinyModels = []string{"qwen2-gqa2-tied", "qwen3-mha-untied", "qwen3-gqa3"}

type reference struct {
	InputIDs      [][]int64     `json:"input_ids"`
	AttentionMask [][]int64     `json:"attention_mask"`
	PositionIDs   [][]int64     `json:"position_ids"`
	Logits        [][][]float64 `json:"logits"`
	NextLogprobs  [][]float64   `json:"next_token_logprobs"`
	LogitsBF16    [][][]float64 `json:"logits_bf16"`
}

func loadReference(t *testing.T, name string) reference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "tiny", name, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// loadTiny loads a tiny reference model (closed at the test's end) and its
// reference batch as ids, positions and mask tensors in s.
func loadTiny(t *testing.T, s *tensor.Scope, name string, opt LoadOptions) (*Model, reference, *ts.Tensor, *ts.Tensor, *ts.Tensor) {
	t.Helper()
	ref := loadReference(t, name)
	opt.Device = gotch.CPU
	m, err := Load(filepath.Join("testdata", "tiny", name), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, ref, int64Tensor(s, ref.InputIDs), int64Tensor(s, ref.PositionIDs), int64Tensor(s, ref.AttentionMask)
}

func lockThread(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

func int64Tensor(s *tensor.Scope, rows [][]int64) *ts.Tensor {
	var flat []int64
	for _, r := range rows {
		flat = append(flat, r...)
	}
	return s.Keep(s.Keep(ts.MustOfSlice(flat)).MustView([]int64{int64(len(rows)), int64(len(rows[0]))}, false))
}

// maxLogitDiff compares logits [B, T, V] at the positions the mask marks.
func maxLogitDiff(got []float64, want [][][]float64, mask [][]int64) float64 {
	d, i := 0.0, 0
	for b := range want {
		for p := range want[b] {
			for v := range want[b][p] {
				if mask[b][p] == 1 {
					d = math.Max(d, math.Abs(got[i]-want[b][p][v]))
				}
				i++
			}
		}
	}
	return d
}

func TestForwardMatchesTransformers(t *testing.T) {
	lockThread(t)
	for _, name := range tinyModels {
		t.Run(name, func(t *testing.T) {
			ref := loadReference(t, name)
			var implLogits [][]float64
			defer func() {
				if len(implLogits) == 2 {
					if d := tensor.MaxAbsDiff(implLogits[0], implLogits[1]); d > 1e-5 {
						t.Errorf("SDPA and reference attention differ by %g", d)
					}
				}
			}()
			impls := []AttentionImpl{AttentionReference, AttentionSDPA}
			if !sdpaAvailable() { // libtorch < 2.1: the op is a stub that names itself
				t.Logf("SDPA is unavailable in libtorch %s; testing the reference path only", csrcVersion())
				impls = impls[:1]
			}
			for _, impl := range impls {
				var s tensor.Scope
				defer s.Close()
				m, _, ids, pos, mask := loadTiny(t, &s, name, LoadOptions{Attention: impl})
				h, err := m.Forward(&s, ids, pos, mask, nil)
				if err != nil {
					t.Fatal(err)
				}
				logits := tensor.Float64s(m.Logits(&s, h))
				implLogits = append(implLogits, logits)
				dl := maxLogitDiff(logits, ref.Logits, ref.AttentionMask)
				if dl > 1e-4 {
					t.Errorf("attention %d: fp32 logits differ from transformers by %g (limit 1e-4)", impl, dl)
				}
				// Log-probs of each next token through the fused op.
				b, tt := int64(len(ref.InputIDs)), int64(len(ref.InputIDs[0]))
				targets := make([][]int64, b)
				tmask := make([]bool, 0, b*tt)
				for i := range targets {
					targets[i] = make([]int64, tt)
					for j := int64(0); j < tt; j++ {
						valid := j+1 < tt && ref.AttentionMask[i][j] == 1
						if valid {
							targets[i][j] = ref.InputIDs[i][j+1]
						}
						tmask = append(tmask, valid)
					}
				}
				tm := s.Keep(s.Keep(ts.MustOfSlice(tmask)).MustView([]int64{b, tt}, false))
				lp, _, err := m.TokenLogProbs(&s, ids, pos, mask, int64Tensor(&s, targets), tm, csrc.LogProbOptions{})
				if err != nil {
					t.Fatal(err)
				}
				got := tensor.Float64s(lp)
				d := 0.0
				for i := range ref.NextLogprobs {
					for j := range ref.NextLogprobs[i] {
						if tmask[int64(i)*tt+int64(j)] {
							d = math.Max(d, math.Abs(got[int64(i)*tt+int64(j)]-ref.NextLogprobs[i][j]))
						}
					}
				}
				if d > 1e-5 {
					t.Errorf("attention %d: next-token log-probs differ from transformers by %g (limit 1e-5)", impl, d)
				}
				t.Logf("attention %d: max |Δlogits| %.2g, max |Δlogp| %.2g", impl, dl, d)
			}
		})
	}
}

func TestForwardBF16(t *testing.T) {
	lockThread(t)
	for _, name := range tinyModels {
		t.Run(name, func(t *testing.T) {
			var s tensor.Scope
			defer s.Close()
			m, ref, ids, pos, mask := loadTiny(t, &s, name, LoadOptions{DType: gotch.BFloat16})
			h, err := m.Forward(&s, ids, pos, mask, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := tensor.Float64s(m.Logits(&s, h))
			// bf16 keeps 8 bits of mantissa. The tolerance is what bf16 costs
			// transformers itself on this model (its bf16 run against its fp32
			// run), doubled.
			var hfBF16 []float64
			for _, b := range ref.LogitsBF16 {
				for _, p := range b {
					hfBF16 = append(hfBF16, p...)
				}
			}
			tol := 2*maxLogitDiff(hfBF16, ref.Logits, ref.AttentionMask) + 1e-3
			d := maxLogitDiff(got, ref.LogitsBF16, ref.AttentionMask)
			if d > tol {
				t.Errorf("bf16 logits differ from transformers' bf16 by %g (limit %g)", d, tol)
			}
			if d := maxLogitDiff(got, ref.Logits, ref.AttentionMask); d > tol {
				t.Errorf("bf16 logits differ from fp32 by %g (limit %g)", d, tol)
			}
			t.Logf("bf16: max |Δlogits| vs transformers bf16 %.2g (limit %.2g)", d, tol)
			if d := maxLogitDiff(got, ref.Logits, ref.AttentionMask); d > 0.2 {
				t.Errorf("bf16 logits differ from fp32 by %g", d)
			}
		})
	}
}

func TestLoadReportsTensorMismatches(t *testing.T) {
	lockThread(t)
	src := filepath.Join("testdata", "tiny", "qwen2-gqa2-tied")
	set, err := OpenTensorSet(src)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	cfg, _ := os.ReadFile(filepath.Join(src, "config.json"))
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	var srcs []TensorSource
	for _, n := range set.Names() {
		b, info, _ := set.Bytes(n)
		switch n {
		case "model.layers.1.mlp.up_proj.weight": // dropped: missing
			continue
		case "model.norm.weight": // wrong shape
			srcs = append(srcs, Bytes(n, info.DType, []int64{info.Shape[0] / 2}, b[:len(b)/2]))
			continue
		}
		srcs = append(srcs, Bytes(n, info.DType, info.Shape, b))
	}
	srcs = append(srcs, Bytes("lm_head.weight", "F32", []int64{1}, make([]byte, 4))) // tied model: unexpected
	if err := WriteSafetensors(filepath.Join(dir, "model.safetensors"), srcs, nil); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir, LoadOptions{Device: gotch.CPU})
	if err == nil {
		t.Fatal("loaded a checkpoint that does not match its config")
	}
	for _, want := range []string{"missing: model.layers.1.mlp.up_proj.weight", "unexpected: lm_head.weight", "mis-shaped: model.norm.weight is [16], want [32]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}

// TestSaveLoadRoundTrip: save → load is bit-exact, and the saved
// model.safetensors is byte-identical to the one transformers wrote.
func TestSaveLoadRoundTrip(t *testing.T) {
	lockThread(t)
	for _, name := range tinyModels {
		t.Run(name, func(t *testing.T) {
			src := filepath.Join("testdata", "tiny", name)
			m, err := Load(src, LoadOptions{Device: gotch.CPU})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			dir := t.TempDir()
			if err := m.Save(dir); err != nil {
				t.Fatal(err)
			}
			m2, err := Load(dir, LoadOptions{Device: gotch.CPU})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			p1, p2 := m.Params(), m2.Params()
			if len(p1) != len(p2) {
				t.Fatalf("%d parameters after reload, want %d", len(p2), len(p1))
			}
			for i := range p1 {
				a, _ := csrc.ToBytes(p1[i].Tensor)
				b, _ := csrc.ToBytes(p2[i].Tensor)
				if p1[i].Name != p2[i].Name || !bytes.Equal(a, b) {
					t.Errorf("%s changed in the round trip", p1[i].Name)
				}
			}
			want, _ := os.ReadFile(filepath.Join(src, "model.safetensors"))
			got, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
			if !bytes.Equal(got, want) {
				t.Errorf("saved model.safetensors (%d bytes) differs from transformers' (%d bytes)", len(got), len(want))
			}
			if _, err := os.Stat(filepath.Join(dir, "generation_config.json")); err != nil {
				t.Errorf("generation_config.json not carried over: %v", err)
			}
		})
	}
}

func TestEOSTokenIDsMergeGenerationConfig(t *testing.T) {
	lockThread(t)
	src := filepath.Join("testdata", "tiny", "qwen3-gqa3")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, _ := os.ReadFile(filepath.Join(src, f))
		if f == "config.json" {
			b = bytes.Replace(b, []byte(`"model_type":`), []byte(`"eos_token_id": 7, "model_type":`), 1)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [9, 9]}`), 0o644)
	m, err := Load(dir, LoadOptions{Device: gotch.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ids, err := m.EOSTokenIDs()
	if err != nil || fmt.Sprint(ids) != "[7 9]" {
		t.Errorf("got %v, %v; want [7 9]", ids, err)
	}
	// The file is read at load (a checkpoint's Save needs it after the
	// source is gone): a bad one is reported for the model loaded with it.
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": "x"}`), 0o644)
	bad, err := Load(dir, LoadOptions{Device: gotch.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.EOSTokenIDs(); err == nil || !strings.Contains(err.Error(), "generation_config.json") {
		t.Errorf("bad generation_config.json: %v", err)
	}
}
