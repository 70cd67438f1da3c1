// torch's deterministic algorithms, which libtorch's C++ API sets on its
// global context (Python's torch.use_deterministic_algorithms). C API in
// lanpo.h.
#include <ATen/Context.h>

#include "bridge.h"

extern "C" char *lanpo_set_deterministic(int enabled, int warn_only) {
  LANPO_GUARD("set_deterministic", { at::globalContext().setDeterministicAlgorithms(enabled != 0, warn_only != 0); })
}

extern "C" char *lanpo_get_deterministic(int *enabled, int *warn_only) {
  LANPO_GUARD("get_deterministic", {
    *enabled = at::globalContext().deterministicAlgorithms() ? 1 : 0;
    *warn_only = at::globalContext().deterministicAlgorithmsWarnOnly() ? 1 : 0;
  })
}
