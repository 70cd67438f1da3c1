package dist

import "testing"

func TestShare(t *testing.T) {
	for _, c := range []struct{ n, size int }{{10, 3}, {2, 4}, {0, 2}, {7, 1}, {8, 8}} {
		next := 0
		for r := 0; r < c.size; r++ {
			lo, hi := Share(c.n, r, c.size)
			if lo != next || hi < lo || hi-lo > (c.n+c.size-1)/c.size {
				t.Fatalf("Share(%d, %d, %d) = [%d, %d)", c.n, r, c.size, lo, hi)
			}
			next = hi
		}
		if next != c.n {
			t.Fatalf("shares of %d over %d end at %d", c.n, c.size, next)
		}
	}
}
