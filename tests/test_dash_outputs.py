"""``-`` where draftset writes is refused in one line (exit 2), as ``-`` as a source is.

`build --out -` built a set in a folder named ``-``; `generate --out -` wrote ``-``,
``-.errors.jsonl``, ``-.run.json`` and ``-.lock``; `report -o -` wrote the page to a file ``-``
("report written to -"), which a later `verify --json -` then refused as a file it did not
write. Standard output is no set folder nor a file to resume from; a page or a result goes to
``/dev/stdout`` when asked (a device, written as a stream).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import built_set, qwen3_tokenizer_dir

from draftset.cli import main

CHAT = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return built_set(tmp_path_factory.mktemp("dash"), [CHAT])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["build", "{src}", "--tokenizer", "{tok}", "--out", "-"],
            "--out -: draftset does not read '-' as standard output; name the folder to write"
            " the set in",
        ),
        (
            ["generate", "{src}", "--endpoint", "http://127.0.0.1:9/v1", "--out", "-"],
            "--out -: draftset does not read '-' as standard output; name the .jsonl file to"
            " write the answers in (a rerun resumes from it)",
        ),
        (
            ["report", "{set}", "-o", "-"],
            "-o -: draftset does not read '-' as standard output; name the file to write, or"
            " /dev/stdout",
        ),
        (["verify", "{set}", "--fast", "--json", "-"], "--json -: draftset does not read '-'"),
    ],
)
def test_a_dash_where_draftset_writes_is_refused(
    built, tmp_path, monkeypatch, capsys, args, needle
):
    monkeypatch.chdir(tmp_path)
    src = built.parent / "a.jsonl"
    subs = {"{src}": str(src), "{tok}": str(qwen3_tokenizer_dir()), "{set}": str(built)}
    assert main([subs.get(a, a) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_run_work_dash_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.jsonl").write_text(json.dumps(CHAT) + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\nout: o\nsources: [a.jsonl]\n"
        "generate: {endpoints: [http://127.0.0.1:9/v1]}\n"
    )
    assert main(["run", str(recipe), "--work", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--work -: draftset does not read '-' as standard output" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "r.yaml"]


def test_a_page_written_to_standard_output_is_the_whole_of_it(built, tmp_path):
    """`report -o /dev/stdout > page.html`: "report written to /dev/stdout" and the checks line
    were printed after the page, into the same stream (the file then ended in text after
    ``</html>``). They go to stderr when the page goes to stdout."""
    import subprocess
    import sys

    page = tmp_path / "page.html"
    with page.open("w") as sink:
        p = subprocess.run(
            [sys.executable, "-m", "draftset.cli", "report", str(built), "-o", "/dev/stdout"],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert p.returncode == 0, p.stderr
    assert page.read_text().rstrip().endswith("</html>"), page.read_text()[-300:]
    assert "report written to /dev/stdout" in p.stderr and "checks: " in p.stderr


def test_a_page_piped_to_standard_output_is_followed_by_nothing(built):
    """`report -o /dev/stdout | tee page.html`: the page was followed by "report written to
    /dev/stdout" and the checks line in the same pipe."""
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "draftset.cli", "report", str(built), "-o", "/dev/stdout"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.rstrip().endswith("</html>"), p.stdout[-300:]
    assert "report written to /dev/stdout" in p.stderr


def test_a_verify_result_piped_to_standard_output_is_only_the_json(built):
    """`verify --json /dev/stdout | jq`: the check lines followed the JSON in the same pipe
    ("Extra data"); they go to stderr when the result goes to stdout."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "draftset.cli", "verify", str(built), "--fast"]
    p = subprocess.run([*cmd, "--json", "/dev/stdout"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["passed"] is True
    assert "PASS structure" in p.stderr and "verify passed" in p.stderr


@pytest.mark.parametrize(
    ("command", "more"),
    [
        ("build", ["--tokenizer", "tok", "--out", "o"]),
        ("generate", ["--endpoint", "http://127.0.0.1:9/v1", "--out", "a.jsonl"]),
        ("verify", []),
    ],
)
def test_a_path_starting_with_a_dash_is_told_how_to_give_it(
    tmp_path, monkeypatch, capsys, command, more
):
    """`draftset build -x.jsonl ...` (a file whose name starts with a dash) said only "the
    following arguments are required: SOURCE|RECIPE.yaml": argparse reads it as an option. The
    line now says how to give it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-x.jsonl").write_text(json.dumps(CHAT) + "\n", encoding="utf-8")
    assert main([command, "-x.jsonl", *more]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].endswith(
        "(-x.jsonl is a file: give it as ./-x.jsonl, or after -- at the end of the line)"
    ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["-x.jsonl"]


def test_a_pipe_as_a_source_is_named_a_pipe(tmp_path, capsys):
    """`cat a.jsonl | draftset build /dev/stdin ...` said "/proc/11789/fd/pipe:[1089351]: no
    such file or directory" (the link resolved to the pipe's name); a named FIFO "cannot read:
    not a regular file". Both are pipes: standard input's rule says what to do."""
    r, w = os.pipe()
    os.write(w, (json.dumps(CHAT) + "\n").encode())
    os.close(w)
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    try:
        for given in (f"/dev/fd/{r}", str(fifo)):
            argv = ["build", given, "--tokenizer", str(qwen3_tokenizer_dir())]
            assert main([*argv, "--out", str(tmp_path / "o")]) == 2
            assert capsys.readouterr().err.strip() == (
                f"draftset: error: source {given} is a pipe, not a file (the workers read ranges"
                " of each file and a rerun reads it again; save the rows to a file and give its"
                " path)"
            )
            # generate said "/dev/fd/N: cannot read: not a regular file" (and "source not
            # found: -" of standard input): the same line, with generate's own reason
            argv = ["generate", given, "--endpoint", "http://127.0.0.1:9/v1"]
            assert main([*argv, "--out", str(tmp_path / "a.jsonl")]) == 2
            assert capsys.readouterr().err.strip() == (
                f"draftset: error: source {given} is a pipe, not a file (generate reads each"
                " source more than once, and a rerun reads it again to resume; save the rows to"
                " a file and give its path)"
            )
    finally:
        os.close(r)
    argv = ["generate", "-", "--endpoint", "http://127.0.0.1:9/v1"]
    assert main([*argv, "--out", str(tmp_path / "a.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == (
        "draftset: error: source not found: - (standard input is not a source: generate reads"
        " each source more than once, and a rerun reads it again to resume; save the rows to a"
        " file and give its path)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]
