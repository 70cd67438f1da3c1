package model

import (
	"fmt"
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// The decode loop keeps everything a step needs on the device, so that a
// step is a fixed sequence of kernels the host only enqueues:
//
//   - tok [B, 1] and pos [B, 1]: each row's latest token and its position;
//   - ctr [2]: the next output column and the cache slot of the latest token;
//   - u [B, N]: each row's uniforms, the same host PCG draws as ever, one
//     column per step (N = max_new_tokens);
//   - rec [B, N]: each row's tokens and their log-probabilities as they are
//     sampled;
//   - bias [B, Tmax]: the additive attention mask over the static cache,
//     whose next slot the sampler opens.
//
// A step embeds tok, runs the layers (RoPE writes k and v into the cache at
// slot ctr[1]; attention covers a window of the cache whose length only
// changes every windowStep positions), samples on the device (csrc.Sample
// writes tok, rec, pos and bias) and advances ctr. The host reads rec every
// SyncEvery steps (a look): it finds finished rows, discards what they
// sampled after their end, and drops them from the batch. Batch sizes are
// bucketed (bucketRows), so a step's shapes and integers are static between
// looks and a CUDA graph of it can be replayed (graphs.go); the eager path
// runs the same formulation, so graphs on and off agree bit for bit.

// windowStep is the granularity of the attention window over the cache.
const windowStep = 128

// DefaultSyncEvery is how many decode steps run between two looks of the
// host at the sampled tokens when GenerateOptions.SyncEvery is 0.
const DefaultSyncEvery = 16

// compactEvery: finished rows leave the batch only at steps that are
// multiples of this (or of the multiple of it at or above SyncEvery), so
// that the batch shapes every later step runs at — and with them the
// low bits of the logits — do not depend on how often the host looks,
// for any SyncEvery up to 16.
const compactEvery = 16

// bucketRows is the batch size a decode batch of n live rows runs at: a
// power of two up to 8, then a multiple of 8.
func bucketRows(n int) int {
	if n <= 8 {
		b := 1
		for b < n {
			b *= 2
		}
		return b
	}
	return (n + 7) / 8 * 8
}

// decodeInput is what a decode step's layers share (layerInputs.dec).
type decodeInput struct {
	ctr    *ts.Tensor // [2] int64: ctr[1] is the slot the new keys go to
	bias   *ts.Tensor // [B, 1, 1, W] additive mask of the window
	window int64
}

// attend is one decode step's attention: RoPE with the cache write in one
// kernel, then the grouped query heads against the window of the cache.
// q, k, v are [B, 1, n·D]; it returns [B, 1, Hq·D] (heads in order).
func (d *decodeInput) attend(s *tensor.Scope, in *layerInputs, q, k, v *ts.Tensor, cache *layerCache) *ts.Tensor {
	c := in.cfg
	b := q.MustSize()[0]
	hq, hkv, g := c.NumAttentionHeads, c.NumKeyValueHeads, c.KVGroups()
	qr, err := csrc.RopeCache(q, k, v, nil, nil, nil, in.rope.cos, in.rope.sin, in.pos, cache.k, cache.v, d.ctr)
	if err != nil {
		panic(err)
	}
	s.Keep(qr) // [B, Hq, 1, D]
	// Query head h uses key/value head h / G: the G heads of a group are the
	// G queries of one attention over their shared keys, no copies.
	qg := s.Keep(qr.MustView([]int64{b, hkv, g, c.HeadDim}, false))
	kw := s.Keep(cache.k.MustNarrow(2, 0, d.window, false))
	vw := s.Keep(cache.v.MustNarrow(2, 0, d.window, false))
	var o *ts.Tensor
	if in.sdpa {
		o = s.Keep(ts.MustScaledDotProductAttention(qg, kw, vw, d.bias, 0, false, nil))
	} else {
		o = attentionBiased(s, qg, kw, vw, d.bias)
	}
	// [B, Hkv, G, D] → [B, 1, Hq·D]: a view where the output is contiguous
	// (CPU); CUDA's memory-efficient kernel returns a transposed layout,
	// which reshape copies.
	return s.Keep(o.MustReshape([]int64{b, 1, hq * c.HeadDim}, false))
}

// attentionBiased is attentionReference with an additive mask.
func attentionBiased(s *tensor.Scope, q, k, v, bias *ts.Tensor) *ts.Tensor {
	d := q.MustSize()[3]
	kt := s.Keep(k.MustTranspose(2, 3, false))
	scores := s.Keep(s.Keep(q.MustMatmul(kt, false)).MustMulScalar(s.Float(1/math.Sqrt(float64(d))), false))
	scores = s.Keep(scores.MustAdd(bias, false))
	probs := s.Keep(s.Keep(scores.MustSoftmax(-1, gotch.Float, false)).MustTotype(q.DType(), false))
	return s.Keep(probs.MustMatmul(v, false))
}

// decoder is one generation batch's decode loop.
type decoder struct {
	m      *Model
	p      SamplingParams
	opt    GenerateOptions
	sc     *script
	out    []Sample
	lmax   int64 // the left-padded prompt length: the first decode slot
	tmax   int64
	greedy bool

	// batch[i] is the sample row batch row i holds; rows from live on are
	// padding (copies of batch row 0) up to the bucketed size.
	batch []int
	live  int
	done  []bool // per sample row
	ended int    // sample rows finished

	cache                       *KVCache
	tok, pos, ctr, u, rec, bias *ts.Tensor
	stopIDs                     *ts.Tensor // for MinNewTokens (nil: none)
	col                         int        // ctr[0] as the host knows it
	looked                      int        // columns read so far
	every                       int        // steps between looks
	compactAt                   int        // compaction only at multiples of this
	graphs                      *stepGraphs
	timer                       *stepTimer

	caps      []int      // per sample row: its token budget (rowCaps)
	slots     *slotState // the slots engine's state (nil: one batch)
	plen      []int64    // per sample row: its prompt's length
	promptSum int64      // Σ prompt lengths over the batch rows (SlotStats)
}

// newDecoder sets up the batch after the prefill filled cache for the
// sample rows rowPrompt (one per batch row): u holds each row's uniforms
// [rows][MaxNewTokens].
func (m *Model) newDecoder(cache *KVCache, reqs []Request, rowPrompt []int, out []Sample, u [][]float64, lmax int64, p SamplingParams, opt GenerateOptions) (d *decoder, err error) {
	defer func() { // an error or a panic half-way: free what was made
		if err != nil && d != nil {
			d.close()
			d = nil
		}
	}()
	defer tensor.Recover("decode setup", &err) // runs first
	rows := len(rowPrompt)
	d = &decoder{m: m, p: p, opt: opt, out: out, lmax: lmax, tmax: cache.Tmax, greedy: p.Temperature == 0,
		live: rows, done: make([]bool, rows), cache: cache, every: opt.SyncEvery, caps: rowCaps(reqs, out, p)}
	if d.every <= 0 {
		d.every = DefaultSyncEvery
	}
	if len(p.Segments) > 0 {
		d.every = 1 // headers replace sampled tokens before the next step
	}
	d.compactAt = (d.every + compactEvery - 1) / compactEvery * compactEvery
	d.sc = newScript(p, opt.Detokenize, rows)
	for r := range out {
		d.sc.start(r, &out[r])
	}
	for r := range out {
		d.plen = append(d.plen, int64(len(reqs[rowPrompt[r]].PromptIDs)))
	}
	b := int64(cache.B)
	n := int64(p.MaxNewTokens)
	pos := make([]int64, b)
	uv := make([]float64, b*n)
	for i := int64(0); i < b; i++ {
		r := 0 // a padding row decodes a copy of row 0: finite, ignored
		if i < int64(rows) {
			r = int(i)
		}
		d.batch = append(d.batch, r)
		pos[i] = int64(len(reqs[rowPrompt[r]].PromptIDs)) - 1
		d.promptSum += pos[i] + 1
		copy(uv[i*n:(i+1)*n], u[r])
	}
	dev := m.Device
	d.tok = ts.MustZeros([]int64{b, 1}, gotch.Int64, dev)
	var s tensor.Scope
	defer s.Close()
	d.pos = s.Release(csrc.Upload(&s, pos, []int64{b, 1}, dev))
	d.ctr = s.Release(csrc.Upload(&s, []int64{0, lmax - 1}, nil, dev))
	d.u = s.Release(csrc.Upload(&s, uv, []int64{b, n}, dev))
	d.rec = ts.MustZeros([]int64{b, n}, gotch.Int64, dev)
	// The attention mask: the prompt's tokens open, padding and the decode
	// slots closed until the sampler opens them one by one.
	closed := s.Keep(cache.Mask.MustEq(s.Float(0), false))
	zero := s.Keep(ts.MustZeros([]int64{b, cache.Tmax}, m.DType, dev))
	d.bias = zero.MustMaskedFill(closed, s.Float(math.Inf(-1)), false)
	if p.MinNewTokens > 0 && len(p.StopIDs) > 0 {
		d.stopIDs = s.Release(csrc.Upload(&s, p.StopIDs, nil, dev))
	}
	d.graphs = newStepGraphs(opt.CUDAGraphs && d.every > 1, m.Device, opt.GraphStats)
	d.timer, err = newStepTimer(opt.Timing, m)
	return d, err
}

func (d *decoder) close() {
	for _, t := range []*ts.Tensor{d.tok, d.pos, d.ctr, d.u, d.rec, d.bias, d.stopIDs} {
		if t != nil {
			t.MustDrop()
		}
	}
	d.tok, d.pos, d.ctr, d.u, d.rec, d.bias, d.stopIDs = nil, nil, nil, nil, nil, nil, nil
	d.graphs.close()
	d.timer.close()
}

// run samples the first token from the prefill's logits [B, V] and decodes
// until every sample has finished or has MaxNewTokens tokens.
func (d *decoder) run(logits *ts.Tensor) error {
	var s tensor.Scope
	lp, err := d.sample(&s, logits)
	if err == nil {
		err = d.afterStep(lp)
	}
	s.Close()
	if err != nil {
		return err
	}
	return countDecode(d.opt.Counts, func() (steps int, err error) {
		for d.col < d.p.MaxNewTokens && d.ended < len(d.out) {
			var s tensor.Scope
			var lp *ts.Tensor
			err := d.timer.begin(d.live)
			if err == nil {
				lp, err = d.step(&s)
			}
			if err == nil {
				steps++
				d.countStep()
				err = d.timer.launched()
			}
			if err == nil {
				err = d.afterStep(lp)
			}
			s.Close()
			if err != nil {
				return steps, err
			}
			d.timer.looked()
		}
		return steps, nil
	})
}

// step enqueues one decode step, forward and sampling, eagerly or as a
// CUDA graph. A structured output's step returns its log-probabilities (in
// s) for the look that follows.
func (d *decoder) step(s *tensor.Scope) (lp *ts.Tensor, err error) {
	key := graphKey{rows: len(d.batch), window: d.window(), held: d.held()}
	err = d.graphs.run(key, func() error {
		var st tensor.Scope
		defer st.Close()
		logits, err := d.forward(&st, key.window)
		if err != nil {
			return err
		}
		l, err := d.sample(&st, logits)
		if d.every == 1 && l != nil {
			lp = s.Keep(st.Release(l))
		}
		return err
	})
	return lp, err
}

// afterStep advances the host's column and looks when one is due: every
// SyncEvery steps, at the steps where the batch may be compacted, and at
// the end.
func (d *decoder) afterStep(lp *ts.Tensor) error {
	d.col++
	if d.col%d.every == 0 || d.col%d.compactAt == 0 || d.col == d.p.MaxNewTokens {
		return d.look(lp)
	}
	return nil
}

// window is the attention window of the next step: the cache slots up to
// the latest token's, rounded up to windowStep.
func (d *decoder) window() int64 {
	if d.slots != nil {
		return d.slots.window
	}
	need := d.lmax + int64(d.col) // slots [0, lmax + col): the prompt and tokens 0 … col−1
	return min(d.tmax, (need+windowStep-1)/windowStep*windowStep)
}

// held reports whether the stop ids are barred this step (MinNewTokens):
// every live row has sampled col tokens of a plain output (one batch; the
// slots engine holds rows one by one, heldRows).
func (d *decoder) held() bool {
	return d.slots == nil && d.stopIDs != nil && len(d.p.Segments) == 0 && d.col < d.p.MinNewTokens
}

// countStep adds a decode step of one batch to GenerateOptions.Stats: every
// batch row attends to its prompt and the col tokens so far.
func (d *decoder) countStep() {
	o := d.opt.Stats
	if o == nil {
		return
	}
	n := int64(len(d.batch))
	o.Steps++
	o.RowSteps += n
	o.ContextTokens += d.promptSum + n*int64(d.col)
}

// forward runs the latest tokens through the model and returns the fp32
// logits [B, V] of their next tokens.
func (d *decoder) forward(s *tensor.Scope, window int64) (*ts.Tensor, error) {
	m := d.m
	b := int64(len(d.batch))
	bias := s.Keep(s.Keep(d.bias.MustNarrow(1, 0, window, false)).MustView([]int64{b, 1, 1, window}, false))
	in := &layerInputs{cfg: m.Config, sdpa: m.useSDPA, rope: m.rope, pos: d.pos,
		dec: &decodeInput{ctr: d.ctr, bias: bias, window: window}}
	x := s.Keep(ts.MustEmbedding(m.Embed, d.tok, -1, false, false)) // [B, 1, H]
	var res *ts.Tensor
	for i, l := range m.Layers {
		lc := &layerCache{k: d.cache.K[i], v: d.cache.V[i]}
		x, res = layerStep(s, x, res, func(ls *tensor.Scope, x, res *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
			return l.Forward(ls, in, x, res, lc)
		})
	}
	h, _ := addRMSNorm(s, x, res, m.Norm, m.Config.RMSNormEps)
	return m.Logits(s, s.Keep(h.MustView([]int64{b, m.Config.HiddenSize}, false))), nil
}

// sample draws every row's next token from logits [B, V] on the device and
// advances ctr. It returns the log-probabilities at the sampling
// temperature [B, V] (in s).
func (d *decoder) sample(s *tensor.Scope, logits *ts.Tensor) (*ts.Tensor, error) {
	p := d.p
	lp := scaledLogprobs(s, logits, p.Temperature)
	allowed := lp
	if d.held() {
		allowed = s.Keep(lp.MustIndexFill(1, d.stopIDs, s.Float(math.Inf(-1)), false))
	} else if hold := d.heldRows(s); hold != nil {
		allowed = hold(lp)
	}
	a := csrc.SampleArgs{Pick: allowed, LP: lp, Ctr: d.ctr, Tok: d.tok, Pos: d.pos, Bias: d.bias, Rec: d.rec, Greedy: d.greedy}
	if !d.greedy {
		// Top-p may look at the host only where that costs nothing (a CPU
		// device): on CUDA it sorts the vocabulary instead of syncing.
		a.Pick = s.Keep(filterLogprobs(s, allowed, p, !d.m.Device.IsCuda()).MustExp(false)) // removed tokens: exp(−Inf) = 0
		a.U = d.u
	}
	if err := csrc.Sample(a); err != nil {
		return nil, err
	}
	d.ctr.MustAddScalar_(s.Int(1))
	return lp, nil
}

// heldRows bars the stop ids of a structured output's rows that are fewer
// than MinNewTokens into their segment (those look every step, so the host
// knows); nil when none is.
func (d *decoder) heldRows(s *tensor.Scope) func(*ts.Tensor) *ts.Tensor {
	if len(d.p.Segments) == 0 && d.slots == nil {
		return nil
	}
	active := d.batch[:d.live] // the slots engine: every slot, −1 when idle
	if d.slots != nil {
		active = d.batch
	}
	return d.m.holdStops(s, d.p, active, d.sc, len(d.batch))
}

// look reads the columns sampled since the last look and feeds them to each
// live row's script: a row that finishes drops whatever it sampled after
// its end. In a structured output a header id may replace a sampled token
// (lp, the step's log-probabilities, gives the log-probability recorded for
// it) before the next step. At the steps where it may (compactAt), rows
// that finished leave the batch once a quarter of it has.
func (d *decoder) look(lp *ts.Tensor) (err error) {
	defer tensor.Recover("decode look", &err)
	n := d.col - d.looked
	var s tensor.Scope
	defer s.Close()
	recs := tensor.Int64s(s.Keep(d.rec.MustNarrow(1, int64(d.looked), int64(n), false))) // sync: the look
	d.looked = d.col
	var forced []int64 // batch row, token: header ids fed instead of the draw
	for i, r := range d.batch[:d.live] {
		for j := 0; j < n && !d.done[r]; j++ {
			drawn, logp := csrc.UnpackRecord(recs[i*n+j])
			tok, fin, reason := d.sc.step(r, drawn, &d.out[r])
			smp := &d.out[r]
			smp.IDs = append(smp.IDs, tok)
			smp.Logprobs = append(smp.Logprobs, logp)
			if tok != drawn {
				forced = append(forced, int64(i), tok)
			}
			if fin {
				d.finish(r, reason)
			} else if len(smp.IDs) >= d.caps[r] {
				d.finish(r, "length")
			}
			if d.opt.Stats != nil && len(smp.IDs) > 1 { // the first token came from the prefill, not a step
				d.opt.Stats.BusySlotSteps++
			}
		}
	}
	if len(forced) > 0 {
		if err := d.force(&s, lp, forced); err != nil {
			return err
		}
	}
	if d.opt.Progress != nil {
		d.opt.Progress(d.col, d.ended, len(d.out))
	}
	if d.col%d.compactAt != 0 {
		return nil
	}
	return d.compact()
}

// force feeds header ids in place of sampled tokens: the next input and the
// recorded log-probability (under the step's distribution) of each.
func (d *decoder) force(s *tensor.Scope, lp *ts.Tensor, forced []int64) error {
	if lp == nil {
		return fmt.Errorf("decode: a header replaced a sampled token without the step's log-probabilities")
	}
	rows, toks := make([]int64, 0, len(forced)/2), make([]int64, 0, len(forced)/2)
	for k := 0; k < len(forced); k += 2 {
		rows, toks = append(rows, forced[k]), append(toks, forced[k+1])
	}
	dev := d.m.Device
	ri := csrc.Upload(s, rows, nil, dev)
	ti := csrc.Upload(s, toks, []int64{int64(len(toks)), 1}, dev)
	d.tok.MustIndexCopy_(0, ri, ti)
	picked := tensor.Float64s(s.Keep(s.Keep(lp.MustIndexSelect(0, ri, false)).MustGather(1, ti, false, false))) // sync: forced tokens' log-probs
	for k := range rows {
		smp := &d.out[d.batch[rows[k]]]
		smp.Logprobs[len(smp.Logprobs)-1] = float32(picked[k])
	}
	return nil
}

// compact drops finished rows from the batch once a quarter of it has
// finished, rebucketing it: later steps cost only the running rows.
func (d *decoder) compact() error {
	var keep []int64
	for i, r := range d.batch[:d.live] {
		if !d.done[r] {
			keep = append(keep, int64(i))
		}
	}
	if len(keep) == 0 || d.opt.NoCompaction || len(keep) == d.live || 4*(d.live-len(keep)) < d.live {
		return nil
	}
	idx, err := d.keepRows(keep)
	if err != nil {
		return err
	}
	batch := make([]int, len(idx))
	d.promptSum = 0
	for j, i := range idx {
		batch[j] = d.batch[i]
		d.promptSum += d.plen[batch[j]]
	}
	d.batch, d.live = batch, len(keep)
	return nil
}

// keepRows shrinks the batch to batch rows keep, padded to their bucket
// with copies of the first: the cache and every per-row buffer are copied
// into new, smaller tensors, and the graphs (which point at the old ones)
// are dropped. It returns the rows kept, padding included.
func (d *decoder) keepRows(keep []int64) ([]int64, error) {
	idx := append([]int64(nil), keep...)
	for len(idx) < bucketRows(len(keep)) {
		idx = append(idx, keep[0])
	}
	if err := d.cache.Keep(idx); err != nil {
		return nil, err
	}
	var s tensor.Scope
	defer s.Close()
	it := csrc.Upload(&s, idx, nil, d.m.Device)
	for _, t := range []**ts.Tensor{&d.tok, &d.pos, &d.u, &d.rec, &d.bias} {
		kept := (*t).MustIndexSelect(0, it, false)
		(*t).MustDrop()
		*t = kept
	}
	d.graphs.reset()
	return idx, nil
}
