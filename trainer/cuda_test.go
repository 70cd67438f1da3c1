package trainer

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/cudatest"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/pool"
)

// The trainer's GPU tests: exact resume of GRPO and LANPO, greedy
// decoding against the CPU on a trained checkpoint, activation
// checkpointing, and the device
// a rank takes from LOCAL_RANK. Their names contain CUDA (the GPU script
// runs `go test -run CUDA`); cudatest skips them, saying why, without a
// CUDA build and device. Tolerances are starting points to be confirmed by
// the first GPU run: each test logs what it measured. TestMain sets
// CUBLAS_WORKSPACE_CONFIG before any CUDA work (see there).

// TestCUDAExactResume: on CUDA, 4 steps straight and 2 steps then
// --resume auto to 4 give bitwise-equal weights, optimizer and trainer
// state (and LANPO's pool, SDPO's teacher) and the same metrics, for GRPO,
// LANPO, SDPO and Critique-GRPO in fp32 and bf16. The trainer runs a CUDA run with torch's deterministic
// algorithms on; top-p sampling and the KL term's reference model are on
// here, so their CUDA paths (sort, cumsum, scatter; a second model) run
// under them too. The sampler/trainer log-prob gap each step saw is logged.
func TestCUDAExactResume(t *testing.T) {
	dev := cudatest.Device(t)
	for _, algo := range []string{AlgoGRPO, AlgoLANPO, AlgoSDPO, AlgoCritique} {
		for _, dtype := range []string{"float32", "bfloat16"} {
			t.Run(algo+"/"+dtype, func(t *testing.T) {
				sets := []string{"device=" + devName(dev), "dtype=" + dtype, "rollout.top_p=0.95", "algo.kl_beta=0.02", "algo.name=" + algo}
				config := func(more ...string) Config {
					if algo == AlgoLANPO {
						return lanpoConfig(t, append(sets, more...)...)
					}
					return tinyConfig(t, append(sets, more...)...)
				}
				straight := config()
				runGRPO(t, straight, "")
				split := config("stop_after_steps=2")
				runGRPO(t, split, "")
				runGRPO(t, split, "auto")
				a := filepath.Join(straight.RunDir, checkpointsDir, checkpointName(4))
				b := filepath.Join(split.RunDir, checkpointsDir, checkpointName(4))
				files := []string{"model.safetensors", optim.TensorsFile, optim.MetaFile, stateFile}
				switch algo {
				case AlgoLANPO:
					files = append(files, pool.File)
				case AlgoSDPO:
					files = append(files, teacherFile)
				}
				for _, f := range files {
					x, _ := os.ReadFile(filepath.Join(a, f))
					y, _ := os.ReadFile(filepath.Join(b, f))
					if len(x) == 0 || !bytes.Equal(x, y) {
						t.Errorf("%s differs between the straight and the resumed run", f)
					}
				}
				ma, mb := stableMetrics(t, straight.RunDir), stableMetrics(t, split.RunDir)
				if len(ma) != 4 || !reflect.DeepEqual(ma, mb) {
					t.Errorf("metrics differ:\n%v\n%v", ma, mb)
				}
				for i, m := range ma {
					t.Logf("step %d: sampler_trainer_logp_max_abs_diff %v, grad_norm %v, reward_mean %v", i+1, m["sampler_trainer_logp_max_abs_diff"], m["grad_norm"], m["reward_mean"])
				}
				if bytes.Equal(weights(t, a), weights(t, straight.Model)) {
					t.Error("4 steps left the weights unchanged: the test compares nothing")
				}
			})
		}
	}
}

// greedyMinMargin is the top-1 over top-2 logit lead below which the CPU
// and the GPU may rightly pick different greedy tokens: ten times the fp32
// forward's measured CPU/GPU logit difference is expected to be well under
// it (TestCUDAForwardMatchesCPU allows 1e-4 and logs what it sees). To be
// confirmed by measurement.
const greedyMinMargin = 1e-3

// greedyAgreement compares a greedy decode with a reference decode token
// by token while they must agree: at step k the reference's top-1 logit
// led its runner-up by margins[k]; below minMargin the pick is a near-tie
// that rounding decides, and everything after depends on it, so the
// comparison stops there. It returns how many tokens were compared, and an
// error at the first disagreement before a near-tie (a different token, or
// a decode that stopped earlier or later than the reference).
func greedyAgreement(want, got []int64, margins []float64, minMargin float64) (int, error) {
	for k := range want {
		if margins[k] < minMargin {
			return k, nil
		}
		if k >= len(got) {
			return k, fmt.Errorf("step %d: ended after %d tokens; the reference picked %d there with a margin of %.3g", k, len(got), want[k], margins[k])
		}
		if got[k] != want[k] {
			return k, fmt.Errorf("step %d: picked %d; the reference picked %d with a margin of %.3g", k, got[k], want[k], margins[k])
		}
	}
	if len(got) != len(want) {
		return len(want), fmt.Errorf("%d tokens; the reference stopped after %d", len(got), len(want))
	}
	return len(want), nil
}

func TestGreedyMarginRule(t *testing.T) {
	big := []float64{5, 5, 5, 5}
	for _, c := range []struct {
		name      string
		want, got []int64
		margins   []float64
		n         int
		err       string
	}{
		{"equal", []int64{1, 2, 3, 4}, []int64{1, 2, 3, 4}, big, 4, ""},
		{"differs with a clear lead", []int64{1, 2, 3, 4}, []int64{1, 2, 9, 4}, big, 2, "step 2: picked 9; the reference picked 3"},
		{"differs at a near-tie", []int64{1, 2, 3, 4}, []int64{1, 2, 9, 7}, []float64{5, 5, 1e-4, 5}, 2, ""},
		{"a near-tie ends the comparison", []int64{1, 2, 3, 4}, []int64{1, 2, 3, 7}, []float64{5, 1e-5, 5, 5}, 1, ""},
		{"stops early", []int64{1, 2, 3, 4}, []int64{1, 2}, big, 2, "step 2: ended after 2 tokens"},
		{"runs on", []int64{1, 2}, []int64{1, 2, 3}, big, 2, "3 tokens; the reference stopped after 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := greedyAgreement(c.want, c.got, c.margins, greedyMinMargin)
			if n != c.n || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Errorf("compared %d, %v; want %d, %q", n, err, c.n, c.err)
			}
		})
	}
}

// greedyMargins is, for each token of ids (a greedy decode after prompt),
// the lead of the top-1 logit over the top-2 where m picked it, from one
// full forward over prompt + ids.
func greedyMargins(t *testing.T, m *model.Model, prompt, ids []int64) []float64 {
	t.Helper()
	var s tensor.Scope
	defer s.Close()
	seq := append(append([]int64(nil), prompt...), ids...)
	n := int64(len(seq))
	pos, ones := make([]int64, n), make([]int64, n)
	for i := range pos {
		pos[i], ones[i] = int64(i), 1
	}
	shape := []int64{1, n}
	h, err := m.Forward(&s, tensor.FromSlice(&s, seq, shape, m.Device), tensor.FromSlice(&s, pos, shape, m.Device), tensor.FromSlice(&s, ones, shape, m.Device), nil)
	if err != nil {
		t.Fatal(err)
	}
	logits := tensor.Float64s(m.Logits(&s, h)) // [1, n, V]
	v := int(m.Config.VocabSize)
	margins := make([]float64, len(ids))
	for k := range ids {
		row := logits[(len(prompt)-1+k)*v : (len(prompt)+k)*v]
		top1, top2 := math.Inf(-1), math.Inf(-1)
		for _, x := range row {
			if x > top1 {
				top1, top2 = x, top1
			} else if x > top2 {
				top2 = x
			}
		}
		margins[k] = top1 - top2
	}
	return margins
}

// TestCUDAGreedyMatchesCPU: greedy decoding of the warmed-up (SFT-trained)
// tiny model on CUDA in fp32 picks the CPU's tokens, compared while the
// CPU's top-1 logit leads by at least greedyMinMargin (greedyAgreement):
// random weights would give near-ties everywhere, a trained model few.
// Where they agree, the recorded log-probs agree to 1e-4 (fp32; to be
// confirmed). At least half the tokens must have been compared.
func TestCUDAGreedyMatchesCPU(t *testing.T) {
	dev := cudatest.Device(t)
	ckpt := warmTiny(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cfg := tinyConfig(t)
	tk, err := tokenizer.Load(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := LoadProblems(cfg.Data.Train, false)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []model.Request
	for _, p := range problems[:min(len(problems), 12)] {
		ids, err := cfg.PromptFormat().SolveIDs(tk, p.Problem)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, model.Request{PromptIDs: ids, Samples: 1})
	}
	load := func(d gotch.Device) *model.Model {
		m, err := model.Load(ckpt, model.LoadOptions{Device: d, DType: gotch.Float})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	cpu, gpu := load(gotch.CPU), load(dev)
	eos, err := cpu.EOSTokenIDs()
	if err != nil {
		t.Fatal(err)
	}
	p := model.SamplingParams{MaxNewTokens: 24, StopIDs: eos}
	want, err := cpu.Generate(reqs, p, model.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := gpu.Generate(reqs, p, model.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	compared, total, nearTies := 0, 0, 0
	worstLogp, smallest := 0.0, math.Inf(1)
	for i := range want {
		margins := greedyMargins(t, cpu, reqs[i].PromptIDs, want[i].IDs)
		n, err := greedyAgreement(want[i].IDs, got[i].IDs, margins, greedyMinMargin)
		if err != nil {
			t.Errorf("prompt %d (%s): %v\nCPU %v\nGPU %v", i, problems[i].ID, err, want[i].IDs, got[i].IDs)
		}
		compared, total = compared+n, total+len(want[i].IDs)
		if n < len(want[i].IDs) {
			nearTies++
		}
		for k := 0; k < n; k++ {
			smallest = math.Min(smallest, margins[k])
			if d := math.Abs(float64(want[i].Logprobs[k] - got[i].Logprobs[k])); d > worstLogp || math.IsNaN(d) {
				worstLogp = d
			}
		}
	}
	t.Logf("%d of %d greedy tokens compared (%d decodes stopped at a near-tie under %g); smallest margin compared %.3g; max |Δ log-prob| %.3g",
		compared, total, nearTies, greedyMinMargin, smallest, worstLogp)
	if compared*2 < total {
		t.Errorf("only %d of %d tokens were compared: too many near-ties for the test to mean much", compared, total)
	}
	if !(worstLogp <= 1e-4) {
		t.Errorf("recorded log-probs of the same greedy tokens differ by %g between the CPU and %s (limit 1e-4)", worstLogp, devName(dev))
	}
}

// TestCUDAActivationCheckpointingGivesTheSameUpdate: GRPO's update on CUDA
// in fp32 with train.activation_checkpointing has the loss and the
// gradient norm of the plain update, in every aggregation mode with the KL
// term. Not bitwise: the checkpointed forward runs without grad and
// recomputes each layer with grad, and attention may take another kernel
// each time. Relative tolerances: loss 1e-5, gradient norm 1e-4 (fp32
// rounding over a few thousand terms; to be confirmed). Weights are only
// logged: AdamW's first step moves every weight by about ±lr whatever the
// size of its gradient, so a gradient that is zero up to rounding can
// flip a weight's step.
func TestCUDAActivationCheckpointingGivesTheSameUpdate(t *testing.T) {
	dev := cudatest.Device(t)
	rolls := madeUpRollouts(12, 21)
	for _, mode := range []string{AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		t.Run(mode, func(t *testing.T) {
			common := []string{"device=" + devName(dev), "dtype=float32", "algo.loss_agg_mode=" + mode, "algo.kl_beta=0.05", "algo.micro_batch_size=5"}
			plain := updateWith(t, rolls, common...)
			ckpt := updateWith(t, rolls, append(common, "train.activation_checkpointing=true")...)
			dLoss := math.Abs(plain.met.Loss-ckpt.met.Loss) / math.Max(1, math.Abs(plain.met.Loss))
			dNorm := math.Abs(plain.met.GradNorm-ckpt.met.GradNorm) / plain.met.GradNorm
			t.Logf("loss %.8g vs %.8g (relative %.3g), grad norm %.8g vs %.8g (relative %.3g), max |Δw| after the step %.3g",
				plain.met.Loss, ckpt.met.Loss, dLoss, plain.met.GradNorm, ckpt.met.GradNorm, dNorm, maxAbsDiff(plain.w, ckpt.w))
			if plain.met.GradNorm < 1e-3 {
				t.Fatalf("grad norm %g: the test compares nothing", plain.met.GradNorm)
			}
			if !(dLoss <= 1e-5) || !(dNorm <= 1e-4) {
				t.Errorf("checkpointing changed the update: loss by %g, grad norm by %g (relative; limits 1e-5, 1e-4)", dLoss, dNorm)
			}
		})
	}
}

// TestCUDADeviceFromLocalRank: under a torchrun-style launch, device cuda
// is the GPU of LOCAL_RANK, and UseDevice makes it the thread's current
// device; a LOCAL_RANK past the visible GPUs is an error naming LOCAL_RANK
// and the count; and a run's session leaves its device current and torch's
// deterministic algorithms on, restoring their setting when it closes.
func TestCUDADeviceFromLocalRank(t *testing.T) {
	cudatest.Real(t)
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	n := cudatest.Count(t)
	t.Cleanup(func() { csrc.SetCUDADevice(0) }) // on this thread: cleanups run last-registered first
	current := func() int {
		t.Helper()
		d, ok, err := csrc.CurrentCUDADevice()
		if err != nil || !ok {
			t.Fatalf("current CUDA device: %v (supported %v)", err, ok)
		}
		return d
	}
	for lr := min(n, 2) - 1; lr >= 0; lr-- {
		t.Setenv("LOCAL_RANK", strconv.Itoa(lr))
		d, err := UseDevice("cuda")
		if err != nil || int(d.CInt()) != lr {
			t.Fatalf("LOCAL_RANK=%d: device %v, %v", lr, d, err)
		}
		if cur := current(); cur != lr {
			t.Errorf("LOCAL_RANK=%d: current CUDA device %d", lr, cur)
		}
	}
	t.Setenv("LOCAL_RANK", strconv.Itoa(n))
	_, err := UseDevice("cuda")
	for _, want := range []string{fmt.Sprintf("LOCAL_RANK=%d", n), fmt.Sprintf("%d CUDA device(s) are visible", n)} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LOCAL_RANK=%d with %d GPUs: %v; want an error saying %q", n, n, err, want)
		}
	}
	if _, err := UseDevice(fmt.Sprintf("cuda:%d", n)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("device cuda:%d, but %d CUDA device(s)", n, n)) {
		t.Errorf("cuda:%d with %d GPUs: %v", n, n, err)
	}

	last := n - 1
	t.Setenv("LOCAL_RANK", strconv.Itoa(last))
	csrc.SetCUDADevice(0)
	wasOn, wasWarn := csrc.Deterministic()
	s, err := openSession(tinyConfig(t, "device=cuda"), "", "grpo", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur := current(); cur != last || int(s.m.Device.CInt()) != last {
		t.Errorf("LOCAL_RANK=%d: the session's model is on %s, current device %d", last, devName(s.m.Device), cur)
	}
	if on, warn := csrc.Deterministic(); !on || warn {
		t.Errorf("a CUDA session runs with deterministic algorithms %v (warn only %v), want on", on, warn)
	}
	s.Close()
	if on, warn := csrc.Deterministic(); on != wasOn || warn != wasWarn {
		t.Errorf("after the session: deterministic algorithms %v/%v, before it %v/%v", on, warn, wasOn, wasWarn)
	}
}
