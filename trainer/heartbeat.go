package trainer

import (
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/dist"
)

// heartbeat says what a long step is doing where no progress bar shows
// (stderr is not a terminal: nohup, Slurm, a container's log): every
// log.phase_every it logs the phase the step is in (the names of
// metrics.jsonl's seconds: rollout, reward, relevance, condense, pool,
// old_logprobs, ref_logprobs, update, eval, checkpoint), how long it has
// been in it, and its progress — sequences finished of those being
// generated with the tokens generated per second, or micro-batches done of
// the step's — so a slow step can be told from a stuck one. Before, a real
// model's first LANPO step printed nothing for ten minutes.
//
// The torch thread reports into it (Enter, decoded, microBatches); a
// goroutine of its own logs. Only values cross between them, under mu.
// Under lanpo launch the same reports go to the launcher's progress file
// (dist.ProgressFile), which tells a hung rank from a slow one.
type heartbeat struct {
	mu         sync.Mutex
	step       int // the step in progress (1-based)
	phase      string
	phaseStart time.Time
	// progress of the phase: units done of total (0 total: none known)
	done, total int
	unit        string
	tokens      int // generated in this phase
	// the current generation call at its last report: decode steps and
	// finished rows
	lastStep, lastEnded int

	logger   zerolog.Logger
	stop     chan struct{}
	wg       sync.WaitGroup
	progress *dist.ProgressFile // nil: not under lanpo launch
}

// startHeartbeat logs every `every` until stop (never when every is 0)
// and passes every report on to progress; nil (reports go nowhere) when
// it has neither to do.
func startHeartbeat(every time.Duration, progress *dist.ProgressFile) *heartbeat {
	if every <= 0 {
		if progress == nil {
			return nil
		}
		return &heartbeat{logger: log.Logger, progress: progress}
	}
	h := &heartbeat{logger: log.Logger, stop: make(chan struct{}), progress: progress}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case now := <-tick.C:
				h.beat(now)
			}
		}
	}()
	return h
}

// Close stops the heartbeat's goroutine.
func (h *heartbeat) Close() {
	if h == nil || h.stop == nil {
		return
	}
	close(h.stop)
	h.wg.Wait()
	h.stop = nil
}

// enter starts a phase of step at now; "" ends the step (nothing to say
// until the next begins).
func (h *heartbeat) enter(step int, phase string, now time.Time) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.step, h.phase, h.phaseStart = step, phase, now
	h.done, h.total, h.unit, h.tokens, h.lastStep, h.lastEnded = 0, 0, "", 0, 0, 0
	h.report()
}

// report passes the state on to the progress file (under mu).
func (h *heartbeat) report() {
	if h.progress == nil {
		return
	}
	detail := ""
	if h.total > 0 {
		detail = fmt.Sprintf("%d/%d %s", h.done, h.total, h.unit)
	}
	phase := h.phase
	if phase == "" {
		phase = "done"
	}
	h.progress.Report(h.step, phase, detail)
}

// decoded is model.GenerateOptions.Progress for the phase's generation
// calls: after `step` decode steps of a call (reported every few steps:
// rollout.sync_every), finished of its rows have ended. Each call's rows
// add to the phase's total.
func (h *heartbeat) decoded(step, finished, rows int) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if step <= h.lastStep || h.unit != "sequences" { // a new generation call
		h.total += rows
		h.lastStep, h.lastEnded = 0, 0
	}
	h.unit = "sequences"
	// The rows running at the last report wrote a token each step since
	// (those that ended in between, fewer: an upper bound).
	h.tokens += (rows - h.lastEnded) * (step - h.lastStep)
	h.done += finished - h.lastEnded
	h.lastStep, h.lastEnded = step, finished
	h.report()
}

// microBatches reports done of total micro-batches of the update.
func (h *heartbeat) microBatches(done, total int) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done, h.total, h.unit = done, total, "micro-batches"
	h.report()
}

// beat logs the state at now, if a phase is in progress.
func (h *heartbeat) beat(now time.Time) {
	h.mu.Lock()
	if h.phase == "" {
		h.mu.Unlock()
		return
	}
	in := now.Sub(h.phaseStart)
	ev := h.logger.Info().Int("step", h.step).Str("phase", h.phase).Str("in_phase", in.Round(time.Second).String())
	if h.total > 0 {
		ev = ev.Str("progress", fmt.Sprintf("%d/%d %s", h.done, h.total, h.unit))
	}
	if h.tokens > 0 && in > 0 {
		ev = ev.Float64("tokens_per_s", round3(float64(h.tokens)/in.Seconds()))
	}
	h.mu.Unlock()
	ev.Msg("working")
}
