"""Why an argument of `generate` cannot be used, in one line for the user (exit 2, before any
work): its ``--out`` names no JSON Lines file, a source is a set draftset built (its
``prompts.jsonl`` was meant), a source carries an option that only selects rows for `build`.

Each returns the problem (or None); the API raises it as generate's usage error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from draftset.config.fields import option_name
from draftset.config.schema import GenerateArgs
from draftset.core.files import dash_problem
from draftset.sources.read import Source, built_set_manifest

_OTHER_DATA_SUFFIXES = (".parquet", ".arrow", ".feather", ".csv", ".tsv", ".gz", ".zst", ".zstd")


def answers_out_problem(out: str | os.PathLike[str]) -> str | None:
    """Why ``--out`` names no answers file generate can write: ``-`` (standard output), a
    folder, or another data format's name (`answers_name_problem`). Each line names the
    option as the caller gave it (`--out`, the API's `out`)."""
    flag = option_name(GenerateArgs, "out")
    if problem := dash_problem(
        flag, out, "name the .jsonl file to write the answers in (a rerun resumes from it)"
    ):
        return problem
    if problem := answers_name_problem(str(out)):
        return problem
    if Path(out).is_dir():
        return f"{flag} {Path(out)} is a folder; give a .jsonl file path"
    return None


def answers_name_problem(text: str) -> str | None:
    """Why generate's ``--out`` names no JSON Lines file, or None: ``ans.parquet`` held JSON
    Lines under a Parquet name (build: "Parquet magic bytes not found"), ``answers/`` was
    written as a file ``answers`` with ``answers.lock`` beside it, ``answers.txt`` as a file
    build does not read (`_unread_name_problem`)."""
    flag = option_name(GenerateArgs, "out")
    if text.endswith(("/", os.sep)) and not Path(text).expanduser().is_dir():
        folder = text.rstrip("/" + os.sep)
        return (
            f"{flag} {text} names a folder: generate writes one .jsonl file (and its"
            " .errors.jsonl, .run.json and .lock beside it): give its path, e.g."
            f" {folder}/answers.jsonl"
        )
    name = Path(text).name
    suffix = next((x for x in _OTHER_DATA_SUFFIXES if name.lower().endswith(x)), None)
    if suffix is None:
        return _unread_name_problem(text, flag)
    stem = name[: -len(suffix)]
    stem = re.sub(r"\.(jsonl|ndjson|json)$", "", stem, flags=re.IGNORECASE)
    return (
        f"{flag} {text}: generate writes JSON Lines (appended, and resumed from), which a"
        f" {suffix} name would hide from build: name it {stem}.jsonl"
    )


_READ_AS_LINES = (".jsonl", ".ndjson", ".json")
"""The names build reads generate's answers from: JSON Lines, and ``.json``, which it reads as
JSON Lines when the file is (`sources.read._json_is_lines`)."""


def _unread_name_problem(text: str, flag: str) -> str | None:
    """Why generate's ``--out`` is a name build reads no rows from, or None: ``answers`` or
    ``answers.txt`` was written, exit 0, then build said "unsupported file type", and a rerun
    resumes only from the same name (its .errors.jsonl, .run.json and .lock beside it)."""
    path = Path(text)
    if path.name.lower().endswith(_READ_AS_LINES):
        return None
    if path.exists() and not path.is_file():  # a folder, /dev/stdout: said next, as such
        return None
    word = path.suffix[1:].isalpha()  # answers.txt -> answers.jsonl; answers.v2 keeps its .v2
    meant = path.with_suffix(".jsonl").name if word else f"{path.name}.jsonl"
    return (
        f"{flag} {text}: generate writes JSON Lines, which build reads only from a .jsonl file"
        f" (a {path.name} source is an unsupported file type): name it {meant}"
    )


def set_as_prompts(path: Path) -> str | None:
    """Why a built set given to `generate` is refused, naming its ``prompts.jsonl``: ``draftset
    generate out/set`` read the set's pre-tokenized rows, each an error line, exit 1 after
    writing the answers and errors files."""
    folders = [path] if path.is_dir() else [path.parent, path.parent.parent]  # parquet: data/
    folder = next((f for f in folders if built_set_manifest(f) is not None), None)
    if folder is None or path.name == "prompts.jsonl":
        return None
    what = "a set" if folder == path else f"a data file of the set {folder}, which"
    head = f"{path} is {what} draftset built (its rows are token ids, no prompts):"
    prompts = folder / "prompts.jsonl"
    try:
        with prompts.open("rb") as f:
            n = sum(1 for line in f if line.strip())
    except OSError:
        n = 0
    if not n:
        return f"{head} it holds no prompts to answer"
    rows = f"{n:,} row{'s' if n != 1 else ''}"
    return f"{head} its prompts to answer are {prompts} ({rows}): give that file"


def selection_problem(source: Source) -> str | None:
    """Why a source given to `generate` with a ``weight`` or ``count`` (a `Source`, a mapping,
    ``a.jsonl@count=3``) is refused: those select rows when the set is built, and generate
    answers every row, so the option would be ignored. A recipe's are noted, not refused (the
    recipe is the build's, given whole)."""
    given = [(k, v) for k in ("weight", "count") if (v := getattr(source, k)) is not None]
    if not given:
        return None
    key, value = given[0]
    shown = f"{value:g}" if isinstance(value, int | float) else repr(value)  # 2.0 as 2
    return (
        f"source {source.path}: {key}={shown} has no meaning for generate, which answers every"
        " row (weight and count select rows when the set is built): leave it out here"
    )
