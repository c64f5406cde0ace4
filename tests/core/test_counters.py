"""Counters declared once and merged by addition: per-batch counts add up to the whole stream's."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import field, fields, make_dataclass
from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from draftset.core import reasons
from draftset.core.counters import Accounting, SourceCounts
from draftset.core.records import Conversation, PromptOnly, Reject
from draftset.mask.encode import EncodedRow
from draftset.mask.render import ConversationPlan, RowPlan
from draftset.mask.step import ItemResult, count_results


def numbered(start: int) -> SourceCounts:
    """Every field set, each to a different number (counters: two reasons)."""
    c = SourceCounts()
    for i, f in enumerate(fields(SourceCounts), start):
        if isinstance(getattr(c, f.name), Counter):
            getattr(c, f.name).update({"x": i, "y": 2 * i})
        else:
            setattr(c, f.name, i)
    return c


def test_source_counts_add_every_field():
    a, b = numbered(1), numbered(100)
    total = a + b
    for f in fields(SourceCounts):
        mine, theirs, got = getattr(a, f.name), getattr(b, f.name), getattr(total, f.name)
        if isinstance(got, Counter):
            assert got == Counter({k: mine[k] + theirs[k] for k in ("x", "y")}), f.name
        else:
            assert got == mine + theirs, f.name
    assert a == numbered(1) and b == numbered(100)  # + leaves its operands alone
    a += b
    assert a == total  # += adds in place


def test_a_new_counter_is_one_field():
    """JSON form and merge come from the fields: a counter added to the dataclass needs no
    other edit (a hand-written field list would drop it)."""
    extended = make_dataclass(
        "Extended",
        [("new_count", int, 0), ("new_by", Counter, field(default_factory=Counter))],
        bases=(SourceCounts,),
    )
    a, b = extended(new_count=2), extended(new_count=3)
    a.new_by["r"] += 1
    b.new_by["r"] += 4
    total = a + b
    assert (total.new_count, total.new_by) == (5, Counter({"r": 5}))
    out = total.to_json()
    assert (out["new_count"], out["new_by_by_reason"]) == (5, {"r": 5})


def test_to_json_keeps_its_keys_and_order():
    """The manifest's counts are byte-identical to before: same keys, same order."""
    c = numbered(1)
    assert list(c.to_json()) == [
        "available",
        "sampled_out",
        "read",
        "written",
        "rejected",
        "rejected_by_reason",
        "needs_generation",
        "rows_out",
        "row_rejects_by_reason",
        "truncated",
        "supervised_turns",
        "context_turns_by_reason",
        "trailing_turns_trimmed",
        "tokens",
        "supervised_tokens",
        "server_ids_used",
        "server_ids_mismatch",
        "generation_tags_agree",
        "generation_tags_disagree",
        "placeholder_rows",
        "empty_think_rows",
        "reasoning_not_rendered",
        "unread_fields",  # a mapping by field name, not "_by_reason"
    ]
    assert c.to_json()["rejected"] == c.rejected_total == 5 * 3  # field 5: x=5, y=10
    assert c.to_json()["rejected_by_reason"] == {"x": 5, "y": 10}


def test_accounting_adds_by_source_and_keeps_the_run_order():
    a = Accounting(["s1", "s2"])
    a["s2"].read = 3
    b = Accounting(["s3", "s2"])
    b["s2"].read = 4
    b["s3"].rejected["bad"] = 1
    total = a + b
    assert list(total.sources) == ["s1", "s2", "s3"]
    assert (total["s2"].read, total["s3"].rejected["bad"]) == (7, 1)
    assert a["s2"].read == 3 and "s3" not in a.sources  # + copies
    b["s3"].rejected["bad"] += 5
    assert total["s3"].rejected["bad"] == 1  # ... down to the counters
    a += b  # in place, with b as it is now
    assert list(a.sources) == ["s1", "s2", "s3"]
    assert (a["s2"].read, a["s3"].rejected["bad"]) == (7, 6)


# --- count_results: one batch's outcomes --------------------------------------------------------
def encoded(src: str, row: int, n: int, sup: int, truncated: bool = False) -> EncodedRow:
    mask = np.array([1] * sup + [0] * (n - sup), dtype=np.int8)
    return EncodedRow(f"{src}-{row}", src, row, np.arange(n, dtype=np.int32), mask, truncated)


def test_count_results_counts_every_outcome():
    plan = ConversationPlan(
        rows=[RowPlan("c", "s", 2, [], supervised_turns=2), RowPlan("c", "s", 2, [], 1)],
        context_turns=Counter({reasons.TURN_NO_END_OF_TURN: 1}),
        trailing_turns_trimmed=1,
        generation_tags_agree=2,
        generation_tags_disagree=3,
        server_ids_used=4,
        server_ids_mismatch=5,
    )
    two_rows = ItemResult(
        Conversation("c", "s", 2, []),
        rows=[encoded("s", 2, 10, 4), encoded("s", 2, 6, 6, truncated=True)],
        rejects=[Reject("s", 2, "c#3", reasons.TOO_LONG, "long")],
        plan_stats=plan,
    )
    results = [
        ItemResult(Reject("s", 0, None, reasons.UNKNOWN_FORMAT, "?")),
        ItemResult(PromptOnly("p", "s", 1, [])),
        two_rows,
        ItemResult(
            Conversation("d", "t", 0, []),
            rejects=[Reject("t", 0, "d", reasons.NO_SUPERVISED_TURN, "placeholder")],
            placeholder_only=True,
        ),
        ItemResult(Conversation("e", "t", 1, []), rows=[encoded("t", 1, 3, 1)], empty_think=True),
    ]
    got = count_results(results).to_json()
    assert list(got["per_source"]) == ["s", "t"]
    s, t = got["per_source"]["s"], got["per_source"]["t"]
    assert s["rejected_by_reason"] == {reasons.UNKNOWN_FORMAT: 1}
    assert s["row_rejects_by_reason"] == {reasons.UNKNOWN_FORMAT: 1, reasons.TOO_LONG: 1}
    assert (s["needs_generation"], s["written"], s["rows_out"]) == (1, 1, 2)
    assert (s["tokens"], s["supervised_tokens"], s["truncated"]) == (16, 10, 1)
    assert s["supervised_turns"] == 3
    # ConversationPlan's counters are summed by name, every one of them
    assert s["context_turns_by_reason"] == {reasons.TURN_NO_END_OF_TURN: 1}
    assert (s["trailing_turns_trimmed"], s["generation_tags_agree"]) == (1, 2)
    assert (s["generation_tags_disagree"], s["server_ids_used"], s["server_ids_mismatch"]) == (
        3,
        4,
        5,
    )
    assert (s["placeholder_rows"], s["empty_think_rows"]) == (0, 0)
    assert t["rejected_by_reason"] == {reasons.NO_SUPERVISED_TURN: 1}
    assert (t["placeholder_rows"], t["empty_think_rows"], t["written"]) == (1, 1, 1)


def test_row_facts_count_only_with_their_outcome():
    """A placeholder row counts when it was rejected no_supervised_turn, not for another reason;
    an empty-think row only when written."""
    results = [
        ItemResult(
            Conversation("a", "s", 0, []),
            rejects=[Reject("s", 0, "a", reasons.TOO_LONG, "long")],
            placeholder_only=True,
        ),
        ItemResult(
            Conversation("b", "s", 1, []),
            rejects=[Reject("s", 1, "b", reasons.TOO_LONG, "long")],
            empty_think=True,
        ),
    ]
    c = count_results(results)["s"]
    assert (c.placeholder_rows, c.empty_think_rows, c.rejected_total) == (0, 0, 2)


# --- any grouping of batches adds up to the whole stream ----------------------------------------
SOURCES = ("a", "b", "c")
REASONS = (reasons.TOO_LONG, reasons.DUPLICATE, reasons.NO_SUPERVISED_TURN)


@st.composite
def item_results(draw: st.DrawFn) -> ItemResult:
    src = draw(st.sampled_from(SOURCES))
    row = draw(st.integers(0, 1000))
    kind = draw(st.sampled_from(["reject", "prompt", "conversation"]))
    if kind == "reject":
        return ItemResult(Reject(src, row, None, draw(st.sampled_from(REASONS)), "m"))
    if kind == "prompt":
        return ItemResult(PromptOnly(f"p{row}", src, row, []))
    rows = [
        encoded(src, row, n, draw(st.integers(0, n)), draw(st.booleans()))
        for n in draw(st.lists(st.integers(1, 40), max_size=3))
    ]
    rejects = [
        Reject(src, row, None, r, "m")
        for r in draw(st.lists(st.sampled_from(REASONS), min_size=0 if rows else 1, max_size=2))
    ]
    plan = ConversationPlan(
        rows=[RowPlan("x", src, row, [], draw(st.integers(0, 3))) for _ in rows],
        context_turns=Counter(draw(st.lists(st.sampled_from(["u", "v"]), max_size=3))),
        trailing_turns_trimmed=draw(st.integers(0, 2)),
        server_ids_used=draw(st.integers(0, 2)),
    )
    return ItemResult(
        Conversation(f"c{row}", src, row, []),
        rows=rows,
        rejects=rejects,
        plan_stats=plan,
        placeholder_only=draw(st.booleans()),
        empty_think=draw(st.booleans()),
    )


@st.composite
def stream_and_cuts(draw: st.DrawFn) -> tuple[list[ItemResult], list[int]]:
    results = draw(st.lists(item_results(), max_size=30))
    cuts = sorted(draw(st.sets(st.integers(0, len(results)), max_size=6)))
    return results, cuts


def merge_in_a_tree(parts: list[Accounting], split: list[int]) -> Accounting:
    """Merge the parts pairwise in a drawn tree shape (workers merging partial sums)."""
    if len(parts) == 1:
        return parts[0]
    mid = 1 + split[0] % (len(parts) - 1) if split else len(parts) // 2
    rest = split[1:]
    return merge_in_a_tree(parts[:mid], rest) + merge_in_a_tree(parts[mid:], rest)


@settings(max_examples=150, deadline=None)
@given(stream_and_cuts(), st.lists(st.integers(0, 100), max_size=8))
def test_batches_add_up_to_the_whole_stream(stream, split):
    results, cuts = stream
    bounds = [0, *cuts, len(results)]
    batches = [results[i:j] for i, j in pairwise(bounds)]
    whole = count_results(results)
    parts = [count_results(b) for b in batches]
    running = Accounting(list(SOURCES))  # the driver's way: acct += batch_counts
    for part in parts:
        running += part
    assert {n: c for n, c in running.sources.items() if c != SourceCounts()} == whole.sources
    assert merge_in_a_tree(parts, split) == whole
    assert json.dumps(running.total().to_json()) == json.dumps(whole.total().to_json())
    # and every row is accounted for: written + rejected + needs_generation = rows seen
    seen = Counter(res.item.source for res in results)
    for name, c in whole.sources.items():
        assert c.written + c.rejected_total + c.needs_generation == seen[name]
