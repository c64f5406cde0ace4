"""Answers rejoining their rows: the overlay `draftset run` builds (and `verify` re-reads) with.

`run` selects rows exactly as `build` does, has the target model answer the ones that need it,
and then builds again with an *overlay*: JSONL files keyed by row id, each line either an
answer (``messages`` / ``tools`` / ``metadata``, as `generate` writes it) or an error
(``reason`` / ``message``). After selection, a row whose id is in the overlay is replaced by its
answer (normalized like any source row, keeping the row's own source, row number and id), or
becomes a reject with the error's reason. Everything else passes unchanged, so per-source
counts, mix shares and rejects speak of the user's sources.

Bounded memory: the index holds an 8-byte id digest and an 8-byte file/offset per answered row
(a half-full table: ~32-64 bytes a row); a line is read back from disk when its row comes by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from draftset.core.digests import DigestTable, digest64
from draftset.core.records import Conversation, Normalized, PromptOnly, RawRow, Reject, in_file
from draftset.sources.normalize import normalize

_OFFSET_BITS = 48


class Overlay:
    """Index of answer / error lines by row id over a few JSONL files (later files win)."""

    def __init__(self, paths: list[str | Path]) -> None:
        self.paths = [Path(p) for p in paths]
        self._index = DigestTable()
        self._files = [p.open("rb") if p.exists() else None for p in self.paths]
        for k, (path, f) in enumerate(zip(self.paths, self._files, strict=True)):
            if f is None:
                continue
            offset = 0
            for line in f:
                if line.endswith(b"\n"):
                    row_id = _line_id(line)
                    if row_id is not None:
                        self._index.put(digest64(row_id), (k << _OFFSET_BITS) | offset)
                offset += len(line)
            if offset >= 1 << _OFFSET_BITS:
                raise ValueError(f"{path} is too large for the overlay index")

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, row_id: str) -> dict[str, Any] | None:
        where = self._index.get(digest64(row_id))
        if where is None:
            return None
        f = self._files[where >> _OFFSET_BITS]
        assert f is not None
        f.seek(where & ((1 << _OFFSET_BITS) - 1))
        obj = json.loads(f.readline())
        return obj if obj.get("id") == row_id else None  # a digest collision: not ours

    def apply(self, item: Normalized) -> Normalized:
        """The row's answer, its generation reject, or the row itself."""
        if not isinstance(item, Conversation | PromptOnly):
            return item
        line = self.lookup(item.id)
        if line is None:
            return item
        if "reason" in line:
            reason, message = str(line["reason"]), str(line["message"])
            return in_file(Reject(item.source, item.row, item.id, reason, message), item.file)
        data = {k: v for k, v in line.items() if k in ("messages", "tools", "metadata")}
        data["id"] = item.id
        return in_file(normalize(RawRow(item.source, item.row, data), "messages"), item.file)

    def close(self) -> None:
        for f in self._files:
            if f is not None:
                f.close()


def _line_id(line: bytes) -> str | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    row_id = obj.get("id") if isinstance(obj, dict) else None
    return row_id if isinstance(row_id, str) else None
