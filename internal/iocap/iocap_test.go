package iocap

import (
	"strings"
	"testing"
)

// TestHeadAndTail: Head keeps the first bytes and notes the cut, Tail the
// last (trimmed, "…" first when cut); neither splits a UTF-8 character.
func TestHeadAndTail(t *testing.T) {
	h := &Head{Max: 5}
	h.Write([]byte("abc"))
	h.Write([]byte("déf"))
	if got := h.String(); got != "abcd\n…[output cut at 5 bytes]" {
		t.Errorf("head %q", got)
	}
	if got := (&Head{Max: 5}).String(); got != "" {
		t.Errorf("empty head %q", got)
	}
	if got := Cap("ab€", 3); got != "ab\n…[output cut at 3 bytes]" {
		t.Errorf("cap %q", got)
	}
	if got := Cap("abc", 3); got != "abc" {
		t.Errorf("cap of a short string %q", got)
	}
	tl := &Tail{Max: 6}
	tl.Write([]byte("hello "))
	if s, cut := tl.Text(); s != "hello" || cut || tl.String() != "hello" {
		t.Errorf("tail %q cut %v", s, cut)
	}
	tl.Write([]byte(strings.Repeat("x", 4) + "é" + " bcd\n")) // the last 6 bytes start inside the é, then a space
	if s, cut := tl.Text(); s != "bcd" || !cut || tl.String() != "…bcd" {
		t.Errorf("cut tail %q %v %q", s, cut, tl.String())
	}
}
