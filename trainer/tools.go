package trainer

import (
	"context"
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

// newToolLoop builds the run's tools (nil without a tools: section): the
// python tool in the code sandbox (rollout.tool_sandbox; reward.code's
// limits when the reward is code, else their defaults).
func newToolLoop(cfg Config, tk *tokenizer.Tokenizer, eos []int64) (toolLoop, error) {
	if len(cfg.Tools) == 0 {
		return nil, nil
	}
	var sb *reward.Sandbox
	if slices.ContainsFunc(cfg.Tools, func(s tools.Spec) bool { return s.Name == tools.Python && len(s.Command) == 0 }) {
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
	set, err := tools.NewSet(cfg.Tools, sb)
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
	return &tools.Loop{Set: set, Tok: tk, Chat: tokenizer.ChatOptions{EnableThinking: cfg.Rollout.EnableThinking, Tools: set.Declarations()},
		EndOfTurn: eos, MaxTurns: turns, MaxOutputTokens: out}, nil
}

// ownIDs are a trajectory's sampled ids (the appended ranges left out).
func ownIDs(ids []int64, appended [][2]int) []int64 {
	if len(appended) == 0 {
		return ids
	}
	out := make([]int64, 0, len(ids))
	at := 0
	for _, a := range appended {
		out = append(out, ids[at:a[0]]...)
		at = a[1]
	}
	return append(out, ids[at:]...)
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
