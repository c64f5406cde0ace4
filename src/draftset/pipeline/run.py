"""`draftset run RECIPE.yaml`: raw rows to a verified set, answers from the target, resumable.

Stages, each recorded in ``<work>/state.json`` when finished (``<work>`` defaults to
``<out>.run/`` beside the output folder):

1. **select** — read, normalize, presets, dedup, decontaminate, mix exactly as `build` does, and
   decide which rows need an answer: prompt-only rows, rows whose every answer is a placeholder
   (those turns are dropped: the row becomes a prompt), and with ``regenerate:
   missing_reasoning`` / ``all`` rows without reasoning under a thinking template / every row.
   A prompt that alone leaves no room under ``max_length`` is rejected ``too_long`` here and
   never sent. Writes ``queue.jsonl`` and ``too_long.jsonl``.
2. **generate** — `draftset generate`'s own job over the queue (routing, retries, exactly once
   by id, resume after ``kill -9``) into ``answers.jsonl`` / ``answers.errors.jsonl``.
3. **build** — `build` again over the user's sources with the answers as an overlay
   (`draftset.sources.overlay`): answered rows rejoin their rows by id, keeping source, row and
   id; a
   generation error becomes that row's reject with its reason.
4. **verify** — every check of `draftset verify` (the overlay files are re-read and hashed).
5. **report** — the HTML report beside the set.

A rerun of the same command resumes at the first unfinished stage (answered rows are never
requested again); a rerun with another recipe, other inputs or other generation settings
(including the model the servers serve) is refused naming what changed, unless ``--restart``.
Finished stages are checked, not trusted (`run_resume.recheck`): answer files changed since
generate are refused, a set that is gone is built again from them, one that is there is
verified again; ``retry_errors`` asks again the rows that failed for a passing reason.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftset.checks.verify import run_verify
from draftset.config.fields import option_name
from draftset.config.schema import GenerateSection, RunArgs
from draftset.console import progress_bar
from draftset.core import defaults
from draftset.core.reasons import SERVER_PROMPT_DIFFERS
from draftset.core.words import fmt_counts, plural
from draftset.generation.options import (
    GenerateUsageError,
    api_key_problem,
    check_servers,
    extra_body_clash,
)
from draftset.generation.store import RunLock, StoreError
from draftset.mask.template import resolve_tokenizer_path
from draftset.output.folder import OutputExistsError, is_report_file
from draftset.pipeline.run_answers import (
    answer_queue,
    every_answer_differs,
    generate_options,
    recipe_api_key,
)
from draftset.pipeline.run_resume import (
    OVERLAY_FILES,
    open_state,
    read_run_folder,
    recheck,
    run_begun,
    settings_of,
    work_file_digests,
)
from draftset.pipeline.run_select import select_rows
from draftset.pipeline.run_state import (
    KILL_ENV,
    RUN_LOCK,
    STAGES,
    RunFailed,
    RunOptions,
    RunResult,
    RunState,
    RunUsageError,
    format_timeline,
    maybe_die,
    our_output,
    report_path,
)
from draftset.review.report import write_report
from draftset.sources.shapes import check_row_shapes

if TYPE_CHECKING:
    from draftset.output.readback import CheckResult


# --- stage 3: build with the answers ----------------------------------------------------------
def _run_info(opts: RunOptions, state: RunState) -> dict[str, Any]:
    sel, gen = state.data["select"], state.data.get("generate") or {}
    queued: Counter[str] = Counter()
    for c in sel["queued"].values():
        queued.update(c)
    return {
        "work": str(opts.work_dir.resolve()),
        "model": gen.get("model"),
        "regenerate": opts.generate.regenerate,
        "queued": dict(sorted(queued.items())),
        "queued_per_source": sel["queued"],
        "too_long_prompts": sum(sel["too_long"].values()),
        "answered": gen.get("answers", 0),
        "generation_errors": gen.get("errors", {}),
        "ends_at_tool_call": gen.get("ends_at_tool_call", 0),
        # answers ending with a leaked stop token's text, cut at ingest (docs/generate.md)
        "special_tokens_stripped": gen.get("special_tokens_stripped", 0),
    }


def _build(opts: RunOptions, state: RunState, work: Path, say: Callable[[str], None]) -> Any:
    # lazy: the build job (engines, process pool) loads when used, not at CLI start
    from draftset.pipeline.build import run_build

    _check_out(opts)  # again: a folder may have appeared while the answers came in
    state.save()
    out = opts.build.out
    bopts = replace(
        opts.build,
        # this run's own set, or what the recipe lets it replace: never a set that another
        # run (another --work) puts at out meanwhile (the last build won, both said verified)
        overwrite=opts.build.overwrite or our_output(opts),
        overlay=[str((work / name).resolve()) for name in OVERLAY_FILES],
        run_info=_run_info(opts, state),
    )
    kill = os.environ.get(KILL_ENV) == "build"
    with progress_bar("build", enabled=opts.progress) as bar:

        def tick(done: int, total: int) -> None:
            if bar is not None:
                bar(done, total)
            if kill:
                maybe_die("build")

        try:
            result = run_build(bopts, on_progress=tick)
        except OutputExistsError:  # build's line names --overwrite and --out: the recipe's terms
            raise RunUsageError(
                f"{out} appeared during the build (another run or build writing there?) and was"
                " left as it is; this run's set was not put in its place: set `overwrite: true`"
                " in the recipe to replace it, or name another `out`, then rerun"
            ) from None
    total = result.accounting.total()
    if not result.finalized:  # no set to verify: said here, not as a missing folder later
        where = (
            f"{opts.build.out} is left as it was"
            if opts.build.out.exists()
            else (f"nothing was created at {opts.build.out}")
        )
        raise RunFailed(
            f"build: no rows written ({total.rejected_total:,} rejected:"
            f" {fmt_counts(dict(total.rejected))}); {where}"
        )
    say(
        f"build: {plural(total.written, 'row')} written, {total.rejected_total:,} rejected"
        f" ({fmt_counts(dict(total.rejected))})"
        if total.rejected
        else f"build: {plural(total.written, 'row')} written, none rejected"
    )
    differs = total.rejected.get(SERVER_PROMPT_DIFFERS, 0)
    if why := every_answer_differs(work, opts.build.out, differs):  # not verified, not exit 0
        raise RunFailed(why)
    for note in result.notes:  # what build says beside its table (rows lost with a kept copy)
        say(f"build: note: {note}")
    return result


# --- stages 4 and 5 ---------------------------------------------------------------------------
def _verify(
    opts: RunOptions,
    say: Callable[[str], None],
    show_checks: Callable[[list[CheckResult]], None] | None,
) -> bool:
    # lazy: the build job (engines, process pool) loads when used, not at CLI start
    from draftset.pipeline.build import ADVISORY_CHECKS

    # run_verify records the result beside the set (OUT/verify.json), where `report` reads it
    server = None
    if opts.render_server:
        from draftset.checks.serving import connect  # lazy: as above

        server = connect(opts.render_server)
    checks = run_verify(opts.build.out, speculators=opts.speculators, render_server=server)
    if show_checks is not None:
        show_checks(checks)  # the verdict is the line below (one, not two)
    # drafter fitness is advice for DFlash training, not an integrity failure (as in build)
    passed = not any(c.failed for c in checks if c.name not in ADVISORY_CHECKS)
    say(f"verify: {'passed' if passed else 'FAILED'} ({len(checks)} checks)")
    return passed


def _report(opts: RunOptions, say: Callable[[str], None]) -> Path:
    path = report_path(opts.build.out)
    tmp = path.with_name(f".{path.name}.tmp")
    write_report(opts.build.out, tmp)  # then renamed: a killed run leaves no half report
    maybe_die("report")
    try:
        _check_report_path(path)  # again: the run may have taken hours
    except RunUsageError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    say(f"report: {path}")
    return path


# --- the run ----------------------------------------------------------------------------------
def run(
    opts: RunOptions,
    say: Callable[[str], None] | None = None,
    show_checks: Callable[[list[CheckResult]], None] | None = None,
) -> RunResult:
    """Run (or resume) every stage; returns whether verify passed. `draftset.api.run` makes
    ``opts`` from a recipe. ``say`` receives each stage's line, ``show_checks`` verify's checks
    (nothing is printed here: the command prints them).

    Raises `RunUsageError` (exit 2: bad recipe, or changed settings without ``restart``) and
    `RunFailed` (exit 1: generation could not finish; rerun to resume).
    """
    say = say or (lambda _text: None)
    _check_servers(opts.generate, opts.build.template_kwargs)
    resolve_tokenizer_path(opts.build.tokenizer)  # a missing folder: exit 2 before any work
    _check_apart(opts)
    check_row_shapes(opts.build.sources)  # a source of unknown rows: exit 2 before any work
    settings = settings_of(opts)
    work = opts.work_dir
    # a folder that is no run folder (the user's, a set): refused before its lock is created
    # in it; `open_state` checks again under the lock (see `_run_lock`)
    begun = run_begun(read_run_folder(work))
    if not begun:  # a server down: said now, not after selecting the rows; nothing written
        _check_reachable(opts, opts.generate.model, work)
    with _run_lock(work):  # two runs of one recipe would rewrite each other's files
        return _run_stages(opts, settings, begun, say, show_checks)


def _run_lock(work: Path) -> RunLock:
    """The work folder's `run.lock`, held (flock) for the whole run: released by the kernel
    however the process ends, so never stale.

    Taken only after `read_run_folder` found ``work`` absent, holding nothing but a lock, or
    a run folder: the lock file is never created in a folder of the user's or a set. Two runs
    racing for one folder both pass that check, and the lock lets one in; the state is read
    again under the lock, so a folder that changed in between is still refused (its lock file
    then stays: that window is a folder filled by someone else within milliseconds)."""
    try:
        return RunLock(work, work / RUN_LOCK, command="run", doing="is working in")
    except StoreError as exc:
        raise RunUsageError(str(exc)) from None


def _run_stages(
    opts: RunOptions,
    settings: dict[str, Any],
    begun: bool,
    say: Callable[[str], None],
    show_checks: Callable[[list[CheckResult]], None] | None,
) -> RunResult:
    work = opts.work_dir
    state, resumed = open_state(opts, settings)
    if resumed:  # finished stages are checked, not taken on trust (drops those to redo)
        notes = recheck(opts, state)
        resumed = [s for s in resumed if s in state.done]
        if resumed:
            say(f"resuming {work}: {', '.join(resumed)} already done")
        for note in notes:
            say(note)
    if begun and "generate" not in state.done:  # with the model the run began with
        _check_reachable(opts, state.data.get("model") or opts.generate.model, work)
    result = RunResult(opts.build.out, work, False, state.data, resumed=list(resumed))
    for stage in STAGES:
        if stage in state.done:
            continue
        attempt = state.begin(stage)
        t0 = time.monotonic()
        outcome = "failed"
        try:
            if stage == "select":
                facts = {"select": select_rows(opts, work, say)}
            elif stage == "generate":
                facts = {
                    "generate": answer_queue(opts, state, work, say),
                    # what the build reads from the work folder: a rerun compares (`recheck`)
                    "work_files": work_file_digests(work),
                }
            elif stage == "build":
                _build(opts, state, work, say)
                facts = {}
            elif stage == "verify":
                maybe_die("verify")  # (the crash test's kill: the stage begun, not recorded)
                facts = {"verified": _verify(opts, say, show_checks)}
            else:
                facts = {"report": str(_report(opts, say))}
            outcome = "done"
        except KeyboardInterrupt:
            outcome = "interrupted"
            raise
        finally:
            state.end(attempt, outcome, time.monotonic() - t0)
        state.finish(stage, **facts)
    result.passed = bool(state.data.get("verified"))
    result.report = Path(state.data["report"]) if state.data.get("report") else None
    say("timeline: " + format_timeline(state.data.get("attempts") or []))
    return result


def _check_apart(opts: RunOptions) -> None:
    """The output and the work folder are no source, not inside one, holding none, apart from
    each other, the work folder no file, the output folder one the build may replace (build's
    checks, made before the first stage: the build stage comes after paying for answers)."""
    # lazy: build's preflight loads when a run starts
    from draftset.config.preflight import check_apart_from_sources, local_sources

    sources = local_sources(opts.build.sources)
    check_apart_from_sources("--out", opts.build.out, sources)
    flag = option_name(RunArgs, "work")  # `--work`, the API's `work`
    check_apart_from_sources(flag, opts.work_dir, sources)
    work, out = opts.work_dir, opts.build.out
    if (work.exists() or work.is_symlink()) and not work.is_dir():
        raise RunUsageError(f"{flag} {work} is a file, not a folder")
    real_work, real_out = work.resolve(), out.resolve()
    if real_work.is_relative_to(real_out) or real_out.is_relative_to(real_work):
        raise RunUsageError(
            f"{flag} {work} and the output folder {out} overlap: the build replaces its"
            " output folder; give each its own place"
        )
    _check_out(opts)
    _check_report_path(report_path(out))


def _check_out(opts: RunOptions) -> None:
    """The build stage may put its set at the output folder: a new one, this run's own, or
    (``overwrite: true``) a draftset output; never a file or a folder of the user's."""
    # lazy: build's preflight loads when a run starts
    from draftset.config.preflight import PreflightError, check_output_path
    from draftset.output.folder import foreign_listing, replaceable  # lazy: as above

    out, ours = opts.build.out, our_output(opts)
    if out.is_dir() and not ours and not replaceable(out):
        raise RunUsageError(  # overwrite would not replace it either: never suggest it
            f"output folder {out} exists and is not a draftset output (or holds files draftset"
            " did not write): `overwrite: true` would not replace it either; name a new `out`"
        )
    if out.exists() and not opts.build.overwrite and not ours:
        raise RunUsageError(
            f"output folder exists and was not written by this run: {out}"
            " (set `overwrite: true` in the recipe to replace it)"
        )
    if out.is_dir() and ours and not replaceable(out):
        raise RunUsageError(  # build's line names --out and --overwrite, which run has not
            f"{out}, this run's set, holds files draftset did not write: {foreign_listing(out)};"
            " the build stage would replace only what draftset wrote: move them out, or remove"
            f" {out} to have it built again from the answers in {opts.work_dir} (nothing is"
            " asked again)"
        )
    try:  # the build stage replaces it (overwrite): a draftset output, nothing else
        check_output_path(out, True, [], [])
    except PreflightError as exc:
        raise RunUsageError(str(exc)) from None


def _check_report_path(path: Path) -> None:
    """The report is renamed over ``path`` at the end: only over a page `draftset report`
    wrote (checked before the first stage, and again before the rename)."""
    if (path.exists() or path.is_symlink()) and not (path.is_file() and is_report_file(path)):
        raise RunUsageError(
            f"{path} exists and is not a report draftset wrote; `draftset run` writes its"
            " report there: move it, or choose another out"
        )


def _check_reachable(opts: RunOptions, model: str | None, work: Path) -> None:
    """Every endpoint down (or serving another model than the recipe's): exit 2 before the
    first stage, one line. (Found by the first request before: after selecting every row.)"""
    from draftset.generation.job import (  # lazy: as above
        ModelNotServed,
        NoCommonModel,
        Unreachable,
        check_reachable,
    )

    try:
        check_reachable(generate_options(opts, work / "answers.jsonl", model))
    except Unreachable as exc:
        raise RunUsageError(
            f"{exc}: start the server, or fix generate.endpoints (`draftset build` builds"
            " rows that need no answers without one)"
        ) from None
    except ModelNotServed as exc:  # in the recipe's terms
        raise RunUsageError(exc.wording("generate.model")) from None
    except NoCommonModel as exc:
        raise RunUsageError(exc.wording("set generate.model")) from None


def _check_servers(g: GenerateSection, template_kwargs: dict[str, Any]) -> None:
    """What the schema cannot check alone (`config.schema.GenerateSection` typed the values)."""
    if not g.endpoints:
        raise RunUsageError("generate.endpoints lists no server URL")
    extra = dict(g.extra_body or {})
    try:
        check_servers(list(g.endpoints), g.concurrency, extra, section="generate.")
    except GenerateUsageError as exc:
        raise RunUsageError(str(exc)) from None
    if problem := extra_body_clash(extra, g, template_kwargs, section="generate."):
        raise RunUsageError(problem)
    named = g.api_key_env != defaults.API_KEY_ENV  # the recipe names its own variable
    if named and not os.environ.get(g.api_key_env):  # empty counts as unset, as generate's
        raise RunUsageError(
            f"generate.api_key_env names ${g.api_key_env}, which is not set (or empty): export"
            " it, or leave api_key_env out for a server without a key"
        )
    key = recipe_api_key(g.api_key_env)
    if problem := api_key_problem(key, "from the environment"):
        raise RunUsageError(problem)
