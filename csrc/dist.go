package csrc

/*
#include <stdlib.h>
#include "lanpo.h"
*/
import "C"

import (
	"errors"
	"regexp"
	"time"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// This file is the thin Go face of dist.cpp: torch c10d process groups and
// TCPStore servers behind opaque handles. Package dist builds lanpo's
// communicator on it; nothing else should call these directly.

// DistSupport reports which collective backends this build has and, when it
// has none, why (prepare found no Gloo headers, or libtorch lacks c10d).
func DistSupport() (gloo, nccl bool, why string) {
	var g, n C.int
	C.lanpo_dist_support(&g, &n)
	gloo, nccl = g != 0, n != 0
	if !gloo {
		why = distUnavailable
		if why == "" {
			why = "csrc was compiled without LANPO_DIST"
		}
	} else if !nccl {
		why = "no NCCL: lanpo was built without CUDA=1 or without nccl.h"
	}
	return gloo, nccl, why
}

// errNoDist is the error every dist function returns in a build without
// distributed support; its message says why.
func errNoDist() error {
	_, _, why := DistSupport()
	return errors.New("lanpo was built without distributed support (" + why + ")")
}

// DistConfig is what joining a process group takes; package dist fills it
// from the launch environment.
type DistConfig struct {
	Backend  string // "gloo" or "nccl"
	Host     string // the TCPStore's address (MASTER_ADDR)
	Port     int    // and port (MASTER_PORT)
	Rank     int
	Size     int
	IsServer bool   // this process serves the TCPStore
	Prefix   string // key prefix in the store ("" for none)
	BindHost string // address Gloo listens on ("": torch's default); GLOO_SOCKET_IFNAME wins
	Timeout  time.Duration
	Device   gotch.Device // CUDA device of an NCCL group
}

// DistGroup is one joined process group. Every method must be called from
// the torch thread, by every rank in the same order.
type DistGroup struct {
	h C.lanpo_dist
}

// gloo prefixes its messages with the source location
// ("[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed
// by peer"), which tells a user nothing.
var sourceLoc = regexp.MustCompile(`\[[^\] ]+\.(cc|cpp|h|hpp):\d+\] `)

// takeDistError turns dist.cpp's error ("allreduce: what") into a Go error
// without csrc's prefix: package dist adds the rank.
func takeDistError(e *C.char) error {
	if e == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(e))
	return errors.New(sourceLoc.ReplaceAllString(C.GoString(e), ""))
}

// NewDistGroup joins a process group; it returns when every rank has
// joined, or with an error after c.Timeout.
func NewDistGroup(c DistConfig) (*DistGroup, error) {
	if gloo, _, _ := DistSupport(); !gloo {
		return nil, errNoDist()
	}
	backend, host, prefix, bind := C.CString(c.Backend), C.CString(c.Host), C.CString(c.Prefix), C.CString(c.BindHost)
	defer C.free(unsafe.Pointer(backend))
	defer C.free(unsafe.Pointer(host))
	defer C.free(unsafe.Pointer(prefix))
	defer C.free(unsafe.Pointer(bind))
	server := 0
	if c.IsServer {
		server = 1
	}
	cuda := -1
	if c.Device.IsCuda() {
		cuda = c.Device.Value
	}
	var h C.lanpo_dist
	err := takeDistError(C.lanpo_dist_init(backend, host, C.int(c.Port), C.int(c.Rank), C.int(c.Size), C.int(server),
		prefix, bind, C.int64_t(c.Timeout.Milliseconds()), C.int(cuda), &h))
	if err != nil {
		return nil, err
	}
	return &DistGroup{h: h}, nil
}

// AllReduceSum sums t over the ranks, in place.
func (g *DistGroup) AllReduceSum(t *ts.Tensor) error {
	return takeDistError(C.lanpo_dist_allreduce_sum(g.h, handle(t)))
}

// Broadcast overwrites t with root's t.
func (g *DistGroup) Broadcast(t *ts.Tensor, root int) error {
	return takeDistError(C.lanpo_dist_broadcast(g.h, handle(t), C.int(root)))
}

// AllGather writes rank r's in (n elements) into chunk r of out (size × n).
func (g *DistGroup) AllGather(in, out *ts.Tensor) error {
	return takeDistError(C.lanpo_dist_allgather(g.h, handle(in), handle(out)))
}

// ReduceScatterSum writes into out (n elements) the sum over ranks of chunk
// <rank> of in (size × n).
func (g *DistGroup) ReduceScatterSum(in, out *ts.Tensor) error {
	return takeDistError(C.lanpo_dist_reduce_scatter_sum(g.h, handle(in), handle(out)))
}

// Barrier returns when every rank has entered it.
func (g *DistGroup) Barrier() error { return takeDistError(C.lanpo_dist_barrier(g.h)) }

// Close leaves the group and frees it.
func (g *DistGroup) Close() {
	if g.h != nil {
		C.lanpo_dist_free(g.h)
		g.h = nil
	}
}

// DistStore is a TCPStore server on its own, as torchrun's agent serves it.
type DistStore struct {
	h    C.lanpo_store
	Port int // the port it listens on
}

// ServeDistStore serves a TCPStore on host:port (0: a free port).
func ServeDistStore(host string, port int, timeout time.Duration) (*DistStore, error) {
	if gloo, _, _ := DistSupport(); !gloo {
		return nil, errNoDist()
	}
	ch := C.CString(host)
	defer C.free(unsafe.Pointer(ch))
	var h C.lanpo_store
	var bound C.int
	if err := takeDistError(C.lanpo_store_serve(ch, C.int(port), C.int64_t(timeout.Milliseconds()), &h, &bound)); err != nil {
		return nil, err
	}
	return &DistStore{h: h, Port: int(bound)}, nil
}

// Close stops serving.
func (s *DistStore) Close() {
	if s.h != nil {
		C.lanpo_store_free(s.h)
		s.h = nil
	}
}
