package csrc

/*
#include "lanpo.h"
*/
import "C"

// SetCUDADevice makes CUDA device index the calling OS thread's current
// device (device.cpp says what follows from it). The CUDA runtime keeps the
// current device per thread: call it on the locked thread that does the
// torch work, before its first CUDA work. ok is false, and nothing is done,
// on a build without CUDA; an index this process cannot see is an error
// naming how many it sees.
func SetCUDADevice(index int) (ok bool, err error) {
	var sup C.int
	err = takeError(C.lanpo_cuda_set_device(C.int(index), &sup))
	return sup != 0, err
}

// CurrentCUDADevice is the calling OS thread's current CUDA device; ok is
// false on a build without CUDA.
func CurrentCUDADevice() (index int, ok bool, err error) {
	var d, sup C.int
	err = takeError(C.lanpo_cuda_current_device(&d, &sup))
	return int(d), sup != 0, err
}
