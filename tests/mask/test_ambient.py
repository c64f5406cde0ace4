"""Templates that read the clock (issue 24, item 8): trl's gpt-oss template writes
``Current date: `` + ``strftime_now("%Y-%m-%d")``. A build renders with one recorded instant
(``template.now`` in the manifest), verify renders with that instant on any later day, and a row
`draftset generate` wrote is rendered with the instant its answers were asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import qwen3_tokenizer_dir, trl_template
from families import FAMILIES, make_tokenizer

from draftset.checks.verify import run_verify
from draftset.config.options import BuildOptions
from draftset.config.preflight import PreflightError, check_build
from draftset.mask.ambient import FrozenClock
from draftset.pipeline.build import run_build
from draftset.sources.read import Source

ROW = {
    "id": "r",
    "messages": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Add two and two."},
    ],
}


@pytest.fixture(scope="module")
def gptoss_dir(tmp_path_factory) -> Path:
    return make_tokenizer(FAMILIES["gptoss"], tmp_path_factory.mktemp("tok"))


def build(tmp: Path, tokdir: Path, template: str, rows: list[dict], **kw) -> Path:
    src = tmp / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    opts = BuildOptions(
        [Source("rows", src)],
        str(tokdir),
        tmp / "set",
        chat_template_path=str(trl_template(template)),
        workers=1,
        **kw,
    )
    return run_build(opts).out


def decoded_rows(folder: Path, tokdir: Path) -> list[str]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokdir / "tokenizer.json"))
    with pa.memory_map(str(next(folder.glob("*.arrow")))) as f:
        table = pa.ipc.open_stream(f).read_all()
    return [tok.decode(ids, skip_special_tokens=False) for ids in table["input_ids"].to_pylist()]


def failures(folder: Path) -> list[tuple[str, str]]:
    return [
        (r.name, r.summary)
        for r in run_verify(folder, speculators=False)
        if r.failed and r.name != "drafter_fitness"
    ]


def test_build_on_a_past_day_verifies_today(tmp_path, gptoss_dir):
    """Built "on" 2020-01-02: the rows hold that date, the manifest records the instant, and
    verify (run today) renders with it: before, verify rendered today's date and failed
    mask_fidelity on every row of a set built on another day."""
    out = build(tmp_path, gptoss_dir, "gptoss", [ROW], template_now="2020-01-02T03:04:05")
    (text,) = decoded_rows(out, gptoss_dir)
    assert "Current date: 2020-01-02" in text
    m = json.loads((out / "manifest.json").read_text())
    assert m["template"]["now"] == "2020-01-02T03:04:05"
    assert failures(out) == []


def test_generated_row_renders_with_the_instant_it_was_asked(tmp_path, gptoss_dir):
    """A row from `draftset generate` carries ``metadata.template_now``: its prompt is rendered
    with that day (what the server's template wrote), not the build's."""
    row = {**ROW, "metadata": {"template_now": "2021-05-06T07:08:09"}}
    out = build(tmp_path, gptoss_dir, "gptoss", [row], template_now="2020-01-02T03:04:05")
    (text,) = decoded_rows(out, gptoss_dir)
    assert "Current date: 2021-05-06" in text and "2020-01-02" not in text
    assert failures(out) == []


def test_template_without_clock_records_no_instant(tmp_path):
    out = build(tmp_path, qwen3_tokenizer_dir(), "qwen3", [ROW])
    assert "now" not in json.loads((out / "manifest.json").read_text())["template"]


def test_build_fixes_one_instant_and_refuses_a_bad_one(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps(ROW) + "\n")
    opts = BuildOptions([Source("rows", src)], str(qwen3_tokenizer_dir()), tmp_path / "o")
    assert FrozenClock(check_build(opts).template_now or "")("%Y") >= "2026"
    opts.template_now = "yesterday"
    with pytest.raises(PreflightError, match="template_now"):
        check_build(opts)
