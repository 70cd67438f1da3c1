package plan

import (
	"fmt"
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/optim"
)

// MemoryCheck is one line of lanpo bench memory: what lanpo plan says a
// component takes and what the process's peak RSS measured for it.
type MemoryCheck struct {
	Name     string  `json:"name"`
	Planned  int64   `json:"planned_bytes"`
	Measured int64   `json:"measured_bytes"`
	Ratio    float64 `json:"measured_over_planned"`
}

// MeasureMemory checks Plan against the host: a random model of cfg in
// float32 on the CPU, one micro-batch of rows × seq tokens through the
// trainer's log-prob path (fused log-prob op, reference attention), its
// backward, and an AdamW step. Each figure is the process's resident set
// (RSS) grown over one phase, with the host allocator returning large
// frees at once (csrc.MeasureHostMemory) and the peak reset through
// /proc/self/clear_refs before each phase:
//
//   - weights: RSS after building the model minus before;
//   - gradients: RSS after the first backward minus before it (the
//     activations are gone by then, the gradients stay);
//   - Adam moments: RSS after the first optimizer step minus before it;
//   - activations + log-prob buffer, without and with activation
//     checkpointing: the peak RSS during a forward and backward above the
//     RSS before it (gradients already allocated, so what grows is what
//     the forward keeps and the backward's transients).
//
// The update's peak with checkpointing should drop by roughly the
// activations' (layers − 1)/layers share; the printed ratio says how
// close the plan's arithmetic is.
func MeasureMemory(cfg *model.Config, rows, seq int64, seed int64) (checks []MemoryCheck, err error) {
	defer tensor.Recover("bench memory", &err)
	csrc.MeasureHostMemory()
	planFor := func(ckpt bool) (map[string]int64, error) {
		r, err := Plan(cfg, Options{GPUs: 1, DTypeBytes: 4, SeqLen: seq, MicroTokens: rows * seq, Checkpointing: ckpt,
			LogProbChunk: csrc.DefaultLogProbChunk(false)})
		if err != nil {
			return nil, err
		}
		out := map[string]int64{}
		for _, l := range r.Lines {
			out[l.Name] = l.Bytes
		}
		return out, nil
	}
	plain, err := planFor(false)
	if err != nil {
		return nil, err
	}
	ckptPlan, err := planFor(true)
	if err != nil {
		return nil, err
	}
	add := func(name string, planned, measured int64) {
		checks = append(checks, MemoryCheck{Name: name, Planned: planned, Measured: measured, Ratio: float64(measured) / math.Max(float64(planned), 1)})
	}

	before := measuredRSS()
	m, err := model.NewRandom(cfg, model.LoadOptions{Device: gotch.CPU, DType: gotch.Float}, seed)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	add("weights", plain["weights"], measuredRSS()-before)
	for _, p := range m.Params() {
		p.Tensor.MustRequiresGrad_(true)
	}

	var data tensor.Scope
	defer data.Close()
	idsT, posT, maskT, tmask := memoryBenchBatch(&data, cfg, rows, seq, seed)
	opt := csrc.LogProbOptions{Temperature: 1}
	step := func(ckpt bool) error {
		var s tensor.Scope
		defer s.Close()
		lp, _, c, err := m.TokenLogProbsMaybeCheckpointed(ckpt, &s, idsT, posT, maskT, idsT, tmask, opt)
		if err != nil {
			return err
		}
		loss := s.Keep(lp.MustMean(gotch.Float, false))
		return model.Backward(loss, c, nil)
	}

	// A forward without grad first starts the thread pools and kernels'
	// one-time state, which would otherwise count as gradients.
	if err := csrc.NoGrad(func() error {
		var s tensor.Scope
		defer s.Close()
		_, _, err := m.TokenLogProbs(&s, idsT, posT, maskT, idsT, tmask, opt)
		return err
	}); err != nil {
		return nil, err
	}
	before = measuredRSS()
	if err := step(false); err != nil {
		return nil, err
	}
	add("gradients", plain["gradients"], measuredRSS()-before)
	// The moments are allocated zeroed, so their pages count once the
	// first step writes them.
	before = measuredRSS()
	o, err := optim.NewAdamW(m.Params(), 0.9, 0.999, 1e-8, 0)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	if err := o.Update(1e-6); err != nil {
		return nil, err
	}
	add("Adam moments (fp32 m, v)", plain["Adam moments (fp32 m, v)"], measuredRSS()-before)

	for _, ckpt := range []bool{false, true} {
		plan := plain
		name := "activations + log-prob buffer"
		if ckpt {
			plan, name = ckptPlan, name+", checkpointed"
		}
		o.ZeroGrad()
		// A warm-up run first, so one-time allocations (thread pools,
		// kernels' scratch) are not counted.
		if err := step(ckpt); err != nil {
			return nil, err
		}
		o.ZeroGrad()
		meter := csrc.NewPeakMeter(gotch.CPU)
		if err := step(ckpt); err != nil {
			return nil, err
		}
		peak, src := meter.Peak()
		if peak == 0 {
			return nil, fmt.Errorf("no peak memory figure: %s", src)
		}
		add(name, plan["activations (micro-batch)"]+plan["log-prob chunk buffer"], peak)
	}
	return checks, nil
}

// ZeroMemory is one line of lanpo bench memory --zero: a rank's memory for
// an update under one sharding.
type ZeroMemory struct {
	Mode  string `json:"mode"`
	Rank  int    `json:"rank"`
	World int    `json:"world"`
	// State is the optimizer's own bytes (Optimizer.StateBytes).
	State int64 `json:"optimizer_state_bytes"`
	// Peak is the process's peak RSS during a whole update (forward,
	// checkpointed backward, reduction, AdamW step) above its RSS before
	// the model was built: weights, gradients, optimizer state, activations
	// and the collectives' buffers together.
	Peak int64 `json:"update_peak_bytes"`
}

// MeasureZeroMemory runs, on this rank of c, one update of a random model
// of cfg (float32, CPU, rows × seq tokens, activation checkpointing) under
// plain data parallelism, ZeRO-1 and ZeRO-2 (gradients reduce-scattered
// layer by layer during the backward), and measures each one's peak RSS
// (see ZeroMemory). A warm-up update first writes the moments' pages, so
// they count. Every rank must call it with the same arguments: the updates
// are collectives.
func MeasureZeroMemory(cfg *model.Config, rows, seq, seed int64, c dist.Comm) (out []ZeroMemory, err error) {
	defer tensor.Recover("bench memory --zero", &err)
	if c == nil {
		c = dist.Single()
	}
	csrc.MeasureHostMemory()
	var data tensor.Scope
	defer data.Close()
	ids, pos, mask, tmask := memoryBenchBatch(&data, cfg, rows, seq, seed)
	for _, mode := range []struct {
		name  string
		stage int
	}{{"plain (all-reduce)", 0}, {"ZeRO-1", 1}, {"ZeRO-2 per layer", 2}} {
		z, err := measureZeroMode(cfg, seed, c, mode.stage, ids, pos, mask, tmask)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode.name, err)
		}
		z.Mode, z.Rank, z.World = mode.name, c.Rank(), c.Size()
		out = append(out, z)
	}
	return out, nil
}

func measureZeroMode(cfg *model.Config, seed int64, c dist.Comm, stage int, idsT, posT, maskT, tmask *ts.Tensor) (ZeroMemory, error) {
	base := measuredRSS()
	m, err := model.NewRandom(cfg, model.LoadOptions{Device: gotch.CPU, DType: gotch.Float}, seed)
	if err != nil {
		return ZeroMemory{}, err
	}
	defer m.Close()
	for _, p := range m.Params() {
		p.Tensor.MustRequiresGrad_(true)
	}
	o, err := optim.NewOptimizer(m.Params(), optim.Hyper{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, c, stage, 16<<20, true)
	if err != nil {
		return ZeroMemory{}, err
	}
	defer o.Close()
	update := func() error {
		var s tensor.Scope
		defer s.Close()
		o.ZeroGrad()
		lp, _, ck, err := m.TokenLogProbsCheckpointed(&s, idsT, posT, maskT, idsT, tmask, csrc.LogProbOptions{Temperature: 1})
		if err != nil {
			return err
		}
		loss := s.Keep(lp.MustMean(gotch.Float, false))
		if err := model.Backward(loss, ck, o.LayerDone); err != nil {
			return err
		}
		_, err = o.Apply(1e-6, 0, 0)
		return err
	}
	if err := update(); err != nil {
		return ZeroMemory{}, err
	}
	o.ZeroGrad()
	start := measuredRSS()
	meter := csrc.NewPeakMeter(gotch.CPU) // peak above the RSS at start
	if err := update(); err != nil {
		return ZeroMemory{}, err
	}
	peak, src := meter.Peak()
	if peak == 0 {
		return ZeroMemory{}, fmt.Errorf("no peak memory figure: %s", src)
	}
	return ZeroMemory{State: o.StateBytes(), Peak: start - base + peak}, nil
}

// measuredRSS is the process's resident set after trimming the heap (use
// with csrc.MeasureHostMemory set); it panics where /proc cannot say, for
// the measuring functions' tensor.Recover to report.
func measuredRSS() int64 {
	csrc.MeasureHostMemory()
	n, err := tensor.RSSBytes()
	if err != nil {
		panic(err)
	}
	return n
}

// memoryBenchBatch is the memory benchmarks' micro-batch: rows × seq random
// token ids (targets = inputs), positions, no attention mask (nil) and an
// all-true target mask, on the CPU, registered in s.
func memoryBenchBatch(s *tensor.Scope, cfg *model.Config, rows, seq, seed int64) (ids, pos, mask, tmask *ts.Tensor) {
	flat, p, m := make([]int64, 0, rows*seq), make([]int64, 0, rows*seq), make([]int64, 0, rows*seq)
	for _, row := range model.RandomIDs(rows, seq, cfg.VocabSize, seed) {
		for j, id := range row {
			flat, p, m = append(flat, id), append(p, int64(j)), append(m, 1)
		}
	}
	shape := []int64{rows, seq}
	ids = tensor.FromSlice(s, flat, shape, gotch.CPU)
	pos = tensor.FromSlice(s, p, shape, gotch.CPU)
	// No attention mask: rows of one length, as the trainer's right-padded
	// batches, need only causal attention.
	return ids, pos, nil, s.Keep(tensor.FromSlice(s, m, shape, gotch.CPU).MustTotype(gotch.Bool, false))
}
