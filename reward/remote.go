package reward

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// What the user's rewards (reward.kind: command, http) share: the wire
// format of a batch, the split into batches, the checks on a reply and
// the failure policy (reward.on_error). The protocol is in Command's doc.

// batchRequest is one request: a batch's rollouts in order.
type batchRequest struct {
	Requests []Request `json:"requests"`
}

// batchReply is the answer to one: a verdict per rollout in request
// order, or an error for the whole batch.
type batchReply struct {
	Verdicts []wireVerdict `json:"verdicts"`
	Error    *string       `json:"error"`
}

type wireVerdict struct {
	Reward  *rewardValue `json:"reward"` // a pointer: a missing reward is an error, not a 0
	Correct bool         `json:"correct"`
	Reason  string       `json:"reason"`
	// Answer (optional) is the answer the reward took from the response:
	// eval's majority vote (maj@k) counts it.
	Answer string `json:"answer"`
}

// rewardValue is a reward as a number, or as one of the strings
// quoteNonFinite makes of Python's NaN and Infinity, so that the check of
// finite rewards can name the rollout.
type rewardValue float64

func (r *rewardValue) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"NaN"`:
		*r = rewardValue(math.NaN())
	case `"Infinity"`:
		*r = rewardValue(math.Inf(1))
	case `"-Infinity"`:
		*r = rewardValue(math.Inf(-1))
	default:
		var f float64
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("reward %s: want a number", snippet(b, 40))
		}
		*r = rewardValue(f)
	}
	return nil
}

// quoteNonFinite quotes the bare NaN, Infinity and -Infinity outside
// strings, which are not JSON but what Python's json.dumps writes for
// non-finite floats.
func quoteNonFinite(b []byte) []byte {
	if !bytes.Contains(b, []byte("NaN")) && !bytes.Contains(b, []byte("Infinity")) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			inString = escaped || c != '"'
			escaped = !escaped && c == '\\'
		case c == '"':
			inString = true
		default:
			for _, tok := range []string{"-Infinity", "Infinity", "NaN"} {
				if bytes.HasPrefix(b[i:], []byte(tok)) {
					out = append(out, '"')
					out = append(out, tok...)
					c = '"'
					i += len(tok) - 1
					break
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// remoteError is a batch the program or server declined with
// {"error": "…"}: it answered, so it is not restarted.
type remoteError string

func (e remoteError) Error() string { return fmt.Sprintf("it reported an error: %s", string(e)) }

// maxReply bounds a reply line or body (64 verdicts need a few KB; a
// reason may be long, a runaway program must not exhaust memory).
const maxReply = 64 << 20

// decodeReply reads the reply to reqs, the rollouts lo… of a Score call.
func decodeReply(body []byte, reqs []Request, lo int) ([]Verdict, error) {
	var r batchReply
	if err := json.Unmarshal(quoteNonFinite(body), &r); err != nil {
		return nil, fmt.Errorf("reply does not parse: %v: %q", err, snippet(body, 200))
	}
	if r.Error != nil {
		return nil, remoteError(*r.Error)
	}
	if r.Verdicts == nil {
		return nil, fmt.Errorf(`reply has neither "verdicts" nor "error": %q`, snippet(body, 200))
	}
	if len(r.Verdicts) != len(reqs) {
		return nil, fmt.Errorf("%d verdicts for %d rollouts", len(r.Verdicts), len(reqs))
	}
	out := make([]Verdict, len(reqs))
	for i, w := range r.Verdicts {
		switch {
		case w.Reward == nil:
			return nil, fmt.Errorf(`rollout %d (problem %q): verdict has no "reward"`, lo+i, reqs[i].ID)
		case math.IsNaN(float64(*w.Reward)) || math.IsInf(float64(*w.Reward), 0):
			return nil, fmt.Errorf("rollout %d (problem %q): reward %v: want a finite number", lo+i, reqs[i].ID, float64(*w.Reward))
		}
		out[i] = Verdict{Reward: float64(*w.Reward), Correct: w.Correct, Reason: w.Reason, Extracted: w.Answer}
	}
	return out, nil
}

// batchFunc scores one batch, the rollouts lo… of a Score call.
type batchFunc func(ctx context.Context, reqs []Request, lo int) ([]Verdict, error)

// scoreBatches scores reqs in batches of size, in order, and applies the
// failure policy to a failed batch: its error names the scorer (name), the
// batch's rollouts and its first problem; on_error zero turns it into
// verdicts of 0 with Err set. A cancelled ctx ends the call with its error
// whatever the policy: that is not the reward's failure.
func scoreBatches(ctx context.Context, reqs []Request, size int, onError, name string, score batchFunc) ([]Verdict, error) {
	out := make([]Verdict, 0, len(reqs))
	for lo := 0; lo < len(reqs); lo += size {
		hi := min(lo+size, len(reqs))
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		vs, err := score(ctx, reqs[lo:hi], lo)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", name, ctx.Err())
		}
		if err != nil {
			which := fmt.Sprintf("rollouts %d–%d (first problem %q)", lo, hi-1, reqs[lo].ID)
			if hi-lo == 1 {
				which = fmt.Sprintf("rollout %d (problem %q)", lo, reqs[lo].ID)
			}
			err = fmt.Errorf("%s: %s: %w", name, which, err)
			if onError != OnErrorZero {
				return nil, err
			}
			vs = make([]Verdict, hi-lo)
			for i := range vs {
				vs[i].Err = err.Error()
			}
		}
		out = append(out, vs...)
	}
	return out, nil
}

// snippet is the first n bytes of b as valid UTF-8, marked when cut.
func snippet(b []byte, n int) string {
	s := string(b)
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.ToValidUTF8(strings.TrimSpace(s), "�")
}
