package trainer

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
)

// A run's device: parsed from the config (ParseDevice), checked against
// this build and machine (CheckDevice), and made current on the torch
// thread before the run's first CUDA work (UseDevice). Under a
// torchrun-style launch, "cuda" is the GPU of the process's LOCAL_RANK:
// one GPU per local rank.

// ParseDevice reads a device: "" or cpu, cuda (cuda:$LOCAL_RANK when a
// torchrun-style launcher set LOCAL_RANK, else cuda:0), cuda:N, or auto
// (the default: cuda when this build runs on CUDA and the machine has a
// GPU, else cpu).
func ParseDevice(s string) (gotch.Device, error) {
	d, _, err := parseDevice(s, os.Getenv("LOCAL_RANK"))
	return d, err
}

// parseDevice is ParseDevice with LOCAL_RANK's value given ("": unset);
// byLocalRank says the CUDA index came from it.
func parseDevice(s, localRank string) (d gotch.Device, byLocalRank bool, err error) {
	if s == DeviceAuto {
		s = "cpu"
		if cudaUsable() {
			s = "cuda"
		}
	}
	switch {
	case s == "" || s == "cpu":
		return gotch.CPU, false, nil
	case s == "cuda":
		if localRank == "" {
			return gotch.CudaBuilder(0), false, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(localRank))
		if err != nil || n < 0 {
			return gotch.CPU, false, fmt.Errorf("LOCAL_RANK %q is not a rank", localRank)
		}
		return gotch.CudaBuilder(uint(n)), true, nil
	}
	var n uint
	if _, err := fmt.Sscanf(s, "cuda:%d", &n); err == nil && fmt.Sprintf("cuda:%d", n) == s {
		return gotch.CudaBuilder(n), false, nil
	}
	return gotch.CPU, false, fmt.Errorf("%q: want auto, cpu, cuda or cuda:N", s)
}

// DeviceAuto is the device setting that picks the GPU where there is one.
const DeviceAuto = "auto"

// cudaUsable says whether this build runs on CUDA and sees a GPU.
var cudaUsable = func() bool {
	info, err := csrc.BuildInfo()
	return err == nil && info.BuiltWithCUDA && info.CUDAAvailable && info.CUDADevices > 0
}

// CheckDevice fails at the start of a run when the device is CUDA and this
// build or machine cannot run on it, saying which.
func CheckDevice(dev gotch.Device) error { return checkDevice(dev, false) }

func checkDevice(dev gotch.Device, byLocalRank bool) error {
	if !dev.IsCuda() {
		return nil
	}
	info, err := csrc.BuildInfo()
	if err != nil {
		return err
	}
	return deviceProblem(info, dev, byLocalRank)
}

// deviceProblem is CheckDevice's verdict on a build and machine that info
// describes; byLocalRank: the index is the launch's LOCAL_RANK.
func deviceProblem(info csrc.Info, dev gotch.Device, byLocalRank bool) error {
	if !dev.IsCuda() {
		return nil
	}
	visible := 0
	if info.CUDAAvailable {
		visible = info.CUDADevices
	}
	switch {
	case !info.BuiltWithCUDA:
		return fmt.Errorf("device %s, but this lanpo was built for CPU only (libtorch at %s); build with CUDA=1 and a CUDA libtorch (README: GPU and Docker)", devName(dev), info.LibtorchDir)
	case byLocalRank && int(dev.CInt()) >= visible:
		return fmt.Errorf("device cuda is the GPU of LOCAL_RANK=%d, but %d CUDA device(s) are visible to this process "+
			"(one GPU per local rank: start at most %d processes per node, or check CUDA_VISIBLE_DEVICES=%q)",
			dev.CInt(), visible, visible, os.Getenv("CUDA_VISIBLE_DEVICES"))
	case int(dev.CInt()) >= visible:
		return fmt.Errorf("device %s, but %d CUDA device(s) are visible to this process", devName(dev), visible)
	}
	return nil
}

// UseDevice resolves a run's device setting s (ParseDevice), checks that
// this build and machine have it (CheckDevice; an index taken from
// LOCAL_RANK is named as such) and, for CUDA, makes it the calling OS
// thread's current CUDA device. The CUDA runtime keeps the current device
// per thread and uses it for everything that names no device — the
// context a process creates first, cuBLAS handles, NCCL communicators, the
// caching allocator's default — so a rank that never sets it puts all of
// that on GPU 0. Call it on the locked thread that will do the torch work,
// before its first CUDA work.
func UseDevice(s string) (gotch.Device, error) {
	d, byLocalRank, err := parseDevice(s, os.Getenv("LOCAL_RANK"))
	if err != nil {
		return gotch.CPU, err
	}
	if err := checkDevice(d, byLocalRank); err != nil {
		return gotch.CPU, err
	}
	if d.IsCuda() {
		if _, err := csrc.SetCUDADevice(int(d.CInt())); err != nil {
			return gotch.CPU, err
		}
	}
	return d, nil
}

// deterministicCUDA turns on torch's deterministic algorithms for a run
// on CUDA, so that the same run gives the same bits, and a resumed run
// the bits of an uninterrupted one (CONTRIBUTING.md, Determinism): CUDA
// ops that accumulate with atomics (index_add, scatter_add, the backward of
// gather and index_select) take their deterministic variants, and one
// without any fails instead of drifting. cuBLAS needs
// CUBLAS_WORKSPACE_CONFIG for that (csrc.DeterministicCuBLASConfig sets it
// when unset; it counts only before the process's first matrix product on
// CUDA). A user's value that torch does not accept leaves the algorithms as
// they were, with a warning: enabling them would make every matrix product
// fail. It returns what restores the previous setting.
func deterministicCUDA() (restore func(), err error) {
	if ok, v := csrc.DeterministicCuBLASConfig(); !ok {
		log.Warn().Str("CUBLAS_WORKSPACE_CONFIG", v).Msg("not :4096:8 or :16:8: torch's deterministic algorithms stay off, so this CUDA run is not bitwise reproducible (nor is its resume)")
		return func() {}, nil
	}
	on, warnOnly := csrc.Deterministic()
	if err := csrc.SetDeterministic(true, false); err != nil {
		return nil, err
	}
	return func() { _ = csrc.SetDeterministic(on, warnOnly) }, nil
}

func devName(d gotch.Device) string {
	if d.IsCuda() {
		return fmt.Sprintf("cuda:%d", d.CInt())
	}
	return "cpu"
}
