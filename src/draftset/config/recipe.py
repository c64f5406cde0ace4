"""Recipe files and source specs: turn user input into `BuildOptions`' sources and values.

A recipe is YAML with the same names as the command-line options (underscores), plus a
``sources`` list; `config.schema` declares the keys and validates their values strictly (a
mistyped one is one line naming the key). Paths in a recipe are relative to the recipe file.
Options given on the command line override the recipe.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from draftset.config.fields import recipe_keys, shown, unknown_keys, validated
from draftset.config.schema import (
    BuildArgs,
    GenerateSection,
    Options,
    SourceEntry,
    VerifySection,
)
from draftset.core.errors import UsageError
from draftset.core.files import env_variable, home_problem, not_utf8
from draftset.core.hub import cached_model_folder, hub_offline
from draftset.core.modes import MODES
from draftset.core.naming import on_command_line
from draftset.mask.template import could_be_hub_id
from draftset.sources.normalize import detect_format
from draftset.sources.presets import apply_preset
from draftset.sources.read import HUB_PREFIX, Source


class RecipeError(UsageError):
    """A recipe or source spec that cannot be used (exit code 2)."""


BUILD_KEYS = frozenset(recipe_keys(BuildArgs))
RECIPE_SECTIONS: dict[str, type[Options]] = {  # `draftset run` only (build ignores them)
    "generate": GenerateSection,
    "verify": VerifySection,
}
RECIPE_KEYS = BUILD_KEYS | set(RECIPE_SECTIONS)
SOURCE_KEYS = frozenset(SourceEntry.model_fields)
MIX_KEYS = frozenset({"modes", "sources"})
_SUFFIXES = re.compile(r"(\.(jsonl|json|parquet|arrow|gz|zst))+$")


def source_name(path: Path) -> str:
    """A readable label from a path: the file name without data/compression suffixes.

    A path without a name of its own (``.``, ``./``, ``..``, ``/``) is named after the folder
    it is (``draftset build .`` named its source "": rows of source "", ids ``:0``)."""
    name = path.name
    if name in ("", ".", ".."):
        name = Path(os.path.abspath(path.expanduser())).name or "source"
    return _SUFFIXES.sub("", name) or name


def source_from_entry(entry: SourceEntry, path: Path | None = None) -> Source:
    """The `Source` of a recipe's ``sources:`` entry (``path``: resolved against the recipe)."""
    path = Path(entry.path) if path is None else path
    return Source(
        name=str(entry.name or source_name(path)),
        path=path,
        format=entry.format,
        fields=entry.fields,
        weight=entry.weight,
        count=entry.count,
        preset=entry.preset,
        named=entry.name is not None,
    )


def unique_names(sources: list[Source]) -> list[Source]:
    """Every source its own name, so no two sources' rows and counts are ever taken for one's.

    A name given (a recipe's ``name:``) is kept as given: a mix weight or a reader keyed by it
    must reach that source, so two sources given one name are refused (`RecipeError`). A
    derived name (the file's stem) equal to a given one or to an earlier source's becomes
    ``NAME-2`` (``-3``, ...), never a name another source has."""
    explicit: dict[str, Source] = {}
    for s in sources:
        if s.named and s.name in explicit:
            raise RecipeError(
                f"two sources are named {s.name!r} ({explicit[s.name].path}, {s.path}):"
                " give each its own name"
            )
        if s.named:
            explicit[s.name] = s
    given = {s.name for s in sources}
    used = set(explicit)
    for s in sources:
        if s.named:
            continue
        if s.name in used:
            n = 2
            while f"{s.name}-{n}" in used or f"{s.name}-{n}" in given:
                n += 1
            s.name = f"{s.name}-{n}"
        used.add(s.name)
    return sources


# ``@weight=W`` / ``@count=N`` (comma-separated) ending a command-line source; a value holds no
# ``,``, ``@`` nor ``/`` (``data@v2/a.jsonl``, ``hf:ID@SPLIT``: no suffix, the whole is the path)
_SOURCE_OPTIONS = re.compile(r"@(\w+=[^,@/]*(?:,\w+=[^,@/]*)*)\Z")
SOURCE_OPTIONS = ("weight", "count")  # what the command line's suffix may set


def split_source_arg(arg: str) -> tuple[str, str | None]:
    """``(path, options)`` of a command-line source: an existing file or folder is the path
    whatever it holds (``x@y.jsonl``, ``w@weight=2.jsonl``); else a trailing
    ``@key=value[,key=value]`` is its options (None: none)."""
    try:
        exists = Path(arg).exists()
    except (OSError, ValueError):  # a name too long, a NUL byte: no such path
        exists = False
    if exists:
        return arg, None
    found = _SOURCE_OPTIONS.search(arg)
    if found is None:
        return arg, None
    return arg[: found.start()], found.group(1)


def _number(text: str) -> int | float | str:
    """A suffix value as the number it spells (the schema then checks it), else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def source_entry(data: dict[str, Any], subject: str, strict: bool = False) -> SourceEntry:
    """``data`` checked as a source by `SourceEntry`, as a recipe's ``sources:`` entries are
    (bounds, types, choices): a bad value is one line naming ``subject`` (``source
    a.jsonl@count=-1: count must be >= 0, got -1``). The command line's ``@`` options, the API's
    source strings and `Source` objects go through it; ``strict`` (an API mapping, typed by its
    caller as a recipe is): ``"3"`` and ``True`` are no count."""
    return validated(SourceEntry, data, subject=subject, strict=strict, error=RecipeError)


def check_source(source: Source) -> None:
    """A `Source` made by hand (the API takes them as they are) checked as a recipe source,
    every field: ``format="nope"`` ended in the normalizer's bare ValueError, ``fields="x"`` a
    TypeError, ``preset=5`` an AttributeError, and generate took a blank name."""
    given = {k: v for k in SOURCE_KEYS - {"path"} if (v := getattr(source, k)) is not None}
    source_entry({**given, "path": source.path}, f"source {source.name or source.path}")


def parse_source_arg(
    arg: str, fmt: str | None, fields: dict[str, str] | None, preset: str | None = None
) -> Source:
    """``PATH``, ``PATH@weight=2``, ``PATH@count=500`` or ``PATH@weight=2,count=500`` from the
    command line (or a string in the API's ``sources``): `split_source_arg`, then the values
    checked as a recipe's are (`source_entry`)."""
    path_text, opts = split_source_arg(arg)
    mixing: dict[str, Any] = {}
    for part in opts.split(",") if opts else []:
        key, _, value = part.partition("=")
        if key not in SOURCE_OPTIONS or key in mixing:
            why = "given twice" if key in mixing else "use weight=W or count=N"
            raise RecipeError(f"bad source option {part!r} in {arg!r} ({why})")
        mixing[key] = _number(value)
    if not path_text:
        raise RecipeError(f"source {arg!r} names no path before its @ options")
    entry = source_entry({"path": path_text, **mixing}, f"source {arg}")
    path = Path(path_text)
    return Source(
        name=source_name(path),
        path=path,
        format=fmt,
        fields=fields,
        weight=entry.weight,
        count=entry.count,
        preset=preset,
    )


def parse_fields(pairs: list[str] | None) -> dict[str, str] | None:
    """``CANONICAL=COLUMN`` pairs as a mapping; one field mapped twice is refused, as a repeated
    ``@`` option is (the last mapping won silently: the first column was never read). Named as
    the caller gave them: ``--field`` flags, the API's ``fields`` list."""
    if not pairs:
        return None
    cli = on_command_line()
    bad = "bad --field" if cli else "bad fields entry"
    out: dict[str, str] = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key or not value:
            raise RecipeError(f"{bad} {p!r} (use CANONICAL=COLUMN, e.g. instruction=text)")
        if "=" in value and "," in value:  # `instruction=text,output=code`: one flag each
            each = [q.strip() for q in p.split(",") if q.strip()]
            raise RecipeError(
                f"{bad} {p!r}: one mapping a flag: give --field once for each"
                f" ({' '.join(f'--field {q}' for q in each)})"
                if cli
                else f"{bad} {p!r}: one mapping an entry: give each its own (fields={each!r})"
            )
        if key != key.strip() or value != value.strip():  # `instruction = text`
            raise RecipeError(
                f"{bad} {p!r}: the spaces around = would be part of the names: write"
                f" {key.strip()}={value.strip()}"
            )
        if key in out:
            twice = f"--field {key} given twice" if cli else f"fields maps {key} twice"
            raise RecipeError(f"{twice} ({key}={out[key]}, {p})")
        out[key] = value
    return out


def unused_layout(
    fmt: str | None,
    fields: dict[str, str] | None,
    preset: str | None,
    recipe: str | os.PathLike[str] | None,
) -> str | None:
    """Why ``--format`` / ``--field`` / ``--preset`` would do nothing (one line), or None.

    They apply to the sources given as paths (the command line's); a recipe's sources, and the
    API's `Source` objects and mappings, carry their own (``format:``, ``fields:``, ``preset:``
    per source). Given with a recipe they were ignored silently, exit 0 (``recipe``: its path;
    None: the API's sources, none of them a path)."""
    cli = on_command_line()  # as the caller gave them: flags, or the API's keywords
    given = []
    keys = []
    if fmt:
        given.append(f"--format {fmt}" if cli else f"format={fmt!r}")
        keys.append(f"format: {fmt}")
    if cli:
        given += [f"--field {canonical}={column}" for canonical, column in (fields or {}).items()]
    elif fields:
        given.append(f"fields={fields!r}")
    if fields:
        keys.append("fields: {" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}")
    if preset:
        given.append(f"--preset {preset}" if cli else f"preset={preset!r}")
        keys.append(f"preset: {preset}")
    if not given:
        return None
    flags = " ".join(given)
    verb = "applies" if len(given) == 1 else "apply"
    entry = "{path: ..., " + ", ".join(keys) + "}"
    if recipe is not None:
        where = "command-line sources" if cli else "sources given as paths"
        return (
            f"{flags} {verb} to {where} only, not to the sources of recipe"
            f" {recipe}: set it per source there (sources: [{entry}])"
        )
    return (
        f"{flags} {verb} to sources given as paths only, and every source is a mapping or a"
        f" Source: set it in each one ({entry})"
    )


def parse_json_object(text: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise RecipeError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RecipeError(f"{what} must be a JSON object")
    return obj


def preset_hub_path(name: str) -> str:
    """``hf:ID[:CONFIG]@SPLIT`` of a preset's public set (read from the hub, online only)."""
    preset = apply_preset(name)
    if preset.hub_id is None:
        raise RecipeError(
            f"preset {preset.name!r} has no public hub dataset to read: give the source a `path`"
        )
    config = f":{preset.hub_config}" if preset.hub_config else ""
    return f"{HUB_PREFIX}{preset.hub_id}{config}@{preset.hub_split}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: what and where (its own text spans several lines, with the
    offending line quoted)."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    context = getattr(exc, "context", None)
    return f"{context + ': ' if context else ''}{problem}{where}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader refusing a key given twice in one mapping (YAML forbids it; PyYAML
    kept the last value silently: ``max_length: 10 ... max_length: 4096`` built 4096). The keys
    a ``<<:`` merge brings are meant to be replaced, and are not counted."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue  # a complex key: PyYAML's own error; a merge: replaceable keys
                key = self.construct_object(key_node)
                line = key_node.start_mark.line + 1
                if key in seen:
                    lines = f"line {line}" if seen[key] == line else f"lines {seen[key]} and {line}"
                    raise yaml.constructor.ConstructorError(
                        problem=f"key {key!r} given twice ({lines})"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """A recipe's YAML (safe types only), a key given twice refused (`_UniqueKeyLoader`)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe types only


def places(known: Collection[str]) -> dict[str, str]:
    """Where each key that is not in ``known`` (the keys of the place it was written in)
    belongs, from the schema: ``endpoints:`` at the top level was only "unknown", with no word
    of `generate:`; ``max_length:`` in a source said nothing and in ``generate:`` "did you mean
    'max_tokens'?", another option. A key of several places is said to be top-level."""
    where: dict[str, str] = {
        "enable_thinking": "a key of template_kwargs (template_kwargs: {enable_thinking: ...})",
        "modes": "a key of the mix: section (mix: {modes: ...})",
    }
    where.update(
        (key, f"a key of each source (sources: [{{path: ..., {key}: ...}}])") for key in SOURCE_KEYS
    )
    where.update(
        (key, f"a key of the {section}: section ({section}: {{{key}: ...}})")
        for section, model in RECIPE_SECTIONS.items()
        for key in model.model_fields
    )
    where.update(
        (key, f"a top-level key of the recipe ({key}: ... beside sources:)") for key in RECIPE_KEYS
    )
    return {k: v for k, v in where.items() if k not in known}


_OUT = "spelled out here (out: DIR)"
_SOURCES = "spelled sources here (sources: [a.jsonl, ...])"
_TOKENIZER = (
    "spelled tokenizer here (tokenizer: MODEL_DIR, the folder holding tokenizer.json and its"
    " chat template)"
)
_TOP_WORDS = {
    **dict.fromkeys(("output_dir", "output_path", "output_folder", "save_path"), _OUT),
    **dict.fromkeys(("data_files", "datasets", "dataset", "data", "train_files"), _SOURCES),
    **dict.fromkeys(("model_name_or_path", "model_path", "base_model"), _TOKENIZER),
}
"""Other tools' words (Hugging Face's, trainers' configs) for a recipe's top-level keys:
``output_dir`` was told "did you mean 'output_format'?", ``data_files`` nothing."""
_PATH = "spelled path here ({path: a.jsonl})"
_SOURCE_WORDS = {
    **dict.fromkeys(("file", "files", "filename", "data_files", "data_file", "dataset"), _PATH),
    **dict.fromkeys(("data", "file_path", "filepath"), _PATH),
    **dict.fromkeys(
        ("column", "columns", "column_mapping", "mapping"),
        "spelled fields here ({path: ..., fields: {prompt: COLUMN}})",
    ),
    **dict.fromkeys(("type", "shape"), "spelled format here ({path: ..., format: sharegpt})"),
    "split": "written in a hub source's path ({path: hf:ORG/NAME@train})",
}
"""The same for a source's keys: ``file`` was told "did you mean 'fields'?", ``filename``
"'name'?", ``column`` "'count'?"."""
_API_KEY = (
    "never written in a recipe (it would be kept with it): export the key as DRAFTSET_API_KEY"
    " or OPENAI_API_KEY, or name the variable holding it (generate: {api_key_env: NAME})"
)
_ENDPOINTS = "spelled endpoints here (generate: {endpoints: [URL, ...]})"
GENERATE_WORDS = {
    **dict.fromkeys(("api_key", "openai_api_key", "key", "token"), _API_KEY),
    **dict.fromkeys(("url", "base_url", "api_base", "endpoint", "server"), _ENDPOINTS),
    "chat_template_kwargs": (  # generate's --chat-template-kwargs
        "spelled template_kwargs, a top-level key of the recipe (template_kwargs: {...} beside"
        " sources:), which run sends to the server as chat_template_kwargs"
    ),
}
"""Other tools' words for the keys of a recipe's ``generate:`` (``api_key`` was told "did you
mean 'api_key_env'?", which then named the key itself as a variable)."""
_TOP_WORDS.update(GENERATE_WORDS)
_TOP_WORDS.update(
    work="run's command-line option --work DIR (default: OUT.run beside out), not a recipe key",
    restart="run's command-line option --restart, not a recipe key",
)
_PLACES = {**_TOP_WORDS, **places(RECIPE_KEYS)}
SOURCE_PLACES = {**_SOURCE_WORDS, **places(SOURCE_KEYS)}
_MIX_PLACES = {mode: f"a mode (mix: {{modes: {{{mode}: ...}}}})" for mode in MODES}


def _named_sources(mapping: dict[Any, Any]) -> str:
    """What ``sources: {chat: a.jsonl, code: {path: b.jsonl}}`` means, written as the list of
    entries a recipe's sources are (it was told only "expected a list of values")."""
    entries = []
    for name, value in list(mapping.items())[:3]:
        keys = dict(value) if isinstance(value, dict) else {"path": value}
        entries.append(
            "{" + ", ".join(f"{k}: {v}" for k, v in {"name": name, **keys}.items()) + "}"
        )
    more = ", ..." if len(mapping) > 3 else ""
    return f"a list of entries, not a mapping of names: write sources: [{', '.join(entries)}{more}]"


def _data_rows(data: Any) -> str | None:
    """What a YAML "recipe" holding data rows is (``a list of 2 data rows (keys messages)``),
    or None: a list of mappings in a chat row's shape, or one such mapping without a recipe
    key. A list of rows was told "its sources go under sources: [...]", one row "unknown keys
    ['messages']"."""
    rows = data if isinstance(data, list) else [data]
    if not rows or not all(isinstance(r, dict) and detect_format(r) for r in rows):
        return None
    if isinstance(data, dict):
        return None if set(data) & RECIPE_KEYS else f"one data row (keys {_keys(data)})"
    n = len(rows)
    return f"a list of {n} data row{'s' if n != 1 else ''} (keys {_keys(rows[0])})"


def _keys(row: dict[Any, Any]) -> str:
    keys = [str(k) for k in row]
    return ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")


def load_recipe(path: Path, needed: Collection[str] = ()) -> dict[str, Any]:
    """Read a recipe, validate its keys, resolve its paths; returns plain option values.

    Every path is relative to the recipe's folder (never the current one); a ``tokenizer:``
    that is no folder there stays as written when it can be a hub id (`recipe_tokenizer`).
    ``needed``: the path keys (``tokenizer``, ``chat_template``, ``decontaminate``) whose
    files the caller uses (not replaced by its own options): one the recipe names and that is
    missing is one line naming where it was looked for (`recipe_path_problem`)."""
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecipeError(f"cannot read recipe {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # a traceback before (PowerShell's `>` writes UTF-16)
        raise RecipeError(f"recipe {path} {not_utf8(exc)}: save it as UTF-8") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path} is not valid YAML: {_yaml_problem(exc)}") from None
    if rows := _data_rows(data):  # a YAML file of chat rows: no recipe at all
        raise RecipeError(
            f"recipe {path} is {rows}, not a recipe: draftset reads rows from .jsonl, .json,"
            " .parquet or .arrow files, never YAML: save them as JSON Lines (one row a line)"
            " and give that file as the source"
        )
    if not isinstance(data, dict):
        if data is None:
            what = "it is empty"
        elif isinstance(data, list):
            what = "it is a list (its sources go under sources: [...])"
        else:
            what = f"it is the text {data[:60]!r}" if isinstance(data, str) else f"it is {data!r}"
        raise RecipeError(
            f"recipe {path} must be a mapping of keys (tokenizer:, out:, sources:, ...;"
            f" examples/recipe.yaml), and {what}"
        )
    unknown = set(data) - RECIPE_KEYS
    if unknown:
        raise RecipeError(f"recipe {path}: {unknown_keys(unknown, RECIPE_KEYS, _PLACES)}")
    if isinstance(data.get("sources"), dict):  # `sources: {chat: a.jsonl}`: names to paths
        raise RecipeError(f"recipe key sources: {_named_sources(data['sources'])}")
    kwargs = data.get("template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):  # JSON text is the command line's
        raise RecipeError(
            "recipe key template_kwargs: expected a mapping (e.g. {enable_thinking: false}),"
            f" got {shown(kwargs)}"
        )
    values = {k: v for k, v in data.items() if k in BUILD_KEYS and v is not None}
    validated(
        BuildArgs, values, recipe="", strict=True, error=RecipeError
    )  # one line naming a mistyped key
    for key, value in data.items():  # `out: ~nobody/x`: a traceback from expanduser before
        entries = value if isinstance(value, list) else [value]
        for entry in entries if key in (*RECIPE_PATH_KEYS, "out", "sources") else ():
            where = f"recipe key {key}:"
            given = entry.get("path") if isinstance(entry, dict) else entry
            if problem := home_problem(where, given) or _variable_problem(
                where, given, path.parent
            ):
                raise RecipeError(problem)
    base = path.parent
    out = dict(data)
    sources = []
    for i, entry in enumerate(data.get("sources") or []):
        if isinstance(entry, str):
            entry = {"path": entry}
        if isinstance(entry, dict) and "path" not in entry and entry.get("preset"):
            entry = {**entry, "path": preset_hub_path(str(entry["preset"]))}
        if not isinstance(entry, dict):  # `sources: [123]`, a list in a list
            raise RecipeError(
                f"recipe {path}: sources[{i}]: expected a path or a mapping, got {shown(entry)}"
            )
        bad = set(entry) - SOURCE_KEYS  # first: `{Path: a.jsonl}` "needs a path" named no key
        if bad:
            raise RecipeError(
                f"recipe {path}: sources[{i}] {unknown_keys(bad, SOURCE_KEYS, SOURCE_PLACES)}"
            )
        if "path" not in entry:
            raise RecipeError(f"recipe {path}: sources[{i}] needs a path (or a preset)")
        spec = validated(
            SourceEntry, entry, recipe=f"sources[{i}].", strict=True, error=RecipeError
        )
        p = Path(spec.path)
        if not str(spec.path).startswith(HUB_PREFIX):
            p = Path(beside_recipe(p, base))
        sources.append(source_from_entry(spec, p))
    out["sources"] = sources
    for key in needed:
        if data.get(key) and (problem := recipe_path_problem(key, data[key], path)):
            raise RecipeError(problem)
    bench = data.get("decontaminate") or []
    bench = [bench] if isinstance(bench, str) else bench
    out["decontaminate"] = [beside_recipe(p, base) for p in bench]
    for key in ("chat_template", "out"):
        if out.get(key):
            out[key] = beside_recipe(out[key], base)
    if out.get("tokenizer"):
        out["tokenizer"] = recipe_tokenizer(out["tokenizer"], base)
    mix = data.get("mix")
    if mix is not None and (not isinstance(mix, dict) or set(mix) - MIX_KEYS):
        unknown = set(mix) - MIX_KEYS if isinstance(mix, dict) else set()
        bad = f" ({unknown_keys(unknown, MIX_KEYS, _MIX_PLACES)})" if unknown else ""
        raise RecipeError(f"recipe {path}: mix takes `modes` and/or `sources` share mappings{bad}")
    return out


def _variable_problem(where: str, value: object, base: Path) -> str | None:
    """Why a recipe path naming an environment variable (``out: $HOME/sets/o``) is refused,
    or None: no shell reads a recipe, so it built into a folder named ``$HOME`` beside it
    (exit 0), and a source ``$DATA/a.jsonl`` was "not found". A path so named that exists
    beside the recipe is that path."""
    if not isinstance(value, str) or not (var := env_variable(value)):
        return None
    if Path(beside_recipe(value, base)).exists():
        return None
    home = "; ~ is your home folder" if var in ("$HOME", "${HOME}") else ""
    return (
        f"{where} {value} names the environment variable {var}, which draftset does not"
        f" expand (no shell reads a recipe): write the path itself{home}"
    )


RECIPE_PATH_KEYS = ("tokenizer", "chat_template", "decontaminate")
"""The keys naming files a build reads (beside ``sources`` and ``out``, checked on their own)."""
_RELATIVE = "paths in a recipe are relative to its folder"


def beside_recipe(value: str | os.PathLike[str], base: Path) -> str:
    """A recipe's path: ``~`` expanded, a relative one joined to the recipe's folder ``base``."""
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else os.path.normpath(base / p))


def recipe_tokenizer(value: str | os.PathLike[str], base: Path) -> str:
    """A recipe's ``tokenizer:``: a folder beside the recipe (or absolute), else the name as
    written when it can be a hub id (``Qwen/Qwen3-8B``), else the path beside the recipe (whose
    absence the tokenizer load names). Never a folder of the current one."""
    beside = beside_recipe(value, base)
    text = str(value)
    if Path(text).expanduser().is_absolute() or Path(beside).exists():
        return beside
    return text if could_be_hub_id(text) else beside


def template_text_problem(value: str | os.PathLike[str], where: str) -> str | None:
    """Why a chat template path is the template's text (``chat_template="{% for m in
    messages %}..."``, which was "file not found: {% for m ..."), or None."""
    text = str(value)
    if "{%" not in text and "{{" not in text:
        return None
    shown = text if len(text) <= 40 else text[:37] + "..."
    return (
        f"{where} takes a template file, and this is template text ({shown!r}): save it as a"
        " .jinja file and give its path"
    )


def recipe_path_problem(key: str, value: Any, recipe: Path) -> str | None:
    """Why the file(s) a recipe's ``key`` names cannot be read (one line naming the path it
    was resolved to), or None. A file in the current folder is never read in its place: a
    ``tokenizer:`` found only there is refused, not taken for a hub id (transformers would
    load that folder)."""
    base = Path(os.path.abspath(recipe.parent))  # the path named in full
    head = f"recipe {recipe}: {key}:"
    if key == "chat_template" and (problem := template_text_problem(value, head)):
        return problem
    if key in ("chat_template", "decontaminate"):
        for v in [value] if isinstance(value, str | os.PathLike) else list(value):
            resolved = beside_recipe(v, base)
            if not Path(resolved).exists():
                why = "" if Path(v).expanduser().is_absolute() else f" ({_RELATIVE})"
                return f"{head} file not found: {resolved}{why}"
        return None
    if key != "tokenizer" or Path(str(value)).expanduser().is_absolute():
        return None  # an absolute tokenizer: the tokenizer load says what is wrong with it
    resolved = recipe_tokenizer(value, base)
    beside = beside_recipe(value, base)
    if resolved == beside:
        if Path(beside).exists():
            return None
        return f"{head} folder not found: {beside} ({_RELATIVE})"
    if Path(str(value)).exists():  # a hub id's name, but a folder of the current one
        return (
            f"{head} no folder {value} beside the recipe ({beside}); {_RELATIVE}, so the"
            f" {value} in the current folder is not read: give its path from the recipe's"
            " folder, or an absolute one"
        )
    if (offline := hub_offline()) and cached_model_folder(str(value)) is None:
        return (
            f"{head} no folder {value} beside the recipe ({beside}), and as a hub id it"
            f" needs the network: unset {offline}"
        )
    return None  # a hub id
