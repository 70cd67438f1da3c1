package disttest

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// MemGroup is an in-process process group for tests: ranks are
// goroutines, each on its own locked OS thread with its own model, and a
// collective is an exchange of host copies. Sums are taken in float64 in
// rank order. The multi-process tests over Gloo are in dist and cmd/lanpo;
// this one makes data-parallel logic (trainer, optim) fast to test.
type MemGroup struct {
	n       int
	mu      sync.Mutex
	cond    *sync.Cond
	gen     int
	arrived int
	inputs  [][]float64
	result  [][]float64
}

// NewMemGroup is a group of n ranks.
func NewMemGroup(n int) *MemGroup {
	g := &MemGroup{n: n, inputs: make([][]float64, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *MemGroup) exchange(rank int, xs []float64) [][]float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	gen := g.gen
	g.inputs[rank] = xs
	g.arrived++
	if g.arrived == g.n {
		g.result, g.inputs, g.arrived = g.inputs, make([][]float64, g.n), 0
		g.gen++
		g.cond.Broadcast()
	} else {
		for gen == g.gen {
			g.cond.Wait()
		}
	}
	return g.result
}

// MemComm is one rank of a MemGroup; it implements dist.Comm.
type MemComm struct {
	g    *MemGroup
	rank int
	Ops  int // collectives issued, to check ranks stay in step
}

// Comm is rank's member of g.
func (g *MemGroup) Comm(rank int) *MemComm { return &MemComm{g: g, rank: rank} }

func (c *MemComm) Rank() int { return c.rank }
func (c *MemComm) Size() int { return c.g.n }

func setValues(t *ts.Tensor, vals []float64) {
	var s tensor.Scope
	defer s.Close()
	t.Copy_(tensor.FromSlice(&s, vals, t.MustSize(), t.MustDevice()))
}

func (c *MemComm) AllReduceSum(t *ts.Tensor) error {
	c.Ops++
	all := c.g.exchange(c.rank, tensor.Float64s(t))
	sum := make([]float64, len(all[0]))
	for _, a := range all {
		if len(a) != len(sum) {
			return fmt.Errorf("allreduce of %d and %d elements", len(a), len(sum))
		}
		for i, x := range a {
			sum[i] += x
		}
	}
	setValues(t, sum)
	return nil
}

func (c *MemComm) Broadcast(t *ts.Tensor, root int) error {
	c.Ops++
	all := c.g.exchange(c.rank, tensor.Float64s(t))
	setValues(t, all[root])
	return nil
}

func (c *MemComm) ReduceScatterSum(in, out *ts.Tensor) error {
	c.Ops++
	all := c.g.exchange(c.rank, tensor.Float64s(in))
	n := int(out.Numel())
	sum := make([]float64, n)
	for _, a := range all {
		if len(a) != n*c.g.n {
			return fmt.Errorf("reduce-scatter of %d elements into %d", len(a), n)
		}
		for i := range sum {
			sum[i] += a[c.rank*n+i]
		}
	}
	setValues(out, sum)
	return nil
}

func (c *MemComm) AllGather(in, out *ts.Tensor) error {
	c.Ops++
	all := c.g.exchange(c.rank, tensor.Float64s(in))
	var cat []float64
	for _, a := range all {
		cat = append(cat, a...)
	}
	setValues(out, cat)
	return nil
}

func (c *MemComm) AllGatherBytes(b []byte) ([][]byte, error) {
	c.Ops++
	xs := make([]float64, len(b))
	for i, x := range b {
		xs[i] = float64(x)
	}
	all := c.g.exchange(c.rank, xs)
	out := make([][]byte, len(all))
	for r, a := range all {
		out[r] = make([]byte, len(a))
		for i, x := range a {
			out[r][i] = byte(x)
		}
	}
	return out, nil
}

func (c *MemComm) Close() error { return nil }

func (c *MemComm) Barrier() error {
	c.Ops++
	c.g.exchange(c.rank, nil)
	return nil
}

// OnMemRanks runs fn as n ranks of a MemGroup, each on its own locked OS
// thread, and returns their errors.
func OnMemRanks(n int, fn func(c *MemComm) error) []error {
	g := NewMemGroup(n)
	return InGoroutines(n, func(r int) error { return fn(g.Comm(r)) })
}

// InGoroutines runs fn(r) for r < n, each in a goroutine on its own locked
// OS thread (a panic becomes that rank's error), and returns the errors.
func InGoroutines(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
				}
			}()
			errs[r] = fn(r)
		}(r)
	}
	wg.Wait()
	return errs
}
