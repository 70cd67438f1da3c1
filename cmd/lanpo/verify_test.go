package main

import (
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

func TestBenchVerifyWithoutBaseline(t *testing.T) {
	out, err := runWithStdin(t, "", "--log-level", "error", "bench", "verify", "--data", "../../reward/testdata/verify_corpus.jsonl", "--hf-python", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "verifications/s single-threaded") || !strings.Contains(out, "baseline: unavailable") {
		t.Fatalf("output:\n%s", out)
	}
}
