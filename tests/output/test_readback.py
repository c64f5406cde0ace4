"""output/readback.batch_stats: the vectorized per-row statistics equal their plain per-row
definitions (docs/verify.md), on random batches and on the edges (empty rows, rows shorter than
a block, a batch shorter than a block, all or no tokens supervised)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from draftset.output.readback import Batch, batch_facts, batch_stats


def reference_stats(masks: list[list[int]], block: int) -> dict[str, list[int]]:
    """One row at a time, straight from the definitions."""
    out: dict[str, list[int]] = {k: [] for k in ("supervised", "pairs", "runs", "anchors")}
    out["full_blocks"] = []
    for m in masks:
        n = len(m)
        sup = [p for p in range(n) if m[p] == 1]
        out["supervised"].append(len(sup))
        out["pairs"].append(sum(1 for p in sup if p + 1 < n and m[p + 1] == 1))
        out["runs"].append(sum(1 for p in sup if p + 1 == n or m[p + 1] != 1))
        anchors = [p for p in sup if p + block <= n]
        out["anchors"].append(len(anchors))
        out["full_blocks"].append(sum(1 for p in anchors if all(m[p : p + block])))
    return out


def make_batch(masks: list[list[int]]) -> Batch:
    lengths = np.array([len(m) for m in masks], dtype=np.int64)
    offsets = np.zeros(len(masks) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.array([v for m in masks for v in m], dtype=np.int8)
    return Batch(
        0,
        [None] * len(masks),
        [None] * len(masks),
        lengths,
        lengths,
        lengths,
        np.zeros(flat.size, dtype=np.int64),
        flat,
        offsets,
    )


def check(masks: list[list[int]], block: int) -> None:
    got = batch_stats(make_batch(masks), block)
    want = reference_stats(masks, block)
    assert {k: v.tolist() for k, v in got.items()} == want


masks_strategy = st.lists(
    st.one_of(
        st.lists(st.sampled_from([0, 1]), max_size=40),
        st.lists(st.just(1), max_size=40),  # long supervised runs: full blocks
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(masks_strategy, st.integers(min_value=2, max_value=20))
def test_batch_stats_equal_the_per_row_definitions(masks, block):
    check(masks, block)


def test_batch_stats_edges():
    check([[]], 2)  # one empty row
    check([[], [1, 1, 1], []], 2)  # empty rows around a full one
    check([[1, 1, 1]], 16)  # the whole batch shorter than a block
    check([[1] * 16, [1] * 15, [1] * 17], 16)  # exactly one block, one short, one over
    check([[0] * 20, [1, 0] * 10], 3)  # nothing supervised; no pairs
    check([[1, 1], [1, 1]], 2)  # a run must not pair across the row boundary


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.tuples(st.integers(-2, 12), st.integers(-1, 2)), max_size=9), max_size=8
    ),
    short_mask=st.integers(0, 7),
)
def test_batch_facts_equal_the_per_row_definitions(rows, short_mask):
    """`batch_facts` per row (token range, mask values, supervised counts, the histogram), also
    for a broken batch whose row ``short_mask`` lost its last mask value."""
    ids_rows = [[t for t, _ in r] for r in rows]
    mask_rows = [[m for _, m in r] for r in rows]
    if short_mask < len(mask_rows) and mask_rows[short_mask]:
        mask_rows[short_mask] = mask_rows[short_mask][:-1]
    lengths = np.array([len(r) for r in ids_rows], dtype=np.int64)
    mask_lengths = np.array([len(r) for r in mask_rows], dtype=np.int64)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    b = Batch(
        5,
        [f"r{i}" for i in range(len(rows))],
        ["s"] * len(rows),
        lengths,
        mask_lengths,
        lengths.copy(),
        np.array([t for r in ids_rows for t in r], dtype=np.int64),
        np.array([m for r in mask_rows for m in r], dtype=np.int8),
        offsets,
    )
    f = batch_facts(b, 4)
    flat_mask = [m for r in mask_rows for m in r]
    # a bad mask value is placed in a row by the token offsets (as the structure check did)
    bad_mask = sorted(
        {
            int(np.searchsorted(offsets, p, side="right") - 1)
            for p, m in enumerate(flat_mask)
            if m not in (0, 1)
        }
    )
    assert f.bad_mask_rows == bad_mask
    freq: dict[int, int] = {}
    for r, (ids, mask) in enumerate(zip(ids_rows, mask_rows, strict=True)):
        common = min(len(ids), len(mask))
        assert f.token_min[r] == (min(ids) if ids else 0)
        assert f.token_max[r] == (max(ids) if ids else -1)
        sup = sum(1 for m in mask[:common] if m == 1)
        assert f.supervised_common[r] == sup
        assert f.stats["supervised"][r] == sup
        assert f.stats["seq_len"][r] == common
        for t, m in zip(ids[:common], mask[:common], strict=True):
            if m == 1 and t >= 0:
                freq[t] = freq.get(t, 0) + 1
    consistent = bool(np.array_equal(lengths, mask_lengths))
    assert (f.supervised_within is not None) == consistent
    assert dict(zip(f.freq_ids.tolist(), f.freq_counts.tolist(), strict=True)) == freq
