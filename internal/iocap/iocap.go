// Package iocap captures a program's output within a bound: its first
// bytes (Head: a tool's answer) or its last (Tail: the end of a stderr,
// where the error is), saying when it dropped some.
package iocap

import (
	"strconv"
	"strings"
	"sync"
)

// Head keeps the first Max bytes written to it and counts the rest (read
// and dropped: a flooding program costs no memory).
type Head struct {
	Max  int
	mu   sync.Mutex
	buf  []byte
	lost int64
}

func (h *Head) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	room := min(max(h.Max-len(h.buf), 0), len(p))
	h.buf = append(h.buf, p[:room]...)
	h.lost += int64(len(p) - room)
	return len(p), nil
}

// String is the head as valid UTF-8, with a note of the cut when bytes
// were dropped.
func (h *Head) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := strings.ToValidUTF8(string(h.buf), "")
	if h.lost > 0 {
		s += cutNote(h.Max)
	}
	return s
}

// Cap keeps at most n bytes of s (whole UTF-8 characters), with Head's
// note of the cut when it cuts.
func Cap(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + cutNote(n)
}

func cutNote(n int) string { return "\n…[output cut at " + strconv.Itoa(n) + " bytes]" }

// Tail keeps the last Max bytes written to it.
type Tail struct {
	Max  int
	mu   sync.Mutex
	buf  []byte
	lost bool
}

func (t *Tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.lost = true
	}
	return len(b), nil
}

// Text is the tail as valid UTF-8 (a character cut at its start
// dropped), trimmed, and whether bytes were dropped before it.
func (t *Tail) Text() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(strings.ToValidUTF8(string(t.buf), "")), t.lost
}

// String is Text with "…" first when bytes were dropped before it.
func (t *Tail) String() string {
	s, cut := t.Text()
	if cut && s != "" {
		s = "…" + s
	}
	return s
}
