// Package tools runs the tools a model calls inside a rollout: the Python
// tool (code run in reward's sandbox) and the tools a user declares (a
// command that reads the arguments as JSON on stdin and answers on
// stdout). It parses calls in the Qwen families' format
// (<tool_call>{"name": …, "arguments": {…}}</tool_call>), checks the
// arguments against each tool's JSON schema, runs a turn's calls at once,
// and turns any failure into an error message the model reads as the
// tool's output (docs/tools.md). Runner joins it to the rollout engine's
// park and resume (model.Turns). Nothing here sees a problem's answer or
// tests: a tool gets only the arguments the model wrote.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Python is the built-in tool's name.
const Python = "python"

// Spec is one tool in a config's tools list. A tool named python with no
// command is the built-in Python tool.
type Spec struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Parameters is the JSON schema of the arguments (an object schema),
	// written into the prompt in its own key order.
	Parameters yaml.Node `yaml:"parameters"`
	// Command is the program and its arguments (never a shell): it gets
	// the call's arguments as JSON on stdin and answers on stdout.
	Command        []string `yaml:"command"`
	TimeoutSeconds float64  `yaml:"timeout_seconds"`  // 0: 10
	MaxOutputBytes int      `yaml:"max_output_bytes"` // 0: 16384
	// MaxConcurrency is how many of a command tool's calls run at once
	// (0: the machine's CPUs); a call waiting for its turn is not timed
	// out for it. The python tool's is the sandbox's concurrency.
	MaxConcurrency int `yaml:"max_concurrency,omitempty"`
}

// Defaults for a Spec's limits.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultMaxOutputBytes = 16 << 10
)

// Tool is something a call runs.
type Tool interface {
	// Declaration is the template's tools entry: {"type": "function",
	// "function": {"name", "description", "parameters"}}.
	Declaration() json.RawMessage
	// Run runs one call with arguments already checked against the
	// schema; an error is the tool's failure (the model reads it).
	Run(ctx context.Context, args json.RawMessage) (string, error)
}

// Set is the tools a run offers, in their config order.
type Set struct {
	names   []string
	tools   map[string]Tool
	schemas map[string]*schema
}

// NewSet builds the tools of specs (python: over sandbox, which may be nil
// when no spec is the Python tool). Errors name the spec's key
// (tools[i].field).
func NewSet(specs []Spec, sandbox CodeRunner) (*Set, error) {
	s := &Set{tools: map[string]Tool{}, schemas: map[string]*schema{}}
	for i, sp := range specs {
		bad := func(key, format string, args ...any) error {
			return fmt.Errorf("config key tools[%d].%s: %s", i, key, fmt.Sprintf(format, args...))
		}
		if !toolName.MatchString(sp.Name) {
			return nil, bad("name", "%q: want letters, digits, _ or -, starting with a letter", sp.Name)
		}
		if _, dup := s.tools[sp.Name]; dup {
			return nil, bad("name", "%q is declared twice", sp.Name)
		}
		switch {
		case sp.TimeoutSeconds < 0:
			return nil, bad("timeout_seconds", "must be ≥ 0 (0: the default)")
		case sp.MaxOutputBytes < 0:
			return nil, bad("max_output_bytes", "must be ≥ 0 (0: the default)")
		case sp.MaxConcurrency < 0:
			return nil, bad("max_concurrency", "must be ≥ 0 (0: the machine's CPUs)")
		}
		var t Tool
		var params []byte
		var err error
		switch {
		case sp.Name == Python && len(sp.Command) == 0:
			if sp.Parameters.Kind != 0 {
				return nil, bad("parameters", "the built-in python tool's parameters are fixed ({\"code\": string})")
			}
			if sp.MaxConcurrency != 0 {
				return nil, bad("max_concurrency", "the built-in python tool runs as many calls at once as the code sandbox's concurrency (reward.code.concurrency)")
			}
			params = []byte(pythonParameters)
			desc := sp.Description
			if desc == "" {
				desc = pythonDescription
			}
			t = &pythonTool{decl: declaration(sp.Name, desc, params), sb: sandbox, limit: limitOf(sp)}
		case len(sp.Command) == 0:
			return nil, bad("command", "tool %q needs a command (argv: the program, then its arguments)", sp.Name)
		default:
			if params, err = nodeJSON(&sp.Parameters); err != nil {
				return nil, bad("parameters", "%v", err)
			}
			if len(params) == 0 {
				return nil, bad("parameters", "tool %q needs a JSON schema of its arguments ({type: object, properties: …})", sp.Name)
			}
			n := sp.MaxConcurrency
			if n == 0 {
				n = runtime.NumCPU()
			}
			t = &commandTool{decl: declaration(sp.Name, sp.Description, params), argv: sp.Command, limit: limitOf(sp), slots: make(chan struct{}, n)}
		}
		sc, err := parseSchema(params)
		if err != nil {
			return nil, bad("parameters", "%v", err)
		}
		s.names = append(s.names, sp.Name)
		s.tools[sp.Name] = t
		s.schemas[sp.Name] = sc
	}
	if len(s.names) == 0 {
		return nil, errors.New("tools: none declared")
	}
	return s, nil
}

var toolName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

type limits struct {
	timeout time.Duration
	out     int
}

func limitOf(sp Spec) limits {
	l := limits{timeout: DefaultTimeout, out: DefaultMaxOutputBytes}
	if sp.TimeoutSeconds > 0 {
		l.timeout = time.Duration(sp.TimeoutSeconds * float64(time.Second))
	}
	if sp.MaxOutputBytes > 0 {
		l.out = sp.MaxOutputBytes
	}
	return l
}

// declaration is a tool's entry in the template's tools list, keys in the
// order the Qwen examples use.
func declaration(name, desc string, params []byte) json.RawMessage {
	n, _ := json.Marshal(name)
	d, _ := json.Marshal(desc)
	return json.RawMessage(`{"type": "function", "function": {"name": ` + string(n) + `, "description": ` + string(d) + `, "parameters": ` + string(params) + `}}`)
}

// Names are the tools' names in config order.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Declarations are the tools' entries for tokenizer.ChatOptions.Tools.
func (s *Set) Declarations() []json.RawMessage {
	out := make([]json.RawMessage, len(s.names))
	for i, n := range s.names {
		out[i] = s.tools[n].Declaration()
	}
	return out
}

// Call is one parsed call of a turn.
type Call struct {
	Name string
	Args json.RawMessage
	Err  string // why the call cannot run (bad JSON, unknown tool, bad arguments); "" when it can
}

// Result is one call's outcome: what the model reads, and whether it
// failed.
type Result struct {
	Output  string
	Failed  bool
	Seconds float64
}

var callBlock = regexp.MustCompile(`(?s)<tool_call>(.*?)</tool_call>`)

// ParseCalls finds the calls in an assistant turn's text, in order: each
// <tool_call> block's JSON object {"name": …, "arguments": {…}}. An
// unclosed block (a turn cut off) is not a call.
func (s *Set) ParseCalls(text string) []Call {
	var calls []Call
	for _, m := range callBlock.FindAllStringSubmatch(text, -1) {
		calls = append(calls, s.parseCall(strings.TrimSpace(m[1])))
	}
	return calls
}

func (s *Set) parseCall(body string) Call {
	var c struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	err := dec.Decode(&c)
	if err == nil && strings.TrimSpace(body[dec.InputOffset():]) != "" {
		err = errors.New("trailing text after the object")
	}
	if err != nil {
		return Call{Err: fmt.Sprintf("the tool call is not one JSON object (%s)", err)}
	}
	if c.Name == nil {
		return Call{Err: `the tool call has no "name"`}
	}
	call := Call{Name: *c.Name, Args: c.Arguments}
	if _, ok := s.tools[call.Name]; !ok {
		call.Err = fmt.Sprintf("there is no tool %q (tools: %s)", call.Name, strings.Join(s.names, ", "))
		return call
	}
	args := bytes.TrimSpace(c.Arguments)
	if len(args) > 0 && args[0] == '"' { // OpenAI's wire form: the object as a JSON string
		var inner string
		if json.Unmarshal(args, &inner) == nil {
			args = []byte(inner)
		}
	}
	if len(args) == 0 {
		args = []byte("{}")
	}
	call.Args = args
	if err := s.schemas[call.Name].check(args); err != nil {
		call.Err = fmt.Sprintf("arguments of %s: %v", call.Name, err)
	}
	return call
}

// Run runs calls at once (the unrunnable ones answer their error) and
// returns their results in order. A failing, hanging or flooding tool
// ends as its own result; nothing here returns an error.
func (s *Set) Run(ctx context.Context, calls []Call) []Result {
	out := make([]Result, len(calls))
	done := make(chan struct{}, len(calls))
	for i, c := range calls {
		go func() {
			defer func() { done <- struct{}{} }()
			defer func() {
				if p := recover(); p != nil { // a tool's bug is its own failure
					out[i] = Result{Output: fmt.Sprintf("Error: the tool %s failed (%v)", c.Name, p), Failed: true}
				}
			}()
			if c.Err != "" {
				out[i] = Result{Output: "Error: " + c.Err, Failed: true}
				return
			}
			t0 := time.Now()
			text, err := s.tools[c.Name].Run(ctx, c.Args)
			out[i] = Result{Output: text, Seconds: time.Since(t0).Seconds()}
			if err != nil {
				out[i].Failed = true
				out[i].Output = strings.TrimSpace(text + "\nError: " + err.Error())
			}
		}()
	}
	for range calls {
		<-done
	}
	return out
}
