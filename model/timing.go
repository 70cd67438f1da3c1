package model

import (
	"time"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// DecodeCounts, set in GenerateOptions.Counts, counts what the decode loop
// (every step after the prefill) dispatches and copies: the operators
// (csrc.CountOps: kernels, views, syncs) and lanpo's host↔device copies.
// lanpo bench generate divides them by Steps, and takes the difference of
// a 2-layer and a 1-layer model for the kernels of one layer.
type DecodeCounts struct {
	Steps     int // decode steps counted: forward passes of one new token per row, each with its sampling
	Ops       csrc.OpCount
	Transfers tensor.Transfers
}

// SyncsPerStep is how often the host waits for the device per decode step:
// blocking copies and operators that read device values.
func (c DecodeCounts) SyncsPerStep() float64 {
	if c.Steps == 0 {
		return 0
	}
	return float64(c.Transfers.Syncs()+c.Ops.Syncs) / float64(c.Steps)
}

// countDecode runs the decode loop, counting into c when it is set.
func countDecode(c *DecodeCounts, loop func() (steps int, err error)) error {
	if c == nil {
		_, err := loop()
		return err
	}
	before := tensor.TransferCount()
	var steps int
	ops, err := csrc.CountOps(func() (err error) {
		steps, err = loop()
		return err
	})
	c.Steps, c.Ops, c.Transfers = steps, ops, tensor.TransferCount().Sub(before)
	return err
}

// DecodeTiming, set in GenerateOptions.Timing, collects where each decode
// step's time goes (lanpo bench generate). Collecting it adds one device
// synchronization at the end of each step, so tokens/s is measured with it
// off.
type DecodeTiming struct {
	Steps []StepTime
}

// StepTime is one decode step.
type StepTime struct {
	Rows int
	// WallMS: host clock from the step's start to the end of its look (or
	// of its GPU work, when it has no look).
	WallMS float64
	// ForwardHostMS: host clock spent enqueueing the step (forward and
	// sampling: every kernel, or a graph replay); ForwardGPUMS: CUDA events
	// around that work, the GPU time from its first to its last kernel (0 on
	// CPU). When the two are close, the GPU waited for the host to launch
	// kernels (launch-bound); when the GPU time is much longer, the host ran
	// ahead (GPU-bound).
	ForwardHostMS, ForwardGPUMS float64
	// LookMS: host clock of the look after the step (reading the sampled
	// tokens, stops, compaction); 0 between looks.
	LookMS float64
}

// stepTimer measures one step for a DecodeTiming; a nil timer does
// nothing.
type stepTimer struct {
	t             *DecodeTiming
	start, lookAt time.Time
	st            StepTime
	ev0, ev1      *csrc.CUDAEvent
}

func newStepTimer(t *DecodeTiming, m *Model) (*stepTimer, error) {
	if t == nil {
		return nil, nil
	}
	st := &stepTimer{t: t}
	if m.Device.IsCuda() {
		var err error
		if st.ev0, err = csrc.NewCUDAEvent(int(m.Device.CInt())); err != nil {
			return nil, err
		}
		if st.ev1, err = csrc.NewCUDAEvent(int(m.Device.CInt())); err != nil {
			st.ev0.Close()
			return nil, err
		}
	}
	return st, nil
}

func (s *stepTimer) close() {
	if s != nil {
		s.ev0.Close()
		s.ev1.Close()
	}
}

// begin marks the start of a step's enqueueing.
func (s *stepTimer) begin(rows int) error {
	if s == nil {
		return nil
	}
	s.st = StepTime{Rows: rows}
	s.start = time.Now()
	return s.ev0.Record()
}

// launched marks the end of the step's enqueueing and waits for the GPU.
func (s *stepTimer) launched() error {
	if s == nil {
		return nil
	}
	s.st.ForwardHostMS = ms(time.Since(s.start))
	if err := s.ev1.Record(); err != nil {
		return err
	}
	if err := csrc.Synchronize(); err != nil { // sync: timing only
		return err
	}
	g, err := csrc.ElapsedMS(s.ev0, s.ev1)
	if err != nil {
		return err
	}
	s.st.ForwardGPUMS = g
	s.lookAt = time.Now()
	return nil
}

// looked marks the end of the step's look (if any) and records the step.
func (s *stepTimer) looked() {
	if s == nil {
		return
	}
	s.st.LookMS = ms(time.Since(s.lookAt))
	s.st.WallMS = ms(time.Since(s.start))
	s.t.Steps = append(s.t.Steps, s.st)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// SlotStats, set in GenerateOptions.Stats, counts how full the decode batch
// was (lanpo bench generate --long-tail). Generate adds to it.
type SlotStats struct {
	Slots int // rows decoded at once at most
	Steps int // decode steps: forward passes of one token per row
	// BusySlotSteps: Σ over steps of the rows whose token was kept (a
	// sample's sampled or header token): the tokens decode steps made
	// (one batch samples each first token from its prefill instead).
	BusySlotSteps int64
	// RowSteps: Σ over steps of the rows the step ran (padding and idle
	// slots included).
	RowSteps int64
	// ContextTokens: Σ over steps and rows run of the tokens the row
	// attends to (its own prompt and output, not padding): what a
	// paged-attention kernel would read.
	ContextTokens int64
	// Before the queue emptied (a sample was still waiting for a slot, or
	// for its batch): the steps and the busy slot-steps.
	StepsWaiting int
	BusyWaiting  int64
	Looks        int
	Prefills     int   // prefill forwards (one per look that started rows)
	Prefilled    int64 // tokens prefilled
	Copied       int   // rows whose prompt was copied from a sibling's prefill
	Parks        int
}

// Occupancy is busy slot-steps over slot-steps (Slots × Steps).
func (s *SlotStats) Occupancy() float64 {
	if s.Steps == 0 || s.Slots == 0 {
		return 0
	}
	return float64(s.BusySlotSteps) / float64(s.Slots*s.Steps)
}

// OccupancyWaiting is Occupancy over the steps before the queue emptied.
func (s *SlotStats) OccupancyWaiting() float64 {
	if s.StepsWaiting == 0 || s.Slots == 0 {
		return 0
	}
	return float64(s.BusyWaiting) / float64(s.Slots*s.StepsWaiting)
}
