"""`draftset report`: one self-contained HTML page, dataset text escaped, renders in Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.build import BuildOptions, run_build
from draftset.read import Source
from draftset.report import build_report, coverage_curve, main

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
    assert build_report  # the module's API is importable for other callers
