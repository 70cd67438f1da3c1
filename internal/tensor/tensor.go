// Package tensor holds small helpers for gotch tensors that lanpo's
// packages share: a Scope that frees what a function made (lanpo never
// relies on gotch's finalizers) and host copies of tensor values.
package tensor

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// Scope collects the tensors a function makes and frees them, newest first,
// on Close. Keep registers a tensor; Release takes one back out so it can be
// returned to the caller.
//
// Scalars made with Float stay reachable until Close. gotch frees a
// ts.Scalar's C memory from a finalizer, and a scalar written inline as an
// op's argument is unreachable as soon as its C pointer has been read: the
// GC may free it while the op still uses it (seen as a rare
// "MaskedFill() failed: Expected false to be true").
type Scope struct {
	ts      []*ts.Tensor
	scalars []*ts.Scalar
}

// Float returns a scalar that stays valid until the scope closes.
func (s *Scope) Float(v float64) *ts.Scalar {
	sc := ts.FloatScalar(v)
	s.scalars = append(s.scalars, sc)
	return sc
}

// Int returns an integer scalar that stays valid until the scope closes.
func (s *Scope) Int(v int64) *ts.Scalar {
	sc := ts.IntScalar(v)
	s.scalars = append(s.scalars, sc)
	return sc
}

// Keep registers t for freeing and returns it.
func (s *Scope) Keep(t *ts.Tensor) *ts.Tensor { s.ts = append(s.ts, t); return t }

// Release removes t from the scope (the caller now owns it) and returns it.
func (s *Scope) Release(t *ts.Tensor) *ts.Tensor {
	for i := len(s.ts) - 1; i >= 0; i-- {
		if s.ts[i] == t {
			s.ts = append(s.ts[:i], s.ts[i+1:]...)
			break
		}
	}
	return t
}

// Close frees every registered tensor. Dropping a handle does not disturb
// autograd: the graph holds its own references to what backward needs.
func (s *Scope) Close() {
	for i := len(s.ts) - 1; i >= 0; i-- {
		s.ts[i].MustDrop()
	}
	s.ts = nil
	// Every op that used a scalar has returned; its finalizer may free it.
	runtime.KeepAlive(s.scalars)
	s.scalars = nil
}

// Transfers counts lanpo's copies between host and device memory through
// this package (and csrc's pinned uploads): the round trips a decode step
// makes (lanpo bench generate's syncs per token). On a CPU device the same
// calls are counted, as the copies a CUDA run of the same code would make.
type Transfers struct {
	// Downloads are device→host reads: the host waits for the device.
	Downloads int64
	// Uploads are host→device copies from pageable memory, which the host
	// waits for too; AsyncUploads come from pinned memory and do not block.
	Uploads, AsyncUploads int64
}

var downloads, uploads, asyncUploads atomic.Int64

// TransferCount returns the counts since the process started.
func TransferCount() Transfers {
	return Transfers{Downloads: downloads.Load(), Uploads: uploads.Load(), AsyncUploads: asyncUploads.Load()}
}

// Sub is t − o.
func (t Transfers) Sub(o Transfers) Transfers {
	return Transfers{Downloads: t.Downloads - o.Downloads, Uploads: t.Uploads - o.Uploads, AsyncUploads: t.AsyncUploads - o.AsyncUploads}
}

// Syncs are the transfers the host waits for.
func (t Transfers) Syncs() int64 { return t.Downloads + t.Uploads }

// CountUpload records a host→device copy made outside this package.
func CountUpload(async bool) {
	if async {
		asyncUploads.Add(1)
	} else {
		uploads.Add(1)
	}
}

// Float64s copies x's elements to the host as float64 (gotch's
// Float64Values leaks its conversion).
func Float64s(x *ts.Tensor) []float64 {
	downloads.Add(1)
	var s Scope
	defer s.Close()
	d := s.Keep(x.MustDetach(false))
	d = s.Keep(d.MustTotype(gotch.Double, false))
	d = s.Keep(d.MustTo(gotch.CPU, false))
	n := d.Numel()
	out := make([]float64, n)
	copyOut(d, unsafe.Pointer(unsafe.SliceData(out)), n, 8)
	return out
}

// copyOut copies n elements of a contiguous-able CPU tensor of the right
// dtype into dst. gotch's CopyData checks the destination element by
// element through reflection (8% of a tiny GRPO step in a profile).
func copyOut(t *ts.Tensor, dst unsafe.Pointer, n uint, size uint) {
	if n == 0 {
		return
	}
	lib.AtCopyData(lib.Ctensor(t.Ctensor()), dst, n, size)
	if err := ts.TorchErr(); err != nil {
		panic(err)
	}
}

// MaxAbsDiff is max |a[i] − b[i]|, +Inf when the lengths differ.
func MaxAbsDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

// RSSBytes is the process's resident set size, from /proc/self/statm
// (Linux); tests use it to check that loops do not leak.
func RSSBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/self/statm: unexpected %q", b)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/self/statm: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// Int64s copies an integer tensor's elements to the host.
func Int64s(x *ts.Tensor) []int64 {
	downloads.Add(1)
	var s Scope
	defer s.Close()
	d := s.Keep(s.Keep(s.Keep(x.MustDetach(false)).MustTotype(gotch.Int64, false)).MustTo(gotch.CPU, false))
	n := d.Numel()
	out := make([]int64, n)
	copyOut(d, unsafe.Pointer(unsafe.SliceData(out)), n, 8)
	return out
}

// FromSlice copies a Go slice into a tensor of the given shape (nil: 1-D)
// on device, registered in s.
func FromSlice(s *Scope, data any, shape []int64, device gotch.Device) *ts.Tensor {
	uploads.Add(1)
	var t *ts.Tensor
	if raw, dtype, n, ok := SliceBytes(data); ok {
		// gotch's OfSlice encodes element by element through reflection
		// (9% of a tiny GRPO step in a profile); the bytes go in one copy.
		if shape == nil {
			shape = []int64{int64(n)}
		}
		t = s.Keep(ts.MustOfDataSize(raw, shape, dtype))
	} else {
		t = s.Keep(ts.MustOfSlice(data))
		if shape != nil {
			t = s.Keep(t.MustView(shape, false))
		}
	}
	if device == gotch.CPU {
		return t
	}
	return s.Keep(t.MustTo(device, false))
}

// SliceBytes views a numeric slice's memory as bytes (no copy) and names
// its dtype and length.
func SliceBytes(data any) ([]byte, gotch.DType, int, bool) {
	view := func(p unsafe.Pointer, n, size int) []byte {
		if n == 0 {
			return []byte{}
		}
		return unsafe.Slice((*byte)(p), n*size)
	}
	switch v := data.(type) {
	case []int64:
		return view(unsafe.Pointer(unsafe.SliceData(v)), len(v), 8), gotch.Int64, len(v), true
	case []float64:
		return view(unsafe.Pointer(unsafe.SliceData(v)), len(v), 8), gotch.Double, len(v), true
	case []float32:
		return view(unsafe.Pointer(unsafe.SliceData(v)), len(v), 4), gotch.Float, len(v), true
	case []int32:
		return view(unsafe.Pointer(unsafe.SliceData(v)), len(v), 4), gotch.Int, len(v), true
	case []bool:
		return view(unsafe.Pointer(unsafe.SliceData(v)), len(v), 1), gotch.Bool, len(v), true
	}
	return nil, 0, 0, false
}

// Recover, deferred, turns a panic from a gotch Must op (lanpo's prepared
// gotch panics where upstream calls log.Fatal) into an error naming the
// phase: defer tensor.Recover("forward", &err).
func Recover(phase string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: %v", phase, r)
	}
}
