"""Why a source path given to `build` or `generate` cannot be read, in one line for the user
(exit 2, before any work): standard input or a pipe, a path not found (with how source options
are written, that wildcards and variables are not expanded, or that each source is one path).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import stat
from pathlib import Path

from draftset.core.files import env_variable
from draftset.core.naming import on_command_line

BUILD_READS = "the workers read ranges of each file and a rerun reads it again"
GENERATE_READS = "generate reads each source more than once, and a rerun reads it again to resume"
_SAVE_THE_ROWS = "save the rows to a file and give its path"
"""Why standard input or a pipe is no source of `build` / `generate`, and what to do instead."""


def not_a_file(path: Path, reads: str) -> str | None:
    """Why a source is standard input (``-``) or a pipe (``/dev/stdin``, a named FIFO), with
    why the command needs a file (``reads``), or None. ``cat a.jsonl | draftset build
    /dev/stdin`` said "/proc/N/fd/pipe:[M]: no such file or directory"; generate "cannot read:
    not a regular file", and of ``-`` "source not found: -"."""
    if str(path) == "-" and not path.exists():  # the Unix spelling of standard input
        return f"source not found: - (standard input is not a source: {reads}; {_SAVE_THE_ROWS})"
    try:
        pipe = stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):  # missing, a NUL byte: the not-found line says it
        return None
    return f"source {path} is a pipe, not a file ({reads}; {_SAVE_THE_ROWS})" if pipe else None


def not_found(path: Path, in_recipe: bool = False) -> str:
    """``source not found``, and how options are written when the path looks like it holds
    some (``a.jsonl@count=2@weight=3``: one ``@``, then comma-separated options; a recipe's
    ``a.jsonl@count=2``: keys of its entry), or that a quoted wildcard is not expanded
    (``'x/*.jsonl'``)."""
    text = str(path)
    if in_recipe and re.search(r"@\w+=", text):
        return (
            f"source not found: {text} (in a recipe, a source's options are keys of its entry:"
            " {path: a.jsonl, count: 2} or {path: a.jsonl, weight: 3})"
        )
    if re.search(r"@\w+=", text):
        return (
            f"source not found: {text} (source options follow one @, comma-separated:"
            " PATH@count=2,weight=3)"
        )
    if not in_recipe and (parts := _joined_paths(text)):  # `sources="a.jsonl,b.jsonl"`
        how = (
            f"give each as its own argument, {' '.join(shlex.quote(p) for p in parts)}"
            if on_command_line()
            else f"give a list, sources={parts!r}"
        )
        return f"source not found: {text} (one path per source: {how})"
    if glob.has_magic(text):  # quoted, the shell left it: `source not found` read as no match
        parts = path.parts
        wild = next(i for i, part in enumerate(parts) if glob.has_magic(part))
        fixed = Path(".").joinpath(*parts[:wild])  # the folder above the first wildcard
        folder = f", or give the folder {fixed}" if fixed.is_dir() else ""
        fix = (  # no shell reads a recipe
            "list each file in the recipe's sources"
            if in_recipe
            else "leave the pattern unquoted for the shell to expand"
        )
        return f"source not found: {text} (draftset does not expand wildcards: {fix}{folder})"
    if not in_recipe and (var := env_variable(text)):  # single-quoted: the shell left it
        return (
            f"source not found: {text} (draftset does not expand environment variables such as"
            f" {var}: leave it unquoted, or in double quotes, for the shell to expand)"
        )
    return f"source not found: {text}"


def _joined_paths(text: str) -> list[str] | None:
    """The paths of a source that is several joined by commas or spaces, each of them there
    (``a.jsonl,b.jsonl``; quoted on the command line, ``"a.jsonl b.jsonl"``), or None."""
    parts = [part for part in re.split(r"[,\s]+", text) if part]
    if len(parts) > 1 and all(os.path.exists(part) for part in parts):
        return parts
    return None
