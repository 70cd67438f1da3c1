package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"math"
	"math/rand"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/internal/tensorboard"
	"github.com/lanpo-rl/lanpo/optim"
)

func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.WarnLevel) // the runs log every checkpoint
	if mnt := os.Getenv(fullDiskVar); mnt != "" {
		zerolog.SetGlobalLevel(zerolog.Disabled)
		os.Exit(fullDiskChild(mnt))
	}
	// A CUDA run turns torch's deterministic algorithms on, under which
	// cuBLAS needs CUBLAS_WORKSPACE_CONFIG; torch reads it once, at the
	// process's first matrix product on CUDA, which in this binary may be a
	// test's own (TestCUDAGreedyMatchesCPU) before any run's. So set it
	// before any test runs (nothing reads it on the CPU).
	csrc.DeterministicCuBLASConfig()
	code := m.Run()
	if warm.dir != "" {
		os.RemoveAll(warm.dir)
	}
	os.Exit(code)
}

// warm is the package's warmed-up tiny model: the built-in tiny model after
// 60 SFT steps on arithmetic chats, made once. From random weights GRPO
// earns no reward (the verifier no longer counts stray digits), so every
// gradient would be zero and resume tests would compare weights that never
// move; from this checkpoint some answers are right and the updates are
// real.
var warm struct {
	once sync.Once
	dir  string // temporary directory holding the run
	ckpt string
	err  error
}

func warmTiny(t *testing.T) string {
	t.Helper()
	warm.once.Do(func() {
		if warm.dir, warm.err = os.MkdirTemp("", "lanpo-warm-tiny-"); warm.err != nil {
			return
		}
		var cfg Config
		cfg, warm.err = LoadConfig("../configs/tiny-sft.yaml", []string{"run_dir=" + filepath.Join(warm.dir, "sft"),
			"data.train=../configs/data/tiny-arith-sft.jsonl", "data.eval=", "total_steps=60", "checkpoint.every=0", "checkpoint.keep=1"})
		if warm.err == nil {
			warm.err = RunSFT(context.Background(), cfg, "", RunOptions{})
		}
		warm.ckpt = filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(cfg.TotalSteps))
	})
	if warm.err != nil {
		t.Fatalf("warming the tiny model: %v", warm.err)
	}
	return warm.ckpt
}

// tinyConfig is configs/tiny-grpo.yaml from the warmed-up tiny model, with
// the run in a temporary directory and 4 steps.
func tinyConfig(t *testing.T, sets ...string) Config {
	t.Helper()
	cfg, err := LoadConfig("../configs/tiny-grpo.yaml", append([]string{
		"run_dir=" + filepath.Join(t.TempDir(), "run"), "total_steps=4", "checkpoint.every=1", "checkpoint.keep=10",
		"data.train=../configs/data/tiny-arith.jsonl", "model=" + warmTiny(t),
	}, sets...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runGRPO runs a GRPO job that must succeed.
func runGRPO(t *testing.T, cfg Config, resume string) {
	t.Helper()
	if err := RunGRPO(context.Background(), cfg, resume, RunOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stableMetrics reads metrics.jsonl without the timing fields.
func stableMetrics(t *testing.T, runDir string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDir, metricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "seconds")
		delete(m, "tokens_per_s")
		out = append(out, m)
	}
	return out
}

// metricSum is a metrics.jsonl key summed over the run's steps.
func metricSum(t *testing.T, runDir, key string) (sum float64) {
	t.Helper()
	for _, m := range stableMetrics(t, runDir) {
		x, _ := m[key].(float64)
		sum += x
	}
	return sum
}

func weights(t *testing.T, ckpt string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ckpt, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runStraightAndResumed runs tinyConfig with sets 4 steps straight, and 2
// steps then --resume auto to 4, and requires step 4's files and the
// metrics to be the same bytes in both; it returns both configs.
func runStraightAndResumed(t *testing.T, files []string, sets ...string) (straight, split Config) {
	t.Helper()
	straight = tinyConfig(t, sets...)
	runGRPO(t, straight, "")
	split = tinyConfig(t, append(sets, "stop_after_steps=2")...)
	runGRPO(t, split, "")
	if got := completeCheckpoints(filepath.Join(split.RunDir, checkpointsDir)); len(got) != 2 {
		t.Fatalf("after stop_after_steps=2: checkpoints %v", got)
	}
	runGRPO(t, split, "auto")
	a := filepath.Join(straight.RunDir, checkpointsDir, checkpointName(4))
	b := filepath.Join(split.RunDir, checkpointsDir, checkpointName(4))
	for _, f := range files {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Fatalf("%s differs between the straight and the resumed run", f)
		}
	}
	ma, mb := stableMetrics(t, straight.RunDir), stableMetrics(t, split.RunDir)
	if len(ma) != 4 || !reflect.DeepEqual(ma, mb) {
		t.Fatalf("metrics differ:\n%v\n%v", ma, mb)
	}
	return straight, split
}

// TestExactResume: 4 steps straight, and 2 steps (stop_after_steps) then
// --resume auto to 4, give bitwise-identical weights, optimizer state and
// metrics.
func TestExactResume(t *testing.T) {
	straight, split := runStraightAndResumed(t, []string{"model.safetensors", optim.TensorsFile, optim.MetaFile, stateFile})
	a := filepath.Join(straight.RunDir, checkpointsDir, checkpointName(4))
	// The resumed process's TensorBoard events restart the series at the
	// first redone step (TensorBoard drops the first file's steps from
	// there: internal/tensorboard's TestRestartMarkerPurgesInTensorBoard).
	events, _ := filepath.Glob(filepath.Join(split.RunDir, tensorboardDir, "events.out.tfevents.*"))
	if len(events) != 2 {
		t.Fatalf("events files %v, want one per process", events)
	}
	sort.Strings(events)
	if starts, err := tensorboard.ReadSessionStarts(events[1]); err != nil || len(starts) != 1 || starts[0] != 3 {
		t.Errorf("the resumed run's events restart at %v (%v), want step 3", starts, err)
	}
	// The run learned something: the weights moved.
	if bytes.Equal(weights(t, a), weights(t, straight.Model)) {
		t.Fatal("4 steps left the weights unchanged")
	}
}

// A crash while a checkpoint is written leaves a temporary directory or a
// checkpoint whose files do not match its manifest; resume ignores both,
// takes the newest complete one and ends where an uninterrupted run ends.
func TestResumeSkipsIncompleteCheckpoints(t *testing.T) {
	straight := tinyConfig(t)
	runGRPO(t, straight, "")
	crashed := tinyConfig(t, "stop_after_steps=3")
	runGRPO(t, crashed, "")
	root := filepath.Join(crashed.RunDir, checkpointsDir)
	// Step 3's checkpoint was being rewritten when the process died: its
	// weights are cut short. A later temporary directory is half written.
	step3 := filepath.Join(root, checkpointName(3))
	w := weights(t, step3)
	if err := os.WriteFile(filepath.Join(step3, "model.safetensors"), w[:len(w)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(root, tmpPrefix+checkpointName(4)+"-x")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tmp, "model.safetensors"), []byte("partial"), 0o644)
	if _, err := ResolveResume(crashed.RunDir, step3); err == nil || !strings.Contains(err.Error(), "not a complete checkpoint") {
		t.Fatalf("an explicit incomplete checkpoint: %v", err)
	}
	got, err := ResolveResume(crashed.RunDir, "auto")
	if err != nil || got != filepath.Join(root, checkpointName(2)) {
		t.Fatalf("resume picked %q, %v", got, err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatal("the temporary directory was not removed")
	}
	runGRPO(t, crashed, "auto")
	if !bytes.Equal(weights(t, filepath.Join(root, checkpointName(4))), weights(t, filepath.Join(straight.RunDir, checkpointsDir, checkpointName(4)))) {
		t.Fatal("the resumed run ended with other weights")
	}
}

func TestInterruptSavesAndSaysSo(t *testing.T) {
	cfg := tinyConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := RunGRPO(ctx, cfg, "", RunOptions{}); err != ErrInterrupted {
		t.Fatalf("err = %v", err)
	}
	if got := completeCheckpoints(filepath.Join(cfg.RunDir, checkpointsDir)); len(got) != 1 {
		t.Fatalf("checkpoints %v", got)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	base := "run_dir: r\nmodel: builtin:tiny\ntotal_steps: 2\ndata:\n  train: x.jsonl\n"
	for _, c := range []struct {
		body string
		sets []string
		want string
	}{
		{base + "algo:\n  clip_hgh: 0.3\n", nil, "line 7: field clip_hgh not found"},
		{base, []string{"algo.loss_agg_mode=sum"}, "algo.loss_agg_mode"},
		{base, []string{"rollout.top_p=0"}, "rollout.top_p"},
		{base, []string{"nope.x=1"}, "--set"},
		{base, []string{"novalue"}, "want key=value"},
		{"run_dir: r\n", nil, "config key model: is required"},
		{base, []string{"total_steps=-1"}, "total_steps"},
		{base, []string{"algo.name=lanpo", "lanpo.lesson_order=best"}, `config key lanpo.lesson_order: "best": want recency or outcome`},
	} {
		_, err := LoadConfig(write(c.body), c.sets)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %v: err = %v, want %q", c.body, c.sets, err, c.want)
		}
	}
	// A config naming only the model: run_dir is runs/<the file's name>.
	if cfg, err := LoadConfig(write("model: builtin:tiny\n"), nil); err != nil || cfg.RunDir != filepath.Join("runs", "c") {
		t.Errorf("a config without run_dir: run_dir %q, %v", cfg.RunDir, err)
	}
	cfg, err := LoadConfig(write(base), []string{"algo.clip_high=0.35", "rollout.max_new_tokens=7"})
	if err != nil || *cfg.Algo.ClipHigh != 0.35 || cfg.Rollout.MaxNewTokens != 7 || *cfg.Algo.ClipLow != 0.2 {
		t.Fatalf("overrides: %+v %v", cfg.Algo, err)
	}
	// Unset clip ranges are the policy loss's own; a set one stays.
	for _, c := range []struct {
		sets    []string
		lo, hi  float64
		wantErr string
	}{
		{nil, PPOClipLow, PPOClipHigh, ""},
		{[]string{"algo.policy_loss=gspo"}, GSPOClipLow, GSPOClipHigh, ""},
		{[]string{"algo.policy_loss=cispo"}, CISPOClipLow, CISPOClipHigh, ""},
		{[]string{"algo.policy_loss=gspo", "algo.clip_high=1e-3"}, GSPOClipLow, 1e-3, ""},
		{[]string{"algo.policy_loss=ppo", "algo.clip_low=1"}, 0, 0, "algo.clip_low"},
		{[]string{"algo.policy_loss=grpo"}, 0, 0, "algo.policy_loss"},
	} {
		cfg, err := LoadConfig(write(base), c.sets)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: %v, want an error naming %s", c.sets, err, c.wantErr)
			}
			continue
		}
		if err != nil || *cfg.Algo.ClipLow != c.lo || *cfg.Algo.ClipHigh != c.hi {
			t.Errorf("%v: clip %v/%v, want %v/%v (%v)", c.sets, *cfg.Algo.ClipLow, *cfg.Algo.ClipHigh, c.lo, c.hi, err)
		}
	}
	if cfg.LANPO.LessonOrder != "recency" {
		t.Errorf("lanpo.lesson_order resolves to %q, want recency", cfg.LANPO.LessonOrder)
	}
	if cfg, err := LoadConfig(write(base), []string{"algo.name=lanpo", "lanpo.lesson_order=outcome"}); err != nil || cfg.LANPO.LessonOrder != "outcome" {
		t.Errorf("lanpo.lesson_order=outcome: %q, %v", cfg.LANPO.LessonOrder, err)
	}
}

func TestBadDatasetLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d.jsonl")
	os.WriteFile(p, []byte("{\"problem\":\"1+1\",\"answer\":\"2\"}\nnot json\n{\"problem\":\"x\"}\n"), 0o644)
	if _, err := LoadProblems(p, false); err == nil || !strings.Contains(err.Error(), p+":2") {
		t.Fatalf("err = %v", err)
	}
	got, err := LoadProblems(p, true)
	if err != nil || len(got) != 1 {
		t.Fatalf("skip: %v %v", got, err)
	}
	// Two problems under one id: both lines named; with skipping, the
	// first stays.
	os.WriteFile(p, []byte("{\"id\":\"a\",\"problem\":\"1+1\",\"answer\":\"2\"}\n{\"id\":\"b\",\"problem\":\"2+2\",\"answer\":\"4\"}\n"+
		"{\"id\":\"a\",\"problem\":\"3+3\",\"answer\":\"6\"}\n"), 0o644)
	if _, err := LoadProblems(p, false); err == nil || !strings.Contains(err.Error(), p+":3") || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("duplicate id: err = %v", err)
	}
	if got, err := LoadProblems(p, true); err != nil || len(got) != 2 || got[0].Problem != "1+1" {
		t.Fatalf("duplicate id skipped: %v %v", got, err)
	}
}

// TestMicroBatchesGiveTheSameUpdate: one update over 16 rollouts as 1
// micro-batch of 16 or 8 micro-batches of 2 gives the same gradient norm,
// loss and weights (fp64, ≤ 1e-10), for every loss aggregation mode, with
// the KL term on. The rollouts are made up (random responses, advantages
// and sampler log-probs) so every token carries gradient.
func TestMicroBatchesGiveTheSameUpdate(t *testing.T) {
	rolls := madeUpRollouts(16, 9)
	for _, mode := range []string{AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		t.Run(mode, func(t *testing.T) {
			common := []string{"algo.loss_agg_mode=" + mode, "algo.kl_beta=0.05"}
			whole := updateWith(t, rolls, append(common, "algo.micro_batch_size=16")...)
			split := updateWith(t, rolls, append(common, "algo.micro_batch_size=2")...)
			// Packed by length under a token budget (rows are 4-12 tokens).
			packed := updateWith(t, rolls, append(common, "algo.max_tokens_per_micro_batch=30")...)
			if d := maxAbsDiff(whole.w, packed.w); d > 1e-10 || math.Abs(whole.met.GradNorm-packed.met.GradNorm) > 1e-10 {
				t.Fatalf("token-budget micro-batches changed the update: weights by %g, grad norm %v vs %v", d, whole.met.GradNorm, packed.met.GradNorm)
			}
			if whole.met.GradNorm < 1e-3 {
				t.Fatalf("grad norm %g: the test compares nothing", whole.met.GradNorm)
			}
			for _, c := range []struct {
				name string
				a, b float64
			}{{"loss", whole.met.Loss, split.met.Loss}, {"grad_norm", whole.met.GradNorm, split.met.GradNorm},
				{"kl", whole.met.KL, split.met.KL}, {"clip_frac", whole.met.ClipFrac, split.met.ClipFrac}} {
				if math.Abs(c.a-c.b) > 1e-10*math.Max(1, math.Abs(c.a)) {
					t.Fatalf("%s: %v with one micro-batch, %v with eight", c.name, c.a, c.b)
				}
			}
			t.Logf("grad norm %.6g vs %.6g, max |Δw| %g", whole.met.GradNorm, split.met.GradNorm, maxAbsDiff(whole.w, split.w))
			if d := maxAbsDiff(whole.w, split.w); d > 1e-10 {
				t.Fatalf("micro-batching changed the weights by %g", d)
			}
		})
	}
}

// TestOverlongMask: with algo.overlong_mask, truncated rollouts contribute
// exactly nothing in every aggregation mode — the update equals the one
// over the batch without them — and without it they do contribute.
func TestOverlongMask(t *testing.T) {
	rolls := madeUpRollouts(12, 4)
	var finished []rollout
	for i := range rolls {
		if rolls[i].Truncated = i%3 == 1; !rolls[i].Truncated {
			finished = append(finished, rolls[i])
		}
	}
	for _, mode := range []string{AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		t.Run(mode, func(t *testing.T) {
			common := []string{"algo.loss_agg_mode=" + mode, "algo.kl_beta=0.05", "algo.micro_batch_size=5"}
			masked := updateWith(t, rolls, append(common, "algo.overlong_mask=true")...)
			without := updateWith(t, finished, common...)
			unmasked := updateWith(t, rolls, common...)
			if d := maxAbsDiff(masked.w, without.w); d > 1e-12 || math.Abs(masked.met.GradNorm-without.met.GradNorm) > 1e-12 {
				t.Fatalf("masked truncated rollouts moved the weights by %g (grad norm %v vs %v without them)", d, masked.met.GradNorm, without.met.GradNorm)
			}
			if d := maxAbsDiff(masked.w, unmasked.w); d < 1e-8 {
				t.Fatalf("the truncated rollouts change nothing even unmasked (%g): the test compares nothing", d)
			}
		})
	}
}

// madeUpRollouts are n rollouts with random prompts, responses, advantages
// and sampler/reference log-probs, so every token carries gradient.
func madeUpRollouts(n int, seed int64) []rollout {
	rng := rand.New(rand.NewSource(seed))
	rolls := make([]rollout, n)
	for i := range rolls {
		r := &rolls[i]
		r.promptIDs = []int64{int64(1 + rng.Intn(200)), int64(1 + rng.Intn(200)), int64(1 + rng.Intn(200))}
		n := 1 + rng.Intn(9)
		for k := 0; k < n; k++ {
			r.ids = append(r.ids, int64(1+rng.Intn(250)))
			r.oldLogp = append(r.oldLogp, float64(float32(-5.6+0.3*rng.NormFloat64())))
			r.refLogp = append(r.refLogp, float64(float32(-5.6+0.3*rng.NormFloat64())))
		}
		r.adv = rng.NormFloat64()
	}
	return rolls
}

type updateResult struct {
	met StepMetrics
	w   []float64
}

// updateWith runs one update of the tiny model (float64) over rolls with
// the config overrides sets and returns its metrics and weights.
func updateWith(t *testing.T, rolls []rollout, sets ...string) updateResult {
	t.Helper()
	cfg := tinyConfig(t, append([]string{"dtype=float64"}, sets...)...)
	s, err := openSession(cfg, "", "grpo", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &grpoRun{session: s}
	batch := make([]*rollout, len(rolls))
	for i := range rolls {
		r := rolls[i]
		batch[i] = &r
	}
	var met StepMetrics
	if err := g.update(batch, nil, termRows{}, &met); err != nil {
		t.Fatal(err)
	}
	var w []float64
	for _, p := range s.m.Params() {
		w = append(w, tensor.Float64s(p.Tensor)...)
	}
	return updateResult{met, w}
}

func maxAbsDiff(a, b []float64) float64 {
	var worst float64
	for i := range a {
		worst = math.Max(worst, math.Abs(a[i]-b[i]))
	}
	return worst
}

// NaN/Inf steps are skipped with a counter; max_bad_steps in a row abort
// the run with an error naming the step.
func TestBadLossStepsAreSkippedThenAbort(t *testing.T) {
	cfg := tinyConfig(t, "max_bad_steps=3", "total_steps=10")
	s, err := openSession(cfg, "", "grpo", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	calls := 0
	err = s.loop(context.Background(), func(*phaseTimer) (StepMetrics, error) {
		calls++
		if calls == 2 { // one good step resets the counter
			return StepMetrics{}, nil
		}
		return StepMetrics{}, optim.ErrBadLoss
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "step 5, phase : 3 steps in a row with NaN/Inf loss") {
		t.Fatalf("err = %v", err)
	}
	// The aborting step is not part of the state: the saved state is the one
	// after step 4 (three skipped updates, two of them in a row).
	if s.state.Skipped != 3 || s.state.Step != 4 {
		t.Fatalf("state at step %d with %d skipped updates, want step 4 and 3", s.state.Step, s.state.Skipped)
	}
	if _, err := os.Stat(filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(4))); err != nil {
		t.Fatalf("the state before the aborting step was not saved: %v", err)
	}
}

// A run starts with autograd on even when an earlier job on its thread
// left it off (as an evaluation whose goroutine moved threads once did).
func TestRunTurnsGradOn(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := csrc.SetGradEnabled(false)
	defer csrc.SetGradEnabled(prev)
	runGRPO(t, tinyConfig(t, "total_steps=1"), "")
}

// TestResumeChainWithPruning: several stop/resume cycles with checkpoints
// pruned behind them end bitwise where a straight run ends, and every
// checkpoint on the way is a complete Hugging Face directory. (Checkpoints
// once copied their tokenizer from the checkpoint the run resumed from; once
// that was pruned, the next checkpoint had no tokenizer and the resume after
// it failed.)
func TestResumeChainWithPruning(t *testing.T) {
	sets := []string{"total_steps=8", "checkpoint.every=1", "checkpoint.keep=2"}
	straight := tinyConfig(t, sets...)
	runGRPO(t, straight, "")
	dir := t.TempDir()
	resume := ""
	for _, stop := range []string{"2", "3", "2", "0"} {
		cfg := tinyConfig(t, append(sets, "run_dir="+dir, "stop_after_steps="+stop)...)
		runGRPO(t, cfg, resume)
		resume = "auto"
		for _, ckpt := range completeCheckpoints(filepath.Join(dir, checkpointsDir)) {
			for _, f := range append([]string{"model.safetensors", "tokenizer_config.json"}, requiredFiles...) {
				if _, err := os.Stat(filepath.Join(ckpt, f)); err != nil {
					t.Fatalf("after stop_after_steps=%s: %v", stop, err)
				}
			}
		}
	}
	a := filepath.Join(straight.RunDir, checkpointsDir, checkpointName(8))
	b := filepath.Join(dir, checkpointsDir, checkpointName(8))
	if bytes.Equal(weights(t, a), weights(t, straight.Model)) {
		t.Fatal("8 steps left the weights unchanged: the test compares nothing")
	}
	for _, f := range []string{"model.safetensors", optim.TensorsFile, stateFile, "tokenizer.json", "generation_config.json"} {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Fatalf("%s differs between the straight run and the resumed chain", f)
		}
	}
}

// A checkpoint whose manifest does not list a required file is not
// complete, even when the listed files are all there.
func TestCheckpointMissingARequiredFileIsIncomplete(t *testing.T) {
	cfg := tinyConfig(t, "total_steps=1")
	runGRPO(t, cfg, "")
	ckpt := filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(1))
	if err := checkManifest(ckpt); err != nil {
		t.Fatalf("a fresh checkpoint: %v", err)
	}
	for _, f := range []string{"tokenizer.json", "generation_config.json", "model.safetensors"} {
		t.Run(f, func(t *testing.T) {
			raw, _ := os.ReadFile(filepath.Join(ckpt, manifestFile))
			var man manifest
			if err := json.Unmarshal(raw, &man); err != nil {
				t.Fatal(err)
			}
			delete(man.Files, f)
			cp := t.TempDir()
			for name := range man.Files {
				b, _ := os.ReadFile(filepath.Join(ckpt, name))
				os.WriteFile(filepath.Join(cp, name), b, 0o644)
			}
			js, _ := json.Marshal(man)
			os.WriteFile(filepath.Join(cp, manifestFile), js, 0o644)
			if err := checkManifest(cp); err == nil || !strings.Contains(err.Error(), f) {
				t.Fatalf("without %s: %v", f, err)
			}
		})
	}
}

// TestFailedStepSavesLastGoodState: a step that fails before the optimizer
// touched the weights leaves the state of the last good step, data cursor
// included, in a checkpoint and says where; one that fails after an update
// saves nothing (the weights are partly new).
func TestFailedStepSavesLastGoodState(t *testing.T) {
	for _, c := range []struct {
		name        string
		afterUpdate bool
	}{{"before the update", false}, {"after the update", true}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyConfig(t, "total_steps=10", "checkpoint.every=0")
			s, err := openSession(cfg, "", "grpo", RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var cursorAfter2 Cursor
			err = s.loop(context.Background(), func(pt *phaseTimer) (StepMetrics, error) {
				pt.Enter("rollout")
				s.state.Cursor.Next(100, 4)
				if s.state.Step < 2 {
					cursorAfter2 = s.state.Cursor
					return StepMetrics{}, nil
				}
				if c.afterUpdate {
					pt.Enter("update")
					if err := s.opt.(*optim.AdamW).Update(1e-3); err != nil {
						return StepMetrics{}, err
					}
				}
				return StepMetrics{}, errors.New("boom")
			}, nil)
			if err == nil || !strings.Contains(err.Error(), "step 3, phase ") || !strings.Contains(err.Error(), "boom") {
				t.Fatalf("err = %v", err)
			}
			ckpt := filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(2))
			_, statErr := os.Stat(ckpt)
			if c.afterUpdate {
				if statErr == nil || strings.Contains(err.Error(), "state after") {
					t.Fatalf("saved after a partial update: %v", err)
				}
				return
			}
			if statErr != nil || !strings.Contains(err.Error(), "phase rollout") || !strings.Contains(err.Error(), ckpt) {
				t.Fatalf("err = %v, checkpoint: %v", err, statErr)
			}
			st, err := readState(ckpt)
			if err != nil {
				t.Fatal(err)
			}
			if st.Step != 2 || st.Cursor.Pos != cursorAfter2.Pos || st.Cursor.Epoch != cursorAfter2.Epoch {
				t.Fatalf("saved step %d cursor %+v, want step 2 cursor %+v", st.Step, st.Cursor, cursorAfter2)
			}
		})
	}
}

// A problem whose prompt and generation budget do not fit the model's
// context is refused when the data is loaded, with its file and line.
func TestPromptTooLongForTheContext(t *testing.T) {
	cfg := tinyConfig(t, "rollout.max_new_tokens=1015")
	err := RunGRPO(context.Background(), cfg, "", RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "tiny-arith.jsonl:1: problem") || !strings.Contains(err.Error(), "max_position_embeddings 1024") {
		t.Fatalf("err = %v", err)
	}
}

func TestPackByTokens(t *testing.T) {
	for _, c := range []struct {
		lengths []int
		budget  int
		want    string
	}{
		// Sorted 9, 5, 3, 2, 1: 9 alone (2×9 > 10), 5 with 3 (2×5), 2 with 1.
		{[]int{5, 1, 3, 9, 2}, 10, "[[3] [0 2] [4 1]]"},
		{[]int{20, 2}, 10, "[[0] [1]]"}, // longer than the budget: a batch of its own
		{[]int{3, 3, 3}, 9, "[[0 1 2]]"},
	} {
		if got := fmt.Sprint(packByTokens(c.lengths, c.budget)); got != c.want {
			t.Errorf("pack %v in %d: %s, want %s", c.lengths, c.budget, got, c.want)
		}
	}
}

// TestActivationCheckpointingGivesTheSameUpdate: GRPO's update with
// train.activation_checkpointing equals the plain one (fp64, ≤ 1e-10) in
// every aggregation mode, with the KL term.
func TestActivationCheckpointingGivesTheSameUpdate(t *testing.T) {
	rolls := madeUpRollouts(12, 21)
	for _, mode := range []string{AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		t.Run(mode, func(t *testing.T) {
			common := []string{"algo.loss_agg_mode=" + mode, "algo.kl_beta=0.05", "algo.micro_batch_size=5"}
			plain := updateWith(t, rolls, common...)
			ckpt := updateWith(t, rolls, append(common, "train.activation_checkpointing=true")...)
			if d := maxAbsDiff(plain.w, ckpt.w); d > 1e-10 || math.Abs(plain.met.GradNorm-ckpt.met.GradNorm) > 1e-10 || plain.met.GradNorm < 1e-3 {
				t.Fatalf("checkpointing changed the update: weights by %g, grad norm %v vs %v", d, plain.met.GradNorm, ckpt.met.GradNorm)
			}
		})
	}
}

// A CUDA device on a CPU-only build is refused at the start, saying so;
// "cuda" means cuda:$LOCAL_RANK under a torchrun-style launch.
func TestDeviceConfig(t *testing.T) {
	if info, err := csrc.BuildInfo(); err != nil || info.BuiltWithCUDA {
		t.Logf("a CUDA build (%v): a CUDA device is not refused here", err)
	} else {
		cfg := tinyConfig(t, "device=cuda")
		err := RunGRPO(context.Background(), cfg, "", RunOptions{})
		if err == nil || !strings.Contains(err.Error(), "config key device: device cuda:0, but this lanpo was built for CPU only") {
			t.Fatalf("err = %v", err)
		}
	}
	t.Setenv("LOCAL_RANK", "3")
	if d, err := ParseDevice("cuda"); err != nil || d.CInt() != 3 {
		t.Fatalf("cuda under LOCAL_RANK=3: %v %v", d, err)
	}
	for _, bad := range []string{"tpu", "cuda:x", "cuda:1 "} {
		if _, err := ParseDevice(bad); err == nil {
			t.Errorf("device %q accepted", bad)
		}
	}
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"device=gpu"}); err == nil || !strings.Contains(err.Error(), "config key device") {
		t.Fatalf("a bad device key: %v", err)
	}
}

// rollout.max_batch_rows runs generation in that many slots, here fewer
// than one group (a finished row's slot takes the next sample): the same
// samples (lengths, rewards, counts exactly), so the same run up to the
// sampler's float32 log-prob records (batch shape changes their last
// bits); a negative cap is refused at load, naming the key.
func TestGenerationBatchesDoNotChangeTheRun(t *testing.T) {
	base := tinyConfig(t, "total_steps=2")
	runGRPO(t, base, "")
	split := tinyConfig(t, "total_steps=2", fmt.Sprintf("rollout.max_batch_rows=%d", max(1, base.Rollout.SamplesPerPrompt-1)))
	runGRPO(t, split, "")
	a, b := stableMetrics(t, base.RunDir), stableMetrics(t, split.RunDir)
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("%d and %d metric lines", len(a), len(b))
	}
	for i := range a {
		for k, va := range a[i] {
			x, isNum := va.(float64)
			y, _ := b[i][k].(float64)
			switch {
			case !isNum || strings.HasPrefix(k, "response_length") || strings.HasPrefix(k, "reward") || strings.HasPrefix(k, "accuracy") || strings.HasPrefix(k, "tokens"):
				if !reflect.DeepEqual(va, b[i][k]) {
					t.Errorf("step %d %s: %v, in batches %v", i+1, k, va, b[i][k])
				}
			case strings.HasPrefix(k, "sampler_trainer_logp"):
				// The float32 rounding gap between the sampler's record and
				// the trainer's recomputation: it depends on the batch's
				// shape (measured on one machine with libtorch 2.1: 9.5e-7
				// whole, 2.6e-6 in batches), so it is bounded, not matched.
				if math.Abs(x) > 1e-4 || math.Abs(y) > 1e-4 {
					t.Errorf("step %d %s: %v, in batches %v (above float32 rounding)", i+1, k, x, y)
				}
			case math.Abs(x-y) > 1e-6*math.Max(1, math.Abs(x)):
				t.Errorf("step %d %s: %v, in batches %v", i+1, k, x, y)
			}
		}
	}
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"rollout.max_batch_rows=-1"}); err == nil || !strings.Contains(err.Error(), "config key rollout.max_batch_rows") {
		t.Errorf("a negative cap: %v", err)
	}
}

// rollout.sync_every (up to 16) and rollout.cuda_graphs change how the
// decode loop runs, not what it samples: the same run, metric for metric
// and weight for weight; cuda_graphs may change on a resume; a negative
// sync_every is refused, naming the key.
func TestDecodeSettingsDoNotChangeTheRun(t *testing.T) {
	base := tinyConfig(t, "total_steps=2")
	runGRPO(t, base, "")
	want := stableMetrics(t, base.RunDir)
	for _, set := range [][]string{{"rollout.sync_every=1"}, {"rollout.sync_every=5", "rollout.cuda_graphs=true"}} {
		cfg := tinyConfig(t, append([]string{"total_steps=2"}, set...)...)
		runGRPO(t, cfg, "")
		if got := stableMetrics(t, cfg.RunDir); !reflect.DeepEqual(got, want) {
			t.Errorf("%v: metrics %v, want %v", set, got, want)
		}
		if !bytes.Equal(weights(t, filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(2))), weights(t, filepath.Join(base.RunDir, checkpointsDir, checkpointName(2)))) {
			t.Errorf("%v: other weights after 2 steps", set)
		}
	}
	longer := base
	longer.TotalSteps, longer.Rollout.CUDAGraphs = 3, true
	if err := RunGRPO(context.Background(), longer, "auto", RunOptions{}); err != nil {
		t.Errorf("a resume changing rollout.cuda_graphs: %v", err)
	}
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"rollout.sync_every=-1"}); err == nil || !strings.Contains(err.Error(), "config key rollout.sync_every") {
		t.Errorf("a negative sync_every: %v", err)
	}
}

// algo.recompute_old_logp: π_old comes from the trainer, so the update's
// first-epoch ratio sees no sampler/trainer gap (fp64: none beyond
// rounding), the gap to the sampler's float32 record is reported instead,
// and the update is the one without it up to that gap.
func TestRecomputeOldLogp(t *testing.T) {
	sets := []string{"dtype=float64", "total_steps=2", "algo.kl_beta=0.05"}
	plain := tinyConfig(t, sets...)
	runGRPO(t, plain, "")
	re := tinyConfig(t, append(sets, "algo.recompute_old_logp=true")...)
	runGRPO(t, re, "")
	a, b := stableMetrics(t, plain.RunDir), stableMetrics(t, re.RunDir)
	for i := range a {
		num := func(m map[string]any, k string) float64 { v, _ := m[k].(float64); return v }
		if g := num(a[i], "sampler_trainer_logp_max_abs_diff"); g < 1e-9 {
			t.Fatalf("step %d: the sampler's record is within %g of the trainer: the test sees no gap to remove", i+1, g)
		}
		if g := num(b[i], "sampler_trainer_logp_max_abs_diff"); g > 1e-12 {
			t.Errorf("step %d: π_old recomputed, yet the update's ratio sees a gap of %g", i+1, g)
		}
		gm, gx := num(b[i], "sampler_logp_gap_mean"), num(b[i], "sampler_logp_gap_max")
		if w := num(a[i], "sampler_trainer_logp_max_abs_diff"); gm <= 0 || gx < gm || math.Abs(gx-w) > 0.05*w {
			t.Errorf("step %d: sampler gap mean %g max %g; without recomputation the update saw %g", i+1, gm, gx, num(a[i], "sampler_trainer_logp_max_abs_diff"))
		}
		if _, ok := b[i]["sampler_tis_clipped_frac"]; ok {
			t.Errorf("step %d: importance weights clipped at a gap of %g", i+1, gx)
		}
		if x, y := num(a[i], "grad_norm"), num(b[i], "grad_norm"); math.Abs(x-y) > 1e-5*math.Max(1, x) {
			t.Errorf("step %d: grad norm %g, with π_old recomputed %g", i+1, x, y)
		}
	}
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"algo.tis_cap=0.5"}); err == nil || !strings.Contains(err.Error(), "config key algo.tis_cap") {
		t.Errorf("tis_cap below 1: %v", err)
	}
}

// algo.ref_device: the reference model on the host computes the same KL
// term (here both are on the CPU, so the run is identical); a device this
// build lacks is refused naming the key.
func TestRefDevice(t *testing.T) {
	a := tinyConfig(t, "total_steps=1", "algo.kl_beta=0.05")
	runGRPO(t, a, "")
	b := tinyConfig(t, "total_steps=1", "algo.kl_beta=0.05", "algo.ref_device=cpu")
	runGRPO(t, b, "")
	if ma, mb := stableMetrics(t, a.RunDir), stableMetrics(t, b.RunDir); !reflect.DeepEqual(ma, mb) || ma[0]["kl"] == nil {
		t.Errorf("metrics differ with the reference on the host:\n%v\n%v", ma, mb)
	}
	if info, err := csrc.BuildInfo(); err == nil && !info.BuiltWithCUDA {
		c := tinyConfig(t, "total_steps=1", "algo.kl_beta=0.05", "algo.ref_device=cuda:0")
		if err := RunGRPO(context.Background(), c, "", RunOptions{}); err == nil || !strings.Contains(err.Error(), "config key algo.ref_device: device cuda:0, but this lanpo was built for CPU only") {
			t.Errorf("a CUDA reference on a CPU build: %v", err)
		}
	}
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"algo.ref_device=tpu"}); err == nil || !strings.Contains(err.Error(), "config key algo.ref_device") {
		t.Errorf("a bad ref_device: %v", err)
	}
}

// TestTokensTrainedCountsEveryTrainerForward: tokens_trained counts the
// (prompt + response) tokens of every trainer forward. The first step's
// rollouts do not depend on the update's settings, so a second epoch
// doubles it, and the KL reference or π_old recomputed each add one pass.
func TestTokensTrainedCountsEveryTrainerForward(t *testing.T) {
	first := func(sets ...string) float64 {
		cfg := tinyConfig(t, append([]string{"total_steps=1", "algo.kl_beta=0"}, sets...)...)
		runGRPO(t, cfg, "")
		n, _ := stableMetrics(t, cfg.RunDir)[0]["tokens_trained"].(float64)
		return n
	}
	base := first()
	if base <= 0 {
		t.Fatalf("tokens_trained %v", base)
	}
	for _, c := range []struct {
		sets  []string
		times float64
	}{
		{[]string{"algo.epochs=2", "algo.kl_beta=0.01"}, 3},
		{[]string{"algo.recompute_old_logp=true"}, 2},
	} {
		if got := first(c.sets...); got != c.times*base {
			t.Errorf("%v: tokens_trained %v, want %v × %v", c.sets, got, c.times, base)
		}
	}
}

// TestResumeGuardsWork: each checkpoint keeps its config; a resume from an
// older checkpoint than run_dir's newest refuses, naming the newer ones,
// unless they are set aside (kept, with the metrics); a changed config key
// that changes what the run computes is refused unless allowed, harmless
// ones are accepted, and every change is recorded with its step.
// Before: the newer checkpoints were replaced and metrics.jsonl cut back
// without a word, and any change was accepted unrecorded.
func TestResumeGuardsWork(t *testing.T) {
	cfg := tinyConfig(t, "total_steps=3", "rollout.prompts_per_step=2")
	runGRPO(t, cfg, "")
	root := filepath.Join(cfg.RunDir, checkpointsDir)
	if _, err := os.Stat(filepath.Join(root, checkpointName(3), checkpointConfigFile)); err != nil {
		t.Fatalf("the checkpoint keeps no config: %v", err)
	}
	step1 := filepath.Join(root, checkpointName(1))
	err := RunGRPO(context.Background(), cfg, step1, RunOptions{})
	if err == nil || !strings.Contains(err.Error(), checkpointName(2)) || !strings.Contains(err.Error(), checkpointName(3)) || !strings.Contains(err.Error(), "--set-aside-newer") {
		t.Fatalf("resume from step 1 with steps 2 and 3 present: %v", err)
	}
	if n := len(stableMetrics(t, cfg.RunDir)); n != 3 || len(completeCheckpoints(root)) != 3 {
		t.Fatalf("a refused resume changed the run: %d metric lines, checkpoints %v", n, completeCheckpoints(root))
	}

	// A changed lr is refused; allowed, it is recorded with the harmless
	// total_steps change.
	longer := cfg
	longer.TotalSteps = 4
	longer.Optim.LR = cfg.Optim.LR / 2
	err = RunGRPO(context.Background(), longer, "auto", RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "optim.lr") || strings.Contains(err.Error(), "total_steps:") {
		t.Fatalf("a changed optim.lr: %v", err)
	}
	if err := RunGRPO(context.Background(), longer, "auto", RunOptions{AllowChanges: []string{"optim"}}); err != nil {
		t.Fatal(err)
	}
	var changes []ConfigChange
	if err := jsonl.File(filepath.Join(cfg.RunDir, changesFile), func(n int, line []byte) error {
		var c ConfigChange
		changes = append(changes, c)
		return json.Unmarshal(line, &changes[len(changes)-1])
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range changes {
		if c.Step != 3 {
			t.Errorf("change %+v: step %d, want 3", c, c.Step)
		}
		got[c.Key] = c.How
	}
	if len(got) != 2 || got["total_steps"] != "harmless" || !strings.Contains(got["optim.lr"], "allowed") {
		t.Fatalf("recorded changes %+v", changes)
	}

	// Set aside: the run goes on from step 1; steps 2-4 and the metrics are kept.
	if err := RunGRPO(context.Background(), longer, step1, RunOptions{SetAsideNewer: true, AllowChanges: []string{"optim.lr"}}); err != nil {
		t.Fatal(err)
	}
	aside, _ := filepath.Glob(filepath.Join(cfg.RunDir, setAsideDir, "*", checkpointsDir, "step-*"))
	metrics, _ := filepath.Glob(filepath.Join(cfg.RunDir, setAsideDir, "*", metricsFile))
	if len(aside) != 3 || len(metrics) != 1 {
		t.Fatalf("set aside: checkpoints %v, metrics %v", aside, metrics)
	}
	if n := len(stableMetrics(t, cfg.RunDir)); n != 4 {
		t.Fatalf("%d metric lines after the resume from step 1 to 4", n)
	}

	// total_steps below the checkpoint's step says so.
	short := longer
	short.TotalSteps = 2
	if err := RunGRPO(context.Background(), short, "auto", RunOptions{}); err == nil || !strings.Contains(err.Error(), "past total_steps 2") {
		t.Fatalf("total_steps below the checkpoint: %v", err)
	}
}

// TestResumeSaysWhatItDid: --resume auto on a run directory without a
// checkpoint, and on a finished run, say so (both used to be silent).
func TestResumeSaysWhatItDid(t *testing.T) {
	cfg := tinyConfig(t, "total_steps=1")
	var buf bytes.Buffer
	defer func(l zerolog.Logger) { log.Logger = l }(log.Logger)
	log.Logger = zerolog.New(&buf)
	runGRPO(t, cfg, "auto")
	if !strings.Contains(buf.String(), "no complete checkpoint in the run directory; starting from step 0") {
		t.Fatalf("a fresh start under --resume auto: %s", buf.String())
	}
	buf.Reset()
	runGRPO(t, cfg, "auto")
	if !strings.Contains(buf.String(), "the run is complete") {
		t.Fatalf("resuming a finished run: %s", buf.String())
	}
}

// TestStepLinesAndTensorBoard: without a progress bar (no terminal:
// Slurm, nohup, tail -f) every step logs one info line with the reward,
// accuracy, pace and time left, after a first line naming the run
// directory and metrics file; nothing appeared between checkpoints before.
func TestStepLinesAndTensorBoard(t *testing.T) {
	cfg := tinyConfig(t, "total_steps=2") // the warm model's SFT logs too
	var buf bytes.Buffer
	defer func(l zerolog.Logger, lvl zerolog.Level) { log.Logger = l; zerolog.SetGlobalLevel(lvl) }(log.Logger, zerolog.GlobalLevel())
	log.Logger = zerolog.New(&buf)
	zerolog.SetGlobalLevel(zerolog.InfoLevel)
	runGRPO(t, cfg, "")
	var steps []map[string]any
	first := ""
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if m["message"] == "grpo run" && first == "" {
			first = line
		}
		if m["message"] == "step" {
			steps = append(steps, m)
		}
	}
	if !strings.Contains(first, filepath.Join(cfg.RunDir, metricsFile)) {
		t.Fatalf("no first line naming the metrics file:\n%s", buf.String())
	}
	if len(steps) != 2 || steps[0]["step"] != "1/2" || steps[1]["eta"] != "0s" {
		t.Fatalf("step lines %v", steps)
	}
	for _, k := range []string{"reward", "accuracy", "loss", "s_per_step", "eta"} {
		if _, ok := steps[0][k]; !ok {
			t.Errorf("a step line without %s: %v", k, steps[0])
		}
	}
	if !strings.Contains(first, filepath.Join(cfg.RunDir, tensorboardDir)) {
		t.Errorf("the first line does not name the TensorBoard directory: %s", first)
	}

	// log.tensorboard (on by default): the same numbers as TensorBoard
	// scalars, step by step.
	events, _ := filepath.Glob(filepath.Join(cfg.RunDir, tensorboardDir, "events.out.tfevents.*"))
	if len(events) != 1 {
		t.Fatalf("TensorBoard event files %v", events)
	}
	got, err := tensorboard.ReadScalars(events[0])
	if err != nil {
		t.Fatal(err)
	}
	tb := map[string]float32{}
	for _, s := range got {
		tb[fmt.Sprintf("%d %s", s.Step, s.Tag)] = s.Value
	}
	lines := 0
	if err := jsonl.File(filepath.Join(cfg.RunDir, metricsFile), func(n int, line []byte) error {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			return err
		}
		lines++
		for k, want := range scalars(m) {
			if v, ok := tb[fmt.Sprintf("%v %s", m["step"], k)]; !ok || v != float32(want) {
				t.Errorf("step %v %s: TensorBoard %v (present %v), metrics.jsonl %v", m["step"], k, v, ok, want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"1 rollout/reward_mean", "2 perf/seconds/rollout", "2 rollout/accuracy", "2 train/loss"} {
		if _, ok := tb[k]; !ok || lines != 2 {
			t.Errorf("no TensorBoard scalar %q (%d metric lines)", k, lines)
		}
	}
	off := tinyConfig(t, "total_steps=1", "log.tensorboard=false")
	runGRPO(t, off, "")
	if _, err := os.Stat(filepath.Join(off.RunDir, tensorboardDir)); err == nil {
		t.Error("log.tensorboard=false wrote TensorBoard events")
	}
}

// TestResumeOfAnOlderChecksConfig: a checkpoint whose recorded config
// was written before the lanpo section was resolved for every run (a GRPO
// run's lanpo.max_attempt_chars 0, relevance_floor and mode weights unset)
// and before log.phase_every existed resumes without a refused change: the
// recorded config is resolved by today's rules before the comparison.
func TestResumeOfAnOlderChecksConfig(t *testing.T) {
	cfg := tinyConfig(t, "total_steps=1", "rollout.prompts_per_step=2")
	runGRPO(t, cfg, "")
	recorded := filepath.Join(cfg.RunDir, checkpointsDir, checkpointName(1), checkpointConfigFile)
	raw, err := os.ReadFile(recorded)
	if err != nil {
		t.Fatal(err)
	}
	old := string(raw)
	for _, r := range [][2]string{{"max_attempt_chars: 256", "max_attempt_chars: 0"}, {"max_attempt_tokens: 16", "max_attempt_tokens: 0"},
		{"relevance_floor: 0.5", "relevance_floor: null"}, {"    phase_every: 30s\n", ""}} {
		if !strings.Contains(old, r[0]) {
			t.Fatalf("the recorded config lacks %q:\n%s", r[0], old)
		}
		old = strings.Replace(old, r[0], r[1], 1)
	}
	if err := os.WriteFile(recorded, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	// The manifest lists the files' sizes: the edited one's too. An older
	// lanpo's manifest had no digests.
	manPath := filepath.Join(filepath.Dir(recorded), manifestFile)
	var man manifest
	if b, err := os.ReadFile(manPath); err != nil || json.Unmarshal(b, &man) != nil {
		t.Fatalf("%s: %v", manPath, err)
	}
	man.Files[checkpointConfigFile] = int64(len(old))
	man.Digests = nil
	if b, err := json.Marshal(man); err != nil || os.WriteFile(manPath, b, 0o644) != nil {
		t.Fatal(err)
	}
	if got := completeCheckpoints(filepath.Join(cfg.RunDir, checkpointsDir)); len(got) != 1 {
		t.Fatalf("the edited checkpoint is not complete: %v", got)
	}
	longer := cfg
	longer.TotalSteps = 2
	if err := RunGRPO(context.Background(), longer, "auto", RunOptions{}); err != nil {
		t.Fatalf("resuming a checkpoint with an older lanpo's config: %v", err)
	}
}

// TestMissingModelIsNamed: a run whose model directory has no
// config.json stops before writing anything, naming the key and the
// directory.
func TestMissingModelIsNamed(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-model")
	cfg, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"run_dir=" + filepath.Join(dir, "run"), "model=" + missing,
		"data.train=../configs/data/tiny-arith.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	err = RunGRPO(context.Background(), cfg, "", RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "config key model: "+missing+" has no config.json") {
		t.Fatalf("err = %v, want one naming the key and the directory", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.RunDir, "config.resolved.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused run wrote its config (%v)", err)
	}
}
