"""The build's summary says when a source gave fewer rows than its ``count`` asked (all taken,
as before, but no longer silently), and when a weight cannot act (no ``--max-samples``)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import qwen3_tokenizer_dir
from rows import chats
from rows import write_jsonl as write_rows

from draftset.cli import main


def write_jsonl(path: Path, n: int) -> Path:
    return write_rows(path, chats(n))


def build(*args: str) -> int:
    argv = ["build", *args, "--tokenizer", str(qwen3_tokenizer_dir()), "--eot-token", "<|im_end|>"]
    return main([*argv, "--workers", "1", "--no-progress"])


def test_a_count_larger_than_its_source_is_noted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    (tmp_path / "r.yaml").write_text("out: o\nsources: [{path: a.jsonl, count: 100}]\n")
    assert build("r.yaml") == 0
    out = capsys.readouterr().out
    assert "note: source a: count 100 asked, 3 available (all taken)" in out, out
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["inputs"][0]["count"] == 100  # requested ...
    assert manifest["counts"]["per_source"]["a"]["available"] == 3  # ... and available
    assert manifest["counts"]["per_source"]["a"]["written"] == 3


def test_a_count_the_source_meets_is_not_noted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    assert build("a.jsonl@count=2", "--out", "o") == 0
    assert "asked" not in capsys.readouterr().out


def test_a_weight_zero_without_max_samples_is_noted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    assert build("a.jsonl@weight=0", "--out", "o") == 0
    out = capsys.readouterr().out
    assert "note: source a: weight 0 has no effect without --max-samples (all 3 rows taken)" in out
