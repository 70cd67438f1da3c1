// Package csrc is lanpo's C++ (and, with CUDA=1, CUDA) code behind a small C
// API (lanpo.h). Tensors cross as gotch handles; every C++ exception comes
// back as a Go error; nothing here aborts the process.
//
// Like every libtorch call, these functions must run on the one OS thread
// that does torch work (CONTRIBUTING.md, Threads): gotch's error slot and the autograd
// grad mode are thread-local.
//
// The cgo flags that point at libtorch live in zz_cgo_flags.go, which
// `make deps` (third_party/prepare) generates for the libtorch it chose.
package csrc

/*
#include <stdlib.h>
#include "lanpo.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
)

// takeError converts a malloc'd C error string into a Go error and frees it.
func takeError(e *C.char) error {
	if e == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(e))
	return errors.New("csrc: " + C.GoString(e))
}

func handle(t *ts.Tensor) C.lanpo_tensor { return C.lanpo_tensor(t.Ctensor()) }

// RMSNorm returns weight * (x / sqrt(mean(x², -1) + eps)) with the statistics
// in fp32 (fp64 for fp64 inputs) and the normalized value cast back to x's
// dtype before the weight multiply, as Hugging Face's Qwen2RMSNorm does.
// x is [..., H] and weight [H]; the result takes part in autograd.
func RMSNorm(x, weight *ts.Tensor, eps float64) (*ts.Tensor, error) {
	var out C.lanpo_tensor
	if err := takeError(C.lanpo_rms_norm(handle(x), handle(weight), C.double(eps), &out)); err != nil {
		return nil, err
	}
	return ts.FromCtensor(unsafe.Pointer(out)), nil
}

// Info describes the libtorch lanpo runs on: what the C++ side was compiled
// against and sees at run time, and what the build preparation recorded.
type Info struct {
	TorchVersion    string   `json:"torch_version"`
	LibtorchDir     string   `json:"libtorch_dir"`
	LibtorchSource  string   `json:"libtorch_source"`
	CXX11ABI        int      `json:"cxx11_abi"`
	BuiltWithCUDA   bool     `json:"built_with_cuda"`
	CUDAAvailable   bool     `json:"cuda_available"`
	CUDADevices     int      `json:"cuda_devices"`
	CuDNNAvailable  bool     `json:"cudnn_available"`
	Threads         int      `json:"threads"`
	GotchVersion    string   `json:"gotch_version"`
	UnavailableOps  []string `json:"unavailable_ops"`
	PreparedVersion string   `json:"prepared_for_version"`
}

// BuildInfo queries libtorch through the C++ bridge.
func BuildInfo() (Info, error) {
	var bi C.lanpo_build_info
	if err := takeError(C.lanpo_get_build_info(&bi)); err != nil {
		return Info{}, err
	}
	return Info{
		TorchVersion:    C.GoString(&bi.torch_version[0]),
		LibtorchDir:     libtch.LanpoLibtorchDir,
		LibtorchSource:  libtch.LanpoLibtorchSource,
		CXX11ABI:        int(bi.cxx11_abi),
		BuiltWithCUDA:   bi.built_with_cuda != 0,
		CUDAAvailable:   bi.cuda_available != 0,
		CUDADevices:     int(bi.cuda_device_count),
		CuDNNAvailable:  bi.cudnn_available != 0,
		Threads:         int(bi.num_threads),
		GotchVersion:    libtch.LanpoGotchVersion,
		UnavailableOps:  append([]string(nil), libtch.LanpoUnavailableOps...),
		PreparedVersion: libtch.LanpoLibtorchVersion,
	}, nil
}

// selftestThrow throws a C++ exception of the given kind inside the bridge
// (0 c10::Error, 1 std::runtime_error, 2 a non-std type) and returns what
// came back; tests use it to prove the error path.
func selftestThrow(kind int) error { return takeError(C.lanpo_selftest_throw(C.int(kind))) }

// FromBytes copies data, a contiguous little-endian tensor of srcDType and
// shape, into a new tensor of dstDType on device in one copy (converting on
// the way). data may be memory-mapped; it is not referenced afterwards.
func FromBytes(data []byte, shape []int64, srcDType, dstDType gotch.DType, device gotch.Device) (*ts.Tensor, error) {
	n := int64(srcDType.Size())
	for _, d := range shape {
		n *= d
	}
	if n != int64(len(data)) {
		return nil, fmt.Errorf("csrc: tensor_from_bytes: %v × %v is %d bytes, got %d", srcDType, shape, n, len(data))
	}
	p, sp, dev := hostArgs(data, shape, device)
	var out C.lanpo_tensor
	if err := takeError(C.lanpo_tensor_from_bytes(p, sp, C.int(len(shape)), C.int(srcDType.CInt()), C.int(dstDType.CInt()), dev, &out)); err != nil {
		return nil, err
	}
	return ts.FromCtensor(unsafe.Pointer(out)), nil
}

// ToBytes copies t's elements (contiguous, on the host) into a new byte
// slice in t's dtype.
func ToBytes(t *ts.Tensor) ([]byte, error) {
	n := int64(t.Numel()) * int64(t.DType().Size())
	buf := make([]byte, n)
	var p unsafe.Pointer
	if n > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	if err := takeError(C.lanpo_tensor_to_bytes(handle(t), p, C.int64_t(n))); err != nil {
		return nil, err
	}
	return buf, nil
}

// hostArgs is what the C side takes for a host buffer and its shape (nil
// pointers when empty; Go memory, read during the call only) and a device
// (-1: CPU, else the CUDA index).
func hostArgs(data []byte, shape []int64, device gotch.Device) (unsafe.Pointer, *C.int64_t, C.int) {
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	var sp *C.int64_t
	if len(shape) > 0 {
		sp = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	dev := -1
	if device.IsCuda() {
		dev = device.Value
	}
	return p, sp, C.int(dev)
}
