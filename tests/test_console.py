"""Progress where standard error is a log (nohup, Slurm, CI, a pipe): a bar drew nothing there,
so a day-long build or generate printed nothing but its final summary."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir
from fault_server import FaultServer
from rich.console import Console

import draftset.console as console_mod
from draftset.cli import main
from draftset.console import ProgressLines


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeClock, io.StringIO, ProgressLines]:
    clock = FakeClock()
    monkeypatch.setattr(console_mod.time, "monotonic", clock)
    text = io.StringIO()
    return clock, text, ProgressLines("build", Console(file=text, width=200), every=60)


def test_a_line_a_minute_with_rate_elapsed_and_eta_then_a_last_one(monkeypatch):
    clock, text, lines = _lines(monkeypatch)
    for second, done in ((30, 150), (61, 305), (100, 500), (125, 625), (130, 650)):
        clock.now = 1000.0 + second
        lines.update(done, 1000)
    lines.close()
    assert text.getvalue().splitlines() == [
        "build: 305 of 1,000 rows (30%), 5 rows/s, 0:01:01 elapsed, ETA 0:02:19",
        "build: 625 of 1,000 rows (62%), 5 rows/s, 0:02:05 elapsed, ETA 0:01:15",
        "build: 650 of 1,000 rows (65%), 5 rows/s, 0:02:10 elapsed, ETA 0:01:10",
    ]


def test_a_run_shorter_than_the_interval_prints_nothing(monkeypatch):
    clock, text, lines = _lines(monkeypatch)
    clock.now += 59
    lines.update(10, 10)
    lines.close()
    assert text.getvalue() == ""


def test_rates_of_the_caller_replace_rows_per_second_and_no_eta_once_done(monkeypatch):
    clock, text, lines = _lines(monkeypatch)
    clock.now += 3600
    lines.update(40, 40, "2.0 req/s, 310 tok/s")
    assert text.getvalue() == "build: 40 of 40 rows (100%), 2.0 req/s, 310 tok/s, 1:00:00 elapsed\n"


CHAT = {
    "messages": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue, like a clear summer sky over a calm sea."},
    ]
}


def test_build_in_a_log_prints_progress_lines(tmp_path: Path, capsys, monkeypatch):
    """capsys's standard error is no terminal, as a Slurm log is: the build printed no progress
    at all there (its bar was for terminals only)."""
    monkeypatch.setattr(ProgressLines.__init__, "__defaults__", (0.0,))  # a line an update
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps(CHAT) + "\n" for _ in range(3)), encoding="utf-8")
    tok = str(qwen3_tokenizer_dir())
    argv = ["build", str(src), "--tokenizer", tok, "--workers", "1", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("build: ")]
    assert progress and progress[-1].startswith("build: 3 of 3 rows (100%), "), err
    assert "rows/s" in progress[-1] and "elapsed" in progress[-1]


def test_generate_in_a_log_prints_progress_lines(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setattr(ProgressLines.__init__, "__defaults__", (0.0,))  # a line an update
    src = tmp_path / "p.jsonl"
    src.write_text(
        "".join(json.dumps({"id": f"r{i}", "prompt": f"hi {i}"}) + "\n" for i in range(3)),
        encoding="utf-8",
    )
    with FaultServer() as srv:
        argv = ["generate", str(src), "--endpoint", srv.url, "--out", str(tmp_path / "a.jsonl")]
        assert main(argv) == 0
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("generate: ")]
    assert progress and progress[-1].startswith("generate: 3 of 3 rows (100%), "), err
    assert "req/s" in progress[-1] and "tok/s" in progress[-1]
