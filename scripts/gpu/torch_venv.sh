#!/usr/bin/env bash
# scripts/gpu/torch_venv.sh: prints the path of a venv holding PyPI's
# torch==2.11.0 (cu130) with every nvidia-* wheel it depends on, and
# transformers 5.17.0 — the python a lent GPU machine has (its python is
# 3.12, this 3.11: the same torch release and ABI) — making it first if it
# is missing. Several GB,
# cached under ~/.cache/lanpo/venvs; only make gpu-rehearsal asks for it
# (never make test or CI). The torch wheel already cached by make deps is
# installed from the cache; its dependencies come from PyPI.
set -euo pipefail
cache=${XDG_CACHE_HOME:-$HOME/.cache}/lanpo
venv=$cache/venvs/torch-2.11.0-cu130
wheel=$cache/wheels/torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl
if [ -f "$venv/.complete" ]; then
	echo "$venv"
	exit 0
fi
echo "torch-venv: making $venv (torch 2.11.0 and its CUDA 13 wheels from PyPI, several GB)" >&2
rm -rf "$venv"
python3 -m venv "$venv"
pkg=torch==2.11.0
[ -f "$wheel" ] && pkg=$wheel
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir "$pkg" transformers==5.17.0 >&2
"$venv/bin/python" -c 'import torch; assert torch.__version__.startswith("2.11.0"), torch.__version__' >&2
touch "$venv/.complete"
echo "$venv"
