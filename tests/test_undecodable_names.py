"""A path whose name is not UTF-8 (a Latin-1 file name from an old archive) is one line, exit 2.

`build b\\xfe.jsonl` derived the source name ``b\\udcfe`` from it and died writing the ids
(``UnicodeEncodeError: ... surrogates not allowed``, a traceback, exit 1, after the whole
row step); so did ``--out o\\xfd`` (its manifest), and a data file of that name inside a source
folder.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.cli import main

CHAT = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
LATIN1 = os.fsdecode(b"b\xfe.jsonl")  # the name as Python hands it over: b\udcfe.jsonl

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bytes file names: Linux")


def test_a_source_whose_name_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / LATIN1).write_text(json.dumps(CHAT) + "\n")
    args = ["build", LATIN1, "--tokenizer", str(qwen3_tokenizer_dir()), "--out", "o"]
    assert main([*args, "--workers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "draftset: error: source b\\xfe.jsonl: its name is not UTF-8 (byte 0xfe); rename it"
    ], err
    assert not (tmp_path / "o").exists()


def test_an_out_whose_name_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.jsonl").write_text(json.dumps(CHAT) + "\n")
    out = os.fsdecode(b"o\xfd")
    args = ["build", "a.jsonl", "--tokenizer", str(qwen3_tokenizer_dir()), "--out", out]
    assert main([*args, "--workers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["draftset: error: --out o\\xfd: its name is not UTF-8 (byte 0xfd); rename it"]
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl"]


def test_a_data_file_whose_name_is_not_utf8_in_a_source_folder_is_one_line(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text(json.dumps(CHAT) + "\n")
    (tmp_path / "data" / LATIN1).write_text(json.dumps(CHAT) + "\n")
    args = ["build", "data", "--tokenizer", str(qwen3_tokenizer_dir()), "--out", "o"]
    assert main([*args, "--workers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        "data/b\\xfe.jsonl: its name is not UTF-8 (byte 0xfe); rename it"
    ), err
    assert not (tmp_path / "o").exists()
