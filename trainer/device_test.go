package trainer

import (
	"strings"
	"testing"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
)

// Which device a rank picks: "cuda" is cuda:$LOCAL_RANK under a launch
// (cuda:0 without one), cuda:N is N whatever LOCAL_RANK says; and the check
// against the machine names LOCAL_RANK when the index came from it.
// TestCUDADeviceFromLocalRank checks the same on a GPU, device made
// current included.
func TestDeviceFromLocalRank(t *testing.T) {
	for _, c := range []struct {
		spec, localRank string
		want            gotch.Device
		byLocalRank     bool
		err             string
	}{
		{"cuda", "", gotch.CudaBuilder(0), false, ""},
		{"cuda", "3", gotch.CudaBuilder(3), true, ""},
		{"cuda", " 1", gotch.CudaBuilder(1), true, ""},
		{"cuda:1", "3", gotch.CudaBuilder(1), false, ""},
		{"cpu", "3", gotch.CPU, false, ""},
		{"", "3", gotch.CPU, false, ""},
		{"cuda", "x", gotch.CPU, false, `LOCAL_RANK "x" is not a rank`},
		{"cuda", "-1", gotch.CPU, false, `LOCAL_RANK "-1" is not a rank`},
		{"gpu", "", gotch.CPU, false, `"gpu": want auto, cpu, cuda or cuda:N`},
	} {
		d, by, err := parseDevice(c.spec, c.localRank)
		if d != c.want || by != c.byLocalRank || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q under LOCAL_RANK=%q: %v (by LOCAL_RANK %v), %v; want %v (%v), %q", c.spec, c.localRank, d, by, err, c.want, c.byLocalRank, c.err)
		}
	}
	// auto: the GPU (of LOCAL_RANK) where this build has one, else the CPU.
	defer func(f func() bool) { cudaUsable = f }(cudaUsable)
	for _, gpu := range []bool{false, true} {
		cudaUsable = func() bool { return gpu }
		for _, lr := range []string{"", "2"} {
			d, by, err := parseDevice(DeviceAuto, lr)
			want := gotch.CPU
			if gpu {
				want = gotch.CudaBuilder(0)
				if lr == "2" {
					want = gotch.CudaBuilder(2)
				}
			}
			if err != nil || d != want || by != (gpu && lr != "") {
				t.Errorf("auto with a GPU %v, LOCAL_RANK %q: %v (by LOCAL_RANK %v), %v; want %v", gpu, lr, d, by, err, want)
			}
		}
	}
	if DefaultConfig().Device != DeviceAuto {
		t.Errorf("the default device is %q", DefaultConfig().Device)
	}
	oneGPU := csrc.Info{BuiltWithCUDA: true, CUDAAvailable: true, CUDADevices: 1}
	noGPU := csrc.Info{BuiltWithCUDA: true}
	cpuBuild := csrc.Info{LibtorchDir: "/opt/libtorch"}
	for _, c := range []struct {
		info        csrc.Info
		dev         gotch.Device
		byLocalRank bool
		err         []string
	}{
		{oneGPU, gotch.CudaBuilder(0), true, nil},
		{oneGPU, gotch.CudaBuilder(0), false, nil},
		{oneGPU, gotch.CPU, false, nil},
		{cpuBuild, gotch.CPU, false, nil},
		{oneGPU, gotch.CudaBuilder(1), true, []string{"LOCAL_RANK=1", "1 CUDA device(s) are visible", "at most 1 processes per node"}},
		{oneGPU, gotch.CudaBuilder(1), false, []string{"device cuda:1, but 1 CUDA device(s) are visible"}},
		{noGPU, gotch.CudaBuilder(0), true, []string{"LOCAL_RANK=0", "0 CUDA device(s) are visible"}},
		{cpuBuild, gotch.CudaBuilder(0), true, []string{"device cuda:0, but this lanpo was built for CPU only (libtorch at /opt/libtorch)"}},
	} {
		err := deviceProblem(c.info, c.dev, c.byLocalRank)
		if (err == nil) != (c.err == nil) {
			t.Errorf("%+v %v (by LOCAL_RANK %v): %v, want an error saying %q", c.info, c.dev, c.byLocalRank, err, c.err)
			continue
		}
		for _, want := range c.err {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%+v %v (by LOCAL_RANK %v): %v, want it to say %q", c.info, c.dev, c.byLocalRank, err, want)
			}
		}
	}
	// On this machine: the CPU needs nothing; a CUDA device on a CPU build
	// is refused before anything is made current.
	if d, err := UseDevice("cpu"); err != nil || d != gotch.CPU {
		t.Errorf("UseDevice(cpu): %v, %v", d, err)
	}
	if info, _ := csrc.BuildInfo(); !info.BuiltWithCUDA {
		t.Setenv("LOCAL_RANK", "2")
		if _, err := UseDevice("cuda"); err == nil || !strings.Contains(err.Error(), "device cuda:2, but this lanpo was built for CPU only") {
			t.Errorf("UseDevice(cuda) under LOCAL_RANK=2 on a CPU build: %v", err)
		}
	}
}

// A CUDA run's determinism switch: torch's deterministic algorithms on
// (not warn-only) and restored afterwards; with a CUBLAS_WORKSPACE_CONFIG
// torch would refuse, left as they were.
func TestDeterministicRunSetting(t *testing.T) {
	on, warn := csrc.Deterministic()
	t.Cleanup(func() { csrc.SetDeterministic(on, warn) })
	csrc.SetDeterministic(false, false)
	t.Setenv("CUBLAS_WORKSPACE_CONFIG", "")
	restore, err := deterministicCUDA()
	if err != nil {
		t.Fatal(err)
	}
	if gotOn, gotWarn := csrc.Deterministic(); !gotOn || gotWarn {
		t.Errorf("during the run: deterministic %v, warn only %v", gotOn, gotWarn)
	}
	restore()
	if gotOn, _ := csrc.Deterministic(); gotOn {
		t.Error("the setting was not restored")
	}
	t.Setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
	if restore, err = deterministicCUDA(); err != nil {
		t.Fatal(err)
	}
	if gotOn, _ := csrc.Deterministic(); gotOn {
		t.Error("deterministic algorithms turned on under CUBLAS_WORKSPACE_CONFIG=:0:0: every CUDA matrix product would fail")
	}
	restore()
}
