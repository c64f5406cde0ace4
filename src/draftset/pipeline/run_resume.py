"""What decides a run's set (recipe, input files by sha256, generation settings): a rerun whose
settings differ from the state's is refused, naming what changed."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from draftset.core.words import fmt_counts, plural
from draftset.generation.outcomes import RETRYABLE_REASONS
from draftset.generation.store import RunLock, StoreError, recover
from draftset.mask.template import tokenizer_files_fingerprint
from draftset.output.folder import inside_a_set, remove_output, remove_stale_tmp
from draftset.pipeline.run_state import (
    LOCK_FILES,
    STAGES,
    STATE_FORMAT,
    WORK_FILES,
    RunOptions,
    RunState,
    RunUsageError,
    our_output,
    report_path,
)
from draftset.sources.read import HUB_PREFIX, describe_inputs, sha256_file

STATE_FILES = ("state.json", "state.json.tmp")
"""The work files `--restart` removes last (`_clean`): what makes the folder a run's."""

_FREE_GENERATE_KEYS = {
    "endpoints",
    "api_key_env",
    "concurrency",
    "request_timeout",
    "max_retries",
}


def settings_of(opts: RunOptions) -> dict[str, Any]:
    """What decides the final set: recipe, input files (sha256) and generation settings."""
    b = opts.build
    skip = {"sources", "out", "workers", "engine", "ray_address", "overwrite"}
    skip |= {"overlay", "run_info", "given_paths"}
    recipe = {k: v for k, v in asdict(b).items() if k not in skip}
    recipe["tokenizer"] = tokenizer_identity(b.tokenizer)
    if b.chat_template_path:
        recipe["chat_template_path"] = _real(b.chat_template_path)
    recipe["decontaminate"] = [_real(p) for p in b.decontaminate]
    recipe["sources"] = [
        {
            "name": s.name,
            "path": _real(s.path),
            "format": s.format,
            "fields": s.fields,
            "weight": s.weight,
            "count": s.count,
            "preset": s.preset,
        }
        for s in b.sources
    ]
    inputs = {
        s.name: [[_real(f["path"]), f["sha256"]] for f in describe_inputs(s)] for s in b.sources
    }
    gen = {k: v for k, v in opts.generate.model_dump().items() if k not in _FREE_GENERATE_KEYS}
    gen["extra_body"] = gen["extra_body"] or {}  # as recorded before the schema: a mapping
    # files the build reads besides the sources, by content: an edited template or benchmark
    # is a change, as an edited source is (verify would fail the set the resume calls done)
    files = {
        "chat_template_path": _sha256_or_none(b.chat_template_path),
        "decontaminate": [_sha256_or_none(p) for p in b.decontaminate],
    }
    settings = {"recipe": recipe, "inputs": inputs, "generate": gen, "files": files}
    return json.loads(json.dumps(settings))


def _sha256_or_none(path: str | Path | None) -> str | None:
    if path is None or not Path(path).expanduser().is_file():
        return None  # no such file: preflight says so (or a hub name)
    return sha256_file(Path(path).expanduser())


def _real(path: str | Path) -> str:
    """A local path resolved (``tok``, ``./tok/`` and ``/abs/tok`` are one folder); an ``hf:``
    source as it is."""
    text = str(path)
    return text if text.startswith(HUB_PREFIX) else str(Path(text).expanduser().resolve())


def tokenizer_identity(name: str) -> str:
    """A local tokenizer folder by its content (``sha256:...`` of its files: moved or spelled
    otherwise it is the same tokenizer, edited in place it is not); a hub id as it is."""
    path = Path(name).expanduser()
    return f"sha256:{tokenizer_files_fingerprint(path)}" if path.is_dir() else name


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
    """A state file's settings as this version records them: a run begun when the tokenizer
    was recorded by its path compares by that folder's content now, its paths resolved."""
    recipe = settings.get("recipe")
    if not isinstance(recipe, dict):
        return settings
    recipe = dict(recipe)
    tok = recipe.get("tokenizer")
    if isinstance(tok, str) and not tok.startswith("sha256:"):
        recipe["tokenizer"] = tokenizer_identity(tok)
    for s in recipe.get("sources") or ():
        if isinstance(s, dict) and isinstance(s.get("path"), str):
            s["path"] = _real(s["path"])
    out = {**settings, "recipe": recipe}
    inputs = settings.get("inputs")
    if isinstance(inputs, dict):
        out["inputs"] = {
            name: [[_real(f[0]), *f[1:]] if isinstance(f, list) and f else f for f in files]
            for name, files in inputs.items()
            if isinstance(files, list)
        }
    return out


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def changed_settings(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted names of the settings that differ (``recipe.max_length``, ``inputs.prompts``)."""
    a, b = _flatten(old), _flatten(new)
    names = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    # an empty mapping flattens to its own name: named by the keys it gained or lost instead
    names = [n for n in names if not any(m.startswith(n + ".") for m in names)]
    short = []
    for n in names:  # inputs.NAME.0.1 -> inputs.NAME (the file changed)
        parts = n.split(".")
        key = ".".join(parts[:2]) if parts[0] in ("inputs",) else n
        if parts[0] == "recipe" and parts[1] == "sources":
            key = "recipe.sources"
        if key not in short:
            short.append(key)
    return short


def run_begun(data: dict[str, Any] | None) -> bool:
    """Whether a run state (`read_run_folder`'s; None: no run yet) records an attempt or a
    finished stage: one refused before its first stage holds nothing to resume or to keep
    settings for."""
    return data is not None and bool(data.get("attempts") or data.get("done"))


def read_run_folder(work: Path) -> dict[str, Any] | None:
    """The run state in ``work`` (its parsed ``state.json``), or None when ``work`` holds no
    run yet: it does not exist, or holds nothing but a `run.lock`. Any other folder is not a
    run folder: `RunUsageError`. `draftset run` asks before it takes the folder's lock (no lock
    file is created in a folder of the user's, or in a set) and again under the lock."""
    path = work / "state.json"
    if problem := inside_a_set(work, f"--work {work}"):  # the set would fail its own verify
        raise RunUsageError(problem)
    # draftset's locks hold no run (a --restart stopped midway may leave them alone)
    held = [p for p in work.iterdir() if p.name not in LOCK_FILES] if work.is_dir() else []
    if not path.exists():
        if held:
            raise RunUsageError(f"{work} exists and is not a draftset run folder (no state.json)")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # written atomically: whole
    except OSError as exc:
        raise RunUsageError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError:
        raise RunUsageError(f"{path} is not readable JSON") from None
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
        raise RunUsageError(f"{path} is not a draftset run state file")
    return data


def open_state(opts: RunOptions, settings: dict[str, Any]) -> tuple[RunState, list[str]]:
    work = opts.work_dir
    path = work / "state.json"
    data = read_run_folder(work)  # again, under the lock: the folder may have changed
    if data is not None:
        held = [p for p in work.iterdir() if p.name not in LOCK_FILES]
        if not run_begun(data) and set(held) == {path}:
            pass  # no stage began and nothing else is here: a new run, written below
        elif opts.restart:
            _clean(opts, data)
        else:
            old = _comparable(data.get("settings") or {})
            old.setdefault("files", settings["files"])  # begun before files were recorded
            changed = changed_settings(old, settings)
            if changed:
                raise RunUsageError(
                    f"the recipe, inputs or generation settings changed since {work} was"
                    f" started: {', '.join(changed)}; rerun with --restart to start over"
                )
            state = RunState(path, data)
            state.close_killed()
            return state, list(data.get("done") or [])
    work.mkdir(parents=True, exist_ok=True)
    state = RunState.new(path, settings)
    state.save()
    return state, []


def _clean(opts: RunOptions, data: dict[str, Any]) -> None:
    """--restart: remove what this run wrote (its work files, its output), nothing else."""
    work = opts.work_dir
    ours = our_output(opts)
    if ours:
        from draftset.output.folder import foreign_entries  # lazy: build's checks

        theirs = foreign_entries(opts.build.out)
        if theirs:
            raise RunUsageError(
                f"--restart: {opts.build.out} holds files draftset did not write:"
                f" {', '.join(theirs[:5])}; move them out first (nothing was removed)"
            )
    try:  # a generate writing the run's answers (its lock held) would lose them under it
        lock = RunLock(work / "answers.jsonl")
    except StoreError as exc:
        raise RunUsageError(f"--restart: {exc} (nothing was removed)") from None
    # the state goes last: interrupted midway, the folder is still a run's, to restart again
    with lock:
        for name in WORK_FILES:
            if name not in STATE_FILES:
                (work / name).unlink(missing_ok=True)
    remove_stale_tmp(opts.build.out)  # a killed build's folder (marker-checked)
    if ours:
        remove_output(opts.build.out)  # never half a set left at out
    report = report_path(opts.build.out)
    report.with_name(f".{report.name}.tmp").unlink(missing_ok=True)
    if report.exists() and data.get("report"):
        report.unlink()
    for name in STATE_FILES:
        (work / name).unlink(missing_ok=True)


# --- a rerun of a run whose stages are done: the set is checked, not taken on trust -----------
OVERLAY_FILES = ("answers.jsonl", "answers.errors.jsonl", "too_long.jsonl")
"""The work files the build stage reads as the answers overlay (the set's own sources; the
second is the first's `errors_path`)."""


def work_file_digests(work: Path) -> dict[str, str | None]:
    """sha256 of each overlay file (None: absent), recorded when generate finishes: a rerun
    compares them, as it compares the user's inputs (`settings_of`)."""
    return {n: sha256_file(work / n) if (work / n).is_file() else None for n in OVERLAY_FILES}


def _recorded_digests(opts: RunOptions, state: RunState) -> dict[str, str | None] | None:
    """The overlay digests the state recorded; for a run begun before they were recorded,
    those of the set's manifest (`selection.overlay`), when the set is this run's."""
    recorded = state.data.get("work_files")
    if isinstance(recorded, dict):
        return recorded
    if not our_output(opts):
        return None
    try:
        manifest = json.loads((opts.build.out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    listed = (manifest.get("selection") or {}).get("overlay") or []
    return {Path(str(f.get("path"))).name: f.get("sha256") for f in listed if isinstance(f, dict)}


def recheck(opts: RunOptions, state: RunState) -> list[str]:
    """Before a rerun skips finished stages: an overlay file changed since generate finished
    is refused (`RunUsageError`: the set would no longer match what was answered); with
    ``retry_errors`` rows that failed for a passing reason are asked again (generate onward);
    a set that is gone (or not this run's) is built again from the answers; a set that is
    there is verified again (a rerun never says verified without looking). Drops the stages
    to redo from ``state.done``; returns the lines saying why."""
    work, notes = opts.work_dir, []
    if "generate" in state.done:
        recorded = _recorded_digests(opts, state) or {}
        now = work_file_digests(work)
        for name in OVERLAY_FILES:
            if name in recorded and recorded[name] != now[name]:
                what = "is gone" if now[name] is None else "changed"
                raise RunUsageError(
                    f"{work / name} {what} since the generate stage finished (the set is"
                    " built from it); rerun with --restart to answer every row again"
                )
    if opts.retry_errors and "generate" in state.done:
        found = recover(work / "answers.errors.jsonl", truncate=False).reasons
        retry = {r: n for r, n in found.items() if r in RETRYABLE_REASONS}
        if retry:
            rows = plural(sum(retry.values()), "row")
            notes.append(f"--retry-errors: asking again {rows} that failed ({fmt_counts(retry)})")
            _redo(state, "generate")
        else:
            notes.append(
                "--retry-errors: no row failed for a reason worth retrying ("
                + ", ".join(sorted(RETRYABLE_REASONS))
                + ")"
            )
    if "build" in state.done and not our_output(opts):
        what = "is not this run's set" if opts.build.out.exists() else "is gone"
        notes.append(f"{opts.build.out} {what}: building it again from the answers in {work}")
        _redo(state, "build")
    elif "verify" in state.done:
        notes.append(f"{opts.build.out}: verifying the set again")
        _redo(state, "verify")
    return notes


def _redo(state: RunState, stage: str) -> None:
    """Mark ``stage`` and every later one not done (saved: a kill now resumes there)."""
    later = STAGES[STAGES.index(stage) :]
    state.data["done"] = [s for s in state.done if s not in later]
    if "verify" in later:
        state.data.pop("verified", None)
    state.save()
