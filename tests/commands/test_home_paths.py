"""A literal ``~`` in a path a command writes (``--out '~/t1'``, ``--out=~/t1``, the API's
``out="~/t1"``) is the home folder, as the shell would have made it, for the checks and the
writer alike.

Before: build's up-front checks (`check_output_path`, which expands ``~``) looked at
``$HOME/t1`` while the set was written to ``./~/t1`` and `next: draftset verify ~/t1` pointed
at another folder; generate's and run's source-overlap checks likewise looked at ``$HOME`` while
their files went to ``./~``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_server import FaultServer
from rows import chats

from draftset import api
from draftset.cli import main

ROWS = chats(2, "r", "Question {i}: name a planet.", "Answer {i}: Mars, the red planet.")


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``$HOME`` is ``tmp/home``; the current folder ``tmp/cwd`` (holding ``src.jsonl``)."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    (cwd / "src.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    yield home
    assert not (cwd / "~").exists()  # nothing is ever written to a folder named "~"


def _build(tok: Path, out: str) -> list[str]:
    return ["build", "src.jsonl", "--tokenizer", str(tok), "--out", out, "--workers", "1"]


def test_build_out_with_a_tilde_is_the_home_folder(
    home: Path, qwen3_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*_build(qwen3_dir, "~/t1"), "--no-progress"]) == 0
    assert (home / "t1" / "manifest.json").is_file()
    assert f"next: draftset verify {home / 't1'} " in capsys.readouterr().out
    # the checks look where the set is: a second build is "exists", not a new folder
    assert main(_build(qwen3_dir, "~/t1")) == 2
    assert f"output folder exists: {home / 't1'}" in capsys.readouterr().err
    # verify / report read and write there too
    assert main(["verify", "~/t1", "--fast", "--json", "~/v.json"]) == 0
    assert json.loads((home / "v.json").read_text())["passed"] is True
    assert main(["report", "~/t1", "-o", "~/r.html"]) == 0
    assert (home / "r.html").is_file()
    assert main(["show", "~/t1", "--row", "0"]) == 0


def test_the_api_expands_a_tilde_as_the_command_does(home: Path, qwen3_dir: Path) -> None:
    result = api.build(sources=["src.jsonl"], tokenizer=str(qwen3_dir), out="~/t2", workers=1)
    assert result.ok and result.out == home / "t2"
    assert (home / "t2" / "manifest.json").is_file()
    recipe = Path("r.yaml")
    recipe.write_text(
        json.dumps(
            {
                "tokenizer": str(qwen3_dir),
                "out": "out",
                "sources": [{"path": "src.jsonl"}],
                "generate": {"endpoints": ["http://127.0.0.1:9/v1"]},
            }
        )
    )
    assert api.run_options(recipe, work="~/w").work_dir == home / "w"


def test_generate_out_with_a_tilde_is_the_home_folder(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("p.jsonl").write_text('{"id": "p0", "prompt": "q0"}\n')
    with FaultServer() as srv:
        argv = ["generate", "p.jsonl", "--out", "~/a.jsonl", "--endpoint", srv.url]
        assert main([*argv, "--no-progress"]) == 0
    assert [json.loads(line)["id"] for line in (home / "a.jsonl").open()] == ["p0"]
    assert (home / "a.run.json").is_file()
    # the source-overlap check looks where the answers go
    src = home / "p.jsonl"
    src.write_text('{"id": "p0", "prompt": "q0"}\n')
    assert main(["generate", str(src), "--out", "~/p.jsonl", "--endpoint", srv.url]) == 2
    assert "is the source" in capsys.readouterr().err


def test_a_recipes_tilde_is_the_home_folder_not_one_beside_the_recipe(
    home: Path, qwen3_dir: Path
) -> None:
    """A recipe's relative paths are the recipe folder's; ``out: ~/t3`` was one of them too
    (``<recipe folder>/~/t3``)."""
    (home / "src.jsonl").write_text(Path("src.jsonl").read_text())
    (home / "bench.txt").write_text("Question 9: name a moon.\n")
    Path("sub").mkdir()
    recipe = Path("sub/r.yaml")
    conf = {
        "tokenizer": str(qwen3_dir),
        "out": "~/t3",
        "sources": [{"path": "~/src.jsonl"}],
        "decontaminate": ["~/bench.txt"],
    }
    recipe.write_text(json.dumps(conf))
    opts = api.build_options(recipe)
    assert opts.out == home / "t3"
    assert [s.path for s in opts.sources] == [home / "src.jsonl"]
    assert opts.decontaminate == [str(home / "bench.txt")]


def test_a_source_path_with_a_leading_tilde_is_the_home_folders(tmp_path, monkeypatch):
    """A quoted `'~/data.jsonl'` (or the API's `sources=["~/data.jsonl"]`) was "source not
    found": the home folder's file, as the shell reads it unquoted."""
    from conftest import qwen3_tokenizer_dir

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    row = {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello there, friend."},
        ]
    }
    (home / "data.jsonl").write_text(json.dumps(row) + "\n")
    res = api.build(
        sources=["~/data.jsonl"],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=tmp_path / "o",
        workers=1,
    )
    assert res.counts["written"] == 1


def test_the_next_command_is_quoted_for_the_shell(
    home: Path, qwen3_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--out "my set"` ended `next: draftset verify my set`: pasted, two arguments (and
    `report`'s "map its columns, e.g. draftset build my data.jsonl ..." the same)."""
    assert main([*_build(qwen3_dir, "my set (v2)"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "next: draftset verify 'my set (v2)'   (re-derives" in out
    Path("odd rows.jsonl").write_text('{"q": "hi", "a": "ho"}\n', encoding="utf-8")
    args = ["build", "odd rows.jsonl", "--tokenizer", str(qwen3_dir), "--out", "o"]
    assert main(args) == 2
    src = Path("odd rows.jsonl").absolute()
    assert f"e.g. draftset build '{src}' --format" in capsys.readouterr().err
