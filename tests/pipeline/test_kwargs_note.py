"""A ``--template-kwargs`` key the chat template never reads changes nothing: a misspelled
``enable_thinkng`` built the set with thinking on, without a word (vLLM drops such a key too)."""

from __future__ import annotations

from pathlib import Path

from conftest import qwen3_tokenizer_dir
from rows import chats
from rows import write_jsonl as write_rows

from draftset.cli import main


def build(tmp_path: Path, kwargs: str) -> int:
    src = write_rows(tmp_path / "a.jsonl", chats(2))
    argv = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir())]
    argv += ["--eot-token", "<|im_end|>", "--out", str(tmp_path / "o"), "--overwrite"]
    return main([*argv, "--template-kwargs", kwargs, "--workers", "1", "--no-progress"])


def test_a_template_kwarg_the_template_never_reads_is_noted(tmp_path, capsys):
    assert build(tmp_path, '{"enable_thinkng": false}') == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "note: --template-kwargs enable_thinkng: the chat template reads no variable of that"
        " name, so it changes nothing (did you mean enable_thinking?)"
    ) in out, out


def test_a_template_kwarg_the_template_reads_is_not_noted(tmp_path, capsys):
    assert build(tmp_path, '{"enable_thinking": false}') == 0
    assert "reads no variable" not in capsys.readouterr().out
