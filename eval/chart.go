package eval

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// Charts are inline SVG in the report: axis labels, ticks and a legend
// need no font files, and several series (two training arms, three eval
// modes) share one chart.

type Series struct {
	Name   string
	Points [][2]float64 // (x, y)
}

type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// Measured: zero is a measurement (held-out accuracy), so WriteChart
	// draws the chart even when every point is 0 (not a metric never set).
	Measured bool
}

var seriesColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

const (
	chartW, chartH                       = 560, 320
	padLeft, padRight, padTop, padBottom = 64, 28, 28, 72 // padRight: half of the widest x tick label (2.5e+06)
)

// svg renders the chart; a chart without points renders as "".
func (c Chart) SVG() string {
	minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	n := 0
	for _, s := range c.Series {
		for _, p := range s.Points {
			minX, maxX = math.Min(minX, p[0]), math.Max(maxX, p[0])
			minY, maxY = math.Min(minY, p[1]), math.Max(maxY, p[1])
			n++
		}
	}
	if n == 0 {
		return ""
	}
	xt := niceTicks(minX, maxX, 6)
	yt := niceTicks(minY, maxY, 5)
	x0, x1, y0, y1 := xt[0], xt[len(xt)-1], yt[0], yt[len(yt)-1]
	plotW, plotH := float64(chartW-padLeft-padRight), float64(chartH-padTop-padBottom)
	px := func(x float64) float64 { return padLeft + (x-x0)/(x1-x0)*plotW }
	py := func(y float64) float64 { return padTop + plotH - (y-y0)/(y1-y0)*plotH }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`, padLeft, html.EscapeString(c.Title))
	for _, t := range yt {
		y := py(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`, padLeft, y, chartW-padRight, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`, padLeft-6, y, tickLabel(t))
	}
	for _, t := range xt {
		x := px(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/>`, x, chartH-padBottom, x, chartH-padBottom+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, chartH-padBottom+17, tickLabel(t))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, padLeft, padTop, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`, padLeft+plotW/2, chartH-padBottom+34, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(14 %.0f) rotate(-90)" text-anchor="middle">%s</text>`, padTop+plotH/2, html.EscapeString(c.YLabel))
	for i, s := range c.Series {
		color := seriesColors[i%len(seriesColors)]
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
		}
		if len(pts) == 1 {
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, strings.Split(pts[0], ",")[0], strings.Split(pts[0], ",")[1], color)
		} else {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.8"/>`, strings.Join(pts, " "), color)
		}
		lx := padLeft + (i%3)*170
		ly := chartH - 16 + (i/3)*0
		if i >= 3 {
			ly = chartH - 4
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s</text>`, lx, ly-6, color, lx+18, ly, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>")
	return b.String()
}

// niceTicks returns about n round tick values (steps of 1, 2, 2.5 or 5 ×
// 10^k) covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		span := math.Max(math.Abs(lo)*0.1, 1)
		lo, hi = lo-span, hi+span
	}
	raw := (hi - lo) / float64(max(n-1, 1))
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	// Multiples of the step, rounded to 10 digits: 3 × 0.1 is 0.3, not
	// 0.30000000000000004 (a label that printed as its tail, "0000000004").
	tick := func(i float64) float64 {
		r, _ := strconv.ParseFloat(fmt.Sprintf("%.10g", i*step), 64)
		return r
	}
	first := math.Floor(lo / step)
	var out []float64
	for i := first; tick(i) <= hi+step*1e-9; i++ {
		out = append(out, tick(i))
	}
	if out[len(out)-1] < hi {
		out = append(out, tick(first+float64(len(out))))
	}
	return out
}

// tickLabel writes a tick value short, and neighbouring ticks never alike
// (1.5e+06 beside 2e+06, 0.0015 beside 0.002): large and tiny values in
// exponent form with up to three significant digits, the rest as they are.
func tickLabel(v float64) string {
	if v == 0 { // -0 too: a tick stepped up from below
		return "0"
	}
	if a := math.Abs(v); a >= 1e5 || a < 1e-3 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	// niceTicks rounds its values, so the shortest form is short: 0.25, 1500.
	return strconv.FormatFloat(v, 'f', -1, 64)
}
