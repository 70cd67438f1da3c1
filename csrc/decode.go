package csrc

/*
#include "lanpo.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// RopeCache is Rope for one new token per row (q, k, v [B, 1, ·]) that
// writes the rotated keys and the values into kcache, vcache [B, hkv, Tmax,
// D] at the slot ctr[1] (ctr: [2] int64 on the device; a negative slot:
// each row at its position pos[r], the slots engine's layout) and returns
// q [B, hq, 1, D]. Not differentiable.
func RopeCache(q, k, v, bq, bk, bv, cos, sin, pos, kcache, vcache, ctr *ts.Tensor) (*ts.Tensor, error) {
	var out C.lanpo_tensor
	if err := takeError(C.lanpo_rope_cache(handle(q), handle(k), handle(v), optHandle(bq), optHandle(bk), optHandle(bv),
		handle(cos), handle(sin), handle(pos), handle(kcache), handle(vcache), handle(ctr), &out)); err != nil {
		return nil, err
	}
	return fromC(out), nil
}

// SampleArgs are one decode step's draw on the device (lanpo_sample in
// lanpo.h): Pick [R, V] fp32 holds what is drawn from (unnormalized
// probabilities, or log-probabilities when Greedy), LP [R, V] fp32 the
// log-probabilities recorded, U [R, U] fp64 each row's uniforms (nil when
// Greedy), Ctr [2] int64 the output column and the latest cache slot, Tok
// and Pos [R, 1] int64 the next input and its position (advanced), Bias [R,
// Tmax] the attention mask whose next slot is opened (nil: none; with a
// negative slot, each row's advanced position), Rec [R, U]
// int64 the record written at the column.
type SampleArgs struct {
	Pick, LP, U, Ctr, Tok, Pos, Bias, Rec *ts.Tensor
	Greedy                                bool
}

// UnpackRecord splits one of Sample's records: the token in the low 32
// bits, its log-probability's float32 bits in the high 32.
func UnpackRecord(rec int64) (token int64, logp float32) {
	return rec & 0xffffffff, math.Float32frombits(uint32(uint64(rec) >> 32))
}

// Sample draws and records one token per row without the host.
func Sample(a SampleArgs) error {
	g := C.int(0)
	if a.Greedy {
		g = 1
	}
	return takeError(C.lanpo_sample(handle(a.Pick), handle(a.LP), optHandle(a.U), handle(a.Ctr), handle(a.Tok),
		handle(a.Pos), optHandle(a.Bias), handle(a.Rec), g))
}

// SDPA is scaled_dot_product_attention(q, k, v, mask, is_causal) with
// enable_gqa (k and v may have fewer heads than q) where this libtorch has it
// (SDPAGQA). mask may be nil.
func SDPA(q, k, v, mask *ts.Tensor, causal, gqa bool) (*ts.Tensor, error) {
	b := func(x bool) C.int {
		if x {
			return 1
		}
		return 0
	}
	var out C.lanpo_tensor
	if err := takeError(C.lanpo_sdpa(handle(q), handle(k), handle(v), optHandle(mask), b(causal), b(gqa), &out)); err != nil {
		return nil, err
	}
	return fromC(out), nil
}

// SDPAGQA reports whether this libtorch's SDPA takes enable_gqa (≥ 2.5).
func SDPAGQA() bool { return C.lanpo_sdpa_gqa_supported() != 0 }

// Upload copies data (a []int64, []float64, []float32 or []bool) into a new
// tensor of shape on device, in s. On CUDA it goes through pinned memory and
// the host does not wait for the copy.
func Upload(s *tensor.Scope, data any, shape []int64, device gotch.Device) *ts.Tensor {
	raw, dtype, n, ok := tensor.SliceBytes(data)
	if !ok {
		panic("csrc.Upload: unsupported slice type")
	}
	if shape == nil {
		shape = []int64{int64(n)}
	}
	p, sp, dev := hostArgs(raw, shape, device)
	var out C.lanpo_tensor
	var async C.int
	if err := takeError(C.lanpo_upload(p, sp, C.int(len(shape)), C.int(dtype.CInt()), dev, &async, &out)); err != nil {
		panic(err)
	}
	// On a CPU device the copy is the one a CUDA run would make from pinned
	// memory: counted as asynchronous.
	tensor.CountUpload(true)
	return s.Keep(fromC(out))
}

// CUDAGraphs reports whether this build can capture CUDA graphs.
func CUDAGraphs() bool {
	var sup C.int
	if takeError(C.lanpo_graph_supported(&sup)) != nil {
		return false
	}
	return sup != 0
}

// SideStream is a CUDA stream of one device that graphs are captured on.
type SideStream struct{ p unsafe.Pointer }

// NewSideStream takes a stream from torch's pool for device.
func NewSideStream(device int) (*SideStream, error) {
	var p unsafe.Pointer
	if err := takeError(C.lanpo_side_stream_new(C.int(device), &p)); err != nil {
		return nil, err
	}
	return &SideStream{p: p}, nil
}

// Enter makes the side stream current, after the work queued so far.
func (s *SideStream) Enter() error { return takeError(C.lanpo_side_stream_enter(s.p)) }

// Exit makes the previous stream current again; it waits for the side stream.
func (s *SideStream) Exit() error { return takeError(C.lanpo_side_stream_exit(s.p)) }

// Close frees the stream's handle.
func (s *SideStream) Close() {
	if s != nil && s.p != nil {
		C.lanpo_side_stream_free(s.p)
		s.p = nil
	}
}

// GraphPool is a memory pool CUDA graphs share.
type GraphPool [2]uint64

// NewGraphPool returns a fresh pool id.
func NewGraphPool() (GraphPool, error) {
	var p [2]C.uint64_t
	err := takeError(C.lanpo_graph_pool(&p[0]))
	return GraphPool{uint64(p[0]), uint64(p[1])}, err
}

// Graph is a captured CUDA graph.
type Graph struct{ p unsafe.Pointer }

// CaptureGraph captures the CUDA work fn queues on this thread (on the
// current stream, which must be a side stream) into a graph using pool. The
// capture is ended whatever fn does (a panic in it becomes the error).
func CaptureGraph(pool GraphPool, fn func() error) (*Graph, error) {
	cp := [2]C.uint64_t{C.uint64_t(pool[0]), C.uint64_t(pool[1])}
	var p unsafe.Pointer
	if err := takeError(C.lanpo_graph_capture_begin(&cp[0], &p)); err != nil {
		return nil, err
	}
	g := &Graph{p: p}
	ferr := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("during capture: %v", r)
			}
		}()
		return fn()
	}()
	if err := takeError(C.lanpo_graph_capture_end(p)); err != nil || ferr != nil {
		g.Close()
		if ferr != nil {
			return nil, ferr
		}
		return nil, err
	}
	return g, nil
}

// Replay runs the graph on the current stream.
func (g *Graph) Replay() error { return takeError(C.lanpo_graph_replay(g.p)) }

// Close frees the graph.
func (g *Graph) Close() {
	if g != nil && g.p != nil {
		C.lanpo_graph_free(g.p)
		g.p = nil
	}
}
