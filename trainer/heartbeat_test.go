package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/internal/syncbuf"
)

// TestHeartbeatLines: with a clock of its own, the heartbeat says the
// phase, the time in it and the progress — sequences of the phase's
// generation calls with tokens/s, then micro-batches — and nothing between
// steps.
// atInfo lets a test see info lines (TestMain keeps warnings only) until
// it ends.
func atInfo(t *testing.T) {
	lvl := zerolog.GlobalLevel()
	t.Cleanup(func() { zerolog.SetGlobalLevel(lvl) })
	zerolog.SetGlobalLevel(zerolog.InfoLevel)
}

func TestHeartbeatLines(t *testing.T) {
	atInfo(t)
	var buf bytes.Buffer
	h := &heartbeat{logger: zerolog.New(&buf)}
	t0 := time.Unix(1000, 0)
	line := func(now time.Time) map[string]any {
		t.Helper()
		buf.Reset()
		h.beat(now)
		if buf.Len() == 0 {
			return nil
		}
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%q: %v", buf.String(), err)
		}
		return m
	}
	if m := line(t0); m != nil {
		t.Fatalf("before any step: %v", m)
	}
	h.enter(3, "rollout", t0)
	// Two generation calls of 8 rows each, reported every 16 decode steps.
	h.decoded(16, 2, 8) // 8 rows × 16 steps, 2 ended
	h.decoded(32, 8, 8) // 6 rows × 16 steps
	h.decoded(16, 1, 8) // a second call: 8 × 16
	m := line(t0.Add(40 * time.Second))
	want := map[string]any{"step": 3.0, "phase": "rollout", "in_phase": "40s", "progress": "9/16 sequences", "tokens_per_s": float64(8*16+6*16+8*16) / 40, "message": "working"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (%v)", k, m[k], v, m)
		}
	}
	h.enter(3, "update", t0.Add(41*time.Second))
	h.microBatches(2, 5)
	m = line(t0.Add(71 * time.Second))
	if m["phase"] != "update" || m["progress"] != "2/5 micro-batches" || m["in_phase"] != "30s" || m["tokens_per_s"] != nil {
		t.Errorf("update: %v", m)
	}
	h.enter(3, "", t0.Add(72*time.Second))
	if m := line(t0.Add(100 * time.Second)); m != nil {
		t.Errorf("between steps: %v", m)
	}
	var nilHB *heartbeat // off: every report is a no-op
	nilHB.enter(1, "rollout", t0)
	nilHB.decoded(1, 0, 1)
	nilHB.microBatches(0, 1)
	nilHB.Close()
}

// TestHeartbeatInARun: a LANPO run without a terminal logs phase lines
// at log.phase_every (a short one here), naming the loop's phases with
// their progress; with a terminal's progress bar, or phase_every 0, none.
func TestHeartbeatInARun(t *testing.T) {
	atInfo(t)
	run := func(t *testing.T, sets ...string) string {
		var buf syncbuf.Buffer
		saved := log.Logger
		log.Logger = zerolog.New(&buf)
		defer func() { log.Logger = saved }()
		cfg := lanpoConfig(t, append([]string{"total_steps=2"}, sets...)...)
		if err := RunGRPO(context.Background(), cfg, "", RunOptions{}); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	out := run(t, "log.phase_every=2ms")
	phases := map[string]bool{}
	progress := false
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["message"] != "working" {
			continue
		}
		phases[m["phase"].(string)] = true
		if p, _ := m["progress"].(string); strings.Contains(p, "sequences") || strings.Contains(p, "micro-batches") {
			progress = true
		}
	}
	if len(phases) < 2 || !progress {
		t.Errorf("phase lines name %v, with progress %v; want several phases and a progress figure:\n%.3000s", phases, progress, out)
	}
	for p := range phases {
		if !strings.Contains("prompts relevance condense rollout reward pool old_logprobs ref_logprobs update eval checkpoint", p) {
			t.Errorf("a phase line names %q", p)
		}
	}
	if out := run(t, "log.phase_every=0"); strings.Contains(out, `"working"`) {
		t.Errorf("log.phase_every 0 still logs phase lines")
	}
}
