#!/usr/bin/env bash
# Set everything up and run the whole test suite (offline: HF_HUB_OFFLINE=1, temporary HF_HOME).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
export HF_HUB_OFFLINE=1
HF_HOME=$(mktemp -d)
export HF_HOME
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
.venv/bin/python -m pytest -q "$@"
