package progress

import (
	"strings"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	b := New(nil, "train", 100, 20)
	at := b.start.Add(10 * time.Second)
	for _, c := range []struct {
		done   int
		detail string
		want   string
	}{
		{20, "", "train [====>                   ] 20/100"},                                 // none done by this process yet: no rate
		{40, "loss 0.5", "train [=========>              ] 40/100  2/s  ETA 30s  loss 0.5"}, // 20 units in 10 s
		{100, "", "train [========================] 100/100  8/s  ETA 0s"},
	} {
		if got := b.line(c.done, c.detail, at); got != c.want {
			t.Errorf("done %d:\n got %q\nwant %q", c.done, got, c.want)
		}
	}
}

func TestUpdateThrottlesButDrawsTheEnd(t *testing.T) {
	var out strings.Builder
	b := New(&out, "gen", 3, 0)
	clock := b.start
	b.now = func() time.Time { return clock }
	b.Update(1, "")
	b.Update(2, "") // within 100 ms: skipped
	b.Update(3, "") // the last unit: drawn
	if n := strings.Count(out.String(), "\r"); n != 2 {
		t.Fatalf("%d redraws: %q", n, out.String())
	}
	var nilBar *Bar
	nilBar.Update(1, "") // a nil bar draws nothing and does not panic
	nilBar.Done("x")
}
