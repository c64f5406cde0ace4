"""verify of a `draftset run` set: the answers the run rejoined are proven against the source rows.

`run` builds with an overlay (`sources/overlay.py`): a line of its answers file replaces the
selected row of that id whole (messages, tools), and a line of its error or too-long files
rejects it. verify re-reads those files, but the files are the pipeline's product: what in them
follows from the source rows (the prompt every answer was asked, which rows are asked at all, a
prompt too long to send) is re-derived, not trusted. Each tampered answers file below is what a
buggy `generate` (answers under the wrong ids, an edited prompt) would write; before, verify
passed every one of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template

from draftset.checks.verify import run_verify
from draftset.config.options import BuildOptions
from draftset.pipeline.build import run_build
from draftset.sources.read import Source

ROWS: list[dict[str, Any]] = [
    {  # human answered: never sent under `regenerate: missing`
        "id": "kept",
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue is a colour."},
        ],
    },
    {"id": "p-1", "messages": [{"role": "user", "content": "What is TCP?"}]},
    {  # two questions in a row (MT-Bench style): an answer after each
        "id": "p-2",
        "messages": [
            {"role": "user", "content": "What is UDP?"},
            {"role": "user", "content": "And when is it used?"},
        ],
    },
    {  # padded: sent without its pad
        "id": "pad",
        "messages": [
            {"role": "user", "content": "Explain DNS briefly."},
            {"role": "assistant", "content": "OK."},
        ],
    },
]


def _answer(rid: str, prompt: str, answer: str) -> dict[str, Any]:
    return {
        "id": rid,
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer},
        ],
        "metadata": {"model": "m", "finish_reason": "stop", "answers": 1},
    }


ANSWERS = [
    _answer("p-1", "What is TCP?", "TCP is a reliable stream protocol."),
    {
        "id": "p-2",
        "messages": [
            {"role": "user", "content": "What is UDP?"},
            {"role": "assistant", "content": "UDP is a datagram protocol."},
            {"role": "user", "content": "And when is it used?"},
            {"role": "assistant", "content": "For games and streaming."},
        ],
        "metadata": {"model": "m", "finish_reason": "stop", "answers": 2},
    },
    _answer("pad", "Explain DNS briefly.", "DNS maps names to addresses."),
]


def _jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _run_set(
    tmp: Path,
    answers: list[dict[str, Any]],
    too_long: list[dict[str, Any]],
    regenerate: str = "missing",
    llama: bool = False,
) -> Path:
    """What `run`'s build stage makes of these answer and too-long files."""
    src = _jsonl(tmp / "a.jsonl", ROWS)
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    overlay = [
        _jsonl(work / "answers.jsonl", answers),
        _jsonl(work / "answers.errors.jsonl", []),
        _jsonl(work / "too_long.jsonl", too_long),
    ]
    opts = BuildOptions(
        [Source("a", src)],
        str(llama32_tokenizer_dir() if llama else qwen3_tokenizer_dir()),
        tmp / "out",
        chat_template_path=str(trl_template("llama3_2")) if llama else None,
        workers=1,
        max_length=256,
        overwrite=True,
        overlay=[str(p) for p in overlay],
        run_info={"work": str(work), "model": "m", "regenerate": regenerate},
    )
    return run_build(opts).out


def _failures(out: Path) -> dict[str, list[str]]:
    results = run_verify(out, speculators=False, record=False)
    # drafter_fitness is advice (these rows are too short for a DFlash block), never a failure
    return {
        r.name: list(r.details.get("messages", []))
        for r in results
        if r.failed and r.name != "drafter_fitness"
    }


def test_answers_that_follow_their_rows_pass(tmp_path: Path) -> None:
    assert _failures(_run_set(tmp_path, ANSWERS, [])) == {}


def _edited_prompt() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    answers = [dict(a) for a in ANSWERS]
    answers[0] = _answer("p-1", "What is a moon made of?", "TCP is a reliable stream protocol.")
    return answers, []


def _swapped_ids() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    a, b, c = (dict(x) for x in ANSWERS)
    a["id"], b["id"] = b["id"], a["id"]
    return [a, b, c], []


def _unasked_row() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return [*ANSWERS, _answer("kept", "Name a colour.", "I will not say.")], []


def _short_prompt_too_long() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    line = {
        "id": "p-2",
        "reason": "too_long",
        "message": "the prompt alone is 4,000 tokens, max_length is 256: never sent",
        "source": "a",
        "row": 2,
    }
    return [a for a in ANSWERS if a["id"] != "p-2"], [line]


def _dropped_turn_said_stopped() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The second question of a two-question prompt left out, the line saying the answers
    stopped at a tool call: its last answer calls none."""
    rows = [*ANSWERS]
    line = _answer("p-2", "What is UDP?", "UDP is a datagram protocol.")
    line["metadata"] = {**line["metadata"], "ends_at_tool_call": True}
    rows[1] = line
    return rows, []


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (_edited_prompt, "p-1: the answers file's line for it asks another prompt"),
        (_swapped_ids, "p-1: the answers file's line for it asks another prompt"),
        (_unasked_row, "kept: the answers file has a line for it, a row run does not send"),
        (_short_prompt_too_long, "p-2: rejected as too_long, but its prompt is"),
        (_dropped_turn_said_stopped, "p-2: the answers file's line for it asks another prompt"),
    ],
    ids=["edited_prompt", "swapped_ids", "unasked_row", "short_prompt_too_long", "said_stopped"],
)
def test_a_tampered_answers_file_fails_row_identity(tmp_path: Path, tamper, expected: str) -> None:
    answers, too_long = tamper()
    fails = _failures(_run_set(tmp_path, answers, too_long))
    assert set(fails) == {"row_identity"}, fails
    assert any(m.startswith(expected) for m in fails["row_identity"]), fails


@pytest.mark.parametrize(("llama", "sent"), [(False, True), (True, False)], ids=["qwen3", "llama"])
def test_missing_reasoning_sends_a_row_only_where_the_template_thinks(
    tmp_path: Path, llama: bool, sent: bool
) -> None:
    """`regenerate: missing_reasoning` sends a row whose answers lack reasoning only under a
    template that trains them as empty think blocks (Qwen3's), never under Llama-3.2's."""
    answers = [*ANSWERS, _answer("kept", "Name a colour.", "Green is one too.")]
    fails = _failures(_run_set(tmp_path, answers, [], "missing_reasoning", llama))
    if sent:
        assert fails == {}
    else:
        assert set(fails) == {"row_identity"}, fails
        assert fails["row_identity"] == [
            "kept: the answers file has a line for it, a row run does not send (a row 0:"
            " answered already; regenerate: missing_reasoning)"
        ]
