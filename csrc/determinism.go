package csrc

/*
#include "lanpo.h"
*/
import "C"

import "os"

// SetDeterministic turns torch's deterministic algorithms on or off for
// the whole process (Python's torch.use_deterministic_algorithms(on,
// warn_only=warnOnly)): ops with a deterministic variant use it (index_add,
// scatter_add, the backward of gather and index_select on CUDA …), ops
// without one fail, or with warnOnly only warn. On CUDA, cuBLAS is
// deterministic only under a CUBLAS_WORKSPACE_CONFIG that
// DeterministicCuBLASConfig accepts; with it unset, every matrix product
// fails (torch's own check).
func SetDeterministic(on, warnOnly bool) error {
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	return takeError(C.lanpo_set_deterministic(b(on), b(warnOnly)))
}

// Deterministic reports torch's deterministic-algorithms setting.
func Deterministic() (on, warnOnly bool) {
	var e, w C.int
	if err := takeError(C.lanpo_get_deterministic(&e, &w)); err != nil {
		panic(err) // reads two flags of torch's global context
	}
	return e != 0, w != 0
}

// cublasDeterministic are the CUBLAS_WORKSPACE_CONFIG values under which
// torch accepts cuBLAS as deterministic (a fixed workspace per stream).
var cublasDeterministic = []string{":4096:8", ":16:8"}

// DeterministicCuBLASConfig sets CUBLAS_WORKSPACE_CONFIG to ":4096:8" when
// it is unset or empty and reports whether it now holds a value torch
// accepts as deterministic, and which. The variable only counts if set
// before the process's first cuBLAS call: torch reads it once, at the
// first matrix product on CUDA (and cuBLAS when it makes a handle). On a
// CPU-only run it is never read.
func DeterministicCuBLASConfig() (ok bool, value string) {
	const name = "CUBLAS_WORKSPACE_CONFIG"
	value = os.Getenv(name)
	if value == "" {
		value = cublasDeterministic[0]
		// With cgo, os.Setenv also sets the C environment libtorch reads.
		if err := os.Setenv(name, value); err != nil {
			return false, ""
		}
	}
	for _, v := range cublasDeterministic {
		if value == v {
			return true, value
		}
	}
	return false, value
}
