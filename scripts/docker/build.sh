#!/usr/bin/env bash
# The build stage of Dockerfile.cuda as one script: lanpo with CUDA=1 against
# the pip torch of the image's Python (its libtorch, and the CUDA 13 and NCCL
# pieces pip put beside it), kernels for sm_80/sm_90/sm_100, installed into
# DEST. `make cuda-check` runs this same script on a CPU machine against
# torch 2.11 from PyPI, so only Dockerfile.cuda's FROM and COPY lines are
# untested where no Docker engine runs.
#
# Environment: LIBTORCH (default: the directory of the torch python3
# imports), CUDA_HOME (default: /usr/local/cuda, else nvcc's toolkit, else
# pip's), DEST (default /usr/local/bin), VERSION (lanpo's version string).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${LIBTORCH:-}" ]; then
	LIBTORCH=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
fi
export LIBTORCH CUDA=1
dest=${DEST:-/usr/local/bin}
make build CUDA=1 ${VERSION:+VERSION=$VERSION}
install -D -m 0755 bin/lanpo "$dest/lanpo"
echo "docker build: lanpo (CUDA) against $LIBTORCH installed as $dest/lanpo" >&2
