package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/lanpo-rl/lanpo/internal/iocap"
	"github.com/lanpo-rl/lanpo/reward"
)

// CodeRunner runs Python in the code sandbox (*reward.Sandbox).
type CodeRunner interface {
	Run(ctx context.Context, r reward.CodeRequest) (reward.CodeOutcome, error)
}

const pythonDescription = "Run Python 3 code and return what it prints (stdout, then stderr). Each call starts a fresh interpreter: define what you need in the same call. Print the values you want to see."

const pythonParameters = `{"type": "object", "properties": {"code": {"type": "string", "description": "Python code to run"}}, "required": ["code"]}`

// pythonTool runs the call's code in the sandbox (reward.code's limits:
// CPU, wall, memory, processes, no network, a private tmpfs), a fresh
// interpreter each call: no state carries over between calls (each call
// is a whole program, which keeps a trajectory's calls independent and
// replayable).
type pythonTool struct {
	decl  json.RawMessage
	sb    CodeRunner
	limit limits
}

func (t *pythonTool) Declaration() json.RawMessage { return t.decl }

func (t *pythonTool) Run(ctx context.Context, args json.RawMessage) (string, error) {
	if t.sb == nil {
		return "", errors.New("no code sandbox (the tool set was built for its declarations only)")
	}
	var a struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return "", err
	}
	// Its time limits are the sandbox's (reward.code's cpu_seconds and
	// wall_seconds, counted from the interpreter's start): a call waiting
	// for a free sandbox slot is not timed out for it.
	o, err := t.sb.Run(ctx, reward.CodeRequest{Program: a.Code, Run: true})
	if err != nil {
		return "", err
	}
	var out strings.Builder
	out.WriteString(o.Stdout)
	if o.Stderr != "" {
		if out.Len() > 0 {
			out.WriteString("\n")
		}
		out.WriteString(o.Stderr)
	}
	text := iocap.Cap(out.String(), t.limit.out)
	if !o.Passed {
		return text, errors.New(o.Reason)
	}
	return text, nil
}
