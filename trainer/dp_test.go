package trainer

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/disttest"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/rl"
)

// onRanks runs fn as n in-process ranks (disttest.MemComm), each on its
// own locked OS thread, and returns their errors.
func onRanks(n int, fn func(c dist.Comm) error) []error {
	return disttest.OnMemRanks(n, func(c *disttest.MemComm) error { return fn(c) })
}

// onGlooRanks runs fn as n ranks of a real Gloo process group (c10d over
// TCP on 127.0.0.1), each rank a goroutine on its own locked OS thread: the
// trainer's collectives as they run across processes, in one test process.
// The store is served on a port the kernel picks and kept open, as
// torchrun's agent serves it (a port found free and closed again can be
// taken by a concurrently running test binary before rank 0 binds it: seen
// once as a 3-rank join that never completed under go test ./...).
func onGlooRanks(t *testing.T, n int, fn func(c dist.Comm) error) []error {
	gloo, _, why := dist.Available()
	disttest.Need(t, gloo, why)
	store, err := csrc.ServeDistStore("127.0.0.1", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	return disttest.InGoroutines(n, func(r int) error {
		env := dist.Env{Rank: r, LocalRank: r, World: n, LocalWorld: n, MasterAddr: "127.0.0.1", MasterPort: store.Port, AgentStore: true}
		c, err := dist.Init(env, dist.Options{Backend: "gloo", Timeout: time.Minute, Device: gotch.CPU})
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(c)
	})
}

// dpUpdate is one rank's view after an update: its reduced gradient of
// every parameter (the whole tensor, or its ZeRO-2 chunk at offset lo),
// the metrics and the weights.
type dpUpdate struct {
	met     StepMetrics
	grads   map[string][]float64
	lo      map[string]int64
	w       []float64
	state   int64     // optimizer state bytes
	teacher []float64 // SDPO's teacher after the update
}

// updateOnRank runs one update of the tiny model over this rank's share of
// rolls and of the consolidation rows distill (float32, no clipping, so the
// reduced gradients stay as they are).
func updateOnRank(t *testing.T, c dist.Comm, runDir string, rolls, distill []rollout, sets ...string) (dpUpdate, error) {
	return termUpdateOnRank(t, c, runDir, AlgoGRPO, rolls, distill, sets...)
}

// termUpdateOnRank is updateOnRank with algo.name kind's update term over
// rows (grpo: consolidation's); an SDPO run's teacher after the update is
// in dpUpdate.teacher.
func termUpdateOnRank(t *testing.T, c dist.Comm, runDir, kind string, rolls, rows []rollout, sets ...string) (dpUpdate, error) {
	cfg := tinyConfig(t, append([]string{"run_dir=" + runDir, "dtype=float32", "optim.grad_clip=0", "algo.kl_beta=0.05", "algo.name=" + kind}, sets...)...)
	s, err := openSession(cfg, "", kind, RunOptions{Comm: c})
	if err != nil {
		return dpUpdate{}, err
	}
	defer s.Close()
	g := &grpoRun{session: s}
	g.term = newConsolidation(g.view())
	if kind != AlgoGRPO && kind != AlgoLANPO { // lanpo: consolidation, with no explorer
		parts, err := methodNamed(kind).build(g)
		if err != nil {
			return dpUpdate{}, err
		}
		g.term = parts.term
	}
	defer g.term.close()
	share := func(rs []rollout) []*rollout {
		lo, hi := dist.Share(len(rs), c.Rank(), c.Size())
		var out []*rollout
		for i := lo; i < hi; i++ {
			r := rs[i]
			out = append(out, &r)
		}
		return out
	}
	cons := termRows{joinPolicy: kind == AlgoCritique} // over every rank, as the term's rows sums it
	if _, ok := g.term.(*consolidation); ok {
		cons.extra, cons.joinPolicy = consExtra, cfg.LANPO.ConsolidatePerToken()
	}
	for _, r := range rows {
		cons.rows++
		cons.tokens += len(r.ids)
	}
	var out dpUpdate
	if err := g.update(share(rolls), share(rows), cons, &out.met); err != nil {
		return out, err
	}
	if d, ok := g.term.(*sdpo); ok {
		for _, p := range d.teacher.Params() {
			out.teacher = append(out.teacher, tensor.Float64s(p.Tensor)...)
		}
	}
	out.grads, out.lo = map[string][]float64{}, map[string]int64{}
	for i, p := range s.m.TrainableParams() {
		if z, ok := s.opt.(interface {
			ShardedGrad(int) (*ts.Tensor, int64, bool)
		}); ok {
			if g, lo, ok := z.ShardedGrad(i); ok {
				out.grads[p.Name], out.lo[p.Name] = tensor.Float64s(g), lo
				continue
			}
		}
		g := p.Tensor.MustGrad(false)
		out.grads[p.Name] = tensor.Float64s(g)
		g.MustDrop()
	}
	for _, p := range s.m.TrainableParams() {
		out.w = append(out.w, tensor.Float64s(p.Tensor)...)
	}
	out.state = s.opt.StateBytes()
	return out, nil
}

// 2 and 3 ranks against 1 with the same global batch of injected
// rollouts: the same reduced gradients, gradient norm, loss and weights,
// for plain AdamW and ZeRO-1 and -2 (with and without per-layer
// reduction), within float32 reduction tolerance: gradients summed over
// ranks add the same terms in another order, so they agree to 2e-6 of the
// largest gradient; the norm to 1e-5, the loss to 1e-6; every rank ends
// with bit-identical weights. The batch carries consolidation rows too
// (lanpo.consolidate), split unevenly over the ranks.
func TestDataParallelUpdateMatchesOneRank(t *testing.T) {
	rolls, distill := madeUpRollouts(10, 5), madeUpRollouts(7, 6)
	const consolidate = "lanpo.consolidate=0.5"
	var one dpUpdate
	errs := onRanks(1, func(c dist.Comm) (err error) {
		one, err = updateOnRank(t, c, t.TempDir(), rolls, distill, consolidate)
		return err
	})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	gmax := one.largestGrad()
	if gmax < 1e-3 || consMet(one.met).Consolidated != len(distill) {
		t.Fatalf("largest gradient %g, %d responses distilled: the test compares nothing", gmax, consMet(one.met).Consolidated)
	}
	for _, c := range []rankCase{
		{"plain, 2 ranks", 2, nil, false},
		{"plain, 3 ranks, uneven shares and micro-batches", 3, []string{"algo.micro_batch_size=2"}, false},
		{"ZeRO-1, 2 ranks", 2, []string{"dist.zero_stage=1"}, false},
		{"ZeRO-2, 2 ranks", 2, []string{"dist.zero_stage=2"}, false},
		{"ZeRO-2 per layer, 3 ranks", 3, []string{"dist.zero_stage=2", "train.activation_checkpointing=true", "algo.micro_batch_size=2"}, false},
		{"plain, 2 ranks over Gloo", 2, nil, true},
		{"ZeRO-1, 2 ranks over Gloo", 2, []string{"dist.zero_stage=1"}, true},
		{"ZeRO-2 per layer, 3 ranks over Gloo", 3, []string{"dist.zero_stage=2", "train.activation_checkpointing=true", "algo.micro_batch_size=2"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			matchesOneRank(t, c, one, func(mc dist.Comm, dir string) (dpUpdate, error) {
				return updateOnRank(t, mc, dir, rolls, distill, append(c.sets, consolidate)...)
			})
		})
	}
}

// TestDataParallelOwnConsolidationStep: consolidation's optimizer step of
// its own (lanpo.consolidate_lr) on 2 and 3 ranks, plain and ZeRO, gives
// what one rank does: the policy's step, then the term's with its own
// moments (its gradients are what the ranks compare).
func TestDataParallelOwnConsolidationStep(t *testing.T) {
	rolls, distill := madeUpRollouts(10, 5), madeUpRollouts(7, 6)
	sets := []string{"lanpo.consolidate=0.5", "lanpo.consolidate_lr=0.001"} // optim.lr's: matchesOneRank's tolerance is a share of it
	update := func(c dist.Comm, dir string, more ...string) (dpUpdate, error) {
		return termUpdateOnRank(t, c, dir, AlgoLANPO, rolls, distill, append(more, sets...)...)
	}
	var one dpUpdate
	errs := onRanks(1, func(c dist.Comm) (err error) {
		one, err = update(c, t.TempDir())
		return err
	})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if one.met.TermGradNorm == 0 || one.met.GradNorm == 0 || one.largestGrad() < 1e-3 {
		t.Fatalf("one rank: policy norm %g, own step's %g: the test compares nothing", one.met.GradNorm, one.met.TermGradNorm)
	}
	for _, c := range []rankCase{
		{"plain, 3 ranks, uneven shares and micro-batches", 3, []string{"algo.micro_batch_size=2"}, false},
		{"ZeRO-1, 2 ranks", 2, []string{"dist.zero_stage=1"}, false},
		{"ZeRO-2 per layer, 3 ranks", 3, []string{"dist.zero_stage=2", "train.activation_checkpointing=true", "algo.micro_batch_size=2"}, false},
		{"ZeRO-2, 2 ranks over Gloo", 2, []string{"dist.zero_stage=2"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			matchesOneRank(t, c, one, func(mc dist.Comm, dir string) (dpUpdate, error) {
				u, err := update(mc, dir, c.sets...)
				if err == nil && math.Abs(u.met.TermGradNorm-one.met.TermGradNorm) > 1e-5*one.met.TermGradNorm {
					err = fmt.Errorf("rank %d: own step's norm %g, one rank's %g", mc.Rank(), u.met.TermGradNorm, one.met.TermGradNorm)
				}
				return u, err
			})
		})
	}
}

// TestDataParallelConsolidationPerToken: consolidation's rows in the
// policy's normalization (lanpo.consolidate_norm token) on 3 ranks, plain
// and ZeRO-2, give one rank's update.
func TestDataParallelConsolidationPerToken(t *testing.T) {
	rolls, distill := madeUpRollouts(10, 5), madeUpRollouts(7, 6)
	sets := []string{"lanpo.consolidate=4", "lanpo.consolidate_norm=token"}
	var one dpUpdate
	if errs := onRanks(1, func(c dist.Comm) (err error) {
		one, err = termUpdateOnRank(t, c, t.TempDir(), AlgoLANPO, rolls, distill, sets...)
		return err
	}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	for _, c := range []rankCase{
		{"plain, 3 ranks, uneven shares and micro-batches", 3, []string{"algo.micro_batch_size=2"}, false},
		{"ZeRO-2 per layer, 3 ranks", 3, []string{"dist.zero_stage=2", "train.activation_checkpointing=true", "algo.micro_batch_size=2"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			matchesOneRank(t, c, one, func(mc dist.Comm, dir string) (dpUpdate, error) {
				return termUpdateOnRank(t, mc, dir, AlgoLANPO, rolls, distill, append(c.sets, sets...)...)
			})
		})
	}
}

// largestGrad is the largest gradient entry of the update.
func (u dpUpdate) largestGrad() (m float64) {
	for _, g := range u.grads {
		for _, x := range g {
			m = math.Max(m, math.Abs(x))
		}
	}
	return m
}

// rankCase is a data-parallel setting an update is compared in.
type rankCase struct {
	name  string
	ranks int
	sets  []string
	gloo  bool
}

// matchesOneRank runs update on c.ranks ranks (one run directory) and
// compares every rank's result with one rank's, one: the reduced gradients
// within 2e-6 of the largest, the norm to 1e-5, the loss to 1e-6, the
// weights (and SDPO's teacher) to 5% of one step, and every rank's weights
// and teacher with rank 0's bit for bit.
func matchesOneRank(t *testing.T, c rankCase, one dpUpdate, update func(mc dist.Comm, dir string) (dpUpdate, error)) {
	t.Helper()
	gmax := one.largestGrad()
	dir := t.TempDir()
	res := make([]dpUpdate, c.ranks)
	run := func(mc dist.Comm) (err error) {
		res[mc.Rank()], err = update(mc, dir)
		return err
	}
	var errs []error
	if c.gloo {
		errs = onGlooRanks(t, c.ranks, run)
	} else {
		errs = onRanks(c.ranks, run)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	tol := 2e-6 * gmax
	for r, u := range res {
		for name, g := range u.grads {
			want := one.grads[name][u.lo[name] : u.lo[name]+int64(len(g))]
			if d := maxAbsDiff(g, want); d > tol {
				t.Fatalf("rank %d: gradient of %s differs by %g (tolerance %g)", r, name, d, tol)
			}
		}
		if math.Abs(u.met.GradNorm-one.met.GradNorm) > 1e-5*one.met.GradNorm || math.Abs(u.met.Loss-one.met.Loss) > 1e-6*math.Max(1, math.Abs(one.met.Loss)) {
			t.Fatalf("rank %d: grad norm %g loss %g; one rank %g %g", r, u.met.GradNorm, u.met.Loss, one.met.GradNorm, one.met.Loss)
		}
		// AdamW's first step is about lr·sign(g): a gradient near eps
		// that differs in its last bits moves its weight by a visible
		// fraction of lr, so weights are compared to 5% of one step.
		if d := maxAbsDiff(u.w, one.w); d > 0.05*u.met.LR {
			t.Fatalf("rank %d: weights differ from one rank's by %g (lr %g)", r, d, u.met.LR)
		}
		if d := maxAbsDiff(u.w, res[0].w); d != 0 {
			t.Fatalf("rank %d: weights differ from rank 0's by %g", r, d)
		}
		if d := maxAbsDiff(u.teacher, res[0].teacher); d != 0 || len(u.teacher) != len(one.teacher) {
			t.Fatalf("rank %d: teacher differs from rank 0's by %g", r, d)
		}
		if d := maxAbsDiff(u.teacher, one.teacher); d > 0.05*u.met.LR {
			t.Fatalf("rank %d: teacher differs from one rank's by %g", r, d)
		}
	}
}

// ZeRO keeps 1/world of plain AdamW's state on each rank (moments; and
// masters for 16-bit parameters), measured in bytes.
func TestZeroStateBytes(t *testing.T) {
	rolls := madeUpRollouts(4, 9)
	var plain dpUpdate
	if errs := onRanks(1, func(c dist.Comm) (err error) {
		plain, err = updateOnRank(t, c, t.TempDir(), rolls, nil, "dtype=bfloat16")
		return err
	}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	for _, ranks := range []int{2, 4} {
		dir := t.TempDir()
		res := make([]dpUpdate, ranks)
		errs := onRanks(ranks, func(mc dist.Comm) (err error) {
			res[mc.Rank()], err = updateOnRank(t, mc, dir, rolls, nil, "dtype=bfloat16", "dist.zero_stage=1")
			return err
		})
		for r, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
			ratio := float64(res[r].state) / float64(plain.state)
			t.Logf("%d ranks, rank %d: %d bytes of optimizer state, plain optim.AdamW %d (×%.3f)", ranks, r, res[r].state, plain.state, ratio)
			if math.Abs(ratio-1/float64(ranks)) > 0.02 {
				t.Errorf("%d ranks, rank %d: state ×%.3f of plain AdamW's, want ≈ 1/%d", ranks, r, ratio, ranks)
			}
		}
	}
}

var _ = gotch.Float

// ZeRO over one rank is plain AdamW, bit for bit.
func TestZeroOnOneRankIsAdamW(t *testing.T) {
	rolls := madeUpRollouts(6, 3)
	var plain, z1, z2 dpUpdate
	for _, c := range []struct {
		out  *dpUpdate
		sets []string
	}{{&plain, nil}, {&z1, []string{"dist.zero_stage=1"}}, {&z2, []string{"dist.zero_stage=2", "train.activation_checkpointing=true"}}} {
		if errs := onRanks(1, func(mc dist.Comm) (err error) {
			*c.out, err = updateOnRank(t, mc, t.TempDir(), rolls, nil, c.sets...)
			return err
		}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	if d := maxAbsDiff(plain.w, z1.w); d != 0 {
		t.Errorf("ZeRO-1 on one rank: weights differ by %g", d)
	}
	if d := maxAbsDiff(plain.w, z2.w); d != 0 {
		t.Errorf("ZeRO-2 on one rank: weights differ by %g", d)
	}
}

// runRanks runs a whole GRPO job on n in-process ranks.
func runRanks(t *testing.T, n int, cfg Config, resume string) {
	t.Helper()
	errs := onRanks(n, func(c dist.Comm) error {
		return RunGRPO(context.Background(), cfg, resume, RunOptions{Comm: c})
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// 2 ranks: 4 steps straight, and 2 steps then --resume auto to 4, give
// bit-identical weights, optimizer shards and metrics (ZeRO-1, LANPO with
// its pool); and the checkpoint's shards reload into plain AdamW on one
// rank and into ZeRO on three by parameter name.
func TestDataParallelExactResumeAndReshard(t *testing.T) {
	straight := twoRanksStraightAndResumed(t, []string{"pool.jsonl"}, "algo.name=lanpo", "lanpo.feedback_ratio=1", "dist.zero_stage=1", "rollout.prompts_per_step=4")
	last := filepath.Join(checkpointsDir, checkpointName(4))

	// Reshard: the 2-rank ZeRO checkpoint into plain AdamW and ZeRO-2 on 3.
	ckpt := filepath.Join(straight.RunDir, last)
	lockThread(t)
	m, err := model.Load(ckpt, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	plain, err := optim.NewAdamW(m.Params(), 0.9, 0.999, 1e-8, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Load(ckpt); err != nil {
		t.Fatal(err)
	}
	if plain.Step != 4 {
		t.Errorf("plain optim.AdamW from the shards: step %d, want 4", plain.Step)
	}
	// And into ZeRO-2 on 3 ranks, one after the other (loading issues no
	// collectives); optim's TestZeroCheckpointReshards checks the values.
	g := disttest.NewMemGroup(3)
	for r := 0; r < 3; r++ {
		z, err := optim.NewOptimizer(m.Params(), optim.Hyper{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, g.Comm(r), 2, 1<<20, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := z.Load(ckpt); err != nil {
			t.Fatal(err)
		}
		if z.Updates() != 4 {
			t.Errorf("rank %d of 3: step %d, want 4", r, z.Updates())
		}
		z.Close()
	}
}

// twoRanksStraightAndResumed runs tinyConfig with sets (ZeRO-1 among them)
// on 2 ranks 4 steps straight, and 2 steps then --resume auto to 4, and
// requires step 4's weights, optimizer shards, state, files and metrics to
// be the same bytes in both; it returns the straight run's config.
func twoRanksStraightAndResumed(t *testing.T, files []string, sets ...string) Config {
	t.Helper()
	straight := tinyConfig(t, sets...)
	runRanks(t, 2, straight, "")
	split := tinyConfig(t, append(sets, "stop_after_steps=2")...)
	runRanks(t, 2, split, "")
	split.StopAfterSteps = 0
	runRanks(t, 2, split, "auto")
	last := filepath.Join(checkpointsDir, checkpointName(4))
	for _, f := range append([]string{"model.safetensors", optim.ShardFile(0, 2), optim.ShardFile(1, 2), optim.MetaFile, stateFile}, files...) {
		a, errA := os.ReadFile(filepath.Join(straight.RunDir, last, f))
		b, errB := os.ReadFile(filepath.Join(split.RunDir, last, f))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs after resume (%v, %v)", f, errA, errB)
		}
	}
	if a, b := stableMetrics(t, straight.RunDir), stableMetrics(t, split.RunDir); !reflect.DeepEqual(a, b) {
		t.Errorf("metrics differ after resume:\n%v\n%v", a, b)
	}
	return straight
}

// The embedding scorer's values depend on the set of texts scored together
// (it centres on their mean; it batches them by length). On the raw scale
// (no reference pairs in the set) with 2 candidates each, the ranks' sets
// differ. Scored over the
// global set of abstraction problems on every rank, each candidate's
// relevance — and so every γ decision — is the same on 2 ranks as on 1:
// the rollout log's candidates with their relevance, bit for bit, and the
// step's retrieval counts.
func TestEmbeddingRelevanceSameOnAnyWorldSize(t *testing.T) {
	path, _ := seededPool(t)
	// The batch centre: the set scored together decides every score, the
	// hardest case for agreeing across ranks.
	sets := []string{"lanpo.initial_pool=" + path, "lanpo.similarity=embedding", "lanpo.embedding_centre=batch", "lanpo.feedback_ratio=1", "lanpo.modes.reflection=0",
		"lanpo.similarity_scale=raw", "lanpo.similarity_threshold=0.3", "lanpo.relevance_floor=0", "lanpo.retrieval_candidates=2", "total_steps=1", "rollout.prompts_per_step=6", "log.rollouts=true"}
	related := func(cfg Config) (map[int][]rl.Related, map[string]any) {
		rows := readRollouts(t, cfg.RunDir, 1)
		out := map[int][]rl.Related{}
		for _, r := range rows {
			if r.Sample == 0 {
				out[r.Group] = r.Related
			}
		}
		return out, stableMetrics(t, cfg.RunDir)[0]
	}
	one := lanpoConfig(t, sets...)
	runRanks(t, 1, one, "")
	two := lanpoConfig(t, sets...)
	runRanks(t, 2, two, "")
	r1, m1 := related(one)
	r2, m2 := related(two)
	n, passed := 0, 0
	for g, rel := range r1 {
		n += len(rel)
		for _, c := range rel {
			if c.Passed {
				passed++
			}
		}
		if !reflect.DeepEqual(rel, r2[g]) {
			t.Errorf("group %d: candidates on 1 rank %+v, on 2 ranks %+v", g, rel, r2[g])
		}
	}
	if n == 0 || passed == 0 || passed == n {
		t.Fatalf("%d candidates, %d passed: the test decides nothing", n, passed)
	}
	for _, k := range []string{"retrieval_candidates", "retrieval_passed", "lanpo_abstraction"} {
		if m1[k] != m2[k] {
			t.Errorf("%s: %v on 1 rank, %v on 2", k, m1[k], m2[k])
		}
	}
	if a, b := m1["relevance_raw_mean"].(float64), m2["relevance_raw_mean"].(float64); math.Abs(a-b) > 1e-12 {
		t.Errorf("relevance_raw_mean %v on 1 rank, %v on 2", a, b)
	}
	t.Logf("%d candidates, %d passed γ", n, passed)
}

// TestRunDirPreparedByRankZero: only rank 0 writes what a run puts into
// run_dir before training (the built-in model, config.resolved.yaml), and
// with its writes delayed every rank still reads the run directory only
// after they are done. Before, every rank wrote them at once and a rank
// could read another's half-written files (3 launches of 8 failed on 2
// cores).
func TestRunDirPreparedByRankZero(t *testing.T) {
	cfg := tinyConfig(t, "model=builtin:tiny", "total_steps=1")
	var mu sync.Mutex
	var events []string
	runDirHook = func(rank int, event string) {
		mu.Lock()
		events = append(events, fmt.Sprintf("%d %s", rank, event))
		mu.Unlock()
		if rank == 0 && event == "writing" {
			time.Sleep(300 * time.Millisecond) // rank 1 would get ahead if it could
		}
	}
	defer func() { runDirHook = nil }()
	runRanks(t, 2, cfg, "")
	if len(events) != 4 || events[0] != "0 writing" || events[1] != "0 written" {
		t.Fatalf("run directory events %q: want rank 0's writing and written first, then both ranks ready", events)
	}
	if _, err := os.Stat(filepath.Join(cfg.RunDir, "init-tiny", "model.safetensors")); err != nil {
		t.Fatal(err)
	}
}

// TestDataParallelTermsMatchOneRank: SDPO's and Critique-GRPO's update
// terms on 2 and 3 ranks (plain, ZeRO-2 per layer, Gloo) give one rank's
// reduced gradients, norm, loss and weights within float32 reduction
// tolerance, every rank the same weights bit for bit — and, for SDPO, the
// same EMA teacher bit for bit on every rank. The rows are split unevenly
// over the ranks.
func TestDataParallelTermsMatchOneRank(t *testing.T) {
	rolls := madeUpRollouts(10, 7)
	sdpoRows, refinements := madeUpRollouts(7, 8), madeUpRollouts(5, 9)
	for i := range sdpoRows {
		r := &sdpoRows[i]
		r.auxPrompt = append(append([]int64(nil), r.promptIDs...), 17, 18, int64(20+i))
	}
	for _, term := range []struct {
		kind string
		rows []rollout
		sets []string
	}{
		{AlgoSDPO, sdpoRows, []string{"sdpo.lambda=0.5", "sdpo.top_k=6", "sdpo.teacher_update_rate=0.5"}},
		{AlgoCritique, refinements, nil},
	} {
		t.Run(term.kind, func(t *testing.T) {
			var one dpUpdate
			errs := onRanks(1, func(c dist.Comm) (err error) {
				one, err = termUpdateOnRank(t, c, t.TempDir(), term.kind, rolls, term.rows, term.sets...)
				return err
			})
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
			gmax := one.largestGrad()
			if gmax < 1e-3 || (term.kind == AlgoSDPO && termMet[*sdpoMetrics](one.met).Divergence == 0) || (term.kind == AlgoCritique && termMet[*critiqueMetrics](one.met).Refinements != len(term.rows)) {
				t.Fatalf("largest gradient %g, metrics %+v: the test compares nothing", gmax, one.met)
			}
			for _, c := range []rankCase{
				{"plain, 2 ranks", 2, nil, false},
				{"ZeRO-2 per layer, 3 ranks", 3, []string{"dist.zero_stage=2", "train.activation_checkpointing=true", "algo.micro_batch_size=2"}, false},
				{"plain, 2 ranks over Gloo", 2, nil, true},
			} {
				t.Run(c.name, func(t *testing.T) {
					matchesOneRank(t, c, one, func(mc dist.Comm, dir string) (dpUpdate, error) {
						return termUpdateOnRank(t, mc, dir, term.kind, rolls, term.rows, append(c.sets, term.sets...)...)
					})
				})
			}
		})
	}
}

// TestDataParallelTermsExactResume: SDPO and Critique-GRPO on 2 ranks
// (ZeRO-1) resume bit for bit — weights, optimizer shards, SDPO's teacher,
// state, metrics — and their first step samples, distills and refines
// what one rank's does (the same rows: sampling is keyed by prompt).
func TestDataParallelTermsExactResume(t *testing.T) {
	for _, c := range []struct {
		kind, key string
		files     []string
	}{
		{AlgoSDPO, "sdpo_rows", []string{teacherFile}},
		{AlgoCritique, "critique_refinements", nil},
	} {
		t.Run(c.kind, func(t *testing.T) {
			sets := []string{"algo.name=" + c.kind, "dist.zero_stage=1", "rollout.prompts_per_step=4", "critique.max_critique_tokens=12"}
			one := tinyConfig(t, append(sets, "total_steps=1")...)
			runRanks(t, 1, one, "")
			ms := stableMetrics(t, twoRanksStraightAndResumed(t, c.files, sets...).RunDir)
			m1 := stableMetrics(t, one.RunDir)[0]
			for _, k := range []string{c.key, "reward_mean", "tokens_generated", "groups_kept"} {
				if m1[k] != ms[0][k] {
					t.Errorf("step 1 %s: %v on 1 rank, %v on 2", k, m1[k], ms[0][k])
				}
			}
			if n, _ := ms[0][c.key].(float64); n == 0 {
				t.Fatalf("step 1 has no %s: the test compares GRPO", c.key)
			}
		})
	}
}
