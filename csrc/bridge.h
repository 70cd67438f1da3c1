// Internal helpers shared by lanpo's C++ files (never seen by Go).
#pragma once

#if !__has_include(<ATen/ATen.h>)
#error "libtorch headers not found: run `make deps` (third_party/prepare) to generate csrc/zz_cgo_flags.go"
#endif

#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "lanpo.h"

namespace lanpo {

inline char *dup_error(const char *where, const char *what) {
  std::string s = std::string(where) + ": " + what;
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

inline at::Tensor &tensor_ref(lanpo_tensor t) { return *static_cast<at::Tensor *>(t); }

inline lanpo_tensor new_handle(at::Tensor t) { return new at::Tensor(std::move(t)); }

}  // namespace lanpo

// LANPO_GUARD runs body and turns any exception into a returned error
// string naming the function; c10::Error loses its C++ backtrace, which
// means nothing to a Go caller (LANPO_CPP_BACKTRACE=1 prints it to stderr
// for lanpo's developers; TORCH_SHOW_CPP_STACKTRACES=1 makes it complete).
// The body is variadic so that commas in it (declarations, template
// arguments) do not split it into macro arguments.
#define LANPO_GUARD(where, ...)                                 \
  try {                                                         \
    __VA_ARGS__ return nullptr;                                 \
  } catch (const c10::Error &e) {                               \
    if (std::getenv("LANPO_CPP_BACKTRACE") != nullptr) {        \
      std::fprintf(stderr, "%s: %s\n", where, e.what());        \
    }                                                           \
    return lanpo::dup_error(where, e.what_without_backtrace()); \
  } catch (const std::exception &e) {                           \
    return lanpo::dup_error(where, e.what());                   \
  } catch (...) {                                               \
    return lanpo::dup_error(where, "unknown C++ exception");    \
  }
