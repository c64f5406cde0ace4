"""Every render draftset runs is bounded in time and memory: the probes as well as the rows.

Each hostile template is a small file in ``tests/data/templates/bounds/`` (a ChatML template
behind a one-line attack). A build with it runs in its own process, under a wrapper process
that reports the build's peak resident memory (``RUSAGE_CHILDREN``), with a 6 GB address-space
limit so that a case that is not bounded fails with a ``MemoryError`` instead of exhausting
the machine, and a timeout so that one that hangs fails instead of hanging the test run.

Before the bounds (issue 25, item 8): a nested loop hung 600 s inside the content-parts probe,
a flood of output grew to 1.6 GB in 40 s, ``'x' * 3000000000`` was built while compiling
(9.2 GB, 71 s), the same bomb in a row peaked at 3.4 GB, and a string doubled with ``~`` or
``+`` in a loop reached 3.5 GB within the 5 s render timeout.
"""

from __future__ import annotations

import faulthandler
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, qwen3_tokenizer_dir

BOUNDS = REPO / "tests" / "data" / "templates" / "bounds"
EXTRA_MB = 250  # what a bounded case may add to a normal build's peak (a value of 16 Mi chars)
WALL_S = 120  # generous for a loaded 2-core machine; a bounded case takes ~10 s
ROWS = ["Hi?", "BOMB here", "Bye?"]  # the row attacks fire on the second row only

# Runs ``draftset`` as its own child: its peak memory is the wrapper's RUSAGE_CHILDREN.
_WRAPPER = """
import json, resource, subprocess, sys, time
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
cmd = [sys.executable, "-c", "import sys; from draftset.cli import main; sys.exit(main())"]
t0 = time.monotonic()
try:
    p = subprocess.run(cmd + sys.argv[2:], capture_output=True, text=True, preexec_fn=limit,
                       timeout=float(sys.argv[1]))
    rc, err = p.returncode, p.stderr
except subprocess.TimeoutExpired as exc:
    rc, err = "timeout", str(exc.stderr or "")
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
print(json.dumps({"rc": rc, "err": err, "peak_mb": peak, "wall": time.monotonic() - t0}))
"""


@pytest.fixture(autouse=True)
def no_hang():
    """A render without a bound in this process is a failure with a traceback, not a hang."""
    faulthandler.dump_traceback_later(WALL_S + 120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def build_with(template: str, tmp: Path) -> tuple[dict, Path]:
    """Build three chat rows with ``template``: (the wrapper's report, the output folder)."""
    src = tmp / "rows.jsonl"
    rows = [
        {
            "id": f"r{i}",
            "messages": [
                {"role": "user", "content": q},
                {"role": "assistant", "content": "An answer."},
            ],
        }
        for i, q in enumerate(ROWS)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp / "out"
    args = [str(src), "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(out)]
    args += ["--chat-template", str(BOUNDS / template), "--no-progress", "--workers", "1"]
    p = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(WALL_S), "build", *args],
        capture_output=True,
        text=True,
        timeout=WALL_S + 60,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), out


@pytest.fixture(scope="module")
def normal_peak_mb(tmp_path_factory) -> int:
    """A normal build's peak with the same rows and tokenizer (~450 MB)."""
    report, _ = build_with("chatml.jinja", tmp_path_factory.mktemp("normal"))
    assert report["rc"] == 0, report["err"]
    return int(report["peak_mb"])


def assert_bounded(report: dict, normal_peak_mb: int) -> None:
    assert report["rc"] != "timeout", f"still running after {WALL_S} s: {report['err'][-500:]}"
    assert report["wall"] < WALL_S
    assert report["peak_mb"] < normal_peak_mb + EXTRA_MB, (
        f"peak {report['peak_mb']} MB (a normal build: {normal_peak_mb} MB); {report['err'][-500:]}"
    )


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("probe_hang.jinja", "longer than --render-timeout 5 s"),
        ("probe_flood.jinja", "wrote more than 16,777,216 characters"),
        ("compile_bomb.jinja", "a constant of 3,000,000,000 characters"),
        ("probe_concat_doubling.jinja", "a value of 33,554,432 characters (~)"),
        ("probe_plus_doubling.jinja", "a value of 33,554,432 characters (str + str)"),
    ],
)
def test_a_template_past_a_bound_in_its_probes_is_one_line_exit_2(
    tmp_path, normal_peak_mb, template, said
):
    report, out = build_with(template, tmp_path)
    assert_bounded(report, normal_peak_mb)
    assert report["rc"] == 2, report["err"]
    line = report["err"].strip()
    assert "\n" not in line and line.startswith("draftset: error: chat template "), line
    assert str(BOUNDS / template) in line and said in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("row_bomb.jinja", "a value of 27,000,000,000 characters (str * ...)"),
        ("row_concat_doubling.jinja", "characters (~), more than the"),
        ("row_plus_doubling.jinja", "characters (str + str), more than the"),
    ],
)
def test_a_row_past_a_bound_is_rejected_and_the_build_goes_on(
    tmp_path, normal_peak_mb, template, said
):
    report, out = build_with(template, tmp_path)
    assert_bounded(report, normal_peak_mb)
    assert report["rc"] == 0, report["err"]
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["id"], r["reason"]) for r in rejects] == [("r1", "template_too_large")]
    assert said in rejects[0]["message"]


# --- the renders outside build's own probes and rows ----------------------------------------------
_HANG_ON_Q = (
    "{%- if messages[0].content == 'Q' %}{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% endfor %}{% endfor %}{% endif -%}\n"
)
_FLOOD_ON_Q = (
    "{%- if messages[0].content == 'Q' %}{% set ns = namespace(s='x') %}{% for i in range(64) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{% endif -%}\n"
)


@pytest.mark.parametrize(("attack", "said"), [(_HANG_ON_Q, "longer than"), (_FLOOD_ON_Q, "(~)")])
def test_the_empty_think_probe_is_bounded(attack, said):
    """`run` and build's empty-think note render a probe conversation (user "Q"); it ran
    without a time bound and without a cap on its output."""
    from draftset.mask.hygiene import trains_empty_think
    from draftset.mask.template import TokenizerError

    text = attack + (BOUNDS / "chatml.jinja").read_text()
    t0 = time.monotonic()
    with pytest.raises(TokenizerError, match=r"chat template t\.jinja: a probe render") as err:
        trains_empty_think(text, {}, timeout=0.5, name="t.jinja")
    assert time.monotonic() - t0 < 30
    assert said in str(err.value)


def test_verify_probes_are_bounded(monkeypatch):
    """verify's own probes (content parts, reasoning, arguments) render through transformers'
    public path: bounded as build's are, one usage line when a bound is passed."""
    from draftset.checks import mask as checks_mask
    from draftset.mask.template import ChatTemplate, TemplateSpec, TokenizerError

    spec = TemplateSpec(str(qwen3_tokenizer_dir()), render_timeout=0.5, origin="t.jinja")
    tmpl = ChatTemplate(spec)

    def hangs(*args, **kwargs):
        while True:
            pass

    monkeypatch.setattr(tmpl, "render_reference", hangs)
    t0 = time.monotonic()
    with pytest.raises(TokenizerError, match=r"t\.jinja: a probe render .* --render-timeout"):
        checks_mask.template_shape(tmpl)
    assert time.monotonic() - t0 < 30


_HANG_ON_ROW = _HANG_ON_Q.replace("== 'Q'", "== 'BOMB here'")
_DOUBLE_ON_ROW = (BOUNDS / "row_plus_doubling.jinja").read_text().split("\n", 1)[0] + "\n"


@pytest.mark.parametrize(
    ("attack", "reason"),
    [(_DOUBLE_ON_ROW, "template_too_large"), (_HANG_ON_ROW, "template_timeout")],
)
def test_run_bounds_the_prompt_render_of_a_row(tmp_path, attack, reason):
    """`run` renders each prompt it would send (is it too long?): that render had no bound."""
    from draftset.config.options import BuildOptions
    from draftset.core.records import Conversation
    from draftset.mask.template import ChatTemplate, TemplateSpec
    from draftset.pipeline.run_select import _prompt_problem
    from draftset.sources.read import Source

    text = attack + (BOUNDS / "chatml.jinja").read_text()
    tmpl = ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), text))
    b = BuildOptions(
        sources=[Source("s", tmp_path / "x.jsonl")],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=tmp_path / "o",
        render_timeout=0.5,
    )
    row = Conversation("r1", "s", 1, [{"role": "user", "content": "BOMB here"}])
    t0 = time.monotonic()
    problem = _prompt_problem(tmpl, row, row.messages, {}, b)
    assert time.monotonic() - t0 < 30
    assert problem is not None and problem[0] == reason, problem
    assert _prompt_problem(tmpl, row, [{"role": "user", "content": "Hi?"}], {}, b) is None
