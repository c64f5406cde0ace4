"""Bounded work on hostile input: templates that loop or write without end cost one row."""

from __future__ import annotations

import faulthandler
import json
import threading
import time
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir, trl_template

from draftset.build import BuildOptions, run_build
from draftset.limits import RenderTimeout, time_limit
from draftset.read import Source
from draftset.verify import run_verify

# A real template (Qwen2.5's) behind a prologue that attacks on marked rows only: a nested
# loop of 10^10 empty steps (runs for hours), one of 10^10 writes (fills memory), and one
# 100-million-character string.
HOSTILE = (
    "{%- set first = messages[0]['content'] -%}"
    "{%- if 'HANG' in first -%}"
    "{%- for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor -%}"
    "{%- elif 'FLOOD' in first -%}"
    "{%- for i in range(100000) %}{% for j in range(100000) %}{{ first * 10000 }}{% endfor %}"
    "{% endfor -%}"
    "{%- elif 'HUGE' in first -%}{{ 'x' * 100000000 }}"
    "{%- endif -%}\n"
)


def chat(i: int, question: str) -> dict:
    return {
        "id": f"c{i}",
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": f"An answer to {question}"},
        ],
    }


def rows(path: Path) -> list[dict]:
    import pyarrow as pa

    state = json.loads((path / "state.json").read_text())
    out: list[dict] = []
    for f in state["_data_files"]:
        with pa.OSFile(str(path / f["filename"]), "rb") as src:
            out += pa.ipc.open_stream(src).read_all().to_pylist()
    return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    template = d / "hostile.jinja"
    template.write_text(HOSTILE + trl_template("qwen2_5").read_text(), encoding="utf-8")
    return template


def options(tmp: Path, template: Path, questions: list[str], **kw) -> BuildOptions:
    src = tmp / f"{kw.get('workers', 1)}-{len(questions)}.jsonl"
    src.write_text("".join(json.dumps(chat(i, q)) + "\n" for i, q in enumerate(questions)))
    return BuildOptions(
        sources=[Source("s", src)],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=tmp / f"out-{kw.get('workers', 1)}-{len(questions)}",
        chat_template_path=str(template),
        **{"workers": 1, "render_timeout": 0.5, **kw},
    )


@pytest.fixture(autouse=True)
def no_hang():
    """A hang is a failure with a traceback, not a stuck test run."""
    faulthandler.dump_traceback_later(600, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("workers", [1, 2])
def test_hostile_rows_are_rejected_and_the_run_goes_on(tmp_path, hostile, workers):
    questions = ["Hi?", "HANG now", "Why?", "FLOOD please", "HUGE one", "How?", "HANG again"]
    res = run_build(options(tmp_path, hostile, questions, workers=workers))
    per = res.accounting.to_json()["per_source"]["s"]
    assert per["rejected_by_reason"] == {"template_timeout": 2, "template_too_large": 2}, per
    assert per["written"] == 3
    rejects = [json.loads(x) for x in (res.out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["id"], r["reason"]) for r in rejects] == [
        ("c1", "template_timeout"),
        ("c3", "template_too_large"),
        ("c4", "template_too_large"),
        ("c6", "template_timeout"),
    ]
    assert "--render-timeout 0.5 s" in rejects[0]["message"]
    assert res.manifest["options"]["render_timeout"] == 0.5
    # verify neither hangs nor re-renders the bounded rejects; it re-derives every written row
    # (rendered after the timeouts, in the same process) and finds each exactly right
    checks = run_verify(res.out, speculators=False)
    failed = [c for c in checks if c.failed and c.name != "drafter_fitness"]
    assert not failed, failed
    assert next(c for c in checks if c.name == "mask_fidelity").details["rows_checked"] == 3


def test_verify_bounds_its_own_renders(hostile):
    """verify re-renders source rows itself: with build's bound, a runaway one is named."""
    from draftset.records import Conversation
    from draftset.template import ChatTemplate, TemplateSpec
    from draftset.verify_mask import _bounded_expected_rows

    tmpl = ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), hostile.read_text()))
    row = chat(0, "HANG")
    conv = Conversation(row["id"], "s", 0, row["messages"])
    expected, _, error = _bounded_expected_rows(tmpl, conv, "all", ("OK.",), 0.5)
    assert expected == [] and error is not None and error.startswith("template_timeout")
    row = chat(1, "HUGE")
    conv = Conversation(row["id"], "s", 1, row["messages"])
    expected, _, error = _bounded_expected_rows(tmpl, conv, "all", ("OK.",), 0.5)
    assert expected == [] and error is not None and error.startswith("template_too_large")
    assert tmpl.max_chars is None  # the cap is per row, never left behind
    good = chat(2, "Hi?")
    conv = Conversation(good["id"], "s", 2, good["messages"])
    expected, _, error = _bounded_expected_rows(tmpl, conv, "all", ("OK.",), 0.5)
    assert error is None and len(expected) == 1


def test_time_limit_works_off_the_main_thread():
    """The Python API called from a thread: the watchdog path, and it leaves no pending raise."""
    seen: list[str] = []

    def work() -> None:
        try:
            with time_limit(0.3):
                while True:
                    pass
        except RenderTimeout as exc:
            seen.append(str(exc))
        with time_limit(0.3):  # a block that ends in time is left alone
            time.sleep(0.05)
        time.sleep(0.5)  # nothing lands after the block
        seen.append("ok")

    t = threading.Thread(target=work)
    t.start()
    t.join(10)
    assert seen == ["rendering took longer than --render-timeout 0.3 s", "ok"]


def test_time_limit_in_the_main_thread_restores_the_alarm_handler():
    import signal

    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(RenderTimeout), time_limit(0.2):
        while True:
            pass
    with time_limit(0.2):
        pass
    time.sleep(0.4)  # the timer is off: nothing fires
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
