package reward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rewardServer answers each batch with handle(try, batch): try counts the
// server's requests from 1. The default answer scores response == answer.
type rewardServer struct {
	*httptest.Server
	hits   atomic.Int32
	mu     sync.Mutex
	header []http.Header
}

func newRewardServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, try int, reqs []Request) bool) *rewardServer {
	t.Helper()
	s := &rewardServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		try := int(s.hits.Add(1))
		s.mu.Lock()
		s.header = append(s.header, r.Header.Clone())
		s.mu.Unlock()
		var body batchRequest
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusMethodNotAllowed)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if handle != nil && handle(w, r, try, body.Requests) {
			return
		}
		reply := batchReply{Verdicts: make([]wireVerdict, len(body.Requests))}
		for i, q := range body.Requests {
			ok := q.Response == q.Answer
			reward := rewardValue(0)
			if ok {
				reward = 1
			}
			reply.Verdicts[i] = wireVerdict{Reward: &reward, Correct: ok, Reason: "id " + q.ID}
		}
		json.NewEncoder(w).Encode(reply)
	}))
	t.Cleanup(s.Close)
	return s
}

// newHTTPScorer is an HTTP scorer of s with short waits between tries.
func newHTTPScorer(t *testing.T, s *rewardServer, c Config) *HTTP {
	t.Helper()
	c.Kind, c.URL = KindHTTP, s.URL+"/score"
	sc, err := New(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	h := sc.(*HTTP)
	h.backoff = time.Millisecond
	return h
}

func TestHTTPScore(t *testing.T) {
	s := newRewardServer(t, nil)
	h := newHTTPScorer(t, s, Config{BatchSize: 2})
	vs, err := h.Score(context.Background(), requests("4", "5", "4", "4", "x"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Verdict{{1, true, "id p0", "", ""}, {0, false, "id p1", "", ""}, {1, true, "id p2", "", ""}, {1, true, "id p3", "", ""}, {0, false, "id p4", "", ""}}
	if fmt.Sprint(vs) != fmt.Sprint(want) || s.hits.Load() != 3 {
		t.Errorf("got %v in %d requests, want %v in 3", vs, s.hits.Load(), want)
	}
	if auth := s.header[0].Get("Authorization"); auth != "" {
		t.Errorf("Authorization %q without reward.token_env", auth)
	}
}

func TestHTTPBearerToken(t *testing.T) {
	const token = "tok-3f9a8c7e1d"
	t.Setenv("LANPO_TEST_REWARD_TOKEN", token)
	s := newRewardServer(t, nil)
	h := newHTTPScorer(t, s, Config{TokenEnv: "LANPO_TEST_REWARD_TOKEN"})
	if _, err := h.Score(context.Background(), requests("4")); err != nil {
		t.Fatal(err)
	}
	if got := s.header[0].Get("Authorization"); got != "Bearer "+token {
		t.Errorf("Authorization %q, want the bearer token", got)
	}
	t.Setenv("LANPO_TEST_REWARD_TOKEN", "")
	_, err := New(Config{Kind: KindHTTP, URL: s.URL, TokenEnv: "LANPO_TEST_REWARD_TOKEN"}, 0)
	if err == nil || !strings.Contains(err.Error(), "environment variable LANPO_TEST_REWARD_TOKEN is unset or empty") {
		t.Errorf("empty token: got %v", err)
	}
}

func TestHTTPTimeoutRetries(t *testing.T) {
	s := newRewardServer(t, func(w http.ResponseWriter, r *http.Request, _ int, _ []Request) bool {
		select { // until the client gives up
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		return true
	})
	h := newHTTPScorer(t, s, Config{Timeout: "200ms", Retries: 2})
	start := time.Now()
	_, err := h.Score(context.Background(), requests("4"))
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), `rollout 0 (problem "p0"): try 3 of 3: no response within 200ms (reward.timeout)`) {
		t.Fatalf("got %v: want a timeout after 3 tries", err)
	}
	if n := s.hits.Load(); n != 3 {
		t.Errorf("%d tries, want 3 (reward.retries 2)", n)
	}
	if took < 600*time.Millisecond || took > 3*time.Second {
		t.Errorf("took %s: want about 3 × 200ms", took)
	}
}

func TestHTTPRetriesThenSucceeds(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusTooManyRequests} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			s := newRewardServer(t, func(w http.ResponseWriter, _ *http.Request, try int, _ []Request) bool {
				if try <= 2 {
					http.Error(w, "busy", status)
					return true
				}
				return false
			})
			h := newHTTPScorer(t, s, Config{Retries: 2})
			vs, err := h.Score(context.Background(), requests("4"))
			if err != nil || vs[0].Reward != 1 || s.hits.Load() != 3 {
				t.Errorf("got %v, %v after %d tries: want a reward on the third", vs, err, s.hits.Load())
			}
		})
	}
	t.Run("backoff doubles", func(t *testing.T) {
		s := newRewardServer(t, func(w http.ResponseWriter, _ *http.Request, try int, _ []Request) bool {
			http.Error(w, "down", http.StatusBadGateway)
			return true
		})
		h := newHTTPScorer(t, s, Config{Retries: 3})
		h.backoff = 40 * time.Millisecond // waits of 40, 80 and 160 ms
		start := time.Now()
		_, err := h.Score(context.Background(), requests("4"))
		if took := time.Since(start); took < 280*time.Millisecond || took > 3*time.Second {
			t.Errorf("took %s: want the waits 40+80+160 ms", took)
		}
		if err == nil || !strings.Contains(err.Error(), `try 4 of 4: status 502 Bad Gateway: "down"`) {
			t.Errorf("got %v", err)
		}
	})
}

func TestHTTPClientErrorNotRetried(t *testing.T) {
	long := "field response: " + strings.Repeat("x", 400)
	s := newRewardServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ []Request) bool {
		http.Error(w, long, http.StatusUnprocessableEntity)
		return true
	})
	h := newHTTPScorer(t, s, Config{Retries: 3})
	_, err := h.Score(context.Background(), requests("4"))
	if err == nil || !strings.Contains(err.Error(), `status 422 Unprocessable Entity (not retried): "field response: xxx`) {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), long[:301]) {
		t.Errorf("error quotes more than 300 bytes of the body: %v", err)
	}
	if n := s.hits.Load(); n != 1 {
		t.Errorf("%d tries of a 422, want 1", n)
	}
}

func TestHTTPOnErrorZero(t *testing.T) {
	s := newRewardServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, reqs []Request) bool {
		for _, q := range reqs {
			if q.Response == "FAIL" {
				http.Error(w, "cannot", http.StatusInternalServerError)
				return true
			}
		}
		return false
	})
	h := newHTTPScorer(t, s, Config{BatchSize: 2, Retries: 1, OnError: OnErrorZero})
	vs, err := h.Score(context.Background(), requests("4", "4", "FAIL", "4", "4"))
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i, v := range vs {
		if v.Err != "" {
			failed++
			if v.Reward != 0 || v.Correct || !strings.Contains(v.Err, `rollouts 2–3 (first problem "p2"): try 2 of 2: status 500`) {
				t.Errorf("rollout %d: %+v", i, v)
			}
		}
	}
	if fmt.Sprint(rewards(vs)) != "[1 1 0 0 1]" || failed != 2 || s.hits.Load() != 4 {
		t.Errorf("got %v (%d failed) in %d requests: want batch 1's 2 rollouts zero after 2 tries", vs, failed, s.hits.Load())
	}
}

func TestHTTPBadReply(t *testing.T) {
	s := newRewardServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ []Request) bool {
		io.WriteString(w, `{"verdicts": [{"reward": 1}, {"correct": true}]}`)
		return true
	})
	h := newHTTPScorer(t, s, Config{})
	_, err := h.Score(context.Background(), requests("4", "4"))
	if err == nil || !strings.Contains(err.Error(), `rollout 1 (problem "p1"): verdict has no "reward"`) || s.hits.Load() != 1 {
		t.Errorf("got %v after %d tries", err, s.hits.Load())
	}
}

// A server may echo the request's headers into its errors: none of them
// may carry the token into a message.
func TestHTTPTokenNotInErrors(t *testing.T) {
	const token = "tok-5e1b2a9d0c"
	t.Setenv("LANPO_TEST_REWARD_TOKEN", token)
	echo := func(status int) func(http.ResponseWriter, *http.Request, int, []Request) bool {
		return func(w http.ResponseWriter, r *http.Request, _ int, _ []Request) bool {
			w.WriteHeader(status)
			fmt.Fprintf(w, "%s your header was %q", strings.Repeat(".", 290), r.Header.Get("Authorization"))
			return true
		}
	}
	for _, tc := range []struct {
		name   string
		handle func(http.ResponseWriter, *http.Request, int, []Request) bool
	}{
		{"401", echo(http.StatusUnauthorized)},
		{"500", echo(http.StatusInternalServerError)},
		{"bad 200", echo(http.StatusOK)},
		{"error reply", func(w http.ResponseWriter, r *http.Request, _ int, _ []Request) bool {
			json.NewEncoder(w).Encode(map[string]string{"error": "bad token " + r.Header.Get("Authorization")})
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRewardServer(t, tc.handle)
			for _, onError := range []string{OnErrorFail, OnErrorZero} {
				h := newHTTPScorer(t, s, Config{TokenEnv: "LANPO_TEST_REWARD_TOKEN", Retries: 1, OnError: onError})
				vs, err := h.Score(context.Background(), requests("4"))
				msg := fmt.Sprint(err)
				if err == nil {
					msg = vs[0].Err
				}
				if msg == "" || strings.Contains(msg, token) || strings.Contains(msg, token[:8]) {
					t.Errorf("on_error %s: %q", onError, msg)
				}
			}
		})
	}
}

func TestHTTPCancel(t *testing.T) {
	s := newRewardServer(t, func(w http.ResponseWriter, r *http.Request, _ int, _ []Request) bool {
		<-r.Context().Done()
		return true
	})
	h := newHTTPScorer(t, s, Config{Timeout: "10s", OnError: OnErrorZero})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := h.Score(ctx, requests("4"))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Errorf("got %v after %s: want the context's error at once, whatever on_error says", err, time.Since(start))
	}
	if n := s.hits.Load(); n != 1 {
		t.Errorf("%d tries after the context ended, want 1", n)
	}
}

func TestHTTPServerDown(t *testing.T) {
	s := newRewardServer(t, nil)
	h := newHTTPScorer(t, s, Config{Retries: 1})
	s.Close()
	_, err := h.Score(context.Background(), requests("4"))
	if err == nil || !strings.Contains(err.Error(), "try 2 of 2: POST: ") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("got %v", err)
	}
}

// TestHTTPNoRedirect: a redirect is not followed (it would carry the
// token and the gold answers elsewhere): the batch fails naming it.
func TestHTTPNoRedirect(t *testing.T) {
	elsewhere := newRewardServer(t, func(http.ResponseWriter, *http.Request, int, []Request) bool { return false })
	s := newRewardServer(t, func(w http.ResponseWriter, r *http.Request, _ int, _ []Request) bool {
		http.Redirect(w, r, elsewhere.URL, http.StatusTemporaryRedirect)
		return true
	})
	h := newHTTPScorer(t, s, Config{Retries: 0})
	if _, err := h.Score(context.Background(), requests("4")); err == nil || !strings.Contains(err.Error(), "307") {
		t.Fatalf("a redirect: %v, want an error naming its status", err)
	}
	if n := elsewhere.hits.Load(); n != 0 {
		t.Fatalf("the redirect was followed: %d requests reached its target", n)
	}
}
