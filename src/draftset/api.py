"""The Python API: `build`, `verify`, `run`, `report`, `generate` (docs/api.md).

Keyword arguments are named like the command-line options (underscores; the repeatable ones
plural: ``fields``, ``eot_tokens``, ``placeholders``, ``endpoints``), and the CLI is a layer
over these functions: `draftset build` and `draftset verify` parse their options into exactly
these arguments, so the command and the API cannot drift. A recipe path may be given as for the
CLI; arguments that are not None override it. Results are returned, never printed (progress
bars only with ``progress=True``). Errors raise `DraftsetError` subclasses whose ``exit_code``
is the command's (2: unusable arguments or inputs, found before any work; 1: the job failed).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json as _json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftset.core import defaults, reasons
from draftset.core.errors import DraftsetError, UsageError

if TYPE_CHECKING:  # the stage modules load on the first call, not on `import draftset.api`
    from draftset.config.options import BuildOptions
    from draftset.engine.helper import Sidecar
    from draftset.generation.job import GenerateResult
    from draftset.output.readback import CheckResult
    from draftset.pipeline.build import BuildResult
    from draftset.pipeline.run import RunResult
    from draftset.sources.read import Source

__all__ = [
    "DraftsetError",
    "VerifyResult",
    "build",
    "build_options",
    "generate",
    "report",
    "run",
    "verify",
]

ProgressArg = bool | Callable[[int, int], None]


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
    sources: Sequence[str | Path | Source | Mapping[str, Any]] | None = None,
    tokenizer: str | Path | None = None,
    out: str | Path | None = None,
    chat_template: str | Path | None = None,
    template_kwargs: Mapping[str, Any] | str | None = None,
    format: str | None = None,
    fields: Mapping[str, str] | Sequence[str] | None = None,
    preset: str | None = None,
    turns: str | None = None,
    max_length: int | None = None,
    truncation: str | None = None,
    min_supervised_tokens: int | None = None,
    max_samples: int | None = None,
    seed: int | None = None,
    workers: int | None = None,
    engine: str | None = None,
    ray_address: str | None = None,
    draft_vocab_size: int | None = None,
    target_vocab_size: int | None = None,
    eot_tokens: Sequence[str] | str | None = None,
    placeholders: Sequence[str] | str | None = None,
    overwrite: bool | None = None,
    dedup: str | None = None,
    near_dup_threshold: float | None = None,
    decontaminate: Sequence[str | Path] | str | Path | None = None,
    mix: Mapping[str, Any] | None = None,
    render_timeout: float | None = None,
    output_format: str | None = None,
    serving_engine: str | None = None,
    progress: ProgressArg = False,
) -> BuildResult:
    """`draftset build`: tokenize and mask chat data into a verified, fully accounted set.

    ``sources``: paths (``PATH@weight=W`` / ``PATH@count=N`` as on the command line; ``format``,
    ``fields`` and ``preset`` apply to these), `Source` objects, or recipe-style mappings
    (``{"path": ..., "weight": 2}``). Returns the `BuildResult`: ``.ok`` (what the command
    exits 0 on), ``.counts``, ``.per_source``, ``.rows``, ``.checks`` (verify's fast checks),
    ``.row(i)``. Raises `DraftsetError` (``exit_code`` 2) for unusable arguments before any work.
    """
    _not_in_a_spawned_import()
    given = dict(locals())
    del given["progress"]
    helper = _helper_ahead(recipe, workers, engine)
    try:
        opts = build_options(**given)  # the same arguments, merged and checked

        # lazy: stage modules load on the first call, not on import draftset.api
        from draftset.pipeline.build import run_build

        with _progress("build", progress) as update:
            return run_build(opts, on_progress=update, helper=helper)
    finally:
        if helper is not None:  # a usage error, or inline after all (else the build stopped it)
            helper.kill()


def _helper_ahead(recipe: Any, workers: int | None, engine: str | None) -> Sidecar | None:
    """The build's helper process, started before the driver parses the options and imports its
    stage modules (~0.5 s of the template load's critical path), when the arguments alone say
    the build will use one (a recipe may change the engine and workers: then it starts later).
    Its first job imports the tokenizer loader; it is stopped on any error."""
    if recipe is not None:
        return None
    from draftset.engine.helper import Sidecar, import_tokenizer_loader, uses_helper

    if not uses_helper(workers, engine or defaults.ENGINE):
        return None
    side = Sidecar()
    side.submit(import_tokenizer_loader)
    return side


def build_options(
    recipe: str | Path | None = None,
    *,
    sources: Sequence[str | Path | Source | Mapping[str, Any]] | None = None,
    tokenizer: str | Path | None = None,
    out: str | Path | None = None,
    chat_template: str | Path | None = None,
    template_kwargs: Mapping[str, Any] | str | None = None,
    format: str | None = None,
    fields: Mapping[str, str] | Sequence[str] | None = None,
    preset: str | None = None,
    turns: str | None = None,
    max_length: int | None = None,
    truncation: str | None = None,
    min_supervised_tokens: int | None = None,
    max_samples: int | None = None,
    seed: int | None = None,
    workers: int | None = None,
    engine: str | None = None,
    ray_address: str | None = None,
    draft_vocab_size: int | None = None,
    target_vocab_size: int | None = None,
    eot_tokens: Sequence[str] | str | None = None,
    placeholders: Sequence[str] | str | None = None,
    overwrite: bool | None = None,
    dedup: str | None = None,
    near_dup_threshold: float | None = None,
    decontaminate: Sequence[str | Path] | str | Path | None = None,
    mix: Mapping[str, Any] | None = None,
    render_timeout: float | None = None,
    output_format: str | None = None,
    serving_engine: str | None = None,
) -> BuildOptions:
    """`build`'s arguments merged over the recipe and the defaults, and checked: the
    `BuildOptions` a build runs with (also what `draftset run` builds from)."""
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.config.options import BuildOptions
    from draftset.config.recipe import parse_json_object
    from draftset.mask.serving import DEFAULT_SERVING_ENGINE

    conf, srcs = _recipe_and_sources(recipe, sources, format, fields, preset)

    def pick(name: str, value: Any, default: Any) -> Any:
        if value is not None:
            return value
        from_recipe = conf.get(name)
        return default if from_recipe is None else from_recipe

    tok = pick("tokenizer", tokenizer, None)
    out_dir = pick("out", out, None)
    if not tok:
        raise UsageError("--tokenizer is required (or `tokenizer:` in the recipe)")
    if not out_dir:
        raise UsageError("--out is required (or `out:` in the recipe)")
    kwargs = conf.get("template_kwargs") or {}
    if isinstance(template_kwargs, str):  # the command line's JSON text ("" = not given)
        if template_kwargs:
            kwargs = parse_json_object(template_kwargs, "--template-kwargs")
    elif template_kwargs is not None:
        kwargs = dict(template_kwargs)
    template = pick("chat_template", chat_template, None)
    if template and not Path(template).is_file():
        raise UsageError(f"chat template file not found: {template}")
    opts = BuildOptions(
        sources=srcs,
        tokenizer=str(tok),
        out=Path(out_dir),
        chat_template_path=str(template) if template else None,
        template_kwargs=kwargs,
        eot_tokens=_strings(eot_tokens) or _strings(conf.get("eot_tokens")),
        max_length=int(pick("max_length", max_length, defaults.MAX_LENGTH)),
        truncation=pick("truncation", truncation, defaults.TRUNCATION),
        min_supervised_tokens=int(
            pick("min_supervised_tokens", min_supervised_tokens, defaults.MIN_SUPERVISED_TOKENS)
        ),
        turns=pick("turns", turns, defaults.TURNS),
        seed=int(pick("seed", seed, defaults.SEED)),
        max_samples=pick("max_samples", max_samples, None),
        workers=int(pick("workers", workers, defaults.WORKERS)),
        engine=pick("engine", engine, defaults.ENGINE),
        ray_address=pick("ray_address", ray_address, None),
        draft_vocab_size=pick("draft_vocab_size", draft_vocab_size, None),
        target_vocab_size=pick("target_vocab_size", target_vocab_size, None),
        placeholders=_strings(placeholders)
        or _strings(conf.get("placeholders"))
        or reasons.DEFAULT_PLACEHOLDERS,
        overwrite=bool(pick("overwrite", overwrite, False)),
        dedup=pick("dedup", dedup, defaults.DEDUP),
        near_dup_threshold=float(
            pick("near_dup_threshold", near_dup_threshold, defaults.NEAR_DUP_THRESHOLD)
        ),
        decontaminate=list(_strings(decontaminate) or _strings(conf.get("decontaminate"))),
        mix=dict(mix) if mix is not None else conf.get("mix"),
        render_timeout=_seconds(pick("render_timeout", render_timeout, defaults.RENDER_TIMEOUT)),
        output_format=str(pick("output_format", output_format, defaults.OUTPUT_FORMAT)),
        serving_engine=str(pick("serving_engine", serving_engine, DEFAULT_SERVING_ENGINE)),
    )
    if opts.engine != "ray":  # a recipe's ray_address waits for engine: ray; an explicit one
        if ray_address is not None:  # with a local engine is a mistake
            raise UsageError("--ray-address needs --engine ray")
        opts.ray_address = None
    from draftset.config.preflight import check_values  # lazy: see the module's imports

    check_values(opts)
    return opts


def _recipe_and_sources(
    recipe: str | Path | None,
    sources: Sequence[str | Path | Source | Mapping[str, Any]] | None,
    fmt: str | None,
    fields: Mapping[str, str] | Sequence[str] | None,
    preset: str | None,
) -> tuple[dict[str, Any], list[Source]]:
    """The recipe's settings and the sources to read (the arguments' over the recipe's), each
    with a unique name and present on disk (or on the hub)."""
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.config.recipe import load_recipe, unique_names
    from draftset.sources.read import HUB_PREFIX

    conf: dict[str, Any] = {}
    if recipe is not None and not isinstance(recipe, str | os.PathLike):
        raise UsageError(  # build(["a.jsonl"]): the first positional argument is the recipe
            f"recipe must be a path to a recipe file, not {type(recipe).__name__};"
            " pass source files as sources=[...]"
        )
    if recipe is not None:
        conf = load_recipe(Path(recipe))
        if sources is None and not conf.get("sources"):
            raise UsageError(f"recipe {recipe} lists no sources")
    if sources is not None:
        srcs = [_source(s, fmt, fields, preset) for s in sources]
    else:
        srcs = list(conf.get("sources") or [])
    srcs = unique_names(srcs)
    if not srcs:
        raise UsageError("no sources given")
    for s in srcs:
        if not s.path.exists() and not str(s.path).startswith(HUB_PREFIX):
            raise UsageError(f"source not found: {s.path}")
    return conf, srcs


def _seconds(value: Any) -> float:
    """``--render-timeout``: a finite number of seconds >= 0 (0 = no bound)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise UsageError(f"--render-timeout must be a number of seconds >= 0, not {value!r}")
    return seconds


def _strings(value: Any) -> tuple[str, ...]:
    """A repeatable option: one value or a list (a lone string is one value, not characters)."""
    if value is None:
        return ()
    if isinstance(value, str | Path):
        return (str(value),)
    return tuple(str(v) for v in value)


def _source(
    spec: Any, fmt: str | None, fields: Mapping[str, str] | Sequence[str] | None, preset: str | None
) -> Source:
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.config.recipe import (
        SOURCE_KEYS,
        RecipeError,
        parse_fields,
        parse_source_arg,
        source_name,
    )
    from draftset.sources.read import Source

    if isinstance(spec, Source):
        return spec
    if isinstance(spec, Mapping):
        bad = set(spec) - SOURCE_KEYS
        if "path" not in spec or bad:
            raise RecipeError(
                f"source {dict(spec)!r}: needs a path; keys are {sorted(SOURCE_KEYS)}"
            )
        path = Path(spec["path"])
        return Source(
            name=str(spec.get("name") or source_name(path)),
            path=path,
            format=spec.get("format"),
            fields=spec.get("fields"),
            weight=spec.get("weight"),
            count=spec.get("count"),
            preset=spec.get("preset"),
        )
    if isinstance(fields, Mapping):
        mapped: dict[str, str] | None = dict(fields) or None
    else:
        mapped = parse_fields(list(fields) if fields else None)
    return parse_source_arg(str(spec), fmt, mapped, preset)


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
        return not any(c.failed for c in self.checks)

    @property
    def failed(self) -> list[str]:
        """Names of the failing checks."""
        return [c.name for c in self.checks if c.failed]

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """What ``draftset verify --json FILE`` writes."""
        return {
            "dir": self.dir_as_given or str(self.dir),
            "passed": self.ok,
            "checks": [c.to_json() for c in self.checks],
        }


def verify(
    dir: str | Path,
    *,
    tokenizer: str | Path | None = None,
    sample: int | None = None,
    seed: int = 0,
    block_size: int = defaults.BLOCK_SIZE,
    placeholders: Sequence[str] | str | None = None,
    fast: bool = False,
    json: str | Path | None = None,
    speculators: bool = True,
    render_server: str | None = None,
) -> VerifyResult:
    """`draftset verify`: prove a built set is what its manifest says (docs/verify.md).

    ``fast``: only the checks that need neither sources nor tokenizer. ``json``: also write the
    result to that file. A full run records its result in ``dir/verify.json`` (for `report`).
    ``render_server``: URL of a vLLM render server (`vllm launch render`) to compare the rows
    with; an unreachable one is a usage error before any work.
    Raises `DraftsetError` (exit code 2) for unusable arguments or a folder that is not a set.
    """
    _not_in_a_spawned_import()
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.checks.verify import VERIFY_RECORD, VerifyUsageError, fast_checks, run_verify

    if sample is not None and sample < 1:
        raise VerifyUsageError("--sample must be >= 1")
    if block_size < 2:
        raise VerifyUsageError("--block-size must be >= 2")
    server = None
    if render_server:
        if fast:
            raise VerifyUsageError("--render-server needs the full verify (not --fast)")
        from draftset.checks.serving import connect  # lazy, as above

        server = connect(render_server)
    if fast:
        checks = fast_checks(dir, block_size)
    else:
        checks = run_verify(
            dir,
            tokenizer=str(tokenizer) if tokenizer else None,
            sample=sample,
            seed=seed,
            block_size=block_size,
            placeholders=_strings(placeholders) or None,
            speculators=speculators,
            render_server=server,
        )
    recorded = None
    if not fast and not any(c.name == "verify_record" for c in checks):
        recorded = Path(dir) / VERIFY_RECORD
    result = VerifyResult(Path(dir), checks, recorded, fast, str(dir))
    if json:
        Path(json).write_text(
            _json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return result


# --- run, report, generate --------------------------------------------------------------------
def run(
    recipe: str | Path,
    *,
    restart: bool = False,
    endpoints: Sequence[str] | str | None = None,
    tokenizer: str | Path | None = None,
    work: str | Path | None = None,
    workers: int | None = None,
    engine: str | None = None,
    ray_address: str | None = None,
    progress: bool = False,
    speculators: bool = True,
    say: Callable[[str], None] | None = None,
) -> RunResult:
    """`draftset run`: recipe → answers from the target → build → verify → report, resumable.

    ``say`` receives the stage lines the command prints (default: nothing is printed).
    Returns the `RunResult` (``.ok``: verify passed). Raises `RunUsageError` (exit code 2) and
    `RunFailed` (1: generation could not finish; call again to resume).
    """
    _not_in_a_spawned_import()
    # lazy: stage modules load on the first call, not on import draftset.api (and run imports api)
    from draftset.pipeline import run as run_mod

    opts = run_mod.options_from_recipe(
        recipe,
        restart=restart,
        workers=workers,
        engine=engine,
        ray_address=ray_address,
        endpoints=list(_strings(endpoints)) or None,
        work=work,
        progress=progress,
        tokenizer=str(tokenizer) if tokenizer else None,
    )
    opts = replace(opts, speculators=speculators, echo=False)
    return run_mod.run(opts, say=say or (lambda _line: None))


def report(
    dir: str | Path,
    *,
    output: str | Path | None = None,
    tokenizer: str | Path | None = None,
    block_size: int = defaults.BLOCK_SIZE,
) -> Path:
    """`draftset report`: write the self-contained HTML report; returns its path
    (default ``dir/report.html``)."""
    _not_in_a_spawned_import()
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.review.report import write_report

    return write_report(dir, output, str(tokenizer) if tokenizer else None, block_size)


def generate(
    sources: Sequence[str | Path] | str | Path,
    *,
    endpoints: Sequence[str] | str,
    out: str | Path,
    model: str | None = None,
    api_key: str | None = None,
    format: str | None = None,
    fields: Mapping[str, str] | Sequence[str] | None = None,
    preset: str | None = None,
    concurrency: int | None = None,
    request_timeout: float | None = None,
    max_retries: int | None = None,
    backoff: float | None = None,
    backoff_cap: float | None = None,
    health_interval: float | None = None,
    give_up_after: float | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    extra_body: Mapping[str, Any] | str | None = None,
    chat_template_kwargs: Mapping[str, Any] | str | None = None,
    thinking: str | None = None,
    return_token_ids: bool = False,
    keep_length: bool = False,
    retry_errors: bool = False,
    max_response_bytes: int | None = None,
    restart: bool = False,
    tokenizer: str | Path | None = None,
    progress: bool = False,
) -> GenerateResult:
    """`draftset generate`: the target model answers the prompts (docs/generate.md).

    Options left None take `GenerateOptions`' defaults (the command's). Returns the
    `GenerateResult` (``.ok``: every row ended as an answer or an error line). Runs its own
    event loop (inside a running loop, as in Jupyter, await `draftset.generation.job.run_generate`).
    """
    _not_in_a_spawned_import()
    # lazy: stage modules load on the first call, not on import draftset.api
    from draftset.generation.console import progress as generate_progress
    from draftset.generation.job import GenerateOptions, options_from_args, run_generate

    base = {f.name: f.default for f in dataclasses.fields(GenerateOptions)}

    def or_default(value: Any, name: str) -> Any:
        return base[name] if value is None else value

    def as_json(value: Mapping[str, Any] | str | None) -> str | None:
        return _json.dumps(dict(value)) if isinstance(value, Mapping) else value

    args = argparse.Namespace(
        inputs=[str(s) for s in _strings(sources)],
        endpoint=list(_strings(endpoints)),
        out=str(out),
        model=model,
        api_key=api_key,
        format=format,
        field=[f"{k}={v}" for k, v in fields.items()]
        if isinstance(fields, Mapping)
        else (list(fields) if fields else None),
        concurrency=or_default(concurrency, "concurrency"),
        request_timeout=or_default(request_timeout, "request_timeout"),
        max_retries=or_default(max_retries, "max_retries"),
        backoff=or_default(backoff, "backoff_base"),
        backoff_cap=or_default(backoff_cap, "backoff_cap"),
        health_interval=or_default(health_interval, "health_interval"),
        give_up_after=or_default(give_up_after, "give_up_after"),
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        max_tokens=max_tokens,
        seed=seed,
        extra_body=as_json(extra_body),
        chat_template_kwargs=as_json(chat_template_kwargs),
        thinking=thinking,
        return_token_ids=return_token_ids,
        keep_length=keep_length,
        retry_errors=retry_errors,
        preset=preset,
        max_response_bytes=or_default(max_response_bytes, "max_response_bytes"),
        restart=restart,
        tokenizer=str(tokenizer) if tokenizer is not None else None,
    )
    opts = options_from_args(args)
    with generate_progress(enabled=progress) as update:
        return asyncio.run(run_generate(opts, update))
