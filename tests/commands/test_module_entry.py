"""`python -m draftset` is the same command line as the `draftset` script (where the script is
not on PATH: a bare venv, a notebook's `!python -m draftset`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import qwen3_tokenizer_dir


def _draftset(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "draftset", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=cwd,
    )


def test_python_m_draftset_runs_the_command_line():
    p = _draftset("--help")
    assert p.returncode == 0, p.stderr
    assert "usage: draftset" in p.stdout and "build" in p.stdout
    assert _draftset("build").returncode == 2  # the parser's own usage error, as the script's


def test_python_m_draftset_builds_with_worker_processes(tmp_path):
    """Spawned workers import the main module again: its guard keeps them from running the
    command line a second time."""
    rows = tmp_path / "chats.jsonl"
    chat = {
        "messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]
    }
    rows.write_text(json.dumps(chat) + "\n", encoding="utf-8")
    out = tmp_path / "set"
    p = _draftset(
        "build",
        str(rows),
        "--tokenizer",
        str(qwen3_tokenizer_dir()),
        "--eot-token",
        "<|im_end|>",
        "--out",
        str(out),
        "--workers",
        "2",
        "--no-progress",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text())["counts"]["total"]["rows_out"] == 1
