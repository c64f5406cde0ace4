"""`draftset report`: one self-contained HTML page, dataset text escaped, renders in Chromium."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.checks.verify import run_verify
from draftset.cli import main as cli_main
from draftset.config.options import BuildOptions
from draftset.core.terminal import UNSAFE
from draftset.pipeline.build import run_build
from draftset.review.report import build_report, coverage_curve
from draftset.sources.read import Source

EVIL = "<script>alert(1)</script>"
ROWS = [
    {
        "id": "x<img src=x onerror=alert(2)>",
        "messages": [
            {"role": "user", "content": f"Echo {EVIL}"},
            {
                "role": "assistant",
                "content": f"Sure: {EVIL} and a bit more text to supervise here.",
            },
        ],
    },
    {
        "id": "y",
        "messages": [
            {"role": "user", "content": "Name a planet."},
            {"role": "assistant", "content": "Mars, the red planet, fourth from the sun."},
        ],
    },
    {"id": "z", "messages": [{"role": "wizard", "content": "?"}]},
    {
        "id": "ctl\x1b]0;id\x07",
        "messages": [
            {"role": "user", "content": "Echo \x1b[2J\x1b]52;c;ZXZpbA==\x07 and \u202eevil\u202c"},
            {
                "role": "assistant",
                "content": "Echo: \x1b[2J\x1b]52;c;ZXZpbA==\x07 bell\x07 \x9b31m \u202eevil\u202c",
            },
        ],
    },
]
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main(argv: list[str]) -> int:
    """`draftset report ...` (the command, through the CLI's parser and exit codes)."""
    return cli_main(["report", *argv])


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    src = root / "evil<b>.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = run_build(
        BuildOptions(
            [Source("src<i>", src)],
            str(qwen3_tokenizer_dir()),
            root / "out",
            workers=1,
            draft_vocab_size=16,
            target_vocab_size=151936,
        )
    ).out
    path = root / "report.html"
    assert main([str(out), "-o", str(path)]) == 0
    return path


def test_report_is_self_contained_and_escaped(report):
    page = report.read_text()
    assert "<script" not in page.lower().replace("&lt;script", "")  # no script element at all
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "src&lt;i&gt;" in page  # source names are dataset-controlled too
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # no network fetches
    for section in (
        "Composition by source",
        "Rejects",
        "sequence length",
        "supervised tokens per row",
        "Truncated rows",
        "DFlash anchor",
        "Draft vocabulary coverage",
        "Example rows",
    ):
        assert section in page
    assert page.count("<svg") >= 5 and "<mark>" in page


def test_report_escapes_control_and_bidi_characters(report):
    page = report.read_text(encoding="utf-8")
    raw = sorted({c for c in page if UNSAFE.match(c)} - {"\n"})
    assert raw == []  # no ESC, BEL, C1, bidi override reaches the file
    assert '<span class="ctl">\\x1b</span>]52;c;' in page  # example row: escapes highlighted
    assert '<span class="ctl">\\u202e</span>evil' in page
    assert "ctl\\x1b]0;id\\x07" in page  # ids, in headings and tables


def test_coverage_curve_is_cumulative():
    import numpy as np

    cum = coverage_curve(np.array([0, 5, 3, 0, 2]))
    assert cum.tolist() == [0.5, 0.8, 1.0]


def test_report_errors_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    assert "not found" in capsys.readouterr().err


def test_report_renders_in_chromium_without_errors(report, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(
            "/usr/bin/chromium is absent: apt-get install -y chromium to run the browser test"
        )
    profile = tmp_path / "profile"
    cmd = [
        str(CHROMIUM),
        *FLAGS,
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=2000",
        "--dump-dom",
        report.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "Draft vocabulary coverage" in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom  # rendered as text
    assert "<script" not in dom.lower()  # nothing injected into the DOM
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert console == [], console
    assert "Content Security Policy" not in proc.stderr  # nothing tried to load or run


# --- the last full verify (verify.json) ----------------------------------------------------------
@pytest.fixture()
def fresh_set(report, tmp_path) -> Path:
    """A copy of the report's set, without any verify record."""
    folder = tmp_path / "set"
    shutil.copytree(report.parent / "out", folder)
    (folder / "verify.json").unlink(missing_ok=True)
    return folder


def verification(page: str) -> str:
    return page.split("<h2>Verification</h2>", 1)[1].split("<h2>", 1)[0]


def test_report_says_when_only_fast_checks_ran(fresh_set):
    section = verification(build_report(fresh_set))
    assert "Only the fast checks ran" in section and "draftset verify DIR" in section
    assert "FAILED" not in section and "STALE" not in section


def test_report_shows_a_failed_full_verify_and_then_a_stale_one(fresh_set):
    # a real answer declared a placeholder: the full verify fails (leakage), fast checks pass
    answer = "Mars, the red planet, fourth from the sun."
    results = run_verify(fresh_set, placeholders=("OK.", answer), speculators=False)
    assert {r.name for r in results if r.failed} == {"leakage"}
    record = json.loads((fresh_set / "verify.json").read_text())
    assert record["passed"] is False and record["time"] and record["draftset_version"]
    assert {c["name"]: c["status"] for c in record["checks"]}["leakage"] == "fail"
    assert set(record["files"]) >= {"manifest.json", "data-00000-of-00001.arrow", "state.json"}
    section = verification(build_report(fresh_set))
    assert "FAILED</span>: leakage" in section and "STALE" not in section
    assert 'class="fail">fail</td>' in section  # the failing check's row
    # the set changes after the verify (one more reject line, manifest resealed): stale
    with (fresh_set / "rejects.jsonl").open("a") as f:
        f.write("\n")
    m = json.loads((fresh_set / "manifest.json").read_text())
    m["files"]["rejects.jsonl"] = hashlib.sha256(
        (fresh_set / "rejects.jsonl").read_bytes()
    ).hexdigest()
    (fresh_set / "manifest.json").write_text(json.dumps(m))
    section = verification(build_report(fresh_set))
    assert "STALE" in section and "manifest.json, rejects.jsonl" in section


def test_report_shows_a_passed_full_verify(fresh_set):
    assert not [r for r in run_verify(fresh_set, sample=1, speculators=False) if r.failed]
    section = verification(build_report(fresh_set))
    assert "Last full verify" in section and 'class="pass">passed</span>' in section
    assert "STALE" not in section and "Only the fast checks" not in section


def test_unreadable_record_is_said_plainly(fresh_set):
    (fresh_set / "verify.json").write_text("{not json")
    assert "cannot be read" in verification(build_report(fresh_set))


def test_the_command_says_the_checks_of_the_set_it_reported(fresh_set, capsys):
    """`draftset report` on a set failing its checks wrote the page (FAILED inside) and said
    only "report written to": exit 0 and a terminal that looked like all was well. It still
    writes the page (the report's job, exit 0) and now says the verdict in a line."""
    assert cli_main(["report", str(fresh_set)]) == 0
    out = capsys.readouterr().out
    assert "checks: fast checks passed; no full verify recorded (draftset verify DIR)" in out
    assert not [r for r in run_verify(fresh_set, sample=1, speculators=False) if r.failed]
    capsys.readouterr()
    assert cli_main(["report", str(fresh_set)]) == 0
    assert "checks: fast checks passed; the last full verify passed" in capsys.readouterr().out
    with (fresh_set / "rejects.jsonl").open("a") as f:  # changed after the build and the verify
        f.write("\n")
    assert cli_main(["report", str(fresh_set)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("checks: fast checks FAILED: file_hashes"), line
    assert line.endswith(
        "the last full verify is STALE (the set changed since: draftset verify DIR)"
    ), line


def test_advice_in_the_full_verify_is_advice_not_a_failure(fresh_set, capsys):
    """A full verify whose only failing check is the advice `drafter_fitness` passed (exit 0,
    `"passed": true` in verify.json; docs/verify.md: advice is not report's verdict), but the
    report said "the last full verify FAILED: drafter_fitness" and showed FAILED in the page."""
    # a block longer than every row: no anchor, drafter fitness fails; nothing else does
    results = run_verify(fresh_set, block_size=100_000, speculators=False)
    assert [r.name for r in results if r.failed] == ["drafter_fitness"]
    assert json.loads((fresh_set / "verify.json").read_text())["passed"] is True
    section = verification(build_report(fresh_set))
    assert "FAILED" not in section, section
    assert 'class="pass">passed</span> (advice: drafter_fitness)' in section
    assert '<td>drafter_fitness</td><td class="warn">advice</td>' in section
    assert cli_main(["report", str(fresh_set)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.endswith("the last full verify passed (advice: drafter_fitness)"), line


def test_default_page_that_is_a_link_to_a_file_of_yours_says_so(fresh_set, tmp_path, capsys):
    """`DIR/report.html`, a link to a file of the user's outside the set: `report DIR` (no -o)
    said "DIR/report.html is inside the set DIR (...; only the default DIR/report.html may be
    written there)", refusing the default path in the name of the default path. It is refused
    for what it is: a file draftset did not write (left as it is)."""
    mine = tmp_path / "notes.html"
    mine.write_text("my notes\n")
    (fresh_set / "report.html").symlink_to(mine)
    assert cli_main(["report", str(fresh_set)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a report draftset wrote" in err[0], err
    assert "inside the set" not in err[0] and mine.read_text() == "my notes\n"


def test_default_page_that_is_a_link_to_another_sets_page_is_not_written_through(
    fresh_set, tmp_path, capsys
):
    """`DIR/report.html`, a link to another set's page: `report DIR` wrote DIR's page through
    the link over the other set's (its report then described DIR), exit 0. The link is no file
    draftset wrote: refused in one line, exit 2, the other page and the link left as they are."""
    other = tmp_path / "other"
    shutil.copytree(fresh_set, other)
    assert cli_main(["report", str(other)]) == 0
    theirs = (other / "report.html").read_bytes()
    (fresh_set / "report.html").unlink(missing_ok=True)
    (fresh_set / "report.html").symlink_to(other / "report.html")
    capsys.readouterr()
    assert cli_main(["report", str(fresh_set)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: {fresh_set / 'report.html'} is a symbolic link (to"
        f" {other / 'report.html'}), not a file draftset wrote: it writes a report there only"
        " as the set's own file; remove the link, or write it elsewhere with -o"
    ]
    assert (other / "report.html").read_bytes() == theirs
    assert (fresh_set / "report.html").is_symlink()
    assert not [p.name for p in other.iterdir() if ".tmp-" in p.name]


def test_output_read_by_a_reader_that_left_is_no_traceback(fresh_set, tmp_path):
    """`draftset report DIR | head -1`: head leaves after one line and report's next line met
    a closed pipe: a BrokenPipeError traceback. The page is written; the command ends quietly,
    exit 0 (it ended with exit 1, which a `set -o pipefail` script took for a failure; `show`
    ends alike), and no traceback."""
    import os
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "draftset",
            "report",
            str(fresh_set),
            "-o",
            str(tmp_path / "r.html"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before report says a word
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and not err, err.decode()[-2000:]
    assert (tmp_path / "r.html").is_file()


def test_a_sampled_verify_is_not_reported_as_every_row_verified(fresh_set, capsys):
    """A full verify that re-derived a seeded sample of the rows (`--sample N`, or any set of
    more than 20,000 rows) proves the masks of those rows only: a row it did not draw may be
    wrong (a supervised run one token off passed `verify --sample 2` on a 25-row set). Its
    record said `passed`, and the report said "the last full verify passed", as of a verify of
    every row. It now says the sample; a verify of every row reads as before."""
    assert not [r for r in run_verify(fresh_set, sample=1, speculators=False) if r.failed]
    section = verification(build_report(fresh_set))
    assert 'class="pass">passed</span> on a seeded sample of 1 of 3 rows' in section, section
    assert cli_main(["report", str(fresh_set)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.endswith("the last full verify passed on a seeded sample of 1 of 3 rows"), line
    assert not [r for r in run_verify(fresh_set, speculators=False) if r.failed]
    assert "seeded sample" not in verification(build_report(fresh_set))
    assert cli_main(["report", str(fresh_set)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.endswith("the last full verify passed"), line
