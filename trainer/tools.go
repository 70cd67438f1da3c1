package trainer

import (
	"context"
	"fmt"
	"slices"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/tools"
)

// Tools in the rollout (the tools: section; docs/tools.md): a trajectory
// is the sampled ids and the tool responses appended after each tool
// turn; only the sampled ids carry loss, KL, entropy and importance
// weights (batch.go masks the appended ones), advantages stay per
// trajectory, and the reward reads the model's own text.

const (
	defaultMaxTurns            = 4
	defaultMaxToolOutputTokens = 512
)

// toolsForTest, set by a test, gives the run a scripted tool loop.
var toolsForTest func() toolLoop

// toolLoop is what the rollout asks of the tools: tools.Loop, or a
// scripted one in tests.
type toolLoop interface {
	Start(ctx context.Context, rows int) (*model.Turns, error)
	Trajectory(prompt, index int) tools.Trajectory
}

// newToolLoop builds the run's tools (nil without a tools: section).
func newToolLoop(cfg Config, tk *tokenizer.Tokenizer, eos []int64) (toolLoop, error) {
	if len(cfg.Tools) == 0 {
		return nil, nil
	}
	return ToolLoop(cfg, cfg.Tools, tk, eos)
}

// EvalToolSpecs are eval.tools' tools: each name from the tools: section,
// or the built-in python; an error names the one that is neither.
func EvalToolSpecs(cfg Config) ([]tools.Spec, error) {
	var out []tools.Spec
	for _, name := range cfg.Eval.Tools {
		i := slices.IndexFunc(cfg.Tools, func(s tools.Spec) bool { return s.Name == name })
		switch {
		case i >= 0:
			out = append(out, cfg.Tools[i])
		case name == tools.Python:
			out = append(out, tools.Spec{Name: tools.Python})
		default:
			return nil, fmt.Errorf("config key eval.tools: %q is neither python nor a tool of the tools: section", name)
		}
	}
	return out, nil
}

// ToolLoop builds specs' tools for a tokenizer and its end-of-turn ids:
// the python tool in the code sandbox (rollout.tool_sandbox; reward.code's
// limits when the reward is code, else their defaults), with
// rollout.max_turns, max_tool_output_tokens and tool_lockstep, checked
// (tools.Loop.Check).
func ToolLoop(cfg Config, specs []tools.Spec, tk *tokenizer.Tokenizer, eos []int64) (*tools.Loop, error) {
	var sb *reward.Sandbox
	if slices.ContainsFunc(specs, func(s tools.Spec) bool { return s.Name == tools.Python && len(s.Command) == 0 }) {
		mode := cfg.Rollout.ToolSandbox
		if mode == "" {
			mode = reward.SandboxNamespaces
		}
		limits := reward.DefaultCodeConfig()
		if cfg.Reward.Kind == reward.KindCode {
			limits = cfg.Reward.Code
		}
		var err error
		if sb, err = reward.NewSandbox(mode, limits); err != nil {
			return nil, err
		}
	}
	set, err := tools.NewSet(specs, sb)
	if err != nil {
		return nil, err
	}
	turns, out := cfg.Rollout.MaxTurns, cfg.Rollout.MaxToolOutputTokens
	if turns == 0 {
		turns = defaultMaxTurns
	}
	if out == 0 {
		out = defaultMaxToolOutputTokens
	}
	l := &tools.Loop{Set: set, Tok: tk, Chat: tokenizer.ChatOptions{EnableThinking: cfg.Rollout.EnableThinking, Tools: set.Declarations()},
		EndOfTurn: eos, MaxTurns: turns, MaxOutputTokens: out, Format: cfg.Rollout.ToolFormat, Lockstep: cfg.Rollout.ToolLockstep}
	if err := l.Check(); err != nil { // before any step: a template without tool responses is named now
		return nil, err
	}
	return l, nil
}

// sampledMask is true at a trajectory's sampled positions (nil: all).
func sampledMask(n int, appended [][2]int) []bool {
	if len(appended) == 0 {
		return nil
	}
	m := make([]bool, n)
	for i := range m {
		m[i] = true
	}
	for _, a := range appended {
		for k := a[0]; k < a[1]; k++ {
			m[k] = false
		}
	}
	return m
}

// ownTokens is how many of a rollout's response tokens it sampled (its
// appended tool tokens left out).
func ownTokens(r *rollout) int { return len(r.ids) - tools.AppendedTokens(r.appended) }
