package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/model"
)

func planLines(r Result) map[string]int64 {
	out := map[string]int64{}
	for _, l := range r.Lines {
		out[l.Name] = l.Bytes
	}
	return out
}

func loadPlanModel(t *testing.T, name string) *model.Config {
	t.Helper()
	cfg, err := model.LoadConfig("../configs/models/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The published sizes: Qwen2.5-7B has 7.62 B parameters, Qwen3-14B 14.77 B.
func TestPlanParamCounts(t *testing.T) {
	for name, want := range map[string]float64{"qwen2.5-7b": 7.62e9, "qwen3-14b": 14.77e9} {
		got := float64(loadPlanModel(t, name).ParamCount())
		if got < want*0.995 || got > want*1.005 {
			t.Errorf("%s: %.4g parameters, published %.4g", name, got, want)
		}
	}
}

// Each line by hand for a small case, and what each switch moves.
func TestPlanArithmetic(t *testing.T) {
	cfg := model.MemoryBenchShape()
	p := cfg.ParamCount()
	base := Options{GPUs: 4, Zero: 1, DTypeBytes: 2, SeqLen: 1024, MicroTokens: 4096, KLBeta: 0.05, RolloutRows: 16,
		RolloutTokens: 1024, LogProbChunk: 1024, MasterForWeight: true}
	plan := func(edit func(*Options)) map[string]int64 {
		o := base
		if edit != nil {
			edit(&o)
		}
		r, err := Plan(cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		return planLines(r)
	}
	l := plan(nil)
	want := map[string]int64{
		"weights":                    2 * p,
		"reference model":            2 * p,
		"fp32 master weights":        (4*p + 3) / 4,
		"Adam moments (fp32 m, v)":   (8*p + 3) / 4,
		"gradients":                  2 * p,                                                   // ZeRO-1 keeps them whole
		"rollout (generation batch)": cfg.GenerationBytes(16, 16, 256, 1024, 2, false, false), // G 1, prompts 1024/4
		"log-prob chunk buffer":      1024*32000*4 + 4096*512*4,
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("%s: %d, by hand %d", k, l[k], v)
		}
	}
	perTok := int64(5*512+3*512+4*128+4*1536)*2 + 8*1024*4 // reference attention keeps fp32 probabilities
	probs := int64(8 * 1024 * 4)
	if a := l["activations (micro-batch)"]; a != 4096*(perTok*9+probs) {
		t.Errorf("activations %d, by hand %d", a, 4096*(perTok*9+probs))
	}
	if l := plan(func(o *Options) { o.SDPA = true }); l["activations (micro-batch)"] != 4096*(perTok-probs)*9 {
		t.Errorf("SDPA keeps no probabilities: %d", l["activations (micro-batch)"])
	}
	if l := plan(func(o *Options) { o.KLBeta = 0 }); l["reference model"] != 0 {
		t.Errorf("kl_beta 0 keeps a reference of %d bytes", l["reference model"])
	}
	if l := plan(func(o *Options) { o.Zero = 2 }); l["gradients"] != 2*p {
		t.Errorf("ZeRO-2 without checkpointing cannot free gradient shards early: %d", l["gradients"])
	}
	l2 := plan(func(o *Options) { o.Zero, o.Checkpointing = 2, true })
	if l2["gradients"] != (2*p+3)/4 {
		t.Errorf("ZeRO-2 with checkpointing: gradients %d, want a quarter of %d", l2["gradients"], 2*p)
	}
	if a := l2["activations (micro-batch)"]; a != 4096*512*2*9+4096*(2*perTok+probs) {
		t.Errorf("checkpointed activations %d, by hand %d", a, 4096*512*2*9+4096*(2*perTok+probs))
	}
	if l := plan(func(o *Options) { o.Zero = 0 }); l["Adam moments (fp32 m, v)"] != 8*p {
		t.Errorf("ZeRO-0 shards nothing: %d", l["Adam moments (fp32 m, v)"])
	}
	if _, err := Plan(cfg, Options{GPUs: 1, Zero: 3, SeqLen: 1, MicroTokens: 1}); err == nil || !strings.Contains(err.Error(), "stage 3, is not implemented") {
		t.Errorf("zero 3: %v", err)
	}
}

// The README's answers for 8 × 80 GiB: full-parameter Qwen3-14B with a
// bf16 reference model and ZeRO-1 does not fit and says what would help;
// ZeRO-2 with checkpointing at β = 0 does; Qwen2.5-7B fits with ZeRO-1 and
// checkpointing but not without checkpointing.
func TestPlanLargeModels(t *testing.T) {
	o := Options{GPUs: 8, Zero: 1, DTypeBytes: 2, SeqLen: 4096, MicroTokens: 16384, KLBeta: 0.001, SDPA: true, RolloutRows: 64,
		RolloutTokens: 4096, LogProbChunk: 4096, GPUMem: 80 << 30, Headroom: 0.08, MasterForWeight: true}
	cases := []struct {
		model string
		edit  func(*Options)
		fits  bool
		note  string
	}{
		{"qwen3-14b", nil, false, "kl_beta 0"},
		{"qwen3-14b", func(o *Options) { o.Checkpointing = true }, false, "ZeRO-2 with activation checkpointing"},
		{"qwen3-14b", func(o *Options) { o.Checkpointing, o.Zero, o.KLBeta = true, 2, 0 }, true, ""},
		{"qwen2.5-7b", nil, false, "the update is over by"},
		{"qwen2.5-7b", func(o *Options) { o.Checkpointing = true }, true, ""},
	}
	for _, c := range cases {
		oc := o
		if c.edit != nil {
			c.edit(&oc)
		}
		r, err := Plan(loadPlanModel(t, c.model), oc)
		if err != nil {
			t.Fatal(err)
		}
		if r.Fits != c.fits {
			t.Errorf("%s %+v: fits %v, want %v\n%s", c.model, oc, r.Fits, c.fits, r)
		}
		if c.note != "" && !strings.Contains(strings.Join(r.Notes, "\n"), c.note) {
			t.Errorf("%s: notes %q lack %q", c.model, r.Notes, c.note)
		}
		if c.fits && r.RowsThatFit < 1 {
			t.Errorf("%s: fits, yet no rollout row fits", c.model)
		}
	}
}

// The plan's figures against the host's measured peak memory for a small
// model (the method: MeasureMemory). Within 20% (this small model's
// fixed costs weigh more than a real one's: libtorch's first allocations,
// the final norm); checkpointing must cut the measured update peak by
// more than half. The measurement runs in a fresh child process: RSS
// deltas in this one would also count the heap the package's other tests
// leave behind and the allocator trimming it.
func TestPlanMatchesMeasuredMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~1 GB and runs three updates; skipped with -short")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), measureMemoryVar+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("measuring: %v: %s", err, stderr.String())
	}
	var checks []MemoryCheck
	if err := json.Unmarshal(out, &checks); err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	for _, c := range checks {
		t.Logf("%-44s plan %8.1f MiB measured %8.1f MiB ratio %.3f", c.Name, float64(c.Planned)/(1<<20), float64(c.Measured)/(1<<20), c.Ratio)
		if c.Ratio < 0.8 || c.Ratio > 1.2 {
			t.Errorf("%s: measured %.3f× the plan", c.Name, c.Ratio)
		}
	}
	n := len(checks)
	if n != 5 || checks[n-1].Measured*2 > checks[n-2].Measured {
		t.Errorf("checkpointing did not halve the update's peak: %+v", checks)
	}
}

const measureMemoryVar = "LANPO_TEST_MEASURE_MEMORY"

func TestMain(m *testing.M) {
	if os.Getenv(measureMemoryVar) == "1" {
		os.Exit(measureMemoryChild())
	}
	os.Exit(m.Run())
}

// measureMemoryChild is TestPlanMatchesMeasuredMemory's child: it measures
// and prints the checks as JSON on stdout.
func measureMemoryChild() int {
	runtime.LockOSThread()
	cfg := model.MemoryBenchShape()
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers, cfg.NumAttentionHeads, cfg.VocabSize = 384, 1024, 6, 6, 16000
	checks, err := MeasureMemory(cfg, 2, 512, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(checks)
	return 0
}

// TestPlanLoRA: the adapters' count is PEFT's (Qwen2.5-7B, r 64 on all
// seven projections: 161,480,704); under LoRA the base is frozen (no
// masters, moments, gradients or reference copy of it, no head dW); and the
// README's answers: Qwen2.5-7B GRPO, 64 prompts × 8 samples × 3,072 new
// tokens, r 64, fits one 80 GiB H100 with activation checkpointing (full
// fine-tuning does not), Qwen3-14B the same on one 139 GiB H200.
func TestPlanLoRA(t *testing.T) {
	q7 := loadPlanModel(t, "qwen2.5-7b")
	if n := q7.LoRAParamCount(64, nil); n != 161_480_704 {
		t.Errorf("Qwen2.5-7B r 64: %d adapter parameters, PEFT counts 161,480,704", n)
	}
	o := Options{GPUs: 1, DTypeBytes: 2, SeqLen: 3584, MicroTokens: 16384, Checkpointing: true, KLBeta: 0.001, SDPA: true, CUDAGraphs: true,
		RolloutRows: 512, RolloutGroup: 8, RolloutPrompt: 512, RolloutTokens: 3584, LogProbChunk: 4096, GPUMem: 80 << 30, Headroom: 0.08,
		MasterForWeight: true, LoRARank: 64}
	r, err := Plan(q7, o)
	if err != nil {
		t.Fatal(err)
	}
	l := planLines(r)
	pl := q7.LoRAParamCount(64, nil)
	for name, want := range map[string]int64{"weights": 2 * r.Params, "LoRA adapters (fp32)": 4 * pl, "reference model": 0,
		"Adam moments (fp32 m, v)": 8 * pl, "gradients": 4 * pl, "head weight gradient": 0, "fp32 master weights": 0} {
		if l[name] != want {
			t.Errorf("%s: %d, want %d", name, l[name], want)
		}
	}
	if !r.Fits {
		t.Errorf("Qwen2.5-7B LoRA on one 80 GiB GPU does not fit:\n%s", r)
	}
	if n, err := MaxMicroTokens(q7, o); err != nil || n < o.SeqLen {
		t.Errorf("largest micro-batch %d (%v): not even one sequence", n, err)
	}
	full := o
	full.LoRARank = 0
	if r, _ := Plan(q7, full); r.Fits || !strings.Contains(strings.Join(r.Notes, "\n"), "LoRA") {
		t.Errorf("full fine-tuning of 7B on one GPU fits, or the notes do not suggest LoRA: %v\n%s", r.Fits, r)
	}
	o.GPUMem = 139 << 30
	if r, err := Plan(loadPlanModel(t, "qwen3-14b"), o); err != nil || !r.Fits {
		t.Errorf("Qwen3-14B LoRA on one 139 GiB GPU does not fit (%v):\n%s", err, r)
	}
}

// TestPlanSDPO: SDPO's EMA teacher is one more copy of the weights in
// every phase, and each update micro-batch holds the teacher's top-K
// beside the student's activations; nothing else changes.
func TestPlanSDPO(t *testing.T) {
	q7 := loadPlanModel(t, "qwen2.5-7b")
	o := Options{GPUs: 8, Zero: 2, DTypeBytes: 2, SeqLen: 4096, MicroTokens: 16384, Checkpointing: true, SDPA: true,
		RolloutRows: 64, RolloutGroup: 8, RolloutTokens: 4096, LogProbChunk: 4096, GPUMem: 80 << 30, Headroom: 0.08, MasterForWeight: true}
	grpo, err := Plan(q7, o)
	if err != nil {
		t.Fatal(err)
	}
	o.SDPOTopK = 100
	sdpo, err := Plan(q7, o)
	if err != nil {
		t.Fatal(err)
	}
	l := planLines(sdpo)
	outputs := o.MicroTokens * (100*12 + 102*8*3)
	if l["SDPO EMA teacher"] != 2*sdpo.Params || l["SDPO teacher outputs"] != outputs {
		t.Fatalf("teacher %d (want %d), outputs %d (want %d)", l["SDPO EMA teacher"], 2*sdpo.Params, l["SDPO teacher outputs"], outputs)
	}
	if sdpo.Rollout-grpo.Rollout != 2*sdpo.Params || sdpo.Update-grpo.Update != 2*sdpo.Params+outputs {
		t.Fatalf("rollout peak +%d, update peak +%d: want the teacher, and the teacher and its outputs", sdpo.Rollout-grpo.Rollout, sdpo.Update-grpo.Update)
	}
}

// TestPlanConsolidationOwnStep: consolidation's own moment group
// (lanpo.consolidate_lr) is a second set of Adam moments, sharded as the
// policy's: 8 bytes a parameter over the GPUs under ZeRO, the adapters'
// only under LoRA.
func TestPlanConsolidationOwnStep(t *testing.T) {
	q7 := loadPlanModel(t, "qwen2.5-7b")
	o := Options{GPUs: 8, Zero: 1, DTypeBytes: 2, SeqLen: 4096, MicroTokens: 16384, Checkpointing: true, SDPA: true,
		RolloutRows: 64, RolloutGroup: 8, RolloutTokens: 4096, LogProbChunk: 4096, GPUMem: 80 << 30, Headroom: 0.08, MasterForWeight: true}
	for _, lora := range []int64{0, 16} {
		o.LoRARank, o.ConsolidateOwnStep = lora, false
		base, err := Plan(q7, o)
		if err != nil {
			t.Fatal(err)
		}
		o.ConsolidateOwnStep = true
		own, err := Plan(q7, o)
		if err != nil {
			t.Fatal(err)
		}
		l := planLines(own)
		mom := l["Adam moments (fp32 m, v)"]
		want := 8 * own.Params / 8
		if lora > 0 {
			want = 8 * q7.LoRAParamCount(lora, nil) / 8
		}
		if mom != want || l["consolidation's Adam moments (fp32 m, v)"] != mom || own.Update-base.Update != mom || own.Rollout-base.Rollout != mom {
			t.Fatalf("LoRA r %d: moments %d (want %d), consolidation's %d; update peak +%d, rollout peak +%d", lora, mom, want,
				l["consolidation's Adam moments (fp32 m, v)"], own.Update-base.Update, own.Rollout-base.Rollout)
		}
	}
}
