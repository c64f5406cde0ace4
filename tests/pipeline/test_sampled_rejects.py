"""A sampled build (--max-samples, a source's count) samples the rows it reads, before dedup and
the row step: rejected sampled rows are not replaced, so the set can hold fewer rows than asked
while rows that were not sampled could have filled it. Said in one note by build's summary and
by report (a probe: 30 rows, --max-samples 10, 6 written, nothing said)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir
from rich.console import Console
from rows import write_jsonl

from draftset.config.options import BuildOptions
from draftset.core.counters import manifest_sampling_notes, sampled_rejects_notes
from draftset.pipeline.build import run_build
from draftset.pipeline.summary import print_build_summary
from draftset.review.report import build_report
from draftset.sources.read import Source


def _chat(user: str, answer: str, rid: str) -> dict:
    return {
        "id": rid,
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
    }


def _rows() -> list[dict]:
    """10 unique trainable prompts, each with an exact copy right after it, then 10 rows the
    row step rejects ("OK." answers: no_supervised_turn)."""
    rows = []
    for i in range(10):
        row = _chat(f"Question number {i}: what is {i} plus {i}?", f"{i} plus {i} is {2 * i}.", "")
        rows += [{**row, "id": f"q{i}"}, {**row, "id": f"q{i}-copy"}]
    rows += [_chat(f"Say something about item {i} today.", "OK.", f"ph{i}") for i in range(10)]
    return rows


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sampled")
    src = Source("a", write_jsonl(tmp / "a.jsonl", _rows()))
    opts = BuildOptions(
        [src], str(qwen3_tokenizer_dir()), tmp / "out", max_samples=10, seed=0, workers=1
    )
    return run_build(opts)


def _note(result) -> str:
    total = result.accounting.total()
    rejected = ", ".join(f"{k}={v}" for k, v in sorted(total.rejected.items()))
    return (
        f"--max-samples 10: 10 rows sampled (before dedup and the row step),"
        f" {total.written} written, {total.rejected_total} rejected ({rejected}): rejected rows"
        " are not replaced; 20 rows were not sampled: raise --max-samples to get more"
    )


def test_a_sampled_build_says_the_rows_its_rejects_cost(sampled):
    total = sampled.accounting.total()
    # the probe's case: fewer rows than asked while 20 rows were left out by sampling
    assert (total.read, total.sampled_out) == (10, 20)
    assert total.written < 10 and total.rejected_total == 10 - total.written
    assert _note(sampled) in sampled.notes
    screen = io.StringIO()
    print_build_summary(sampled, Console(file=screen, width=400))
    assert f"note: {_note(sampled)}" in screen.getvalue()


def test_the_report_says_it_from_the_manifest(sampled):
    manifest = json.loads((sampled.out / "manifest.json").read_text())
    assert manifest_sampling_notes(manifest) == [_note(sampled)]
    assert f'<p class="warn">note: {_note(sampled)}</p>' in build_report(sampled.out)


def test_nothing_is_said_when_no_sampled_row_was_lost(tmp_path):
    rows = [
        _chat(f"Question number {i}: what is {i} times two?", f"It is {2 * i}.", f"r{i}")
        for i in range(6)
    ]
    src = Source("a", write_jsonl(tmp_path / "a.jsonl", rows))
    opts = BuildOptions(
        [src], str(qwen3_tokenizer_dir()), tmp_path / "out", max_samples=3, workers=1
    )
    result = run_build(opts)
    assert result.accounting.total().written == 3
    assert not [n for n in result.notes if "sampled" in n]
    manifest = json.loads((result.out / "manifest.json").read_text())
    assert manifest_sampling_notes(manifest) == []


def _counts(read: int, written: int, sampled_out: int, **rejected: int) -> dict:
    return {
        "read": read,
        "written": written,
        "needs_generation": read - written - sum(rejected.values()),
        "sampled_out": sampled_out,
        "rejected_by_reason": rejected,
    }


def test_a_source_count_names_the_source_and_its_count():
    per = {"a": _counts(5, 3, 7, too_long=2), "b": _counts(4, 2, 0, duplicate=2)}
    assert sampled_rejects_notes(per, {"a": 5, "b": None}, None) == [
        "source a: count 5: 5 rows sampled (before dedup and the row step), 3 written,"
        " 2 rejected (too_long=2): rejected rows are not replaced; 7 rows were not sampled:"
        " raise its count to get more"
    ]  # b was not sampled (all read): its rejects cost nothing that was left


def test_rows_queued_for_generation_are_said_and_the_hint_fits_the_options():
    # --max-samples over a counted source (all its rows sampled out) and a weighted one (all
    # read): only the count can bring more
    per = {"a": _counts(2, 1, 3, duplicate=1), "b": _counts(4, 1, 0, no_supervised_turn=1)}
    assert sampled_rejects_notes(per, {"a": 2, "b": None}, 6) == [
        "--max-samples 6: 6 rows sampled (before dedup and the row step), 2 written,"
        " 2 queued for generation, 2 rejected (duplicate=1, no_supervised_turn=1): rejected rows"
        " are not replaced; 3 rows were not sampled: raise the sources' counts to get more"
    ]
    assert sampled_rejects_notes({"a": _counts(4, 4, 9)}, {"a": None}, 4) == []  # none lost
    assert sampled_rejects_notes({"a": _counts(4, 3, 0, duplicate=1)}, {"a": None}, 9) == []


def test_a_mix_chooses_after_the_filters_and_has_its_own_report():
    manifest = {
        "options": {"max_samples": 4},
        "selection": {"mix": {"sources": {"a": 1.0}}},
        "inputs": [{"name": "a", "count": None}],
        "counts": {"per_source": {"a": _counts(4, 3, 9, too_long=1)}},
    }
    assert manifest_sampling_notes(manifest) == []
    del manifest["selection"]["mix"]
    assert len(manifest_sampling_notes(manifest)) == 1


def test_an_old_or_partial_manifest_says_nothing(tmp_path: Path):
    assert manifest_sampling_notes({}) == []
