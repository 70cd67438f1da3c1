package reward

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Code is the code kind: each response's program is run against its
// problem's tests in a Sandbox; reward 1 when every check returned, else
// 0. A problem's fields (the data record as it is):
//
//	test         HumanEval's: Python that defines check(candidate); with
//	entry_point  the function's name, check(<entry_point>) is called
//	tests        the plain form: Python asserts (a string, or a list of
//	             strings), run in the program's names; entry_point optional
//	prompt       HumanEval's imports, helpers, signature and docstring:
//	             prepended to the program when entry_point is set (a
//	             program that defines the function again replaces the
//	             stub; one that does not completes its body)
type Code struct {
	sb *Sandbox
	// onError zero: a sandbox that fails to run a candidate scores it 0
	// with Verdict.Err (a candidate's own failure is always just a 0).
	onError string
}

// NewCode is a code scorer over sb.
func NewCode(sb *Sandbox, onError string) *Code { return &Code{sb: sb, onError: onError} }

// Score runs every response, Concurrency at a time.
func (c *Code) Score(ctx context.Context, reqs []Request) ([]Verdict, error) {
	tasks := make([]CodeRequest, len(reqs))
	for i, r := range reqs {
		t, err := CodeTask(r.Problem, r.Response)
		if err != nil {
			return nil, fmt.Errorf("problem %s: %w", r.ID, err)
		}
		tasks[i] = t
	}
	out := make([]Verdict, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o, err := c.sb.Run(ctx, tasks[i])
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = Verdict{Correct: o.Passed, Reason: o.Reason}
			if o.Passed {
				out[i].Reward = 1
			}
		}(i)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		if c.onError != OnErrorZero {
			return nil, fmt.Errorf("reward code: problem %s: %w", reqs[i].ID, err)
		}
		out[i] = Verdict{Reason: "not scored: " + err.Error(), Err: err.Error()}
	}
	return out, nil
}

// Close does nothing: every candidate's sandbox ends with its run.
func (c *Code) Close() error { return nil }

var (
	fenceRe      = regexp.MustCompile("(?m)^[ \t]*```[^\n]*\n")
	fenceEndRe   = regexp.MustCompile("(?m)^[ \t]*```[ \t]*$")
	langLineRe   = regexp.MustCompile(`^[ \t]*(python3?|py|Python)[ \t]*\n`)
	pythonNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ExtractCode is the program in a response: the last fenced block (``` or
// ```python; an unclosed last fence runs to the end, as a cut-off response
// leaves it; a first line that is only "python" is the language, dropped),
// or the whole response when it has no fence.
func ExtractCode(response string) string { return extractCode(response, nil) }

// extractCode is ExtractCode preferring the last block that defines
// (defines non-nil): a solution followed by a usage example is the
// solution.
func extractCode(response string, defines *regexp.Regexp) string {
	var blocks []string
	rest := response
	for {
		loc := fenceRe.FindStringIndex(rest)
		if loc == nil {
			break
		}
		body := rest[loc[1]:]
		end := fenceEndRe.FindStringIndex(body)
		if end == nil {
			blocks = append(blocks, body)
			break
		}
		blocks = append(blocks, body[:end[0]])
		rest = body[end[1]:]
	}
	if len(blocks) == 0 {
		return response
	}
	for i, b := range blocks {
		// "```\npython\n…": the language on a line of its own inside the
		// fence (models write it): not the program's first statement.
		if m := langLineRe.FindStringIndex(b); m != nil {
			blocks[i] = b[m[1]:]
		}
	}
	if defines != nil {
		for i := len(blocks) - 1; i >= 0; i-- {
			if defines.MatchString(blocks[i]) {
				return blocks[i]
			}
		}
	}
	return blocks[len(blocks)-1]
}

// CodeTask is the program and checks of one response to problem (its
// record): the fields are in Code's doc.
func CodeTask(problem map[string]any, response string) (CodeRequest, error) {
	if problem == nil {
		return CodeRequest{}, fmt.Errorf("no problem record (reward.kind: code reads its tests from it)")
	}
	str := func(key string) (string, error) {
		v, ok := problem[key]
		if !ok || v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("field %q: want a string, got %T", key, v)
		}
		return s, nil
	}
	entry, err := str("entry_point")
	if err != nil {
		return CodeRequest{}, err
	}
	if entry != "" && !pythonNameRe.MatchString(entry) {
		return CodeRequest{}, fmt.Errorf("field \"entry_point\": %q is not a Python name", entry)
	}
	test, err := str("test")
	if err != nil {
		return CodeRequest{}, err
	}
	var tests string
	switch v := problem["tests"].(type) {
	case nil:
	case string:
		tests = v
	case []any:
		lines := make([]string, len(v))
		for i, t := range v {
			s, ok := t.(string)
			if !ok {
				return CodeRequest{}, fmt.Errorf("field \"tests\"[%d]: want a string, got %T", i, t)
			}
			lines[i] = s
		}
		tests = strings.Join(lines, "\n")
	default:
		return CodeRequest{}, fmt.Errorf("field \"tests\": want a string or a list of strings, got %T", v)
	}
	switch {
	case test != "" && tests != "":
		return CodeRequest{}, fmt.Errorf("both \"test\" and \"tests\": want one")
	case test != "" && entry == "":
		return CodeRequest{}, fmt.Errorf("field \"test\" (HumanEval's check(candidate)) needs \"entry_point\", the function to check")
	case test == "" && strings.TrimSpace(tests) == "":
		return CodeRequest{}, fmt.Errorf("no tests: want \"test\" with \"entry_point\" (HumanEval's form) or \"tests\" (Python asserts)")
	}
	prefix, err := str("prompt")
	if err != nil {
		return CodeRequest{}, err
	}
	var def *regexp.Regexp
	if entry != "" {
		def = regexp.MustCompile(`(?m)^[ \t]*(async[ \t]+)?def[ \t]+` + entry + `[ \t]*\(`)
	}
	program := extractCode(response, def)
	if entry != "" && prefix != "" {
		if !def.MatchString(program) {
			program = prefix + program // a completion of the body
		} else {
			// A whole function: the prompt's imports and helpers stay,
			// its stub is redefined.
			program = prefix + "\n" + program
		}
	}
	r := CodeRequest{Program: program, Tests: tests, EntryPoint: ""}
	if test != "" {
		r.Tests, r.EntryPoint = test, entry
	}
	return r, nil
}
