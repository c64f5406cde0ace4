"""The compact digest table behaves like a dict / set (property test against the built-ins)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from draftset.core.digests import DigestTable, digest64


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 2**64 - 1), st.integers(0, 2**40)), max_size=400))
def test_table_equals_a_dict(pairs):
    table, ref = DigestTable(capacity=4), {}
    for k, v in pairs:
        table.put(k, v)
        ref[k] = v
    assert len(table) == len(ref)
    assert all(table.get(k) == v for k, v in ref.items())
    assert table.get(0x5EED) == ref.get(0x5EED)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=300))
def test_add_is_set_membership(words):
    table, ref = DigestTable(capacity=2), set()
    for w in words:
        assert table.add(digest64(w)) == (w not in ref)
        ref.add(w)
    assert len(table) == len(ref)


def test_digest_is_stable_and_never_zero():
    assert digest64("draftset") == digest64("draftset") != digest64("draftset ")
    assert all(digest64(str(i)) != 0 for i in range(1000))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(1, 2**64 - 1), st.integers(0, 2**40)), max_size=300
    )
)
def test_mixed_add_and_put_equal_a_dict(ops):
    """`add` stores 0 without a value array; the first `put` creates it, values survive growth."""
    table, ref = DigestTable(capacity=2), {}
    for is_put, k, v in ops:
        if is_put:
            table.put(k, v)
            ref[k] = v
        else:
            assert table.add(k) == (k not in ref)
            ref.setdefault(k, 0)
    assert len(table) == len(ref)
    assert all(table.get(k) == v for k, v in ref.items())


def test_a_set_only_table_has_no_value_array_and_grows_in_chunks(monkeypatch):
    import draftset.core.digests as digests

    monkeypatch.setattr(digests, "_GROW_CHUNK", 7)  # several chunks per doubling
    table = DigestTable(capacity=2)
    keys = [digest64(str(i)) for i in range(5000)]
    assert all(table.add(k) for k in keys)
    assert table._values is None
    assert len(table) == 5000 and not any(table.add(k) for k in keys)
    assert all(table.get(k) == 0 for k in keys) and table.get(digest64("x")) is None


def test_a_set_of_300k_digests_takes_4_mib():
    """Issue 27 (memory flat in the row count): the table doubles past two thirds full, not
    half: 300,000 ids take 512Ki slots (4 MiB), where doubling at half took 1Mi (8 MiB)."""
    table = DigestTable()
    for i in range(300_000):
        table.add(digest64(str(i)))
    assert table._keys.nbytes == 4 * 2**20 and len(table) == 300_000
    assert sum(table.add(digest64(str(i))) for i in range(300_000)) == 0


def test_a_table_never_fills_up():
    """Every size keeps a free slot past the last key, so a probe for a missing key ends."""
    for capacity in (0, 1, 2, 3, 10, 11):
        table = DigestTable(capacity=capacity)
        for i in range(1, 200):
            table.put(i, i)
            assert len(table) < table._keys.size
        assert table.get(10_000) is None


def test_values_are_int32_until_one_does_not_fit():
    """Issue 27: a table of kept-row indexes is 12 bytes a slot (int32 values), not 16; the
    first value past int32 widens the array once, keeping every value put before it."""
    table = DigestTable(capacity=2)
    for i in range(1, 3000):
        table.put(i, i)
    assert table._values is not None and table._values.dtype.itemsize == 4
    table.put(10**6, 2**40)
    table.put(10**6 + 1, -(2**31) - 1)
    assert table._values.dtype.itemsize == 8
    for i in range(3000, 6000):  # grows wide
        table.put(i, 2**35 + i)
    assert all(table.get(i) == i for i in range(1, 3000))
    assert all(table.get(i) == 2**35 + i for i in range(3000, 6000))
    assert table.get(10**6) == 2**40 and table.get(10**6 + 1) == -(2**31) - 1
