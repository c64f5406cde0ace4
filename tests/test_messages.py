"""What the commands say to a newcomer (issue 25, items 13-21): one line instead of a traceback
or a wait, hints built from what was seen, names that cannot drive the terminal, help that
explains every option, output that reads well when piped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.cli import main

ESC_NAME = "e\x1b[2Jvil\x1b]0;owned\x07"
CHAT = {
    "messages": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue, like a clear summer sky over a calm sea."},
    ]
}


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build(*args: str) -> int:
    return main(["build", "--tokenizer", str(qwen3_tokenizer_dir()), "--workers", "1", *args])


# --- 13. names from the user's files never reach the terminal raw ---------------------------------
def test_escape_sequences_in_file_names_are_shown_escaped(tmp_path, capsys):
    """A source file named with ESC [2J (clear screen) / OSC 0 (window title): the build summary
    printed it raw before (table row and the skipped-entries note)."""
    folder = tmp_path / "data"
    write_jsonl(folder / "chats.jsonl", [CHAT])
    (folder / f"{ESC_NAME}.md").write_text("notes")  # skipped on purpose: named in a note
    named = write_jsonl(tmp_path / f"{ESC_NAME}.jsonl", [CHAT])
    assert build("--out", str(tmp_path / "out"), str(folder), str(named)) == 0
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out and "\x07" not in printed.out
    assert "e\\x1b[2Jvil\\x1b]0;owned\\x07" in printed.out  # the table's source name and the note


def test_escape_sequences_in_an_error_line_are_shown_escaped(tmp_path, capsys):
    assert build("--out", str(tmp_path / "out"), str(tmp_path / f"{ESC_NAME}.jsonl")) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "source not found" in err and "\\x1b[2J" in err
