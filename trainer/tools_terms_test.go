package trainer

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/tools"
)

// termStep is the step's services for a term's rows alone: every
// generation answers each request with one scripted trajectory ("the
// answer" + a tool's " OUTPUT" + " is 3"; plain generation: without the
// tool's part), and scoring accepts every row. It records the prompts it
// was asked to generate from.
type termStep struct {
	stepServices // the rest: unused (a call panics)
	tk           *tokenizer.Tokenizer
	own1, out    []int64
	own2         []int64
	generated    [][]int64 // generate's prompts
	trajected    [][]int64 // trajectories' prompts
}

func newTermStep(t *testing.T, tk *tokenizer.Tokenizer) *termStep {
	enc := func(s string) []int64 {
		ids, err := tk.Encode(s, false)
		if err != nil {
			t.Fatal(err)
		}
		return toInt64s(ids)
	}
	return &termStep{tk: tk, own1: enc("The answer"), out: enc(" OUTPUT"), own2: enc(" is 3")}
}

func toInt64s(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, x := range ids {
		out[i] = int64(x)
	}
	return out
}

// trajectory is the scripted trajectory as a sample of request i.
func (f *termStep) trajectory(i int) (model.Sample, tools.Trajectory) {
	ids := slices.Concat(f.own1, f.out, f.own2)
	lp := make([]float32, len(ids))
	a := [2]int{len(f.own1), len(f.own1) + len(f.out)}
	for k := a[0]; k < a[1]; k++ {
		lp[k] = float32(math.NaN())
	}
	return model.Sample{Prompt: i, IDs: ids, Logprobs: lp, Appended: [][2]int{a}, FinishReason: "stop"}, tools.Trajectory{Calls: 1, Turns: 1}
}

func (f *termStep) fitsContext(int) bool         { return true }
func (f *termStep) prefilled(int)                {}
func (f *termStep) spanOf(int, []int64) []bool   { return nil }
func (f *termStep) ownTokens() int               { return len(f.own1) + len(f.own2) }
func (f *termStep) score(rolls []*rollout) error { return setCorrect(rolls) }

func setCorrect(rolls []*rollout) error {
	for _, r := range rolls {
		r.Correct, r.Reward = true, 1
	}
	return nil
}

func (f *termStep) generate(reqs []model.Request, _ []int, _ int, _ uint64) ([]model.Sample, error) {
	var out []model.Sample
	for i, r := range reqs {
		f.generated = append(f.generated, r.PromptIDs)
		out = append(out, model.Sample{Prompt: i, IDs: f.own1, Logprobs: make([]float32, len(f.own1)), FinishReason: "stop"})
	}
	return out, nil
}

func (f *termStep) trajectories(reqs []model.Request, _ []int, _ int, _ uint64) ([]model.Sample, []tools.Trajectory, error) {
	var out []model.Sample
	var trs []tools.Trajectory
	for i, r := range reqs {
		f.trajected = append(f.trajected, r.PromptIDs)
		s, tr := f.trajectory(i)
		out, trs = append(out, s), append(trs, tr)
	}
	return out, trs, nil
}

// TestTermRowsOfTrajectories: the rows each method trains from tool
// trajectories keep their appended ranges and count only the model's own
// tokens — LANPO's consolidation, SDPO's, Critique-GRPO's refinements —
// and Critique-GRPO generates its critique from a prompt without the tool
// declarations, its refinement through the tools from one with them, and
// scores the refinement on the model's own text.
func TestTermRowsOfTrajectories(t *testing.T) {
	cfg := tinyConfig(t, "tools=[{name: python}]", "rollout.samples_per_prompt=2", "algo.name=grpo")
	tk, err := tokenizer.Load(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	f := newTermStep(t, tk)
	problems := []Problem{{ID: "p0", Problem: "What is 1 + 2?"}}
	bare, err := cfg.PromptFormat().SolveIDs(tk, problems[0].Problem)
	if err != nil {
		t.Fatal(err)
	}
	view := termView{cfg: &cfg, tk: tk, problems: problems, prompts: [][]int64{bare}, step: f}
	sampled := func(mode string) []*rollout {
		p := &rl.Prompt{Problem: 0, Index: 0, Mode: mode, IDs: bare}
		var out []*rollout
		for i := range 2 {
			s, tr := f.trajectory(0)
			s.Index = i
			r := sampledRollout(tk, p, s, tr)
			r.promptIDs, r.oldLogp = bare, widen(s.Logprobs)
			r.Correct, r.Reward = i == 0, float64(1-i)
			out = append(out, r)
		}
		return out
	}
	check := func(name string, rows []*rollout, tot termRows) {
		t.Helper()
		if len(rows) == 0 {
			t.Fatalf("%s: no rows", name)
		}
		for _, r := range rows {
			if !slices.Equal(r.appended, [][2]int{{len(f.own1), len(f.own1) + len(f.out)}}) {
				t.Errorf("%s: a row's appended ranges %v", name, r.appended)
			}
		}
		if want := len(rows) * f.ownTokens(); tot.tokens != want {
			t.Errorf("%s: %d tokens counted, want the model's own %d", name, tot.tokens, want)
		}
	}

	// LANPO's consolidation: the correct feedback-aware trajectory.
	cfg.LANPO.Consolidate = 1
	_, rows, tot, err := newConsolidation(view).rows(1, nil, sampled(rl.ModeReflection), noPhases{})
	if err != nil {
		t.Fatal(err)
	}
	check("consolidation", rows, tot)

	// SDPO: each rollout with its (blind) sibling.
	_, rows, tot, err = (&sdpo{v: view, cfg: SDPOConfig{TeacherContext: TeacherBlind}}).rows(1, nil, sampled(rl.ModeScratch), noPhases{})
	if err != nil {
		t.Fatal(err)
	}
	check("sdpo", rows, tot)
	if !strings.Contains(tk.Decode(tokenizer.Ints(rows[0].auxPrompt), false), "<tools>") {
		t.Error("sdpo: the teacher's prompt does not declare the tools its response calls")
	}

	// Critique-GRPO, self-critique.
	grp := sampled(rl.ModeScratch)
	c := &critique{v: view, cfg: CritiqueConfig{Source: CritiqueSelf, MaxCritiqueTokens: 8, Gamma: 0.1}}
	_, rows, tot, err = c.rows(1, grp, grp, noPhases{})
	if err != nil {
		t.Fatal(err)
	}
	check("critique", rows, tot)
	if len(f.generated) != 1 || strings.Contains(tk.Decode(tokenizer.Ints(f.generated[0]), false), "<tools>") {
		t.Errorf("the critique prompt declares tools (or was not generated: %d prompts)", len(f.generated))
	}
	if len(f.trajected) != 1 || !strings.Contains(tk.Decode(tokenizer.Ints(f.trajected[0]), false), "<tools>") {
		t.Errorf("the refinement was not a trajectory from a prompt declaring the tools (%d prompts)", len(f.trajected))
	}
	ref := rows[0]
	if ref.Sample != 2 || ref.tool.Calls != 1 || strings.Contains(ref.ownText, "OUTPUT") || !strings.Contains(ref.Text, "OUTPUT") {
		t.Errorf("refinement: sample %d, %d calls, own text %q, text %q", ref.Sample, ref.tool.Calls, ref.ownText, ref.Text)
	}
}
