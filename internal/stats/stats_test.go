package stats

import (
	"math"
	"testing"
)

func TestMeanAndStdDev(t *testing.T) {
	xs := []float64{2, 4, 4, 4, 5, 5, 7, 9}
	if m := Mean(xs); m != 5 {
		t.Errorf("mean %g, want 5", m)
	}
	if sd, want := StdDev(xs), math.Sqrt(32.0/7); math.Abs(sd-want) > 1e-15 {
		t.Errorf("sd %g, want %g (n − 1)", sd, want)
	}
	if Mean(nil) != 0 || StdDev([]float64{3}) != 0 {
		t.Error("empty mean or one-value sd is not 0")
	}
}
