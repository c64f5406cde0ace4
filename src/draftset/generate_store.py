"""Crash-safe JSONL files for `generate`: append whole lines, resume by row id.

A line is written with one ``os.write`` of its complete bytes on an ``O_APPEND`` descriptor, so
after a crash (even ``kill -9``) a file holds only whole lines except, at worst, one torn last
line. `recover` cuts that tail off and returns the ids already present, so a rerun of the same
command skips them: resume is keyed by row id, never by a line count, because answers finish
out of order.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftset.errors import DraftsetError

FSYNC_EVERY_LINES = 200
FSYNC_EVERY_SECONDS = 5.0


@dataclass
class Recovered:
    """What an existing output or errors file already holds."""

    ids: set[str] = field(default_factory=set)
    lines: int = 0
    torn_bytes: int = 0  # bytes of a torn last line that were cut away
    reasons: dict[str, int] = field(default_factory=dict)  # errors file: count by reason


class StoreError(DraftsetError):
    """An existing file that is not ours to resume (a bad line before the end)."""


def errors_path(out: Path) -> Path:
    """``answers.jsonl`` -> ``answers.errors.jsonl`` (beside it)."""
    name = out.name
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    return out.with_name(f"{stem}.errors.jsonl")


def recover(path: Path) -> Recovered:
    """Ids of the complete lines in ``path``; a torn last line is truncated away on disk.

    A line is complete when it ends with a newline and parses as a JSON object with an ``id``.
    Only the last line can be torn (every line is one write); a bad line before it means the
    file was edited or is not a `generate` file, and resuming would be guesswork.
    """
    found = Recovered()
    if not path.exists():
        return found
    good_end = 0
    size = path.stat().st_size
    with path.open("rb") as f:  # streamed: output files can be large
        for line in f:
            obj = _parse(line) if line.endswith(b"\n") else None
            if obj is None:
                if good_end + len(line) < size:
                    msg = f"line at byte {good_end} is not a complete JSON object with an id"
                    raise StoreError(f"{path}: {msg}")
                break
            found.ids.add(obj["id"])
            found.lines += 1
            reason = obj.get("reason")
            if isinstance(reason, str):
                found.reasons[reason] = found.reasons.get(reason, 0) + 1
            good_end += len(line)
    if good_end < size:
        found.torn_bytes = size - good_end
        with path.open("r+b") as f:
            f.truncate(good_end)
            os.fsync(f.fileno())
    return found


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if isinstance(obj, dict) and isinstance(obj.get("id"), str):
        return obj
    return None


def drop_ids(path: Path, ids: set[str]) -> int:
    """Rewrite ``path`` without the lines of ``ids`` (atomically, by rename); returns the count."""
    if not path.exists() or not ids:
        return 0
    tmp = path.with_name(path.name + ".tmp")
    dropped = 0
    with path.open("rb") as src, tmp.open("wb") as dst:
        for line in src:
            obj = _parse(line)
            if obj is not None and obj["id"] in ids:
                dropped += 1
                continue
            dst.write(line)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)
    return dropped


class LineWriter:
    """Appends JSON lines atomically; fsyncs every few lines / seconds and on close."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lines = 0
        self._unsynced = 0
        self._last_sync = time.monotonic()

    def write(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        view = memoryview(data)
        while view:  # one write in practice; loop only if the kernel writes part of it
            n = os.write(self.fd, view)
            view = view[n:]
        self.lines += 1
        self._unsynced += 1
        if (
            self._unsynced >= FSYNC_EVERY_LINES
            or time.monotonic() - self._last_sync >= FSYNC_EVERY_SECONDS
        ):
            self.sync()

    def sync(self) -> None:
        if self._unsynced:
            os.fsync(self.fd)
            self._unsynced = 0
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if self.fd >= 0:
            self.sync()
            os.close(self.fd)
            self.fd = -1
