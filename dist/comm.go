// Package dist is lanpo's communication layer for multi-process data
// parallelism: a process group (Comm) over torch's c10d collectives — Gloo
// on CPU, NCCL on CUDA — and a launcher that starts one process per rank
// with torchrun's environment (Launch, `lanpo launch`).
//
// A run is started by torchrun or `lanpo launch`; each process reads its
// place from the environment (FromEnv) and joins the group (Init). Rank 0
// serves the rendezvous (a TCPStore on MASTER_ADDR:MASTER_PORT) unless
// torchrun's agent already does. Then every rank calls the same collectives
// in the same order: Gloo and NCCL match operations by issue order, not by
// name, so a rank that skips one or swaps two deadlocks the others (until
// Options.Timeout) or silently combines the wrong tensors. All collectives
// of a process come from its one torch thread (CONTRIBUTING.md, Threads).
//
// Failures are final: after a collective fails (a peer died, the timeout
// passed) the group is unusable — Gloo has no way to abort and rejoin — and
// every later call returns the same error. The process should exit; the
// launcher stops the other ranks, and torchrun may restart them all from
// the last checkpoint.
package dist

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sugarme/gotch/ts"
)

// Comm is a process group. Every rank must call the same collectives in the
// same order, from the one locked torch thread. Tensors are contiguous and
// on the group's device (Options.Device); they are treated as flat. The
// reductions take float (or integer) dtypes.
type Comm interface {
	Rank() int
	Size() int
	// AllReduceSum replaces t, on every rank, by the sum over ranks of t.
	AllReduceSum(t *ts.Tensor) error
	// Broadcast replaces t, on every rank, by root's t.
	Broadcast(t *ts.Tensor, root int) error
	// ReduceScatterSum: in holds Size()·n elements, out n; out becomes the
	// sum over ranks of chunk Rank() of in (elements [Rank()·n, (Rank()+1)·n)).
	// in is left as it was.
	ReduceScatterSum(in, out *ts.Tensor) error
	// AllGather: in holds n elements, out Size()·n; chunk r of out becomes
	// rank r's in.
	AllGather(in, out *ts.Tensor) error
	// AllGatherBytes returns every rank's b, indexed by rank; lengths may
	// differ between ranks (the sizes are gathered first, then buffers
	// padded to the longest). The result never aliases b.
	AllGatherBytes(b []byte) ([][]byte, error)
	// Barrier returns once every rank has called it.
	Barrier() error
	// Close leaves the group. Call it on every rank after the last
	// collective; a rank serving the rendezvous store stops serving it.
	Close() error
}

// Single is the world of one process: every collective is the identity
// (ReduceScatterSum and AllGather copy in to out; AllGatherBytes returns a
// copy of b as the only entry).
func Single() Comm { return single{} }

type single struct{}

func (single) Rank() int                       { return 0 }
func (single) Size() int                       { return 1 }
func (single) AllReduceSum(*ts.Tensor) error   { return nil }
func (single) Broadcast(*ts.Tensor, int) error { return nil }
func (single) Barrier() error                  { return nil }
func (single) Close() error                    { return nil }

func (single) AllGatherBytes(b []byte) ([][]byte, error) {
	return [][]byte{append([]byte{}, b...)}, nil
}

func (single) ReduceScatterSum(in, out *ts.Tensor) error { return copyFlat("reduce_scatter", out, in) }
func (single) AllGather(in, out *ts.Tensor) error        { return copyFlat("allgather", out, in) }

// copyFlat copies src's elements into dst, which has as many.
func copyFlat(op string, dst, src *ts.Tensor) (err error) {
	if dst.Numel() != src.Numel() {
		return fmt.Errorf("dist rank 0/1: %s: output has %d elements, input %d", op, dst.Numel(), src.Numel())
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("dist rank 0/1: %s: %v", op, r)
		}
	}()
	if dst.Dim() == src.Dim() {
		dst.Copy_(src)
		return nil
	}
	// Shapes differ (say [n] into [1, n]): copy through a view.
	v := src.MustView(dst.MustSize(), false)
	defer v.MustDrop()
	dst.Copy_(v)
	return nil
}

// AllGatherFloat64s returns every rank's xs, indexed by rank (lengths may
// differ).
func AllGatherFloat64s(c Comm, xs []float64) ([][]float64, error) {
	b := make([]byte, 8*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	all, err := c.AllGatherBytes(b)
	if err != nil {
		return nil, err
	}
	out := make([][]float64, len(all))
	for r, rb := range all {
		if len(rb)%8 != 0 {
			return nil, fmt.Errorf("dist: rank %d sent %d bytes, not whole float64s", r, len(rb))
		}
		out[r] = make([]float64, len(rb)/8)
		for i := range out[r] {
			out[r][i] = math.Float64frombits(binary.LittleEndian.Uint64(rb[8*i:]))
		}
	}
	return out, nil
}

// AllReduceMaxFloat64 returns the largest x over the ranks (NaN if any
// rank's is NaN), the same bits on every rank.
func AllReduceMaxFloat64(c Comm, x float64) (float64, error) {
	all, err := AllGatherFloat64s(c, []float64{x})
	if err != nil {
		return 0, err
	}
	m := math.Inf(-1)
	for r, v := range all {
		if len(v) != 1 {
			return 0, fmt.Errorf("dist: rank %d sent %d values to a max of one", r, len(v))
		}
		m = math.Max(m, v[0])
	}
	return m, nil
}
