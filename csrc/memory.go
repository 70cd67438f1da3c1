package csrc

/*
#include "lanpo.h"
*/
import "C"

import (
	"os"
	"strconv"
	"strings"

	"github.com/sugarme/gotch"
)

// PeakMeter measures the peak memory of what runs between NewPeakMeter and
// Peak: on CUDA the caching allocator's peak of allocated bytes, on the
// host the process's peak RSS (VmHWM, reset through /proc/self/clear_refs)
// above the RSS at the start.
type PeakMeter struct {
	device   gotch.Device
	baseline int64
}

// NewPeakMeter resets the peak and starts measuring.
func NewPeakMeter(d gotch.Device) *PeakMeter {
	p := &PeakMeter{device: d}
	if d.IsCuda() {
		var b C.int64_t
		var ok C.int
		_ = takeError(C.lanpo_cuda_peak_bytes(C.int(d.CInt()), 1, &b, &ok))
		return p
	}
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux ≥ 4.0).
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	p.baseline = procStatusKB("VmRSS")
	return p
}

// Peak returns the peak bytes since NewPeakMeter and what they are, or 0
// and why there is no figure.
func (p *PeakMeter) Peak() (int64, string) {
	if p.device.IsCuda() {
		var b C.int64_t
		var ok C.int
		if err := takeError(C.lanpo_cuda_peak_bytes(C.int(p.device.CInt()), 0, &b, &ok)); err != nil || ok == 0 {
			return 0, "unavailable (lanpo built without CUDA)"
		}
		return int64(b), "CUDA caching allocator peak"
	}
	hwm := procStatusKB("VmHWM")
	if hwm < 0 || p.baseline < 0 {
		return 0, "unavailable (no /proc/self/status)"
	}
	return (hwm - p.baseline) << 10, "process peak RSS (VmHWM) above the RSS before the op"
}

// MeasureHostMemory makes the host allocator give every large free back to
// the system at once (a fixed 128 KiB mmap threshold instead of glibc's
// adaptive one, and the heap trimmed now), so that RSS follows what
// tensors hold and a PeakMeter on the host measures them. It costs some
// speed; benchmarks call it, training does not.
func MeasureHostMemory() { C.lanpo_malloc_measure() }

// CUDAMemInfo is a CUDA device's memory.
type CUDAMemInfo struct {
	Free, Total         int64 // the driver's view of the device
	Allocated, Reserved int64 // this process's caching allocator
}

// CUDAMemory reports device d's memory; ok is false on a build without
// CUDA.
func CUDAMemory(d gotch.Device) (info CUDAMemInfo, ok bool, err error) {
	var f, t, a, r C.int64_t
	var sup C.int
	if err := takeError(C.lanpo_cuda_mem_info(C.int(d.CInt()), &f, &t, &a, &r, &sup)); err != nil {
		return info, false, err
	}
	return CUDAMemInfo{Free: int64(f), Total: int64(t), Allocated: int64(a), Reserved: int64(r)}, sup != 0, nil
}

// EmptyCUDACache gives the blocks the CUDA caching allocator holds unused
// back to the driver (torch.cuda.empty_cache), so that another process —
// a benchmark's baseline — can have them; ok is false on a build without
// CUDA.
func EmptyCUDACache() (ok bool, err error) {
	var sup C.int
	if err := takeError(C.lanpo_cuda_empty_cache(&sup)); err != nil {
		return false, err
	}
	return sup != 0, nil
}

// CUDADeviceName is device d's name ("NVIDIA H100 80GB HBM3"); ok is false
// on a build without CUDA.
func CUDADeviceName(d gotch.Device) (name string, ok bool, err error) {
	var buf [256]C.char
	var sup C.int
	if err := takeError(C.lanpo_cuda_device_name(C.int(d.CInt()), &buf[0], C.int(len(buf)), &sup)); err != nil {
		return "", false, err
	}
	return C.GoString(&buf[0]), sup != 0, nil
}

// procStatusKB reads one kB field of /proc/self/status, or -1.
func procStatusKB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
