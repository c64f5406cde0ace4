"""A hub id offline is read from the hub cache when the cache holds it.

``HF_HUB_OFFLINE=1`` is how a model downloaded on a login node is used on compute nodes without
network: transformers reads ``Qwen/Qwen3-8B`` from the cache then. draftset refused every hub
id offline ("as a hub id it needs the network: unset HF_HUB_OFFLINE"), cached or not, on the
command line and in a recipe.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.cli import main
from draftset.core.hub import cached_model_folder
from draftset.mask.template import TokenizerError, resolve_tokenizer_path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "serving" / "models" / "qwen3"


def hub_cache(home: Path, repo: str = "Qwen/Qwen3-8B", main: bool = True) -> Path:
    """A hub cache under ``home`` (``HF_HOME``) holding ``repo``'s tokenizer files as
    huggingface_hub lays them out: blobs/, snapshots/<rev>/, refs/main."""
    folder = home / "hub" / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    (folder / "blobs").mkdir()
    for f in qwen3_tokenizer_dir().iterdir():
        shutil.copy(f, snap / f.name)
    for f in CONFIG.glob("*.json"):
        shutil.copy(f, snap / f.name)
    if main:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text("0123abc")
    return snap


@pytest.fixture()
def offline_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "hf"
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return home


def test_a_cached_hub_id_is_found(offline_home):
    snap = hub_cache(offline_home)
    assert cached_model_folder("Qwen/Qwen3-8B") == snap
    assert cached_model_folder("Qwen/Qwen3-0.6B") is None
    assert resolve_tokenizer_path("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"


def test_hf_hub_cache_names_the_cache_itself(offline_home, monkeypatch, tmp_path):
    snap = hub_cache(tmp_path / "elsewhere")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere" / "hub"))
    assert cached_model_folder("Qwen/Qwen3-8B") == snap


def test_an_uncached_hub_id_offline_is_still_refused(offline_home):
    hub_cache(offline_home, main=False)  # no refs/main: which revision is unknown
    with pytest.raises(TokenizerError, match="HF_HUB_OFFLINE is set"):
        resolve_tokenizer_path("Qwen/Qwen3-8B")
    with pytest.raises(TokenizerError, match="HF_HUB_OFFLINE is set"):
        resolve_tokenizer_path("Qwen/Qwen3-0.6B")


@pytest.mark.parametrize("how", ["command line", "recipe"])
def test_a_cached_hub_id_builds_offline(offline_home, tmp_path, capsys, how):
    hub_cache(offline_home)
    src = tmp_path / "a.jsonl"
    chat = {
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue, like a clear summer sky over a calm sea."},
        ]
    }
    src.write_text(json.dumps(chat) + "\n", encoding="utf-8")
    stops = ["<|im_end|>", "<|endoftext|>"]
    if how == "recipe":
        recipe = tmp_path / "r.yaml"
        recipe.write_text(
            json.dumps(
                {
                    "tokenizer": "Qwen/Qwen3-8B",
                    "out": "o",
                    "eot_tokens": stops,
                    "workers": 1,
                    "sources": ["a.jsonl"],
                }
            ),
            encoding="utf-8",
        )
        argv = ["build", str(recipe)]
    else:
        argv = ["build", str(src), "--tokenizer", "Qwen/Qwen3-8B", "--out", "o", "--workers", "1"]
        argv += [a for s in stops for a in ("--eot-token", s)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "draftset", *argv, "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "o" / "manifest.json").is_file()
    # show and report decode the set's rows with the hub id's cached tokenizer (they said
    # "cannot decode: the set's tokenizer is the hub id ..., and HF_HUB_OFFLINE is set")
    assert main(["show", "o", "--row", "0"]) == 0
    assert "Blue, like a clear summer sky" in capsys.readouterr().out
    assert main(["report", "o", "-o", "page.html"]) == 0
    assert "Cannot decode" not in (tmp_path / "page.html").read_text(encoding="utf-8")
