"""The output folder: built under a temporary name beside the target, renamed when finished.

A half-written output never looks finished: the temporary folder carries a marker saying which
process on which host builds it, so a later run removes a killed run's leftover and never
touches anything else; the folder replaced at the end is checked again (only an empty folder
or a draftset output is ever removed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Any

from draftset.core.errors import UsageError
from draftset.core.files import inside_set_problem, places_of
from draftset.core.naming import as_given

MANIFEST_FORMAT = "draftset/1"
"""The ``format`` key of every manifest.json draftset writes: the marker that lets
``--overwrite`` replace a folder (any ``draftset/<n>`` version counts)."""


def is_draftset_output(folder: Path) -> bool:
    """True when ``folder/manifest.json`` is a JSON object with ``"format": "draftset/<n>"``."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    return isinstance(fmt, str) and fmt.startswith("draftset/")


def enclosing_set(path: Path) -> Path | None:
    """The built set (`is_draftset_output`) a file written at ``path`` would land in: a folder
    above ``path``'s place or above where a link there points (`core.files.places_of`); None
    when there is none. Nothing may be written into a set but what its manifest lists."""
    for place in sorted(places_of(path)):
        for folder in place.parents:
            if is_draftset_output(folder):
                return folder
    return None


def inside_a_set(path: Path, shown: str) -> str | None:
    """Why a file or folder a command writes may not be at ``path`` (``shown``: the flag and
    the path as given): it lies inside a built set (`enclosing_set`), whose own verify would
    then fail; None when it does not. `core.files.inside_set_problem` words it."""
    outer = enclosing_set(path)
    return None if outer is None else inside_set_problem(path, shown, outer)


DRAFTSET_LATER_FILES = ("manifest.json", "verify.json")
"""Files draftset writes into a set that its manifest's ``files`` does not list: the manifest
itself and `verify`'s record."""

REPORT_PAGE = "report.html"
"""`draftset report`'s default page inside a set: draftset's when `is_report_file` says so."""
REPORT_GENERATOR_TAG = '<meta name="generator" content="draftset report">'
"""In the head of every page `draftset report` writes: how a page it may replace is known."""
_OLD_REPORT_OPENING = (
    b'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv='
)
_SNIFF_BYTES = 4096
TMP_WHILE_WRITTEN = (".verify.json.tmp-", f".{REPORT_PAGE}.tmp-")
"""How the temporary names of `verify`'s record and `report`'s page begin until their atomic
rename (``.NAME.tmp-PID``): a leftover of draftset's once that process is gone."""
_WRITING = re.compile("(?:" + "|".join(map(re.escape, TMP_WHILE_WRITTEN)) + ")([0-9]+)")


def is_report_file(path: Path) -> bool:
    """Whether ``path`` is a page `draftset report` wrote: its first few KB hold
    `REPORT_GENERATOR_TAG`, or, written before the tag, the exact opening and title every
    report had. A page of the user's under that name is theirs."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return False
    if REPORT_GENERATOR_TAG.encode() in head:
        return True
    return head.startswith(_OLD_REPORT_OPENING) and "<title>draftset report — ".encode() in head


def _draftset_wrote_later(entry: os.DirEntry[str]) -> bool:
    """A top-level file of a set that draftset wrote after the build: its report page, the
    temporary file of a `verify` or `report` killed before its rename (its process gone; a
    live one is still writing, and its file is not ours to remove yet), or the marker of a
    build killed before it removed the set it replaced (`remove_stale_tmp`)."""
    if not entry.is_file(follow_symlinks=False):
        return False
    if entry.name == REPORT_PAGE:
        return is_report_file(Path(entry.path))
    if entry.name == TMP_MARKER:  # a run killed just after renaming this set into place
        return dead_run_marker(Path(entry.path).parent)
    writing = _WRITING.fullmatch(entry.name)
    return writing is not None and not _alive(int(writing.group(1)))


CHANGE_CHECKED_BYTES = 64 * 1024 * 1024
"""Files up to this size are hashed before ``--overwrite`` replaces them (rejects, prompts,
the small JSON files: what a user edits); the shards, gigabytes, are not."""


def _changed(path: Path, digest: Any) -> bool:
    """A listed file whose content no longer has the manifest's sha256 (small files only)."""
    if not isinstance(digest, str):
        return False
    try:
        if path.stat().st_size > CHANGE_CHECKED_BYTES:
            return False
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return False
    return h.hexdigest() != digest


def foreign_entries(folder: Path) -> list[str]:
    """Entries inside a draftset output that its manifest does not list (relative paths, a
    folder as ``name/``): what ``--overwrite`` would destroy.

    Only a file the manifest names (``files``, plus manifest.json and verify.json) is
    draftset's, unless its content changed since (`_changed`: named with a note), and, at the
    top, `draftset report`'s page and a killed `verify`'s or `report`'s temporary file
    (`_draftset_wrote_later`); a folder is draftset's when everything in it is (Parquet's
    ``data/``).
    """
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        digests = dict(manifest.get("files") or {})
        listed = set(digests) | set(DRAFTSET_LATER_FILES)
    except (OSError, ValueError, TypeError, AttributeError):
        digests, listed = {}, set(DRAFTSET_LATER_FILES)

    def walk(here: Path, prefix: str) -> tuple[list[str], bool]:
        """(foreign entries below ``here``, whether any listed file is there)."""
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            return [prefix or "."], False
        found: list[str] = []
        any_listed = False
        for entry in entries:
            rel = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):
                inner, has_listed = walk(Path(entry.path), rel + "/")
                any_listed |= has_listed
                if not has_listed:
                    found.append(rel + "/")  # a folder of the user's: named, not its files
                else:
                    found += inner
            elif rel in listed and entry.is_file(follow_symlinks=False):
                any_listed = True
                if _changed(Path(entry.path), digests.get(rel)):
                    found.append(f"{rel} (changed since draftset wrote it)")
            elif not prefix and _draftset_wrote_later(entry):
                continue
            else:
                found.append(rel)
        return found, any_listed

    return walk(folder, "")[0]


def _empty(folder: Path) -> bool | None:
    """Whether ``folder`` holds no entry; None when it cannot be read."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return None


def foreign_listing(folder: Path, at_most: int = 5) -> str:
    """`foreign_entries` for a one-line message: the first ``at_most``, then how many more."""
    names = foreign_entries(folder)
    more = f" (+{len(names) - at_most} more)" if len(names) > at_most else ""
    return ", ".join(names[:at_most]) + more


def replaceable(folder: Path) -> bool:
    """An existing folder ``--overwrite`` may replace: empty, or a draftset output holding
    only what draftset wrote (`foreign_entries`)."""
    empty = _empty(folder)
    if empty is None:
        return False
    return empty or (is_draftset_output(folder) and not foreign_entries(folder))


class OutputExistsError(UsageError):
    """The output folder exists and --overwrite was not given (exit code 2)."""


def _overwrite_and_out() -> tuple[str, str]:
    """build's ``--overwrite`` and ``--out`` as the caller gave them: the API's
    ``overwrite=True`` and ``out``."""
    return as_given("--overwrite", "overwrite=True"), as_given("--out", "out")


def prepare_output(out: Path, overwrite: bool) -> Path:
    """Create and return the temporary build folder beside ``out``.

    A killed run's leftovers on this ``out`` go first (`remove_stale_tmp`): the set a run killed
    between its two renames was replacing is back at ``out`` before ``out`` is looked at.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(out)
    if out.exists() and not overwrite:
        overwrite, _ = _overwrite_and_out()
        raise OutputExistsError(f"output folder exists: {out} (pass {overwrite} to replace it)")
    tmp = out.parent / f".{out.name}.draftset-tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    _write_marker(tmp, out, replacing=False)
    return tmp


# Inside every temporary build folder: who made it, so a later run can tell a killed run's
# leftover (removed) from anything else (never touched). It stays until the folder is renamed
# to ``out`` (a finished set that lost it before the rename would be nobody's), and in ``out``
# until the set it replaced is gone (what proves `.out.draftset-old-PID` was draftset's).
TMP_MARKER = ".draftset-build-in-progress"


def _tmp_owner(out: Path) -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "out": str(out.resolve())}


def _write_marker(folder: Path, out: Path, replacing: bool) -> None:
    """Write ``folder``'s marker atomically (a torn marker would be nobody's). ``replacing``:
    ``out`` is about to move to `.out.draftset-old-PID`, which the marker then vouches for."""
    part = folder / f"{TMP_MARKER}.part"
    part.write_text(json.dumps({**_tmp_owner(out), "replacing": replacing}) + "\n", "utf-8")
    os.replace(part, folder / TMP_MARKER)


def _dead_owner(folder: Path, out: Path, pid: int | None = None) -> dict[str, Any] | None:
    """``folder``'s marker when a process on this host, now gone, wrote it for this very
    ``out`` (and, given ``pid``, was that process); None for anything else."""
    try:
        owner = json.loads((folder / TMP_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return None
    mine = {**_tmp_owner(out), "pid": owner["pid"]}
    if any(owner.get(k) != v for k, v in mine.items()) or set(owner) - {*mine, "replacing"}:
        return None
    if (pid is not None and owner["pid"] != pid) or owner["pid"] == os.getpid():
        return None
    return None if _alive(owner["pid"]) else owner


def dead_run_marker(folder: Path) -> bool:
    """Whether ``folder`` (a set) holds the marker of a run killed after renaming it into place
    and before it removed the set it replaced: the next run's to remove, not the user's."""
    return _dead_owner(folder, folder) is not None


def remove_marked(folder: Path) -> bool:
    """Remove a marked folder, its marker last (killed midway, what is left is still marked
    and still removed next time); whether it is gone."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    for entry in entries:
        if entry.name == TMP_MARKER:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):  # what stays is named by the return
                Path(entry.path).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    return not folder.exists()


def _real_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def remove_stale_tmp(out: Path) -> list[Path]:
    """Remove what killed runs on this ``out`` left beside it; the folders removed.

    A temporary folder ``.{out}.draftset-tmp-{pid}`` only when it holds draftset's marker for
    this very ``out``, made on this host by a process that is gone. A replaced set
    ``.{out}.draftset-old-{pid}`` only when such a marker of that process vouches for it: the
    temporary folder's (killed between its renames: the old set, whole, goes back to ``out``
    when nothing is there) or the one in ``out`` (killed while removing it: ``out`` is the
    finished new set, its marker removed last). Anything else stays.
    """
    name = re.escape(f".{out.name}.draftset-")
    pattern = re.compile(name + r"(tmp|old)-([0-9]+)")
    removed: list[Path] = []
    try:
        entries = sorted(out.parent.iterdir())
    except OSError:
        return removed
    tmps: dict[int, tuple[Path, dict[str, Any]]] = {}
    olds: dict[int, Path] = {}
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or not _real_folder(entry):
            continue
        pid = int(m.group(2))
        if m.group(1) == "old":
            olds[pid] = entry
        elif (owner := _dead_owner(entry, out, pid)) is not None:
            tmps[pid] = (entry, owner)
    in_out = _dead_owner(out, out) if _real_folder(out) else None
    for pid, old in olds.items():
        by_tmp = pid in tmps and tmps[pid][1].get("replacing") is True
        by_out = in_out is not None and in_out["pid"] == pid and in_out.get("replacing") is True
        if by_tmp and not by_out and not os.path.lexists(out) and is_draftset_output(old):
            old.rename(out)  # killed between the renames: the build never finished
        elif by_tmp or by_out:
            shutil.rmtree(old, ignore_errors=True)
            if old.exists():  # its proof stays while it does
                tmps.pop(pid, None)
                in_out = None if by_out else in_out
                continue
            removed.append(old)
    for tmp, _ in tmps.values():
        if remove_marked(tmp):
            removed.append(tmp)
    if in_out is not None:
        (out / TMP_MARKER).unlink(missing_ok=True)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def remove_output(out: Path) -> None:
    """Remove the draftset set ``out`` (the caller checked it is one, holding only what
    draftset wrote) so that an interruption never leaves half a set at ``out``: it is marked,
    renamed to ``.{out}.draftset-tmp-{pid}`` and removed there, its marker last. Killed
    before the rename, ``out`` is whole and the next run takes the marker away; killed after,
    the next run on this ``out`` removes what is left (`remove_stale_tmp`). `draftset run
    --restart` removed the set in place, and a Ctrl-C midway left a folder no run would take."""
    _write_marker(out, out, replacing=False)
    tmp = out.parent / f".{out.name}.draftset-tmp-{os.getpid()}"
    out.rename(tmp)
    remove_marked(tmp)


def finalize_output(tmp: Path, out: Path, overwrite: bool = True) -> str | None:
    """Atomically put the finished folder in place (replacing an old one); a note for the
    summary when the set it replaced could not be removed (the new set stands).

    The folder being replaced is checked again (the run may have taken hours): only an empty
    folder or a draftset output holding nothing but what draftset wrote is ever removed, and
    without ``overwrite`` nothing but an empty folder (another build's set that appeared at
    ``out`` meanwhile was replaced, both builds reporting success).
    """
    _flush_tree(tmp)  # on disk before the rename: a power cut leaves no DIR of cut files
    if out.exists():
        if not overwrite and _empty(out) is not True:
            overwrite, flag = _overwrite_and_out()
            raise OutputExistsError(
                f"{out} appeared during the build (another build writing there?) and was left"
                f" as it is; rerun with {overwrite} to replace it, or choose another {flag}"
            )
        if not replaceable(out):
            theirs = foreign_entries(out)[:5]
            held = f" (holds {', '.join(theirs)}, which draftset did not write)" if theirs else ""
            raise OutputExistsError(
                f"{out} changed during the build and is no longer empty or only a draftset"
                f" output{held}; it was left as it is"
            )
        # killed from here on, the marker (in `tmp`, then in `out`) says `old` is draftset's
        _write_marker(tmp, out, replacing=True)
        old = out.parent / f".{out.name}.draftset-old-{os.getpid()}"
        out.rename(old)
        try:
            tmp.rename(out)
        except BaseException:
            old.rename(out)  # the set being replaced goes back
            raise
        _flush(out.parent)  # the rename itself
        try:
            shutil.rmtree(old)
        except OSError as exc:
            # the new set is in place and whole: the build stands. The marker stays in `out`,
            # vouching for `old`, so the next run on `out` removes it (`remove_stale_tmp`)
            return (
                f"the set this build replaced could not be removed ({exc.strerror or exc}):"
                f" it is left at {old}; the next build to {out} removes it, or remove it"
                " yourself"
            )
    else:
        tmp.rename(out)
        _flush(out.parent)  # the rename itself
    (out / TMP_MARKER).unlink(missing_ok=True)  # finished, and nothing left to remove
    return None


def _flush_tree(folder: Path) -> None:
    """Every file and folder under ``folder`` (itself too) written through to the disk
    (``fsync``). A rename is atomic for processes, not for a power cut: the kernel may write a
    rename before the data of the files renamed, and a set at ``DIR`` would look finished with
    empty or cut shards. Costs the disk's write-back of the set, which happens anyway."""
    for here, _, names in os.walk(folder):
        for name in names:
            _flush(Path(here) / name)
        _flush(Path(here))


def _flush(path: Path) -> None:
    """``fsync`` of one file or folder (a folder: its entries); skipped where the platform
    cannot open a folder for it (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (IsADirectoryError, PermissionError):
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
