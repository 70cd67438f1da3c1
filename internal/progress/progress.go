// Package progress draws one self-overwriting status line on a terminal:
//
//	train [=========>          ] 45/128  3.1/s  ETA 27s  loss 0.41 acc 0.53
//
// Everything lanpo runs for long (training steps, generation, evaluation,
// seeding) reports through it. A Bar with a nil writer draws nothing, so
// callers need not check whether they have a terminal.
package progress

import (
	"fmt"
	"io"
	"strings"
	"time"
)

const width = 24

// Bar is one progress line.
type Bar struct {
	w           io.Writer
	name        string
	total       int
	first       int // done before this process started (a resumed run)
	start, last time.Time
	now         func() time.Time
}

// New starts a bar for total units, first of which were done before (0
// unless resuming). w nil: the bar draws nothing.
func New(w io.Writer, name string, total, first int) *Bar {
	b := &Bar{w: w, name: name, total: total, first: first, now: time.Now}
	b.start = b.now()
	return b
}

// Shown says whether the bar draws (it has a writer: a terminal).
func (b *Bar) Shown() bool { return b != nil && b.w != nil }

// Update redraws the line for done units with detail after the rate and
// ETA. It draws at most 10 times a second, and always the last unit.
func (b *Bar) Update(done int, detail string) {
	if b == nil || b.w == nil {
		return
	}
	now := b.now()
	if now.Sub(b.last) < 100*time.Millisecond && done < b.total {
		return
	}
	b.last = now
	fmt.Fprintf(b.w, "\r%s\x1b[K", b.line(done, detail, now))
}

// line renders the status for done units at time now.
func (b *Bar) line(done int, detail string, now time.Time) string {
	fill := 0
	if b.total > 0 {
		fill = min(width, width*done/b.total)
	}
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s [%s] %d/%d", b.name, bar, done, b.total)
	if el := now.Sub(b.start).Seconds(); el > 0 && done > b.first {
		rate := float64(done-b.first) / el
		eta := time.Duration(float64(b.total-done) / rate * float64(time.Second)).Round(time.Second)
		fmt.Fprintf(&sb, "  %.3g/s  ETA %s", rate, eta)
	}
	if detail != "" {
		sb.WriteString("  " + detail)
	}
	return sb.String()
}

// Done ends the line with a summary and the elapsed time.
func (b *Bar) Done(summary string) {
	if b == nil || b.w == nil {
		return
	}
	fmt.Fprintf(b.w, "\r%s %s: %s\x1b[K\n", b.name, summary, b.now().Sub(b.start).Round(100*time.Millisecond))
}
