package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/optim"
)

// TestLoRAExactResume: GRPO with LoRA (and a KL term, whose reference is
// the policy with its adapters off) resumes bit for bit; checkpoints hold
// the adapters in PEFT's format and no model; the optimizer holds the
// adapters alone; the adapters learned and the reference is the base: the
// first step's KL is exactly 0 (B starts at 0), later ones are not.
func TestLoRAExactResume(t *testing.T) {
	sets := []string{"lora.r=4", "lora.alpha=8", "algo.kl_beta=0.02", "optim.lr=1e-2"}
	straight, _ := runStraightAndResumed(t, []string{model.AdapterWeightsFile, model.AdapterConfigFile, optim.TensorsFile, optim.MetaFile, stateFile}, sets...)
	a := filepath.Join(straight.RunDir, checkpointsDir, checkpointName(4))
	ma := stableMetrics(t, straight.RunDir)
	if _, err := os.Stat(filepath.Join(a, "model.safetensors")); err == nil {
		t.Error("a LoRA checkpoint holds the whole model")
	}
	var meta struct{ Params []string }
	raw, _ := os.ReadFile(filepath.Join(a, optim.MetaFile))
	if err := json.Unmarshal(raw, &meta); err != nil || len(meta.Params) != 2*7*2 {
		t.Fatalf("optimizer state for %d tensors (%v), want 28 adapter tensors", len(meta.Params), err)
	}
	for _, p := range meta.Params {
		if !strings.Contains(p, ".lora_") {
			t.Errorf("the optimizer holds %s", p)
		}
	}
	if kl := ma[0]["kl"].(float64); kl != 0 {
		t.Errorf("step 1's KL is %g: the reference is not the base (adapters off, B = 0)", kl)
	}
	if kl := ma[3]["kl"].(float64); kl <= 0 {
		t.Errorf("step 4's KL is %g: the adapters did not move the policy", kl)
	}
	// The checkpoint is an adapter PEFT reads, named after the run's base.
	c, base, err := model.ReadAdapterConfig(a)
	if err != nil || c.R != 4 || c.Alpha != 8 || !filepath.IsAbs(base) {
		t.Fatalf("adapter config %+v, base %q: %v", c, base, err)
	}
	m, err := model.LoadWithAdapter(a, "", model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()

	// From lora.init_from (that checkpoint), the reference is the initial
	// adapter: step 1's KL is 0 again, where the base would not give 0.
	from := tinyConfig(t, "lora.init_from="+a, "algo.kl_beta=0.02", "total_steps=2")
	runGRPO(t, from, "")
	if kl := stableMetrics(t, from.RunDir)[0]["kl"].(float64); kl != 0 {
		t.Errorf("from lora.init_from, step 1's KL is %g: the reference is not the initial adapter", kl)
	}
	// …and a resume of it keeps that reference.
	fromSplit := tinyConfig(t, "lora.init_from="+a, "algo.kl_beta=0.02", "total_steps=2", "stop_after_steps=1")
	runGRPO(t, fromSplit, "")
	runGRPO(t, fromSplit, "auto")
	if x, y := stableMetrics(t, from.RunDir), stableMetrics(t, fromSplit.RunDir); !reflect.DeepEqual(x, y) {
		t.Errorf("resumed from lora.init_from, metrics differ:\n%v\n%v", x, y)
	}
}

// TestLoRASFTDropoutResume: SFT with LoRA dropout resumes bit for bit (its
// masks are seeded by step), and dropout changes the update.
func TestLoRASFTDropoutResume(t *testing.T) {
	sft := func(sets ...string) Config {
		cfg, err := LoadConfig("../configs/tiny-sft.yaml", append([]string{"run_dir=" + filepath.Join(t.TempDir(), "sft"),
			"data.train=../configs/data/tiny-arith-sft.jsonl", "data.eval=", "total_steps=4", "checkpoint.every=1", "checkpoint.keep=10",
			"lora.r=4", "optim.lr=1e-2"}, sets...))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	run := func(cfg Config, resume string) {
		if err := RunSFT(context.Background(), cfg, resume, RunOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	straight, split, plain := sft("lora.dropout=0.1"), sft("lora.dropout=0.1", "stop_after_steps=2"), sft()
	run(straight, "")
	run(split, "")
	run(split, "auto")
	run(plain, "")
	adapter := func(cfg Config) []byte {
		b, err := os.ReadFile(filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(4), model.AdapterWeightsFile))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(adapter(straight), adapter(split)) {
		t.Error("with dropout, the resumed SFT run's adapters differ from the straight run's")
	}
	if bytes.Equal(adapter(straight), adapter(plain)) {
		t.Error("dropout 0.1 left the update unchanged")
	}
}

// TestLoRAConfigErrors: bad lora keys are named.
func TestLoRAConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"lora.r=-1"}, "config key lora.r"},
		{[]string{"lora.r=4", "lora.target_modules=[q_proj, lm_head]"}, "config key lora.target_modules"},
		{[]string{"lora.r=4", "lora.init=pissa"}, "config key lora.init"},
		{[]string{"lora.r=4", "lora.dropout=1.5"}, "config key lora.dropout"},
		{[]string{"lora.r=4", "lora.dropout=0.1", "train.activation_checkpointing=true"}, "config key lora.dropout"},
		{[]string{"lora.r=4", "algo.kl_beta=0.1", "algo.ref_device=cpu"}, "config key algo.ref_device"},
	} {
		if _, err := LoadConfig("../configs/tiny-grpo.yaml", tc.sets); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.sets, err, tc.want)
		}
	}
	cfg := tinyConfig(t, "lora.r=4", "lora.dropout=0.1")
	if err := RunGRPO(context.Background(), cfg, "", RunOptions{}); err == nil || !strings.Contains(err.Error(), "config key lora.dropout") {
		t.Errorf("dropout in GRPO: %v", err)
	}
	cfg = tinyConfig(t, "lora.init_from=../model/testdata/lora/default")
	if err := RunGRPO(context.Background(), cfg, "", RunOptions{}); err == nil || !strings.Contains(err.Error(), "lora.init_from") {
		t.Errorf("an adapter for another model: %v", err)
	}
}

// countingComm counts the bytes a rank hands to gradient collectives.
type countingComm struct {
	dist.Comm
	bytes int64
}

func (c *countingComm) AllReduceSum(t *ts.Tensor) error {
	c.bytes += int64(t.Numel()) * int64(t.DType().Size())
	return c.Comm.AllReduceSum(t)
}

func (c *countingComm) ReduceScatterSum(in, out *ts.Tensor) error {
	c.bytes += int64(in.Numel()) * int64(in.DType().Size())
	return c.Comm.ReduceScatterSum(in, out)
}

// TestDataParallelLoRA: under LoRA, 2 ranks (plain and ZeRO-2 layer by
// layer) give one rank's adapter gradients and weights, and only the
// adapters' gradients cross the ranks: the bytes reduced per update are
// the adapters' (plus the step's few metric sums), a small share of full
// training's.
func TestDataParallelLoRA(t *testing.T) {
	rolls := madeUpRollouts(10, 5)
	lora := []string{"lora.r=4", "lora.init=gaussian"}
	reduced := func(ranks int, sets ...string) ([]dpUpdate, int64) {
		dir := t.TempDir()
		res := make([]dpUpdate, ranks)
		var bytes int64
		var mu sync.Mutex
		errs := onRanks(ranks, func(mc dist.Comm) (err error) {
			cc := &countingComm{Comm: mc}
			res[mc.Rank()], err = updateOnRank(t, cc, dir, rolls, nil, sets...)
			if mc.Rank() == 0 {
				mu.Lock()
				bytes = cc.bytes
				mu.Unlock()
			}
			return err
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return res, bytes
	}
	one, _ := reduced(1, lora...)
	var gmax float64
	for _, g := range one[0].grads {
		gmax = max(gmax, maxAbsDiff(g, make([]float64, len(g))))
	}
	if gmax < 1e-4 || len(one[0].grads) != 28 {
		t.Fatalf("%d adapter gradients, largest %g: the test compares nothing", len(one[0].grads), gmax)
	}
	var adapterBytes int64
	for _, g := range one[0].grads {
		adapterBytes += 4 * int64(len(g))
	}
	_, fullBytes := reduced(2)
	for _, sets := range [][]string{nil, {"dist.zero_stage=2", "train.activation_checkpointing=true"}} {
		res, bytes := reduced(2, append(sets, lora...)...)
		for r, u := range res {
			for name, g := range u.grads {
				want := one[0].grads[name][u.lo[name] : u.lo[name]+int64(len(g))]
				if d := maxAbsDiff(g, want); d > 2e-6*gmax {
					t.Fatalf("%v rank %d: gradient of %s differs by %g", sets, r, name, d)
				}
			}
			if d := maxAbsDiff(u.w, res[0].w); d != 0 {
				t.Fatalf("%v rank %d: adapters differ from rank 0's by %g", sets, r, d)
			}
		}
		t.Logf("%v: %d bytes reduced per update by rank 0 under LoRA, %d in full training (%.1f%%); adapter gradients %d bytes",
			sets, bytes, fullBytes, 100*float64(bytes)/float64(fullBytes), adapterBytes)
		if bytes < adapterBytes || bytes > adapterBytes+4096 || fullBytes < 10*adapterBytes {
			t.Errorf("%v: %d bytes reduced under LoRA (adapters %d), %d in full training", sets, bytes, adapterBytes, fullBytes)
		}
	}
}
