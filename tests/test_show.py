"""`draftset show`: one row with its supervised tokens highlighted, facts, token boundaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir
from rich.console import Console

from draftset.build import BuildOptions, run_build
from draftset.read import Source
from draftset.show import SUPERVISED_STYLE, main, show

ROWS = [
    {
        "id": "a",
        "messages": [
            {"role": "user", "content": "Say [bold]hi[/bold] <script>x</script>"},
            {"role": "assistant", "content": "Hello there, friend."},
        ],
    },
    {
        "id": "b",
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    },
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("show")
    src = root / "a.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return run_build(
        BuildOptions([Source("a", src)], str(qwen3_tokenizer_dir()), root / "out", workers=1)
    ).out


def render(folder: Path, **kw) -> Console:
    console = Console(record=True, width=100, color_system="truecolor")
    show(folder, console=console, **kw)
    return console


def test_show_highlights_supervised_text_and_prints_facts(folder):
    console = render(folder, row_id="a")
    text = console.export_text(clear=False)
    assert "Hello there, friend.<|im_end|>" in text
    assert "[bold]hi[/bold] <script>x</script>" in text  # dataset text is never parsed as markup
    for fact in ("source", "tokens", "supervised tokens", "truncated", "False", "DFlash anchors"):
        assert fact in text
    segments = [(s.text, str(s.style)) for s in console._record_buffer]
    supervised = "".join(t for t, style in segments if style == SUPERVISED_STYLE)
    assert supervised.startswith("supervised (loss_mask = 1)")  # the legend
    assert supervised.endswith("Hello there, friend.<|im_end|>") and "Say" not in supervised


def test_show_tokens_marks_boundaries(folder):
    console = render(folder, row=1, tokens=True)
    styles = [str(s.style) for s in console._record_buffer if s.text and "<|im_start|>" in s.text]
    assert styles  # special tokens come out as single tokens
    html = console.export_html(clear=False)
    assert "4" in console.export_text(clear=False) and "background-color" in html


def test_show_cli_errors_exit_2(folder, tmp_path, capsys):
    assert main([str(folder), "--row", "5"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main([str(folder), "--id", "nope"]) == 2
    assert main([str(tmp_path)]) == 2  # neither --row nor --id
    assert main([str(tmp_path / "missing"), "--row", "0"]) == 2
    assert main([str(folder), "--row", "0"]) == 0
