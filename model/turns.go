package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Rows that park and resume (GenerateOptions.Turns): the caller's side of
// the slots engine (slots.go), for tool calls inside a rollout.

// Turns lets samples pause mid-generation and go on with tokens the caller
// appends (tool calls): GenerateOptions.Turns. model/ never reads what the
// tokens mean.
type Turns struct {
	// ParkIDs: a sample that samples one of these ids parks right after it
	// (the id is kept in its IDs). A stop id ends the sample instead.
	ParkIDs []int64
	// ParkIf, if set, is asked after each sampled token of each sample, at
	// the look that reads it, with the sample's ids so far (not to be
	// kept); true parks the sample there — also on a stop id, which then
	// does not end it (a turn's end after a tool call). A sample at its
	// token budget ends, it never parks.
	ParkIf func(prompt, index int, ids []int64) bool
	// Parked is called, on the generating thread, with a copy of each
	// sample that parks. It must not block: the caller answers each parked
	// sample with exactly one Resume on Resumes, from any goroutine, when
	// it is ready; the other rows decode meanwhile. Generate returns once
	// every sample has finished.
	Parked  func(Sample)
	Resumes <-chan Resume
	// Lockstep: at each look, wait for every parked sample's Resume before
	// any row goes on, and give the resumed samples slots in sample order.
	// The schedule — which rows share each decode step — then depends only
	// on the tokens, never on when the answers arrive, so a generation
	// with deterministic answers is reproducible bit for bit whatever the
	// answers' timing (without it, a late answer is taken at a later look).
	// The price: a slow answer stalls every row.
	Lockstep bool
}

// Resume answers a parked sample.
type Resume struct {
	Prompt, Index int
	// Append is added after the sample's ids (Sample.Appended records where)
	// and prefilled, not sampled: its log-probabilities are NaN. Sampling
	// then goes on. If the sample's ids with Append reach its token budget,
	// Append is cut there and the sample ends with finish reason "length".
	Append []int64
	// Finish, when not empty, ends the sample here with this finish reason
	// instead of resuming it (Append is still added).
	Finish string
}

// takeResumes applies the resumes waiting on the channel (block: wait for
// one first).
func (d *decoder) takeResumes(block bool) error {
	st := d.slots
	if st.turns == nil {
		return nil
	}
	for {
		if st.closed {
			if st.parked > 0 {
				return fmt.Errorf("generate: the resumes channel closed with %d sample(s) parked (%s): answer every parked sample, with Resume.Finish to end it", st.parked, d.parkedNames())
			}
			return nil
		}
		var rs Resume
		ok := true
		if block {
			rs, ok = <-st.turns.Resumes
			block = false
		} else {
			select {
			case rs, ok = <-st.turns.Resumes:
			default:
				return nil
			}
		}
		if !ok {
			st.closed = true
			continue
		}
		if err := d.resume(rs); err != nil {
			return err
		}
	}
}

// parkedNames lists the parked samples (a few) for an error.
func (d *decoder) parkedNames() string {
	var names []string
	for r, row := range d.slots.rows {
		if row.parked {
			if len(names) == 4 {
				names = append(names, "…")
				break
			}
			names = append(names, fmt.Sprintf("request %d sample %d", d.out[r].Prompt, d.out[r].Index))
		}
	}
	return strings.Join(names, ", ")
}

// resume appends a Resume's ids to its parked sample and queues it.
func (d *decoder) resume(rs Resume) error {
	st := d.slots
	r := -1
	for i := range d.out {
		if d.out[i].Prompt == rs.Prompt && d.out[i].Index == rs.Index {
			r = i
			break
		}
	}
	if r < 0 || !st.rows[r].parked {
		return fmt.Errorf("generate: resume of request %d sample %d, which is not parked", rs.Prompt, rs.Index)
	}
	if err := d.m.CheckIDs(rs.Append); err != nil {
		return fmt.Errorf("generate: resume of request %d sample %d: %w", rs.Prompt, rs.Index, err)
	}
	st.rows[r].parked = false
	st.parked--
	smp := &d.out[r]
	add := rs.Append
	full := len(smp.IDs)+len(add) >= d.caps[r]
	if full {
		add = add[:max(0, d.caps[r]-len(smp.IDs))]
	}
	if len(add) > 0 {
		at := len(smp.IDs)
		smp.IDs = append(smp.IDs, add...)
		for _, id := range add {
			smp.Logprobs = append(smp.Logprobs, float32(math.NaN()))
			d.sc.stops.feed(r, id)
		}
		smp.Appended = append(smp.Appended, [2]int{at, len(smp.IDs)})
		d.sc.stops.reset(r)
	}
	switch {
	case rs.Finish != "":
		d.finish(r, rs.Finish)
	case full:
		d.finish(r, "length")
	default:
		st.resume = append(st.resume, r)
		st.rows[r].queued = true
	}
	return nil
}

func (d *decoder) finish(r int, reason string) {
	d.out[r].FinishReason = reason
	d.done[r] = true
	d.ended++
}

// parks reports whether a sample parks after its latest token tok (fin: the
// token would end it).
func (d *decoder) parks(smp *Sample, tok int64, fin bool) bool {
	t := d.slots.turns
	if t == nil {
		return false
	}
	if !fin && slices.Contains(t.ParkIDs, tok) {
		return true
	}
	return t.ParkIf != nil && t.ParkIf(smp.Prompt, smp.Index, smp.IDs)
}
