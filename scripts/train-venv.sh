#!/usr/bin/env bash
# A venv where `speculators train` runs on a draftset set: speculators 0.9.0 and what its
# trainer imports, pinned to the versions it accepts (transformers<=5.19, datasets<=5.1, which
# draftset's own venv is newer than), the CPU build of torch, and draftset itself.
# Usage: scripts/train-venv.sh [DIR]   (default .venv-train; rerunning it is a no-op)
# Then:  DIR/bin/speculators train --data-path OUT --verifier-name-or-path MODEL
#          --d2t-path OUT/d2t-N.npy --t2d-path OUT/t2d-N.npy --draft-vocab-size N ...
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-train}
PY=${PYTHON:-python3}
# speculators' own dependency list also names torchvision and torchaudio (never imported by its
# trainer; their wheels would pull CUDA builds) and mooncake extras: it is installed --no-deps,
# with every module its trainer and data loader import, pinned
BARE=("speculators==0.9.0" "hs-connectors==0.9.0")
PINS=(
  "torch==2.13.0"
  "transformers==5.19.0" "datasets==5.1.0" "tokenizers==0.23.3" "huggingface_hub==2.4.0"
  "pydantic-settings==2.16.3" "httpx==0.28.1" "loguru==0.7.3" "aiohttp==3.14.5"
  "openai==3.57.0" "typer==0.29.2" "click==8.5.1" "psutil==7.2.2" "safetensors==0.8.0"
  "tqdm==4.70.1" "protobuf==7.36.2" "numpy==2.4.6" "pyarrow==26.0.1" "pyyaml==6.0.4"
  "zstandard==0.25.0" "rich==15.0.0"
)
STAMP="$VENV/.draftset-train-pins"
WANT=$(printf '%s\n' "${BARE[@]}" "${PINS[@]}")
if [ -x "$VENV/bin/speculators" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; then
  exit 0  # already built with these pins
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" "${PINS[@]}"  # with their own (small, pure-Python) dependencies
"${PIP[@]}" --no-deps "${BARE[@]}"
"${PIP[@]}" --no-deps -e .
"$VENV/bin/python" -c "import speculators.train.cli, draftset"  # fails loudly if anything is missing
echo "$WANT" > "$STAMP"
