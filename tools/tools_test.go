package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/reward"
)

func specs(t *testing.T, src string) []Spec {
	t.Helper()
	var out struct {
		Tools []Spec `yaml:"tools"`
	}
	if err := yaml.Unmarshal([]byte(src), &out); err != nil {
		t.Fatal(err)
	}
	return out.Tools
}

func sandbox(t *testing.T) *reward.Sandbox {
	t.Helper()
	sb, err := reward.NewSandbox(reward.SandboxNamespaces, reward.DefaultCodeConfig())
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// script writes an executable shell script (the tools' test programs).
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tool.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

const lookupYAML = `
tools:
  - name: python
  - name: lookup
    description: Look a word up.
    parameters:
      type: object
      properties:
        word: {type: string, description: the word}
        limit: {type: integer}
        mode: {type: string, enum: [short, long]}
      required: [word]
      additionalProperties: false
    command: [%s]
    timeout_seconds: 2
`

func newLookupSet(t *testing.T, prog string) *Set {
	t.Helper()
	s, err := NewSet(specs(t, strings.Replace(lookupYAML, "%s", prog, 1)), sandbox(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Declarations: the schema in the order the user wrote it, python's fixed
// one; config errors name the key.
func TestDeclarationsAndConfig(t *testing.T) {
	s := newLookupSet(t, "cat")
	d := s.Declarations()
	if len(d) != 2 || !strings.Contains(string(d[0]), `"name": "python"`) {
		t.Fatalf("declarations %s", d)
	}
	want := `{"type": "function", "function": {"name": "lookup", "description": "Look a word up.", "parameters": {"type": "object", "properties": {"word": {"type": "string", "description": "the word"}, "limit": {"type": "integer"}, "mode": {"type": "string", "enum": ["short", "long"]}}, "required": ["word"], "additionalProperties": false}}}`
	if string(d[1]) != want {
		t.Errorf("declaration\n got  %s\n want %s", d[1], want)
	}
	var v any
	if err := json.Unmarshal(d[1], &v); err != nil {
		t.Errorf("not JSON: %v", err)
	}
	for src, msg := range map[string]string{
		"tools:\n  - name: x\n    parameters: {type: object}\n":                                "tools[0].command",
		"tools:\n  - name: 9x\n    command: [a]\n":                                             "tools[0].name",
		"tools:\n  - name: x\n    command: [a]\n":                                              "tools[0].parameters",
		"tools:\n  - name: x\n    command: [a]\n    parameters: {type: string}\n":              "tools[0].parameters: type \"string\"",
		"tools:\n  - name: x\n    command: [a]\n    parameters: {type: object}\n  - name: x\n": "tools[1].name: \"x\" is declared twice",
	} {
		if _, err := NewSet(specs(t, src), nil); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want %q", src, err, msg)
		}
	}
}

// Calls in the Qwen format: several in a turn, in order; bad JSON, no
// name, an unknown tool, and arguments that break the schema each answer
// an error; arguments as a JSON string are accepted; an unclosed block is
// not a call.
func TestParseCalls(t *testing.T) {
	s := newLookupSet(t, "cat")
	text := "Let me see.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"word\": \"cat\", \"limit\": 2}}\n</tool_call>\n" +
		"<tool_call>\n{\"name\": \"python\", \"arguments\": \"{\\\"code\\\": \\\"print(1)\\\"}\"}\n</tool_call>\n" +
		"<tool_call>{\"name\": \"lookup\", \"arguments\": {\"word\": 3}}</tool_call>" +
		"<tool_call>{\"name\": \"lookup\", \"arguments\": {\"word\": \"a\", \"colour\": 1}}</tool_call>" +
		"<tool_call>{\"name\": \"lookup\", \"arguments\": {\"word\": \"a\", \"mode\": \"medium\"}}</tool_call>" +
		"<tool_call>{\"name\": \"lookup\", \"arguments\": {}}</tool_call>" +
		"<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>" +
		"<tool_call>{\"arguments\": {}}</tool_call>" +
		"<tool_call>{\"name\": \"lookup\", \"arguments\": {\"word\": \"x\"}} trailing</tool_call>" +
		"<tool_call>{\"name\": \"lookup\", \"arguments\": {\"word\": \"x\"}}}}</tool_call>" +
		"<tool_call>{\"name\": \"lookup\", \"arguments\": {\"word\": \"x\", \"mode\": \"<nil>\"}}</tool_call>" +
		"<tool_call>{\"name\": \"lookup\"" // cut off
	calls := s.ParseCalls(text)
	want := []string{"", "", `"word" is integer, want string`, `unknown argument "colour"`, `"mode" is not one of its allowed values`,
		`missing required "word"`, `there is no tool "search" (tools: python, lookup)`, `no "name"`, "not one JSON object",
		"not one JSON object", `"mode" is not one of its allowed values`}
	if len(calls) != len(want) {
		t.Fatalf("%d calls: %+v", len(calls), calls)
	}
	for i, c := range calls {
		if (want[i] == "") != (c.Err == "") || !strings.Contains(c.Err, want[i]) {
			t.Errorf("call %d: error %q, want %q", i, c.Err, want[i])
		}
	}
	if string(calls[1].Args) != `{"code": "print(1)"}` {
		t.Errorf("string arguments: %s", calls[1].Args)
	}
}

// Running: the Python tool prints, fails with the exception's line; a
// command tool gets the arguments on stdin; a failing, a hanging and a
// flooding tool each end as their own result, the turn's calls run at
// once (the hanging one does not hold the others), and nothing is left
// running.
func TestRunAndFailures(t *testing.T) {
	echo := script(t, `cat; echo`)
	s := newLookupSet(t, echo)
	fail := script(t, `echo partial; echo "no such word" >&2; exit 3`)
	background := script(t, `sleep 30 & echo hi`)
	hang := script(t, `sleep 60 & sleep 60; echo never`)
	flood := script(t, `yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 200000000`)
	more, err := NewSet(specs(t, `
tools:
  - {name: fail, command: [`+fail+`], parameters: {type: object}}
  - {name: hang, command: [`+hang+`], parameters: {type: object}, timeout_seconds: 1}
  - {name: flood, command: [`+flood+`], parameters: {type: object}, max_output_bytes: 1000, timeout_seconds: 20}
  - {name: background, command: [`+background+`], parameters: {type: object}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := s.Run(context.Background(), s.ParseCalls(
		`<tool_call>{"name": "python", "arguments": {"code": "print(6*7)"}}</tool_call>`+
			`<tool_call>{"name": "python", "arguments": {"code": "x = 1/0"}}</tool_call>`+
			`<tool_call>{"name": "lookup", "arguments": {"word": "cat"}}</tool_call>`+
			`<tool_call>{"name": "search", "arguments": {}}</tool_call>`+
			`<tool_call>{"name": "python", "arguments": {"code": "import ctypes\nprint(ctypes.sizeof(ctypes.c_int32))"}}</tool_call>`))
	if res[0].Output != "42" || res[0].Failed {
		t.Errorf("python: %+v", res[0])
	}
	if !res[1].Failed || !strings.Contains(res[1].Output, "ZeroDivisionError: division by zero") {
		t.Errorf("python error: %+v", res[1])
	}
	if strings.TrimSpace(res[2].Output) != `{"word": "cat"}` || res[2].Failed {
		t.Errorf("command: %+v", res[2])
	}
	if !res[3].Failed || !strings.HasPrefix(res[3].Output, "Error: there is no tool") {
		t.Errorf("unknown tool: %+v", res[3])
	}
	if res[4].Output != "4" || res[4].Failed { // a tool's code may use ctypes (sympy, numpy): only a reward's run refuses it
		t.Errorf("python with ctypes: %+v", res[4])
	}
	t0 := time.Now()
	res = more.Run(context.Background(), more.ParseCalls(
		`<tool_call>{"name": "hang", "arguments": {}}</tool_call><tool_call>{"name": "fail", "arguments": {}}</tool_call><tool_call>{"name": "flood", "arguments": {}}</tool_call>`))
	wall := time.Since(t0)
	if !res[0].Failed || !strings.Contains(res[0].Output, "timed out after 1s") || strings.Contains(res[0].Output, "never") {
		t.Errorf("hanging tool: %+v", res[0])
	}
	if !res[1].Failed || !strings.Contains(res[1].Output, "partial") || !strings.Contains(res[1].Output, "exit status 3: no such word") {
		t.Errorf("failing tool: %+v", res[1])
	}
	if res[2].Failed || len(res[2].Output) > 1100 || !strings.Contains(res[2].Output, "output cut at 1000 bytes") {
		t.Errorf("flooding tool: failed %v, %d bytes: %q…", res[2].Failed, len(res[2].Output), clip(res[2].Output, 80))
	}
	if wall > 15*time.Second {
		t.Errorf("the turn took %s: calls did not run at once", wall)
	}
	// A program that leaves a child holding its output ends when it exits.
	t0 = time.Now()
	res = more.Run(context.Background(), more.ParseCalls(`<tool_call>{"name": "background", "arguments": {}}</tool_call>`))
	if res[0].Failed || strings.TrimSpace(res[0].Output) != "hi" || time.Since(t0) > 900*time.Millisecond {
		t.Errorf("a program with a background child: %+v after %s", res[0], time.Since(t0))
	}
	time.Sleep(200 * time.Millisecond)
	if out, _ := os.ReadFile("/proc/self/status"); len(out) > 0 {
		if n := childCount(t); n > 0 {
			t.Errorf("%d processes left running after the calls", n)
		}
	}
}

// childCount is how many processes run a test script (sleep, yes, head).
func childCount(t *testing.T) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := string(b)
		if strings.HasPrefix(cmd, "sleep\x0060") || strings.HasPrefix(cmd, "yes\x00aaaa") {
			n++
		}
	}
	return n
}

// encoder encodes text with tk (special tokens as written), for the loop's
// ids.
func encoder(t *testing.T, tk *tokenizer.Tokenizer) func(string) []int64 {
	return func(text string) []int64 {
		ids, err := tk.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		return tokenizer.Int64s(ids)
	}
}

func qwenTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	root := os.Getenv("LANPO_TOKENIZERS")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".cache", "lanpo", "tokenizers")
	}
	tk, err := tokenizer.Load(filepath.Join(root, "qwen2_5"))
	if err != nil {
		t.Fatalf("%v (run make fixtures)", err)
	}
	return tk
}

// The loop as the engine drives it: a turn without a call does not park;
// one with calls parks at its end-of-turn token, and its resume appends
// the template's tool responses (both calls' outputs, in order) up to the
// next assistant header; the next turn's calls are looked for after the
// appended ids; past max_turns the turn ends the trajectory; outputs are
// cut to the token cap.
func TestLoopParksRunsAndResumes(t *testing.T) {
	tk := qwenTokenizer(t)
	s := newLookupSet(t, script(t, `cat`))
	eot, _ := tk.TokenID("<|im_end|>")
	l := &Loop{Set: s, Tok: tk, EndOfTurn: []int64{int64(eot)}, MaxTurns: 2, MaxOutputTokens: 8}
	turns, err := l.Start(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	enc := encoder(t, tk)
	if turns.ParkIf(0, 0, enc("The answer is 4.<|im_end|>")) {
		t.Error("a turn without a call parked")
	}
	if turns.ParkIf(0, 1, enc("I will not call </tool_call> anything.<|im_end|>")) {
		t.Error("a bare </tool_call> parked")
	}
	ids := enc("Compute.\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(6*7)\"}}\n</tool_call>\n" +
		"<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"word\": \"one two three four five six seven eight nine ten\"}}\n</tool_call><|im_end|>")
	for k := 1; k < len(ids); k++ {
		if turns.ParkIf(1, 0, ids[:k]) {
			t.Fatalf("parked at token %d of %d, before the turn's end", k, len(ids))
		}
	}
	if !turns.ParkIf(1, 0, ids) {
		t.Fatal("a turn with calls did not park at its end")
	}
	turns.Parked(model.Sample{Prompt: 1, Index: 0, IDs: ids})
	rs := <-turns.Resumes
	got := tk.Decode(tokenizer.Ints(rs.Append), false)
	want := "\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n{\"word\": \"one two three four\n…[output cut at 8 tokens]\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if rs.Prompt != 1 || got != want {
		t.Errorf("appended %q\n want    %q", got, want)
	}
	tr := l.Trajectory(1, 0)
	if tr.Turns != 1 || tr.Calls != 2 || tr.Errors != 0 || tr.ToolSeconds <= 0 {
		t.Errorf("trajectory %+v", tr)
	}
	// The next turn: its own call, after the appended ids; the third tool
	// turn is past max_turns 2.
	all := append(append(ids, rs.Append...), enc("<tool_call>\n{\"name\": \"nope\"}\n</tool_call><|im_end|>")...)
	if !turns.ParkIf(1, 0, all) {
		t.Fatal("the second tool turn did not park")
	}
	turns.Parked(model.Sample{Prompt: 1, Index: 0, IDs: all})
	rs = <-turns.Resumes
	if got := tk.Decode(tokenizer.Ints(rs.Append), false); !strings.Contains(got, "<tool_response>\nError: there is no tool") {
		t.Errorf("second turn appended %q", got)
	}
	all = append(append(all, rs.Append...), enc("<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}\n</tool_call><|im_end|>")...)
	if turns.ParkIf(1, 0, all) {
		t.Error("a third tool turn parked past max_turns 2")
	}
	if tr := l.Trajectory(1, 0); tr.Turns != 2 || tr.Calls != 2+1 || tr.Errors != 1 || tr.EndReason != "max_turns" {
		t.Errorf("trajectory %+v", tr)
	}
}

// The fenced format (tool-integrated reasoning): a ```python block runs
// when its fence closes, mid-turn, and its output follows as an ```output
// block; other fences do not run; the next block after an output runs
// too; only the python tool may be used so.
func TestLoopFenced(t *testing.T) {
	tk := qwenTokenizer(t)
	s, err := NewSet(specs(t, "tools:\n  - name: python\n"), sandbox(t))
	if err != nil {
		t.Fatal(err)
	}
	eot, _ := tk.TokenID("<|im_end|>")
	l := &Loop{Set: s, Tok: tk, EndOfTurn: []int64{int64(eot)}, MaxTurns: 3, MaxOutputTokens: 64, Format: FormatFenced}
	turns, err := l.Start(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	enc := encoder(t, tk)
	parksAt := func(ids []int64) int {
		for k := 1; k <= len(ids); k++ {
			if turns.ParkIf(0, 0, ids[:k]) {
				return k
			}
		}
		return -1
	}
	if k := parksAt(enc("Data:\n```json\n{\"a\": 1}\n```\nNo code here.")); k != -1 {
		t.Fatalf("a json fence parked at token %d", k)
	}
	ids := enc("Let me compute.\n```python\nx = 6\nprint(x * 7)\n```\nSo")
	k := parksAt(ids)
	if k < 0 || !strings.HasSuffix(strings.TrimRight(tk.Decode(tokenizer.Ints(ids[:k]), false), "\n"), "```") {
		t.Fatalf("parked at %d: %q", k, tk.Decode(tokenizer.Ints(ids[:max(k, 0)]), false))
	}
	turns.Parked(model.Sample{IDs: ids[:k]})
	rs := <-turns.Resumes
	got := tk.Decode(tokenizer.Ints(rs.Append), false)
	if !strings.HasSuffix(got, "```output\n42\n```\n") {
		t.Errorf("appended %q", got)
	}
	all := append(append(append([]int64(nil), ids[:k]...), rs.Append...), enc("Check:\n```python\nprint(1/0)\n```")...)
	if !turns.ParkIf(0, 0, all) {
		t.Fatal("the second block did not park")
	}
	turns.Parked(model.Sample{IDs: all})
	rs = <-turns.Resumes
	if got := tk.Decode(tokenizer.Ints(rs.Append), false); !strings.Contains(got, "ZeroDivisionError") || !strings.HasPrefix(got, "\n```output\n") {
		t.Errorf("second output %q", got)
	}
	if tr := l.Trajectory(0, 0); tr.Turns != 2 || tr.Calls != 2 || tr.Errors != 1 {
		t.Errorf("trajectory %+v", tr)
	}
	two, err := NewSet(specs(t, "tools:\n  - name: python\n  - {name: x, command: [cat], parameters: {type: object}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&Loop{Set: two, Tok: tk, EndOfTurn: []int64{1}, Format: FormatFenced}).Start(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "python tool alone") {
		t.Errorf("fenced with two tools: %v", err)
	}
}

// TestCommandConcurrency: max_concurrency caps how many of a command
// tool's calls run at once (a program that fails when another copy runs
// beside it succeeds every time), and a call waiting for its turn is not
// timed out for it (three 0.4 s calls in a row, each with a 1 s timeout).
func TestCommandConcurrency(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "lock")
	alone := script(t, `mkdir `+lock+` 2>/dev/null || { echo "another copy runs" >&2; exit 3; }; sleep 0.4; rmdir `+lock+`; echo done`)
	s, err := NewSet(specs(t, `
tools:
  - {name: alone, command: [`+alone+`], parameters: {type: object}, max_concurrency: 1, timeout_seconds: 1}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	call := `<tool_call>{"name": "alone", "arguments": {}}</tool_call>`
	t0 := time.Now()
	res := s.Run(context.Background(), s.ParseCalls(call+call+call))
	for i, r := range res {
		if r.Failed || strings.TrimSpace(r.Output) != "done" {
			t.Errorf("call %d: %+v", i, r)
		}
	}
	if wall := time.Since(t0); wall < 1200*time.Millisecond {
		t.Errorf("three calls of 0.4 s one at a time took %s", wall)
	}
	for _, src := range []string{`{name: python, max_concurrency: 4}`, `{name: alone, command: [cat], parameters: {type: object}, max_concurrency: -1}`} {
		if _, err := NewSet(specs(t, "tools:\n  - "+src+"\n"), nil); err == nil || !strings.Contains(err.Error(), "tools[0].max_concurrency") {
			t.Errorf("%s: %v, want an error naming the key", src, err)
		}
	}
}
