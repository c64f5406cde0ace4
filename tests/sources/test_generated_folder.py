"""A source folder holding `draftset generate`'s input (``prompts.jsonl``) and its output
(``answers.jsonl`` with ``answers.run.json``): the folder is generate's work, so build reads the
answers and skips the prompts they answer, saying so. Both were read before: the answered rows
trained and their prompts were queued again (every row counted twice)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import qwen3_tokenizer_dir
from fault_server import FaultServer

from draftset.cli import main
from draftset.sources import read

FAST = ["--backoff", "0.01", "--backoff-cap", "0.05", "--health-interval", "0.1", "--no-progress"]
PROMPTS = [{"id": f"p{i}", "prompt": f"question {i}"} for i in range(3)]


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_build_of_generates_folder_reads_the_answers_not_their_prompts_again(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    _jsonl(work / "prompts.jsonl", PROMPTS)
    with FaultServer() as server:
        args = ["generate", str(work / "prompts.jsonl"), "--out", str(work / "answers.jsonl")]
        assert main([*args, "--endpoint", server.url, *FAST]) == 0
    capsys.readouterr()
    out = tmp_path / "set"
    args = ["build", str(work), "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(out)]
    assert main([*args, "--workers", "1"]) == 0
    said = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]["total"]
    assert counts["read"] == 3 and counts["written"] == 3, counts
    assert counts["needs_generation"] == 0
    assert not (out / "prompts.jsonl").exists() or not (out / "prompts.jsonl").read_text()
    assert "prompts.jsonl (the input draftset generate answered into answers.jsonl" in said


def test_a_jsonl_file_generate_did_not_read_is_read(tmp_path):
    """Only the input the run file names is skipped: another prompts file stays a source."""
    _jsonl(tmp_path / "prompts.jsonl", PROMPTS)
    _jsonl(tmp_path / "more.jsonl", PROMPTS)
    _jsonl(tmp_path / "answers.jsonl", [{"id": "p0", "messages": []}])
    run = {"format": "draftset-generate-run", "settings": {"inputs": {"prompts": {}}}}
    (tmp_path / "answers.run.json").write_text(json.dumps(run))
    files, skipped = read.scan_source(tmp_path)
    assert [p.name for p in files] == ["answers.jsonl", "more.jsonl"]
    assert skipped[-1]["path"] == "prompts.jsonl"
    assert skipped[-1]["why"].startswith("the input draftset generate answered into answers.jsonl")
