package model

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// CUDA graphs of decode steps (GenerateOptions.CUDAGraphs). A decode step's
// kernels depend only on its key: the bucketed batch size, the attention
// window and whether stop ids are barred; every other input is read from
// device buffers that stay in place until the batch is compacted. So one
// graph per key is captured and then replayed, one launch for a few hundred
// kernels. Compaction makes new buffers: the graphs are dropped and
// captured again for the new ones.
//
// Capture runs on a side stream after one warm-up step of the same key
// there (which lets cuBLAS, the allocator and lazily loaded kernels set up
// outside any capture), on the calling OS thread only (thread-local capture
// mode), with Go's garbage collector paused so that no finalizer frees CUDA
// memory meanwhile (lanpo frees every tensor through scopes; a finalizer is
// a safety net). The graphs of one set of buffers share a memory pool: they
// replay one at a time and keep nothing in it between replays.
//
// On a CPU device (or a build without CUDA) the same bookkeeping runs with
// every step eager: tests check that keys, captures and replays follow the
// steps, and that outputs equal those with graphs off.

// graphKey is what makes two decode steps the same sequence of kernels.
type graphKey struct {
	rows   int
	window int64
	held   bool
}

// GraphStats, set in GenerateOptions.GraphStats, records what the decode
// steps of a generation did with CUDA graphs (lanpo bench generate, tests).
type GraphStats struct {
	Steps []GraphStep
	// Resets are the steps (indexes into Steps) before which the graphs
	// were dropped: the batch was compacted into new buffers.
	Resets []int
}

// GraphStep is one decode step: its key, and whether it was a warm-up (the
// first of its key since the batch's buffers were made: run eagerly on the
// capture stream), captured (the second, then replayed at once) or
// replayed.
type GraphStep struct {
	Rows   int
	Window int64
	Held   bool
	Event  string // "capture", "replay" or "warm-up"
}

// Count returns how many steps had the event.
func (g *GraphStats) Count(event string) int {
	n := 0
	for _, s := range g.Steps {
		if s.Event == event {
			n++
		}
	}
	return n
}

type stepGraphs struct {
	on     bool // capture and replay (else every step runs eagerly)
	cuda   bool // real CUDA graphs (else the bookkeeping only)
	device int
	stream *csrc.SideStream
	pool   csrc.GraphPool
	pooled bool
	warm   map[graphKey]bool // keys that ran once eagerly on the side stream
	graphs map[graphKey]*csrc.Graph
	stats  *GraphStats // nil: not recorded
}

func newStepGraphs(on bool, dev gotch.Device, stats *GraphStats) *stepGraphs {
	return &stepGraphs{on: on, cuda: on && dev.IsCuda() && csrc.CUDAGraphs(), device: int(dev.CInt()),
		warm: map[graphKey]bool{}, graphs: map[graphKey]*csrc.Graph{}, stats: stats}
}

func (g *stepGraphs) record(key graphKey, event string) {
	if g.stats != nil {
		g.stats.Steps = append(g.stats.Steps, GraphStep{Rows: key.rows, Window: key.window, Held: key.held, Event: event})
	}
}

// run runs one decode step: the graph of its key if there is one; else the
// step itself, eagerly on the capture stream the first time a key comes
// (a warm-up: cuBLAS, the allocator and lazily loaded kernels set up for
// these shapes outside any capture), captured the second time. On a CPU
// device the same books are kept and every step runs eagerly.
func (g *stepGraphs) run(key graphKey, step func() error) (err error) {
	if !g.on {
		return step()
	}
	// A panic inside the step (an op that fails) becomes an error here, so
	// that a capture is always ended and the stream always restored.
	safe := func() (err error) {
		defer tensor.Recover("decode step", &err)
		return step()
	}
	if gr, ok := g.graphs[key]; ok {
		g.record(key, "replay")
		if gr == nil { // bookkeeping only
			return safe()
		}
		return gr.Replay()
	}
	if !g.warm[key] {
		g.record(key, "warm-up")
		g.warm[key] = true
		if !g.cuda {
			return safe()
		}
		return g.onSideStream(safe)
	}
	g.record(key, "capture")
	if !g.cuda {
		g.graphs[key] = nil
		return safe()
	}
	var gr *csrc.Graph
	err = g.onSideStream(func() (err error) {
		gr, err = g.capture(safe)
		return err
	})
	if err != nil {
		return fmt.Errorf("capturing a decode step as a CUDA graph (rows %d, attention window %d): %w; "+
			"rollout.cuda_graphs: false (lanpo generate without --cuda-graphs) runs without graphs", key.rows, key.window, err)
	}
	g.graphs[key] = gr
	return gr.Replay() // capture records the step's work without running it
}

// onSideStream runs fn with the capture stream current, on this OS thread
// (the current stream and capture are per thread).
func (g *stepGraphs) onSideStream(fn func() error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := g.setup(); err != nil {
		return err
	}
	if err := g.stream.Enter(); err != nil {
		return err
	}
	defer func() { err = firstErr(err, g.stream.Exit()) }()
	return fn()
}

// capture records step into a new graph with Go's collector paused.
func (g *stepGraphs) capture(step func() error) (*csrc.Graph, error) {
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	return csrc.CaptureGraph(g.pool, step)
}

func (g *stepGraphs) setup() error {
	if g.stream == nil {
		st, err := csrc.NewSideStream(g.device)
		if err != nil {
			return err
		}
		g.stream = st
	}
	if !g.pooled {
		p, err := csrc.NewGraphPool()
		if err != nil {
			return err
		}
		g.pool, g.pooled = p, true
	}
	return nil
}

// reset drops every graph (their buffers are about to be replaced). The
// next graphs take a new memory pool: the allocator keeps a pool whose
// graphs are all gone until memory runs short, and refuses to capture into
// it again.
func (g *stepGraphs) reset() {
	if g.stats != nil && g.on {
		g.stats.Resets = append(g.stats.Resets, len(g.stats.Steps))
	}
	for k, gr := range g.graphs {
		gr.Close()
		delete(g.graphs, k)
	}
	clear(g.warm)
	g.pooled = false
}

func (g *stepGraphs) close() {
	if g == nil {
		return
	}
	g.reset()
	g.stream.Close()
	g.stream = nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
