package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// The slots engine decodes a fixed number of rows (slots) at once and
// refills a slot as soon as its row finishes, so the batch stays full while
// samples wait, instead of running consecutive batches that each pay their
// longest sample (the tail). It runs when the rows outnumber
// GenerateOptions.MaxRows (or what fits the memory fraction), and whenever
// rows may park (GenerateOptions.Turns).
//
// Layout. Each slot's cache row holds its own sample's positions: token p of
// prompt + output at slot p (csrc's negative-slot mode: the RoPE kernel
// writes each row at its position, the sampler opens each row's next
// position). So a slot refilled at any step needs no shift and no rebase,
// and the cache is as long as the longest prompt plus max_new_tokens — the
// same as one batch's. Attention reads a window up to the longest live
// row's position (rounded up to windowStep), so a step costs what the
// longest row needs, as in one batch.
//
// Refill happens between steps, at a look: the host reads the records,
// frees the slots of finished (and parked) rows, and gives each free slot
// the next waiting sample. A new row's context but its last token is
// prefilled (one right-padded forward for all the look's new rows) into a
// scratch cache and copied into its slot; its last token becomes the slot's
// next input at its position, so the next decode step writes it and samples
// the sample's first token like any other row's next one. A look therefore
// costs one prefill of the new rows and a few index copies; the decode step
// itself is unchanged. Between looks nothing leaves the device.
//
// Prefix sharing over time: a prompt is prefilled once; its keys and values
// are kept (a one-row cache of its length) until every sample of its
// request has started, and siblings that start later copy from it. It costs
// the prompt's keys and values for each request in flight (at Qwen2.5-7B,
// 56 KiB a token: 28 MiB for a 512-token prompt); requests start in order,
// so few are. A group may be larger than the slots.
//
// Randomness: every sample draws its j-th token with the j-th uniform of
// its own stream (rowRNG), whatever its slot and whenever it starts; the
// host uploads each slot's next uniforms at every look. So slots sample
// what one batch samples for the same seeds: in fp64 the same tokens (a
// test); in fp32 the logits differ in low bits (other batch shapes and
// padding layout), so a near-tie may break the other way.
//
// Graphs and compaction: the batch size is fixed while samples wait or rows
// are parked, and every buffer a step reads (tokens, positions, mask,
// uniforms, records, counters) is written in place at looks, so captured
// step graphs stay valid; the key changes only with the window. Once
// nothing waits and nothing is parked, finished slots leave the batch as in
// one batch (compaction, which makes new buffers and drops the graphs).
//
// Park and resume (Turns): a row that samples one of Turns.ParkIDs (or for
// which Turns.ParkIf holds) parks at the look that reads it: its slot is
// freed at once and its cache released; resuming re-prefills its whole
// context (prompt, output and the appended ids) into a free slot. Keeping
// the cache instead would hold a slot idle for as long as the caller's tool
// runs (or need memory beyond the slots); recomputing costs one prefill of
// the context, which runs at prefill speed (compute-bound, batched with the
// look's other new rows).

// slotPerRow is the negative cache slot that selects the per-row layout.
const slotPerRow = -1 << 62

// slotRow is one sample's state in the slots engine.
type slotRow struct {
	ctx    int       // tokens of prompt + output the row's cache holds once started (its position + 1)
	spare  []float64 // uniforms drawn from its stream and not yet used
	parked bool
	queued bool // waiting for a slot (fresh or resumed)
}

// slotState is the slots engine's part of a decoder.
type slotState struct {
	reqs   []Request
	rows   []slotRow
	queue  []int // fresh sample rows, in order
	resume []int // resumed sample rows, in order (first served)
	parked int
	draws  []func() float64
	// store: the prefilled prompts with samples still to start.
	store   map[int]storeEntry // request → its keys and values
	pending map[int]int        // request → samples not yet started
	share   bool
	steps   int   // E′: steps of the current window
	window  int64 // attention window of the current window's steps
	waiting bool  // a sample waited for a slot when this window began
	turns   *Turns
	closed  bool // the resumes channel was closed
	ones    []float64
}

type storeEntry struct {
	cache *KVCache
	row   int64
}

// generateSlots is GenerateAt with at most slots rows decoded at once.
func (m *Model) generateSlots(reqs []Request, streams []int, p SamplingParams, opt GenerateOptions, slots int) (out []Sample, err error) {
	if opt.Turns != nil {
		if len(p.Segments) > 0 {
			return nil, fmt.Errorf("generate: a structured output (segments) cannot park")
		}
		if opt.Turns.Parked == nil || opt.Turns.Resumes == nil {
			return nil, fmt.Errorf("generate: turns need Parked and Resumes")
		}
	}
	var lmax int64
	for _, q := range reqs {
		lmax = max(lmax, int64(len(q.PromptIDs)))
	}
	out, _, draws := sampleRows(reqs, streams, p.Seed)
	rows := len(out)
	b := min(slots, rows)
	if opt.Turns != nil || b < rows {
		b = slots
	}
	cache, err := m.NewKVCache(int64(b), (lmax+int64(p.MaxNewTokens)+windowStep-1)/windowStep*windowStep)
	if err != nil {
		return nil, err
	}
	defer cache.Close()
	d, err := m.newSlotDecoder(cache, reqs, out, draws, p, opt)
	if err != nil {
		return nil, err
	}
	defer d.close()
	if err := d.runSlots(); err != nil {
		return nil, err
	}
	return out, nil
}

func (m *Model) newSlotDecoder(cache *KVCache, reqs []Request, out []Sample, draws []func() float64, p SamplingParams, opt GenerateOptions) (d *decoder, err error) {
	defer func() {
		if err != nil && d != nil {
			d.close()
			d = nil
		}
	}()
	defer tensor.Recover("decode setup", &err)
	rows := len(out)
	d = &decoder{m: m, p: p, opt: opt, out: out, tmax: cache.Tmax, greedy: p.Temperature == 0,
		done: make([]bool, rows), cache: cache, every: opt.SyncEvery, caps: rowCaps(reqs, out, p)}
	if d.every <= 0 {
		d.every = DefaultSyncEvery
	}
	if len(p.Segments) > 0 || (p.MinNewTokens > 0 && len(p.StopIDs) > 0) {
		d.every = 1 // headers, and per-row holds of the stop ids, need the host every step
	}
	d.compactAt = 1
	st := &slotState{reqs: reqs, rows: make([]slotRow, rows), draws: draws, store: map[int]storeEntry{},
		pending: map[int]int{}, share: !opt.NoPrefixSharing, turns: opt.Turns}
	for r := range out {
		st.queue = append(st.queue, r)
		st.rows[r].queued = true
		st.pending[out[r].Prompt]++
	}
	d.slots = st
	d.sc = newScript(p, opt.Detokenize, rows)
	for r := range out {
		d.sc.start(r, &out[r])
	}
	bn := cache.B
	for i := int64(0); i < bn; i++ {
		d.batch = append(d.batch, -1)
	}
	e := int64(d.every)
	dev := m.Device
	var s tensor.Scope
	defer s.Close()
	d.tok = ts.MustZeros([]int64{bn, 1}, gotch.Int64, dev)
	d.pos = ts.MustZeros([]int64{bn, 1}, gotch.Int64, dev)
	d.ctr = s.Release(csrc.Upload(&s, []int64{0, slotPerRow}, nil, dev))
	d.u = ts.MustOnes([]int64{bn, e}, gotch.Double, dev)
	d.rec = ts.MustZeros([]int64{bn, e}, gotch.Int64, dev)
	d.bias = ts.MustFull([]int64{bn, cache.Tmax}, s.Float(math.Inf(-1)), m.DType, dev)
	if st := opt.Stats; st != nil {
		st.Slots = max(st.Slots, int(bn))
	}
	d.graphs = newStepGraphs(opt.CUDAGraphs && d.every > 1, m.Device, opt.GraphStats)
	d.timer, err = newStepTimer(opt.Timing, m)
	return d, err
}

// rowCaps is each sample row's token budget: its request's MaxNewTokens,
// or the call's.
func rowCaps(reqs []Request, out []Sample, p SamplingParams) []int {
	caps := make([]int, len(out))
	for r := range out {
		caps[r] = p.MaxNewTokens
		if c := reqs[out[r].Prompt].MaxNewTokens; c > 0 {
			caps[r] = c
		}
	}
	return caps
}

// runSlots decodes until every sample has finished: fill the free slots,
// run a window of steps, look, again.
func (d *decoder) runSlots() error {
	st := d.slots
	defer st.closeStore()
	return countDecode(d.opt.Counts, func() (steps int, err error) {
		for {
			if err := d.fill(); err != nil {
				return steps, err
			}
			if d.ended == len(d.out) {
				return steps, nil
			}
			if err := d.prepareWindow(); err != nil {
				return steps, err
			}
			for k := 0; k < st.steps; k++ {
				var s tensor.Scope
				err := d.timer.begin(d.live)
				var lp *ts.Tensor
				if err == nil {
					lp, err = d.step(&s)
				}
				if err == nil {
					steps++
					d.col++
					err = d.timer.launched()
				}
				if err == nil && k == st.steps-1 {
					err = d.slotLook(lp)
				}
				s.Close()
				if err != nil {
					return steps, err
				}
				d.timer.looked()
			}
		}
	})
}

// prepareWindow chooses the next window's steps E′ (SyncEvery, cut so that
// no row passes max_new_tokens: its positions stay in the cache), resets
// the idle slots, uploads every slot's next uniforms and rewinds the output
// column.
func (d *decoder) prepareWindow() (err error) {
	defer tensor.Recover("slots window", &err)
	st := d.slots
	e := d.every
	var top int64 // the largest position a row starts the window at
	var idle []int64
	for i, r := range d.batch {
		if r < 0 {
			idle = append(idle, int64(i))
			continue
		}
		e = min(e, d.p.MaxNewTokens-len(d.out[r].IDs))
		top = max(top, int64(st.rows[r].ctx-1))
	}
	st.steps = max(e, 1)
	st.window = min(d.tmax, (top+int64(st.steps)+windowStep-1)/windowStep*windowStep)
	var s tensor.Scope
	defer s.Close()
	if len(idle) > 0 {
		// An idle slot decodes from position 0 over its own slot only:
		// finite, inside the cache, ignored.
		z := make([]int64, len(idle))
		one := slices.Repeat([]int64{1}, len(idle))
		if err := d.setRows(&s, idle, z, z, one); err != nil {
			return err
		}
	}
	width := int(d.u.MustSize()[1])
	uv := make([]float64, 0, len(d.batch)*width)
	for _, r := range d.batch {
		if r < 0 {
			uv = append(uv, d.onesRow(width)...)
			continue
		}
		row := &st.rows[r]
		for len(row.spare) < st.steps {
			row.spare = append(row.spare, st.draws[r]())
		}
		uv = append(uv, row.spare[:st.steps]...)
		uv = append(uv, d.onesRow(width-st.steps)...)
	}
	d.u.Copy_(csrc.Upload(&s, uv, []int64{int64(len(d.batch)), int64(width)}, d.m.Device))
	d.ctr.Copy_(csrc.Upload(&s, []int64{0, slotPerRow}, nil, d.m.Device))
	d.looked = 0
	if o := d.opt.Stats; o != nil {
		o.Looks++
		n := int64(st.steps)
		o.Steps += st.steps
		o.RowSteps += n * int64(len(d.batch))
		if st.waiting {
			o.StepsWaiting += st.steps
		}
		for _, r := range d.batch {
			c := int64(1) // an idle slot: its own slot, then one more a step
			if r >= 0 {
				c = int64(st.rows[r].ctx)
			}
			o.ContextTokens += n*c + n*(n-1)/2
		}
	}
	return nil
}

func (d *decoder) onesRow(n int) []float64 {
	st := d.slots
	for len(st.ones) < n {
		st.ones = append(st.ones, 1)
	}
	return st.ones[:n]
}

// slotLook reads the window's records and feeds them to each live row's
// script: a row that finishes or parks drops what it sampled after, and
// frees its slot.
func (d *decoder) slotLook(lp *ts.Tensor) (err error) {
	defer tensor.Recover("decode look", &err)
	st := d.slots
	n := st.steps
	var s tensor.Scope
	defer s.Close()
	recs := tensor.Int64s(s.Keep(d.rec.MustNarrow(1, 0, int64(n), false))) // sync: the look; [B, n]
	var forced []int64
	var parked []int
	var freed []int // batch rows freed once the forced tokens are in
	var busy int64
	for i, r := range d.batch {
		if r < 0 {
			continue
		}
		used := 0
		row := &st.rows[r]
		for j := 0; j < n && !d.done[r] && !row.parked; j++ {
			drawn, logp := csrc.UnpackRecord(recs[i*n+j])
			tok, fin, reason := d.sc.step(r, drawn, &d.out[r])
			smp := &d.out[r]
			smp.IDs = append(smp.IDs, tok)
			smp.Logprobs = append(smp.Logprobs, logp)
			used++
			if tok != drawn {
				forced = append(forced, int64(i), tok)
			}
			switch {
			case len(smp.IDs) >= d.caps[r] && !fin:
				d.finish(r, "length")
			case len(smp.IDs) < d.caps[r] && d.parks(smp, tok, fin):
				row.parked = true
				st.parked++
				parked = append(parked, r)
			case fin:
				d.finish(r, reason)
			}
		}
		busy += int64(used)
		row.spare = row.spare[used:]
		row.ctx += used
		if d.done[r] || row.parked {
			freed = append(freed, i)
		}
	}
	if o := d.opt.Stats; o != nil {
		o.BusySlotSteps += busy
		if st.waiting {
			o.BusyWaiting += busy
		}
		o.Parks += len(parked)
	}
	if len(forced) > 0 {
		if err := d.force(&s, lp, forced); err != nil {
			return err
		}
	}
	for _, i := range freed {
		d.batch[i] = -1
		d.live--
	}
	if d.opt.Progress != nil {
		d.opt.Progress(d.col, d.ended, len(d.out))
	}
	for _, r := range parked {
		smp := d.out[r]
		smp.IDs = slices.Clone(smp.IDs)
		smp.Logprobs = slices.Clone(smp.Logprobs)
		smp.Appended = slices.Clone(smp.Appended)
		st.turns.Parked(smp)
	}
	return nil
}

// compactSlots drops idle slots once a quarter of the batch is idle (nothing
// waits and nothing is parked), rebucketing it; the graphs are dropped.
func (d *decoder) compactSlots() error {
	var keep []int64
	for i, r := range d.batch {
		if r >= 0 {
			keep = append(keep, int64(i))
		}
	}
	if len(keep) == 0 || bucketRows(len(keep)) >= len(d.batch) || 4*(len(d.batch)-len(keep)) < len(d.batch) {
		return nil
	}
	idx, err := d.keepRows(keep) // padding: copies of a live row, marked idle below
	if err != nil {
		return err
	}
	batch := make([]int, len(idx))
	for j, i := range idx {
		batch[j] = -1
		if j < len(keep) {
			batch[j] = d.batch[i]
		}
	}
	d.batch = batch
	return nil
}
