"""Resuming a `generate` run exactly once by id: the rows already done, and refusing answers made
with other settings, another model, or by something that is not `generate`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from draftset.config.fields import option_name, switch_name
from draftset.config.schema import GenerateArgs
from draftset.core.ids import IdRegistry
from draftset.generation.dialog import Job
from draftset.generation.http import EndpointPool
from draftset.generation.inputs import iter_inputs
from draftset.generation.options import GenerateOptions, GenerateUsageError
from draftset.generation.outcomes import RETRYABLE_REASONS, GenerateResult
from draftset.generation.store import (
    CannotStart,
    drop_ids,
    errors_path,
    first_line,
    read_run,
    recover,
    run_path,
    write_run,
)


def done_ids(opts: GenerateOptions, result: GenerateResult) -> IdRegistry:
    """Keys of the rows already done (in either file), after cutting torn tails; a row whose
    input changed since its line was written is refused (an answer) or tried again (an error):
    `check_inputs`, one pass over the inputs before any request."""
    errs = errors_path(opts.out)
    if opts.retry_errors and errs.exists():
        found = recover(errs)
        if any(found.reasons.get(r) for r in RETRYABLE_REASONS):
            drop_ids(errs, _ids_with_reasons(errs, RETRYABLE_REASONS))
    answers, errors = recover(opts.out), recover(errs)
    result.torn_bytes += answers.torn_bytes + errors.torn_bytes
    if answers.inputs or errors.inputs or errors.unread:
        retry = check_inputs(opts, answers.inputs, errors.inputs, errors.unread)
        if retry:
            drop_ids(errs, retry)
            errors = recover(errs)
    result.answered_before = answers.lines
    result.errors_before.update(errors.reasons)
    for reason, message in errors.examples.items():  # a rerun's line says what the first said
        result.examples.setdefault(reason, message)
    done = IdRegistry()
    for found in (answers, errors):
        for i in found.ids:
            done.claim(i)
    return done


def check_inputs(
    opts: GenerateOptions,
    answered: dict[str, str],
    errored: dict[str, str],
    unread: set[str] | None = None,
) -> set[str]:
    """Compare every input row with the digest its line recorded (`Job.input_digest`): an
    answered row edited under its id, or one that no longer reads, is refused
    (`GenerateUsageError`: the answer is to the old question); the ids of errored rows that
    changed, and of rows that did not read (``unread``) and read now, are returned, to be
    tried again. One pass over the inputs before any request."""
    unread = unread or set()
    retry: set[str] = set()
    for item in iter_inputs(opts.sources):
        key = item.id if isinstance(item, Job) else str(item.get("id"))
        if key in answered:
            if not isinstance(item, Job):
                raise GenerateUsageError(
                    f"row {key!r} was answered but no longer reads ({item.get('reason')}:"
                    f" {item.get('message')}): fix the row, or {_restart()} to answer every row"
                    " again"
                )
            if item.input_digest() != answered[key]:
                raise GenerateUsageError(
                    f"row {key!r} changed since its answer was written to {opts.out} (its"
                    f" messages or tools differ): {_restart()} answers every row again, or give"
                    " changed rows new ids"
                )
        elif isinstance(item, Job) and _error_is_stale(item, errored, unread):
            retry.add(key)
    return retry


def _restart() -> str:
    """``--restart`` on the command line (`draftset generate`'s and `draftset run`'s), the
    API's ``restart=True`` (`api.generate`'s and `api.run`'s keyword)."""
    return switch_name(GenerateArgs, "restart")


def _error_is_stale(job: Job, errored: dict[str, str], unread: set[str]) -> bool:
    """The row's error line is about another version of it: recorded for other content, or
    for a row that did not read then (it reads now: fixed)."""
    if job.id in unread:
        return True
    return job.id in errored and job.input_digest() != errored[job.id]


def _ids_with_reasons(path: Path, wanted: frozenset[str]) -> set[str]:
    ids = set()
    with path.open("rb") as f:
        for line in f:
            obj = json.loads(line)
            if obj.get("reason") in wanted:
                ids.add(obj["id"])
    return ids


def previous_run(opts: GenerateOptions) -> dict[str, Any] | None:
    """What the answers file beside ``opts.out`` was generated with (None: nothing to resume).

    Refuses (`GenerateUsageError`) a file that `generate` did not write, also with --restart.
    """
    out, errs = opts.out, errors_path(opts.out)
    present = [p for p in (out, errs) if p.exists() and p.stat().st_size > 0]
    run = read_run(out)
    if present and run is None:
        run = _legacy_run(out, errs)  # answers of a draftset before the run file, or not ours
    return run if present else None


def remove_previous(out: Path) -> None:
    """``--restart``: remove the previous run's output, errors and run file (checked to be
    `generate`'s by `previous_run`), saying so on stderr."""
    removed = [p for p in (out, errors_path(out), run_path(out)) if p.exists()]
    for p in removed:
        p.unlink()
    if removed:
        names = ", ".join(str(p) for p in removed)
        print(f"draftset: {_restart()}: removed the previous run's {names}", file=sys.stderr)


def _legacy_run(out: Path, errs: Path) -> dict[str, Any]:
    """Settings read back from the first output line of a file without a run file; a file whose
    lines are not `generate`'s is refused (never appended to, never removed)."""
    try:
        first = first_line(out)
        first_error = first_line(errs)
    except OSError as exc:
        raise GenerateUsageError(f"cannot read {out}: {exc}") from None
    meta = (first or {}).get("metadata")
    ours_out = first is None or (
        isinstance(meta, dict) and isinstance(meta.get("sampling"), dict) and "answers" in meta
    )
    ours_err = first_error is None or isinstance(first_error.get("reason"), str)
    if not (ours_out and ours_err) or (first is None and first_error is None):
        # name the file that is there and not ours (only the errors file may exist)
        theirs = out if out.exists() and (not ours_out or first_error is None) else errs
        raise GenerateUsageError(
            f"{theirs} exists and was not written by draftset generate "
            f"(no {run_path(out).name}); choose another {option_name(GenerateArgs, 'out')}"
        )
    if not isinstance(meta, dict):
        return {"legacy": True, "settings": None, "model": None}
    kwargs = dict(meta.get("chat_template_kwargs") or {})
    kwargs.pop("enable_thinking", None)
    return {
        "legacy": True,
        "settings": {"sampling": meta.get("sampling"), "chat_template_kwargs": kwargs},
        "model": meta.get("model"),
    }


def check_and_record(
    opts: GenerateOptions, pool: EndpointPool, previous: dict[str, Any] | None
) -> dict[str, Any]:
    """Refuse to resume answers made with other settings or another model; write the run file."""
    settings = opts.settings()
    root = pool.root  # every reachable endpoint serves the model from it (`_served_weights`)
    reported: list[str] = []
    if previous is not None:
        changes = []
        old_model = previous.get("model")
        if old_model is not None and old_model != pool.model:
            changes.append(f"model {old_model!r} -> {pool.model!r}")
        old_root = previous.get("model_root")
        if old_root and root and old_root != root:
            changes.append(f"model weights {old_root!r} -> {root!r}")
        old = previous.get("settings")
        if old is not None:
            old = dict(old)
            new = {k: v for k, v in settings.items() if k in old or not previous.get("legacy")}
            # a source read another way is a change; a source added or left out is not
            old_inputs, new_inputs = old.pop("inputs", None) or {}, new.pop("inputs", {})
            if isinstance(old_inputs, dict):
                shared = old_inputs.keys() & new_inputs.keys()
                old["inputs"] = {k: old_inputs[k] for k in shared}
                new["inputs"] = {k: new_inputs[k] for k in shared}
            changes += _differences(old, new)
        if changes:
            raise GenerateUsageError(
                f"{opts.out} holds answers generated with other settings: {'; '.join(changes)}. "
                f"Rerun with the same settings to resume, or add {_restart()} to discard them"
            )
        reported = list(previous.get("reported_models") or [])
    run = {
        "model": pool.model,
        "model_root": root,
        "reported_models": reported,
        "settings": settings,
        "endpoints": [ep.url for ep in pool.endpoints],
        "finished": False,  # until this run has ended every row (`record_end`)
    }
    try:
        write_run(opts.out, run)
    except OSError as exc:  # a full disk before the first request: one line, exit 1
        raise CannotStart(run_path(opts.out), exc) from None
    return run


def record_end(opts: GenerateOptions, run: dict[str, Any], result: GenerateResult) -> None:
    """Write into the run file how the run ended: ``finished`` (every input row has its line)
    and the rows answered, errored and not done. `build` reads it beside an answers file: a
    file of a run killed or stopped early builds as any other, so only this says rows are
    missing."""
    not_done = max(0, result.total_rows - result.skipped - result.done)
    run["finished"] = result.aborted is None and not_done == 0
    run["rows"] = {
        "input": result.total_rows,
        "answered": result.answered,
        "errors": dict(sorted(result.error_counts.items())),
        "not_done": not_done,
    }
    write_run(opts.out, run)


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """``name old -> new`` for every setting that changed (nested keys joined with dots; the
    sampling options named by themselves, as on the command line)."""
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        name = key if key == "sampling" or not prefix else f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, "" if key == "sampling" else f"{name}.")
        else:
            out.append(f"{name} {a!r} -> {b!r}")
    return out
