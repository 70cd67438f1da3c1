package eval

import (
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// A run's report: RUN_DIR/report.html with its charts as PNGs beside it.
// It reads what the run wrote — metrics.jsonl of each stage (RUN_DIR itself,
// or RUN_DIR/sft and RUN_DIR/rl for the demo), eval_*.json and
// config.resolved.yaml — so `lanpo report RUN_DIR` can regenerate it.

type series struct {
	name   string
	points [][2]float64 // (step, value)
}

// WriteReport writes RUN_DIR/report.html from the files of a run.
func WriteReport(runDir string) error {
	stages := []string{"sft", "rl"}
	var found []string
	for _, s := range stages {
		if _, err := os.Stat(filepath.Join(runDir, s, "metrics.jsonl")); err == nil {
			found = append(found, s)
		}
	}
	if len(found) == 0 {
		if _, err := os.Stat(filepath.Join(runDir, "metrics.jsonl")); err != nil {
			return fmt.Errorf("report %s: no metrics.jsonl in it (or in sft/, rl/)", runDir)
		}
		found = []string{"."}
	}
	var body strings.Builder
	fmt.Fprintf(&body, "<h1>lanpo run report</h1><p>%s</p>", html.EscapeString(runDir))
	before, errB := readEval(filepath.Join(runDir, "eval_sft.json"))
	after, errA := readEval(filepath.Join(runDir, "eval_rl.json"))
	if errB == nil && errA == nil {
		body.WriteString("<h2>Held-out accuracy (greedy)</h2><table><tr><th>level</th><th>problems</th><th>after SFT</th><th>after GRPO</th><th>answers with column steps, after SFT → after GRPO</th></tr>")
		for i, lb := range before.Levels {
			la := after.Levels[i]
			name := ""
			if lb.Level < len(Levels) {
				name = Levels[lb.Level]
			}
			fmt.Fprintf(&body, "<tr><td>%d: %s</td><td>%d</td><td>%.3f</td><td>%.3f</td><td>%d → %d</td></tr>", lb.Level, html.EscapeString(name), lb.N, lb.Accuracy, la.Accuracy, lb.Worked, la.Worked)
		}
		fmt.Fprintf(&body, "<tr><th>all</th><td></td><th>%.3f</th><th>%.3f</th><th>%d → %d</th></tr></table>", before.Overall, after.Overall, before.Worked, after.Worked)
		body.WriteString("<h2>Sample completions</h2><table><tr><th>problem</th><th>gold</th><th>after SFT</th><th>after GRPO</th></tr>")
		for i := 0; i < len(before.Completions) && i < len(after.Completions); i += max(1, len(before.Completions)/12) {
			b, a := before.Completions[i], after.Completions[i]
			fmt.Fprintf(&body, "<tr><td>%s</td><td>%s</td><td class=%q>%s</td><td class=%q>%s</td></tr>", html.EscapeString(b.Problem),
				html.EscapeString(b.Gold), mark(b.Correct), html.EscapeString(b.Output), mark(a.Correct), html.EscapeString(a.Output))
		}
		body.WriteString("</table>")
	}
	for _, stage := range found {
		rows, err := readMetrics(filepath.Join(runDir, stage, "metrics.jsonl"))
		if err != nil {
			return err
		}
		title := map[string]string{"sft": "Stage 1: SFT", "rl": "Stage 2: GRPO", ".": "Training"}[stage]
		fmt.Fprintf(&body, "<h2>%s</h2>", title)
		charts := [][]string{{"loss"}, {"eval_loss"}, {"reward_mean", "accuracy"}, {"response_length_mean"}, {"entropy"}, {"kl", "clip_frac"}}
		for _, keys := range charts {
			var ss []series
			for _, k := range keys {
				s := series{name: k}
				for _, r := range rows {
					if v, ok := r[k].(float64); ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
						s.points = append(s.points, [2]float64{r["step"].(float64), v})
					}
				}
				if len(s.points) > 0 {
					ss = append(ss, s)
				}
			}
			if len(ss) == 0 || allZero(ss) { // e.g. accuracy during SFT, KL without a reference
				continue
			}
			name := strings.ReplaceAll(filepath.Clean(stage), ".", "run") + "_" + strings.Join(keys, "_") + ".png"
			if err := writeChart(filepath.Join(runDir, name), ss); err != nil {
				return err
			}
			fmt.Fprintf(&body, "<figure><img src=%q alt=%q><figcaption>%s</figcaption></figure>", name, strings.Join(keys, ", "), html.EscapeString(legend(ss)))
		}
		if cfg, err := os.ReadFile(filepath.Join(runDir, stage, "config.resolved.yaml")); err == nil {
			fmt.Fprintf(&body, "<details><summary>config</summary><pre>%s</pre></details>", html.EscapeString(string(cfg)))
		}
	}
	page := "<!doctype html><meta charset=utf-8><title>lanpo report</title><style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}" +
		"table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;font-size:14px}.ok{background:#dfd}.bad{background:#fdd}" +
		"figure{display:inline-block;margin:8px}figcaption{font-size:12px}</style>" + body.String()
	return os.WriteFile(filepath.Join(runDir, "report.html"), []byte(page), 0o644)
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "bad"
}

func allZero(ss []series) bool {
	for _, s := range ss {
		for _, p := range s.points {
			if p[1] != 0 {
				return false
			}
		}
	}
	return true
}

var palette = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}}

func legend(ss []series) string {
	var parts []string
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range ss {
		parts = append(parts, fmt.Sprintf("%s (%s)", s.name, []string{"blue", "red", "green"}[i%3]))
		for _, p := range s.points {
			lo, hi = math.Min(lo, p[1]), math.Max(hi, p[1])
		}
	}
	return fmt.Sprintf("%s vs step; y from %.4g (bottom) to %.4g (top)", strings.Join(parts, ", "), lo, hi)
}

func readEval(path string) (Result, error) {
	var r Result
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

func readMetrics(path string) ([]map[string]any, error) { return jsonl.Read[map[string]any](path) }

// writeChart draws line series into a 480×260 PNG with a light grid; the
// y range spans the data, labelled in the caption rather than with fonts.
func writeChart(path string, ss []series) error {
	const w, h, pad = 480, 260, 20
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, p := range s.points {
			minX, maxX = math.Min(minX, p[0]), math.Max(maxX, p[0])
			minY, maxY = math.Min(minY, p[1]), math.Max(maxY, p[1])
		}
	}
	if maxX == minX {
		maxX = minX + 1
	}
	if maxY == minY {
		maxY = minY + 1
	}
	grid := color.RGBA{225, 225, 225, 255}
	for k := 0; k <= 4; k++ {
		y := pad + k*(h-2*pad)/4
		for x := pad; x < w-pad; x++ {
			img.Set(x, y, grid)
		}
	}
	px := func(p [2]float64) (int, int) {
		x := pad + int((p[0]-minX)/(maxX-minX)*float64(w-2*pad))
		y := h - pad - int((p[1]-minY)/(maxY-minY)*float64(h-2*pad))
		return min(max(x, 0), w-1), min(max(y, 0), h-1)
	}
	for i, s := range ss {
		c := palette[i%len(palette)]
		for k := 1; k < len(s.points); k++ {
			x0, y0 := px(s.points[k-1])
			x1, y1 := px(s.points[k])
			line(img, x0, y0, x1, y1, c)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// line draws with Bresenham's algorithm.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		img.Set(x0, y0+1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e // both tests use the error before this step's updates
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
