"""Paths in a recipe are relative to the recipe's folder, never to the current one.

An outside probe found: `chat_template: cwd.jinja` in r/ct.yaml, with no r/cwd.jinja but a
./cwd.jinja where the command ran, built with the current folder's template, exit 0 (the
tokenizer had the same fallback). A source path already was resolved against the recipe's
folder alone. Now every file path of a recipe is; a missing one is one line naming the path it
was resolved to, exit 2, before any work. A `tokenizer:` that is no folder next to the recipe
stays a hub id, unless a folder of that name in the current folder would be read instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.api import build_options
from draftset.cli import main
from draftset.config.recipe import RecipeError

TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def recipe(tmp: Path, **keys: object) -> Path:
    """``tmp/r/ct.yaml`` with one source beside it; the test runs in ``tmp``."""
    folder = tmp / "r"
    folder.mkdir(exist_ok=True)
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    (folder / "c.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    data = {
        "tokenizer": str(qwen3_tokenizer_dir()),
        "eot_tokens": ["<|im_end|>"],
        "out": "out",
        "sources": ["c.jsonl"],
        **keys,
    }
    path = folder / "ct.yaml"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("draftset: error: "), err
    return err[0]


def test_a_chat_template_missing_beside_the_recipe_is_not_read_from_the_current_folder(
    tmp_path, monkeypatch, capsys, no_work
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cwd.jinja").write_text(TEMPLATE, encoding="utf-8")
    recipe(tmp_path, chat_template="cwd.jinja")
    assert main(["build", "r/ct.yaml"]) == 2  # the recipe named relative: its path in full
    line = one_error_line(capsys)
    assert f"chat_template: file not found: {tmp_path / 'r' / 'cwd.jinja'}" in line, line
    assert "relative to its folder" in line
    assert not (tmp_path / "r" / "out").exists()


def test_a_chat_template_beside_the_recipe_is_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = recipe(tmp_path, chat_template="t.jinja")
    (path.parent / "t.jinja").write_text(TEMPLATE, encoding="utf-8")
    assert build_options(path).chat_template_path == str(tmp_path / "r" / "t.jinja")


def test_a_command_line_chat_template_overrides_a_missing_one(tmp_path, monkeypatch):
    """The recipe's path is checked only when it is used."""
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine.jinja"
    mine.write_text(TEMPLATE, encoding="utf-8")
    path = recipe(tmp_path, chat_template="gone.jinja")
    assert build_options(path, chat_template=str(mine)).chat_template_path == str(mine)


def test_a_decontaminate_file_missing_beside_the_recipe_names_where_it_was_looked_for(
    tmp_path, monkeypatch, capsys, no_work
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.txt").write_text("What is 2+2?\n", encoding="utf-8")
    path = recipe(tmp_path, decontaminate=["bench.txt"])
    assert main(["build", str(path)]) == 2
    line = one_error_line(capsys)
    assert f"decontaminate: file not found: {tmp_path / 'r' / 'bench.txt'}" in line, line


def test_a_tokenizer_folder_beside_the_recipe_is_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = recipe(tmp_path, tokenizer="tok")
    (path.parent / "tok").mkdir()
    assert build_options(path).tokenizer == str(tmp_path / "r" / "tok")


def test_a_tokenizer_only_in_the_current_folder_is_refused(tmp_path, monkeypatch, capsys, no_work):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tok").mkdir()
    path = recipe(tmp_path, tokenizer="tok")
    assert main(["build", str(path)]) == 2
    line = one_error_line(capsys)
    assert f"tokenizer: no folder tok beside the recipe ({tmp_path / 'r' / 'tok'})" in line, line


@pytest.mark.parametrize("given", ["./tok", "../tok", "models/a/tok"])
def test_a_tokenizer_path_missing_beside_the_recipe_is_named_resolved(
    tmp_path, monkeypatch, capsys, no_work, given
):
    """A value that can only be a path (./, ../, more than one /) is the recipe folder's."""
    cwd = tmp_path / "w" / "x"
    (cwd / given).mkdir(parents=True)  # from the current folder: not read
    monkeypatch.chdir(cwd)
    path = recipe(tmp_path, tokenizer=given)
    with pytest.raises(RecipeError, match="tokenizer: folder not found: "):
        build_options(path)
    assert main(["build", str(path)]) == 2
    resolved = os.path.normpath(tmp_path / "r" / given)
    assert f"folder not found: {resolved} (paths in a recipe" in one_error_line(capsys)


def test_a_hub_id_stays_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    path = recipe(tmp_path, tokenizer="Qwen/Qwen3-8B")
    assert build_options(path).tokenizer == "Qwen/Qwen3-8B"


def test_a_hub_id_offline_names_the_folder_it_looked_in(tmp_path, monkeypatch, capsys, no_work):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = recipe(tmp_path, tokenizer="Qwen/Qwen3-8B")
    assert main(["build", str(path)]) == 2
    line = one_error_line(capsys)
    assert f"no folder Qwen/Qwen3-8B beside the recipe ({tmp_path / 'r' / 'Qwen'}" in line, line
    assert "HF_HUB_OFFLINE" in line


def test_run_reads_the_same_paths(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cwd.jinja").write_text(TEMPLATE, encoding="utf-8")
    path = recipe(
        tmp_path, chat_template="cwd.jinja", generate={"endpoints": ["http://127.0.0.1:9/v1"]}
    )
    assert main(["run", str(path)]) == 2
    assert f"file not found: {tmp_path / 'r' / 'cwd.jinja'}" in one_error_line(capsys)


def test_a_recipe_out_refused_names_the_recipe_key(tmp_path, monkeypatch, capsys, no_work):
    """A recipe's ``out: ..`` was refused as "--out . is the current folder": no such flag."""
    monkeypatch.chdir(tmp_path)
    recipe(tmp_path, out="..")
    assert main(["build", "r/ct.yaml"]) == 2
    line = one_error_line(capsys)
    assert line == (
        "draftset: error: recipe key out: . is the current folder or contains it; name a new"
        " folder (paths in a recipe are relative to its folder)"
    ), line
    assert main(["build", "r/ct.yaml", "--out", "."]) == 2  # the flag's own: named as the flag
    assert "error: --out . is the current folder" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        ({"out": "c.jsonl"}, "r/c.jsonl is the source {r}/c.jsonl"),
        ({"out": "."}, "r contains the source {r}/c.jsonl"),
        (
            {"out": "d/o", "sources": ["d"]},
            "r/d/o is inside the source folder {r}/d (a rerun would read it as input)",
        ),
        ({"out": "b", "decontaminate": ["b/bench.txt"]}, "r/b contains the input {r}/b/bench.txt"),
    ],
)
def test_a_recipe_out_on_a_source_names_the_recipe_key(
    tmp_path, monkeypatch, capsys, no_work, keys, said
):
    """A recipe's ``out:`` that is a source, inside one, holding one or holding an input was
    refused as "--out c.jsonl is the source ...", a flag nobody gave; the place checks already
    said ``recipe key out:`` (above). Now these do too, in build and in run; the flag's own
    value is still named as the flag."""
    path = recipe(tmp_path, **keys, generate={"endpoints": ["http://127.0.0.1:9/v1"]})
    folder = path.parent
    (folder / "d").mkdir()
    (folder / "d" / "c.jsonl").write_bytes((folder / "c.jsonl").read_bytes())
    (folder / "b").mkdir()
    (folder / "b" / "bench.txt").write_text("a benchmark prompt of some words\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # the recipe's out: is shown from the current folder
    said = said.format(r=folder)
    where = "paths in a recipe are relative to its folder"
    told = f"{said[:-1]}; {where})" if said.endswith(")") else f"{said} ({where})"
    want = f"draftset: error: recipe key out: {told}"
    for command in ("build", "run"):
        assert main([command, "r/ct.yaml"]) == 2, command
        assert one_error_line(capsys) == want, command
    flag = ["--out", said.split()[0]]
    assert main(["build", "r/ct.yaml", *flag]) == 2
    assert one_error_line(capsys) == f"draftset: error: --out {said}"
    assert not (folder / "o").exists()


@pytest.mark.parametrize(
    ("out", "said"),
    [
        ("f", "r/f is a file, not a folder"),
        ("f/o", "r/f/o is under a file ({r}/f), not a folder"),
    ],
)
def test_a_recipe_out_that_cannot_be_a_set_names_the_recipe_key(
    tmp_path, monkeypatch, capsys, no_work, out, said
):
    """A recipe's ``out:`` that is a file or under a file (cannot be created) was refused as
    "--out r/f is a file, not a folder", a flag nobody gave: it names ``recipe key out:`` in
    build and run; the flag's own value is still named as the flag."""
    path = recipe(tmp_path, out=out, generate={"endpoints": ["http://127.0.0.1:9/v1"]})
    folder = path.parent
    (folder / "f").write_text("mine", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # the recipe's out: is shown from the current folder
    said = said.format(r=folder)
    want = f"draftset: error: recipe key out: {said} (paths in a recipe are relative to its folder)"
    for command in ("build", "run"):
        assert main([command, "r/ct.yaml"]) == 2, command
        assert one_error_line(capsys) == want, command
    assert main(["build", "r/ct.yaml", "--out", said.split()[0]]) == 2
    assert one_error_line(capsys) == f"draftset: error: --out {said}"
    assert (folder / "f").read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("blank", ["", " ", "\t"])
@pytest.mark.parametrize(
    ("keys", "key"),
    [
        ({"out": "BLANK"}, "out"),
        ({"tokenizer": "BLANK"}, "tokenizer"),
        ({"chat_template": "BLANK"}, "chat_template"),
        ({"decontaminate": "BLANK"}, "decontaminate"),
        ({"decontaminate": ["BLANK"]}, "decontaminate"),
        ({"sources": ["BLANK"]}, "sources[0].path"),
        ({"sources": [{"path": "BLANK"}]}, "sources[0].path"),
    ],
)
def test_a_blank_path_in_a_recipe_is_one_line_naming_its_key(
    tmp_path, monkeypatch, capsys, no_work, keys, key, blank
):
    """``out: ' '`` built into a folder named ' ' beside the recipe; ``out: ''`` said "--out is
    required"; ``decontaminate: ['']`` and ``sources: [{path: ''}]`` read the recipe's folder
    (the whole folder as benchmark, or as a source); a blank tokenizer or template was "not
    found: <folder>/ ". Every path value of a recipe is checked in one place (the schema's
    path type): empty or whitespace only is one line naming the key, exit 2, before any work."""
    monkeypatch.chdir(tmp_path)
    filled = json.loads(json.dumps(keys).replace("BLANK", blank.replace("\t", "\\t")))
    recipe(tmp_path, **filled)
    assert main(["build", "r/ct.yaml"]) == 2
    line = one_error_line(capsys)
    what = "is empty" if not blank else "is only whitespace"
    assert line.startswith(f"draftset: error: recipe key {key}: {what}"), line


@pytest.mark.parametrize("flag", ["--out", "--tokenizer", "--chat-template", "--decontaminate"])
@pytest.mark.parametrize("blank", ["", " "])
def test_a_blank_path_on_the_command_line_is_one_line_naming_its_flag(
    tmp_path, monkeypatch, capsys, no_work, flag, blank
):
    """``--decontaminate ''`` decontaminated against every file of the current folder (a
    row of the source itself among them), exit 1; ``--out ''`` was "--out is empty" but
    ``--tokenizer ' '`` a "folder not found:  " with the blank unseen."""
    monkeypatch.chdir(tmp_path)
    path = recipe(tmp_path)
    args = {"--out": "o", "--tokenizer": str(qwen3_tokenizer_dir())}
    args[flag] = blank
    extra = [x for k, v in args.items() for x in (k, v)]
    assert main(["build", str(path.parent / "c.jsonl"), *extra]) == 2
    line = one_error_line(capsys)
    what = "is empty" if not blank else "is only whitespace"
    assert line.startswith(f"draftset: error: {flag}: {what}"), line


def test_a_blank_source_on_the_command_line_is_one_line(tmp_path, monkeypatch, capsys, no_work):
    monkeypatch.chdir(tmp_path)
    tok = str(qwen3_tokenizer_dir())
    assert main(["build", " ", "--tokenizer", tok, "--out", "o"]) == 2
    assert "path is only whitespace" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("keys", "key", "written"),
    [
        ({"out": "$HOME/sets/o"}, "out", "$HOME/sets/o"),
        ({"out": "${SETS}/o"}, "out", "${SETS}/o"),
        ({"sources": ["$DATA/c.jsonl"]}, "sources", "$DATA/c.jsonl"),
        ({"sources": [{"path": "${DATA}/c.jsonl"}]}, "sources", "${DATA}/c.jsonl"),
        ({"tokenizer": "$TOK"}, "tokenizer", "$TOK"),
        ({"chat_template": "$T/t.jinja"}, "chat_template", "$T/t.jinja"),
        ({"decontaminate": ["$EVALS/b.txt"]}, "decontaminate", "$EVALS/b.txt"),
    ],
)
def test_an_environment_variable_in_a_recipe_path_is_refused_naming_it(
    tmp_path, monkeypatch, capsys, no_work, keys, key, written
):
    """No shell reads a recipe, so ``out: $HOME/sets/o`` built into a folder named ``$HOME``
    beside the recipe, exit 0; ``sources: [$DATA/c.jsonl]`` said only "source not found"
    (``tokenizer: $TOK`` "folder not found: /abs/r/$TOK"). Refused now, naming the variable,
    in build and in run, before any work; a path of that name that exists is read as before."""
    for name in ("HOME", "SETS", "DATA", "TOK", "T", "EVALS"):
        monkeypatch.setenv(name, str(tmp_path / "elsewhere"))
    recipe(tmp_path, **keys, generate={"endpoints": ["http://127.0.0.1:9/v1"]})
    monkeypatch.chdir(tmp_path)
    var = written.split("/")[0]
    home = "; ~ is your home folder" if var == "$HOME" else ""
    want = (
        f"draftset: error: recipe key {key}: {written} names the environment variable {var},"
        f" which draftset does not expand (no shell reads a recipe): write the path itself{home}"
    )
    for command in ("build", "run"):
        assert main([command, "r/ct.yaml"]) == 2, command
        assert one_error_line(capsys) == want, command
    assert not (tmp_path / "r" / "$HOME").exists()
    assert not (tmp_path / "r" / "${SETS}").exists()


def test_a_recipe_path_with_a_dollar_that_exists_is_read(tmp_path, monkeypatch):
    """A file whose name holds ``$`` (``$DATA`` is a folder beside the recipe) is that path."""
    path = recipe(tmp_path, sources=["$DATA/c.jsonl"])
    (path.parent / "$DATA").mkdir()
    (path.parent / "c.jsonl").rename(path.parent / "$DATA" / "c.jsonl")
    monkeypatch.delenv("DATA", raising=False)
    options = build_options(path)
    assert [str(s.path) for s in options.sources] == [str(path.parent / "$DATA" / "c.jsonl")]


def test_a_build_recipe_out_that_exists_names_the_recipe_key(
    tmp_path, monkeypatch, capsys, no_work
):
    """A recipe's ``out:`` that is a folder of the user's, or a set already there, was refused
    by build as "--out r/o exists ..." / "output folder exists: r/o (pass --overwrite ...)", a
    flag nobody gave: it names ``recipe key out:`` (and the recipe's ``overwrite: true``); the
    flag's own value is still named as the flag."""
    path = recipe(tmp_path, out="o")
    mine = path.parent / "o"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["build", "r/ct.yaml"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("draftset: error: recipe key out: r/o exists, is not empty"), line
    assert "--out" not in line, line
    assert main(["build", "r/ct.yaml", "--out", "r/o"]) == 2
    assert one_error_line(capsys).startswith("draftset: error: --out r/o exists, is not empty")
    (mine / "notes.txt").unlink()
    (mine / "manifest.json").write_text('{"format": "draftset/1"}', encoding="utf-8")
    assert main(["build", "r/ct.yaml"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("draftset: error: recipe key out: r/o exists"), line
    assert "overwrite: true" in line, line
    assert (mine / "manifest.json").read_text(encoding="utf-8") == '{"format": "draftset/1"}'
