package model

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
)

// CUDA graphs of decode steps (GenerateOptions.CUDAGraphs). A decode step's
// kernels depend only on its key: the bucketed batch size, the attention
// window and whether stop ids are barred; every other input is read from
// device buffers that stay in place until the batch is compacted. So one
// graph per key is captured and then replayed, one launch for a few hundred
// kernels. Compaction makes new buffers: the graphs are dropped and
// captured again for the new ones.
//
// Capture runs on a side stream after one warm-up step there (which lets
// cuBLAS and the allocator set up that stream outside any capture), on the
// calling OS thread only (thread-local capture mode), with Go's garbage
// collector paused so that no finalizer frees CUDA memory meanwhile (lanpo
// frees every tensor through scopes; a finalizer is a safety net). The
// graphs of a generation share one memory pool: they replay one at a time
// and keep nothing in it between replays.
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

// GraphStep is one decode step: its key, and whether it was captured (the
// first of its key since the batch's buffers were made), replayed, or a
// warm-up (run eagerly on the capture stream before the first capture).
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
	warm   bool
	graphs map[graphKey]*csrc.Graph
	stats  *GraphStats // nil: not recorded
}

func newStepGraphs(on bool, dev gotch.Device, stats *GraphStats) *stepGraphs {
	return &stepGraphs{on: on, cuda: on && dev.IsCuda() && csrc.CUDAGraphs(), device: int(dev.CInt()),
		graphs: map[graphKey]*csrc.Graph{}, stats: stats}
}

func (g *stepGraphs) record(key graphKey, event string) {
	if g.stats != nil {
		g.stats.Steps = append(g.stats.Steps, GraphStep{Rows: key.rows, Window: key.window, Held: key.held, Event: event})
	}
}

// run runs one decode step: the graph of its key if there is one, else the
// step itself (warming up, capturing, or eagerly).
func (g *stepGraphs) run(key graphKey, step func() error) error {
	if !g.on {
		return step()
	}
	if gr, ok := g.graphs[key]; ok {
		g.record(key, "replay")
		if gr == nil { // bookkeeping only
			return step()
		}
		return gr.Replay()
	}
	if !g.cuda {
		g.record(key, "capture")
		g.graphs[key] = nil
		return step()
	}
	if err := g.setup(); err != nil {
		return err
	}
	if err := g.stream.Enter(); err != nil {
		return err
	}
	if !g.warm {
		g.record(key, "warm-up")
		err := step()
		g.warm = err == nil
		return firstErr(err, g.stream.Exit())
	}
	gr, err := g.capture(step)
	if err = firstErr(err, g.stream.Exit()); err != nil {
		gr.Close()
		return fmt.Errorf("capturing a decode step as a CUDA graph (rows %d, attention window %d): %w; "+
			"rollout.cuda_graphs: false (lanpo generate without --cuda-graphs) runs without graphs", key.rows, key.window, err)
	}
	g.graphs[key] = gr
	g.record(key, "capture")
	return gr.Replay() // capture records the step's work without running it
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

// reset drops every graph (their buffers are about to be replaced).
func (g *stepGraphs) reset() {
	if g.stats != nil && g.on {
		g.stats.Resets = append(g.stats.Resets, len(g.stats.Steps))
	}
	for k, gr := range g.graphs {
		gr.Close()
		delete(g.graphs, k)
	}
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
