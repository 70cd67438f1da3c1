package csrc

/*
#include "lanpo.h"
*/
import "C"

import "unsafe"

// CUDAEvent marks a point in a CUDA device's current stream (events.cpp).
// On a build without CUDA, or for a CPU device, it is nil and every method
// does nothing, so timing code runs unchanged on CPU.
type CUDAEvent struct{ p unsafe.Pointer }

// NewCUDAEvent makes an event for CUDA device index; nil, nil on a build
// without CUDA.
func NewCUDAEvent(device int) (*CUDAEvent, error) {
	var p unsafe.Pointer
	var sup C.int
	if err := takeError(C.lanpo_cuda_event_create(C.int(device), &p, &sup)); err != nil {
		return nil, err
	}
	if sup == 0 {
		return nil, nil
	}
	return &CUDAEvent{p: p}, nil
}

// Record enqueues the event on the device's current stream.
func (e *CUDAEvent) Record() error {
	if e == nil {
		return nil
	}
	return takeError(C.lanpo_cuda_event_record(e.p))
}

// ElapsedMS is the GPU time from start to end, both recorded; it waits for
// end. 0 for nil events.
func ElapsedMS(start, end *CUDAEvent) (float64, error) {
	if start == nil || end == nil {
		return 0, nil
	}
	var ms C.double
	err := takeError(C.lanpo_cuda_event_elapsed(start.p, end.p, &ms))
	return float64(ms), err
}

// Close frees the event.
func (e *CUDAEvent) Close() {
	if e != nil && e.p != nil {
		C.lanpo_cuda_event_destroy(e.p)
		e.p = nil
	}
}
