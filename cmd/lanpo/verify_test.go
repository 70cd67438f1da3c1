package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerifyCLI(t *testing.T) {
	in := `{"pred": "so the answer is $\\boxed{\\frac{1}{2}}$", "gold": "0.5"}
{"pred": "The final answer is $3$.", "gold": "4"}
{"pred": "no answer", "gold": "1"}
`
	out, err := runWithStdin(t, in, "--log-level", "error", "verify", "--workers", "2")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"correct":true,"extracted":"\\frac{1}{2}"}
{"correct":false,"extracted":"3"}
{"correct":false,"extracted":""}
`
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	for _, c := range []struct{ in, want string }{
		{"{\"pred\": \"1\", \"gold\": \"1\"}\n{\"pred\": \"1\"}\n", "stdin line 2: want {\"pred\": string, \"gold\": string}"},
		{"not json\n", "stdin line 1: invalid character"},
	} {
		if _, err := runWithStdin(t, c.in, "verify"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.in, err, c.want)
		}
	}
}

// A response cut off by the token limit is correct only with an explicit
// answer; the input says so by finish_reason "length" or truncated true.
func TestVerifyCLITruncated(t *testing.T) {
	cut := `We list the cases: 1, 2, 3, 4, 5, 6`
	in := fmt.Sprintf(`{"pred": %[1]q, "gold": "6"}
{"pred": %[1]q, "gold": "6", "finish_reason": "length"}
{"pred": %[1]q, "gold": "6", "finish_reason": "stop"}
{"pred": %[1]q, "gold": "6", "truncated": true}
{"pred": %[1]q, "gold": "6", "truncated": false}
{"pred": "so \\boxed{6}, and to check: 1, 2", "gold": "6", "finish_reason": "length"}
`, cut)
	out, err := runWithStdin(t, in, "--log-level", "error", "verify")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"correct":true,"extracted":"6"}
{"correct":false,"extracted":""}
{"correct":true,"extracted":"6"}
{"correct":false,"extracted":""}
{"correct":true,"extracted":"6"}
{"correct":true,"extracted":"6"}
`
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if _, err := runWithStdin(t, `{"pred": "1", "gold": "1", "truncated": "yes"}`+"\n", "verify"); err == nil || !strings.Contains(err.Error(), "stdin line 1") {
		t.Errorf("truncated as a string: err = %v", err)
	}
	help, err := runWithStdin(t, "", "verify", "--help")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(help, `"finish_reason": "length"`) || !strings.Contains(help, `"truncated": true`) {
		t.Errorf("--help does not describe the truncation fields:\n%s", help)
	}
}

func TestBenchVerifyWithoutBaseline(t *testing.T) {
	out, err := runWithStdin(t, "", "--log-level", "error", "bench", "verify", "--data", "../../reward/testdata/verify_corpus.jsonl", "--hf-python", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "verifications/s single-threaded") || !strings.Contains(out, "baseline: unavailable") {
		t.Fatalf("output:\n%s", out)
	}
}

// TestVerifyWithConfig: lanpo verify --config scores rollouts as training
// does, by the config's reward kind — the math verifier, or the user's
// program — with the record mapped by the config's data keys.
func TestVerifyWithConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(cfg, []byte("model: builtin:tiny\ndata:\n  answer_key: solution.final\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := `{"problem": {"id": "a", "problem": "1+1?", "solution": {"final": "2"}}, "response": "so \\boxed{2}"}
{"problem": {"id": "b", "problem": "2+2?", "solution": {"final": "4"}}, "response": "5", "finish_reason": "length"}
`
	out, err := runWithStdin(t, in, "--log-level", "error", "verify", "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"reward":1,"correct":true,"reason":"verified: 2","extracted":"2"}
{"reward":0,"correct":false,"reason":"no final answer"}
`
	if out != want {
		t.Fatalf("math: got\n%s\nwant\n%s", out, want)
	}
	script, err := filepath.Abs("../../reward/testdata/remote/exact_match.py")
	if err != nil {
		t.Fatal(err)
	}
	out, err = runWithStdin(t, in, "--log-level", "error", "verify", "--config", cfg, "--set", "reward.kind=command", "--set", "reward.command=[python3, "+script+"]")
	if err != nil {
		t.Fatal(err)
	}
	want = `{"reward":1,"correct":true,"reason":"matched 2"}
{"reward":0,"correct":false,"reason":"truncated"}
`
	if out != want {
		t.Fatalf("command: got\n%s\nwant\n%s", out, want)
	}
	for _, c := range []struct{ in, want string }{
		{`{"problem": {"id": "a", "problem": "1+1?"}, "response": "2"}` + "\n", `stdin line 1: "problem": `},
		{`{"response": "2"}` + "\n", `stdin line 1: want {"problem"`},
	} {
		if _, err := runWithStdin(t, c.in, "verify", "--config", cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.in, err, c.want)
		}
	}
}

// TestVerifyCode scores programs by hand as training's code reward does:
// a HumanEval record as it is, the plain form, a fenced answer, and a
// problem without tests (an error naming it).
func TestVerifyCode(t *testing.T) {
	in := `{"problem": {"tests": "assert f(1) == 2"}, "response": "def f(x):\n    return x + 1"}
{"problem": {"tests": ["assert f(1) == 2", "assert f(2) == 3"]}, "response": "Here:\n` + "```python" + `\ndef f(x):\n    return x\n` + "```" + `"}
{"problem": {"task_id": "HumanEval/0", "prompt": "def f(x):\n    \"\"\"add one\"\"\"\n", "test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "f"}, "response": "    return x + 1\n"}
{"problem": {"tests": "assert f(1) == 2"}, "response": "import os\nos._exit(0)"}
`
	out, err := runWithStdin(t, in, "--log-level", "error", "verify", "--code")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"reward":1,"correct":true,"reason":"passed"}
{"reward":0,"correct":false,"reason":"assertion failed"}
{"reward":1,"correct":true,"reason":"passed"}
{"reward":0,"correct":false,"reason":"exited with status 0 before the checks returned"}
`
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	_, err = runWithStdin(t, `{"problem": {"task_id": "T/1", "prompt": "x"}, "response": "y"}`+"\n", "verify", "--code")
	if err == nil || !strings.Contains(err.Error(), "problem T/1: no tests") {
		t.Fatalf("err = %v, want one naming the problem and its missing tests", err)
	}
}
