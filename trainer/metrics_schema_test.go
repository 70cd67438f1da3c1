package trainer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestMetricsSchema: docs/metrics.md documents every key a metrics line
// can hold — StepMetrics' and every method's explorer's and term's
// (method.metrics: feedback.Metrics, consolidation's, …) JSON names, every phase the code times (seconds.*, here and in feedback/) —
// and nothing that does not exist; reward_mean and reward_std are written
// when 0.
func TestMetricsSchema(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_/@.A-Z]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	want := map[string]bool{"eval/BENCH/MODE/METRIC": true}
	var fields func(t reflect.Type)
	fields = func(typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if f.Anonymous {
				fields(f.Type.Elem())
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				want[name] = true
			}
		}
	}
	fields(reflect.TypeOf(StepMetrics{}))
	for _, m := range methods {
		for _, v := range m.metrics {
			fields(reflect.TypeOf(v))
		}
	}
	files, _ := filepath.Glob("*.go")
	more, _ := filepath.Glob("../feedback/*.go")
	files = append(files, more...)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\.Enter\("([a-z_]+)"\)`).FindAllStringSubmatch(string(src), -1) {
			want["seconds."+m[1]] = true
		}
	}
	for k := range want {
		if !documented[k] {
			t.Errorf("metrics key %q is not in docs/metrics.md", k)
		}
	}
	for k := range documented {
		if !want[k] {
			t.Errorf("docs/metrics.md documents %q, which no metrics line holds", k)
		}
	}
	if len(want) < 60 {
		t.Fatalf("only %d keys found: the test reads the wrong types", len(want))
	}
	b, _ := json.Marshal(StepMetrics{Step: 1})
	for _, k := range []string{`"reward_mean":0`, `"reward_std":0`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("a line with zero reward lacks %s: %s", k, b)
		}
	}
}

// keptTags are tags that moved code must not move: the feedback methods'
// metrics left StepMetrics for their terms' own types, their TensorBoard
// tags stayed.
var keptTags = map[string]string{
	"sdpo_divergence": "sdpo/divergence", "sdpo_rows": "sdpo/rows", "critique_loss": "critique/loss",
	"critique_refinements": "critique/refinements", "consolidated": "lanpo/consolidated",
	"consolidated_token_frac": "lanpo/consolidated_token_frac", "consolidate_nll": "lanpo/consolidate_nll",
}

// TestTensorBoardTags: every key docs/metrics.md lists has, in its last
// column, the TensorBoard tag TensorBoardTag gives it, and the tags are
// grouped in the sections the page names.
func TestTensorBoardTags(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `([a-z_/@.A-Z]+)` \\|.*\\| ([^|]+) \\|$").FindAllStringSubmatch(string(doc), -1)
	if len(rows) < 60 {
		t.Fatalf("%d rows with a TensorBoard column in docs/metrics.md", len(rows))
	}
	for _, r := range rows {
		key, col := r[1], strings.TrimSpace(r[2])
		switch key {
		case "step", "seconds", "eval/BENCH/MODE/METRIC":
			continue
		}
		tag := TensorBoardTag(key)
		if want, ok := keptTags[key]; ok && tag != want {
			t.Errorf("%s: tagged %s, was %s: TensorBoard users' dashboards name it", key, tag, want)
		}
		if col != "`"+tag+"`" {
			t.Errorf("%s: docs/metrics.md says %s, the code tags it %s", key, col, tag)
		}
		if g, _, _ := strings.Cut(tag, "/"); !strings.Contains("train rollout lanpo sdpo critique perf eval", g) {
			t.Errorf("%s: tag %s is in no section", key, tag)
		}
	}
}
