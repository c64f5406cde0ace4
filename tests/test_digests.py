"""The compact digest table behaves like a dict / set (property test against the built-ins)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from draftset.digests import DigestTable, digest64


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
