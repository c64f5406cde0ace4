"""How a job's options are declared once (`config.schema`) and read from three places.

An option is one field of a pydantic model: its name (the API's keyword and the recipe's key),
its type, its default, its help text (``description``, where ``{default}`` is filled in) and its
bounds (``Field(ge=...)``). Two markers add what only one reader needs: `Cli` (flag, metavar,
action) for the command line, `NOT_IN_RECIPE` for an option a recipe cannot set. `Choices`
names a registry (``engine.CHOICES``, the input formats of `sources.normalize`) whose
module loads only when the names are needed: `draftset build` starts its template load before
the stage modules import.

`validated` turns a ValidationError into the one-line `UsageError` (exit code 2) the CLI prints,
naming the key: ``recipe key generate.max_tokens: expected an integer, got "64"``.
"""

from __future__ import annotations

import datetime
import difflib
import importlib
import json
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from draftset.core.errors import UsageError
from draftset.core.naming import on_command_line

Model = TypeVar("Model", bound=BaseModel)


class Choices(Sequence[str]):
    """The names an option takes, from a registry: a tuple, or ``"module:NAME"`` imported on
    first use (a keys-of-a-dict registry gives its keys)."""

    def __init__(self, registry: Sequence[str] | str) -> None:
        self._registry = registry
        self._names: tuple[str, ...] | None = None if isinstance(registry, str) else tuple(registry)

    @property
    def lazy(self) -> bool:
        return isinstance(self._registry, str)

    @property
    def names(self) -> tuple[str, ...]:
        if self._names is not None:
            return self._names
        # read each time, not cached: a format or engine registered after the first check
        # (a plugin, a test) is a valid choice from then on
        module, _, name = str(self._registry).partition(":")
        return tuple(getattr(importlib.import_module(module), name))

    def __getitem__(self, i: Any) -> Any:
        return self.names[i]

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __contains__(self, value: object) -> bool:
        return value in self.names

    def spoken(self) -> str:
        """``a, b or c``: how a message lists them."""
        names = list(self.names)
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"

    def check(self, value: Any) -> Any:
        if value is not None and value not in self.names:
            raise PydanticCustomError("choice", "must be {choices}", {"choices": self.spoken()})
        return value


def one_of(registry: Sequence[str] | str) -> Any:
    """Annotated metadata: the value is one of the registry's names (also argparse's choices)."""
    choices = Choices(registry)
    return AfterValidator(choices.check), choices


@dataclass(frozen=True)
class Cli:
    """How a field appears on the command line (absent: ``--name-with-dashes``, typed by the
    field's annotation, default None so a recipe's value stands)."""

    flags: tuple[str, ...] = ()
    metavar: str | None = None
    action: str | None = None  # "append" (repeatable), "store_true"
    positional: bool = False
    nargs: str | None = None
    required: bool = False
    mutex: str | None = None  # a mutually exclusive group's name
    type: Callable[[str], Any] | None = None  # argparse's conversion, when not the annotation's
    shown: bool = True  # False: an API / recipe option the command line does not have


NOT_ON_CLI = Cli(shown=False)


@dataclass(frozen=True)
class _NotInRecipe:
    """A command-line / API option a recipe cannot set (per-source settings, the run's own)."""


NOT_IN_RECIPE = _NotInRecipe()


@dataclass(frozen=True)
class _EmptyIsNone:
    """A list option whose empty list means "none" (``decontaminate: []``: no benchmark,
    replacing the recipe's list); any other list option refuses ``[]`` (`validated`)."""


EMPTY_IS_NONE = _EmptyIsNone()


def marker(model: type[BaseModel], name: str, kind: type) -> Any:
    """The field's marker of ``kind``; the last one wins (a shared type's, then the field's own)."""
    field = model.model_fields.get(name)
    found = [m for m in field.metadata if isinstance(m, kind)] if field else []
    return found[-1] if found else None


def cli_of(model: type[BaseModel], name: str) -> Cli:
    return marker(model, name, Cli) or Cli()


def choices_of(model: type[BaseModel], name: str) -> Choices | None:
    return marker(model, name, Choices)


def recipe_keys(model: type[BaseModel]) -> list[str]:
    return [n for n in model.model_fields if marker(model, n, _NotInRecipe) is None]


def cli_fields(model: type[BaseModel]) -> list[str]:
    return [n for n in model.model_fields if cli_of(model, n).shown]


def flag_of(model: type[BaseModel], name: str) -> str:
    """``--max-length`` for ``max_length`` (the first of its flags), ``DIR`` for a positional."""
    cli = cli_of(model, name)
    if cli.positional:
        return cli.metavar or name.upper()
    return cli.flags[0] if cli.flags else "--" + name.replace("_", "-")


def option_name(model: type[BaseModel], name: str) -> str:
    """How a message names the option ``name``: its flag on the command line (``--max-length``,
    ``DIR``), its keyword in the API (``max_length``, ``dir``): a notebook was told to fix
    ``DIR:`` or ``SOURCE:``, names that appear nowhere in its call."""
    return flag_of(model, name) if on_command_line() else name


def switch_name(model: type[BaseModel], name: str) -> str:
    """How a message says to turn the switch ``name`` on: its flag on the command line
    (``--restart``), the keyword with its value in the API (``restart=True``)."""
    return flag_of(model, name) if on_command_line() else f"{name}=True"


def help_of(model: type[BaseModel], name: str) -> str | None:
    field = model.model_fields[name]
    text = field.description
    if text and "{default}" in text:
        default = field.default
        if isinstance(default, float) and default.is_integer():
            default = int(default)  # "default 600", not "600.0"
        shown = f"{default:,}" if isinstance(default, int) and default > 99_999 else str(default)
        text = text.replace("{default}", shown)
    return text


def scalar_type(annotation: Any) -> Any:
    """The argparse conversion of an annotation: int, float or str (``X | None`` is X's)."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if annotation in (int, float):
        return annotation
    return None


# --- one-line errors --------------------------------------------------------------------------
def _describe(annotation: Any) -> str:
    """What a type accepts, in words (``an integer``, ``a string or a list of strings``)."""
    if get_origin(annotation) is Annotated:
        return _describe(get_args(annotation)[0])
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        words = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(words))
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        inner = _describe(args[0]) if args else "values"
        plural = {
            "a string": "strings",
            "a path": "paths",
            "a string or a path": "paths",
            "a mapping": "mappings",
        }.get(inner, "values")
        return f"a list of {plural}"
    if origin in (dict, Mapping) or annotation is dict:
        return "a mapping"
    return {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        Path: "a path",
    }.get(annotation, "a value of another type")


def shown(value: Any) -> str:
    """A value as a message quotes it: JSON's spelling for what YAML/JSON could hold."""
    if isinstance(value, datetime.date):  # YAML's unquoted 2024-01-01: as written, no repr
        return value.isoformat(sep=" ") if isinstance(value, datetime.datetime) else str(value)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_HELD_PATHS = (("out", ".out"), ("dir", ".dir"), ("name_or_path", "name_or_path"))
"""Where a draftset result (``BuildResult.out``, ``VerifyResult.dir``, ``RunResult.out``) or a
loaded transformers tokenizer (``name_or_path``) keeps the path it stands for."""


def quoted(value: Any) -> str:
    """A value as an API error quotes it, in one short line: its repr when that is short and
    one line (``'4096'``, ``2.0``, ``np.int64(7)``), else its type and the path it holds, if
    any (``a BuildResult (give its .out, 'out/s')``): ``verify(result)`` quoted a BuildResult's
    repr, its manifest and chat template (tens of KB), and a tokenizer's ran a line per added
    token."""
    text = repr(value)
    if len(text) <= 80 and "\n" not in text:
        return text
    if isinstance(value, str | bytes | list | tuple | dict | set | frozenset):
        return " ".join(text.split())[:77] + "..."
    kind = type(value).__name__
    for attr, spelled in _HELD_PATHS:
        try:
            path = getattr(value, attr, None)
        except Exception:  # any object's property may raise: then it holds none
            continue
        if isinstance(path, str | PathLike) and str(path):
            return f"a {kind} (give its {spelled}, {str(path)!r})"
    return f"a {kind}"


def not_blank(value: Any) -> Any:
    """A path's or a name's value, refused when its text names nothing: empty, or only
    whitespace (a recipe's ``out: ' '`` built into a folder named " " beside it;
    ``decontaminate: ['']`` and a source ``path: ''`` read the recipe's whole folder; a source
    ``name: ' '`` gave ids `` :2``). Every path of every job's options, of a recipe and of a
    source entry is this type (`config.schema.PathLike`), and a source's name."""
    if isinstance(value, str) and not value.strip():
        raise PydanticCustomError("blank", "is empty" if not value else "is only whitespace")
    return value


_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def _problem(model: type[BaseModel], exc: ValidationError, data: Mapping[str, Any]) -> tuple:
    """(field name, what is wrong, the value given) of the first error."""
    errors = exc.errors()
    # a blank path inside a list (``decontaminate: [" "]``): its own error, not the union's
    # "expected a string or a list of paths" of its first branch
    # and an unknown name before what it left missing: `generate(endpoint=URL)`, the flag's
    # spelling, was told "--endpoint: is required", the keyword given never named
    err = next((e for e in errors if e["type"] in ("blank", "extra_forbidden")), errors[0])
    name = str(err["loc"][0]) if err["loc"] else ""
    value = data.get(name, err.get("input"))
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        bound = ctx[key]
        bound = int(bound) if isinstance(bound, float) and bound.is_integer() else bound
        return name, f"must be {sign} {bound}", value
    if kind == "choice":
        return name, f"must be {ctx['choices']}", value
    if kind == "finite_number":
        return name, "must be a finite number", value
    if kind == "blank":
        return name, str(err["msg"]), value
    if kind == "extra_forbidden":
        return name, "is not an option", None
    if kind == "missing":
        return name, "is required", None
    if inside := _inside_mapping(errors, value):
        return name, *inside
    field = model.model_fields.get(name)
    if field is None:
        return name, str(err["msg"]), value
    return name, f"expected {_describe(field.annotation)}", value


def refused(model: type[BaseModel], data: Mapping[str, Any]) -> tuple[str, str, Any] | None:
    """(field name, what is wrong, the value given) when ``model`` refuses ``data``, worded as
    `validated` words it (``must be <= 1``); None when it takes them. For values recorded
    elsewhere (a manifest) that must hold the bounds the options have."""
    try:
        model.model_validate(dict(data))
    except ValidationError as exc:
        return _problem(model, exc, data)
    return None


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
}


def _inside_mapping(errors: list[Any], value: Any) -> tuple[str, Any] | None:
    """(what is wrong, the value given) of a key or a value inside the mapping ``value``:
    ``fields: {output: 3}`` said "expected a mapping, got {"output": 3}" of a mapping, and
    ``template_kwargs={1: 2}`` "expected a mapping or a string"; None when no error is
    inside it."""
    if not isinstance(value, Mapping):
        return None
    for e in errors:
        expected = _EXPECTED.get(e["type"])
        loc = e["loc"]
        for i, part in enumerate(loc[1:], 1):
            if expected is None or not isinstance(part, str | int) or part not in value:
                continue
            if loc[i + 1 :] == ("[key]",):
                return f"expected {expected.split(' ', 1)[1]} keys", part
            if len(loc) == i + 1:
                return f"expected {expected} for {part!r}", value[part]
    return None


def validated(
    model: type[Model],
    data: Mapping[str, Any],
    *,
    recipe: str | None = None,
    subject: str | None = None,
    strict: bool = False,
    error: type[UsageError] = UsageError,
) -> Model:
    """``data`` validated by ``model``; a bad value is one `UsageError` line naming its key.

    ``recipe``: the key's dotted prefix in a recipe (``""`` top level, ``"generate."``): YAML's
    types are exact, so validate with ``strict=True`` there (``"64"`` is no integer).
    ``subject``: what the values belong to, named first (``source a.jsonl@count=-1: count must
    be >= 0, got -1``): a source given on the command line or to the API. Otherwise a value
    of the wrong type or out of bounds is named as `option_name` spells it (``--max-length``
    when the command line called, ``max_length`` in a script), a name not among the choices
    by its key (argparse refuses those on the command line: only the API and recipes reach
    this).
    """
    for name, value in data.items():  # `[]` is no "not given" (`_empty_list`)
        field = model.model_fields.get(name)
        if field is None or not isinstance(value, list | tuple) or value:
            continue
        if _takes_list(field.annotation) and not marker(model, name, _EmptyIsNone):
            raise error(_empty_list(name, recipe, subject, field.is_required()))
    try:
        return model.model_validate(dict(data), strict=strict)
    except ValidationError as exc:
        name, what, value = _problem(model, exc, data)
        if recipe is not None:
            # `dedup: off` (a name read as a boolean), not `max_tokens: true`
            if isinstance(value, bool) and "a string" in what:
                why = _yaml_boolean(model, name, value)
                raise error(f"recipe key {recipe}{name}: {why}") from None
            # a path or a source's name: `out: 2024`, `name: 007` (a number elsewhere, such as
            # `eot_tokens: 7`, is a token id or another mistake, said as before)
            text = what == "expected a string or a path" or (name, what) == _NAME
            if text and (read := _yaml_typed(value)):
                why = f"{read}; {what}: quote it{_as(value)}"
                raise error(f"recipe key {recipe}{name}: {why}") from None
            got = "" if what == "is required" else f", got {shown(value)}"
            if text_number := _yaml_number_text(value, what):  # `max_samples: 1e5`
                got = f", got {value}, which {text_number}"
            raise error(f"recipe key {recipe}{name}: {what}{got}") from None
        if subject is not None:
            quiet = what in ("is required", "is not an option")
            got = "" if quiet else f", got {shown(value)}"
            raise error(f"{subject}: {name} {what}{got}") from None
        if what == "is not an option":
            close = difflib.get_close_matches(str(name), list(model.model_fields), n=1)
            meant = f": did you mean {close[0]!r}?" if close else ""
            short = {  # `report(d, o=...)`: the command's short flag as a keyword
                flag: field
                for field in model.model_fields
                for flag in cli_of(model, field).flags
                if not flag.startswith("--")
            }.get(f"-{name}")
            if short and not close:
                meant = f": did you mean {short!r} (the command line's -{name})?"
            spelled_so = {  # `show(d, id=...)`: a long flag other than the field's name
                flag[2:].replace("-", "_"): field
                for field in model.model_fields
                for flag in cli_of(model, field).flags
                if flag.startswith("--")
            }.get(str(name))
            if word := getattr(model, "WORDS", {}).get(name):
                meant = f": {word}"
            elif spelled_so and spelled_so != name:
                flag = "--" + str(name).replace("_", "-")
                meant = f": did you mean {spelled_so!r} (the command line's {flag})?"
            raise error(f"{name!r} is not an option of this job{meant}") from None
        choice = err_type(exc) == "choice"
        spelled = name if choice else option_name(model, name)
        if what == "is required":  # the API's (argparse says the command line's): no "got None"
            cli_flag = flag_of(model, name)
            flag = f" ({cli_flag} on the command line)" if cli_flag != name else ""
            raise error(f"{name!r} is required{flag}") from None
        if what.startswith("must be"):
            raise error(f"{spelled} {what}, not {quoted(value)}") from None
        raise error(f"{spelled}: {what}, got {quoted(value)}") from None


def _takes_list(annotation: Any) -> bool:
    """Whether a field's type accepts a list (``Strings``, ``X | list[X] | None``, ...)."""
    if get_origin(annotation) is Annotated:
        return _takes_list(get_args(annotation)[0])
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_takes_list(a) for a in get_args(annotation))
    return annotation is list or get_origin(annotation) is list


def _empty_list(name: str, recipe: str | None, subject: str | None, required: bool) -> str:
    """Why an explicitly empty list is refused (an option without `EMPTY_IS_NONE`): None (a
    key left out) is "not given", the recipe's value or the default; ``[]`` fell back to that
    same value, silently (`run(recipe, endpoints=[])` asked the recipe's servers,
    ``placeholders: []`` kept the default placeholders)."""
    head = f"recipe key {recipe}{name}" if recipe is not None else name
    head = f"{subject}: {name}" if subject is not None else head
    if required:
        return f"{head}: an empty list; give at least one value"
    if recipe is not None:
        return f"{head}: an empty list; give at least one value, or leave it out"
    return (
        f"{head}: an empty list; give at least one value, or None (not given) for the"
        " recipe's value or the default"
    )


def _yaml_number_text(value: Any, what: str) -> str | None:
    """Why a recipe's ``max_samples: 1e5`` is no number, or None: YAML (1.1, PyYAML's) reads an
    exponent without a dot and a sign as text, so "expected an integer, got "1e5"" showed quotes
    the user never wrote. Only for text that YAML reads as text even unquoted: a quoted
    ``"4096"`` was quoted on purpose."""
    if not isinstance(value, str) or not ("an integer" in what or "a number" in what):
        return None
    if re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?", value):  # `max_length: 4,096`
        return (
            "YAML reads as text (a comma separates no digits to it): write"
            f" {value.replace(',', '')} (or {value.replace(',', '_')})"
        )
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?[kKmMbB]", value):  # `max_length: 4k`: 4000 or 4096?
        return "YAML reads as text (it knows no k or M suffix): write the number in full"
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number) or not isinstance(yaml.safe_load(value), str):
        return None
    if "an integer" in what and number.is_integer():
        spelled = str(int(number))
    else:
        spelled = yaml.safe_dump(number).splitlines()[0]  # as YAML reads it back: 1.0e-07
    return (
        "YAML reads as text (it reads an exponent as a number only with a dot and a sign,"
        f" 1.0e+5): write {spelled}"
    )


_NAME = ("name", "expected a string")


def _yaml_typed(value: Any) -> str | None:
    """What YAML made of an unquoted value where text goes: a number (``out: 2024``; ``name:
    007``, octal to YAML 1.1, is 7) or a date (``out: 2024-01-01``), or None. "expected a
    string, got 7" named a value the user never wrote, a date Python's repr."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"YAML read the unquoted value as the number {shown(value)}"
    if isinstance(value, datetime.date):  # a datetime too
        return f"YAML read the unquoted value as the date {shown(value)}"
    return None


def _as(value: Any) -> str:
    """The quoted spelling to suggest, when the value read back is what was written (a date,
    a plain integer); none for what YAML rewrote (``007`` is 7, ``1.10`` is 1.1)."""
    if isinstance(value, datetime.date) or (isinstance(value, int) and value >= 10):
        return f" ('{shown(value)}')"
    return ""


def _yaml_boolean(model: type[BaseModel], name: str, value: bool) -> str:
    """Why a recipe's ``dedup: off`` is no string: YAML reads unquoted yes/no/on/off as
    booleans, so "expected a string, got false" named a value the user never wrote."""
    choices = choices_of(model, name)
    field = model.model_fields.get(name)
    wanted = (
        f"must be {choices.spoken()}"
        if choices is not None
        else f"expected {_describe(field.annotation) if field else 'a string'}: quote it"
    )
    return (
        f"YAML read the unquoted value as the boolean {json.dumps(value)} (it reads"
        f" yes/no/on/off so); {wanted}"
    )


def err_type(exc: ValidationError) -> str:
    return str(exc.errors()[0]["type"])


def given(model: BaseModel) -> dict[str, Any]:
    """The fields set explicitly (not defaulted), as plain values."""
    return {k: getattr(model, k) for k in model.model_fields_set}


def finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise PydanticCustomError("finite_number", "must be a finite number")
    return value


_BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no", "on", "off"})


def boolean_text_problem(kwargs: dict[str, Any] | None, what: str) -> str | None:
    """Why template options spell a boolean as text (one line), or None: any non-empty string
    is true to a template (``{"enable_thinking": "no"}`` kept thinking on, silently)."""
    for key, value in (kwargs or {}).items():
        if isinstance(value, str) and value.strip().lower() in _BOOLEAN_WORDS:
            return (
                f"{what}: {key} is the string {value!r}, which a template reads as true;"
                f" give the JSON boolean ({key}: true or false)"
            )
    return None


def json_value_problem(value: Any, what: str) -> str | None:
    """Why a JSON-object option holds something JSON cannot (one line), or None. YAML reads an
    unquoted date as a date, which no template call, request body or manifest can carry (it
    failed the build at its last step, writing the manifest)."""
    bad = _not_json(value, "")
    if bad is None:
        return None
    where, found = bad
    hint = " (YAML reads an unquoted date as a date: quote it)" if "date" in found else ""
    return f"{what}: {where or 'the value'} is {found}, not a JSON value{hint}"


def _not_json(value: Any, where: str) -> tuple[str, str] | None:
    """(where, what) of the first value JSON cannot hold, or None."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, repr(value))
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            if (bad := _not_json(v, f"{where}[{i}]")) is not None:
                return bad
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            at = f"{where}.{k}" if where else str(k)
            if not isinstance(k, str):
                return at, f"a key of type {type(k).__name__}"
            if (bad := _not_json(v, at)) is not None:
                return bad
        return None
    return where, f"of type {type(value).__name__}"


def unknown_keys(
    unknown: Iterable[str], known: Iterable[str], elsewhere: Mapping[str, str] | None = None
) -> str:
    """``unknown keys ['max_lenght']: did you mean 'max_length'?`` — the keys a mapping may
    not hold, each with the known key it is closest to (difflib), if any. ``elsewhere``: keys
    that belong in another place, with where (``format`` at a recipe's top level: a key of
    each source), said instead of a near miss."""
    names = sorted(str(k) for k in unknown)
    choices = sorted(str(k) for k in known)
    text = f"unknown keys {names}"
    placed = [f"{k} is {elsewhere[k]}" for k in names if elsewhere and k in elsewhere]
    rest = [k for k in names if not (elsewhere and k in elsewhere)]
    folded = {c.lower(): c for c in choices}  # `MAX_LENGTH`: too far for difflib alone
    meant = {
        k: m[0]
        for k in rest
        if (m := [folded[k.lower()]] if k.lower() in folded else [])
        or (m := difflib.get_close_matches(k, choices, n=1))
    }
    said = list(placed)
    if len(names) == 1 and meant:
        said.append(f"did you mean {meant[names[0]]!r}?")
    elif meant:
        said.append(f"did you mean {', '.join(f'{m!r} for {k!r}' for k, m in meant.items())}?")
    return f"{text}: {'; '.join(said)}" if said else text


def scheme_hint(url: str, api_path: str = "") -> str:
    """``: did you mean http://HOST:PORT...?`` for a server address written without its scheme
    (``127.0.0.1:8000/v1``, ``localhost:8000``: vLLM prints its address so), else ``""``.
    ``api_path``: what a bare ``HOST:PORT`` is given (``/v1`` for an OpenAI endpoint)."""
    if "://" in url or not re.fullmatch(r"[\w.\-\[\]:]+:[0-9]{1,5}(/\S*)?", url):
        return ""
    full = url if "/" in url else url.rstrip("/") + api_path
    return f": did you mean http://{full}?"


def strings(value: Any) -> tuple[str, ...]:
    """A repeatable option: one value or a list (a lone string is one value, not characters)."""
    if value is None:
        return ()
    if isinstance(value, str | Path):
        return (str(value),)
    return tuple(str(v) for v in value)
