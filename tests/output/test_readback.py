"""output/readback.batch_stats: the vectorized per-row statistics equal their plain per-row
definitions (docs/verify.md), on random batches and on the edges (empty rows, rows shorter than
a block, a batch shorter than a block, all or no tokens supervised)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftset.output.readback import (
    FREQ_LIMIT,
    Batch,
    SetFacts,
    Strings,
    _narrow,
    batch_facts,
    batch_stats,
)


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


def _sound_batch(n: int, start: int = 0) -> Batch:
    """``n`` rows as a build writes them: ids ``chats-0000123``, one source, 200 tokens each."""
    lengths = np.full(n, 200, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    rng = np.random.default_rng(0)
    return Batch(
        start,
        [f"chats-{i:07d}" for i in range(start, start + n)],
        ["chats"] * n,
        lengths,
        lengths.copy(),
        lengths.copy(),
        rng.zipf(1.3, size=int(offsets[-1])).clip(0, 150_000).astype(np.int32),
        (rng.random(int(offsets[-1])) < 0.6).astype(np.int8),
        offsets,
    )


def test_set_facts_hold_a_few_bytes_a_row():
    """A build's driver keeps every shard's facts to the end (issue 27: memory flat in the row
    count): ids and sources as Arrow columns, per-row numbers as int16 (lengths, counts) or
    int32 (token ids) with equal arrays shared, the token histograms folded into one count; not
    a Python str per id and source, int64 per number and a histogram per batch (~270 bytes a
    row at first)."""
    sent = batch_facts(_sound_batch(2048), 16)
    assert pickle.loads(pickle.dumps(sent)).ids == sent.ids  # travels from a worker unchanged
    facts = SetFacts()
    facts.add_shard([sent])
    f = facts.batches[0]
    held = f.ids.array.nbytes + f.sources.array.nbytes
    arrays = {id(a): a for a in _arrays(f)}
    held += sum(a.nbytes for a in arrays.values())
    # 47 here (8 of them the ids' digests, `SetFacts.ids_distinct`); 61 with int32, ~270 at first
    assert held / f.rows < 52, held / f.rows
    assert f.lengths.dtype == np.int16 and f.token_max.dtype == np.int32


def _arrays(f) -> list[np.ndarray]:
    out = [f.lengths, f.mask_lengths, f.seq_len, f.token_min, f.token_max, f.supervised_common]
    out += [f.id_digests]
    out += [f.freq_ids, f.freq_counts, *f.stats.values()]
    return out + ([f.supervised_within] if f.supervised_within is not None else [])


def test_batch_facts_keep_wide_values_wide():
    """Token ids outside int32 (a broken set stored as int64) are not wrapped by the narrowing:
    the structure check must still see them outside the vocabulary; a supervised id of 2**40 is
    counted without 2**40 counters, and left out of the set's dense recount."""
    b = _sound_batch(3)
    b.tokens = b.tokens.astype(np.int64)
    b.tokens[5] = 2**40
    b.mask[5] = 1
    b.tokens[400] = -(2**35)
    f = batch_facts(b, 16)
    assert f.token_max.tolist() == [2**40, int(b.tokens[200:400].max()), int(b.tokens[400:].max())]
    assert f.token_min[2] == -(2**35)
    assert f.freq_ids[-1] == 2**40 and f.freq_counts[-1] == 1
    facts = SetFacts()
    facts.add(f)
    sup = b.tokens[(b.mask == 1) & (b.tokens >= 0) & (b.tokens < FREQ_LIMIT)]
    assert np.array_equal(facts.row_stats(10).token_freq, np.bincount(sup))


def test_set_facts_fold_the_histograms_in_set_order():
    """Shards numbered from 0 get their place in the set; the folded recount equals one
    bincount over every supervised token, whatever the vocabulary size given."""
    a, b = _sound_batch(5), _sound_batch(7)
    facts = SetFacts.gather([[batch_facts(a, 16)], [batch_facts(b, 16)]])
    assert [f.start_row for f in facts.batches] == [0, 5] and facts.rows == 12
    assert all(f.freq_ids.size == 0 for f in facts.batches)
    sup = np.concatenate([x.tokens[x.mask == 1] for x in (a, b)])
    want = np.bincount(sup)
    got = facts.row_stats(0).token_freq
    assert np.array_equal(got, want)
    wide = facts.row_stats(want.size + 50).token_freq
    assert wide.size == want.size + 50 and np.array_equal(wide[: want.size], want)
    assert not wide[want.size :].any()
    assert facts.row_stats(0).seq_len.dtype == np.int16  # the facts' narrow type, not copied wide


def test_strings_column():
    s = Strings(["a", None, "bb", "a"])
    assert Strings(["bé", None]).tolist() == ["bé", None]
    assert len(s) == 4 and s[1] is None and s[2] == "bb" and s[-1] == "a"
    assert list(s) == ["a", None, "bb", "a"] and s[1:3] == [None, "bb"]
    assert s == ["a", None, "bb", "a"] and s != ["a"]
    d = Strings(["x", "x", "y"], dictionary=True)
    assert d.tolist() == ["x", "x", "y"] and d[2] == "y"
    joined = Strings.joined([Strings(["a", "b"]), Strings([]), Strings(["c"])])
    assert joined.tolist() == ["a", "b", "c"] and joined[2] == "c" and len(joined) == 3
    assert len(Strings.joined([])) == 0


def _facts_of_ids(*batches: list[str | None]) -> SetFacts:
    facts, start = SetFacts(), 0
    for ids in batches:
        b = make_batch([[1, 1]] * len(ids))
        b.start_row, b.ids = start, ids
        facts.add(batch_facts(b, 16))
        start += len(ids)
    return facts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.text(max_size=3)), max_size=6), max_size=4))
def test_ids_distinct_equals_the_plain_definition(batches):
    """No null, no empty id, no id twice across the batches (equal digests decide it: the
    structure check's fast path)."""
    every = [i for b in batches for i in b]
    want = all(i for i in every) and len(set(every)) == len(every)
    assert _facts_of_ids(*batches).ids_distinct() == want


def test_ids_distinct_holds_no_table_of_the_ids(monkeypatch):
    """The set's ids are never hashed into one table at the end (Arrow's count_distinct: ~130
    bytes a row, the peak of a build's driver, ~1.3 GB at 10M rows): the batches' digests are."""
    import pyarrow.compute as pc

    facts = _facts_of_ids(["a", "b"], ["c"], ["d", "e"])

    def refused(*args, **kwargs):
        raise AssertionError("a hash table of every id")

    for name in ("count_distinct", "unique", "value_counts", "dictionary_encode"):
        monkeypatch.setattr(pc, name, refused)
    assert facts.ids_distinct()
    assert not _facts_of_ids(["a", "b"], ["a"]).ids_distinct()


def test_narrow_facts_give_the_checks_the_wide_answers():
    """The narrowed arrays (int16 / int32) compare and count as the int64 ones: a row longer
    than 32,767 tokens stays exact, and comparisons with bounds outside int16 (a max length or
    vocabulary size of 151,936) give the right answer."""
    b = _sound_batch(3)
    facts = batch_facts(b, 16)
    assert facts.lengths.dtype == np.int16
    assert not (facts.lengths > 151_936).any() and (facts.lengths < 151_936).all()
    assert not (facts.token_max >= 151_936).any()
    long = np.array([40_000, 3], dtype=np.int64)
    assert _narrow(long, []).dtype == np.int32 and _narrow(long, []).tolist() == [40_000, 3]
    assert _narrow(np.array([-(2**40)], dtype=np.int64), []).dtype == np.int64
    stats = SetFacts.gather([[facts]]).row_stats(151_936)
    assert stats.seq_len.dtype == np.int16
    assert stats.seq_len.tolist() == b.seq_len.tolist()


def test_row_stats_in_the_narrow_type_sum_and_average_exactly():
    """`RowStats` keeps the facts' int16 / int32 (12 bytes a row where int64 copies were 48, held
    by a build's driver through its checks): sums past int16, means and medians are exact, and
    a batch of long rows (int32) widens the joined column rather than wrapping it."""
    long_rows = make_batch([[1] * 40_000, [1] * 3])
    short = [make_batch([[1] * 30_000]) for _ in range(3)]
    facts = SetFacts()
    for start, b in enumerate([*short, long_rows]):
        b.start_row = start
        facts.add(batch_facts(b, 16))
    stats = facts.row_stats(0)
    assert stats.seq_len.dtype == np.int32 and stats.seq_len.tolist() == [30_000] * 3 + [40_000, 3]
    want = 3 * 30_000 + 40_000 + 3
    assert int(stats.supervised.sum()) == want and int(stats.seq_len.sum()) == want
    assert float(stats.supervised.mean()) == want / 5
    assert float(np.median(stats.seq_len)) == 30_000
    only_short = SetFacts()
    for b in short:
        only_short.add(batch_facts(b, 16))
    s16 = only_short.row_stats(0)
    assert s16.seq_len.dtype == np.int16 and int(s16.seq_len.sum()) == 90_000
    assert float(s16.anchors.mean()) == 30_000 - 15


@pytest.mark.parametrize("command", ["verify", "report", "show"])
def test_a_recipe_given_for_the_set_is_said_to_be_one(tmp_path, capsys, command):
    """`draftset build r.yaml` then `draftset verify r.yaml` (the recipe, not the folder it
    built) was told only "not a folder: r.yaml"."""
    from draftset.cli import main

    recipe = tmp_path / "r.yaml"
    recipe.write_text("out: built\n", encoding="utf-8")
    extra = ["--row", "0"] if command == "show" else []
    assert main([command, str(recipe), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: {recipe} is a recipe, not a set: give the folder its build wrote"
        " (the recipe's out:)"
    ], err


@pytest.mark.parametrize("command", ["verify", "report", "show"])
@pytest.mark.parametrize("name", ["manifest.json", "data-00000-of-00001.arrow", "rejects.jsonl"])
def test_a_file_of_the_set_given_for_the_set_names_the_folder(tmp_path, capsys, command, name):
    """``draftset verify out/manifest.json`` (a file of the set, not its folder) was told only
    "not a folder: out/manifest.json"."""
    from draftset.cli import main

    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"format": "draftset/1"}', encoding="utf-8")
    if name != "manifest.json":
        (folder / name).write_bytes(b"{}")
    extra = ["--row", "0"] if command == "show" else []
    assert main([command, str(folder / name), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: {folder / name} is a file of the set {folder}: give the set's"
        f" folder, {folder}"
    ], err
