"""A source whose rows draftset cannot read at all is a usage error, found from its first rows.

Rows in an unknown shape (``{"text": ...}``) are each rejected ``unknown_format``; when a whole
source is like that, the build used to load the tokenizer, read every row, reject them all and
end with exit 1 ("no row to write") after seconds to hours, with the hint buried in
``rejects.jsonl``. `check_row_shapes` reads the first rows of every file of every local source,
normalized exactly as the build will (the source's preset, format and field mapping), before any
other work: a source whose every file begins with `SHAPE_SAMPLE` rows none of which has a known
shape is exit 2, one line naming the file, the keys seen and the ``--format`` / ``--field``
mapping built from them (or the preset whose layout they are). A file where some of those rows
have a known shape, or a folder where some files do, builds as before: the other rows are
rejected ``unknown_format``, each with the same hint.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import replace
from pathlib import Path
from shlex import quote
from typing import Any

from draftset.core import reasons
from draftset.core.files import json_recipe_message, recipe_keys_of
from draftset.core.naming import as_given
from draftset.core.records import RawRow, Reject
from draftset.core.words import plural
from draftset.sources.normalize import field_mapping, mapping_options
from draftset.sources.presets import hermes_markup, preset_hint, source_normalizer
from draftset.sources.read import (
    HUB_PREFIX,
    Source,
    SourceError,
    file_head,
    list_files,
    refuse_several_splits,
)

SHAPE_SAMPLE = 100
"""Rows read from the start of each file to decide that none has a known shape."""


def check_row_shapes(sources: list[Source], sample: int = SHAPE_SAMPLE) -> list[str]:
    """Raise `SourceError` (exit 2) for a source whose every file begins with ``sample`` rows
    in an unknown shape (a folder where only some files do builds, those rows rejected); hub
    sources are not read here (that is a download). Every source without a row is exit 2 too
    (one of several: a note). Returns notes for the build's summary: empty sources, and a
    source read as plain chat whose first rows are a preset's markup (`hermes_markup`)."""
    notes: list[str] = []
    empty: list[str] = []  # sources without a row: the build's error when all are
    local = [s for s in sources if not str(s.path).startswith(HUB_PREFIX)]
    readers: dict[str, list[tuple[str, Path]]] = {}  # a file's real path: (source, as listed)
    for source in local:
        refuse_several_splits(Path(source.path))  # which split to train is the user's say
        read = source_normalizer(source)
        files = list_files(Path(source.path))
        for path in files:
            readers.setdefault(os.path.realpath(path), []).append((source.name, path))
        heads = [_head(source, path, read, sample) for path in files]
        if heads and all(rows == [] for rows, _ in heads):  # read, and not one row in them
            what = "its files hold" if len(files) > 1 else "it holds"
            empty.append(f"{source.path}: {what} no rows (empty, or only blank lines)")
            continue
        # a mapped column no row has first: such a typo is often why no row has a shape
        missing = _unmapped_columns(source, [raw for rows, _ in heads for raw in rows or []])
        if missing is not None:
            raise SourceError(missing)
        if heads and all(unknown is not None for _, unknown in heads):
            path = files[0]
            unknown = heads[0][1]
            assert unknown is not None
            if problem := _forced_format_problem(source, path, unknown, sample):
                raise SourceError(problem)
            raise SourceError(_message(source, path, *unknown))
        plain = not (source.preset or source.format or source.fields)
        if plain and any(hermes_markup(raw.data) for rows, _ in heads for raw in rows or []):
            notes.append(
                f"source {source.name}: its rows write tool calls as Hermes `<tool_call>` text"
                " after a `<tools>` system prompt; read as plain chat, they are trained as that"
                " text, not as the target's template renders tools and calls: give the source"
                " `preset: hermes-function-calling` (or --preset hermes-function-calling)"
            )
    if empty and len(empty) == len(sources):  # nothing at all to build from: before any work
        raise SourceError(empty[0])
    return [f"source {line}" for line in empty] + notes + _read_twice(readers)


def _read_twice(readers: dict[str, list[tuple[str, Path]]]) -> list[str]:
    """One note per pair of sources that read a file in common (`build a.jsonl ./a.jsonl`, a
    folder and a file in it): its rows count once per source, nothing else says so."""
    shared: dict[tuple[str, str], list[Path]] = {}
    for listed in readers.values():
        names = list(dict.fromkeys(name for name, _ in listed))
        for i, first in enumerate(names):
            for second in names[i + 1 :]:
                shared.setdefault((first, second), []).append(listed[0][1])
    notes = []
    for (first, second), paths in shared.items():
        more = f" and {len(paths) - 1:,} other files" if len(paths) > 1 else ""
        rows = "their rows" if more else "its rows"
        notes.append(
            f"sources {first} and {second} both read {paths[0]}{more}: {rows} count once per"
            " source (trained twice under --dedup none; the second copy rejected as a duplicate"
            " otherwise)"
        )
    return notes


def _unmapped_columns(source: Source, rows: list[RawRow]) -> str | None:
    """One line when a ``--field`` mapping names a column none of the source's first rows has
    (a typo: every answer or prompt read as absent); None otherwise."""
    objects = [raw.data for raw in rows if isinstance(raw.data, dict)]
    if not source.fields or not objects:
        return None
    for canonical, column in source.fields.items():
        if canonical in ("role", "content"):  # keys of each turn, not of the row
            continue
        if not any(column in data for data in objects):
            keys = [str(k) for k in objects[0]]
            close = difflib.get_close_matches(str(column), keys, n=1)
            fix = f"did you mean {close[0]!r}?" if close else "check the name"
            # `--field output=code`, the API's `fields={'output': 'code'}`
            given = as_given(
                f"--field {canonical}={column}", f"fields {{{canonical!r}: {column!r}}}"
            )
            return (
                f"{source.path}: {given}: no row among its first"
                f" {len(objects):,} has a column {column!r} (keys [{', '.join(keys)}]); {fix}"
            )
    return None


def _lists_of_rows(where: str, data: dict[str, Any]) -> str | None:
    """Why a ``.json`` file's one object that holds lists of rows under several keys is refused, or
    None: ``{"train": [...], "test": [...]}`` was "no known row shape in its only row";
    ``{"version": "1.0", "data": [...]}`` suggested ``--field prompt=version``. (One key alone
    holding the rows is read as their wrapper.)"""
    lists = {
        str(k): len(v)
        for k, v in data.items()
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)
    }
    if len(lists) > 1:
        listed = ", ".join(f"{k}: {plural(n, 'row')}" for k, n in lists.items())
        return (
            f"{where}: one JSON object of several lists of rows ({listed}), not rows: give one"
            " list's rows as their own file (a JSON array, or JSON Lines)"
        )
    if len(lists) == 1:
        key, n = next(iter(lists.items()))
        others = ", ".join(str(k) for k in data if str(k) != key)
        return (
            f"{where}: one JSON object holding its rows under {key!r} ({plural(n, 'row')})"
            f" beside other keys ({others}): give those rows as their own file (a JSON array,"
            " or JSON Lines), or remove the other keys"
        )
    return None


def _forced_format_problem(
    source: Source, path: Path, unknown: tuple[int, dict[str, Any], str], sample: int
) -> str | None:
    """Why a source given a format (``format: alpaca``, ``--format alpaca``) is refused when
    its rows are not that shape but read as they are without it, or None: it was told "no
    known row shape ... map its columns, e.g. --format messages --field messages=messages",
    the rows' own shape, as if it were unknown."""
    if not source.format or source.fields or source.preset:
        return None
    plain = replace(source, format=None)
    _, still = _head(plain, path, source_normalizer(plain), sample)
    if still is not None:
        return None
    seen, data, _ = unknown
    rows = f"its first {seen:,} rows are" if seen > 1 else "its only row is"
    keys = ", ".join(str(k) for k in list(data)[:20])
    where = str(path) if Path(source.path) == path else f"{path} (source {source.path})"
    return (
        f"{where}: format {source.format}: {rows} not that shape (keys [{keys}]), and read as"
        " they are without it: leave the format out for this source"
    )


def _head(
    source: Source, path: Path, read: Any, sample: int
) -> tuple[list[RawRow] | None, tuple[int, dict[str, Any], str] | None]:
    """The file's first ``sample`` rows (None: unreadable), and (rows read, the first row's
    data, its reject message) when every one of them that is an object is ``unknown_format``
    (and there is one), else None."""
    rows = file_head(source, path, sample)
    if rows is None:  # unreadable: the build's own read says why
        return None, None
    objects = [raw for raw in rows if raw.data is not None]  # others: their own rejects
    first = ""
    for raw in objects:
        item = read(raw)
        if not (isinstance(item, Reject) and item.reason == reasons.UNKNOWN_FORMAT):
            return rows, None
        first = first or item.message
    return rows, ((len(rows), objects[0].data, first) if objects else None)


TRAINER_TOKENIZED = (
    "input_ids with labels are a trainer's tokenized rows (-100: not trained), which draftset"
    " does not read: its pre-tokenized rows are input_ids with a 0/1 loss_mask, in this"
    " tokenizer's ids. Give the conversations the rows were tokenized from (draftset derives"
    " the mask from the target's chat template), or add"
    " loss_mask = [0 if label == -100 else 1 for label in labels] to each row"
)
"""What is said of ``input_ids`` + ``labels`` rows (axolotl's, TRL's): "map its columns with
--format and --field" before, which no mapping does (``--field loss_mask=labels`` rejects
every row: -100 is no mask value)."""


def _message(source: Source, path: Path, seen: int, data: dict[str, Any], why: str) -> str:
    """One line: the file, the keys seen, and the mapping built from them as a command's
    options and as a recipe's source entry; with a preset, that the rows are not its layout."""
    keys = [str(k) for k in data]
    shown = ", ".join(keys[:20]) + (f" (+{len(keys) - 20} more)" if len(keys) > 20 else "")
    rows = f"its first {seen:,} rows" if seen > 1 else "its only row"
    where = str(path) if Path(source.path) == path else f"{path} (source {source.path})"
    if source.preset:  # the preset is what failed: a mapping of the raw keys would not help
        return (
            f"{where}: {rows} (keys [{shown}]) are not the layout of preset"
            f" {source.preset!r} ({why}); drop the preset, or give the one of this data"
            " (docs/mixtures.md)"
        )
    if seen == 1 and (marks := recipe_keys_of(data)):  # `generate recipe.json`
        return json_recipe_message(path, marks)
    document = path.name.lower().removesuffix(".gz").removesuffix(".zst").endswith(".json")
    if seen == 1 and document and (problem := _lists_of_rows(where, data)):
        return problem
    head = f"{where}: no known row shape in {rows} (keys [{shown}])"
    if "input_ids" in data and "labels" in data:  # no --field maps -100s to a 0/1 mask
        return f"{head}; {TRAINER_TOKENIZED}"
    preset = preset_hint(data)
    if preset is not None:
        return f"{head}; {preset}"
    mapping = field_mapping(data)
    if mapping is None:
        return f"{head}; map its columns with --format and --field (see docs/formats.md)"
    fmt, fields = mapping
    what = " (a prompt without an answer)" if fmt == "prompt" else ""
    given = ", ".join(f"{k}: {v}" for k, v in fields.items())
    return (
        f"{head}; map its columns, e.g. draftset build {quote(str(source.path))}"
        f" {mapping_options(fmt, fields)}"
        f" --tokenizer TOK --out DIR{what}, or in a recipe"
        f" {{path: {source.path}, format: {fmt}, fields: {{{given}}}}} (see docs/formats.md)"
    )
