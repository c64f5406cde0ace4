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


def test_a_kwarg_the_template_defaults_with_set_is_read(tmp_path, capsys):
    """DeepSeek-V3.1's own template reads ``thinking`` as ``{% if not thinking is defined %}{%
    set thinking = false %}{% endif %}``: the note said ``--template-kwargs thinking`` changes
    nothing (a name the template sets was taken for none of its inputs), while it made every
    answer not_generable (real data against vLLM, session 29). A name set only in a loop or
    branch (Qwen3's ``reasoning_content``) is still no input."""
    from real_families import REAL_FAMILIES

    folder = REAL_FAMILIES["deepseek_v3_1"].folder()
    src = write_rows(tmp_path / "a.jsonl", chats(2))
    argv = ["build", str(src), "--tokenizer", str(folder), "--out", str(tmp_path / "o")]
    argv += ["--workers", "1", "--no-progress"]
    assert main([*argv, "--template-kwargs", '{"thinking": false}']) == 0
    assert "reads no variable" not in capsys.readouterr().out
    assert main([*argv, "--overwrite", "--template-kwargs", '{"thinkng": true}']) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--template-kwargs thinkng: the chat template reads no variable" in out, out
    assert "(did you mean thinking?)" in out, out


def test_a_name_the_template_only_sets_is_no_input() -> None:
    from draftset.pipeline.build import _template_variables

    text = (
        "{% for m in messages %}{% set reasoning_content = m.reasoning_content %}"
        "{{ reasoning_content }}{% endfor %}{{ x | default('') }}{% set y = 1 %}{{ y }}"
    )
    assert _template_variables(text) == {"messages", "x"}
