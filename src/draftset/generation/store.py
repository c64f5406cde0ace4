"""Crash-safe JSONL files for `generate`: append whole lines, resume by row id.

A line is written with one ``os.write`` of its complete bytes on an ``O_APPEND`` descriptor, so
after a crash (even ``kill -9``) a file holds only whole lines except, at worst, one torn last
line. `recover` cuts that tail off and returns the ids already present, so a rerun of the same
command skips them: resume is keyed by row id, never by a line count, because answers finish
out of order.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftset.config.fields import option_name
from draftset.config.schema import GenerateArgs, RunArgs
from draftset.core.errors import RunError, UsageError
from draftset.core.files import cannot_create, write_json_atomic
from draftset.core.reasons import READING_REASONS
from draftset.output.folder import inside_a_set

FSYNC_EVERY_LINES = 200
FSYNC_EVERY_SECONDS = 5.0


@dataclass
class Recovered:
    """What an existing output or errors file already holds."""

    ids: set[str] = field(default_factory=set)
    lines: int = 0
    torn_bytes: int = 0  # bytes of a torn last line that were cut away
    reasons: dict[str, int] = field(default_factory=dict)  # errors file: count by reason
    examples: dict[str, str] = field(default_factory=dict)  # errors file: reason -> 1st message
    # id -> the digest of the input row the line is about (`Job.input_digest`)
    inputs: dict[str, str] = field(default_factory=dict)
    unread: set[str] = field(default_factory=set)  # ids of rows that did not read (errors file)


class StoreError(UsageError):
    """An existing file that is not ours to resume (a bad line before the end)."""


def errors_path(out: Path) -> Path:
    """``answers.jsonl`` -> ``answers.errors.jsonl`` (beside it)."""
    return out.with_name(f"{_stem(out)}.errors.jsonl")


def recover(path: Path, truncate: bool = True) -> Recovered:
    """Ids of the complete lines in ``path``; a torn last line is truncated away on disk
    (unless ``truncate`` is False: only checked).

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
                found.examples.setdefault(reason, str(obj.get("message", "")))
                if reason in READING_REASONS:
                    found.unread.add(obj["id"])
            meta = obj.get("metadata")  # an answer line's; an error line's is top-level
            digest = (meta if isinstance(meta, dict) else obj).get("input_digest")
            if isinstance(digest, str):
                found.inputs[obj["id"]] = digest
            good_end += len(line)
    if good_end < size:
        found.torn_bytes = size - good_end
        if not truncate:
            return found
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
    try:
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
    except OSError as exc:  # a full disk: the file stays as it was
        tmp.unlink(missing_ok=True)
        raise CannotStart(tmp, exc) from None
    return dropped


def cannot_write(path: Path, exc: OSError) -> str:
    """``cannot write PATH: No space left on device`` (a full disk, a quota, an I/O error)."""
    return f"cannot write {path}: {exc.strerror or exc}"


class WriteFailed(Exception):
    """A line could not be written, or the lines could not be synced, to ``path`` (a full
    disk, a quota, an I/O error): the run stops, resumable, with one line saying so. The
    file was cut back to its last whole line: nothing half-written stays behind."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(f"{cannot_write(path, exc)} (every line before it is kept)")
        self.path = path


class CannotStart(RunError):
    """A file `generate` writes before its first request could not be written (a full disk):
    one line, exit 1, nothing asked (a traceback before)."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(
            f"{cannot_write(path, exc)}; nothing was asked: make room, then rerun the same command"
        )


class LineWriter:
    """Appends JSON lines atomically; fsyncs every few lines / seconds and on close."""

    def __init__(self, path: Path, ascii_fallback: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.ascii_fallback = ascii_fallback
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:  # no inode left, a read-only mount: one line, exit 1
            raise CannotStart(path, exc) from None
        self.size = os.fstat(self.fd).st_size  # end of the last whole line (one writer: the lock)
        self.lines = 0
        self._unsynced = 0
        self._last_sync = time.monotonic()

    def write(self, obj: dict[str, Any]) -> None:
        """Append one line. Never writes invalid UTF-8: text holding a lone surrogate raises
        `UnicodeEncodeError` (nothing written), or with ``ascii_fallback`` is written as JSON
        ``\\u`` escapes (the errors file: a diagnostic must not be lost)."""
        text = json.dumps(obj, ensure_ascii=False) + "\n"
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            if not self.ascii_fallback:
                raise
            data = (json.dumps(obj, ensure_ascii=True) + "\n").encode("ascii")
        view = memoryview(data)
        try:
            while view:  # one write in practice; loop only if the kernel writes part of it
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError as exc:  # a full disk writes what fits, then fails: cut that part
            with contextlib.suppress(OSError):  # else a rerun cuts the torn line (`recover`)
                os.ftruncate(self.fd, self.size)
            raise WriteFailed(self.path, exc) from None
        self.size += len(data)
        self.lines += 1
        self._unsynced += 1
        if (
            self._unsynced >= FSYNC_EVERY_LINES
            or time.monotonic() - self._last_sync >= FSYNC_EVERY_SECONDS
        ):
            self.sync()

    def sync(self) -> None:
        if self._unsynced:
            try:
                os.fsync(self.fd)
            except OSError as exc:  # the lines since the last sync may be lost: stop
                raise WriteFailed(self.path, exc) from None
            self._unsynced = 0
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self.fd)
                self.fd = -1


# --- one writer per output: the lock ------------------------------------------------------------
def _stem(out: Path) -> str:
    name = out.name
    return name[: -len(".jsonl")] if name.endswith(".jsonl") else name


def lock_path(out: Path) -> Path:
    """``answers.jsonl`` -> ``answers.lock`` (beside it; left in place, it holds no state)."""
    return out.with_name(f"{_stem(out)}.lock")


def foreign_lock(out: Path, path: Path, flag: str | None = None) -> str | None:
    """Why the lock file ``path`` of ``out`` is not to be taken (one line), or None: it exists
    and holds something other than what a lock holds (a process id, or nothing). Taking the
    lock truncates the file: a ``k.lock`` of the user's beside ``--out k.jsonl`` was replaced
    by a pid. ``flag``: how the message names ``out`` (default: generate's ``--out``, the
    API's ``out``)."""
    flag = flag or _out_flag()
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return None
        with path.open("rb") as f:
            head = f.read(64)
    except OSError:
        return None  # unreadable: opening it to lock says so
    if re.fullmatch(rb"[0-9]{1,20}\n?", head):
        return None
    return (
        f"{flag} {out}: {path} exists and is not a lock draftset wrote (a process id); move it"
        f" away or choose another {flag}"
    )


def run_path(out: Path) -> Path:
    """``answers.jsonl`` -> ``answers.run.json``: the settings the answers were generated with."""
    return out.with_name(f"{_stem(out)}.run.json")


def _out_flag() -> str:
    """Generate's ``--out`` on the command line, ``out`` in the API: as the caller named it."""
    return option_name(GenerateArgs, "out")


def check_output_path(out: Path) -> None:
    """``--out`` and the files beside it (errors, run file, lock) are outside any built set,
    regular files, or can be created, in a writable folder: one line (`StoreError`, exit 2)
    before any request, not a traceback from the first write (a path inside a set,
    ``/dev/null``, a folder, a FIFO, an unwritable path)."""
    flag = _out_flag()
    for path in (out, errors_path(out), run_path(out), lock_path(out)):
        which = flag if path == out else f"{flag} {out}: {path.name}"
        if problem := inside_a_set(path, f"{which} {path}"):  # as report -o's
            raise StoreError(problem)
        if path.is_dir():
            raise StoreError(f"{which} {path} is a folder; give a .jsonl file path")
        if path.exists() and not path.is_file():
            raise StoreError(
                f"{which} {path} is not a regular file (a device, FIFO or socket): generate"
                " appends answers and resumes from them; give a .jsonl file path"
            )
    if problem := foreign_lock(out, lock_path(out)):
        raise StoreError(problem)
    problem = cannot_create(out, "files")
    if problem is not None:
        raise StoreError(f"{flag} {out}{problem}")


class Locked(StoreError):
    """Another process is writing the same output."""


class RunLock:
    """An exclusive `flock` on ``OUT``'s lock file for the whole run. The kernel drops it when
    the process ends in any way (``kill -9`` included), so there is never a stale lock."""

    def __init__(
        self,
        out: Path,
        path: Path | None = None,
        command: str = "generate",
        doing: str = "is writing",
    ) -> None:
        """``path``: the lock file (default ``lock_path(out)``); ``command`` and ``doing``: what
        the holder is, for the message (`draftset run` locks its work folder too)."""
        # lazy: fcntl is POSIX-only: needed only to lock
        import fcntl

        path = path or lock_path(out)
        flag = option_name(RunArgs, "work") if command == "run" else _out_flag()
        if problem := foreign_lock(out, path, flag):  # never truncate a file of the user's
            raise StoreError(problem)
        try:  # root passes os.access on /proc; a read-only mount fails only here
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(
                f"{flag} {out}: cannot create files in {path.parent}: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self.fd, 32, 0).decode("ascii", "replace").strip()
            os.close(self.fd)
            self.fd = -1
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise Locked(
                f"another draftset {command}{who} {doing} {out} (lock {path}); "
                "wait for it or stop it first"
            ) from None
        with contextlib.suppress(OSError):  # the pid only names the holder (a full disk)
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# --- what the answers were generated with: the run file ------------------------------------------
RUN_FORMAT = "draftset-generate-run"


def read_run(out: Path) -> dict[str, Any] | None:
    """The run file beside ``out`` (None when there is none); `StoreError` when unreadable."""
    path = run_path(out)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: unreadable ({exc}); move it away to start over") from None
    if not isinstance(data, dict) or data.get("format") != RUN_FORMAT:
        raise StoreError(f"{path}: not a draftset generate run file")
    return data


def write_run(out: Path, data: dict[str, Any]) -> None:
    """Write the run file atomically (temporary file, fsync, rename)."""
    write_json_atomic(run_path(out), {"format": RUN_FORMAT, **data}, indent=1)


def first_line(path: Path) -> dict[str, Any] | None:
    """The first complete JSON object of a JSONL file (None: no such line)."""
    if not path.exists():
        return None
    with path.open("rb") as f:
        for line in f:
            return _parse(line) if line.endswith(b"\n") else None
    return None


def answers_status(path: Path) -> dict[str, Any] | None:
    """How the `generate` run that wrote the answers file ``path`` ended, from the run file
    beside it (None: no run file, so not generate's output, or one that does not read):
    ``finished`` (None for a run file of a draftset before the marker) and its ``rows``
    (``input``, ``answered``, ``errors`` by reason, ``not_done``; without an end recorded,
    only ``errors``, counted in the errors file). `build` says what is missing from a set
    built of it: the rows never answered, those that ended as errors."""
    if not path.name.endswith(".jsonl") or path.name.endswith(".errors.jsonl"):
        return None
    if not run_path(path).is_file():
        return None
    try:
        run = read_run(path)
    except StoreError:
        return None
    if run is None:
        return None
    finished = run.get("finished")
    rows = run.get("rows")
    if not isinstance(rows, dict):
        try:  # killed (no end recorded), or a run file before the marker: the errors file
            errors = recover(errors_path(path), truncate=False).reasons
        except (OSError, StoreError):
            errors = {}
        rows = {"errors": dict(sorted(errors.items()))}
    return {
        "run_file": str(run_path(path)),
        "finished": finished if isinstance(finished, bool) else None,
        "rows": rows,
    }
