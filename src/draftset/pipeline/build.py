"""The build job: read → normalize → render & mask → encode → write → account.

The main process reads and normalizes (cheap, sequential, deterministic) and hands batches to
worker processes that render, mask and encode (the expensive part). Results come back in
submission order through a bounded window, so memory stays flat and the output is identical for
any worker count. Workers are started with ``spawn``: the Rust tokenizer's thread pool does not
survive ``fork``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from draftset.checks.verify import fast_checks
from draftset.config.options import BuildOptions
from draftset.config.preflight import check_build
from draftset.core import reasons
from draftset.core.counters import Accounting
from draftset.core.errors import RunError
from draftset.core.records import Normalized, PromptOnly, Reject
from draftset.core.step import Sink
from draftset.core.words import plural
from draftset.engine.base import Engine
from draftset.engine.helper import (
    MainGuardMissing,
    Sidecar,
    SidecarError,
    import_tokenizer_loader,
    release_memory,
    uses_helper,
)
from draftset.engine.inline import InlineEngine
from draftset.engine.pool import LocalPoolEngine
from draftset.engine.worker import load_and_keep
from draftset.mask.encode import EncodedRow
from draftset.mask.step import ItemResult, MaskConfig, count_results
from draftset.mask.template import (
    ChatTemplate,
    TemplateInfo,
    TemplateSpec,
    TokenizerError,
    describe_template,
    load_template_info,
)
from draftset.output import writer_class
from draftset.output.base import Writer
from draftset.output.folder import finalize_output, prepare_output
from draftset.output.readback import CheckResult, open_output
from draftset.output.vocab import (
    load_token_freq_pt,
    save_token_freq_pt,
    write_draft_vocab,
    write_token_freq,
)
from draftset.pipeline.manifest import build_manifest, write_manifest
from draftset.select.mix import Selection, plan_selection, selection_total
from draftset.sources.read import HUB_PREFIX, Source, scan_source
from draftset.sources.shapes import check_row_shapes

BATCH_ROWS = 64
ADVISORY_CHECKS = frozenset({"drafter_fitness"})
"""Fast checks that advise (DFlash fitness) and do not fail a build."""


@dataclass
class BuildResult:
    out: Path
    accounting: Accounting
    manifest: dict[str, Any]
    notes: list[str]
    seconds: float
    checks: list[CheckResult] = field(default_factory=list)  # verify's fast checks, after
    finalized: bool = True  # False: no row to write, so no folder was created (or replaced)

    @property
    def ok(self) -> bool:
        """What `draftset build` exits 0 on: a set was written and its fast checks pass
        (drafter fitness is advice for DFlash training, not an integrity failure)."""
        return self.finalized and not any(
            c.failed for c in self.checks if c.name not in ADVISORY_CHECKS
        )

    @property
    def counts(self) -> dict[str, Any]:
        """The run's totals, as in the manifest's ``counts.total`` (read, written, rejected...)."""
        return self.accounting.to_json()["total"]

    @property
    def per_source(self) -> dict[str, dict[str, Any]]:
        """The same counts per source (the manifest's ``counts.per_source``)."""
        return self.accounting.to_json()["per_source"]

    @property
    def rows(self) -> int:
        """Rows in the set (several per input row with ``turns="each"``)."""
        return self.accounting.total().rows_out

    def row(self, index: int) -> dict[str, Any]:
        """One row of the written set: id, source, input_ids, loss_mask (numpy), seq_len."""
        return open_output(self.out).row(index)


# --- sampling -----------------------------------------------------------------------------------
def _batched(items: Iterator[Normalized], size: int) -> Iterator[list[Normalized]]:
    batch: list[Normalized] = []
    for it in items:
        batch.append(it)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class _JsonlSink:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.lines = 0

    def write(self, obj: dict[str, Any]) -> None:
        self.f.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.lines += 1

    def close(self) -> None:
        self.f.close()


def run_build(
    opts: BuildOptions,
    on_progress: Callable[[int, int], None] | None = None,
    helper: Sidecar | None = None,
) -> BuildResult:
    """Run the whole job, then verify's fast checks on the output.

    Raises on usage errors; returns counts (invariant already checked) and the checks.
    ``helper``: the helper process, when the caller started it ahead (`api.build`); the build
    uses it if it needs one, and stops it.
    """
    t0 = time.monotonic()
    opts = check_build(opts)  # before any work: output path, template file, options
    check_row_shapes(opts.sources)  # a source of unknown rows: exit 2 before the tokenizer
    spec = opts.template_spec()
    workers = opts.workers or os.cpu_count() or 1
    if not uses_helper(opts.workers, opts.engine):  # inline: the driver runs the row step
        if helper is not None:
            helper.kill()
        template = ChatTemplate(spec)
        info = describe_template(template, opts.target_vocab_size)
        with InlineEngine(template) as engine:
            return _run(
                _Stage(opts, spec, engine, lambda: info, lambda: True, None), on_progress, t0
            )
    # The template loads once, in the helper process (fail fast, fingerprint, vocab size),
    # while the workers start and the driver reads ahead: the driver neither renders nor
    # imports torch through AutoTokenizer, and workers render from the kit. With the local
    # engine the helper keeps the template and is one of the workers itself.
    with helper or Sidecar() as side:
        # the head of the load (at once when the helper was started ahead: api.build)
        imported = side.submit(import_tokenizer_loader)
        load = load_and_keep if opts.engine == "local" else load_template_info
        pending = side.submit(load, spec, opts.target_vocab_size)
        side.submit(release_memory)  # then drop the load's garbage, off the critical path

        def loaded() -> TemplateInfo:
            try:
                return side.result(pending, f"loading tokenizer {spec.tokenizer!r}")
            except MainGuardMissing:  # the caller's script, not the tokenizer (docs/api.md)
                raise
            except SidecarError as exc:
                raise TokenizerError(str(exc)) from exc

        with _engine(opts, workers, side, imported) as engine:  # (Ray's overlaps the load too)
            return _run(_Stage(opts, spec, engine, loaded, pending.done, side), on_progress, t0)


def _engine(opts: BuildOptions, workers: int, side: Sidecar, imported: Future[None]) -> Engine:
    """The engine that runs the row step on ``workers`` cores (started before the template
    has loaded, so worker start-up overlaps it); locally, the helper is one of them, and the
    pool's processes start once the helper has ``imported`` the tokenizer loader."""
    if opts.engine == "ray":
        from draftset.engine.ray import RayEngine  # lazy: only --engine ray loads Ray's engine

        return RayEngine(opts.workers, opts.ray_address)  # 0 workers: the cluster's CPUs
    return LocalPoolEngine(workers, helper=side, start_after=imported)


def mask_config(opts: BuildOptions, spec: TemplateSpec, info: TemplateInfo) -> MaskConfig:
    """What every worker needs to run the row step: the loaded template's kit and the rules."""
    return MaskConfig(
        spec=spec,
        kit=info.kit,
        rules=opts.length_rules(),
        mode=opts.turns,
        placeholders=opts.placeholders,
        vocab_size=info.vocab_size,
        render_timeout=opts.render_timeout,
    )


@dataclass
class _Stage:
    """How this build runs its row step: the engine, and where the template loads."""

    opts: BuildOptions
    spec: TemplateSpec
    engine: Engine
    loaded: Callable[[], TemplateInfo]  # waits for the template
    ready: Callable[[], bool]  # has it loaded yet? (read ahead until then)
    side: Sidecar | None  # the helper process (None: inline, everything in the driver)

    def in_helper(self, what: str, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        """``fn`` run in the helper process (which has torch), or None: run it here."""
        side = self.side
        if side is None:
            return None
        return lambda *args: side.call(what, fn, *args)

    def prefetched(
        self, what: str, fn: Callable[[Path], Any], path: Path
    ) -> Callable[..., Any] | None:
        """``fn(path)`` started in the helper now (the caller goes on meanwhile); the callable
        returned hands over its result. None (run it here, when asked) without a helper."""
        side = self.side
        if side is None:
            return None
        pending = side.submit(fn, path)
        return lambda *_: side.result(pending, what)


# Rows read, normalized and pickled for the workers while the template loads (the loader is
# one thread, so a core would sit idle); pickles are ~3x smaller than the live objects.
READ_AHEAD_BYTES = 64_000_000


def _read_ahead(batches: Iterator[list[Normalized]], ready: Callable[[], bool]) -> deque[bytes]:
    ahead: deque[bytes] = deque()
    size = 0
    while size < READ_AHEAD_BYTES and not ready():
        batch = next(batches, None)
        if batch is None:
            break
        ahead.append(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
        size += len(ahead[-1])
    return ahead


def _drain(ahead: deque[bytes]) -> Iterator[bytes]:
    """The read-ahead batches, each let go once handed over (not kept for the whole run).

    Once all are handed over, their heap pages go back to the OS (up to 64 MB that glibc would
    otherwise keep for the rest of the run).
    """
    if not ahead:
        return
    while ahead:
        yield ahead.popleft()
    release_memory()


def _run(stage: _Stage, on_progress: Callable[[int, int], None] | None, t0: float) -> BuildResult:
    opts = stage.opts
    names = [s.name for s in opts.sources]
    acct = Accounting(names)
    selection = opts.selection_spec()
    plan = None if selection.mix else plan_selection(opts.sources, opts.max_samples, opts.seed)
    total = selection_total(plan) if plan else 0
    skipped = {s.name: _skipped_files(s) for s in opts.sources}
    notes = [_skipped_note(name, entries) for name, entries in skipped.items() if entries]
    made = [d for d in (opts.out.absolute(), *opts.out.absolute().parents) if not d.exists()][1:]
    try:
        tmp = prepare_output(opts.out, opts.overwrite)
    except OSError as exc:
        _remove_empty(made)
        raise OutputWriteError(f"cannot create {opts.out}: {exc.strerror or exc}") from exc
    # what a failure must close before the folder goes (not left open until garbage collection)
    batches: Iterator[list[Normalized]] | None = None
    writer: Writer | None = None
    sinks: list[_JsonlSink] = []
    try:
        selected = Selection(selection, plan)
        batches = _batched(selected.rows(), BATCH_ROWS)
        ahead = _read_ahead(batches, stage.ready)
        info = stage.loaded()
        stage.engine.start(mask_config(opts, stage.spec, info))
        vocab_size = info.vocab_size
        writer = writer_class(opts.output_format)(tmp, vocab_size)
        rejects = _JsonlSink(tmp / "rejects.jsonl")
        prompts = _JsonlSink(tmp / "prompts.jsonl")
        sinks = [rejects, prompts]
        for done in _drive(
            stage.engine, chain(_drain(ahead), batches), acct, writer, rejects, prompts
        ):
            if on_progress:
                on_progress(done, total or done)
        stage.engine.finish()  # all work is back: the workers exit now
        acct += selected.counts  # the stream is drained: available, read, sampled_out
        note = _no_end_of_turn_note(acct, opts, info)
        if note:
            notes.append(note)
        shards = writer.close()
        rejects.close()
        prompts.close()
        vocab_files = _write_vocab(stage, tmp, writer, vocab_size, notes)
        errors = acct.balance_errors()
        if errors:
            raise AccountingError("accounting does not balance: " + "; ".join(errors))
        if not writer.rows and not acct.total().needs_generation:  # nothing to keep: no folder
            notes += _first_rejects(tmp / "rejects.jsonl")
            shutil.rmtree(tmp)
            _remove_empty(made)
            seconds = time.monotonic() - t0
            return BuildResult(opts.out, acct, {}, notes, seconds, finalized=False)
        manifest = build_manifest(
            opts,
            info,
            acct,
            writer,
            [*shards, *vocab_files],
            tmp,
            skipped,
            engine=stage.engine.describe(),
            selection=selection,
            mixture=selected.report,
        )
        write_manifest(tmp, manifest)
        finalize_output(tmp, opts.out)
    except BaseException as exc:  # nothing half-written stays behind, whatever the failure
        _let_go(batches, writer, sinks)
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(made)
        if isinstance(exc, OSError) and _is_disk_error(exc):
            raise OutputWriteError(f"cannot write {opts.out}: {exc.strerror or exc}") from exc
        raise
    seconds = time.monotonic() - t0
    checks = []
    if writer.rows or acct.total().needs_generation:
        pt = opts.out / "token_freq.pt"  # read in the helper while the checks recount here
        load_pt = (
            stage.prefetched("reading token_freq.pt", load_token_freq_pt, pt)
            if pt.is_file()
            else None
        )
        checks = fast_checks(opts.out, load_pt=load_pt)
    return BuildResult(opts.out, acct, manifest, notes, seconds, checks)


def _let_go(
    batches: Iterator[list[Normalized]] | None, writer: Writer | None, sinks: list[_JsonlSink]
) -> None:
    """After a failure: close the input stream (and so the source file it reads), the open
    shard and the JSONL files, each whatever the others do; the failure itself is raised next."""
    steps = [getattr(batches, "close", None), writer and writer.abandon, *(s.close for s in sinks)]
    for step in steps:
        if step is not None:
            with contextlib.suppress(Exception):
                step()


def _drive(
    engine: Engine,
    batches: Iterator[list[Normalized] | bytes],
    acct: Accounting,
    writer: Writer,
    rejects: _JsonlSink,
    prompts: _JsonlSink,
) -> Iterator[int]:
    """The engine's results, counted and written in order; yields the input rows done so far."""
    done = 0
    for results in engine.map(batches):
        acct += count_results(results)  # pure: any engine's workers could count a batch
        _write(results, writer, rejects, prompts)
        done += len(results)
        yield done


def _write_vocab(
    stage: _Stage, tmp: Path, writer: Writer, vocab_size: int, notes: list[str]
) -> list[Path]:
    """token_freq (.npy, and .pt through the helper when torch is there) and, when asked,
    the draft vocabulary d2t/t2d; returns the files written."""
    note = write_token_freq(
        tmp, writer.token_freq, stage.in_helper("writing token_freq.pt", save_token_freq_pt)
    )
    if note:
        notes.append(note)
    files = [tmp / "token_freq.npy"]
    if (tmp / "token_freq.pt").exists():
        files.append(tmp / "token_freq.pt")
    size = stage.opts.draft_vocab_size
    if size:
        files += write_draft_vocab(tmp, writer.token_freq, size, vocab_size)
    return files


def _no_end_of_turn_note(acct: Accounting, opts: BuildOptions, info: TemplateInfo) -> str:
    """Once per run: the template writes no stop token after some answers (GLM-4.5's serving
    template after any answer, Gemma-4 after tool calls), so those turns stay context."""
    n = acct.total().context_turns.get(reasons.TURN_NO_END_OF_TURN, 0)
    if not n:
        return ""
    name = Path(opts.chat_template_path).name if opts.chat_template_path else opts.tokenizer
    return (
        f"{n:,} assistant turns are context only: template {name} writes none of the stop"
        f" tokens ({', '.join(info.kit.eot_tokens)}) after them (no_end_of_turn)"
    )


class AccountingError(RunError):
    """read != written + rejected + needs_generation: a bug, never a success."""


class OutputWriteError(RunError):
    """The output could not be written (disk full, quota, read-only): exit 1, nothing left."""


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


def _is_disk_error(exc: OSError) -> bool:
    # pyarrow's IO errors carry the OS message but not always the errno
    return exc.errno in _DISK_ERRNOS or "No space left on device" in str(exc)


def _skipped_files(source: Source) -> list[dict[str, str]]:
    """Entries of a source folder skipped on purpose (hidden, unsupported type)."""
    if str(source.path).startswith(HUB_PREFIX):
        return []
    return scan_source(source.path)[1]


def _skipped_note(name: str, entries: list[dict[str, str]]) -> str:
    shown = ", ".join(f"{e['path']} ({e['why']})" for e in entries[:5])
    more = f" and {len(entries) - 5} more" if len(entries) > 5 else ""
    return (
        f"source {name}: {plural(len(entries), 'entry')} skipped on purpose: {shown}{more}"
        " (all listed in manifest.json)"
    )


def _remove_empty(folders: list[Path]) -> None:
    """Remove the parent folders this run created (deepest first), if still empty."""
    for d in folders:
        try:
            d.rmdir()
        except OSError:
            return


def _first_rejects(path: Path, n: int = 3) -> list[str]:
    """The first reject messages, shown when no folder is kept to read them from."""
    notes = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            notes.append(f"reject {r.get('id') or r.get('row')}: {r['reason']}: {r['message']}")
            if len(notes) >= n:
                break
    return notes


def _write(
    results: list[ItemResult],
    writer: Sink[Iterable[EncodedRow]],
    rejects: Sink[dict[str, Any]],
    prompts: Sink[dict[str, Any]],
) -> None:
    """A batch's rows, reject lines and prompts, written in order (on the driver)."""
    for res in results:
        item = res.item
        if isinstance(item, Reject):
            rejects.write(item.to_json())
            continue
        if isinstance(item, PromptOnly):
            line: dict[str, Any] = {"id": item.id, "messages": item.messages}
            if item.tools:
                line["tools"] = item.tools
            line["metadata"] = {"source": item.source, "row": item.row}
            prompts.write(line)
            continue
        for r in res.rejects:
            rejects.write(r.to_json())
        if res.rows:
            writer.write(res.rows)
