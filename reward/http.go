package reward

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HTTP is a reward server (reward.kind: http). Each batch is one POST to
// reward.url with Content-Type application/json, the body Command's
// request line ({"requests": […]}), and "Authorization: Bearer <token>"
// when reward.token_env names the variable holding the token. A 200
// response's body is the reply: {"verdicts": […]} or {"error": "…"},
// checked as Command's are.
//
// reward.timeout bounds each try. A try that fails on the network, runs
// out of time or gets a 5xx or 429 is retried up to reward.retries times,
// after 0.5 s, 1 s, 2 s, … (at most 10 s; longer when a Retry-After header
// says so, up to 10 s). Another status, or a 200 whose body is not a good
// reply, fails the batch at once. A failed batch goes by reward.on_error
// as Command's do. No message ever holds the token.
type HTTP struct {
	url       string
	name      string // for messages: the URL without what may be secret
	token     string
	client    *http.Client
	timeout   time.Duration
	retries   int
	batchSize int
	onError   string
	// backoff is the wait before the first retry, doubling after each
	// (tests shrink it); maxBackoff caps it.
	backoff, maxBackoff time.Duration
}

func newHTTP(c Config, token string) *HTTP {
	return &HTTP{url: c.URL, name: "reward server " + redactURL(c.URL), token: token,
		// Close drops only its own connections. No redirect is followed: it
		// would carry the token and the gold answers elsewhere.
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		timeout: c.TimeoutDuration(), retries: c.Retries, batchSize: c.BatchSize, onError: c.OnError,
		backoff: 500 * time.Millisecond, maxBackoff: 10 * time.Second}
}

// Score POSTs reqs to the server in batches.
func (h *HTTP) Score(ctx context.Context, reqs []Request) ([]Verdict, error) {
	return scoreBatches(ctx, reqs, h.batchSize, h.onError, h.name, h.batch)
}

// Close drops idle connections.
func (h *HTTP) Close() error {
	h.client.CloseIdleConnections()
	return nil
}

// batch is one batch's tries.
func (h *HTTP) batch(ctx context.Context, reqs []Request, lo int) ([]Verdict, error) {
	body, err := json.Marshal(batchRequest{Requests: reqs})
	if err != nil {
		return nil, fmt.Errorf("encode the batch: %w", err)
	}
	for try := 0; ; try++ {
		vs, retry, err := h.post(ctx, body, reqs, lo)
		switch {
		case err == nil:
			return vs, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !retry.ok || try == h.retries:
			if try > 0 {
				err = fmt.Errorf("try %d of %d: %w", try+1, h.retries+1, err)
			}
			return nil, errors.New(h.scrub(err.Error()))
		}
		wait := min(h.backoff<<try, h.maxBackoff)
		if retry.after > wait {
			wait = min(retry.after, h.maxBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// retryable says whether a try may be repeated, and how long the server
// asked to wait first (Retry-After; 0 when it did not).
type retryable struct {
	ok    bool
	after time.Duration
}

// post is one try.
func (h *HTTP) post(ctx context.Context, body []byte, reqs []Request, lo int) ([]Verdict, retryable, error) {
	tctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(tctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, retryable{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	// A network error or a timeout, whether before the response or while
	// reading its body: worth another try.
	transient := func(err error) error {
		if tctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("no response within %s (reward.timeout)", h.timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, which may hold secrets
		}
		return fmt.Errorf("POST: %w", err)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, retryable{ok: true}, transient(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
	if err != nil {
		return nil, retryable{ok: true}, transient(err)
	}
	if len(data) > maxReply {
		return nil, retryable{}, fmt.Errorf("status %s: the body is longer than %d MiB", resp.Status, maxReply>>20)
	}
	// A body may echo the request's headers: the token goes before any of
	// it is quoted or cut (half a token is still a secret).
	data = []byte(h.scrub(string(data)))
	shown := snippet(data, 300)
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		vs, err := decodeReply(data, reqs, lo)
		return vs, retryable{}, err
	case code >= 500 || code == http.StatusTooManyRequests:
		return nil, retryable{ok: true, after: retryAfter(resp.Header)}, fmt.Errorf("status %s: %q", resp.Status, shown)
	default:
		return nil, retryable{}, fmt.Errorf("status %s (not retried): %q", resp.Status, shown)
	}
}

// retryAfter is a Retry-After header in seconds (its date form is not
// read: 0).
func retryAfter(h http.Header) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// scrub takes the token out of a message: a server may echo the request's
// headers in its error body.
func (h *HTTP) scrub(msg string) string {
	if h.token == "" {
		return msg
	}
	return strings.ReplaceAll(msg, h.token, "[token]")
}
