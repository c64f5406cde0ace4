"""`select.facts.can_train`: whether a row can give a supervised token, judged before any render
(the dedupers keep a copy that can over one that cannot)."""

from __future__ import annotations

import pytest

from draftset.core.records import RawRow
from draftset.select.facts import can_train
from draftset.sources.normalize import normalize


def row(messages: list[dict], **extra: object) -> object:
    return normalize(RawRow("s", 0, {"messages": messages, **extra}))


def u(text: str) -> dict:
    return {"role": "user", "content": text}


def a(text: str, **extra: object) -> dict:
    return {"role": "assistant", "content": text, **extra}


PAD = row([u("Hi there"), a("OK.")])
COPY = row([u("Say this back"), a("Say this back")])
WEIGHT_ZERO = row([u("Hi there"), a("Hello.", weight=0)])
CUT = row([u("Hi there"), a("Hello, and")], metadata={"truncated": True})
REAL = row([u("Hi there"), a("Hello.")])
LAST_PAD = row([u("Hi"), a("Hello."), u("And?"), a("OK.")])
PROMPT = row([u("Only a prompt")])


@pytest.mark.parametrize("turns", ["all", "last", "each"])
def test_rows_ruled_out_before_any_render_cannot_train(turns: str) -> None:
    for item in (PAD, COPY, WEIGHT_ZERO, CUT, PROMPT):
        assert not can_train(item, turns, ("OK.",), None), item
    assert can_train(REAL, turns, ("OK.",), None)
    assert can_train(LAST_PAD, turns, ("OK.",), None) is (turns != "last")


def test_a_run_answers_prompts_and_pads_so_they_can_train() -> None:
    """In `draftset run` the target answers prompt-only and padded rows (`regenerate` any);
    with `regenerate: all` every row not weighted 0; a weighted-0 row is never regenerated."""
    for answered in ("missing", "missing_reasoning", "all"):
        assert can_train(PROMPT, "all", ("OK.",), answered)
        assert can_train(PAD, "all", ("OK.",), answered)
        assert can_train(COPY, "all", ("OK.",), answered)
        assert not can_train(WEIGHT_ZERO, "all", ("OK.",), answered)
    assert can_train(CUT, "all", ("OK.",), "all")
    assert not can_train(CUT, "all", ("OK.",), "missing")


def test_the_placeholder_list_is_the_builds() -> None:
    fine = row([u("Hi there"), a("Fine.")])
    assert can_train(fine, "all", ("OK.",), None)
    assert not can_train(fine, "all", ("Fine.",), None)
