"""Row ids unique across one run: the one registry `build` and `generate` share.

Both keep a row's own id when it is free, else its source-prefixed form ``source:id`` (for a
source folder of several files ``source/file:id``, the file relative to the folder), else
``source:row:id``, its position: when another row took the prefixed form by accident (a
made-up ``source:row`` id, an explicit id spelled like a prefixed one) or the same file took
it (a file repeating an id: answer dumps repeat `question_id` once per model). An id names a
row, it does not judge it: rows of equal content are exact dedup's (`--dedup`). Only a row
whose positional form is taken too (an explicit id spelled like it) is a
`reasons.DUPLICATE_ID`. Ids are held as 8-byte digests in `DigestTable`s (~16 bytes a row,
flat memory for millions of rows).
"""

from __future__ import annotations

from draftset.core.digests import DigestTable, digest64


class IdRegistry:
    """The ids claimed so far in this run (also a compact set of ids for `in` tests)."""

    def __init__(self) -> None:
        self._seen = DigestTable()
        self._prefixed = DigestTable()  # (prefix, id) of rows whose own id was taken

    def __contains__(self, row_id: str) -> bool:
        return self._seen.get(digest64(row_id)) is not None

    def __len__(self) -> int:
        return len(self._seen)

    def claim(self, row_id: str) -> bool:
        """Take ``row_id``; False when it was taken already."""
        return self._seen.add(digest64(row_id))

    def claim_row_id(
        self, row_id: str, source: str, file: str | None = None, row: int | None = None
    ) -> str | None:
        """The row's id, or when it is taken ``source:id`` (a source of one file) or
        ``source/file:id`` (a source of several files: ids of different files never collide
        by accident), or when that form is taken (by another row by accident, or by this
        file's earlier row with the same id) ``source:row:id``, the row's position. None when
        that is taken too, or no position is given."""
        prefix = f"{source}/{file}" if file else source
        if self.claim(row_id):
            return row_id
        # the first repeat in this file takes the prefixed form (unless taken by accident);
        # later repeats are named by their position (before: rejected as duplicates)
        if self._prefixed.add(digest64(f"{prefix}\x00{row_id}")):
            prefixed = f"{prefix}:{row_id}"
            if self.claim(prefixed):
                return prefixed
        if row is None:
            return None
        placed = f"{source}:{row}:{row_id}"
        return placed if self.claim(placed) else None

    def claim_key(
        self, candidate: str | None, source: str, row: int, file: str | None = None
    ) -> tuple[str, bool]:
        """(key, False only for a `reasons.DUPLICATE_ID`) for every row read, rejected ones
        too: `claim_row_id` (the row's id, prefixed or positional form), else a made-up key that
        is claimed as well (``source:row`` for a row without an id, a line that is not JSON:
        True; ``source:row#duplicate`` for a duplicate id: False). Build and generate both claim
        each row's key here, so a rejected row's id is taken for the rows after it in both."""
        if candidate is not None:
            own = self.claim_row_id(candidate, source, file, row)
            if own is not None:
                return own, True
        fallback = f"{source}:{row}" if candidate is None else f"{source}:{row}#duplicate"
        while not self.claim(fallback):
            fallback += "+"
        return fallback, candidate is None


def duplicate_id_message(row_id: str) -> str:
    """The message of a `reasons.DUPLICATE_ID` reject or error line."""
    return f"id {row_id!r} already used in this run"
