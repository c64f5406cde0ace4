"""Deduplication: exact (normalized content hash) and near (MinHash LSH on the prompt).

Both are streaming steps for the main process: call ``check(item)`` on every normalized item in
stream order; it returns a `Reject` (the row is a duplicate of one already kept) or None (keep
it, and it is now the one later copies are compared to). The first occurrence wins (of the
copies that can train, below), so the priority is the stream order: sources in recipe /
command-line order, then rows in file order.

Only `Conversation` and `PromptOnly` items take part; rejects and pre-tokenized rows pass.
A prompt-only row is only ever a duplicate of another prompt-only row (exact: its key has no
assistant turn, so it cannot equal a conversation's key).

A row that cannot train (``trains=False``: `select.facts.can_train`, e.g. answered "OK." or
prompt-only in a build) is never the copy that drops one that can: a row that can train is
compared only with the kept rows that can, and is kept when none matches (rows after it are
then compared with it). A row that cannot train is compared with every kept row, and dropped
when it matches one: the first of several copies that cannot train is the one kept (one prompt
queued, not several).

Text normalization (`canonical_text`): Unicode NFKC (NFC/NFD forms and full-width / compatibility
characters become one form), case folding, every whitespace run collapsed to one space, ends
stripped. Two rows are exact duplicates when every turn has the same role and the same
normalized content, reasoning and tool calls, and the tools offered are the same: a different
reasoning trace or a different call is different training signal, so it is kept.

Memory: exact keeps one 8-byte BLAKE2b digest per kept row (plus the kept row's id for the
reject message); near keeps one uint32 MinHash signature per kept prompt (``4 * num_perm``
bytes) to verify candidates and its LSH bands in `_BandIndex`: ~1.4 KB a kept prompt in all,
where datasketch's own in-memory index made it ~3.9 KB (what bounds a near-dedup build's
driver: ~1.4 against ~3.9 GB a million prompts), and ~2.5x less CPU a row.
"""

from __future__ import annotations

import json
import re
import unicodedata
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from draftset.core import defaults, reasons
from draftset.core.digests import DigestTable, digest64
from draftset.core.records import NOT_TRAINED, Conversation, Normalized, PromptOnly, Reject

_WS = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
_SEP = "\x1f"  # between fields of one turn
_TURN = "\x1e"  # between turns


# Full-width punctuation common in CJK text, each with its NFKD decomposition (one ASCII
# character): the usual reason a text is not NFKC already.
_WIDE_PUNCTUATION = tuple(
    (c, unicodedata.normalize("NFKD", c)) for c in "，：；！？（）\u3000＂＇［］｛｝％＋－＝"
)


def canonical_text(text: str) -> str:
    """NFKC, casefold, whitespace runs -> one space, stripped (the dedup comparison form).

    Equal to `canonical_text_reference` for every string (tested on every code point and
    with hypothesis), ~2.5x faster: it runs on every turn of every row in the main process.
    ``str.split()`` and regex ``\\s`` both use Python's ``str.isspace`` definition of
    whitespace, and most texts are already NFKC (checked much faster than normalized).
    """
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        text = _nfkc(text)
    return " ".join(text.casefold().split())


def _nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, ~6x faster on CJK text with full-width
    punctuation (the main process's largest cost in dedup).

    NFKC is the composition of NFKD, and NFKD decomposes character by character before it
    reorders combining marks (which never move past a starter such as ``,``): a character
    replaced by its own NFKD decomposition leaves the NFKC form of the text unchanged. So the
    common full-width marks are replaced first (`str.replace` runs at memory speed), and the
    full normalization runs only when the text is still not NFKC.
    """
    for wide, narrow in _WIDE_PUNCTUATION:
        if wide in text:
            text = text.replace(wide, narrow)
    if unicodedata.is_normalized("NFKC", text):
        return text
    return unicodedata.normalize("NFKC", text)


def canonical_text_reference(text: str) -> str:
    """The plain definition `canonical_text` must equal."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _canonical_json(value: Any) -> str:
    return canonical_text(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))


def content_key(item: Conversation | PromptOnly) -> str:
    """The text whose hash decides exact duplicates (see the module docstring)."""
    parts = []
    untrained = item.meta.get(NOT_TRAINED) or {}  # a weighted-0 answer is other training signal
    for j, m in enumerate(item.messages):
        fields = [m.get("role", ""), canonical_text(m.get("content") or "")]
        if j in untrained:
            fields.append("w:0")
        reasoning = m.get("reasoning_content")
        if reasoning:
            fields.append("r:" + canonical_text(reasoning))
        calls = m.get("tool_calls")
        if calls:
            fields.append("c:" + _canonical_json([c.get("function") for c in calls]))
        parts.append(_SEP.join(fields))
    key = _TURN.join(parts)
    if item.tools:
        key += _TURN + "t:" + _canonical_json(item.tools)
    return key


class _Kept:
    """Compact record of kept rows: source index, row number, id, whether it can train and how
    many copies of it were dropped, by kept index. Held to the end of a build, one entry a
    kept row: 4-byte numbers (widened to 8 bytes past 2**32, `_widening_append`), the id's
    UTF-8 bytes, one byte for ``trains``: ~17 bytes a row and the id."""

    def __init__(self) -> None:
        self.sources: list[str] = []
        self._source_index: dict[str, int] = {}
        self.source_of = array("I")
        self.row_of = array("I")
        self._ids = bytearray()
        self._id_end = array("I")
        self.trains = bytearray()
        self.copies = array("I")

    def add(self, source: str, row: int, row_id: str, trains: bool) -> int:
        s = self._source_index.get(source)
        if s is None:
            s = self._source_index[source] = len(self.sources)
            self.sources.append(source)
        self.source_of.append(s)
        self.row_of = _widening_append(self.row_of, row)
        self._ids += row_id.encode("utf-8", "surrogatepass")
        self._id_end = _widening_append(self._id_end, len(self._ids))
        self.trains.append(trains)
        self.copies.append(0)
        return len(self.row_of) - 1

    def describe(self, k: int) -> tuple[str, str, int]:
        """(id, source, row) of kept row ``k``."""
        start = self._id_end[k - 1] if k else 0
        rid = self._ids[start : self._id_end[k]].decode("utf-8", "surrogatepass")
        return rid, self.sources[self.source_of[k]], self.row_of[k]

    def dropped(self, k: int) -> tuple[str, str, int]:
        """`describe` of kept row ``k``, a copy of which is being dropped (counted)."""
        self.copies[k] += 1
        return self.describe(k)

    def with_copies(self) -> Iterator[tuple[str, int, str, int]]:
        """(source, row, id, copies dropped) of every kept row that can train a copy of which
        was dropped. A kept row that cannot train only ever drops copies that cannot either
        (a row that can is compared only with kept rows that can): nothing trainable lost."""
        for k, n in enumerate(self.copies):
            if n and self.trains[k]:
                rid, source, row = self.describe(k)
                yield source, row, rid, n


def _widening_append(values: array[int], value: int) -> array[int]:
    """``values`` with ``value`` appended, as 8-byte numbers once one does not fit in 4 (a
    row number or an id offset past 2**32: the array is copied wider once)."""
    try:
        values.append(value)
    except OverflowError:
        values = array("Q", values)
        values.append(value)
    return values


class _Counters:
    """Per-source checked / removed counts and (kept_source, removed_source) pairs."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.checked: Counter[str] = Counter()
        self.removed: Counter[str] = Counter()
        self.pairs: Counter[tuple[str, str]] = Counter()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "checked": dict(self.checked),
            "removed": dict(self.removed),
            "removed_total": sum(self.removed.values()),
            "pairs": [
                {"kept_source": k, "removed_source": r, "count": n}
                for (k, r), n in sorted(self.pairs.items())
            ],
        }


class ExactDeduper:
    """Drops rows whose normalized content equals an earlier row's (first one kept)."""

    def __init__(self) -> None:
        self._seen = DigestTable()
        self._kept = _Kept()
        self.counters = _Counters("exact")

    @staticmethod
    def key(item: Conversation | PromptOnly) -> int:
        """The row's content digest (where it is read: a worker, or the driver)."""
        return digest64(("p" if isinstance(item, PromptOnly) else "c") + content_key(item))

    def check(self, item: Normalized, trains: bool = True) -> Reject | None:
        """A `reasons.DUPLICATE` reject naming the kept row, or None (the row is kept)."""
        if not isinstance(item, Conversation | PromptOnly):
            return None
        return self.check_key(item.source, item.row, item.id, self.key(item), trains)

    def check_key(
        self, source: str, row: int, row_id: str, key: int, trains: bool = True
    ) -> Reject | None:
        """`check` on the row's facts: its content digest decides, not its bytes."""
        self.counters.checked[source] += 1
        k = self._seen.get(key)
        if k is None or (trains and not self._kept.trains[k]):
            # kept; a copy that cannot train gives way to this one for the rows after it
            self._seen.put(key, self._kept.add(source, row, row_id, trains))
            return None
        kept_id, kept_source, kept_row = self._kept.dropped(k)
        self.counters.removed[source] += 1
        self.counters.pairs[(kept_source, source)] += 1
        msg = f"exact duplicate of id {kept_id!r} (source {kept_source}, row {kept_row})"
        return Reject(source, row, row_id, reasons.DUPLICATE, msg)

    def stats(self) -> dict[str, Any]:
        """Counters for the manifest / report (JSON-ready)."""
        return self.counters.to_json()


# --- near duplicates -------------------------------------------------------------------------

SHINGLE_WORDS = 3
"""Word n-gram size of the near-dup shingles: prompts are short (tens of words), so 3-grams keep
enough shingles per prompt while still encoding word order."""


def prompt_text(item: Conversation | PromptOnly) -> str:
    """The prompt compared by near dedup: the user turns' text, joined by newlines."""
    return "\n".join(m.get("content") or "" for m in item.messages if m.get("role") == "user")


def shingles(text: str, n: int = SHINGLE_WORDS) -> set[bytes]:
    """Word n-grams of the canonical text (unicode ``\\w+`` words); a prompt shorter than ``n``
    words is one shingle of all its words; no words -> empty set."""
    words = _WORD.findall(canonical_text(text))
    if not words:
        return set()
    if len(words) < n:
        return {" ".join(words).encode("utf-8", "surrogatepass")}
    return {
        " ".join(words[i : i + n]).encode("utf-8", "surrogatepass")
        for i in range(len(words) - n + 1)
    }


def _datasketch() -> Any:
    try:
        # lazy: optional dependency (--dedup near)
        import datasketch
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "near-duplicate detection needs datasketch: pip install 'draftset[near-dedup]' "
            "(or pip install datasketch); exact dedup works without it"
        ) from exc
    return datasketch


def _lsh_index(ds: Any, threshold: float, num_perm: int) -> Any:
    """datasketch's LSH index tuned for ``threshold``, with at least two bands. From ~0.99 up
    its optimum is one band, which its index refuses ("number of bands are too small": a
    traceback from inside the build, for a threshold the option takes); two bands of
    ``num_perm // 2`` rows are its own choice at 0.97-0.98 and find every equal signature.
    Only its bands (``b``, ``r``) are used: `_BandIndex` keeps them compactly."""
    try:
        return ds.MinHashLSH(threshold=threshold, num_perm=num_perm)
    except ValueError:  # the one it raises here: threshold and num_perm are checked before
        return ds.MinHashLSH(num_perm=num_perm, params=(2, num_perm // 2))


_SIGNATURE_BLOCK = 4096
"""Kept signatures per block of `_Signatures` (grown a block at a time: no copy, no slack)."""


class _Signatures:
    """The kept prompts' MinHash values, uint32, in fixed blocks of rows (4 bytes a value)."""

    def __init__(self, num_perm: int) -> None:
        self.num_perm = num_perm
        self._blocks: list[np.ndarray] = []
        self._count = 0

    def append(self, sig: np.ndarray) -> None:
        at = self._count % _SIGNATURE_BLOCK
        if at == 0:
            self._blocks.append(np.empty((_SIGNATURE_BLOCK, self.num_perm), dtype=np.uint32))
        self._blocks[-1][at] = sig
        self._count += 1

    def __getitem__(self, k: int) -> np.ndarray:
        return self._blocks[k // _SIGNATURE_BLOCK][k % _SIGNATURE_BLOCK]


class _BandIndex:
    """MinHash LSH buckets, as datasketch's `MinHashLSH` forms them, in a few bytes a prompt.

    A kept prompt is a candidate for a query when one of the ``bands`` slices of ``rows``
    values equals the query's (datasketch: the slice's bytes as the key of a dict of sets, and
    a list of every prompt's keys: ~3.4 KB a prompt at 9 bands). Here each band maps a 64-bit
    hash of the slice to the last kept prompt with it (a dict of ints, ~90 bytes an entry),
    earlier ones chained through an int32 array, and a chained prompt is a candidate only when
    its stored slice is equal: a hash collision adds no candidate, so the candidates are
    datasketch's exactly (tested against it)."""

    def __init__(self, bands: int, rows: int, signatures: _Signatures) -> None:
        self.bands, self.rows = bands, rows
        self._signatures = signatures
        self._heads: list[dict[int, int]] = [{} for _ in range(bands)]
        self._before = [array("i") for _ in range(bands)]  # the chain: previous kept, or -1
        seeds = np.random.default_rng(0x5EED).integers(1, 2**63, size=rows, dtype=np.uint64)
        self._mix = seeds * np.uint64(2) + np.uint64(1)  # odd multipliers

    def keys(self, sig: np.ndarray) -> list[int]:
        """One 64-bit hash per band (computed once a prompt: `candidates`, then `insert`)."""
        b = sig[: self.bands * self.rows].reshape(self.bands, self.rows).astype(np.uint64)
        keys = (b * self._mix).sum(axis=1, dtype=np.uint64)
        keys ^= keys >> np.uint64(29)
        return keys.tolist()  # type: ignore[no-any-return]

    def candidates(self, sig: np.ndarray, keys: list[int]) -> set[int]:
        """The kept prompts sharing at least one band's values with ``sig`` (``keys``: its
        `keys`)."""
        found: set[int] = set()
        for band, key in enumerate(keys):
            k = self._heads[band].get(key)
            if k is None:
                continue
            lo, hi = band * self.rows, (band + 1) * self.rows
            want = sig[lo:hi]
            before = self._before[band]
            while k >= 0:
                if k not in found and np.array_equal(self._signatures[k][lo:hi], want):
                    found.add(k)
                k = before[k]
        return found

    def insert(self, k: int, keys: list[int]) -> None:
        """Kept prompt ``k`` (the next index: inserted in order) with its signature's `keys`."""
        for band, key in enumerate(keys):
            heads = self._heads[band]
            self._before[band].append(heads.get(key, -1))
            heads[key] = k


class NearDeduper:
    """Drops rows whose prompt's estimated word-3-gram Jaccard similarity to an earlier kept
    prompt is at least ``threshold`` (MinHash LSH finds candidates, signatures verify them)."""

    def __init__(
        self, threshold: float = defaults.NEAR_DUP_THRESHOLD, num_perm: int = 128, seed: int = 1
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"near-dup threshold must be in (0, 1], got {threshold}")
        ds = _datasketch()
        self.threshold = threshold
        self.num_perm = num_perm
        self._minhash = ds.MinHash
        self._template = ds.MinHash(num_perm=num_perm, seed=seed)  # permutations, built once
        lsh = _lsh_index(ds, threshold, num_perm)  # its bands; the index is `_BandIndex`
        self._signatures = _Signatures(num_perm)
        self._bands = _BandIndex(lsh.b, lsh.r, self._signatures)
        self._kept = _Kept()
        self.counters = _Counters("near")
        self.skipped_empty = 0

    def signature(self, text: str) -> Any | None:
        """The MinHash of a prompt's shingles (None when the prompt has no words)."""
        grams = shingles(text)
        if not grams:
            return None
        m = self._minhash(
            num_perm=self.num_perm,
            permutations=self._template.permutations,
            scheme=self._template.scheme,
        )
        m.update_batch(list(grams))
        return m

    def hashes(self, item: Conversation | PromptOnly) -> np.ndarray | None:
        """The MinHash values of the row's prompt, None without words (pure: a worker can
        compute them; `check_hashes` decides on them)."""
        m = self.signature(prompt_text(item))
        return None if m is None else m.hashvalues

    def check(self, item: Normalized, trains: bool = True) -> Reject | None:
        """A `reasons.NEAR_DUPLICATE` reject naming the kept row, or None (kept)."""
        if not isinstance(item, Conversation | PromptOnly):
            return None
        return self.check_hashes(item.source, item.row, item.id, self.hashes(item), trains)

    def check_hashes(
        self,
        source: str,
        row: int,
        row_id: str,
        hashes: np.ndarray | None,
        trains: bool = True,
    ) -> Reject | None:
        """`check` on the row's facts: its prompt's MinHash values, not its text."""
        if hashes is None:
            self.skipped_empty += 1
            return None
        self.counters.checked[source] += 1
        sig = np.asarray(hashes, dtype=np.uint32)
        keys = self._bands.keys(sig)
        best, best_k = 0.0, -1
        for k in self._bands.candidates(sig, keys):
            if trains and not self._kept.trains[k]:
                continue  # a kept copy that cannot train never drops one that can
            sim = float(np.count_nonzero(self._signatures[k] == sig)) / self.num_perm
            if sim > best or (sim == best and k < best_k):
                best, best_k = sim, k
        if best_k >= 0 and best >= self.threshold:
            kept_id, kept_source, kept_row = self._kept.dropped(best_k)
            self.counters.removed[source] += 1
            self.counters.pairs[(kept_source, source)] += 1
            msg = (
                f"prompt near-duplicate (estimated Jaccard {best:.2f} >= {self.threshold}) "
                f"of id {kept_id!r} (source {kept_source}, row {kept_row})"
            )
            return Reject(source, row, row_id, reasons.NEAR_DUPLICATE, msg)
        k = self._kept.add(source, row, row_id, trains)
        self._signatures.append(sig)
        self._bands.insert(k, keys)
        return None

    def stats(self) -> dict[str, Any]:
        out = self.counters.to_json()
        out.update(
            threshold=self.threshold,
            num_perm=self.num_perm,
            shingle_words=SHINGLE_WORDS,
            no_prompt_text=self.skipped_empty,
        )
        return out


def copies_lost(
    dedupers: list[ExactDeduper | NearDeduper], rejects: Iterable[dict[str, Any]]
) -> tuple[int, int, Counter[str], list[str]]:
    """What dedup cost that it could not see: dedup decides before the render, so a kept row the
    row step then rejects whole (too long, a template error, an answer that failed in `run`)
    took the copies dropped for it along. ``rejects``: the set's reject lines. Returns (copies
    dropped for such rows, those rows, their reasons, the steps' kinds that dropped them)."""
    kept: dict[tuple[str, int], tuple[str, int, set[str]]] = {}
    for step in dedupers:
        kind = step.counters.kind
        for source, row, rid, n in step._kept.with_copies():
            _, before, kinds = kept.get((source, row), (rid, 0, set()))
            kept[(source, row)] = (rid, before + n, kinds | {kind})
    copies, rows, why, kinds = 0, 0, Counter[str](), set[str]()
    if not kept:
        return copies, rows, why, []
    for line in rejects:
        hit = kept.get((line.get("source"), line.get("row")))  # type: ignore[arg-type]
        if hit is None or line.get("id") != hit[0]:
            continue  # not a kept row, or one turn of it (`--turns each`): rows were written
        if line.get("reason") in (reasons.DUPLICATE, reasons.NEAR_DUPLICATE):
            continue  # dropped by the next step itself: its copies are copies of that one's
        copies, rows = copies + hit[1], rows + 1
        why[str(line.get("reason"))] += 1
        kinds |= hit[2]
    return copies, rows, why, sorted(kinds)


def make_dedupers(
    mode: str, threshold: float = defaults.NEAR_DUP_THRESHOLD
) -> list[ExactDeduper | NearDeduper]:
    """The steps for ``--dedup exact|near|none`` (``near`` runs exact first, then near)."""
    if mode == "none":
        return []
    if mode == "exact":
        return [ExactDeduper()]
    if mode == "near":
        return [ExactDeduper(), NearDeduper(threshold)]
    raise ValueError(f"unknown dedup mode {mode!r}; expected exact, near or none")
