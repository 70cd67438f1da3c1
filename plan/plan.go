package plan

import (
	"fmt"
	"strings"

	"github.com/lanpo-rl/lanpo/model"
)

// Plan is lanpo plan: per-GPU memory of a GRPO/LANPO (or SFT) run before
// renting GPUs, from the model's config and the run's shape. The precision
// policy for large models (one place):
//
//   - parameters and activations in bf16 (dtype: the checkpoint's on CUDA);
//   - fp32 master weights and Adam moments (AdamW keeps a fp32 master for
//     every 16-bit parameter; gradients arrive in the parameter's dtype);
//   - fp32 log-softmax statistics (the fused log-prob op accumulates in
//     fp32 over a [chunk, V] fp32 buffer), fp32 loss, advantages and
//     importance weights.
//
// ZeRO: stage 1 shards masters and moments over the GPUs, stage 2 also the
// gradients — which lowers the peak only when gradients are reduce-scattered
// layer by layer as the backward finishes them (activation checkpointing's
// per-layer backward); otherwise the full gradients exist at the end of
// backward. Parameter sharding (ZeRO-3/FSDP) is not implemented.

// Options describe the run.
type Options struct {
	GPUs            int
	Zero            int     // 0, 1, 2
	DTypeBytes      int64   // parameters and activations (2: bf16)
	SeqLen          int64   // longest training sequence: prompt + response
	MicroTokens     int64   // tokens per micro-batch (algo.max_tokens_per_micro_batch)
	Checkpointing   bool    // train.activation_checkpointing
	SDPA            bool    // attention through SDPA (CUDA): no kept probabilities
	CUDAGraphs      bool    // rollout.cuda_graphs: the graphs' memory pool
	KLBeta          float64 // > 0: a reference model
	RefOffload      bool    // the reference model lives off the GPU
	RolloutRows     int64   // sequences a step generates per GPU (prompts × G)
	RolloutGroup    int64   // G, samples per prompt (0: 1)
	RolloutPrompt   int64   // longest prompt (0: a quarter of RolloutTokens)
	RolloutTokens   int64   // longest prompt + max_new_tokens
	LogProbChunk    int64   // rows of the fused op's fp32 logits buffer
	GPUMem          int64   // bytes per GPU (0: do not judge)
	Headroom        float64 // share of GPUMem kept free (allocator, CUDA context)
	MasterForWeight bool    // fp32 masters (true for 16-bit parameters)
	// LoRARank > 0 plans a LoRA run (lora.r; LoRATargets: lora.target_modules,
	// nil for all seven): the base frozen in DTypeBytes, fp32 adapters with
	// their gradients and moments, no reference copy (the reference is the
	// policy with its adapters off), and no head weight gradient.
	LoRARank    int64
	LoRATargets []string
	// SDPOTopK > 0 plans algo.name sdpo with sdpo.top_k = SDPOTopK: the EMA
	// teacher is one more copy of the weights, and each update micro-batch
	// first runs the teacher's forward (no grad) and keeps its top-K.
	SDPOTopK int64
	// ConsolidateOwnStep plans LANPO's consolidation in optimizer steps of
	// its own (lanpo.consolidate_lr > 0): its Adam moments are a second set
	// beside the policy's.
	ConsolidateOwnStep bool
}

// Line is one component's bytes per GPU and when it is held: always,
// during rollout, or during the update (the rollout's KV cache is freed
// before the update's activations exist).
type Line struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	Phase string `json:"phase"` // always, rollout, update
	Note  string `json:"note"`
}

// Result is the table and its verdict.
type Result struct {
	Params      int64    `json:"params"`
	Lines       []Line   `json:"lines"`
	Rollout     int64    `json:"rollout_peak"` // always + rollout
	Update      int64    `json:"update_peak"`  // always + update
	Total       int64    `json:"peak"`         // the larger, plus headroom
	Fits        bool     `json:"fits"`
	RowsThatFit int64    `json:"rollout_rows_that_fit"` // rollout rows whose KV cache fits next to the persistent state
	Notes       []string `json:"notes"`
}

const gib = 1 << 30

// Plan computes the per-GPU memory of a run of cfg: the persistent state,
// the update's peak and the rollout's, and with o.GPUMem whether they fit.
func Plan(cfg *model.Config, o Options) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	b := &planner{cfg: cfg, o: o, r: Result{Params: cfg.ParamCount()}, phase: "always"}
	b.state()
	b.phase = "update"
	b.update()
	always := b.totals()
	b.phase = "rollout"
	b.rollout(always)
	b.verdict(always)
	return b.r, nil
}

func (o Options) check() error {
	switch {
	case o.GPUs < 1:
		return fmt.Errorf("--gpus must be ≥ 1")
	case o.Zero < 0 || o.Zero > 2:
		return fmt.Errorf("--zero %d: lanpo has ZeRO stages 0, 1 and 2 (parameter sharding, stage 3, is not implemented)", o.Zero)
	case o.SeqLen < 1 || o.MicroTokens < 1:
		return fmt.Errorf("--seq-len and --micro-tokens must be ≥ 1")
	}
	return nil
}

// planner builds a Result line by line, each line in the current phase.
type planner struct {
	cfg   *model.Config
	o     Options
	r     Result
	phase string
}

func (b *planner) add(name string, bytes int64, note string) {
	b.r.Lines = append(b.r.Lines, Line{name, bytes, b.phase, note})
}

// shard is x bytes as ZeRO stage from (or later) holds them on each GPU.
func (b *planner) shard(x int64, from int) (int64, string) {
	if n := int64(b.o.GPUs); b.o.Zero >= from && b.o.GPUs > 1 {
		return (x + n - 1) / n, fmt.Sprintf("sharded over %d GPUs (ZeRO-%d)", b.o.GPUs, b.o.Zero)
	}
	return x, "full on every GPU"
}

// state is what every phase holds: weights, the reference model, fp32
// masters and Adam's moments.
func (b *planner) state() {
	o, p := b.o, b.r.Params
	if o.LoRARank > 0 {
		b.loraState()
		return
	}
	b.add("weights", p*o.DTypeBytes, fmt.Sprintf("%.2f B parameters × %d bytes", float64(p)/1e9, o.DTypeBytes))
	switch {
	case o.KLBeta == 0:
		b.add("reference model", 0, "none: kl_beta 0")
	case o.RefOffload:
		b.add("reference model", 0, "offloaded to the host")
	default:
		b.add("reference model", p*o.DTypeBytes, "a frozen copy for the KL term")
	}
	if o.SDPOTopK > 0 {
		b.add("SDPO EMA teacher", p*o.DTypeBytes, "a copy of the weights, moved toward the policy after each optimizer step")
	}
	if o.MasterForWeight {
		m, note := b.shard(4*p, 1)
		b.add("fp32 master weights", m, note)
	}
	mom, note := b.shard(8*p, 1)
	b.add("Adam moments (fp32 m, v)", mom, note)
	b.consolidationMoments(mom, note)
}

// consolidationMoments is consolidation's own moment set (lanpo.consolidate_lr):
// as large as the policy's.
func (b *planner) consolidationMoments(mom int64, note string) {
	if b.o.ConsolidateOwnStep {
		b.add("consolidation's Adam moments (fp32 m, v)", mom, note+"; lanpo.consolidate_lr: a moment group of its own")
	}
}

// loraState is state under LoRA: the frozen base, the fp32 adapters and
// their moments (no masters: the adapters are fp32 themselves).
func (b *planner) loraState() {
	o, p := b.o, b.r.Params
	pl := b.cfg.LoRAParamCount(o.LoRARank, o.LoRATargets)
	b.add("weights", p*o.DTypeBytes, fmt.Sprintf("%.2f B parameters × %d bytes, frozen", float64(p)/1e9, o.DTypeBytes))
	targets := len(o.LoRATargets)
	if targets == 0 {
		targets = len(model.LoRATargets)
	}
	b.add("LoRA adapters (fp32)", 4*pl, fmt.Sprintf("r %d on %d projections × %d layers: %.1f M parameters", o.LoRARank, targets, b.cfg.NumHiddenLayers, float64(pl)/1e6))
	b.add("reference model", 0, "none: the policy with its adapters off")
	mom, note := b.shard(8*pl, 1)
	b.add("Adam moments (fp32 m, v)", mom, note+", adapters only")
	b.consolidationMoments(mom, note+", adapters only")
}

// update is what the update adds: gradients, a micro-batch's activations
// and the fused log-prob op's buffers.
func (b *planner) update() {
	o, cfg, p := b.o, b.cfg, b.r.Params
	gradBytes, gwhat := p*o.DTypeBytes, ""
	if o.LoRARank > 0 {
		gradBytes, gwhat = 4*cfg.LoRAParamCount(o.LoRARank, o.LoRATargets), ", adapters only (fp32)"
	}
	g, gnote := b.shard(gradBytes, 2)
	if o.Zero == 2 && !o.Checkpointing {
		g, gnote = gradBytes, "full at the end of backward: ZeRO-2 frees gradient shards layer by layer only with activation checkpointing"
	}
	b.add("gradients", g, gnote+gwhat)

	h, L, v := cfg.HiddenSize, cfg.NumHiddenLayers, cfg.VocabSize
	tok := o.MicroTokens
	perLayer := cfg.ActivationElems() * o.DTypeBytes
	if o.LoRARank > 0 {
		perLayer += cfg.LoRAActivationBytes(o.LoRARank, o.LoRATargets, o.DTypeBytes)
	}
	attn := int64(0)
	if !o.SDPA {
		attn = cfg.AttentionProbs(o.SeqLen) * 4
	}
	// The backward of a layer also holds the gradients of its
	// intermediates: about one more layer's activations, the attention
	// probabilities' twice (the softmax's backward holds the gradients of
	// its output and of its input at once).
	bwd := tok * (perLayer + 2*attn)
	var act int64
	var actNote string
	if o.Checkpointing {
		// Each layer's input, plus one layer recomputed with grad and its
		// backward.
		act = tok*h*o.DTypeBytes*(L+1) + tok*(perLayer+attn) + bwd
		actNote = fmt.Sprintf("%d tokens: each layer's input, one layer recomputed and its backward", tok)
	} else {
		act = tok*(perLayer+attn)*L + bwd
		actNote = fmt.Sprintf("%d tokens × %d layers × %.0f KB per token and layer, and one layer's backward", tok, L, float64(perLayer+attn)/1024)
	}
	b.add("activations (micro-batch)", act, actNote)
	chunk := min(o.LogProbChunk, tok)
	b.add("log-prob chunk buffer", chunk*v*4+tok*h*4, fmt.Sprintf("fp32 [%d, %d] logits chunk and fp32 hidden gradient", chunk, v))
	switch {
	case o.LoRARank > 0:
		b.add("head weight gradient", 0, "none: the head is frozen (the fused op skips dW)")
	case o.DTypeBytes < 4:
		b.add("head weight gradient", v*h*4, fmt.Sprintf("fp32 [%d, %d] accumulation of dW before its cast", v, h))
	}
	if k := o.SDPOTopK; k > 0 {
		// Held through the student's backward: the teacher's top-K ids
		// (int64) and log-probs (fp32), and the student's log-probs at them
		// (+ the sampled token) and the divergence's intermediates in fp64.
		// The teacher's forward runs before the student's, without grad, in
		// a scope of its own: its layers' outputs and logits chunk are freed
		// before the student's forward exists.
		b.add("SDPO teacher outputs", tok*(k*12+(k+2)*8*3),
			fmt.Sprintf("%d tokens × (the teacher's top-%d, the divergence's terms)", tok, k))
	}
}

// totals sets the update's peak and returns what every phase holds.
func (b *planner) totals() (always int64) {
	for _, l := range b.r.Lines {
		switch l.Phase {
		case "always":
			always += l.Bytes
		case "update":
			b.r.Update += l.Bytes
		}
	}
	b.r.Update += always
	return always
}

// rollout is the generation engine's own estimate (KV cache, decode and
// prefill buffers: model.Config.GenerationBytes), for every row at once
// or, where they do not fit beside the persistent state, for as many whole
// groups as do (rollout.gpu_memory_fraction splits a step's generation
// that way).
func (b *planner) rollout(always int64) {
	o, cfg, r := b.o, b.cfg, &b.r
	grp := groupSize(o)
	lmax := o.RolloutPrompt
	if lmax == 0 {
		lmax = o.RolloutTokens / 4
	}
	gen := func(rows int64) int64 {
		return cfg.GenerationBytes(rows, (rows+grp-1)/grp, lmax, o.RolloutTokens, o.DTypeBytes, o.SDPA, o.CUDAGraphs)
	}
	rows := o.RolloutRows
	if o.GPUMem > 0 {
		free := o.GPUMem - o.headroom() - always
		r.RowsThatFit = 0
		for n := grp; n <= max(o.RolloutRows, grp) && gen(n) <= free; n += grp {
			r.RowsThatFit = n
		}
		rows = min(rows, r.RowsThatFit)
	}
	if o.RolloutRows > 0 {
		note := fmt.Sprintf("%d rows × %d positions: KV cache and decode buffers", rows, o.RolloutTokens)
		if rows < o.RolloutRows && rows > 0 {
			note = fmt.Sprintf("%d of the step's %d rows at once (slots: a finished row's slot takes the next sample) × %d positions", rows, o.RolloutRows, o.RolloutTokens)
		}
		b.add("rollout (generation batch)", gen(rows), note)
		r.Rollout = always + gen(rows)
	}
}

// headroom is the share of the GPU kept for the CUDA context and the
// allocator's fragmentation.
func (o Options) headroom() int64 { return int64(float64(o.GPUMem) * o.Headroom) }

// verdict sets the peak and, given the GPU's memory, whether the run fits
// and what would make it fit.
func (b *planner) verdict(always int64) {
	o, r := b.o, &b.r
	r.Total = max(r.Rollout, r.Update)
	if o.GPUMem == 0 {
		return
	}
	head := o.headroom()
	b.phase = "always"
	b.add("headroom", head, fmt.Sprintf("%.0f%% of the GPU for the CUDA context and allocator fragmentation", 100*o.Headroom))
	r.Total += head
	// Generation splits into batches that fit, so the rollout fits when
	// one group does; the update must fit whole.
	updateFits := r.Update+head <= o.GPUMem
	r.Fits = updateFits && (o.RolloutRows == 0 || r.RowsThatFit >= 1)
	if o.RolloutRows > 0 && r.RowsThatFit == 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("not even one prompt's %d samples fit beside the persistent state (%.1f GiB)", groupSize(o), float64(always)/gib))
	}
	if !updateFits {
		r.Notes = append(r.Notes, suggestions(r.Update+head-o.GPUMem, o)...)
	}
}

// groupSize is the rollout's group size (samples per prompt).
func groupSize(o Options) int64 { return max(o.RolloutGroup, 1) }

// suggestions name the settings that would lower the update's peak.
func suggestions(over int64, o Options) []string {
	var s []string
	s = append(s, fmt.Sprintf("the update is over by %.1f GiB", float64(over)/gib))
	if o.KLBeta > 0 && !o.RefOffload && o.LoRARank == 0 {
		s = append(s, "kl_beta 0, or the reference on the host (algo.ref_device: cpu; --ref-offload here), removes the reference model from the GPU")
	}
	if o.GPUs > 1 && (o.Zero < 2 || !o.Checkpointing) {
		s = append(s, "ZeRO-2 with activation checkpointing shards the gradients layer by layer")
	} else if !o.Checkpointing {
		s = append(s, "activation checkpointing keeps one layer's activations instead of all")
	}
	if o.GPUs > 1 && o.Zero < 1 {
		s = append(s, "ZeRO-1 shards masters and moments")
	}
	if o.LoRARank == 0 {
		s = append(s, "LoRA (lora.r; --lora-r here) trains adapters on a frozen base: no masters, moments or gradients of the base, no reference copy")
	}
	s = append(s, "fewer micro-batch tokens lower the activations; weights themselves are not sharded (ZeRO-3/FSDP is not implemented)")
	return s
}

// MaxMicroTokens is the largest update micro-batch, in tokens (a multiple
// of 256), whose update phase fits o.GPUMem, or 0 when none does. A
// micro-batch below o.SeqLen still holds one whole sequence: the trainer
// never splits one.
func MaxMicroTokens(cfg *model.Config, o Options) (int64, error) {
	if o.GPUMem == 0 {
		return 0, fmt.Errorf("max micro-batch: no GPU memory given")
	}
	fits := func(tok int64) (bool, error) {
		q := o
		q.MicroTokens, q.RolloutRows = tok, 0
		r, err := Plan(cfg, q)
		return err == nil && r.Update+q.headroom() <= q.GPUMem, err
	}
	lo, hi := int64(0), int64(256)
	for {
		ok, err := fits(hi)
		if err != nil {
			return 0, err
		}
		if !ok || hi > 1<<24 {
			break
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > 256 {
		mid := (lo + hi) / 2 / 256 * 256
		if ok, _ := fits(mid); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// String renders the plan as a table.
func (r Result) String() string {
	var b strings.Builder
	for _, l := range r.Lines {
		fmt.Fprintf(&b, "  %-26s %9.2f GiB  %-7s %s\n", l.Name, float64(l.Bytes)/gib, l.Phase, l.Note)
	}
	fmt.Fprintf(&b, "  %-26s %9.2f GiB\n", "rollout phase", float64(r.Rollout)/gib)
	fmt.Fprintf(&b, "  %-26s %9.2f GiB\n", "update phase", float64(r.Update)/gib)
	fmt.Fprintf(&b, "  %-26s %9.2f GiB  the larger phase plus headroom\n", "peak per GPU", float64(r.Total)/gib)
	return b.String()
}
