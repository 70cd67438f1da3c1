package eval

import (
	"fmt"
	"strings"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 1, "[0 0.25 0.5 0.75 1]"},
		{1, 60, "[0 20 40 60]"},
		{0.13, 0.52, "[0.1 0.2 0.3 0.4 0.5 0.6]"},
		{5, 5, "[4 4.5 5 5.5 6]"}, // a flat series still gets an axis
	} {
		if got := fmt.Sprint(niceTicks(c.lo, c.hi, 5)); got != c.want {
			t.Errorf("ticks of [%v, %v] = %s, want %s", c.lo, c.hi, got, c.want)
		}
	}
}

// Every tick of an axis prints differently, at every magnitude.
func TestTickLabels(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 1.9e6, "0 5e+05 1e+06 1.5e+06 2e+06"},
		{0, 1, "0 0.25 0.5 0.75 1"},
		{100, 400, "100 200 300 400"},
		{100, 110, "100 102.5 105 107.5 110"},
		{0, 0.002, "0 0.0005 0.001 0.0015 0.002"},
		{-0.3, 0.1, "-0.3 -0.2 -0.1 0 0.1"},
		// The tick above the last value is a multiple of the step too
		// (it was 0.2 + 0.1 = 0.30000000000000004).
		{0, 0.29, "0 0.1 0.2 0.3"},
		{0.05, 0.68, "0 0.2 0.4 0.6 0.8"},
	} {
		var labels []string
		for _, v := range niceTicks(c.lo, c.hi, 5) {
			labels = append(labels, tickLabel(v))
		}
		if got := strings.Join(labels, " "); got != c.want {
			t.Errorf("tick labels of [%v, %v] = %s, want %s", c.lo, c.hi, got, c.want)
		}
	}
}

// A chart carries its title, axis labels, tick labels and a legend entry
// per series.
func TestChartSVG(t *testing.T) {
	c := Chart{Title: "held-out accuracy", XLabel: "step", YLabel: "accuracy", Series: []Series{
		{Name: "GRPO", Points: [][2]float64{{0, 0.2}, {30, 0.4}, {60, 0.5}}},
		{Name: "LANPO", Points: [][2]float64{{0, 0.2}, {30, 0.45}, {60, 0.55}}},
	}}
	svg := c.SVG()
	for _, want := range []string{"<svg", "held-out accuracy", ">step<", ">accuracy<", ">GRPO<", ">LANPO<", ">0.6<", ">60<", "<polyline"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	if (Chart{Title: "empty"}).SVG() != "" {
		t.Error("a chart without points rendered")
	}
}

// TestMeasuredZeroIsDrawn: a chart of a metric never set (all zero) is
// left out, but a measured one (held-out accuracy 0 at every step) is
// drawn, with a y axis around 0.
func TestMeasuredZeroIsDrawn(t *testing.T) {
	c := Chart{Title: "held-out", Series: []Series{{Name: "grpo", Points: [][2]float64{{0, 0}, {5, 0}}}}}
	var b strings.Builder
	WriteChart(&b, c)
	if b.Len() != 0 {
		t.Fatal("an all-zero chart of an unset metric was drawn")
	}
	c.Measured = true
	WriteChart(&b, c)
	if !strings.Contains(b.String(), "<svg") || strings.Contains(b.String(), "NaN") {
		t.Fatalf("measured zeros: %q", b.String())
	}
}
