package csrc_test

// An external test package: internal/cudatest imports csrc.

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/cudatest"
)

// TestCUDASetDevice: each visible device (up to two) becomes the calling
// thread's current one; an index past the visible devices, or a negative
// one, is an error naming how many there are, and leaves the current
// device as it was.
func TestCUDASetDevice(t *testing.T) {
	cudatest.Real(t)
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	n := cudatest.Count(t)
	t.Cleanup(func() { csrc.SetCUDADevice(0) }) // on this thread: cleanups run last-registered first
	for i := 0; i < min(n, 2); i++ {
		if ok, err := csrc.SetCUDADevice(i); err != nil || !ok {
			t.Fatalf("SetCUDADevice(%d) of %d: %v (supported %v)", i, n, err, ok)
		}
		if cur, ok, err := csrc.CurrentCUDADevice(); err != nil || !ok || cur != i {
			t.Errorf("after SetCUDADevice(%d): current device %d (supported %v, %v)", i, cur, ok, err)
		}
	}
	before, _, _ := csrc.CurrentCUDADevice()
	for _, bad := range []int{n, -1} {
		_, err := csrc.SetCUDADevice(bad)
		if want := fmt.Sprintf("%d CUDA device(s) are visible", n); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SetCUDADevice(%d) with %d devices: %v, want an error saying %q", bad, n, err, want)
		}
	}
	if cur, _, _ := csrc.CurrentCUDADevice(); cur != before {
		t.Errorf("a refused SetCUDADevice moved the current device from %d to %d", before, cur)
	}
}

// On a build without CUDA, setting or reading the current device does
// nothing and says it is not supported.
func TestDeviceCallsOnCPUBuild(t *testing.T) {
	info, err := csrc.BuildInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.BuiltWithCUDA {
		t.Skip("a CUDA build: TestCUDASetDevice covers it")
	}
	if ok, err := csrc.SetCUDADevice(0); ok || err != nil {
		t.Errorf("SetCUDADevice on a CPU build: supported %v, %v", ok, err)
	}
	if d, ok, err := csrc.CurrentCUDADevice(); ok || err != nil || d != -1 {
		t.Errorf("CurrentCUDADevice on a CPU build: %d, supported %v, %v", d, ok, err)
	}
	if ok, err := csrc.EmptyCUDACache(); ok || err != nil {
		t.Errorf("EmptyCUDACache on a CPU build: supported %v, %v", ok, err)
	}
	if name, ok, err := csrc.CUDADeviceName(gotch.CudaBuilder(0)); ok || err != nil || name != "" {
		t.Errorf("CUDADeviceName on a CPU build: %q, supported %v, %v", name, ok, err)
	}
}

// TestCUDAEmptyCacheReleasesMemory: a freed 256 MiB tensor stays reserved
// by the caching allocator until EmptyCUDACache hands it back to the
// driver (what a benchmark does before its baseline's process starts);
// the device has a name.
func TestCUDAEmptyCacheReleasesMemory(t *testing.T) {
	d := cudatest.Real(t)
	if name, ok, err := csrc.CUDADeviceName(d); err != nil || !ok || name == "" {
		t.Fatalf("CUDADeviceName: %q, supported %v, %v", name, ok, err)
	}
	x := ts.MustZeros([]int64{64 << 20}, gotch.Float, d) // 256 MiB
	if err := csrc.Synchronize(); err != nil {
		t.Fatal(err)
	}
	x.MustDrop()
	held, _, err := csrc.CUDAMemory(d)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := csrc.EmptyCUDACache(); err != nil || !ok {
		t.Fatalf("EmptyCUDACache: supported %v, %v", ok, err)
	}
	after, _, err := csrc.CUDAMemory(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reserved %d MiB after the drop, %d MiB after EmptyCUDACache; driver free %d → %d MiB",
		held.Reserved>>20, after.Reserved>>20, held.Free>>20, after.Free>>20)
	if held.Reserved-after.Reserved < 256<<20 {
		t.Errorf("EmptyCUDACache released %d MiB of the allocator's reserve, want ≥ 256", (held.Reserved-after.Reserved)>>20)
	}
}

// SetDeterministic sets what Deterministic reads (torch's global context),
// warn-only included.
func TestDeterministicSetting(t *testing.T) {
	on, warn := csrc.Deterministic()
	t.Cleanup(func() { csrc.SetDeterministic(on, warn) })
	for _, c := range []struct{ on, warn bool }{{true, false}, {true, true}, {false, false}} {
		if err := csrc.SetDeterministic(c.on, c.warn); err != nil {
			t.Fatal(err)
		}
		if gotOn, gotWarn := csrc.Deterministic(); gotOn != c.on || gotWarn != c.warn {
			t.Errorf("set (%v, %v), read (%v, %v)", c.on, c.warn, gotOn, gotWarn)
		}
	}
}

// DeterministicCuBLASConfig fills in :4096:8 when the variable is unset,
// keeps a deterministic value the user set, and reports any other.
func TestDeterministicCuBLASConfig(t *testing.T) {
	const name = "CUBLAS_WORKSPACE_CONFIG"
	for _, c := range []struct {
		set, want string
		ok        bool
	}{{"", ":4096:8", true}, {":16:8", ":16:8", true}, {":4096:8", ":4096:8", true}, {":0:0", ":0:0", false}} {
		t.Setenv(name, c.set)
		ok, v := csrc.DeterministicCuBLASConfig()
		if ok != c.ok || v != c.want || os.Getenv(name) != c.want {
			t.Errorf("%s=%q: ok %v value %q (environment %q), want %v %q", name, c.set, ok, v, os.Getenv(name), c.ok, c.want)
		}
	}
}
