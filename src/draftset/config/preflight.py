"""Checks a build runs before any work: one clear line (exit code 2) instead of a traceback, a
half-finished run, or a deleted folder that draftset did not write.

`check_build` is the single entry point; `run_build` calls it first, so the Python API is as
safe as the CLI. It also returns the options with every local path resolved (absolute, symlinks
followed), and the paths as given, for the manifest: `verify` and `report` then work from any
directory.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftset.config.fields import (
    boolean_text_problem,
    json_value_problem,
    option_name,
    switch_name,
    validated,
)
from draftset.config.recipe import check_source, template_text_problem
from draftset.config.schema import BuildArgs
from draftset.core.errors import UsageError
from draftset.core.files import cannot_create, dash_problem
from draftset.core.modes import MODES
from draftset.core.naming import on_command_line
from draftset.engine.base import available_cpus
from draftset.mask.ambient import now_iso, valid_now
from draftset.mask.template import (
    config_vocab_size,
    could_be_hub_id,
    folder_vocabulary_sample,
    resolve_tokenizer_path,
)
from draftset.output.folder import (
    MANIFEST_FORMAT,
    foreign_listing,
    inside_a_set,
    is_draftset_output,
    replaceable,
)
from draftset.select.decontam import check_benchmark_file
from draftset.select.modes import SHARES_TOLERANCE
from draftset.sources.normalize import MAPPABLE_FIELDS
from draftset.sources.presets import apply_preset
from draftset.sources.read import HUB_PREFIX, Source, built_set_manifest, list_files

if TYPE_CHECKING:
    from draftset.config.options import BuildOptions


class PreflightError(UsageError):
    """Unusable options or output path, found before any work (exit code 2)."""


RECIPE_OUT = "recipe key out:"
"""How messages name the output folder a recipe's ``out:`` gave (`BuildOptions.out_named`)."""


def not_replaceable_reason(folder: Path, shown: str, flag: str | None = None) -> str:
    """Why ``--overwrite`` refuses ``folder`` (named ``shown``; ``flag``: `RECIPE_OUT` when
    the recipe gave it, else ``out`` as the caller named it: ``--out``, the API's ``out``),
    as the one-line message."""
    flag = flag or option_name(BuildArgs, "out")
    overwrite = switch_name(BuildArgs, "overwrite")  # `--overwrite`, the API's `overwrite=True`
    if is_draftset_output(folder):
        other = "out:" if flag == RECIPE_OUT else flag
        return (
            f"{flag} {shown} is a draftset output holding files draftset did not write:"
            f" {foreign_listing(folder)}; {overwrite} replaces only what draftset wrote"
            f" (move them out first, or choose another {other})"
        )
    return (
        f"{flag} {shown} exists, is not empty and is not a draftset output (no manifest.json"
        f' with "format": "{MANIFEST_FORMAT}"): {overwrite} would not replace it either'
        " (it replaces only draftset outputs and empty folders); name a new folder"
    )


def check_build(opts: BuildOptions) -> BuildOptions:
    """Every check that needs no tokenizer load or data pass; raises `PreflightError`.

    Returns a copy of ``opts`` with local paths resolved; the paths as given are kept in
    ``opts.given_paths`` for the manifest.
    """
    check_values(opts)
    resolved = resolve_paths(opts)
    sources = [s.path for s in resolved.sources if not str(s.path).startswith(HUB_PREFIX)]
    check_output_path(opts.out, opts.overwrite, sources, input_paths(resolved), opts.out_named)
    check_chat_template(opts.chat_template_path)
    check_options(resolved)
    check_set_sources(resolved.sources, resolved.tokenizer)
    if resolved.template_now is None:  # one instant for every render of the build
        resolved = dataclasses.replace(resolved, template_now=now_iso())
    elif valid_now(resolved.template_now) is None:
        raise PreflightError(
            f"template_now {resolved.template_now!r} is not an ISO date-time (2026-12-02T10:00:00)"
        )
    return resolved


def check_values(opts: BuildOptions) -> None:
    """The option values `draftset build` refuses (exit 2): the schema's types, choices and
    bounds (`config.schema.BuildArgs`), then what it cannot say alone.

    Run when the API builds its options (so a bad value fails before anything else) and again
    by `check_build` (so `BuildOptions` made by hand are checked the same way).
    """
    flag = option_name(BuildArgs, "decontaminate")  # `--decontaminate`, the API's keyword
    for bench in opts.decontaminate:
        if not Path(bench).exists():
            raise UsageError(f"{flag} file not found: {bench}")
        if Path(bench).is_dir():  # read as one, then the manifest could not hash it: exit 2
            each = (
                "--decontaminate once per file, or a list in a recipe's decontaminate:"
                if on_command_line()
                else "a list of them: decontaminate=[...]"
            )
            raise UsageError(  # after the whole build
                f"{flag} {bench} is a folder: give its benchmark files ({each})"
            )
        if not Path(bench).is_file():  # checked, loaded and hashed: three reads of it
            raise UsageError(
                f"{flag} {bench} is not a regular file (a device, FIFO or socket):"
                " give a benchmark file"
            )
        if problem := _bench_is_a_source(Path(bench), opts.sources):
            raise UsageError(problem)
        check_benchmark_file(bench)  # a file with no prompt would decontaminate nothing
    values = {name: getattr(opts, name) for name in _SCHEMA_CHECKED}
    validated(BuildArgs, values)
    for s in opts.sources:
        check_source(s)  # every field as a recipe entry's (a `Source` made by hand too)
        unknown = sorted(set(s.fields or {}) - MAPPABLE_FIELDS)
        if unknown:  # `ouptut=code` mapped a column nothing reads: every answer was lost
            key, column = unknown[0], s.fields[unknown[0]]
            # `--field code=output`, the API's `fields={'code': 'output'}`
            given = (
                f"--field {key}={column}"
                if on_command_line()
                else f"fields {{{key!r}: {column!r}}}"
            )
            head = f"source {s.name}: {given}: no row shape reads a field {key!r}"
            if column in MAPPABLE_FIELDS:  # `code=output`: the two sides swapped
                raise PreflightError(
                    f"{head}; CANONICAL=COLUMN puts draftset's field first: did you mean"
                    f" {column}={key}?"
                )
            raise PreflightError(f"{head} (fields: {', '.join(sorted(MAPPABLE_FIELDS))})")
        if s.preset:
            apply_preset(s.preset)  # raises UnknownPresetError (exit 2) for an unknown name
    check_sampling(opts)
    check_mix(opts.mix, [s.name for s in opts.sources])
    if problem := template_kwargs_problem(
        opts.template_kwargs, option_name(BuildArgs, "template_kwargs")
    ):
        raise PreflightError(problem)
    check_workers(opts.workers, opts.engine, opts.ray_address)


def template_kwargs_problem(kwargs: dict[str, Any] | None, what: str) -> str | None:
    """Why the template options cannot be passed to a render (one line starting ``what``: the
    flag, or the recipe key when the recipe set them), or None."""
    if problem := json_value_problem(kwargs, what):
        return problem
    if problem := boolean_text_problem(kwargs, what):
        return problem
    taken = sorted(set(kwargs or {}) & RENDER_VARIABLES)
    if taken:
        return (
            f"{what}: {taken[0]!r} is a variable draftset sets itself on every render"
            f" ({', '.join(sorted(RENDER_VARIABLES))}); leave it out"
        )
    return None


RENDER_VARIABLES = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
"""What every render of a chat template is given by draftset itself (as by transformers'
``apply_chat_template``): a template option of the same name cannot be passed beside them."""


def check_mix(mix: Any, source_names: list[str]) -> None:
    """``mix:`` (docs/mixtures.md): `modes` and/or `sources`, each a mapping of known names to
    shares (numbers >= 0) summing to 1. A misspelled source took no row and shrank the set
    without a word; a share given as text failed deep in the build with a traceback; shares
    not summing to 1 were refused only after the mix's pre-pass had read every row; a mix of
    no shares (`{modes: null}`) ran, --max-samples' weights unread."""
    if mix is None:
        return
    if not isinstance(mix, dict) or not mix or set(mix) - {"modes", "sources"}:
        raise PreflightError("mix takes `modes` and/or `sources` share mappings")
    if all(shares is None for shares in mix.values()):  # ran as a mix of nothing: weights unread
        raise PreflightError(
            "mix gives no shares (modes and sources both null or absent): give one, or leave"
            " mix out"
        )
    known = {"modes": list(MODES), "sources": source_names}
    for key, shares in mix.items():
        if shares is None:
            continue
        if not isinstance(shares, dict) or not shares:
            raise PreflightError(f"mix.{key} must be a mapping of names to shares, got {shares!r}")
        for name, share in shares.items():
            ok = isinstance(share, int | float) and not isinstance(share, bool)
            if not ok or not math.isfinite(share) or share < 0:
                raise PreflightError(f"mix.{key}.{name}: a share is a number >= 0, got {share!r}")
        unknown = sorted(str(n) for n in shares if n not in known[key])
        if unknown:
            what = "mode" if key == "modes" else "source"
            raise PreflightError(
                f"mix.{key}: no {what} named {', '.join(map(repr, unknown))}"
                f" ({what}s: {', '.join(known[key])})"
            )
        total = sum(shares.values())
        if abs(total - 1.0) > SHARES_TOLERANCE:  # the mix's own check, after its pre-pass
            raise PreflightError(f"mix.{key}: shares must sum to 1, got {total:.6g}")


def check_sampling(opts: BuildOptions) -> None:
    """A selection that takes no row — ``--max-samples 0``, every source ``count: 0``, or
    ``--max-samples`` split by weight when every other source has weight 0 — would read
    everything and end with nothing written (exit 1, every row "sampled out"); counts adding up
    to more than ``--max-samples`` take more rows than it says. All refused before any work."""
    if not opts.sources:
        return
    flag = option_name(BuildArgs, "max_samples")  # `--max-samples`, the API's keyword
    if opts.max_samples == 0:  # a mix's total too
        raise UsageError(
            f"{flag} 0: no row would be taken (give a number above 0, or leave {flag} out to"
            " take every row)"
        )
    if all(s.count == 0 for s in opts.sources):  # a mix's per-source counts too
        names = [s.name for s in opts.sources]
        who = (
            f"the source {names[0]} has count 0"
            if len(names) == 1
            else f"every source has count 0 ({', '.join(names)})"
        )
        raise UsageError(
            f"{who}, so no row would be taken (give a source a count above 0, or leave its"
            " count out to take every row)"
        )
    if not opts.max_samples or opts.mix is not None:
        return  # no split by weight (a mix chooses rows by its shares, not by weight)
    if all(s.count is None and s.weight == 0 for s in opts.sources):
        raise UsageError(
            f"{flag} {opts.max_samples}: every source has weight 0, so no row would be"
            " taken (give a source a weight above 0, or a count)"
        )
    if all(s.count == 0 or (s.count is None and s.weight == 0) for s in opts.sources):
        raise UsageError(
            f"{flag} {opts.max_samples}: every source has count 0 or weight 0, so no row"
            " would be taken (give a source a count or a weight above 0)"
        )
    counted = sum(s.count for s in opts.sources if s.count is not None)
    if counted > opts.max_samples:  # took them all: 9 rows for --max-samples 4, no word said
        raise UsageError(
            f"{flag} {opts.max_samples}: the sources' counts add up to {counted:,}, more than"
            f" that (lower a count, or raise {flag})"
        )


def _bench_is_a_source(bench: Path, sources: list[Source]) -> str | None:
    """Why a benchmark file is read as training rows too (one line), or None: the eval split
    listed as a source and as ``--decontaminate`` (or inside a source folder) had every row of
    it read, then removed as contaminated, exit 0: known before any row is read."""
    real = bench.expanduser().resolve()
    for s in sources:
        path = Path(s.path).expanduser()
        if str(s.path).startswith(HUB_PREFIX) or not path.exists():
            continue
        place = path.resolve()
        if real == place:
            what = "the source"
        elif (  # a file the folder's rows are read from (a .txt one is skipped: not data)
            place.is_dir()
            and real.is_relative_to(place)
            and real in {f.resolve() for f in list_files(place)}
        ):
            what = f"a file of the source folder {s.path}"
        else:
            continue
        return (
            f"{option_name(BuildArgs, 'decontaminate')} {bench} is {what} too: its rows would be"
            " trained on and each removed as contaminated; give the benchmark apart from the"
            " sources"
        )
    return None


_SCHEMA_CHECKED = (
    "max_length",
    "truncation",
    "min_supervised_tokens",
    "turns",
    "seed",
    "max_samples",
    "workers",
    "engine",
    "dedup",
    "near_dup_threshold",
    "render_timeout",
    "draft_vocab_size",
    "target_vocab_size",
    "output_format",
    "serving_engine",
)
"""The `BuildOptions` fields that are `BuildArgs` fields of the same name and meaning."""


def check_workers(workers: int, engine: str, ray_address: str | None) -> None:
    """More workers than this machine's CPUs is refused, not obeyed: on a CPU-bound row step
    they only add memory (``--workers 16`` on 2 CPUs started 45 processes, 3.3 GB), and a
    private Ray cluster sized to them promised CPUs that are not there. A Ray cluster at an
    address is checked against its own CPUs once connected (`RayEngine`)."""
    at_address = engine == "ray" and (ray_address or os.environ.get("RAY_ADDRESS")) not in (
        None,
        "",
        "local",
    )
    cpus = available_cpus()
    if workers > cpus and not at_address:
        where = "a private Ray cluster gets" if engine == "ray" else "the row step uses"
        flag = option_name(BuildArgs, "workers")  # `--workers`, the API's `workers`
        raise UsageError(
            f"{flag} {workers}: this machine has {cpus} CPUs ({where} at most that many;"
            f" leave {flag} out to use them all)"
        )


def resolve_paths(opts: BuildOptions) -> BuildOptions:
    """``opts`` with absolute, symlink-free local paths (hub ids and ``hf:`` sources as given)."""

    def real(p: str | Path) -> Path:
        return Path(p).expanduser().resolve()

    sources = [
        s if str(s.path).startswith(HUB_PREFIX) else dataclasses.replace(s, path=real(s.path))
        for s in opts.sources
    ]
    tok = opts.tokenizer
    tokenizer = str(real(tok)) if Path(tok).expanduser().exists() else tok
    template = str(real(opts.chat_template_path)) if opts.chat_template_path else None
    given: dict[str, Any] = {
        "sources": [str(s.path) for s in opts.sources],
        "tokenizer": tok,
        "chat_template": opts.chat_template_path,
        "decontaminate": [str(p) for p in opts.decontaminate],
    }
    return dataclasses.replace(
        opts,
        sources=sources,
        tokenizer=tokenizer,
        chat_template_path=template,
        decontaminate=[str(real(p)) for p in opts.decontaminate],
        given_paths=given,
    )


def input_paths(resolved: BuildOptions) -> list[Path]:
    """The local files a build reads beside its sources (`resolve_paths`' ``opts``): the
    decontamination files, the chat template, the tokenizer folder."""
    inputs = [Path(p) for p in resolved.decontaminate]
    if resolved.chat_template_path:
        inputs.append(Path(resolved.chat_template_path))
    if Path(resolved.tokenizer).exists():
        inputs.append(Path(resolved.tokenizer))
    return inputs


def check_out_apart(flag: str, out: Path, sources: list[Path], inputs: list[Path]) -> None:
    """``out`` (what ``flag`` names: ``--out``, or ``recipe key out:`` when the recipe set it)
    is no source or input, is not inside a source folder and holds neither (resolved paths)."""
    check_apart_from_sources(flag, out, sources)
    real = Path(out).expanduser().resolve()
    for inp in inputs:
        if inp == real or inp.is_relative_to(real):
            raise PreflightError(f"{flag} {out} contains the input {inp}")


def check_recipe_out_apart(opts: BuildOptions) -> None:
    """`check_out_apart` and `out_folder_problem` of a recipe's ``out:`` (a file, a folder
    that cannot be created), its lines naming that key (they named a ``--out``
    nobody gave), as `out_place_problem`'s do."""
    resolved = resolve_paths(opts)
    sources = [s.path for s in resolved.sources if not str(s.path).startswith(HUB_PREFIX)]
    try:
        check_out_apart(RECIPE_OUT, opts.out, sources, input_paths(resolved))
        if problem := out_folder_problem(opts.out, RECIPE_OUT):  # a file, can't create
            raise PreflightError(problem)
    except PreflightError as exc:
        line, where = str(exc), "paths in a recipe are relative to its folder"
        told = f"{line[:-1]}; {where})" if line.endswith(")") else f"{line} ({where})"
        raise PreflightError(told) from None


def check_output_path(
    out: Path,
    overwrite: bool,
    sources: list[Path],
    inputs: list[Path],
    flag: str | None = None,
) -> None:
    """``--out`` must be a new folder, an empty one, or (with ``--overwrite``) a draftset output;
    never a file, under a file, ``/``, the home or current folder, or overlapping a source.

    ``sources`` and ``inputs`` are resolved paths; a source may not hold the output either (the
    next run would read the output back as input). ``flag``: `RECIPE_OUT` when the recipe gave
    ``out``, else it is named as the caller gave it (``--out``, the API's ``out``).
    """
    flag = flag or option_name(BuildArgs, "out")
    if problem := out_place_problem(out, flag):
        raise PreflightError(problem)
    check_out_apart(flag, out, sources, inputs)
    if problem := out_folder_problem(out, flag):
        raise PreflightError(problem)
    real = Path(out).expanduser().resolve()
    if not real.exists():
        return
    if not replaceable(real):  # both facts at once: --overwrite would be refused too
        raise PreflightError(not_replaceable_reason(real, str(out), flag))
    if not overwrite:  # a notebook's second run of a cell: the call takes overwrite=True
        give = switch_name(BuildArgs, "overwrite")
        if flag != RECIPE_OUT:
            raise PreflightError(f"output folder exists: {out} (pass {give} to replace it)")
        raise PreflightError(
            f"{flag} {out} exists (pass {give}, or set overwrite: true in the recipe, to"
            " replace it)"
        )


def out_folder_problem(out: Path, flag: str) -> str | None:
    """Why no folder can be at ``out`` (one line starting ``flag``: ``--out``, or ``recipe key
    out:`` when the recipe set it), or None: it cannot be created (under a file, in a folder
    that cannot be written), or it is a file. (A folder there that may not be replaced is
    judged where the command knows whose it is: build's `check_output_path`, run's own.)"""
    real = Path(out).expanduser().resolve()
    if (problem := cannot_create(real, "folders", probe=True)) is not None:
        return f"{flag} {out}{problem}"
    if real.exists() and not real.is_dir():
        return f"{flag} {out} is a file, not a folder"
    return None


_DATA_SUFFIXES = (".parquet", ".arrow", ".feather", ".jsonl", ".ndjson", ".json", ".csv")


def _data_file_name_problem(out: Path, flag: str) -> str | None:
    """Why a new ``--out`` named as a data file (``train.parquet``: the set taken for one file)
    is refused, or None: the folder so named is taken for one data file by a later build, a
    reader by suffix, ``load_dataset("parquet", data_files=...)``. An existing folder (a set
    rebuilt with --overwrite) keeps its name."""
    path = Path(out).expanduser()
    suffix = path.suffix.lower()
    if suffix not in _DATA_SUFFIXES or path.exists():
        return None
    return (
        f"{flag} {out}: a set is a folder (its data files, manifest and token counts inside),"
        f" and a {suffix} name would take it for one data file: name the folder, e.g."
        f" {Path(out).with_suffix('')}"
    )


def out_place_problem(out: Path, flag: str) -> str | None:
    """Why ``out`` can be no output folder wherever the sources are (one line starting ``flag``:
    ``--out``, or ``recipe key out:`` when the recipe set it), or None: empty, a symbolic link,
    ``/``, a mount point, inside a built set, the home or current folder or above one."""
    if not str(out).strip():
        return f"{flag} is empty"
    if problem := dash_problem(flag, out, "name the folder to write the set in"):
        return problem
    if Path(out).is_symlink():
        return f"{flag} {out} is a symbolic link; give the folder itself"
    if problem := _data_file_name_problem(out, flag):
        return problem
    real = Path(out).expanduser().resolve()
    if real == Path(real.anchor):
        return f"{flag} {out} is the filesystem root"
    if os.path.ismount(real):  # an empty volume: the set is renamed in at the end (EBUSY)
        return (
            f"{flag} {out} is a mount point: draftset builds the set beside it and renames it"
            f" into place at the end, which a mount point cannot be; name a folder inside it"
            f" (e.g. {Path(out) / 'set'})"
        )
    if problem := inside_a_set(real, f"{flag} {out}"):  # the set would fail its own verify
        return problem
    for what, place in (("your home folder", Path.home()), ("the current folder", Path.cwd())):
        place = place.resolve()
        if real == place or place.is_relative_to(real):
            return f"{flag} {out} is {what} or contains it; name a new folder"
    return None


def check_apart_from_sources(flag: str, out: Path | str, sources: list[Path]) -> None:
    """``out`` (what ``flag`` names: build's and `run`'s ``--out``, `run`'s ``--work``,
    `generate`'s ``--out`` file) is no source, is not inside a source folder and holds none:
    a rerun would read the output as input, and a restart would delete the input.

    ``sources`` are resolved paths; ``out`` is resolved here (symbolic links, ``..``).
    """
    real = Path(out).expanduser().resolve()
    for src in sources:
        if real == src:
            raise PreflightError(f"{flag} {out} is the source {src}")
        if src.is_relative_to(real):
            raise PreflightError(f"{flag} {out} contains the source {src}")
        if real.is_relative_to(src):
            raise PreflightError(
                f"{flag} {out} is inside the source folder {src} (a rerun would read it as input)"
            )


def local_sources(sources: list[Any]) -> list[Path]:
    """The resolved paths of the sources that are local files or folders (not ``hf:`` ids)."""
    return [
        Path(s.path).expanduser().resolve()
        for s in sources
        if not str(s.path).startswith(HUB_PREFIX)
    ]


def _template_flag() -> str:
    """``--chat-template`` on the command line, the API's ``chat_template``."""
    return option_name(BuildArgs, "chat_template")


def _without_template() -> str:
    return f"without {_template_flag()} the tokenizer folder's own template is used"


def missing_chat_template(path: str | Path) -> str:
    """Why ``--chat-template PATH`` is not a file, in one line."""
    flag = _template_flag()
    if Path(path).is_dir():
        return (
            f"{flag} {path} is a folder, not a template file (give the .jinja file;"
            f" {_without_template()})"
        )
    if problem := template_text_problem(path, flag):
        return problem
    text = str(path)
    if text.count("/") == 1 and could_be_hub_id(text) and "." not in text.rsplit("/", 1)[1]:
        # `--tokenizer Qwen/Qwen3-8B`, the API's `tokenizer='Qwen/Qwen3-8B'`
        tokenizer = f"--tokenizer {path}" if on_command_line() else f"tokenizer={text!r}"
        return (  # `--chat-template Qwen/Qwen3-8B`: a model's template by its hub id
            f"chat template file not found: {path} ({flag} takes a .jinja file, never"
            " a hub id: a model's own template comes with its tokenizer, so"
            f" {tokenizer} reads it)"
        )
    return f"chat template file not found: {path}"


def check_chat_template(path: str | None) -> None:
    """A ``--chat-template`` file that exists, is UTF-8, not blank, and parses as Jinja."""
    if not path:
        return
    p = Path(path)
    if not p.is_file():
        raise PreflightError(missing_chat_template(path))
    flag = _template_flag()
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PreflightError(f"{flag} {path} is not UTF-8 (byte {exc.start})") from None
    except OSError as exc:
        raise PreflightError(f"{flag} {path}: cannot read: {exc.strerror}") from None
    if not text.strip():
        raise PreflightError(f"{flag} {path} is empty")
    json_file = _json_not_jinja(text)
    if json_file:
        raise PreflightError(f"{flag} {path} is JSON, not a Jinja template file{json_file}")
    if "{{" not in text and "{%" not in text:  # a data file, a system prompt: no template
        raise PreflightError(
            f"{flag} {path} holds no Jinja ({{{{ ... }}}} or {{% ... %}}): it renders"
            " the same text for every conversation (give the .jinja file)"
        )
    error = template_syntax_error(text)
    if error:
        raise PreflightError(f"{flag} {path}: {error}")


def _json_not_jinja(text: str) -> str | None:
    """The rest of the line for a template file that is a JSON object (``chat_template.json``,
    tokenizer_config.json): read as Jinja it is a syntax error at an escape, or a template that
    renders the JSON around its ``chat_template`` value. None for anything else."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if "chat_template" in data:
        return (
            " (its chat_template value is one: save that value as a .jinja file and give it;"
            f" {_without_template()})"
        )
    return " (give the .jinja file)"


def template_syntax_error(text: str) -> str | None:
    """A one-line Jinja syntax error of ``text``, or None.

    A quick parse with jinja2 (plus transformers' ``{% generation %}`` tag); only when that
    fails is transformers' own compiler asked, so a template it accepts is never refused.
    """
    # lazy: jinja2 only when a --chat-template file is given
    import jinja2  # lazy: as above

    from draftset.mask.sandbox import quick_parse  # lazy: as above

    try:
        quick_parse(text)
        return None
    except jinja2.TemplateSyntaxError:
        pass
    try:
        # lazy: transformers takes seconds to import: only for a template file
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        _compile_jinja_template = quick_parse
    try:
        _compile_jinja_template(text)
    except jinja2.TemplateSyntaxError as exc:
        return f"template syntax error on line {exc.lineno}: {exc.message}"
    return None


def check_options(opts: BuildOptions) -> None:
    """The tokenizer folder, optional dependencies and vocabulary sizes, known before the
    tokenizer loads."""
    resolve_tokenizer_path(opts.tokenizer)  # TokenizerError (exit 2): missing folder offline
    if opts.engine == "ray":  # installed, and the cluster answers (seconds, not Ray's minutes)
        from draftset.engine.ray import check_ray  # lazy: only --engine ray loads the engine

        check_ray(opts.ray_address)
    cli = on_command_line()  # the options named as the caller gave them: flags, or keywords
    if opts.dedup == "near" and importlib.util.find_spec("datasketch") is None:
        near, exact = (
            ("--dedup near", "--dedup exact") if cli else ("dedup='near'", "dedup='exact'")
        )
        raise PreflightError(
            f"{near} needs datasketch: pip install 'draftset[near-dedup]' (or use {exact})"
        )
    n = opts.draft_vocab_size
    if n is None:
        return
    draft = option_name(BuildArgs, "draft_vocab_size")
    if n < 1:
        raise PreflightError(f"{draft} must be >= 1, not {n}")
    target = opts.target_vocab_size
    if target is not None and target < 1:
        raise PreflightError(
            f"{option_name(BuildArgs, 'target_vocab_size')} must be >= 1, not {target}"
        )
    if target is None:
        target = config_vocab_size(opts.tokenizer)
    if target is None:
        give = "--target-vocab-size N" if cli else "target_vocab_size=N"
        raise PreflightError(
            f"{draft} needs the target model's vocabulary size, and {opts.tokenizer}"
            f" has no config.json with vocab_size: pass {give}"
            " (the model's config.json vocab_size, e.g. 151936 for Qwen3)"
        )
    if n > target:
        raise PreflightError(f"{draft} {n} exceeds the target vocabulary size {target}")


def _built_set_of(path: Path) -> tuple[Path, dict[str, Any]] | None:
    """(the set, its manifest) when a source is a set draftset built or one of its data files
    (``SET/data-….arrow``, ``SET/data/train-….parquet``), else None."""
    for folder in (path, path.parent, path.parent.parent):
        manifest = built_set_manifest(folder) if folder.is_dir() else None
        if manifest is not None:
            return folder, manifest
    return None


def set_tokenizer_problem(
    sources: list[Source], tokenizer: str, vocabulary_sample: str | None
) -> str | None:
    """Why a built set among ``sources`` cannot be read by a build with ``tokenizer`` (whose
    `vocabulary_sample_sha256` is ``vocabulary_sample``): its rows are another tokenizer's
    token ids, which a larger vocabulary takes without a range check failing, every row then
    written as other tokens. None when each set's manifest records this vocabulary (a set
    recording none, written before it was recorded, is not judged)."""
    for source in sources:
        if vocabulary_sample is None or str(source.path).startswith(HUB_PREFIX):
            continue
        found = _built_set_of(Path(source.path))
        if found is None:
            continue
        folder, manifest = found
        recorded = manifest.get("tokenizer")
        recorded = recorded if isinstance(recorded, dict) else {}
        sample = recorded.get("vocabulary_sample_sha256")
        if isinstance(sample, str) and sample != vocabulary_sample:
            its = recorded.get("path") or "another tokenizer"
            return (
                f"{source.path}: a set draftset built with the tokenizer {its}, not this"
                f" build's {tokenizer} (another vocabulary): its rows are that tokenizer's"
                f" token ids; build with --tokenizer {its}, or build again from the sources"
                f" its manifest lists ({folder / 'manifest.json'}, inputs) with this tokenizer"
            )
    return None


def _recorded_inputs(manifest: dict[str, Any]) -> list[Path]:
    """The data files a set's manifest lists as read (``inputs[].files[].path``)."""
    inputs = manifest.get("inputs")
    files = [
        f.get("path")
        for entry in (inputs if isinstance(inputs, list) else [])
        if isinstance(entry, dict) and isinstance(entry.get("files"), list)
        for f in entry["files"]
        if isinstance(f, dict)
    ]
    return [Path(f) for f in files if isinstance(f, str) and not f.startswith(HUB_PREFIX)]


def set_overlap_problem(sources: list[Source]) -> str | None:
    """Why a built set among ``sources`` is refused beside the sources it was built from (its
    manifest lists one of them, or a file inside a source folder), or None: ``draftset build
    g/* --out g3`` once ``g/o`` stood there read the set's rows again as pretokenized rows,
    which exact dedup does not match to their source rows (each trained twice, exit 0)."""
    local = [
        (source, Path(source.path).expanduser().resolve())
        for source in sources
        if not str(source.path).startswith(HUB_PREFIX)
    ]
    for source, path in local:
        found = _built_set_of(path)
        if found is None:
            continue
        folder, manifest = found
        for read in _recorded_inputs(manifest):
            for _, other in local:
                if other in (path, folder):
                    continue  # the set itself
                if read == other or other in read.parents:
                    return (
                        f"{source.path}: a set draftset built from {read}, a source of this"
                        " build too: its rows would be read twice (a wildcard such as g/*"
                        " matching an earlier output?); leave the set out, or give its"
                        " sources alone"
                    )
    return None


def check_set_sources(sources: list[Source], tokenizer: str) -> None:
    """`set_tokenizer_problem` before the tokenizer loads, for a tokenizer folder holding a
    tokenizer.json (a hub id, or a folder without one, is judged once the tokenizer is
    loaded: `pipeline.build`)."""
    if not any(_built_set_of(path) for path in local_sources(sources)):
        return
    if problem := set_overlap_problem(sources):
        raise PreflightError(problem)
    folder = Path(tokenizer).expanduser()
    sample = folder_vocabulary_sample(folder) if folder.is_dir() else None
    if problem := set_tokenizer_problem(sources, tokenizer, sample):
        raise PreflightError(problem)
