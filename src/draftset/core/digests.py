"""A compact table of 8-byte digests, for the per-row state the main process must keep.

Unique ids and exact dedup remember one digest per row. As Python ``set``/``dict`` entries
that costs ~100-150 bytes a row (0.5 GB at a million rows for both), which breaks the flat-
memory promise; here it is 16 bytes a slot (8 for a set) at most two thirds full: open
addressing with linear probing over numpy arrays, doubled past two thirds (12-24 bytes a key
for a set, against 16-32 when it was doubled at half full; a lookup probes ~2-5 slots). Values
are int32 until one does not fit (a table of kept-row indexes: 12 bytes a slot, not 16).
"""

from __future__ import annotations

import hashlib

import numpy as np

_EMPTY = np.uint64(0)
_INT32 = np.iinfo(np.int32)


def digest64(text: str) -> int:
    """A stable 64-bit digest of a string (never 0: 0 marks an empty slot)."""
    d = int.from_bytes(
        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
    )
    return d or 1


class DigestTable:
    """Map 64-bit digests (see `digest64`) to non-negative ints, or hold them as a set.

    A table only ever used through `add` (a set) has no value array: 8 bytes a slot.
    """

    def __init__(self, capacity: int = 1024) -> None:
        size = 1 << max(4, (capacity * 3 // 2).bit_length())
        self._keys = np.zeros(size, dtype=np.uint64)
        self._values: np.ndarray | None = None  # allocated by the first `put`
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _slot(self, key: int) -> int:
        keys = self._keys
        mask = keys.size - 1
        i = key & mask
        k = np.uint64(key)
        while True:
            here = keys[i]
            if here in (k, _EMPTY):
                return i
            i = (i + 1) & mask

    def get(self, key: int) -> int | None:
        """The value put for ``key`` (0 for a key only added), or None."""
        i = self._slot(key)
        if self._keys[i] == _EMPTY:
            return None
        return int(self._values[i]) if self._values is not None else 0

    def put(self, key: int, value: int) -> None:
        """Insert or overwrite."""
        if self._values is None:
            self._values = np.zeros(self._keys.size, dtype=np.int32)
        if not _INT32.min <= value <= _INT32.max and self._values.dtype != np.int64:
            self._values = self._values.astype(np.int64)  # once: the first value past int32
        i = self._slot(key)
        if self._keys[i] == _EMPTY:
            self._count += 1
            self._keys[i] = np.uint64(key)
        self._values[i] = value
        if _too_full(self._count, self._keys.size):
            self._grow()

    def add(self, key: int) -> bool:
        """Insert as a set member; False when it was there already."""
        i = self._slot(key)
        if self._keys[i] != _EMPTY:
            return False
        self._keys[i] = np.uint64(key)
        self._count += 1
        if _too_full(self._count, self._keys.size):
            self._grow()
        return True

    def _grow(self) -> None:
        """Double, re-inserting in chunks (no million-entry Python lists on the way)."""
        keys, values = self._keys, self._values
        where = np.flatnonzero(keys != _EMPTY)
        self._keys = np.zeros(keys.size * 2, dtype=np.uint64)
        self._values = None if values is None else np.zeros(keys.size * 2, dtype=values.dtype)
        self._count = 0
        for start in range(0, where.size, _GROW_CHUNK):
            chunk = where[start : start + _GROW_CHUNK]
            if values is None:
                for k in keys[chunk].tolist():
                    self.add(k)
            else:
                for k, v in zip(keys[chunk].tolist(), values[chunk].tolist(), strict=True):
                    self.put(k, v)


_GROW_CHUNK = 1 << 16


def _too_full(count: int, slots: int) -> bool:
    """More than two thirds of the slots taken: time to double (a free slot always remains,
    so a probe always ends)."""
    return count * 3 > slots * 2


def vocabulary_sample_sha256(backend: object, samples: int = 4096) -> str:
    """sha256 of every ~n/4096-th token of a `tokenizers` backend's model vocabulary.

    Says whether a tokenizer decodes a set's ids as the one it was built with did: unlike the
    files' fingerprint it is the same for every copy of a tokenizer (a tokenizer-only folder,
    the full model folder, transformers' own backend, which may add a few added tokens to the
    file's), and unlike the size it tells two vocabularies of one size apart. A few ms where
    reading the whole vocabulary takes a second (Gemma-3's 262K tokens).
    """
    n = backend.get_vocab_size(with_added_tokens=False)  # type: ignore[attr-defined]
    tokens = [backend.id_to_token(i) or "" for i in range(0, n, max(1, n // samples))]  # type: ignore[attr-defined]
    text = f"{n}\n" + "\n".join(tokens)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
