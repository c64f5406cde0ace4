"""Small file helpers every stage shares."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from draftset.core.errors import DraftsetError, RunError, UsageError


def write_json_atomic(path: Path, data: Any, indent: int = 2, tmp: Path | None = None) -> None:
    """``data`` as JSON at ``path``, all or nothing: written to a temporary file beside it
    (``PATH.tmp`` unless ``tmp`` names another), flushed to disk, then renamed over it. A crash
    leaves the old file or the new one, never half of one; an error leaves no temporary file."""
    tmp = tmp or path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=indent, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def home_problem(flag: str, value: object) -> str | None:
    """Why ``value`` (a ``~USER/...`` path) names no folder (one line starting ``flag``), or
    None: `Path.expanduser` raises ``RuntimeError`` for a user who does not exist, which was a
    traceback (exit 1) wherever a path was expanded."""
    text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    if not isinstance(text, str) or not text.startswith("~"):
        return None
    try:
        Path(text).expanduser()
    except RuntimeError:
        user = text[1:].split("/", 1)[0]
        return f"{flag} {text}: ~{user} is no home folder (there is no user {user!r})"
    return None


_VARIABLE = re.compile(r"\$(\{[A-Za-z_]\w*\}|[A-Za-z_]\w*)")


def env_variable(text: str) -> str | None:
    """The first environment variable a path names as a shell would read it (``$DATA``,
    ``${DATA}``), or None: draftset never expands one (the shell does, unless quoted)."""
    found = _VARIABLE.search(text)
    return found.group(0) if found else None


def not_utf8(exc: UnicodeDecodeError) -> str:
    """Why a text file did not decode as UTF-8, to follow its name: UTF-16 by its byte-order
    mark (PowerShell's `>`, Notepad), or the first byte that is not UTF-8."""
    if exc.object[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "is UTF-16 text (its byte-order mark)"
    return f"is not UTF-8 (byte {exc.start})"


NAME_MAX = 255  # bytes in one name of a path (ext4, xfs, btrfs, tmpfs); PATH_MAX in all
PATH_MAX = 4096


def shown_name(text: str) -> str:
    """A path as it can be printed: bytes that are not UTF-8 as ``\\xfe``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def name_problem(flag: str, value: object) -> str | None:
    """Why the path ``value`` cannot be used (one line starting ``flag``), or None: a name that
    is not UTF-8 (a Latin-1 file name: Python hands it over with surrogates) became source
    names, ids and manifest entries that no UTF-8 file holds, a traceback after the build."""
    text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    if not isinstance(text, str):
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = text[exc.start].encode("utf-8", "surrogateescape")[0]
        head = f"{flag} " if flag else ""
        return f"{head}{shown_name(text)}: its name is not UTF-8 (byte 0x{byte:02x}); rename it"
    longest = max(len(part.encode("utf-8")) for part in text.split(os.sep))
    size = len(text.encode("utf-8"))
    if longest > NAME_MAX or size > PATH_MAX:
        # a template's text given as a path (`chat_template=tok.chat_template`) was pathlib's
        # `OSError: [Errno 36] File name too long` traceback from the first stat
        head = f"{flag} " if flag else ""
        shown = text if len(text) <= 60 else text[:57] + "..."
        why = (
            f"a name in it is {longest} bytes long (at most {NAME_MAX})"
            if longest > NAME_MAX
            else f"it is {size} bytes long (at most {PATH_MAX})"
        )
        return f"{head}{shown!r}: no file system takes this path: {why}"
    return None


def dash_problem(flag: str, value: object, what: str) -> str | None:
    """Why ``-`` cannot be where ``flag`` writes (one line ending ``what``), or None: it built a
    set in a folder named ``-``, wrote answers (and their run and lock files) to ``-``, a
    report to a file ``-``. Standard output is no folder nor a file to resume from; a page or
    a result goes to ``/dev/stdout`` when asked (a device, written as a stream)."""
    if str(value) != "-":
        return None
    return f"{flag} -: draftset does not read '-' as standard output; {what}"


def cannot_create(path: Path, what: str, probe: bool = False) -> str | None:
    """Why nothing can be created at ``path``, as the end of a sentence about it (" is under
    a file (P), not a folder" / ": cannot create WHAT in P"), from its nearest existing
    parent P; None when it can be. Shared by build's ``--out`` folder check (``what``:
    "folders") and generate's ``--out`` file check ("files").

    ``probe``: when the permissions allow it, a folder is made in P and removed at once. Root
    passes ``os.access`` everywhere, and /proc, /sys or a read-only mount refuse only the
    attempt: a build to ``/proc/x`` failed after its template load (exit 1) instead of
    before any work."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f" is under a file ({parent}), not a folder"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f": cannot create {what} in {parent}"
            if probe:
                trial = parent / f".draftset-probe-{os.getpid()}"
                try:
                    trial.mkdir()
                except FileExistsError:
                    return None  # a probe of this process's: the folder is writable
                except OSError as exc:
                    return f": cannot create {what} in {parent} ({exc.strerror or exc})"
                trial.rmdir()
            return None
    return None


def output_file_problem(
    path: Path | str,
    flag: str,
    *,
    what: str,
    ours: Callable[[Path], bool],
    set_dir: Path | str,
    set_may_write: Path | str | None = None,
    sources: Iterable[Path | str] = (),
    read_as_input: bool = True,
) -> str | None:
    """Why a command may not write the file ``path`` it was given (``flag``: "-o", "--json";
    "" for a default path) about the set ``set_dir``: a one-line usage error naming it, or None
    when it may. Checked before any work: never write over what draftset did not write.

    Refused: a path inside the set folder (its files are the set's own), except
    ``set_may_write`` (`report`'s default ``DIR/report.html``); one of the set's ``sources``
    (files or folders, as the manifest names them), or, when a source folder would read the
    file as a row file (``read_as_input``: a ``.json`` would be, an ``.html`` not), a path
    inside one; a
    folder; an existing regular file that ``ours`` does not recognise as draftset's own output
    of this kind (``what``: "a report", "a verify result"), unless it is empty; anything but
    a regular file, a FIFO or a character device (a pipe, a terminal, ``/dev/null`` are written
    as streams: nothing is replaced); a path whose folder is missing or cannot be written.
    Paths are compared after resolving symbolic links and ``..``: both the path's own place
    (its folder resolved) and where a link there points."""
    shown = f"{flag} {path}" if flag else str(path)
    path = Path(path)
    places = places_of(path)
    problem = inside_set_problem(path, shown, set_dir, set_may_write)
    if problem:
        return problem
    named = [(source, Path(os.path.realpath(source))) for source in sources]
    for source, src in named:
        if src in places:
            return f"{shown} is the source {source} of the set {set_dir}"
    for source, src in named if read_as_input else ():
        if any(src in place.parents for place in places):
            return (
                f"{shown} is inside the source folder {source} of the set {set_dir}"
                " (a rebuild would read it as input)"
            )
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # new (or under a file: said below)
        st = None
    except OSError as exc:  # a loop of links, a name too long, a folder we may not enter
        return f"{shown}: cannot use it: {exc.strerror or exc}"
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return f"{shown} is a folder, not a file; name the file to write"
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            return None  # a pipe, a terminal, /dev/null: written as a stream, nothing replaced
        if not stat.S_ISREG(st.st_mode):
            return f"{shown} is not a regular file"
        if st.st_size and not ours(path):
            return (
                f"{shown}: the file exists and is not {what} draftset wrote;"
                " choose another path or remove it"
            )
    if (
        set_may_write is not None
        and path.is_symlink()
        and _own_place(path) == _own_place(set_may_write)
    ):  # written through, the page of another set (or any file of {what}) was replaced
        return (
            f"{shown} is a symbolic link (to {os.readlink(path)}), not a file draftset wrote:"
            f" it writes {what} there only as the set's own file; remove the link, or write"
            " it elsewhere with -o"
        )
    real = Path(os.path.realpath(path))
    problem = cannot_create(real, "files")
    if problem:
        return f"{shown}{problem}"
    if not real.parent.is_dir():
        return f"{shown}: the folder {real.parent} does not exist"
    return None


def _own_place(path: Path | str) -> Path:
    """Where ``path`` itself is (its folder resolved), not where a link there points."""
    absolute = Path(os.path.abspath(path))
    return absolute.parent.resolve() / absolute.name


def places_of(path: Path | str) -> set[Path]:
    """Where a file written at ``path`` lands, symbolic links and ``..`` resolved: its own
    place (its folder resolved) and, when ``path`` is a link, where the link points."""
    return {_own_place(path), Path(os.path.realpath(path))}


def inside_set_problem(
    path: Path | str, shown: str, set_dir: Path | str, set_may_write: Path | str | None = None
) -> str | None:
    """Why a file a command writes (``shown``: the flag and the path as given) may not be at
    ``path``: it is the set folder ``set_dir`` or inside it (the set's files are its own; only
    ``set_may_write``, `report`'s default page, may be written there). None when it is not."""
    home = Path(os.path.realpath(set_dir))
    # the allowed file's own place (its folder resolved), not where a link there points: a
    # link at DIR/report.html is judged by what it points to, as any other path is
    allowed = None if set_may_write is None else _own_place(set_may_write)
    for place in places_of(path):
        if place == home:
            return f"{shown} is the set folder {set_dir}; name a file outside it"
        if home in place.parents and place != allowed:
            only = f"; only the default {set_may_write} may be written there" if allowed else ""
            return (
                f"{shown} is inside the set {set_dir} (its files are the set's own{only});"
                " choose a path outside it"
            )
    return None


def write_output_file(path: Path | str, text: str, check: Callable[[], None] | None = None) -> None:
    """``text`` at ``path`` (a path `output_file_problem` allowed), all or nothing: written to
    ``.NAME.tmp-PID`` beside it, flushed, then renamed over it (over a symbolic link's target,
    the link kept). ``check`` runs just before the rename (the path's check repeated after a
    long run: it raises to refuse). A FIFO or character device (a pipe, a terminal,
    ``/dev/null``) is written as a stream instead. An error leaves no temporary file."""
    try:
        mode = os.stat(path).st_mode  # through links: /dev/stdout is a pipe's magic link
    except OSError:
        mode = 0
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        if check is not None:
            check()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    real = Path(os.path.realpath(path))
    tmp = real.with_name(f".{real.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check()
        os.replace(tmp, real)
    finally:
        tmp.unlink(missing_ok=True)


RECIPE_SUFFIXES = (".yaml", ".yml")
OTHER_CONFIG_SUFFIXES = (".toml", ".ini", ".cfg")
"""Settings files in another language: given where a source goes, meant as a recipe."""


def is_recipe(path: str | Path) -> bool:
    """A recipe file by its name (``.yaml`` / ``.yml``, any case: ``GOOD.YAML`` is one)."""
    return str(path).lower().endswith(RECIPE_SUFFIXES)


def other_config_problem(path: str | Path) -> str | None:
    """Why a source is a recipe, in YAML (one recipe listing another) or in another format
    (``recipe.toml``), or None: a settings file, not data (`is_recipe` tells a recipe by its
    suffix), was refused as an "unsupported file type" of the data formats only."""
    if is_recipe(path) and not Path(path).is_dir():  # a recipe among a recipe's sources
        return (
            f"source {path} is a recipe, not data: sources are data files (.jsonl, .json,"
            " .parquet, .arrow) or folders of them"
        )
    suffix = Path(path).suffix
    if suffix.lower() == ".json":
        return json_recipe_problem(path)
    if suffix.lower() not in OTHER_CONFIG_SUFFIXES:
        return None
    return (
        f"{other_format_recipe_message(path)}, or give a data file (.jsonl, .json, .parquet,"
        " .arrow)"
    )


def other_format_recipe_message(path: str | Path, example: str = "examples/recipe.yaml") -> str:
    """What is said of a recipe in another settings format (`OTHER_CONFIG_SUFFIXES`): write it
    as YAML (``example``: the example recipe of the command it was given to)."""
    return (
        f"{path}: recipes are YAML (.yaml/.yml), not {Path(path).suffix}: write it as YAML with"
        f" the same keys ({example})"
    )


def looks_like_recipe(path: str | Path) -> bool:
    """A recipe by its name (`is_recipe`), one in another settings format (``.toml``), or a
    recipe written as JSON (`json_recipe_problem`): a settings file, never data or a set."""
    suffix = Path(path).suffix.lower()
    return (
        is_recipe(path)
        or suffix in OTHER_CONFIG_SUFFIXES
        or (suffix == ".json" and json_recipe_problem(path) is not None)
    )


_RECIPE_MARKS = frozenset({"tokenizer", "out", "chat_template", "template_kwargs", "max_length"})
"""Keys beside ``sources`` that tell a recipe from a data row (no row shape has them)."""
_JSON_RECIPE_BYTES = 1 << 20  # a recipe is small; a bigger .json is data, not opened here


def recipe_keys_of(data: object) -> list[str] | None:
    """The keys that make a JSON object a recipe (``sources`` and one of `_RECIPE_MARKS`),
    sorted; None for a data row."""
    if not isinstance(data, dict) or "sources" not in data:
        return None
    marks = sorted(k for k in data if k in _RECIPE_MARKS or k == "sources")
    return marks if len(marks) > 1 else None


def json_recipe_message(path: str | Path, keys: list[str]) -> str:
    """`json_recipe_problem`'s line, for a file whose object has ``keys`` (`recipe_keys_of`)."""
    p = Path(path)
    return (
        f"{p} is a recipe written as JSON (keys {', '.join(keys)}): recipes are read from"
        f" .yaml/.yml files, and JSON is YAML: rename it {p.stem}.yaml"
    )


def json_recipe_problem(path: str | Path) -> str | None:
    """Why a ``.json`` source is a recipe (`json_recipe_message`), or None: ``draftset build
    recipe.json`` read it as a data file of one row, and said "--tokenizer is required" of a
    recipe naming one, or "no known row shape" with a column mapping of its keys."""
    p = Path(path)
    try:
        if not p.is_file() or p.stat().st_size > _JSON_RECIPE_BYTES:
            return None
        data = json.loads(p.read_bytes())
    except (OSError, ValueError):  # unreadable or not one JSON document: the reader says
        return None
    keys = recipe_keys_of(data)
    return json_recipe_message(p, keys) if keys else None


DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""A write that failed for the disk (full, quota, too big, I/O): the run started and failed,
exit 1, as `build`'s; a path that cannot be written at all is the caller's argument, exit 2."""


def write_failure(where: str, exc: OSError) -> DraftsetError:
    """The error of a failed write of an output file: `RunError` (exit 1) for a disk that is
    full (`DISK_ERRNOS`), else `UsageError` (exit 2). `report -o` and `verify --json` on a full
    disk exited 2, where `build` exits 1."""
    line = f"{where}: cannot write: {exc.strerror or exc}"
    return RunError(line) if exc.errno in DISK_ERRNOS else UsageError(line)
