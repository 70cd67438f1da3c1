package model

import (
	"math"
	"slices"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// The slots engine's refills (slots.go): free slots take waiting samples,
// whose contexts are prefilled between decode steps.

// fill takes the resumes that arrived, gives every free slot the next
// waiting sample, and prefills the new rows. With nothing to decode but
// parked rows, it waits for a resume; in lockstep (Turns.Lockstep), for
// every parked row's.
func (d *decoder) fill() (err error) {
	defer tensor.Recover("slots refill", &err)
	st := d.slots
	if err := d.takeResumes(false); err != nil {
		return err
	}
	for d.live == 0 && len(st.queue)+len(st.resume) == 0 && st.parked > 0 {
		if err := d.takeResumes(true); err != nil {
			return err
		}
	}
	if st.turns != nil && st.turns.Lockstep {
		for st.parked > 0 { // every answer, before any row goes on
			if err := d.takeResumes(true); err != nil {
				return err
			}
		}
		slices.Sort(st.resume) // slots in sample order, not arrival order
	}
	var started []int64 // batch rows
	for i, r := range d.batch {
		if r >= 0 {
			continue
		}
		var next int
		switch {
		case len(st.resume) > 0:
			next, st.resume = st.resume[0], st.resume[1:]
		case len(st.queue) > 0:
			next, st.queue = st.queue[0], st.queue[1:]
		default:
			continue
		}
		st.rows[next].queued = false
		d.batch[i] = next
		d.live++
		started = append(started, int64(i))
	}
	st.waiting = len(st.queue)+len(st.resume) > 0
	if len(started) > 0 {
		if err := d.startRows(started); err != nil {
			return err
		}
	}
	if !st.waiting && st.parked == 0 && !d.opt.NoCompaction {
		return d.compactSlots()
	}
	return nil
}

// startRows prefills the context of the samples just given batch rows
// (all of it but the last token) and sets those rows' next input, position
// and mask.
func (d *decoder) startRows(batchRows []int64) error {
	st := d.slots
	m := d.m
	var s tensor.Scope
	defer s.Close()
	type job struct {
		batchRow int64
		ctx      []int64
		req      int // ≥ 0: a fresh sample whose prompt may be shared
	}
	var jobs []job
	for _, i := range batchRows {
		r := d.batch[i]
		smp := &d.out[r]
		ctx := append(append([]int64(nil), st.reqs[smp.Prompt].PromptIDs...), smp.IDs...)
		req := -1
		if len(smp.IDs) == 0 && st.share {
			req = smp.Prompt
		}
		if len(smp.IDs) == 0 {
			st.pending[smp.Prompt]--
		}
		st.rows[r].ctx = len(ctx)
		jobs = append(jobs, job{i, ctx, req})
	}
	// Contexts to prefill: a shared prompt once (unless a sibling's is in
	// the store), every other context on its own.
	var fwd [][]int64
	fwdRow := map[int]int64{} // request → its row in this prefill
	type copyJob struct {
		from     *KVCache
		src, dst int64
	}
	var copies []copyJob
	var fresh []int64 // scratch rows of this prefill, in job order (−1: from the store)
	for _, j := range jobs {
		if len(j.ctx) <= 1 {
			fresh = append(fresh, -2) // nothing to prefill
			continue
		}
		if j.req >= 0 {
			if e, ok := st.store[j.req]; ok {
				copies = append(copies, copyJob{e.cache, e.row, j.batchRow})
				fresh = append(fresh, -1)
				if o := d.opt.Stats; o != nil {
					o.Copied++
				}
				continue
			}
			if row, ok := fwdRow[j.req]; ok {
				fresh = append(fresh, row)
				continue
			}
			fwdRow[j.req] = int64(len(fwd))
		}
		fresh = append(fresh, int64(len(fwd)))
		fwd = append(fwd, j.ctx[:len(j.ctx)-1])
	}
	if len(fwd) > 0 {
		scratch, err := m.prefillRight(&s, fwd)
		if err != nil {
			return err
		}
		var src, dst []int64
		for k, j := range jobs {
			if fresh[k] >= 0 {
				src, dst = append(src, fresh[k]), append(dst, j.batchRow)
			}
		}
		if err := d.cache.CopyRows(scratch, src, dst); err != nil {
			scratch.Close()
			return err
		}
		// A prompt with samples still to start keeps its own keys and
		// values (its row, its length), not the look's whole scratch.
		reqs := make([]int, 0, len(fwdRow))
		for req := range fwdRow {
			reqs = append(reqs, req)
		}
		slices.Sort(reqs)
		for _, req := range reqs {
			if st.pending[req] > 0 {
				one, err := scratch.rowCache(fwdRow[req], int64(len(st.reqs[req].PromptIDs)-1))
				if err != nil {
					scratch.Close()
					return err
				}
				st.store[req] = storeEntry{one, 0}
			}
		}
		scratch.Close()
		if o := d.opt.Stats; o != nil {
			o.Prefills++
			for _, c := range fwd {
				o.Prefilled += int64(len(c))
			}
		}
	}
	for _, c := range copies {
		if err := d.cache.CopyRows(c.from, []int64{c.src}, []int64{c.dst}); err != nil {
			return err
		}
	}
	// Release the store's prompts whose samples have all started.
	for req, e := range st.store {
		if st.pending[req] == 0 {
			delete(st.store, req)
			e.cache.Close()
		}
	}
	toks, pos, ctxs := make([]int64, len(jobs)), make([]int64, len(jobs)), make([]int64, len(jobs))
	for k, j := range jobs {
		toks[k], pos[k], ctxs[k] = j.ctx[len(j.ctx)-1], int64(len(j.ctx)-1), int64(len(j.ctx))
	}
	return d.setRows(&s, batchRows, toks, pos, ctxs)
}

// setRows sets batch rows' next input, its position, and their mask open
// over [0, ctx).
func (d *decoder) setRows(s *tensor.Scope, rows, toks, pos, ctx []int64) error {
	dev := d.m.Device
	n := int64(len(rows))
	idx := csrc.Upload(s, rows, nil, dev)
	d.tok.MustIndexCopy_(0, idx, csrc.Upload(s, toks, []int64{n, 1}, dev))
	d.pos.MustIndexCopy_(0, idx, csrc.Upload(s, pos, []int64{n, 1}, dev))
	lim := csrc.Upload(s, ctx, []int64{n, 1}, dev)
	ar := s.Keep(ts.MustArange(s.Int(d.tmax), gotch.Int64, dev))
	closed := s.Keep(ar.MustGeTensor(lim, false)) // [n, Tmax]
	zero := s.Keep(ts.MustZeros([]int64{n, d.tmax}, d.m.DType, dev))
	d.bias.MustIndexCopy_(0, idx, s.Keep(zero.MustMaskedFill(closed, s.Float(math.Inf(-1)), false)))
	return nil
}

// prefillRight runs contexts, right-padded, through the model into a new
// scratch cache (each context's token p at slot p) and returns it.
func (m *Model) prefillRight(s *tensor.Scope, ctxs [][]int64) (*KVCache, error) {
	var t int64
	for _, c := range ctxs {
		t = max(t, int64(len(c)))
	}
	n := int64(len(ctxs))
	ids, pos := make([]int64, n*t), make([]int64, n*t)
	for r, c := range ctxs {
		copy(ids[int64(r)*t:], c)
		for j := int64(0); j < t; j++ {
			pos[int64(r)*t+j] = j
		}
	}
	scratch, err := m.NewKVCache(n, t)
	if err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			scratch.Close() // an error or a panic below
		}
	}()
	var fs tensor.Scope
	defer fs.Close()
	// Padding after a context is never attended to by its tokens (causal)
	// and is masked in the slot it is copied to.
	if _, err := m.Forward(&fs, csrc.Upload(&fs, ids, []int64{n, t}, m.Device), csrc.Upload(&fs, pos, []int64{n, t}, m.Device), nil, scratch); err != nil {
		return nil, err
	}
	done = true
	return scratch, nil
}

func (st *slotState) closeStore() {
	for _, e := range st.store {
		e.cache.Close()
	}
	st.store = nil
}
