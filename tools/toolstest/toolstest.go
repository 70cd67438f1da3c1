// Package toolstest gives tests a scripted tool loop (what trainer's
// rollout and eval's tools mode ask of tools.Loop): every sample parks
// once, after its After-th token, and is answered with Append — at once
// (its resume is on the channel before the engine's next look, so runs are
// deterministic), or with Late after a delay of its own.
package toolstest

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/tools"
)

// Scripted is the scripted loop; Record is what a sample that parked
// reports (tools.Loop.Trajectory), Lockstep goes to the engine's turns.
type Scripted struct {
	After    int
	Append   []int64
	Record   tools.Trajectory
	Late     bool // each answer after a delay of its own, up to 30 ms
	Lockstep bool

	mu     sync.Mutex
	parked map[[2]int]bool
}

// Describe names the script (an evaluation's record).
func (s *Scripted) Describe() string { return "scripted" }

// Declarations declare one tool, python.
func (s *Scripted) Declarations() []json.RawMessage {
	return []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "python", "description": "Run code.", "parameters": {"type": "object"}}}`)}
}

// Start begins a generation of rows samples.
func (s *Scripted) Start(_ context.Context, rows int) (*model.Turns, error) {
	s.mu.Lock()
	s.parked = map[[2]int]bool{}
	s.mu.Unlock()
	ch := make(chan model.Resume, rows)
	return &model.Turns{
		ParkIf: func(p, i int, ids []int64) bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			k := [2]int{p, i}
			if len(ids) != s.After || s.parked[k] {
				return false
			}
			s.parked[k] = true
			return true
		},
		Parked: func(smp model.Sample) {
			rs := model.Resume{Prompt: smp.Prompt, Index: smp.Index, Append: s.Append}
			if !s.Late {
				ch <- rs
				return
			}
			wait := time.Duration((smp.Prompt*7+smp.Index*13)%31) * time.Millisecond
			time.AfterFunc(wait, func() { ch <- rs })
		},
		Resumes:  ch,
		Lockstep: s.Lockstep,
	}, nil
}

// Trajectory is Record for a sample that parked, else nothing.
func (s *Scripted) Trajectory(p, i int) tools.Trajectory {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parked[[2]int{p, i}] {
		return s.Record
	}
	return tools.Trajectory{}
}
