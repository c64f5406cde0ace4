"""`report -o FILE` and `verify --json FILE` write only where draftset may: never over a file
draftset did not write, never into the set (but report's default DIR/report.html), never over
a source, never a folder. Each refusal is one `draftset: error:` line, exit 2, before any work,
and the file is left byte for byte as it was.

Before: `report set -o notes.txt` replaced the user's notes with HTML (exit 0), `-o src.jsonl`
the set's source, `-o set/manifest.json` and `verify set --fast --json set/manifest.json`
destroyed the set ("not a draftset output" afterwards), `-o <folder>` printed a raw
`[Errno 21]` after rendering the whole report.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir
from rows import chats

from draftset import api
from draftset.cli import main
from draftset.config.options import BuildOptions
from draftset.core.errors import UsageError
from draftset.pipeline.build import run_build
from draftset.sources.read import Source

ROWS = chats(3, "r", "Question {i}: name a planet.", "Answer {i}: Mars, the red planet, fourth.")
NOTES = b"my precious notes\n"
GENERATOR = b'<meta name="generator" content="draftset report">'


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """One small set (its source beside it), copied for each test."""
    root = tmp_path_factory.mktemp("built")
    src = root / "src.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    run_build(
        BuildOptions([Source("src", src)], str(qwen3_tokenizer_dir()), root / "set", workers=1)
    )
    return root


@pytest.fixture()
def work(built, tmp_path, monkeypatch) -> Path:
    """A folder holding `set/` (built from `src.jsonl` here: its manifest names this copy),
    the user's `notes.txt` and an empty folder `folder/`; the current folder."""
    shutil.copy(built / "src.jsonl", tmp_path / "src.jsonl")
    shutil.copytree(built / "set", tmp_path / "set")
    manifest = tmp_path / "set" / "manifest.json"
    m = json.loads(manifest.read_text(encoding="utf-8"))
    for inp in m["inputs"]:  # the copied source is the set's source (as if built here)
        inp["path"] = str(tmp_path / "src.jsonl")
        for f in inp["files"]:
            f["path"] = str(tmp_path / "src.jsonl")
    manifest.write_text(json.dumps(m, indent=2), encoding="utf-8")
    (tmp_path / "notes.txt").write_bytes(NOTES)
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, relative name → bytes (folders as themselves)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>")
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture()
def no_work():
    """Fails the test if the report is rendered or a check runs: a refusal comes first
    (``no_work.undo()`` lets the checks run again)."""

    def forbidden(*_a, **_k):
        raise AssertionError("work started before the path was checked")

    import draftset.checks.verify as checks
    import draftset.review.report as report

    mp = pytest.MonkeyPatch()
    mp.setattr(report, "render_report", forbidden)
    mp.setattr(checks, "fast_checks", forbidden)
    mp.setattr(checks, "run_verify", forbidden)
    yield mp
    mp.undo()


def refused(argv: list[str], capsys, *needles: str) -> str:
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err
    assert err.count("\n") == 1 and err.startswith("draftset: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


def verifies(capsys) -> bool:
    code = main(["verify", "set", "--fast"])
    capsys.readouterr()
    return code == 0


SET_FILES = ["manifest.json", "rejects.jsonl", "data-00000-of-00001.arrow", "state.json"]


# --- report -o ---------------------------------------------------------------------------------
def test_report_refuses_a_file_of_the_users(work, capsys, no_work):
    before = snapshot(work)
    refused(
        ["report", "set", "-o", "notes.txt"],
        capsys,
        "-o notes.txt: the file exists and is not a report draftset wrote;",
        "choose another path or remove it",
    )
    assert snapshot(work) == before


def test_report_refuses_the_sets_source(work, capsys, no_work):
    before = snapshot(work)
    refused(
        ["report", "set", "-o", "src.jsonl"],
        capsys,
        f"-o src.jsonl is the source {work / 'src.jsonl'} of the set set",
    )
    assert snapshot(work) == before


@pytest.mark.parametrize("name", SET_FILES)
def test_report_refuses_a_file_of_the_set(work, capsys, no_work, name):
    before = snapshot(work)
    refused(
        ["report", "set", "-o", f"set/{name}"],
        capsys,
        f"-o set/{name} is inside the set set (its files are the set's own;",
    )
    assert snapshot(work) == before
    no_work.undo()
    assert verifies(capsys)


def test_report_refuses_a_new_file_inside_the_set(work, capsys, no_work):
    refused(["report", "set", "-o", "set/mine.html"], capsys, "is inside the set set")
    assert not (work / "set" / "mine.html").exists()


def test_report_refuses_a_link_to_a_file_of_the_set(work, capsys, no_work):
    (work / "link.html").symlink_to(work / "set" / "manifest.json")
    before = snapshot(work)
    refused(["report", "set", "-o", "link.html"], capsys, "-o link.html is inside the set set")
    assert snapshot(work) == before
    no_work.undo()
    assert verifies(capsys)


@pytest.mark.parametrize("target", ["folder", "set", "."])
def test_report_refuses_a_folder(work, capsys, no_work, target):
    before = snapshot(work)
    err = refused(["report", "set", "-o", target], capsys, f"-o {target} ")
    assert "Errno" not in err
    assert snapshot(work) == before


def test_report_refuses_a_default_report_path_holding_the_users_file(work, capsys, no_work):
    (work / "set" / "report.html").write_bytes(NOTES)
    before = snapshot(work)
    refused(
        ["report", "set"],
        capsys,
        "set/report.html: the file exists and is not a report draftset wrote",
    )
    assert snapshot(work) == before


def test_report_writes_a_new_file_and_replaces_its_own(work, capsys):
    assert main(["report", "set", "-o", "r.html"]) == 0
    first = (work / "r.html").read_bytes()
    assert GENERATOR in first[:4096]
    (work / "r.html").write_bytes(first.replace(b"<h1>draftset report</h1>", b"<h1>old</h1>"))
    assert main(["report", "set", "-o", "r.html"]) == 0
    assert (work / "r.html").read_bytes() == first
    # the default path, twice; nothing else appears in the set (no temporary file left)
    names = {p.name for p in (work / "set").iterdir()}
    assert main(["report", "set"]) == 0
    assert main(["report", "set"]) == 0
    assert GENERATOR in (work / "set" / "report.html").read_bytes()[:4096]
    assert {p.name for p in (work / "set").iterdir()} == names | {"report.html"}
    assert not [p for p in work.rglob(".*tmp*")]
    assert verifies(capsys)


def test_report_replaces_a_report_written_before_the_marker(work, capsys):
    assert main(["report", "set", "-o", "r.html"]) == 0
    page = (work / "r.html").read_bytes()
    assert GENERATOR in page
    (work / "r.html").write_bytes(page.replace(GENERATOR, b""))  # as an older draftset wrote it
    assert main(["report", "set", "-o", "r.html"]) == 0
    assert (work / "r.html").read_bytes() == page


def test_report_refuses_a_file_that_appears_while_it_renders(work, capsys, monkeypatch):
    import draftset.review.report as report

    render = report.render_report

    def slow_render(*a, **k):
        page = render(*a, **k)
        (work / "late.html").write_bytes(NOTES)  # the user's file, written meanwhile
        return page

    monkeypatch.setattr(report, "render_report", slow_render)
    refused(["report", "set", "-o", "late.html"], capsys, "-o late.html: the file exists")
    assert (work / "late.html").read_bytes() == NOTES
    assert not [p for p in work.rglob(".*tmp*")]


def test_report_api_refuses_as_the_command_does(work, no_work):
    with pytest.raises(UsageError) as exc:
        api.report("set", output="notes.txt")
    assert exc.value.exit_code == 2
    # as the command does, named as the call gave it: output=, not -o
    assert str(exc.value).startswith("output notes.txt: the file exists and is not a report")
    with pytest.raises(UsageError, match=r"manifest\.json is inside the set /"):
        api.report(work / "set", output=work / "set" / "manifest.json")
    assert (work / "notes.txt").read_bytes() == NOTES


# --- verify --json -------------------------------------------------------------------------------
def test_verify_json_refuses_a_file_of_the_users(work, capsys, no_work):
    before = snapshot(work)
    refused(
        ["verify", "set", "--fast", "--json", "notes.txt"],
        capsys,
        "--json notes.txt: the file exists and is not a verify result draftset wrote;"
        " choose another path or remove it",
    )
    assert snapshot(work) == before


def test_verify_json_refuses_the_sets_source(work, capsys, no_work):
    before = snapshot(work)
    refused(["verify", "set", "--fast", "--json", "src.jsonl"], capsys, "is the source")
    assert snapshot(work) == before


@pytest.mark.parametrize("name", [*SET_FILES, "verify.json", "report.html", "new.json"])
@pytest.mark.parametrize("fast", [True, False])
def test_verify_json_refuses_a_path_inside_the_set(work, capsys, no_work, name, fast):
    before = snapshot(work)
    argv = ["verify", "set", "--json", f"set/{name}", *(["--fast"] if fast else [])]
    refused(argv, capsys, f"--json set/{name} is inside the set set (its files are the set's own)")
    assert snapshot(work) == before
    no_work.undo()
    assert verifies(capsys)


@pytest.mark.parametrize("target", ["folder", "set"])
def test_verify_json_refuses_a_folder(work, capsys, no_work, target):
    before = snapshot(work)
    err = refused(["verify", "set", "--fast", "--json", target], capsys, f"--json {target} ")
    assert "Errno" not in err
    assert snapshot(work) == before


def test_verify_json_writes_a_new_file_and_replaces_its_own(work, capsys):
    assert main(["verify", "set", "--fast", "--json", "v.json"]) == 0
    data = json.loads((work / "v.json").read_text(encoding="utf-8"))
    assert data["format"] == "draftset-verify-json/1" and data["passed"] is True
    assert main(["verify", "set", "--fast", "--json", "v.json"]) == 0
    # one written before the "format" key (exactly dir, passed, checks) is draftset's too
    del data["format"]
    (work / "v.json").write_text(json.dumps(data), encoding="utf-8")
    assert main(["verify", "set", "--fast", "--json", "v.json"]) == 0
    assert json.loads((work / "v.json").read_text())["format"] == "draftset-verify-json/1"
    assert not [p for p in work.rglob(".*tmp*")]


def test_verify_json_refuses_json_that_is_not_a_verify_result(work, capsys, no_work):
    (work / "other.json").write_text('{"dir": "x", "passed": true, "checks": [], "mine": 1}\n')
    before = snapshot(work)
    refused(["verify", "set", "--fast", "--json", "other.json"], capsys, "is not a verify result")
    assert snapshot(work) == before


def test_verify_json_api_refuses_as_the_command_does(work, no_work):
    from draftset.checks.verify import VerifyUsageError

    with pytest.raises(VerifyUsageError) as exc:
        api.verify("set", fast=True, json="notes.txt")
    assert exc.value.exit_code == 2
    assert str(exc.value).startswith("json notes.txt: the file exists")  # json=, not --json
    with pytest.raises(VerifyUsageError, match="is inside the set set"):
        api.verify("set", fast=True, json=os.path.join("set", "manifest.json"))
    assert (work / "notes.txt").read_bytes() == NOTES


# --- what keeps working (these passed before too: guards against refusing too much) ------------
def test_an_empty_file_or_a_stream_is_written(work, capsys):
    (work / "empty.json").touch()  # as `mktemp` leaves it: nothing in it to lose
    assert main(["verify", "set", "--fast", "--json", "empty.json"]) == 0
    assert json.loads((work / "empty.json").read_text())["passed"] is True
    assert main(["verify", "set", "--fast", "--json", os.devnull]) == 0
    assert main(["report", "set", "-o", os.devnull]) == 0
    assert Path(os.devnull).is_char_device()


def test_a_path_inside_a_source_folder_is_refused_when_it_would_be_read(work, capsys, no_work):
    (work / "data").mkdir()
    shutil.move(work / "src.jsonl", work / "data" / "src.jsonl")
    manifest = work / "set" / "manifest.json"
    m = json.loads(manifest.read_text(encoding="utf-8"))
    m["inputs"][0]["path"] = str(work / "data")  # the set was built from the folder data/
    m["inputs"][0]["files"][0]["path"] = str(work / "data" / "src.jsonl")
    manifest.write_text(json.dumps(m, indent=2), encoding="utf-8")
    refused(
        ["verify", "set", "--fast", "--json", "data/v.json"],
        capsys,
        f"--json data/v.json is inside the source folder {work / 'data'} of the set set"
        " (a rebuild would read it as input)",
    )
    refused(["report", "set", "-o", "data/r.json"], capsys, "inside the source folder")
    refused(["report", "set", "-o", "data"], capsys, "-o data is the source")
    refused(["report", "set", "-o", "data/src.jsonl"], capsys, "-o data/src.jsonl is the source")
    assert sorted(p.name for p in (work / "data").iterdir()) == ["src.jsonl"]
    no_work.undo()
    assert main(["report", "set", "-o", "data/r.html"]) == 0  # an .html is not read as rows


# --- build --out inside a set ------------------------------------------------------------------


@pytest.mark.parametrize("inner", ["set/inner", "set/a/b"])
def test_build_out_inside_a_set_is_refused_before_any_work(work, capsys, inner):
    """`build --out set/inner` wrote a nested set into a built set, which then failed its own
    `verify` (files its manifest does not list) and `build --overwrite` refused it (an
    outside probe). Refused as `report -o` refuses a path inside a set."""
    before = snapshot(work)
    refused(
        ["build", "src.jsonl", "--tokenizer", str(qwen3_tokenizer_dir()), "--out", inner],
        capsys,
        f"--out {inner} is inside the set",
    )
    assert snapshot(work) == before
    assert verifies(capsys)


def test_a_full_disk_under_report_or_verify_json_is_exit_1_as_in_build(
    built, tmp_path, monkeypatch, capsys
):
    """`build` on a full disk exits 1 (the run started and failed, docs/errors.md); `report -o`
    and `verify --json` said the same "No space left on device" with exit 2, the code of a
    bad argument."""
    import errno

    import draftset.core.files as files

    def full(path, text, check=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "write_output_file", full)
    monkeypatch.setattr(api, "write_output_file", full)
    import draftset.review.report as report

    monkeypatch.setattr(report, "write_output_file", full)
    page = tmp_path / "r.html"
    assert main(["report", str(built / "set"), "-o", str(page)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"draftset: {page}: cannot write: No space left on device"
    )
    record = tmp_path / "v.json"
    assert main(["verify", str(built / "set"), "--fast", "--json", str(record)]) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"draftset: --json {record}: cannot write: No space left on device")
    )


@pytest.mark.parametrize("name", ["report.pdf", "r.png", "r.json", "r.MD", "r.txt"])
def test_report_refuses_a_name_of_another_format(work, capsys, no_work, name):
    """``report set -o report.pdf`` wrote an HTML page under a PDF name, exit 0: the PDF
    viewer it was meant for cannot open it."""
    before = snapshot(work)
    stem, suffix = name.rsplit(".", 1)
    refused(
        ["report", "set", "-o", name],
        capsys,
        f"-o {name}: report writes one HTML page, which a .{suffix} name would hide from what"
        f" opens it: name it {stem}.html (a browser prints it to PDF)",
    )
    assert snapshot(work) == before


@pytest.mark.parametrize("name", ["page.html", "page.HTM", "page"])
def test_report_writes_an_html_name_or_one_without_a_suffix(work, capsys, name):
    assert main(["report", "set", "-o", name]) == 0
    assert GENERATOR in (work / name).read_bytes()
