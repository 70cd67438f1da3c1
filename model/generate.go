package model

import (
	"fmt"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Request is one prompt and how many samples to draw from it.
type Request struct {
	PromptIDs []int64
	Samples   int // G; 0 means 1
	// MaxNewTokens caps this request's samples below the call's
	// SamplingParams.MaxNewTokens (0: the call's); they end with finish
	// reason "length" there.
	MaxNewTokens int
	drawOffset   int // uniforms each sample skips first (tests: a resumed sample's replay)
}

// Sample is one generated sequence.
type Sample struct {
	Prompt, Index int     // which request, which of its samples
	IDs           []int64 // generated ids (a stop id that ended it included)
	Logprobs      []float32
	FinishReason  string // "stop" or "length"
	// Segments holds, for a structured output (SamplingParams.Segments),
	// each reached segment's sampled ids as the range IDs[a:b]: headers
	// lie between the ranges; a stop id that ended the last segment is in
	// its range, one that ended an earlier segment was not fed.
	Segments [][2]int
	// Appended holds the ranges IDs[a:b] the caller appended when the
	// sample resumed after parking (GenerateOptions.Turns): prefilled, not
	// sampled; their Logprobs are NaN.
	Appended [][2]int
}

// GenerateOptions are engine switches.
type GenerateOptions struct {
	// NoPrefixSharing prefills every row separately instead of each distinct
	// prompt once (for tests and measurements).
	NoPrefixSharing bool
	// NoCompaction keeps finished rows in the batch until every row is done
	// (for tests and measurements); by default they are dropped from the KV
	// cache and the decode batch once a quarter of the rows are finished
	// (looked at every 16 steps).
	NoCompaction bool
	// Detokenize starts an incremental decoder for one sample: it is called
	// with each generated id and returns the text that id completes (a
	// tokenizer.Stream's Add). Stop strings need it.
	Detokenize func() func(id int64) string
	// Progress, if set, is called after each decode step with the number
	// of finished rows.
	Progress func(step, finished, rows int)
	// MaxRows caps the rows (samples) decoded at once, and so the KV cache
	// (0: all at once). With more rows than that, the slots engine
	// (slots.go) decodes MaxRows rows and gives a finished row's slot to
	// the next waiting sample; a request may have more samples than
	// MaxRows. Every sample keeps its random stream, so the samples are
	// those of one batch (in fp64 the same tokens; in fp32 low bits of the
	// logits differ).
	MaxRows int
	// ConsecutiveBatches makes MaxRows cut the requests, each kept whole,
	// into consecutive batches that run one after another (the engine
	// before slots; for measurements). A request with more samples than
	// MaxRows is then an error.
	ConsecutiveBatches bool
	// Turns lets samples park and resume with tokens the caller appends
	// (slots.go); it runs the slots engine.
	Turns *Turns
	// Stats, if set, receives how full the decode batch was (added to).
	Stats *SlotStats
	// MemoryFraction, on CUDA, caps the rows decoded at once so that the
	// batch (KV cache, decode and prefill buffers: Config.GenerationBytes)
	// fits in this share of the device's memory beside what this process
	// has already allocated (weights, optimizer state) and what the driver
	// still has free (0: no cap). With MaxRows the smaller cap applies.
	// Ignored on CPU.
	MemoryFraction float64
	// Timing, if set, receives each decode step's times (timing.go).
	Timing *DecodeTiming
	// Counts, if set, receives what the decode loop dispatched and copied
	// (timing.go); with MaxRows or MemoryFraction splitting the requests,
	// the last batch's.
	Counts *DecodeCounts
	// SyncEvery is how many decode steps run between two looks of the host
	// at the sampled tokens (0: DefaultSyncEvery). Between looks every
	// step stays on the device; a sample that ends in between drops what it
	// sampled after its end. Finished rows leave the batch only at
	// multiples of 16 steps (of the first multiple of 16 at or above
	// SyncEvery), so any SyncEvery up to 16 gives the same outputs bit for
	// bit; above, finished rows leave later, which moves the low bits of
	// later steps' logits (other batch shapes). Structured outputs
	// (Segments) look every step.
	SyncEvery int
	// CUDAGraphs captures decode steps as CUDA graphs and replays them
	// (graphs.go). On a CPU device only the bookkeeping runs (each step
	// eagerly); outputs are the same either way. Structured outputs
	// (Segments) run eagerly.
	CUDAGraphs bool
	// GraphStats, if set, receives what each decode step did with graphs.
	GraphStats *GraphStats
}

// Generate samples from every request. Each distinct prompt is prefilled
// once and its KV cache copied into its G rows; decoding runs over a static
// cache written in place, with every step on the device (decode.go). Every
// row's randomness comes from (Seed, request index, sample index), so which
// tokens a row can draw does not depend on the batch. Samples come back in
// request order, then sample order.
func (m *Model) Generate(reqs []Request, p SamplingParams, opt GenerateOptions) ([]Sample, error) {
	return m.GenerateAt(reqs, nil, p, opt)
}

// GenerateAt is Generate with explicit stream indices: request r draws its
// randomness as request streams[r] (nil: r), so a caller that splits a
// long input into batches keeps every sample's stream.
func (m *Model) GenerateAt(reqs []Request, streams []int, p SamplingParams, opt GenerateOptions) (out []Sample, err error) {
	// Never differentiable, and on one locked OS thread (a capture and the
	// current CUDA stream are per thread).
	err = csrc.NoGrad(func() (err error) {
		out, err = m.generateAt(reqs, streams, p, opt)
		return err
	})
	return out, err
}

func (m *Model) generateAt(reqs []Request, streams []int, p SamplingParams, opt GenerateOptions) (out []Sample, err error) {
	defer tensor.Recover("generate", &err)
	if streams != nil && len(streams) != len(reqs) {
		return nil, fmt.Errorf("generate: %d stream indices for %d requests", len(streams), len(reqs))
	}
	if len(p.Segments) > 0 {
		p.MaxNewTokens = segmentsBudget(p.Segments)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(p.allStopStrings()) > 0 && opt.Detokenize == nil {
		return nil, errNeedDecoder
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	if opt.MaxRows > 0 && opt.ConsecutiveBatches {
		if opt.Turns != nil {
			return nil, fmt.Errorf("generate: rows that park (turns) run in slots, not in consecutive batches")
		}
		return m.generateInBatches(reqs, streams, p, opt)
	}
	var lmax int64
	for r, q := range reqs {
		if err := m.CheckIDs(q.PromptIDs); err != nil {
			return nil, fmt.Errorf("request %d: %w", r, err)
		}
		if q.MaxNewTokens < 0 || q.MaxNewTokens > p.MaxNewTokens {
			return nil, fmt.Errorf("request %d: max_new_tokens %d outside [0, the call's %d]", r, q.MaxNewTokens, p.MaxNewTokens)
		}
		lmax = max(lmax, int64(len(q.PromptIDs)))
	}
	if mp := m.Config.MaxPositionEmbeddings; mp > 0 && lmax+int64(p.MaxNewTokens) > mp {
		return nil, fmt.Errorf("prompt of %d tokens + max_new_tokens %d exceed max_position_embeddings %d", lmax, p.MaxNewTokens, mp)
	}
	if n := m.rope.positions(); lmax+int64(p.MaxNewTokens) > n {
		return nil, fmt.Errorf("prompt of %d tokens + max_new_tokens %d exceed the %d positions of the RoPE table (max_position_embeddings unset)", lmax, p.MaxNewTokens, n)
	}
	if opt.MemoryFraction > 0 && m.Device.IsCuda() {
		fit, err := m.rowsThatFit(reqs, lmax, int64(p.MaxNewTokens), opt.MemoryFraction, opt.CUDAGraphs)
		if err != nil {
			return nil, err
		}
		if fit < totalRows(reqs) && (opt.MaxRows == 0 || fit < opt.MaxRows) {
			opt.MaxRows = fit
		}
	}
	if opt.MaxRows > 0 && opt.ConsecutiveBatches {
		opt.MemoryFraction = 0
		return m.generateInBatches(reqs, streams, p, opt)
	}
	if rows := totalRows(reqs); opt.Turns != nil || (opt.MaxRows > 0 && rows > opt.MaxRows) {
		slots := opt.MaxRows
		if slots == 0 || slots > rows {
			slots = bucketRows(rows)
		}
		return m.generateSlots(reqs, streams, p, opt, slots)
	}
	if o := opt.Stats; o != nil {
		o.Slots = max(o.Slots, bucketRows(totalRows(reqs)))
		o.Prefills++
		for _, q := range reqs {
			n := int64(len(q.PromptIDs))
			if opt.NoPrefixSharing {
				n *= int64(max(q.Samples, 1))
			}
			o.Prefilled += n
		}
	}
	out, rowPrompt, draws := sampleRows(reqs, streams, p.Seed)
	rows := len(rowPrompt)
	u := make([][]float64, rows) // row r's uniform for its token j: the j-th draw of its stream
	for r := range u {
		u[r] = make([]float64, p.MaxNewTokens)
		for j := range u[r] {
			u[r][j] = draws[r]()
		}
	}
	// The batch runs at a bucketed size; padding rows decode a copy of row 0.
	batch := append([]int(nil), rowPrompt...)
	for len(batch) < bucketRows(rows) {
		batch = append(batch, rowPrompt[0])
	}
	// The cache's length is a multiple of the attention window's step, so
	// that every window (and the mask's row stride) is: attention kernels
	// want aligned masks.
	cache, err := m.NewKVCache(int64(len(batch)), (lmax+int64(p.MaxNewTokens)+windowStep-1)/windowStep*windowStep)
	if err != nil {
		return nil, err
	}
	defer cache.Close()
	var s tensor.Scope
	defer s.Close()
	logits, err := m.prefill(&s, cache, reqs, batch, !opt.NoPrefixSharing)
	if err != nil {
		return nil, err
	}
	d, err := m.newDecoder(cache, reqs, rowPrompt, out, u, lmax, p, opt)
	if err != nil {
		return nil, err
	}
	defer d.close()
	if err := d.run(logits); err != nil {
		return nil, err
	}
	return out, nil
}

func totalRows(reqs []Request) int {
	n := 0
	for _, q := range reqs {
		n += max(q.Samples, 1)
	}
	return n
}

// rowsThatFit is how many rows of a batch like reqs fit under the memory
// fraction on this CUDA device: an error when not even the largest
// request's group does, saying what it needs and what there is.
func (m *Model) rowsThatFit(reqs []Request, lmax, maxNew int64, fraction float64, graphs bool) (int, error) {
	info, ok, err := csrc.CUDAMemory(m.Device)
	if err != nil || !ok {
		return 0, fmt.Errorf("generation: device memory of %v: %v (supported: %v)", m.Device, err, ok)
	}
	return m.fitRows(info, reqs, lmax, maxNew, fraction, graphs)
}

// fitRows is rowsThatFit's arithmetic for a device in the state info.
func (m *Model) fitRows(info csrc.CUDAMemInfo, reqs []Request, lmax, maxNew int64, fraction float64, graphs bool) (int, error) {
	budget := min(int64(fraction*float64(info.Total))-info.Allocated, info.Free+info.Reserved-info.Allocated)
	dt := int64(m.DType.Size())
	per := func(rows int64) int64 {
		return m.Config.GenerationBytes(rows, 1, lmax, lmax+maxNew, dt, m.useSDPA, graphs)
	}
	group := 0
	for _, q := range reqs {
		group = max(group, max(q.Samples, 1))
	}
	if need := per(int64(group)); need > budget {
		return 0, fmt.Errorf("generation: one prompt's %d samples of up to %d tokens need %.2f GiB (KV cache and decode buffers), "+
			"but %.2f GiB are available (memory fraction %.2f of %.1f GiB, %.2f GiB already allocated): lower max_new_tokens or samples per prompt, or raise rollout.gpu_memory_fraction",
			group, lmax+maxNew, gibs(need), gibs(max(budget, 0)), fraction, gibs(info.Total), gibs(info.Allocated))
	}
	// A group's cost, its prompt's prefill included, spread over its rows.
	perRow := (per(int64(group)) + int64(group) - 1) / int64(group)
	return int(min(budget/perRow, int64(totalRows(reqs)))), nil
}

func gibs(b int64) float64 { return float64(b) / (1 << 30) }

// generateInBatches is GenerateAt under opt.MaxRows with
// opt.ConsecutiveBatches.
func (m *Model) generateInBatches(reqs []Request, streams []int, p SamplingParams, opt GenerateOptions) ([]Sample, error) {
	if streams == nil {
		streams = make([]int, len(reqs))
		for i := range streams {
			streams[i] = i
		}
	}
	limit := opt.MaxRows
	opt.MaxRows = 0
	var out []Sample
	for start := 0; start < len(reqs); {
		end, rows := start, 0
		for end < len(reqs) && rows+max(reqs[end].Samples, 1) <= limit {
			rows += max(reqs[end].Samples, 1)
			end++
		}
		if end == start {
			return nil, fmt.Errorf("request %d: its %d samples do not fit in a generation batch of at most %d rows", start, reqs[start].Samples, limit)
		}
		var before SlotStats
		if o := opt.Stats; o != nil {
			before = *o
		}
		res, err := m.GenerateAt(reqs[start:end], streams[start:end], p, opt)
		if err != nil {
			return nil, err
		}
		if o := opt.Stats; o != nil {
			o.Slots = limit
			if end < len(reqs) { // requests still waited for a batch
				o.StepsWaiting += o.Steps - before.Steps
				o.BusyWaiting += o.BusySlotSteps - before.BusySlotSteps
			}
		}
		for i := range res {
			res[i].Prompt += start
		}
		out = append(out, res...)
		start = end
	}
	return out, nil
}

// sampleRows lays out one row per sample, request r's samples on
// consecutive rows, and gives each row its random stream: request r draws
// as streams[r] (nil: r). It returns the rows' samples to fill, the request
// of each row, and each row's draw of a uniform number in (0, 1].
func sampleRows(reqs []Request, streams []int, seed uint64) (out []Sample, rowPrompt []int, draws []func() float64) {
	for r, q := range reqs {
		stream := r
		if streams != nil {
			stream = streams[r]
		}
		for i := 0; i < max(q.Samples, 1); i++ {
			g := rowRNG(seed, stream, i)
			for range q.drawOffset {
				g.Float64()
			}
			out = append(out, Sample{Prompt: r, Index: i, FinishReason: "length"})
			rowPrompt = append(rowPrompt, r)
			draws = append(draws, func() float64 { return 1 - g.Float64() })
		}
	}
	return out, rowPrompt, draws
}

// prefill runs the prompts, left-padded to the longest, through the model into the
// cache and returns the logits [rows, V] of each row's last prompt token.
// With sharing, each distinct request is prefilled once into a small cache
// and copied into its rows.
func (m *Model) prefill(s *tensor.Scope, cache *KVCache, reqs []Request, rowPrompt []int, share bool) (*ts.Tensor, error) {
	batch := rowPrompt
	if share {
		batch = make([]int, len(reqs))
		for i := range batch {
			batch[i] = i
		}
	}
	prompts := make([][]int64, len(batch))
	for r, q := range batch {
		prompts[r] = reqs[q].PromptIDs
	}
	l, ids, pos, mask := m.leftPad(s, prompts)
	target := cache
	if share {
		var err error
		if target, err = m.NewKVCache(l.b, l.t); err != nil {
			return nil, err
		}
		defer target.Close()
	}
	h, err := m.Forward(s, ids, pos, l.attention(mask), target)
	if err != nil {
		return nil, err
	}
	last := s.Keep(s.Keep(h.MustNarrow(1, l.t-1, 1, false)).MustSqueezeDim(1, false)) // [b, H]
	logits := m.Logits(s, last)
	if !share {
		return logits, nil
	}
	src := make([]int64, len(rowPrompt))
	dst := make([]int64, len(rowPrompt))
	for i, q := range rowPrompt {
		src[i], dst[i] = int64(q), int64(i)
	}
	if err := cache.CopyRows(target, src, dst); err != nil {
		return nil, err
	}
	idx := tensor.FromSlice(s, src, nil, m.Device)
	return s.Keep(logits.MustIndexSelect(0, idx, false)), nil
}
