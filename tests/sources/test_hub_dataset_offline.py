"""``hf:`` sources under ``HF_HUB_OFFLINE=1`` are read from the `datasets` cache, as `datasets`
reads them offline (they were refused, cached or not); one not cached is one line naming the
cache and the variable.

The cache is made by `datasets` itself (no network): its json builder prepares a local file,
and the prepared folder is moved where an online ``load_dataset("org/set")`` leaves it
(``HF_DATASETS_CACHE/org___set/default/<version>/<hash>/``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import qwen3_tokenizer_dir

from draftset.cli import main
from draftset.sources.read import Source, SourceError, iter_raw_rows

datasets = pytest.importorskip("datasets")

PROMPTS = [{"prompt": f"question {i}"} for i in range(3)]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A `datasets` cache holding hub dataset ``org/set`` (split train)."""
    from datasets.packaged_modules.json.json import Json

    root = tmp_path / "datasets-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in PROMPTS))
    Json(data_files={"train": str(data)}, dataset_name="set", hash="0" * 16).download_and_prepare()
    (root / "org___set").mkdir()
    (prepared,) = (root / "set").glob("default-*")
    os.rename(prepared, root / "org___set" / "default")
    return root


def test_a_cached_hub_dataset_is_read_offline(cache):
    rows = list(iter_raw_rows(Source("set", Path("hf:org/set"))))
    assert [r.data for r in rows] == PROMPTS


def test_build_reads_a_cached_hub_dataset_offline(cache, tmp_path, capsys):
    out = tmp_path / "o"
    args = ["build", "hf:org/set", "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(out)]
    assert main([*args, "--workers", "1"]) == 0, capsys.readouterr().err
    lines = (out / "prompts.jsonl").read_text().splitlines()
    assert len(lines) == len(PROMPTS)


def test_a_hub_dataset_the_cache_lacks_is_one_line_offline(cache):
    with pytest.raises(SourceError) as exc:
        list(iter_raw_rows(Source("other", Path("hf:org/other"))))
    assert str(exc.value) == (
        "hf:org/other: a hub dataset needs the network, and HF_HUB_OFFLINE is set"
        f" (the datasets cache, {cache}, does not hold it)"
    )
