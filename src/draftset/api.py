"""The Python API: `build`, `verify`, `run`, `report`, `show`, `generate` (docs/api.md).

Keyword arguments are the fields of each job's option schema (`config.schema`), named like the
command-line options (underscores; the repeatable ones plural: ``fields``, ``eot_tokens``,
``placeholders``, ``endpoints``), and validated by it. The CLI is a layer over these
functions: every command (`draftset.commands`) parses its options, declared by the same
schema, into exactly these arguments, so the command and the API cannot drift. A recipe path
may be given as for the CLI; arguments that are not None override it. Results are returned,
never printed (progress bars only with ``progress=True``; `show` prints: that is its job).
Errors raise `DraftsetError` subclasses whose ``exit_code`` is the command's (2: unusable
arguments or inputs, found before any work; 1: the job failed).
"""

from __future__ import annotations

import functools
import json as _json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from draftset.checks.output_file import VERIFY_JSON_FORMAT, is_verify_json, output_file_check
from draftset.config.fields import (
    Model,
    given,
    json_value_problem,
    option_name,
    quoted,
    shown,
    strings,
    unknown_keys,
    validated,
)
from draftset.config.schema import (
    BuildArgs,
    GenerateArgs,
    ReportArgs,
    RunArgs,
    ShowArgs,
    VerifyArgs,
)
from draftset.config.source_paths import BUILD_READS, GENERATE_READS, not_a_file, not_found
from draftset.core.errors import DraftsetError, RunError, UsageError
from draftset.core.files import (
    OTHER_CONFIG_SUFFIXES,
    dash_problem,
    home_problem,
    is_recipe,
    json_recipe_problem,
    name_problem,
    other_config_problem,
    other_format_recipe_message,
    write_failure,
    write_output_file,
)
from draftset.core.naming import on_command_line

if TYPE_CHECKING:  # the stage modules load on the first call, not on `import draftset.api`
    from rich.console import Console

    from draftset.config.options import BuildOptions
    from draftset.engine.helper import Sidecar
    from draftset.generation.options import GenerateOptions
    from draftset.generation.outcomes import GenerateResult
    from draftset.output.readback import CheckResult
    from draftset.pipeline.build import BuildResult
    from draftset.pipeline.run_state import RunOptions, RunResult
    from draftset.sources.read import Source

__all__ = [
    "BuildResult",
    "CheckResult",
    "DraftsetError",
    "GenerateResult",
    "RunError",
    "RunResult",
    "UsageError",
    "VerifyResult",
    "build",
    "build_options",
    "generate",
    "generate_options",
    "report",
    "run",
    "run_options",
    "show",
    "verify",
]

ProgressArg = bool | Callable[[int, int], None] | None  # None: not given, as False
F = TypeVar("F", bound=Callable[..., Any])

_RESULTS = {  # the result types, importable from here; their stage modules load on first use
    "BuildResult": "draftset.pipeline.build",
    "CheckResult": "draftset.output.readback",
    "GenerateResult": "draftset.generation.outcomes",
    "RunResult": "draftset.pipeline.run_state",
}


def __getattr__(name: str) -> object:
    """``from draftset.api import BuildResult`` (for a type annotation, an isinstance check)
    without loading the stages on ``import draftset.api``."""
    if name in _RESULTS:
        import importlib  # lazy: only for a result type's name

        value = getattr(importlib.import_module(_RESULTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- build ------------------------------------------------------------------------------------
def _not_in_a_spawned_import() -> None:
    """Every job refuses to run inside a spawned child that is importing the caller's script
    (a call at the script's top level, without ``if __name__ == "__main__":``): the child would
    otherwise run the whole job again beside the parent, on the same files. One line, exit 2."""
    from draftset.engine.helper import refuse_to_spawn_while_starting  # lazy: lean import

    refuse_to_spawn_while_starting()


def build(
    recipe: str | Path | None = None,
    *,
    progress: ProgressArg = False,
    helper: Sidecar | None = None,
    **options: Any,
) -> BuildResult:
    """`draftset build`: tokenize and mask chat data into a verified, fully accounted set.

    ``options``: the fields of `config.schema.BuildArgs` (its ``--help`` text, defaults and
    bounds). ``sources``: paths (``PATH@weight=W`` / ``PATH@count=N`` as on the command line;
    ``format``, ``fields`` and ``preset`` apply to these, and are refused when no source is
    one: a recipe's sources), `Source` objects, or recipe-style mappings (``{"path": ...,
    "weight": 2}``). Returns the `BuildResult`: ``.ok`` (what the
    command exits 0 on), ``.counts``, ``.per_source``, ``.rows``, ``.checks`` (verify's fast
    checks), ``.row(i)``. Raises `DraftsetError` (``exit_code`` 2) for unusable arguments
    before any work. ``helper``: the build's helper process when the caller started it ahead
    (`pipeline.helper_ahead`; the command line does); otherwise it is started here, before the
    options are parsed and the stage modules imported (~0.5 s of the template load's path).
    """
    _not_in_a_spawned_import()
    _progress_arg(progress, UsageError, callback=True)
    if helper is not None:  # `helper="x"` ended in an AttributeError from the cleanup below
        from draftset.engine.helper import Sidecar  # lazy: as start_helper's module

        if not isinstance(helper, Sidecar):
            raise UsageError(
                "helper: expected the Sidecar draftset.pipeline.helper_ahead started, or None"
                f" (the build starts its own), got {type(helper).__name__}"
            )
    if helper is None:
        from draftset.engine.helper import SidecarError  # lazy: as start_helper's module
        from draftset.pipeline.helper_ahead import start_helper  # lazy: a lean import

        try:
            helper = start_helper(recipe, options.get("workers"), options.get("engine"))
        except SidecarError:  # it cannot start here (a script from stdin): a usage error first
            build_options(recipe=recipe, **options)
            raise
    try:
        opts = build_options(recipe=recipe, **options)  # merged over the recipe, and checked

        # lazy: stage modules load on the first call, not on import draftset.api
        from draftset.pipeline.build import run_build

        with _progress("build", progress) as update:
            return run_build(opts, on_progress=update, helper=helper)
    finally:
        if helper is not None:  # a usage error, or inline after all (else the build stopped it)
            helper.kill()


def _given(
    model: type[Model], options: Mapping[str, Any], error: type[UsageError] = UsageError
) -> Model:
    """``options`` checked by the job's schema; None means "not given" (the recipe's value, else
    the default, stands). An unusable value is one ``error`` line naming its flag (exit 2).
    Strictly, as a recipe's: ``max_length="4096"`` or ``True`` is no integer (the command line
    converts its text to each option's type before this); a tuple is taken as the list it is."""
    values = {
        k: list(v) if isinstance(v, tuple) else v for k, v in options.items() if v is not None
    }
    checked = validated(model, values, strict=True, error=error)
    for name, value in values.items():  # `~nobody/x`: a traceback from expanduser before
        flag = "source" if name == "sources" else option_name(model, name)
        for item in value if isinstance(value, list) else [value]:
            path = item.get("path") if isinstance(item, Mapping) else item
            if name == "chat_template" and isinstance(path, str | os.PathLike):
                from draftset.config.recipe import template_text_problem  # lazy: a stage

                if problem := template_text_problem(path, flag):  # before any stat of it
                    raise error(problem)
            if problem := home_problem(flag, path) or name_problem(flag, path):
                raise error(problem)
    return checked


def _home(o: Model, *names: str) -> Model:
    """``o`` with the path options ``names`` resolved once for the checks and the writer alike:
    a leading ``~`` is the home folder (`Path.expanduser`), as the shell makes it of an unquoted
    ``--out ~/x``; a quoted ``'~/x'``, ``--out=~/x`` or the API's ``out="~/x"`` were checked at
    ``$HOME/x`` but written to ``./~/x``."""
    update = {}
    for name in names:
        value = getattr(o, name)
        if isinstance(value, str | os.PathLike) and str(value).startswith("~"):
            update[name] = Path(value).expanduser()
    return o.model_copy(update=update) if update else o


def _required(name: str) -> str:
    """A build option neither given nor in the recipe, named as the caller wrote options: the
    flag on the command line, the keyword in the API (it said "--tokenizer is required" to a
    script)."""
    head = option_name(BuildArgs, name) if on_command_line() else repr(name)
    return f"{head} is required (or `{name}:` in the recipe)"


def _threshold_without_near(
    o: BuildArgs, explicit: Mapping[str, Any], from_recipe: Mapping[str, Any], recipe: Any
) -> str | None:
    """Why ``near_dup_threshold`` would be ignored (a build with exact dedup only, the threshold
    recorded as if it applied), or None. A recipe's threshold that goes with its ``dedup:
    near`` is no mistake when the caller's ``dedup`` replaces that."""
    if o.dedup == "near":
        return None
    if "near_dup_threshold" in explicit:
        if on_command_line():
            return (
                f"--near-dup-threshold applies only to --dedup near (dedup is {o.dedup!r}): add"
                " --dedup near, or leave --near-dup-threshold out"
            )
        return (
            f"near_dup_threshold applies only to dedup='near' (dedup is {o.dedup!r}): set"
            " dedup='near', or leave near_dup_threshold out"
        )
    if "near_dup_threshold" in from_recipe and "dedup" not in explicit:
        return (
            f"recipe {recipe}: near_dup_threshold applies only to dedup: near (dedup is"
            f" {o.dedup!r}): set dedup: near, or remove near_dup_threshold"
        )
    return None


def build_options(recipe: str | Path | None = None, **options: Any) -> BuildOptions:
    """`build`'s arguments merged over the recipe and the defaults, and checked: the
    `BuildOptions` a build runs with (also what `draftset run` builds from)."""
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.config.options import BuildOptions
    from draftset.config.preflight import (  # lazy: a stage, loaded on first use
        RECIPE_OUT,
        check_recipe_out_apart,
        check_values,
        out_place_problem,
        template_kwargs_problem,
    )

    # lazy: the stages load on the first call, not on import draftset.api
    from draftset.config.recipe import BUILD_KEYS, RECIPE_PATH_KEYS, parse_json_object
    from draftset.core.rules import DEFAULT_PLACEHOLDERS  # lazy: a stage, loaded on first use

    if "sources" in options:  # one source, as `generate` takes it; no glob, no set
        options = {**options, "sources": _source_list(options["sources"], UsageError)}
    explicit = given(_given(BuildArgs, options))
    if explicit.get("template_kwargs") == "":  # the command line's empty JSON text: not given
        del explicit["template_kwargs"]
    conf, srcs = _recipe_and_sources(
        recipe,
        explicit.pop("sources", None),
        explicit.get("format"),
        explicit.get("fields"),
        explicit.get("preset"),
        needed=[k for k in RECIPE_PATH_KEYS if k not in explicit],  # the recipe's files used
    )
    from_recipe = {k: v for k, v in conf.items() if k in BUILD_KEYS and v is not None}
    from_recipe.pop("sources", None)
    o = _home(BuildArgs.model_validate({**from_recipe, **explicit}), "out")  # defaults for the rest
    if not o.tokenizer:
        raise UsageError(_required("tokenizer"))
    if not o.out:
        raise UsageError(_required("out"))
    if problem := _threshold_without_near(o, explicit, from_recipe, recipe):
        raise UsageError(problem)
    if "out" not in explicit and (problem := out_place_problem(Path(o.out), RECIPE_OUT)):
        raise UsageError(f"{problem} (paths in a recipe are relative to its folder)")
    kwargs = o.template_kwargs or {}
    if isinstance(kwargs, str):  # the command line's JSON text
        kwargs = parse_json_object(kwargs, option_name(BuildArgs, "template_kwargs"))
    elif "template_kwargs" not in explicit and (  # the recipe's: named by its key
        problem := template_kwargs_problem(kwargs, "recipe key template_kwargs")
    ):
        raise UsageError(problem)
    template = o.chat_template
    if template and not Path(template).is_file():
        from draftset.config.preflight import missing_chat_template  # lazy: a stage

        raise UsageError(missing_chat_template(template))
    opts = BuildOptions(
        sources=srcs,
        tokenizer=str(o.tokenizer),
        out=Path(o.out),
        chat_template_path=str(template) if template else None,
        template_kwargs=dict(kwargs),
        eot_tokens=strings(o.eot_tokens),
        max_length=o.max_length,
        truncation=o.truncation,
        min_supervised_tokens=o.min_supervised_tokens,
        turns=o.turns,  # type: ignore[arg-type]  # one of TURN_MODES, checked by the schema
        seed=o.seed,
        max_samples=o.max_samples,
        workers=o.workers,
        engine=o.engine,
        ray_address=o.ray_address,
        draft_vocab_size=o.draft_vocab_size,
        target_vocab_size=o.target_vocab_size,
        placeholders=strings(o.placeholders) or DEFAULT_PLACEHOLDERS,
        overwrite=o.overwrite,
        dedup=o.dedup,
        near_dup_threshold=o.near_dup_threshold,
        decontaminate=list(strings(o.decontaminate)),
        mix=dict(o.mix) if o.mix is not None else None,
        render_timeout=o.render_timeout,
        output_format=o.output_format,
        **({"serving_engine": o.serving_engine} if o.serving_engine else {}),
    )
    if opts.engine != "ray":  # a recipe's ray_address waits for engine: ray; an explicit one
        if "ray_address" in explicit:  # with a local engine is a mistake
            if on_command_line():
                raise UsageError("--ray-address needs --engine ray")
            raise UsageError("ray_address needs engine='ray'")
        opts.ray_address = None
    check_values(opts)
    if "out" not in explicit:  # the recipe's out: on a source or an input, named by its key
        check_recipe_out_apart(opts)
        opts.out_named = RECIPE_OUT  # and so in build's later checks of the folder
    return opts


def _recipe_and_sources(
    recipe: str | Path | None,
    sources: Sequence[Any] | None,
    fmt: str | None,
    fields: Mapping[str, str] | Sequence[str] | None,
    preset: str | None,
    needed: Sequence[str] = (),
) -> tuple[dict[str, Any], list[Source]]:
    """The recipe's settings and the sources to read (the arguments' over the recipe's), each
    with a unique name and present on disk (or on the hub); ``needed``: the recipe's path keys
    whose files are used (`config.recipe.load_recipe`)."""
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.config.recipe import load_recipe, unique_names, unused_layout
    from draftset.sources.read import HUB_PREFIX, is_data_name  # lazy: a stage, on first use

    conf: dict[str, Any] = {}
    if isinstance(recipe, str) and not recipe.strip():  # "" read the folder "." as a recipe
        what = "is empty" if not recipe else "is only whitespace"
        raise UsageError(f"recipe: {what}, got {recipe!r}")
    if recipe is not None and not isinstance(recipe, str | os.PathLike):
        raise UsageError(  # build(["a.jsonl"]): the first positional argument is the recipe
            f"recipe must be a path to a recipe file, not {type(recipe).__name__};"
            " pass source files as sources=[...]"
        )
    layout_unused = sources is None and recipe is not None  # the layout is the paths'
    if layout_unused and (problem := unused_layout(fmt, _fields(fields), preset, recipe)):
        raise UsageError(problem)
    srcs = _sources_given(sources, fmt, fields, preset) if sources is not None else []
    if recipe is not None:
        if Path(recipe).is_dir():  # `build("data", ...)`: "cannot read recipe data: Is a directory"
            raise UsageError(
                f"recipe {recipe} is a folder, not a recipe (.yaml): give a folder of data files"
                f" as sources=[{str(recipe)!r}]"
            )
        if not is_recipe(recipe) and is_data_name(recipe):  # `build("a.jsonl", out=...)`
            raise UsageError(
                f"recipe {recipe} is a data file, not a recipe (.yaml): give it as"
                f" sources=[{str(recipe)!r}]"
            )
        conf = load_recipe(Path(recipe), needed)
        if sources is None and not conf.get("sources"):
            raise UsageError(f"recipe {recipe} lists no sources")
    if sources is None:
        srcs = list(conf.get("sources") or [])
    srcs = unique_names(srcs)
    if not srcs:
        raise UsageError("no sources given")
    for s in srcs:
        if problem := other_config_problem(s.path):
            raise UsageError(problem)
        if problem := not_a_file(s.path, BUILD_READS):
            raise UsageError(problem)
        if not s.path.exists() and not str(s.path).startswith(HUB_PREFIX):
            raise UsageError(not_found(s.path, in_recipe=sources is None))
    return conf, srcs


_SOURCES_ARE = "sources: expected a path, a Source or a mapping, or a list of them, got"


def _source_list(sources: Any, error: type[UsageError]) -> Any:
    """``sources`` as `build` and `generate` take them: one source (a path, a `Source`, a
    mapping) is the list of it; a list or a tuple as given (its items checked by `_source`);
    None is "not given". Anything else is one ``error`` line saying what a source list is:
    `sources=Path("data").glob("*.jsonl")` said "expected a list of values, got <generator
    object Path.glob at 0x7f...>", and a set of paths would have built in its hash order."""
    from draftset.sources.read import Source  # lazy: a stage, loaded on first use

    if isinstance(sources, str | os.PathLike | Source | Mapping):
        return [sources]
    if sources is None or isinstance(sources, list | tuple):
        return sources
    if isinstance(sources, set | frozenset):
        raise error(
            f"{_SOURCES_ARE} a set, which has no order (the sources' order names them and"
            " orders the set's rows): give a sorted list"
        )
    if isinstance(sources, Iterator):
        raise error(
            f"{_SOURCES_ARE} a {type(sources).__name__}: make it a list (sorted(...) for a"
            " glob, whose order is the file system's)"
        )
    raise error(f"{_SOURCES_ARE} {quoted(sources)}")


def _sources_given(
    sources: Sequence[Any],
    fmt: str | None,
    fields: Mapping[str, str] | Sequence[str] | None,
    preset: str | None,
    error: type[UsageError] = UsageError,
) -> list[Source]:
    """The sources given to `build` or `generate` (paths, ``PATH@count=N`` as on the command
    line, `Source` objects, recipe-style mappings) as `Source`s, read one way for both jobs.
    ``fmt``, ``fields`` and ``preset`` apply to the paths: refused when no source is one."""
    from draftset.config.recipe import unused_layout  # lazy: as above

    as_paths = any(isinstance(s, str | os.PathLike) for s in sources)
    if sources and not as_paths and (problem := unused_layout(fmt, _fields(fields), preset, None)):
        raise error(problem)
    srcs = [_source(s, fmt, fields, preset, error) for s in sources]
    for s in srcs:  # `~/data.jsonl` quoted, or from Python: the home folder's, as unquoted
        if str(s.path).startswith("~"):
            s.path = s.path.expanduser()
    return srcs


def _fields(fields: Mapping[str, str] | Sequence[str] | None) -> dict[str, str] | None:
    """``fields`` as a mapping: given as one, or as the command line's ``CANONICAL=COLUMN``."""
    from draftset.config.recipe import parse_fields  # lazy: as above

    if isinstance(fields, Mapping):
        return dict(fields) or None
    return parse_fields(list(fields) if fields else None)


def _source(
    spec: Any,
    fmt: str | None,
    fields: Mapping[str, str] | Sequence[str] | None,
    preset: str | None,
    error: type[UsageError] = UsageError,
) -> Source:
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.config.recipe import (
        SOURCE_KEYS,
        SOURCE_PLACES,
        RecipeError,
        check_source,
        parse_source_arg,
        source_entry,
        source_from_entry,
    )
    from draftset.sources.read import Source  # lazy: a stage, loaded on first use

    if isinstance(spec, str) and not spec.strip():  # "" said "names no path before its @"
        what = "is empty" if not spec else "is only whitespace"
        raise RecipeError(f"source {spec!r}: path {what}, got {shown(spec)}")
    if isinstance(spec, Source):  # a copy: naming and path expansion must not change the
        check_source(spec)  # caller's object (a later call would see `b-2`); checked as a
        return replace(spec, seen={})  # recipe's entry, its values before any work
    if not isinstance(spec, str | os.PathLike | Mapping):  # `5` is no path: not "not found"
        raise error(f"sources: expected a path, a Source or a mapping, got {quoted(spec)}")
    if isinstance(spec, Mapping):  # checked as a recipe's `sources:` entry is: strictly
        bad = sorted(set(spec) - SOURCE_KEYS)
        if bad:
            raise RecipeError(
                f"source {dict(spec)!r}: {unknown_keys(bad, SOURCE_KEYS, SOURCE_PLACES)};"
                f" keys are {sorted(SOURCE_KEYS)}"
            )
        if "path" not in spec:
            raise RecipeError(f"source {dict(spec)!r}: needs a path")
        entry = source_entry(dict(spec), f"source {spec['path']}", strict=True)
        return source_from_entry(entry)
    return parse_source_arg(str(spec), fmt, _fields(fields), preset)


def _progress_arg(value: Any, error: type[UsageError], callback: bool = False) -> None:
    """``progress`` is a bool (None: not given), or for `build` a callable ``f(done, total)``:
    a truthy string or number drew the bar, as the API's types are exact elsewhere."""
    if value is None or isinstance(value, bool):
        return
    if callback and callable(value):
        _arity(value, "progress", "f(done, total)", 2, error)
        return
    also = " or a callable f(done, total)" if callback else ""
    raise error(f"progress: expected true/false{also}, got {value!r}")


def _callback(value: Any, name: str, shape: str) -> None:
    """A callback keyword is a callable or None: `report(..., on_verdict="x")` failed after
    writing the page, `show(..., console="x")` deep in rich, with raw tracebacks."""
    if value is not None and not callable(value):
        raise UsageError(f"{name}: expected a callable or None, got {type(value).__name__}")
    if value is not None:
        _arity(value, name, shape, 1, UsageError)


def _arity(
    value: Callable[..., Any], name: str, shape: str, n: int, error: type[UsageError]
) -> None:
    """A callback that cannot take the ``n`` positional arguments it will be given is refused
    before any work: `build(progress=lambda: ...)` raised a bare TypeError from inside the
    build loop, `report(on_verdict=lambda: ...)` after writing the page. A callable whose
    signature cannot be read (some builtins) is taken as it is."""
    import inspect  # lazy: only when a callback is given

    try:
        sig = inspect.signature(value)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*range(n))
    except TypeError as exc:
        what = getattr(value, "__name__", type(value).__name__)
        raise error(f"{name}: expected a callable {shape}, got {what}{sig} ({exc})") from None


@contextmanager
def _progress(label: str, progress: ProgressArg) -> Iterator[Callable[[int, int], None] | None]:
    if callable(progress):
        yield progress
    elif progress:
        # lazy: stage modules load on the first call, not on import draftset.api
        from draftset.console import progress_bar

        with progress_bar(label) as update:
            yield update
    else:
        yield None


# --- verify -----------------------------------------------------------------------------------
@dataclass
class VerifyResult:
    """Every check of one `verify`: ``ok`` is what the command exits 0 on."""

    dir: Path
    checks: list[CheckResult]
    recorded: Path | None = None  # verify.json written beside the set (full runs)
    fast: bool = False
    dir_as_given: str | None = field(default=None, repr=False)  # for to_json, as the CLI wrote

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def failed(self) -> list[str]:
        """Names of the failing checks (advice, `ADVISORY_CHECKS`, is not a failure)."""
        from draftset.checks.fast import failing  # lazy: the stages load on first use

        return failing(self.checks)

    @property
    def advice(self) -> list[str]:
        """Names of the advisory checks that did not pass (DFlash drafter fitness)."""
        from draftset.checks.fast import ADVISORY_CHECKS  # lazy: as above

        return [c.name for c in self.checks if c.failed and c.name in ADVISORY_CHECKS]

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        names = ", ".join(c.name for c in self.checks)  # a bare KeyError: 'mask' named none
        # a result is the API's alone: `fast=True`, as the call gave it (not `--fast`)
        which = (
            f"a fast=True verify: {names}; the full verify runs the others" if self.fast else names
        )
        raise KeyError(f"no check {name!r} in this result ({which})")

    def to_json(self) -> dict[str, Any]:
        """What ``draftset verify --json FILE`` writes (``format``: `VERIFY_JSON_FORMAT`)."""
        return {
            "format": VERIFY_JSON_FORMAT,
            "dir": self.dir_as_given or str(self.dir),
            "passed": self.ok,
            "checks": [c.to_json() for c in self.checks],
        }


def verify(dir: str | Path, **options: Any) -> VerifyResult:
    """`draftset verify`: prove a built set is what its manifest says (docs/verify.md).

    ``options``: the fields of `config.schema.VerifyArgs`. ``fast``: only the checks that need
    neither sources nor tokenizer. ``json``: also write the result to that file. A full run
    records its result in ``dir/verify.json`` (for `report`). ``render_server``: URL of a vLLM
    render server (`vllm launch render`) to compare the rows with; an unreachable one is a
    usage error before any work. Raises `DraftsetError` (exit code 2) for unusable arguments
    or a folder that is not a set.
    """
    _not_in_a_spawned_import()
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.checks.verify import VERIFY_RECORD, VerifyUsageError, fast_checks, run_verify

    o = _home(_given(VerifyArgs, {**options, "dir": dir}, VerifyUsageError), "dir", "json")
    json_flag = option_name(VerifyArgs, "json")  # `--json`, the API's `json`
    if problem := dash_problem(json_flag, o.json, "name the file to write, or /dev/stdout"):
        raise VerifyUsageError(problem)
    check_json = None
    if o.json:  # before any work: never over a file draftset did not write, nor into the set
        check_json = output_file_check(
            Path(o.dir),
            Path(o.json),
            json_flag,
            "a verify result",
            is_verify_json,
            VerifyUsageError,
        )
    if o.fast and (full := _full_verify_only(o)):  # it ran the fast checks and passed
        fast = option_name(VerifyArgs, "fast") if on_command_line() else "fast=True"
        full = option_name(VerifyArgs, full)
        raise VerifyUsageError(f"{full} needs the full verify (not {fast})")
    server = None
    if o.render_server:
        from draftset.checks.serving import connect  # lazy: as above

        server = connect(o.render_server)
    if o.tokenizer:  # another model's: an argument to refuse, no FAIL to record (--fast too)
        _check_set_tokenizer(o.dir, o.tokenizer, VerifyUsageError)
    if o.fast:
        checks = fast_checks(o.dir, o.block_size)
    else:
        checks = run_verify(
            o.dir,
            tokenizer=str(o.tokenizer) if o.tokenizer else None,
            sample=o.sample,
            seed=o.seed,
            block_size=o.block_size,
            placeholders=strings(o.placeholders) or None,
            speculators=o.speculators,
            render_server=server,
        )
    recorded = None
    if not o.fast and not any(c.name == "verify_record" for c in checks):
        recorded = Path(o.dir) / VERIFY_RECORD
    result = VerifyResult(Path(o.dir), checks, recorded, o.fast, str(o.dir))
    if o.json:
        text = _json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n"
        try:
            write_output_file(Path(o.json), text, check_json)
        except OSError as exc:
            failure = write_failure(f"{json_flag} {o.json}", exc)
            if isinstance(failure, UsageError):  # the path: verify's own usage error
                failure = VerifyUsageError(str(failure))
            raise failure from None
    return result


def _full_verify_only(o: VerifyArgs) -> str | None:
    """The first option given that only the full verify reads, or None: with ``fast`` it was
    ignored, the check asked for never run (``--fast --sample 5`` passed, exit 0)."""
    for name in ("sample", "seed", "placeholders", "speculators", "render_server"):
        if name in o.model_fields_set and getattr(o, name) not in (None, False):
            return name
    return None


# --- run, report, show, generate --------------------------------------------------------------
def run(
    recipe: str | Path,
    *,
    progress: bool | None = False,
    say: Callable[[str], None] | None = None,
    show_checks: Callable[[list[CheckResult]], None] | None = None,
    **options: Any,
) -> RunResult:
    """`draftset run`: recipe → answers from the target → build → verify → report, resumable.

    ``options``: the fields of `config.schema.RunArgs` (what replaces the recipe's values).
    ``say`` receives the stage lines the command prints, ``show_checks`` verify's checks
    (default: nothing is printed). Returns the `RunResult` (``.ok``: verify passed). Raises
    `RunUsageError` (exit code 2) and `RunFailed` (1: generation could not finish; call again
    to resume).
    """
    _not_in_a_spawned_import()
    _callback(say, "say", "f(line)")
    _callback(show_checks, "show_checks", "f(checks)")
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.pipeline.run import run as run_stages

    opts = run_options(recipe, progress=progress, **options)
    return run_stages(opts, say=say, show_checks=show_checks)


def run_options(recipe: str | Path, *, progress: bool | None = False, **options: Any) -> RunOptions:
    """`run`'s arguments over the recipe (its build keys, ``generate:`` and ``verify:``
    sections), checked: the `RunOptions` a run starts from."""
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.config.recipe import load_recipe
    from draftset.config.run_recipe import (  # lazy: as above
        generate_section,
        refuse_unknown_generate_keys,
    )

    # lazy: the stages load on the first call, not on import draftset.api
    from draftset.generation.options import GenerateUsageError, check_servers, split_thinking

    # lazy: the stages load on the first call, not on import draftset.api
    from draftset.pipeline.run_state import RunOptions, RunUsageError

    _progress_arg(progress, RunUsageError)
    o = _home(_given(RunArgs, {**options, "recipe": recipe}, RunUsageError), "recipe", "work")
    path = Path(o.recipe)
    if not is_recipe(path):  # a recipe written as JSON is told to be renamed, as build's
        if path.suffix.lower() == ".json" and (problem := json_recipe_problem(path)):
            raise RunUsageError(problem)
        if path.suffix.lower() in OTHER_CONFIG_SUFFIXES:  # recipe.toml: write it as YAML
            raise RunUsageError(other_format_recipe_message(recipe, "examples/run.yaml"))
        data = (".jsonl", ".ndjson", ".json", ".parquet", ".arrow", ".feather", ".gz", ".zst")
        if not (path.name.lower().endswith(data) or path.is_dir()):
            raise RunUsageError(f"draftset run takes a recipe (.yaml), not {recipe}")
        raise RunUsageError(  # data: say what a recipe naming it holds
            f"draftset run takes a recipe (.yaml), not {recipe}: write one naming it (sources:"
            f" [{recipe}], out:, tokenizer: and generate: {{endpoints: [URL]}}, as"
            " examples/run.yaml does); draftset build builds a set from the file as it is"
        )
    if problem := dash_problem(option_name(RunArgs, "work"), o.work, "name the work folder"):
        raise RunUsageError(problem)
    try:
        build = build_options(
            path,
            workers=o.workers,
            engine=o.engine,
            ray_address=o.ray_address,
            tokenizer=o.tokenizer,
        )
    except UsageError as exc:  # run has no --out: the recipe's key is the only way
        # a build key written inside generate: (`tokenizer:` there only) is said as such
        refuse_unknown_generate_keys(load_recipe(path).get("generate"), str(path), RunUsageError)
        if str(exc) != _required("out"):
            raise
        raise RunUsageError(
            f"recipe {path} has no out: (the folder to write the set in; draftset run reads it"
            " from the recipe): set `out: DIR` at its top level"
        ) from None
    conf = load_recipe(path)
    gen = generate_section(conf.get("generate"), str(path), RunUsageError)
    if o.endpoints is not None:  # `endpoints=""` asked the recipe's servers, silently
        endpoints = list(strings(o.endpoints))
        try:  # named as given (`endpoints`, `--endpoint`), not as the recipe's key they replace
            check_servers(endpoints, 1, {})  # the URLs
        except GenerateUsageError as exc:
            raise RunUsageError(str(exc)) from None
        gen = gen.model_copy(update={"endpoints": endpoints})
    try:  # the thinking setting and the template kwargs agree (checked before any work)
        split_thinking(build.template_kwargs, gen.thinking, "generate.thinking", "template_kwargs")
    except GenerateUsageError as exc:
        raise RunUsageError(str(exc)) from None
    return RunOptions(
        build=build,
        generate=gen,
        work=Path(o.work) if o.work else None,
        restart=o.restart,
        retry_errors=o.retry_errors,
        progress=progress,
        speculators=o.speculators,
        render_server=_render_server(conf.get("verify"), str(path), RunUsageError),
    )


def _render_server(section: Any, where: str, error: type[UsageError]) -> str | None:
    """The recipe's `verify: {render_server: URL}`, checked to answer before any work."""
    from draftset.config.run_recipe import render_server_url  # lazy: as above

    url = render_server_url(section, where, error)
    if url is None:
        return None
    from draftset.checks.serving import connect  # lazy: only recipes that use it

    return connect(url).url


_NOT_HTML = frozenset(
    {".pdf", ".png", ".jpg", ".jpeg", ".svg", ".json", ".jsonl", ".md", ".txt", ".csv"}
    | {".ipynb", ".parquet", ".arrow", ".docx", ".xlsx"}
)
"""Names `report -o` refuses: another format's (the page is HTML whatever the name says)."""


def report(
    dir: str | Path, *, on_verdict: Callable[[str], None] | None = None, **options: Any
) -> Path:
    """`draftset report`: write the self-contained HTML report; returns its path
    (default ``dir/report.html``). ``options``: the fields of `config.schema.ReportArgs`.
    ``on_verdict`` receives the page's verification in one line (the fast checks run now, the
    last full verify); a set that fails its checks still gets its page."""
    _not_in_a_spawned_import()
    _callback(on_verdict, "on_verdict", "f(line)")
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.output.folder import is_report_file
    from draftset.review.report import (  # lazy: as above
        default_report_path,
        write_report,
    )

    o = _home(_given(ReportArgs, {**options, "dir": dir}), "dir", "output")
    output_flag = option_name(ReportArgs, "output")  # `-o`, the API's `output`
    if problem := dash_problem(output_flag, o.output, "name the file to write, or /dev/stdout"):
        raise UsageError(problem)
    default = default_report_path(o.dir)
    path = Path(o.output) if o.output else default
    # before any work: never over a file draftset did not write, nor into the set but its
    # default report.html
    check = output_file_check(
        Path(o.dir),
        path,
        output_flag if o.output else "",
        "a report",
        is_report_file,
        UsageError,
        may_write=default,
        # an .html in a source folder is skipped (an unsupported type); a -o x.json is not
        read_as_input=not path.name.lower().endswith((".html", ".htm")),
    )
    if o.output and path.suffix.lower() in _NOT_HTML:  # `-o report.pdf`: HTML, exit 0,
        # before; after the place's own checks (a file of yours, the set's, a source)
        raise UsageError(
            f"{output_flag} {o.output}: report writes one HTML page, which a {path.suffix} name"
            f" would hide from what opens it: name it {path.stem}.html (a browser prints it to"
            " PDF)"
        )
    if o.tokenizer:  # its page said "Cannot decode rows: ...", exit 0
        _check_set_tokenizer(o.dir, o.tokenizer, UsageError)
    tokenizer = str(o.tokenizer) if o.tokenizer else None
    return write_report(o.dir, path, tokenizer, o.block_size, check=check, on_verdict=on_verdict)


def _check_set_tokenizer(
    folder: str | Path, tokenizer: str | Path, error: type[UsageError]
) -> None:
    """A ``--tokenizer`` given to `verify`, `report` or `show`, checked before any work as
    build's is (a missing folder, a file, a folder without tokenizer files: `TokenizerError`),
    then against the set's manifest (another model's vocabulary: ``error``, exit 2)."""
    # lazy: the tokenizer's checks only when one is given
    from draftset.mask.template import resolve_tokenizer_path
    from draftset.output.readback import open_output  # lazy: as above
    from draftset.review.show import tokenizer_folder_problem  # lazy: as above

    resolve_tokenizer_path(str(tokenizer))
    out = open_output(folder)
    if out.manifest and (why := tokenizer_folder_problem(out, tokenizer)):
        flag = "--tokenizer" if on_command_line() else "tokenizer"  # as the caller gave it
        raise error(f"{flag} {tokenizer} is not the tokenizer this set was built with: {why}")


def show(dir: str | Path, *, console: Console | None = None, **options: Any) -> None:
    """`draftset show`: print one row (``row=N`` or ``row_id=ID``) with its supervised tokens
    highlighted, on ``console`` (default: stdout). The one API function that prints: showing
    is what it does. ``options``: the fields of `config.schema.ShowArgs`."""
    _not_in_a_spawned_import()
    if console is not None and not hasattr(console, "print"):
        raise UsageError(f"console: expected a rich Console or None, got {type(console).__name__}")
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.review.show import ShowError
    from draftset.review.show import show as show_row  # lazy: a stage, loaded on first use

    o = _home(_given(ShowArgs, {**options, "dir": dir}, ShowError), "dir")
    if (o.row is None) == (o.row_id is None):
        raise ShowError("give one of row (an index into the set) or row_id")
    if o.tokenizer:  # a missing one was told "pass --tokenizer FOLDER"
        _check_set_tokenizer(o.dir, o.tokenizer, ShowError)
    tokenizer = str(o.tokenizer) if o.tokenizer else None
    show_row(o.dir, o.row, o.row_id, o.tokens, tokenizer, console, o.block_size)


def _sources_then_keywords(f: F) -> F:
    """``f(sources, **options)`` called with more than the sources by position: one line
    naming the keywords (`GenerateCallError`, a TypeError), where Python said only
    "generate() takes 1 positional argument but 3 were given" to ``generate(src, url, out)``,
    the command line's order."""

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        if len(args) > 1:
            from draftset.generation.options import GenerateCallError  # lazy: a stage

            raise GenerateCallError(
                f"{f.__name__}() takes only its sources by position ({len(args)} arguments"
                f" were given): give the other options by keyword, as {f.__name__}(sources,"
                " endpoints=[URL], out='answers.jsonl')"
            )
        return f(*args, **kwargs)

    return cast(F, call)


@_sources_then_keywords
def generate(
    sources: Sequence[str | Path | Source | Mapping[str, Any]] | str | Path,
    *,
    progress: bool | None = False,
    **options: Any,
) -> GenerateResult:
    """`draftset generate`: the target model answers the prompts (docs/generate.md).

    ``sources`` alone is given by position; every other option by keyword, as the command
    line gives them by flag: ``generate("prompts.jsonl", endpoints=["http://localhost:8000/v1"],
    out="answers.jsonl")`` (``generate(src, url, out)`` is a `GenerateCallError`, a TypeError).
    ``options``: the fields of `config.schema.GenerateArgs` (``endpoints`` and ``out`` are
    required). Returns the `GenerateResult` (``.ok``: every row ended as an answer or an error
    line). Runs its own event loop, in a thread of its own where one already runs (Jupyter;
    from async code, await `draftset.generation.job.run_generate` with `generate_options`'
    result to run it in yours).
    """
    _not_in_a_spawned_import()
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.generation.console import progress as generate_progress
    from draftset.generation.job import run_generate, run_sync  # lazy: a stage, on first use
    from draftset.generation.options import GenerateUsageError

    _progress_arg(progress, GenerateUsageError)
    opts = generate_options(sources, **options)
    with generate_progress(enabled=progress) as update:
        return run_sync(run_generate(opts, update))


@_sources_then_keywords
def generate_options(
    sources: Sequence[str | Path | Source | Mapping[str, Any]] | str | Path, **options: Any
) -> GenerateOptions:
    """`generate`'s arguments checked and resolved: the `GenerateOptions` the job runs with."""
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.config.generate_args import (  # lazy: as above
        answers_out_problem,
        selection_problem,
        set_as_prompts,
    )
    from draftset.config.recipe import unique_names, unused_layout  # lazy: as above

    # lazy: the stages load on the first call, not on import draftset.api
    from draftset.generation.options import (
        GenerateOptions,
        GenerateUsageError,
        api_key_from_env,
        api_key_problem,
        check_servers,
        extra_body_clash,
        special_token_ids_of,
        special_tokens_of,
        split_thinking,
    )
    from draftset.sources.presets import apply_preset  # lazy: a stage, loaded on first use

    # lazy: a stage, loaded on first use
    from draftset.sources.read import HUB_PREFIX, SourceError, refuse_several_splits

    sources = _source_list(sources, GenerateUsageError)
    o = _home(_given(GenerateArgs, {**options, "sources": sources}, GenerateUsageError), "out")
    given = list(o.sources)
    fields = _fields(o.fields)  # RecipeError (exit 2) for a bad --field
    recipes = [s for s in given if isinstance(s, str | os.PathLike) and is_recipe(s)]
    if recipes and len(given) > 1:  # it was read as a data file: "unsupported file type"
        raise GenerateUsageError(
            f"{recipes[0]} is a recipe: give it alone (its sources are listed in it), or give"
            " source files without it"
        )
    if recipes:
        if problem := unused_layout(o.format, fields, o.preset, recipes[0]):
            raise GenerateUsageError(problem)
        srcs = _recipe_sources(Path(recipes[0]))
    else:  # as build reads them; a weight or count would select nothing here
        srcs = _sources_given(given, o.format, fields, o.preset, GenerateUsageError)
        for s in srcs:
            if problem := selection_problem(s):
                raise GenerateUsageError(problem)
    srcs = unique_names(srcs)
    for s in srcs:
        if problem := not_a_file(s.path, GENERATE_READS):  # build's lines, generate's reason
            raise GenerateUsageError(problem)
        if not s.path.exists() and not str(s.path).startswith(HUB_PREFIX):
            raise GenerateUsageError(not_found(s.path, in_recipe=bool(recipes)))  # as build
        if problem := set_as_prompts(s.path):  # `generate out/set`: its prompts.jsonl meant
            raise GenerateUsageError(problem)
        try:
            refuse_several_splits(s.path)  # as build's pre-flight
        except SourceError as exc:
            raise GenerateUsageError(str(exc)) from None
    for preset in dict.fromkeys(s.preset for s in srcs if s.preset):  # --preset's, a Source's
        apply_preset(preset)  # raises UnknownPresetError (exit 2) for an unknown name
    kwargs_name = option_name(GenerateArgs, "chat_template_kwargs")
    extra = _json_object(o.extra_body, option_name(GenerateArgs, "extra_body"))
    kwargs, thinking = split_thinking(
        _json_object(o.chat_template_kwargs, kwargs_name),
        o.thinking,
        option_name(GenerateArgs, "thinking"),
        kwargs_name,
    )
    if problem := answers_out_problem(o.out):
        raise GenerateUsageError(problem)
    out = Path(o.out)
    endpoints = list(strings(o.endpoints))
    check_servers(endpoints, o.concurrency, extra)
    if problem := extra_body_clash(extra, o, kwargs):
        raise GenerateUsageError(problem)
    api_key = o.api_key or api_key_from_env()
    if problem := api_key_problem(api_key, "given" if o.api_key else "from the environment"):
        raise GenerateUsageError(problem)
    if problem := json_value_problem(kwargs, kwargs_name):
        raise GenerateUsageError(problem)
    return GenerateOptions(
        sources=srcs,
        endpoints=endpoints,
        out=out,
        model=o.model,
        api_key=api_key,
        concurrency=o.concurrency,
        request_timeout=o.request_timeout,
        max_retries=o.max_retries,
        backoff_base=o.backoff,
        backoff_cap=o.backoff_cap,
        health_interval=o.health_interval,
        give_up_after=o.give_up_after,
        temperature=o.temperature,
        top_p=o.top_p,
        top_k=o.top_k,
        max_tokens=o.max_tokens,
        seed=o.seed,
        extra_body=extra,
        chat_template_kwargs=kwargs,
        thinking=thinking,
        keep_length=o.keep_length,
        return_token_ids=o.return_token_ids,
        retry_errors=o.retry_errors,
        special_tokens=special_tokens_of(str(o.tokenizer) if o.tokenizer else None),
        special_token_ids=special_token_ids_of(str(o.tokenizer) if o.tokenizer else None),
        max_response_bytes=o.max_response_bytes,
        restart=o.restart,
    )


def _recipe_sources(path: Path) -> list[Source]:
    """The sources of a `build` recipe, each with its own format, fields and preset. Selection
    (weights, counts, max_samples, mix, dedup, decontamination) is build's: generate answers
    every row, and says so (on stderr) when the recipe selects."""
    from draftset.config.recipe import load_recipe  # lazy: as above
    from draftset.generation.options import GenerateUsageError

    recipe = load_recipe(path)
    sources: list[Source] = recipe.get("sources") or []
    if not sources:
        raise GenerateUsageError(f"recipe {path} lists no sources")
    selects = [k for k in ("max_samples", "mix", "decontaminate") if recipe.get(k)]
    selects += ["weight/count"] if any(s.weight or s.count for s in sources) else []
    if selects:
        print(
            f"draftset: note: generate answers every row of the recipe's sources; its "
            f"selection ({', '.join(selects)}) applies when the set is built",
            file=sys.stderr,
        )
    return sources


def _json_object(value: Mapping[str, Any] | str | None, what: str) -> dict[str, Any]:
    """A JSON object option: a mapping, or the command line's JSON text ("" = none)."""
    from draftset.config.recipe import parse_json_object  # lazy: as above

    if isinstance(value, Mapping):
        return dict(value)
    return parse_json_object(value, what) if value else {}
