package reward

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestQuoteNonFinite(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"reward": 1.0}`, `{"reward": 1.0}`},
		{`{"reward": NaN}`, `{"reward": "NaN"}`},
		{`[Infinity,-Infinity]`, `["Infinity","-Infinity"]`},
		{`{"reason": "NaN \"Infinity\" \\", "reward": NaN}`, `{"reason": "NaN \"Infinity\" \\", "reward": "NaN"}`},
	} {
		if got := string(quoteNonFinite([]byte(tc.in))); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestDecodeReply(t *testing.T) {
	reqs := requests("a", "b")
	vs, err := decodeReply([]byte(`{"verdicts": [{"reward": 0.5, "correct": true, "reason": "NaN", "extra": 1, "answer": "42"}, {"reward": -1}]}`), reqs, 10)
	if err != nil || fmt.Sprint(vs) != fmt.Sprint([]Verdict{{Reward: 0.5, Correct: true, Reason: "NaN", Extracted: "42"}, {Reward: -1}}) {
		t.Fatalf("got %v, %v", vs, err)
	}
	for _, tc := range []struct{ reply, want string }{
		{`not json`, "reply does not parse: invalid character"},
		{`{}`, `reply has neither "verdicts" nor "error"`},
		{`{"verdicts": [{"reward": 1}]}`, "1 verdicts for 2 rollouts"},
		{`{"verdicts": [{"reward": 1}, {"correct": true}]}`, `rollout 11 (problem "p1"): verdict has no "reward"`},
		{`{"verdicts": [{"reward": NaN}, {"reward": 1}]}`, `rollout 10 (problem "p0"): reward NaN: want a finite number`},
		{`{"verdicts": [{"reward": 1}, {"reward": -Infinity}]}`, `rollout 11 (problem "p1"): reward -Inf: want a finite number`},
		{`{"verdicts": [{"reward": "1"}, {"reward": 1}]}`, `reward "1": want a number`},
		{`{"verdicts": [{"reward": 1e999}, {"reward": 1}]}`, `reward 1e999: want a number`},
		{`{"error": "no GPU"}`, "it reported an error: no GPU"},
	} {
		_, err := decodeReply([]byte(tc.reply), reqs, 10)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.reply, err, tc.want)
		}
	}
}

func TestScoreBatches(t *testing.T) {
	reqs := requests("0", "1", "2", "3", "4")
	var sizes []int
	score := func(_ context.Context, batch []Request, lo int) ([]Verdict, error) {
		sizes = append(sizes, len(batch))
		if lo == 2 {
			return nil, errors.New("down")
		}
		vs := make([]Verdict, len(batch))
		for i := range vs {
			vs[i].Reward = float64(lo + i)
		}
		return vs, nil
	}
	_, err := scoreBatches(context.Background(), reqs, 2, OnErrorFail, "scorer", score)
	if err == nil || err.Error() != `scorer: rollouts 2–3 (first problem "p2"): down` || fmt.Sprint(sizes) != "[2 2]" {
		t.Errorf("fail: got %v after batches %v", err, sizes)
	}
	sizes = nil
	vs, err := scoreBatches(context.Background(), reqs, 2, OnErrorZero, "scorer", score)
	if err != nil || fmt.Sprint(rewards(vs)) != "[0 1 0 0 4]" || fmt.Sprint(sizes) != "[2 2 1]" || vs[2].Err == "" || vs[4].Err != "" {
		t.Errorf("zero: got %v, %v after batches %v", vs, err, sizes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := scoreBatches(ctx, reqs, 2, OnErrorZero, "scorer", score); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
}

// requests are rollouts p0, p1, … with answer 4 and these responses.
func requests(responses ...string) []Request {
	reqs := make([]Request, len(responses))
	for i, r := range responses {
		reqs[i] = Request{Problem: map[string]any{"question": "2+2?", "n": i}, ID: fmt.Sprintf("p%d", i), Answer: "4", Prompt: "2+2?", Response: r}
	}
	return reqs
}

func rewards(vs []Verdict) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = v.Reward
	}
	return out
}
