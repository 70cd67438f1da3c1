package model

import (
	"math"
	"slices"
	"strings"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// script follows each row through its output's segments: the header ids
// it still has to feed, the segment it samples, and how many tokens it
// has sampled there. A plain request is one segment with no header, the
// whole budget and the request's stop strings.
type script struct {
	segs       []Segment
	structured bool // the caller gave segments: report their ranges
	stopIDs    []int64
	stops      *stopMatcher
	seg, n     []int     // per row: current segment, tokens sampled in it
	pending    [][]int64 // per row: header ids still to feed
}

func newScript(p SamplingParams, detokenize func() func(int64) string, rows int) *script {
	sc := &script{segs: p.Segments, structured: len(p.Segments) > 0, stopIDs: p.StopIDs,
		seg: make([]int, rows), n: make([]int, rows), pending: make([][]int64, rows)}
	if !sc.structured {
		sc.segs = []Segment{{MaxTokens: p.MaxNewTokens, Stops: p.StopStrings}}
	}
	sc.stops = newStopMatcher(p.allStopStrings(), detokenize, rows)
	return sc
}

// start puts row at the beginning of its first segment.
func (sc *script) start(r int, out *Sample) {
	sc.pending[r] = sc.segs[0].Header
	if len(sc.pending[r]) == 0 {
		sc.begin(r, out, 0)
	}
}

// begin opens row's current segment, its sampled ids starting at IDs[at].
func (sc *script) begin(r int, out *Sample, at int) {
	sc.n[r] = 0
	sc.stops.reset(r)
	if sc.structured {
		out.Segments = append(out.Segments, [2]int{at, at})
	}
}

// closeSeg ends row's current segment before IDs[at].
func (sc *script) closeSeg(out *Sample, at int) {
	if sc.structured {
		out.Segments[len(out.Segments)-1][1] = at
	}
}

// blocksStops reports whether row may not sample a stop id now: it is
// sampling, with fewer than min tokens of its segment so far.
func (sc *script) blocksStops(r, min int) bool {
	return len(sc.pending[r]) == 0 && sc.n[r] < min
}

// step takes the token drawn for row r and returns the token it feeds
// (the draw, or a header id in its place), and whether the row is then
// finished, with its finish reason. out is the row's sample; the token
// returned is appended to it by the caller after this call.
func (sc *script) step(r int, drawn int64, out *Sample) (tok int64, done bool, reason string) {
	at := len(out.IDs) // where the returned token will sit
	if len(sc.pending[r]) > 0 {
		tok, sc.pending[r] = sc.pending[r][0], sc.pending[r][1:]
		sc.stops.feed(r, tok)
		if len(sc.pending[r]) == 0 {
			sc.begin(r, out, at+1)
		}
		return tok, false, ""
	}
	g := sc.segs[sc.seg[r]]
	sc.n[r]++
	isStop := slices.Contains(sc.stopIDs, drawn)
	matched := ""
	if !isStop {
		matched = sc.stops.add(r, drawn, g.Stops)
	}
	if !isStop && matched == "" && sc.n[r] < g.MaxTokens {
		return drawn, false, ""
	}
	if sc.seg[r] == len(sc.segs)-1 {
		sc.closeSeg(out, at+1)
		if isStop || matched != "" {
			return drawn, true, "stop"
		}
		return drawn, true, "length"
	}
	// The segment ends here and the next one's header follows.
	sc.seg[r]++
	next := sc.segs[sc.seg[r]]
	if matched != "" && matched == next.HeaderText {
		// The model wrote the next header itself.
		sc.closeSeg(out, at+1)
		sc.begin(r, out, at+1)
		return drawn, false, ""
	}
	hdr := next.Header
	if isStop {
		// The stop id is not fed: the header's first id takes its place.
		sc.closeSeg(out, at)
		tok, hdr = hdr[0], hdr[1:]
		sc.stops.feed(r, tok)
	} else {
		sc.closeSeg(out, at+1)
		tok = drawn
	}
	sc.pending[r] = hdr
	if len(hdr) == 0 {
		sc.begin(r, out, at+1)
	}
	return tok, false, ""
}

// stopMatcher finds stop strings in each sample's text as it grows. Each
// sample has an incremental decoder; only the text that could still hold
// the start of a stop string is kept, so a check costs the new piece plus
// the longest stop string, however long the sample gets. A stop string
// that spans token boundaries is found because the kept tail and the new
// piece are searched together.
type stopMatcher struct {
	stops      []string // every stop string any segment has
	longest    int
	detokenize func() func(int64) string
	decoders   []func(int64) string
	tails      []string
}

func newStopMatcher(stops []string, detokenize func() func(int64) string, rows int) *stopMatcher {
	m := &stopMatcher{stops: stops, detokenize: detokenize}
	if len(stops) == 0 {
		return m
	}
	for _, s := range stops {
		m.longest = max(m.longest, len(s))
	}
	m.decoders = make([]func(int64) string, rows)
	m.tails = make([]string, rows)
	return m
}

// piece feeds row's next id to its decoder and returns the text it adds.
func (m *stopMatcher) piece(row int, id int64) string {
	if m.decoders[row] == nil {
		m.decoders[row] = m.detokenize()
	}
	return m.decoders[row](id)
}

// feed passes an id that is not checked (a header's) through row's
// decoder, so the text after it decodes right.
func (m *stopMatcher) feed(row int, id int64) {
	if len(m.stops) > 0 {
		m.piece(row, id)
	}
}

// reset forgets row's text so far: a new segment's stops are looked for in
// its own text only.
func (m *stopMatcher) reset(row int) {
	if len(m.stops) > 0 {
		m.tails[row] = ""
	}
}

// add feeds row's next id and returns the first of stops its text now
// holds ("" if none).
func (m *stopMatcher) add(row int, id int64, stops []string) string {
	if len(m.stops) == 0 {
		return ""
	}
	window := m.tails[row] + m.piece(row, id)
	for _, s := range stops {
		if strings.Contains(window, s) {
			return s
		}
	}
	if keep := m.longest - 1; len(window) > keep {
		window = window[len(window)-keep:]
	}
	m.tails[row] = window
	return ""
}

// holdStops returns, when some rows may not stop yet (MinNewTokens into
// their segment), what puts the stop ids of those rows at −Inf in a step's
// log-probabilities [rows, V]; nil when no row is held. active[i] is the
// sample row of batch row i; batch rows past active (padding) are not held.
func (m *Model) holdStops(s *tensor.Scope, p SamplingParams, active []int, sc *script, rows int) func(*ts.Tensor) *ts.Tensor {
	if p.MinNewTokens == 0 || len(p.StopIDs) == 0 {
		return nil
	}
	held := make([]bool, rows)
	n := 0
	for i, r := range active {
		if r >= 0 && sc.blocksStops(r, p.MinNewTokens) {
			held[i] = true
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return func(lp *ts.Tensor) *ts.Tensor {
		ids := csrc.Upload(s, p.StopIDs, nil, m.Device)
		blocked := s.Keep(lp.MustIndexFill(1, ids, s.Float(math.Inf(-1)), false))
		if n == rows {
			return blocked
		}
		mask := csrc.Upload(s, held, []int64{int64(rows), 1}, m.Device)
		return s.Keep(blocked.MustWhereSelf(mask, lp, false))
	}
}
