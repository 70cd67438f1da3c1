package csrc

/*
#include <stdlib.h>
#include "lanpo.h"
*/
import "C"

import (
	"runtime"
	"sort"
	"strconv"
	"strings"
	"unsafe"
)

// OpCount is what the operators dispatched during CountOps did (opcount.cpp).
// A kernel is a leaf of the dispatcher's call tree that does device work:
// composite operators (linear, scaled_dot_product_attention, a C++ function
// made of ATen ops) count as the kernels they call, views and allocations
// count apart. Syncs are the operators among them that make the host wait
// for the device (item, nonzero …); lanpo's own host copies are counted by
// internal/tensor.
type OpCount struct {
	Kernels   int64
	Views     int64
	Allocs    int64
	Composite int64
	Syncs     int64
	ByName    map[string]int64 // kernels per operator name
}

// Names lists the kernels' operator names, most called first.
func (c OpCount) Names() []string {
	var names []string
	for n := range c.ByName {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if c.ByName[names[i]] != c.ByName[names[j]] {
			return c.ByName[names[i]] > c.ByName[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}

// Sub is c − o, operator by operator.
func (c OpCount) Sub(o OpCount) OpCount {
	d := OpCount{Kernels: c.Kernels - o.Kernels, Views: c.Views - o.Views, Allocs: c.Allocs - o.Allocs,
		Composite: c.Composite - o.Composite, Syncs: c.Syncs - o.Syncs, ByName: map[string]int64{}}
	for n, v := range c.ByName {
		d.ByName[n] += v
	}
	for n, v := range o.ByName {
		d.ByName[n] -= v
	}
	for n, v := range d.ByName {
		if v == 0 {
			delete(d.ByName, n)
		}
	}
	return d
}

// String is "K kernels (name×n, …), V views, A allocations".
func (c OpCount) String() string {
	var parts []string
	for _, n := range c.Names() {
		parts = append(parts, strings.TrimPrefix(n, "aten::")+"×"+strconv.FormatInt(c.ByName[n], 10))
	}
	return strconv.FormatInt(c.Kernels, 10) + " kernels (" + strings.Join(parts, ", ") + "), " +
		strconv.FormatInt(c.Views, 10) + " views, " + strconv.FormatInt(c.Allocs, 10) + " allocations, " +
		strconv.FormatInt(c.Syncs, 10) + " syncs"
}

// CountOps runs fn and counts the operators it dispatches on this thread.
func CountOps(fn func() error) (OpCount, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := takeError(C.lanpo_opcount_start()); err != nil {
		return OpCount{}, err
	}
	var out C.lanpo_opcount
	var table *C.char
	stopped := false
	stop := func() error {
		stopped = true
		return takeError(C.lanpo_opcount_stop(&out, &table))
	}
	defer func() { // fn panicked: counting must not stay on for this thread
		if !stopped {
			_ = stop()
			C.free(unsafe.Pointer(table))
		}
	}()
	ferr := fn()
	if err := stop(); err != nil {
		return OpCount{}, err
	}
	defer C.free(unsafe.Pointer(table))
	c := OpCount{Kernels: int64(out.kernels), Views: int64(out.views), Allocs: int64(out.allocs),
		Composite: int64(out.composite), Syncs: int64(out.syncs), ByName: map[string]int64{}}
	for _, line := range strings.Split(C.GoString(table), "\n") {
		name, n, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		v, _ := strconv.ParseInt(n, 10, 64)
		c.ByName[name] = v
	}
	return c, ferr
}
