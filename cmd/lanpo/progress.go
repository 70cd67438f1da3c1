package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progressBar draws one self-overwriting line on a terminal:
//
//	generate [=========>          ] step 45/128  12/32 done  3.1 steps/s
type progressBar struct {
	w     io.Writer
	name  string
	total int
	start time.Time
	last  time.Time
}

func newProgressBar(w io.Writer, name string, total int) *progressBar {
	return &progressBar{w: w, name: name, total: total}
}

const barWidth = 30

// update is a GenerateOptions.Progress callback; it redraws at most 10
// times a second.
func (b *progressBar) update(step, finished, rows int) {
	now := time.Now()
	if step <= 1 {
		b.start = now
	}
	if now.Sub(b.last) < 100*time.Millisecond && step < b.total && finished < rows {
		return
	}
	b.last = now
	fill := barWidth * step / max(b.total, 1)
	bar := strings.Repeat("=", fill)
	if fill < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-fill-1)
	}
	rate := ""
	if el := now.Sub(b.start).Seconds(); el > 0 && step > 1 {
		rate = fmt.Sprintf("  %.1f steps/s", float64(step-1)/el)
	}
	fmt.Fprintf(b.w, "\r%s [%s] step %d/%d  %d/%d done%s\x1b[K", b.name, bar, step, b.total, finished, rows, rate)
}

// done ends the line with what was generated.
func (b *progressBar) done(what string) {
	fmt.Fprintf(b.w, "\r%s %s: %.1fs\x1b[K\n", b.name, what, time.Since(b.start).Seconds())
}
