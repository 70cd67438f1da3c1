// Package cudatest decides whether a GPU test runs. Every GPU test of
// lanpo has CUDA in its name (the GPU machine selects them with
// `go test -run CUDA ./...`) and starts with Device, which skips, saying
// what is missing, on a build without CUDA or a machine without a device.
//
// Two environment variables change that:
//
//   - LANPO_REQUIRE_CUDA=1 turns those skips into failures, so a GPU run
//     whose build lost CUDA (or whose device is not visible) cannot pass by
//     skipping everything.
//   - LANPO_CUDATEST_ON_CPU=1 makes Device return the CPU: each GPU test
//     then compares the CPU with itself, which checks the test's own code
//     (scopes, devices of inputs, its comparisons) on a machine without a
//     GPU. Tests that need CUDA itself (its memory, its devices, NCCL) call
//     Real, which never returns the CPU: there they still skip.
package cudatest

import (
	"fmt"
	"os"
	"testing"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
)

const (
	requireVar = "LANPO_REQUIRE_CUDA"
	onCPUVar   = "LANPO_CUDATEST_ON_CPU"
)

// Device returns CUDA device 0 for a GPU test, or skips t saying what is
// missing: "not a CUDA build" (lanpo was built without CUDA=1) or "no CUDA
// device" (a CUDA build that sees none). Under LANPO_CUDATEST_ON_CPU it
// returns the CPU.
func Device(t testing.TB) gotch.Device {
	t.Helper()
	if OnCPU() {
		return gotch.CPU
	}
	return Real(t)
}

// Real is Device for tests that need CUDA itself: under
// LANPO_CUDATEST_ON_CPU they skip as well.
func Real(t testing.TB) gotch.Device {
	t.Helper()
	info, err := csrc.BuildInfo()
	if err != nil {
		t.Fatalf("csrc.BuildInfo: %v", err)
	}
	switch {
	case !info.BuiltWithCUDA:
		skip(t, "not a CUDA build: lanpo was built without CUDA=1 (libtorch %s at %s)", info.TorchVersion, info.LibtorchDir)
	case !info.CUDAAvailable || info.CUDADevices < 1:
		skip(t, "no CUDA device: a CUDA build, but libtorch sees %d device(s) (CUDA_VISIBLE_DEVICES=%q)", info.CUDADevices, os.Getenv("CUDA_VISIBLE_DEVICES"))
	}
	return gotch.CudaBuilder(0)
}

// Count is how many CUDA devices this process sees (0 on a CPU build).
func Count(t testing.TB) int {
	t.Helper()
	info, err := csrc.BuildInfo()
	if err != nil {
		t.Fatalf("csrc.BuildInfo: %v", err)
	}
	if !info.BuiltWithCUDA || !info.CUDAAvailable {
		return 0
	}
	return info.CUDADevices
}

// NeedNCCL skips t, saying why, on a build without NCCL (failing under
// LANPO_REQUIRE_CUDA).
func NeedNCCL(t testing.TB) {
	t.Helper()
	if _, nccl, why := csrc.DistSupport(); !nccl {
		skip(t, "no NCCL in this build: %s", why)
	}
}

// OnCPU reports whether LANPO_CUDATEST_ON_CPU runs the GPU tests on the
// CPU.
func OnCPU() bool { return os.Getenv(onCPUVar) == "1" }

func skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(requireVar) != "" {
		t.Fatalf("%s is set: %s", requireVar, msg)
	}
	t.Skip(msg)
}
