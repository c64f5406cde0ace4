"""The build says when recorded reasoning is not trained because the template does not render
it (Llama-3.x has no reasoning field): the answers are supervised, their reasoning silently
gone. An outside probe found ~47 such rows of real reasoning data with no word about it."""

from __future__ import annotations

import json

from conftest import llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template
from rows import write_jsonl

from draftset.cli import main

ROWS = [
    {
        "id": "r",
        "messages": [
            {"role": "user", "content": "What is 17 * 3?"},
            {
                "role": "assistant",
                "content": "17 * 3 = 51.",
                "reasoning_content": "10 * 3 is 30 and 7 * 3 is 21, so 51.",
            },
        ],
    },
    {
        "id": "plain",
        "messages": [
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "Hi there!"},
        ],
    },
]


def build(tmp_path, tokenizer, *extra: str) -> tuple[str, dict]:
    src = write_jsonl(tmp_path / "r.jsonl", ROWS)
    out = tmp_path / "out"
    argv = ["build", str(src), "--tokenizer", str(tokenizer), "--out", str(out), *extra]
    assert main([*argv, "--workers", "1", "--no-progress"]) == 0
    return str(out), json.loads((out / "manifest.json").read_text())


def test_reasoning_the_template_does_not_render_is_counted_and_noted(tmp_path, capsys):
    template = str(trl_template("llama3_2"))  # trl's real Llama-3.2 template
    _, manifest = build(tmp_path, llama32_tokenizer_dir(), "--chat-template", template)
    assert manifest["counts"]["total"]["reasoning_not_rendered"] == 1
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "the recorded reasoning of 1 supervised answer is not rendered by this template" in out


def test_the_note_counts_several_answers_in_plain_english(tmp_path, capsys):
    """Two answers: "2 supervised answers's recorded reasoning" was the note's wording (seen on
    real reasoning data built for Phi-3.5, MiniMax-Text-01, Qwen2.5)."""
    second = {"role": "user", "content": "What is 18 * 3?"}
    answer = {"role": "assistant", "content": "54.", "reasoning_content": "51 + 3 is 54."}
    ROWS.append({"id": "r2", "messages": [second, answer]})
    try:
        template = str(trl_template("llama3_2"))
        build(tmp_path, llama32_tokenizer_dir(), "--chat-template", template)
    finally:
        ROWS.pop()
    out = " ".join(capsys.readouterr().out.split())
    assert "answers's" not in out
    assert "the recorded reasoning of 2 supervised answers is not rendered" in out


def test_reasoning_the_template_renders_is_not_noted(tmp_path, capsys):
    _, manifest = build(tmp_path, qwen3_tokenizer_dir())
    assert manifest["counts"]["total"]["reasoning_not_rendered"] == 0
    assert "not rendered by this template" not in capsys.readouterr().out
