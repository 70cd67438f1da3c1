package trainer

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/tools"
)

// rolloutLine is one line of RUN_DIR/rollouts/step-NNNNNN.jsonl (log.rollouts):
// what the model saw and wrote, so a user can read what feedback did.
type rolloutLine struct {
	Step      int     `json:"step"`
	ProblemID string  `json:"problem_id"`
	Group     int     `json:"group"` // the prompt's index in the step
	Sample    int     `json:"sample"`
	Mode      string  `json:"mode"` // scratch, reflection or abstraction
	Prompt    string  `json:"prompt"`
	Response  string  `json:"response"`
	Reward    float64 `json:"reward"`
	Correct   bool    `json:"correct"`
	// Reason is the reward kind's account of its verdict.
	Reason    string `json:"reason,omitempty"`
	Truncated bool   `json:"truncated"`
	Tokens    int    `json:"tokens,omitempty"` // response tokens (a trajectory's appended ones included)
	// A tool trajectory (docs/tools.md): the tokens the tools' responses
	// appended, the calls, the failed calls, the tool turns, and why the
	// tools stopped it early ("max_turns"; empty otherwise).
	AppendedTokens int    `json:"appended_tokens,omitempty"`
	ToolCalls      int    `json:"tool_calls,omitempty"`
	ToolErrors     int    `json:"tool_errors,omitempty"`
	ToolTurns      int    `json:"tool_turns,omitempty"`
	ToolEnd        string `json:"tool_end,omitempty"`
	// Related are an abstraction prompt's retrieval candidates (on the
	// group's first sample only).
	Related []rl.Related `json:"related,omitempty"`
	// Lessons the group's plan was condensed from, or the lessons shown
	// (the first sample only).
	Lessons []string `json:"lessons,omitempty"`
}

// logRollouts writes the step's rollouts (every sampled one) to
// RUN_DIR/rollouts/step-NNNNNN.jsonl, replacing the file if the step is run
// again after a resume.
func (g *grpoRun) logRollouts(sampled []*rollout) error {
	dir := filepath.Join(g.cfg.RunDir, "rollouts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	step := g.state.Step + 1
	rows := make([]rolloutLine, len(sampled))
	prompts := map[*rl.Prompt]string{}
	for i, r := range sampled {
		text, ok := prompts[r.Prompt]
		if !ok {
			text = g.tk.Decode(tokenizer.Ints(r.Prompt.IDs), false)
			prompts[r.Prompt] = text
		}
		rows[i] = rolloutLine{Step: step, ProblemID: g.problems[r.Prompt.Problem].ID, Group: r.Prompt.Index, Sample: r.Sample, Mode: r.Prompt.Mode,
			Prompt: text, Response: r.Text, Reward: r.Reward, Correct: r.Correct, Reason: r.reason, Truncated: r.Truncated, Tokens: r.Tokens,
			AppendedTokens: tools.AppendedTokens(r.appended), ToolCalls: r.tool.Calls, ToolErrors: r.tool.Errors, ToolTurns: r.tool.Turns, ToolEnd: r.tool.EndReason}
		if r.Sample == 0 {
			rows[i].Related, rows[i].Lessons = r.Prompt.Related, r.Prompt.Lessons
		}
	}
	if g.comm.Size() > 1 {
		// Rank 0 writes every rank's rollouts, in global order.
		var err error
		if rows, err = dist.GatherOrdered(g.comm, rows, func(r rolloutLine) (int, int) { return r.Group, r.Sample }); err != nil {
			return err
		}
		if g.comm.Rank() != 0 {
			return nil
		}
	}
	return jsonl.WriteFile(filepath.Join(dir, fmt.Sprintf("step-%06d.jsonl", step)), rows)
}
