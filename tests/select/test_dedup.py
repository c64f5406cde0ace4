"""Exact and near dedup on crafted sets with known answers."""

from __future__ import annotations

import importlib.util
import tracemalloc
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftset.core import reasons
from draftset.core.records import Conversation, PreTokenized, PromptOnly, Reject
from draftset.select import dedup
from draftset.select.dedup import (
    ExactDeduper,
    NearDeduper,
    canonical_text,
    canonical_text_reference,
    make_dedupers,
    shingles,
)


def conv(source: str, row: int, user: str, answer: str = "Sure.", **extra: object) -> Conversation:
    assistant: dict[str, object] = {"role": "assistant", "content": answer, **extra}
    messages = [{"role": "user", "content": user}, assistant]
    return Conversation(f"{source}-{row}", source, row, messages)


def run(deduper: ExactDeduper | NearDeduper, items: list) -> list[Reject | None]:
    return [deduper.check(it) for it in items]


# --- exact ---------------------------------------------------------------------------------


def test_canonical_text_folds_unicode_case_and_whitespace() -> None:
    nfd = unicodedata.normalize("NFD", "Café  déjà\tvu")
    assert canonical_text(nfd) == canonical_text("café déjà vu") == "café déjà vu"
    assert canonical_text("ＨＥＬＬＯ　Ｗｏｒｌｄ１２３") == "hello world123"  # full-width
    assert canonical_text("Straße") == canonical_text("STRASSE")  # casefold, not lower
    assert canonical_text("  a\n\n b  ") == "a b"


def _code_points(start: int, stop: int) -> str:
    stop = min(stop, 0x110000)
    return "".join(chr(c) for c in range(start, stop) if not 0xD800 <= c <= 0xDFFF)


def test_canonical_text_equals_reference_on_every_code_point() -> None:
    """The fast path (is_normalized + split/join) against the regex definition."""
    for start in range(0, 0x110000, 97):  # every code point, next to 96 others
        block = _code_points(start, start + 97)
        for text in (block, " " + block + "  ", block[::-1], "a" + " \t".join(block) + "b"):
            assert canonical_text(text) == canonical_text_reference(text), hex(start)
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    assert len(spaces) > 20  # Unicode whitespace beyond ASCII, incl. \x1c-\x1f and U+3000
    for ws in spaces:
        for text in (ws, f"a{ws}b", f"{ws}a{ws}{ws}b{ws}", f"x{ws}\u0301y"):
            assert canonical_text(text) == canonical_text_reference(text), hex(ord(ws))


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_canonical_text_equals_reference_property(text: str) -> None:
    assert canonical_text(text) == canonical_text_reference(text)


# Full-width marks next to what NFKC composes or reorders: combining marks (which attach to the
# replaced mark's ASCII form), Hangul jamo, precomposed and decomposed Latin, other
# compatibility characters (ligatures, superscripts, other full-width forms), CJK.
_NFKC_ALPHABET = st.sampled_from(
    [
        *"，：；！？（）\u3000＂＇［］｛｝％＋－＝。、「」",
        *"\u0301\u0308\u0327\u0338\u05b0\u1100\u1161\u11a8\uac00",
        *"eEaA=<>!?(é\ufb01\u00b2\uff21\uff41\uff10\u2460\u212b中文",
    ]
)


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet=_NFKC_ALPHABET, max_size=40))
def test_the_full_width_fast_path_equals_nfkc(text: str) -> None:
    assert dedup._nfkc(text) == unicodedata.normalize("NFKC", text)
    assert canonical_text(text) == canonical_text_reference(text)


def test_cjk_text_with_full_width_punctuation_is_not_normalized_in_full(monkeypatch) -> None:
    text = "这是一个例子，包含：标点（全角）！还有？" * 50
    want = canonical_text_reference(text)
    calls: list[str] = []
    real = unicodedata.normalize
    monkeypatch.setattr(
        dedup.unicodedata, "normalize", lambda form, s: calls.append(s) or real(form, s)
    )
    assert canonical_text(text) == want
    assert calls == []  # the replaced marks were all it needed
    assert canonical_text(text + "\ufb01") == canonical_text_reference(text + "\ufb01")
    assert len(calls) == 2  # a ligature: the full normalization (and the reference's own)


def test_exact_variants_are_duplicates_first_kept() -> None:
    items = [
        conv("a", 0, "Explain the café menu", "It lists drinks."),
        conv("a", 1, unicodedata.normalize("NFD", "explain  the CAFÉ menu"), "It lists drinks."),
        conv("a", 2, "Ｅｘｐｌａｉｎ the café menu\n", "it lists   DRINKS."),
        conv("a", 3, "Explain the café menu", "It lists food."),  # different answer: kept
    ]
    out = run(d := ExactDeduper(), items)
    assert out[0] is None and out[3] is None
    for r in out[1:3]:
        assert r is not None and r.reason == reasons.DUPLICATE
        assert "'a-0'" in r.message and "source a" in r.message
    assert d.stats()["removed"] == {"a": 2}


def test_exact_cross_source_pairs_and_priority() -> None:
    items = [
        conv("first", 0, "Q1"),
        conv("second", 0, "Q1"),
        conv("second", 1, "Q2"),
        conv("third", 0, "q2"),
        conv("third", 1, "Q1 "),
    ]
    out = run(d := ExactDeduper(), items)
    assert [r is None for r in out] == [True, False, True, False, False]
    stats = d.stats()
    assert stats["checked"] == {"first": 1, "second": 2, "third": 2}
    assert stats["removed"] == {"second": 1, "third": 2}
    assert stats["removed_total"] == 3
    assert stats["pairs"] == [
        {"kept_source": "first", "removed_source": "second", "count": 1},
        {"kept_source": "first", "removed_source": "third", "count": 1},
        {"kept_source": "second", "removed_source": "third", "count": 1},
    ]
    assert out[3] is not None and out[3].id == "third-0" and "'second-1'" in out[3].message


def test_exact_distinguishes_reasoning_tool_calls_roles_and_tools() -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    other = {"type": "function", "function": {"name": "f", "arguments": {"x": 2}}}
    base = conv("s", 0, "Q", "A")
    items = [
        base,
        conv("s", 1, "Q", "A", reasoning_content="think"),
        conv("s", 2, "Q", "A", reasoning_content="THINK  "),  # dup of row 1
        conv("s", 3, "Q", "", tool_calls=[call]),
        conv("s", 4, "Q", "", tool_calls=[other]),
        Conversation("s-5", "s", 5, [{"role": "system", "content": "Q"}, base.messages[1]]),
        Conversation("s-6", "s", 6, base.messages, tools=[{"type": "function", "function": {}}]),
    ]
    out = run(ExactDeduper(), items)
    assert [r is None for r in out] == [True, True, False, True, True, True, True]


def test_exact_prompt_only_and_other_items() -> None:
    p1 = PromptOnly("p1", "s", 0, [{"role": "user", "content": "Hi"}])
    p2 = PromptOnly("p2", "s", 1, [{"role": "user", "content": "hi"}])
    c = Conversation("c", "s", 2, [{"role": "user", "content": "Hi"}])  # same turns, other kind
    rej = Reject("s", 3, None, reasons.INVALID_JSON, "x")
    pre = PreTokenized("t", "s", 4, [1], [1])
    out = run(d := ExactDeduper(), [p1, p2, c, rej, pre])
    assert out[0] is None and out[1] is not None and out[2] is None
    assert out[3] is None and out[4] is None
    assert d.stats()["checked"] == {"s": 3}


# --- near ----------------------------------------------------------------------------------

needs_datasketch = pytest.mark.skipif(
    importlib.util.find_spec("datasketch") is None,
    reason="datasketch not installed (optional extra for --dedup near)",
)

BASE = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle that was "
    "written by her grandmother fifty years ago and decides to sail to the island it describes "
    "with her old dog and a broken compass"
)


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


def test_shingles() -> None:
    assert shingles("A b") == {b"a b"}  # shorter than 3 words: one shingle
    assert shingles("  ") == set()
    assert shingles("One two THREE four") == {b"one two three", b"two three four"}


@needs_datasketch
def test_near_dups_above_and_below_threshold() -> None:
    above = BASE.replace("compass", "map")  # last word changed
    below = BASE.replace("fifty", "ten").replace("sail", "row").replace("dog", "cat")
    n = len(BASE.split())
    assert jaccard(BASE, above) == pytest.approx((n - 3) / (n - 1))  # 0.95
    assert 0.6 < jaccard(BASE, below) < 0.7
    items = [
        conv("a", 0, BASE, "One answer."),
        conv("b", 0, above, "A completely different answer."),  # prompt near-dup: removed
        conv("b", 1, below, "Another."),
        conv("c", 0, "Translate 'good morning' into German.", "Guten Morgen."),
    ]
    out = run(d := NearDeduper(threshold=0.8), items)
    assert [r is None for r in out] == [True, False, True, True]
    assert out[1] is not None and out[1].reason == reasons.NEAR_DUPLICATE
    assert "'a-0'" in out[1].message and "source a" in out[1].message
    stats = d.stats()
    assert stats["removed"] == {"b": 1}
    assert stats["pairs"] == [{"kept_source": "a", "removed_source": "b", "count": 1}]
    assert stats["threshold"] == 0.8 and stats["shingle_words"] == 3


@needs_datasketch
def test_near_threshold_is_respected() -> None:
    mid = BASE.replace("grandmother", "grandfather").replace("island", "coast")
    j = jaccard(BASE, mid)
    assert 0.7 < j < 0.8
    strict = run(NearDeduper(threshold=0.9), [conv("a", 0, BASE), conv("a", 1, mid)])
    loose = run(NearDeduper(threshold=0.6), [conv("a", 0, BASE), conv("a", 1, mid)])
    assert strict[1] is None
    assert loose[1] is not None


@needs_datasketch
@pytest.mark.parametrize("threshold", [0.99, 1.0])
def test_near_threshold_up_to_one_is_taken(threshold: float) -> None:
    """`--near-dup-threshold` takes (0, 1]; at 0.99 and above datasketch's optimal LSH is one
    band, which it refuses ("number of bands are too small"): a traceback from inside the
    build. Two bands of 64 rows (its choice at 0.97-0.98) find every identical prompt."""
    above = BASE.replace("compass", "map")  # Jaccard 0.95: kept at these thresholds
    copy = conv("a", 2, BASE.upper(), "A different answer.")  # identical once normalized
    out = run(
        d := NearDeduper(threshold=threshold), [conv("a", 0, BASE), conv("a", 1, above), copy]
    )
    assert out[0] is None and out[1] is None
    assert out[2] is not None and out[2].reason == reasons.NEAR_DUPLICATE
    assert d.stats()["threshold"] == threshold


@needs_datasketch
def test_near_unicode_variants_and_only_user_turns() -> None:
    full_width = unicodedata.normalize("NFKC", BASE).upper().replace("A ", "Ａ ")
    system_differs = Conversation(
        "x",
        "a",
        2,
        [
            {"role": "system", "content": "Totally different system prompt " * 5},
            {"role": "user", "content": BASE},
            {"role": "assistant", "content": "ok"},
        ],
    )
    empty = conv("a", 3, "", "")
    out = run(d := NearDeduper(), [conv("a", 0, BASE), conv("a", 1, full_width), system_differs])
    assert out == [None, out[1], out[2]] and out[1] is not None and out[2] is not None
    assert d.check(empty) is None and d.stats()["no_prompt_text"] == 1


@needs_datasketch
def test_near_is_deterministic() -> None:
    items = [conv("a", i, BASE.replace("compass", f"compass {i}")) for i in range(6)]
    first = [r and r.message for r in run(NearDeduper(), items)]
    again = [r and r.message for r in run(NearDeduper(), items)]
    assert first == again and first.count(None) == 1


@needs_datasketch
def test_make_dedupers() -> None:
    assert make_dedupers("none") == []
    assert [type(d) for d in make_dedupers("exact")] == [ExactDeduper]
    assert [type(d) for d in make_dedupers("near", 0.7)] == [ExactDeduper, NearDeduper]
    with pytest.raises(ValueError, match="unknown dedup mode"):
        make_dedupers("fuzzy")
    with pytest.raises(ValueError, match="threshold"):
        NearDeduper(threshold=1.5)


def test_an_answer_weighted_zero_is_other_training_signal_for_exact_dedup() -> None:
    """A row whose answer is weighted 0 (context, `weight_zero`) and the same conversation
    without the weight (trained) were exact duplicates: the trained copy was dropped as a
    duplicate of the one that trains nothing (an outside probe)."""
    from draftset.core.records import RawRow
    from draftset.sources.normalize import normalize

    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}]
    weighted = [msgs[0], {**msgs[1], "weight": 0}]
    a = normalize(RawRow("s", 0, {"messages": weighted}))
    b = normalize(RawRow("s", 1, {"messages": msgs}))
    c = normalize(RawRow("s", 2, {"messages": [msgs[0], {**msgs[1], "weight": 1}]}))
    assert dedup.content_key(a) != dedup.content_key(b) == dedup.content_key(c)


# --- a copy that cannot train is never the copy kept for one that can -------------------------


def test_exact_a_copy_that_cannot_train_never_drops_one_that_can() -> None:
    """Same content, other fate: a row cut off by `max_tokens` (`metadata.truncated`, not in
    the content key) cannot train; its untruncated copy can. The copy that trains is kept;
    rows after it are compared to it; copies that cannot train are still dropped."""
    d = ExactDeduper()
    out = [
        d.check(conv("s", 0, "Q", "A"), trains=False),  # kept for now: nothing before it
        d.check(conv("s", 1, "Q", "A"), trains=True),  # trains: not a copy of row 0
        d.check(conv("s", 2, "q", "a"), trains=True),  # a copy of row 1
        d.check(conv("s", 3, "Q", "A"), trains=False),  # a copy of row 1 too
        d.check(conv("s", 4, "Other", "A"), trains=False),
        d.check(conv("s", 5, "other", "a"), trains=False),  # a copy of row 4
    ]
    assert [r is None for r in out] == [True, True, False, False, True, False]
    assert "'s-1'" in out[2].message and "'s-1'" in out[3].message  # type: ignore[union-attr]
    assert "'s-4'" in out[5].message  # type: ignore[union-attr]
    assert d.stats()["checked"] == {"s": 6} and d.stats()["removed"] == {"s": 3}


@needs_datasketch
def test_near_a_copy_that_cannot_train_never_drops_one_that_can() -> None:
    """The session-28 probe's case: a prompt answered "OK." first (rejected
    `no_supervised_turn` by the row step), the same prompt answered for real next: the real
    answer was dropped as a near duplicate of the pad, and nothing of the prompt was written."""
    above = BASE.replace("compass", "map")
    d = NearDeduper(threshold=0.8)
    out = [
        d.check(conv("a", 0, BASE, "OK."), trains=False),
        d.check(conv("a", 1, above, "A real answer."), trains=True),
        d.check(conv("a", 2, BASE, "Another real answer."), trains=True),
        d.check(conv("a", 3, BASE, "OK."), trains=False),
    ]
    assert [r is None for r in out] == [True, True, False, False]
    assert "'a-1'" in out[2].message  # type: ignore[union-attr]
    assert "'a-0'" in out[3].message  # type: ignore[union-attr]  # the closest kept copy
    # a pad after a pad: the later one is the copy (one prompt queued, not two)
    d = NearDeduper(threshold=0.8)
    pads = [d.check(conv("a", 0, BASE, "OK."), trains=False)]
    pads.append(d.check(conv("a", 1, above, "OK."), trains=False))
    assert pads[0] is None and pads[1] is not None and "'a-0'" in pads[1].message


def test_exact_keeps_four_bytes_a_number_a_kept_row_and_widens_past_2_to_32() -> None:
    """Issue 27 (the driver's memory a row): a kept row's source, row number and id offset are
    4 bytes each and its table value (the kept index) 4, not 8; a row number past 2**32 still
    names the kept row in the duplicate's message (the array is copied wider once)."""
    d = ExactDeduper()
    for i in range(1000):
        assert d.check_key("s", i, f"s-{i}", 10**6 + i) is None
    kept = d._kept
    assert [a.itemsize for a in (kept.source_of, kept.row_of, kept._id_end, kept.copies)] == [4] * 4
    assert d._seen._values is not None and d._seen._values.itemsize == 4
    far = 2**33 + 5
    assert d.check_key("t", far, "t-far", 7) is None
    out = d.check_key("t", far + 1, "t-next", 7)
    assert out is not None
    assert out.message == f"exact duplicate of id 't-far' (source t, row {far})"
    assert kept.row_of.itemsize == 8 and kept.describe(3) == ("s-3", "s", 3)


class _DatasketchNear:
    """The reference: near dedup's decisions with datasketch's own `MinHashLSH` as the index
    (what `NearDeduper` used before its compact `_BandIndex`)."""

    def __init__(self, threshold: float, num_perm: int = 128) -> None:
        import datasketch

        self.threshold, self.num_perm = threshold, num_perm
        self.lsh = dedup._lsh_index(datasketch, threshold, num_perm)
        self.sigs: list[np.ndarray] = []
        self.trains: list[bool] = []
        self.template = datasketch.MinHash(num_perm=num_perm, seed=1)

    def check(self, hashes: np.ndarray, trains: bool) -> int | None:
        """The kept index this prompt is a near duplicate of, or None (kept)."""
        import datasketch

        m = datasketch.MinHash(
            num_perm=self.num_perm,
            hashvalues=hashes,
            permutations=self.template.permutations,
            scheme=self.template.scheme,
        )
        sig = np.asarray(hashes, dtype=np.uint32)
        best, best_k = 0.0, -1
        for k in self.lsh.query(m):
            if trains and not self.trains[k]:
                continue
            sim = float(np.count_nonzero(self.sigs[k] == sig)) / self.num_perm
            if sim > best or (sim == best and k < best_k):
                best, best_k = sim, k
        if best_k >= 0 and best >= self.threshold:
            return best_k
        self.lsh.insert(len(self.sigs), m, check_duplication=False)
        self.sigs.append(sig)
        self.trains.append(trains)
        return None


@needs_datasketch
@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 128), st.booleans(), st.booleans()),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from([0.5, 0.8, 0.9, 0.985, 1.0]),
    st.integers(0, 2**32 - 1),
)
def test_the_band_index_decides_as_datasketchs_lsh(steps, threshold, seed) -> None:
    """Issue 27 (near dedup's memory): the compact band index finds the candidates
    datasketch's `MinHashLSH` finds, so every decision and the kept prompt named are the same,
    on prompts copied from earlier ones with 0-128 of their 128 values changed."""
    rng = np.random.default_rng(seed)
    d, ref = NearDeduper(threshold=threshold), _DatasketchNear(threshold)
    made: list[np.ndarray] = []
    for i, (pick, changed, copy, trains) in enumerate(steps):
        if copy and made:
            sig = made[pick % len(made)].copy()
            where = rng.choice(128, size=changed, replace=False)
            sig[where] = rng.integers(0, 2**32 - 1, size=changed, dtype=np.uint64)
        else:
            sig = rng.integers(0, 2**32 - 1, size=128, dtype=np.uint64)
        made.append(sig)
        want = ref.check(sig, trains)
        got = d.check_hashes("s", i, f"s-{i}", sig, trains)
        assert (got is None) == (want is None)
        if got is not None:
            kept_row = d._kept.describe(want)[2]
            assert f"(source s, row {kept_row})" in got.message


@needs_datasketch
def test_near_dedup_keeps_under_two_kilobytes_a_prompt() -> None:
    """Issue 27: with datasketch's in-memory LSH index near dedup held ~3.9 KB a kept prompt
    (~3.9 GB in the driver of a million-prompt build); the signatures (512 bytes at 128
    values) and the band index stay under 2 KB (Python's and numpy's allocations, traced)."""
    rng = np.random.default_rng(0)
    n = 20_000
    made = [rng.integers(0, 2**32 - 1, 128, dtype=np.uint64) for _ in range(n)]
    tracemalloc.start()
    try:
        d = NearDeduper(threshold=0.9)
        for i, sig in enumerate(made):
            assert d.check_hashes("s", i, "", sig) is None
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held / n < 2048, held / n


@needs_datasketch
def test_a_prompt_found_only_down_a_bands_chain_is_a_near_duplicate() -> None:
    """B shares A's first band and little else (kept: B is that band's latest prompt); C is A
    with one value changed in every other band, so only the first band's chain, past B,
    leads to A: C is A's near duplicate, as datasketch's bucket (a set of both) finds it."""
    rng = np.random.default_rng(7)
    d = NearDeduper(threshold=0.9)
    rows, bands = d._bands.rows, d._bands.bands
    a = rng.integers(0, 2**32 - 1, size=128, dtype=np.uint64)
    b = rng.integers(0, 2**32 - 1, size=128, dtype=np.uint64)
    b[:rows] = a[:rows]
    c = a.copy()
    c[[band * rows for band in range(1, bands)]] += 1
    assert d.check_hashes("s", 0, "A", a) is None
    assert d.check_hashes("s", 1, "B", b) is None
    dropped = d.check_hashes("s", 2, "C", c)
    assert dropped is not None and "of id 'A' (source s, row 0)" in dropped.message
    ref = _DatasketchNear(0.9)
    assert [ref.check(x, True) for x in (a, b, c)] == [None, None, 0]
