package eval

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/tools"
	"github.com/lanpo-rl/lanpo/tools/toolstest"
)

// TestEvalToolsMode: the tools mode beside zero-shot: its prompts declare
// the tools, its samples are trajectories (the model's own text kept
// apart, which the reward reads), its summary row counts calls, turns and
// errors, and compares with zero-shot per problem (paired, with an
// interval); the same problems' zero-shot samples are drawn with the same
// randomness.
func TestEvalToolsMode(t *testing.T) {
	m, tk := tinyModel(t)
	out := filepath.Join(t.TempDir(), "eval")
	o := evalOptions(t, out, nil)
	o.Modes = []string{ModeZeroShot, ModeTools}
	o.SkipLongPrompts = true // the tools' declarations are long for the tiny model's 1,024 positions
	ids, err := tk.Encode(" TOOL ", false)
	if err != nil {
		t.Fatal(err)
	}
	o.Tools = &toolstest.Scripted{After: 2, Append: toInt64(ids), Record: tools.Trajectory{Turns: 1, Calls: 1, Errors: 1}}
	sums, err := Run(m, tk, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 2 || sums[1].Mode != ModeTools || sums[1].ToolCallsMean <= 0 || sums[1].ToolErrors == 0 || sums[1].ToolsMinusZero == nil {
		t.Fatalf("summary %+v", sums)
	}
	if d, ci := *sums[1].ToolsMinusZero, sums[1].ToolsCI95; ci == nil || ci[0] > d || ci[1] < d {
		t.Errorf("paired difference %g outside its interval %v", d, ci)
	}
	if z, _ := json.Marshal(sums[0]); strings.Contains(string(z), "tools_minus") || strings.Contains(string(z), "tool_calls") {
		t.Errorf("the zero-shot row carries tool keys: %s", z)
	}
	b, _ := json.Marshal(sums[1])
	if !strings.Contains(string(b), `"tool_calls_mean"`) || !strings.Contains(string(b), `"tools_minus_zero_shot"`) {
		t.Errorf("summary JSON %s", b)
	}
	flat := Flatten(sums)
	pre := sums[1].Bench + "/" + ModeTools + "/"
	if flat[pre+"tool_calls_mean"] != sums[1].ToolCallsMean || flat[pre+"tool_errors"] != float64(sums[1].ToolErrors) || flat[pre+"tools_minus_zero_shot"] != *sums[1].ToolsMinusZero {
		t.Errorf("flattened %v", flat)
	}
	if _, ok := flat[sums[0].Bench+"/"+ModeZeroShot+"/tool_calls_mean"]; ok {
		t.Error("the flattened zero-shot row carries tool keys")
	}
	lines, err := jsonl.Read[SampleLine](filepath.Join(out, SamplesFile))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, l := range lines {
		if l.Mode != ModeTools {
			continue
		}
		if !strings.Contains(l.Prompt, "<tools>") {
			t.Fatalf("a tools prompt without the declarations: %q", l.Prompt)
		}
		if l.ToolCalls == 1 {
			seen++
			if !strings.Contains(l.Response, " TOOL ") || strings.Contains(l.ModelText, "TOOL") {
				t.Errorf("trajectory %q, model text %q", l.Response, l.ModelText)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no tools sample called")
	}
}

func toInt64(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, x := range ids {
		out[i] = int64(x)
	}
	return out
}
