"""The build job: read → normalize → select → (workers: render & mask → encode → write) → account.

The main process (the driver) reads, normalizes and selects (ordered, stateful, deterministic)
and cuts the selected rows into blocks in input order (`pipeline.block`). The engine's workers
render, mask, encode and **write** each block's own shard(s) into the temporary folder and hand
back counts and shard names, never rows; the driver takes the blocks' results in block order,
adds the counts up, gathers the shards and writes the side files and the manifest. The blocks
depend on the rows alone, so the set is byte-identical for every engine and worker count.
Workers are started with ``spawn``: the Rust tokenizer's thread pool does not survive ``fork``.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import json
import operator
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftset.checks.fast import ADVISORY_CHECKS
from draftset.checks.verify import fast_checks
from draftset.config.fields import option_name
from draftset.config.options import BuildOptions
from draftset.config.preflight import PreflightError, check_build, set_tokenizer_problem
from draftset.config.schema import BuildArgs
from draftset.core import reasons
from draftset.core.counters import Accounting, sampled_rejects_notes
from draftset.core.errors import RunError, mark_set_written
from draftset.core.words import fmt_counts, plural
from draftset.engine.base import Batch, Engine
from draftset.engine.factory import RowStage, open_stage
from draftset.engine.helper import Sidecar
from draftset.generation.store import answers_status, errors_path
from draftset.mask.serving import vllm_own_encoder
from draftset.mask.step import MaskConfig
from draftset.mask.template import TemplateInfo, TemplateSpec
from draftset.output import writer_class
from draftset.output.base import ShardedWriter, Writer, rel_name
from draftset.output.folder import finalize_output, prepare_output, remove_marked
from draftset.output.readback import CheckResult, NotADraftsetError, SetFacts, open_output
from draftset.output.vocab import read_token_freq_pt, write_draft_vocab, write_token_freq
from draftset.pipeline.block import (
    Block,
    BlockJob,
    BlockResult,
    cut_blocks,
    plan_read,
    read_tasks,
    write_results,
)
from draftset.pipeline.manifest import build_manifest, write_manifest
from draftset.select.dedup import copies_lost
from draftset.select.mix import (
    Filters,
    Selection,
    SelectionSpec,
    plan_selection,
    sampling_notes,
    selection_total,
)
from draftset.select.ranged import RangedSelection, ReadTask, SourceRanges, why_driver_reads
from draftset.sources.read import HUB_PREFIX, Source, SourceError, scan_source
from draftset.sources.shapes import check_row_shapes


@dataclass
class BuildResult:
    out: Path
    accounting: Accounting
    manifest: dict[str, Any]
    notes: list[str]
    seconds: float
    checks: list[CheckResult] = field(default_factory=list)  # verify's fast checks, after
    finalized: bool = True  # False: no row to write, so no folder was created (or replaced)
    folder: Path = field(init=False, repr=False, compare=False)
    """``out`` in full, as it was when built: `row` reads it after a notebook's ``%cd``."""

    def __post_init__(self) -> None:
        self.folder = Path(os.path.abspath(self.out))

    def __repr__(self) -> str:
        """One short line (a notebook shows it): the dataclass's own printed the whole manifest
        and every check's details, ~10,000 characters for a 7-row set."""
        c = self.counts
        failed = [ch.name for ch in self.checks if ch.failed]
        return (
            f"BuildResult(out={self.out!r}, ok={self.ok}, rows={self.rows}, read={c['read']},"
            f" written={c['written']}, rejected={c['rejected']},"
            f" needs_generation={c['needs_generation']}, failed_checks={failed},"
            f" seconds={self.seconds:.1f}{'' if self.finalized else ', finalized=False'})"
        )

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
        """One row of the written set: id, source, input_ids, loss_mask (numpy), seq_len, index.

        ``index`` as a list's (negative counts from the end); out of range, an IndexError
        naming the range (the reader's own said only "list index out of range", or pyarrow's
        "Offset must be non-negative"); not an integer, a TypeError."""
        if isinstance(index, bool) or not hasattr(type(index), "__index__"):
            raise TypeError(f"row index must be an integer, got {index!r}")
        index = operator.index(index)  # numpy's integers too, as a list takes them
        out = open_output(self.folder) if self.finalized else None
        if out is not None and out.manifest.get("files") != self.manifest.get("files"):
            # a build over the same folder since (a notebook's second `build(overwrite=True)`):
            # its rows were read under this result's counts
            raise NotADraftsetError(
                f"{self.out} holds another set than this result's (built over it since, or"
                " changed): read its rows from the result of the build that wrote it"
            )
        n = out.num_rows if out is not None else 0
        if not -n <= index < n:
            if out is None:
                raise IndexError(f"row {index} out of range: no set was written ({self.out})")
            if n == 0:  # only prompts for `generate`
                raise IndexError(f"row {index} out of range: the set has no rows")
            raise IndexError(
                f"row {index} out of range: the set has {n} rows (0 to {n - 1}, or -{n} to -1)"
            )
        assert out is not None
        return out.row(index % n)


class _JsonlSink:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.lines = 0

    def write(self, obj: dict[str, Any]) -> None:
        self.write_lines([json.dumps(obj, ensure_ascii=False)])

    def write_lines(self, lines: Iterable[str]) -> None:
        """Lines a worker serialized (one JSON object each), in order."""
        for line in lines:
            self.f.write(line + "\n")
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
    # the benchmark files as their prompts are read (by the driver or each worker): the
    # manifest hashes them at the end, which must be these bytes (`_benchmarks_changed`)
    benchmarks = _states([Path(p) for p in opts.decontaminate])
    source_notes = check_row_shapes(opts.sources)  # unknown rows: exit 2 before the tokenizer
    spec = opts.template_spec()
    # the factory picks the engine (inline, local pool, Ray) and loads the template where
    # that engine wants it: in the driver, or in the helper while the workers start
    with open_stage(
        spec, opts.engine, opts.workers, opts.ray_address, opts.target_vocab_size, helper
    ) as stage:
        return _run(opts, spec, stage, on_progress, t0, source_notes, benchmarks)


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


def _run(
    opts: BuildOptions,
    spec: TemplateSpec,
    stage: RowStage,
    on_progress: Callable[[int, int], None] | None,
    t0: float,
    source_notes: list[str],
    benchmarks: dict[Path, tuple[int, int] | None],
) -> BuildResult:
    names = [s.name for s in opts.sources]
    acct = Accounting(names)
    selection = opts.selection_spec()
    ranges, plan = _plan_reading(opts, selection)
    total = selection_total(plan) if plan else 0
    listing = _SourceListing.of(opts.sources)
    notes = source_notes + listing.notes()
    made, tmp = _temporary_folder(opts)
    held = _Held()  # what a failure must close before the folder goes
    try:
        ranged, selected, info, stream = _start_rows(
            opts, spec, stage, selection, ranges, plan, tmp, held
        )
        # a hub id or a folder without tokenizer.json: known only now (`check_set_sources`)
        if problem := set_tokenizer_problem(
            opts.sources, opts.tokenizer, info.vocabulary_sample_sha256
        ):
            raise PreflightError(problem)
        vocab_size = info.vocab_size
        writer = held.writer = writer_class(opts.output_format)(tmp, vocab_size)
        rejects = _JsonlSink(tmp / "rejects.jsonl")
        prompts = _JsonlSink(tmp / "prompts.jsonl")
        held.sinks = [rejects, prompts]
        read_back = _ReadBack()
        _drive_rows(stage, stream, acct, writer, (rejects, prompts), read_back, on_progress, total)
        acct += selected.counts  # the stream is drained: available, read, sampled_out
        notes += _selection_notes(opts, acct) + _template_notes(opts, acct, info)
        shards = writer.close()
        facts, digests = read_back.named(shards, tmp)
        rejects.close()
        prompts.close()
        notes += _copies_lost_note(selected.filters, tmp / "rejects.jsonl")
        vocab_files, pt_record = _write_vocab(opts, tmp, writer, vocab_size)
        errors = acct.balance_errors()
        if errors:
            raise AccountingError("accounting does not balance: " + "; ".join(errors))
        if not writer.rows and not acct.total().needs_generation:  # nothing to keep: no folder
            notes += _first_rejects(tmp / "rejects.jsonl")
            remove_marked(tmp)
            _remove_empty(made)
            seconds = time.monotonic() - t0
            return BuildResult(opts.out, acct, {}, notes, seconds, finalized=False)
        if problem := _benchmarks_changed(benchmarks):  # before the manifest hashes them
            raise SourceError(problem)
        manifest = build_manifest(
            opts,
            info,
            acct,
            writer,
            [*shards, *vocab_files],
            tmp,
            listing.skipped,
            digests={tmp / name: digest for name, digest in digests.items()},
            # who read the rows: never the set's bytes, only how it was built
            engine={**stage.engine.describe(), "rows_read_by": "workers" if ranged else "driver"},
            selection=selection,
            mixture=selected.report,
            generated=listing.generated,
            token_freq_pt=pt_record,
        )
        _write_and_finalize(opts, tmp, manifest, listing, benchmarks, notes)
    except BaseException as exc:  # nothing half-written stays behind, whatever the failure
        _let_go(stage, held.blocks, held.writer, held.sinks)
        # its marker last: a second Ctrl-C midway leaves a folder the next run still removes
        remove_marked(tmp)
        _remove_empty(made)
        if isinstance(exc, OSError) and _is_disk_error(exc):
            raise OutputWriteError(f"cannot write {opts.out}: {_disk_error(exc)}") from exc
        raise
    seconds = time.monotonic() - t0
    checks = _checks_of_the_set(opts, writer, acct, facts, digests)
    return BuildResult(opts.out, acct, manifest, notes, seconds, checks)


_SamplingPlan = tuple[dict[str, int], dict[str, Any]]
"""`plan_selection`'s: the rows available per source, and each source's chosen rows."""


def _plan_reading(
    opts: BuildOptions, selection: SelectionSpec
) -> tuple[SourceRanges | None, _SamplingPlan | None]:
    """Who reads the rows, and the sampling plan. The workers read their own ranges of the
    sources when they can (`select.ranged`): the ranges are planned first, in one pass over
    each file, and the sampling plan takes its counts from them; else the driver reads, and
    the plan counts the sources itself. No plan for a mix (it plans its own pre-pass)."""
    ranges = None if why_driver_reads(selection) else plan_read(selection)
    plan = (
        None
        if selection.mix
        else plan_selection(
            opts.sources, opts.max_samples, opts.seed, ranges.available if ranges else None
        )
    )
    return ranges, plan


@dataclass
class _SourceListing:
    """Each source's folder listed once, before any row is read: the files and their states
    (compared again when the manifest lists them), the entries skipped, `generate`'s runs."""

    listed: dict[str, dict[Path, tuple[int, int] | None]]
    skipped: dict[str, list[dict[str, str]]]
    generated: dict[str, list[dict[str, Any]]]

    @classmethod
    def of(cls, sources: list[Source]) -> _SourceListing:
        scans = {s.name: _scan(s) for s in sources}
        return cls(
            listed={name: _states(files) for name, (files, _) in scans.items()},
            skipped={name: entries for name, (_, entries) in scans.items()},
            generated={name: _generated(files) for name, (files, _) in scans.items()},
        )

    def notes(self) -> list[str]:
        skipped = self.skipped
        notes = [_skipped_note(n, entries) for n, entries in skipped.items() if entries]
        generated = self.generated
        notes += [note for name, runs in generated.items() for note in _generated_notes(name, runs)]
        return notes


def _temporary_folder(opts: BuildOptions) -> tuple[list[Path], Path]:
    """The folders above ``--out`` this build creates (removed again on failure), and the
    temporary folder the set is written in (absolute: the workers write the blocks' shards into
    it from their own working folders, and the manifest names every file relative to it)."""
    made = [d for d in (opts.out.absolute(), *opts.out.absolute().parents) if not d.exists()][1:]
    try:
        tmp = prepare_output(opts.out, opts.overwrite).absolute()
    except OSError as exc:
        _remove_empty(made)
        raise OutputWriteError(f"cannot create {opts.out}: {exc.strerror or exc}") from exc
    return made, tmp


@dataclass
class _Held:
    """What a failed build must close before its folder goes (`_let_go`): not left open until
    garbage collection. Each is set as soon as it is opened."""

    blocks: Iterator[Block] | None = None
    writer: Writer | None = None
    sinks: list[_JsonlSink] = field(default_factory=list)


def _start_rows(
    opts: BuildOptions,
    spec: TemplateSpec,
    stage: RowStage,
    selection: SelectionSpec,
    ranges: SourceRanges | None,
    plan: _SamplingPlan | None,
    folder: Path,
    held: _Held,
) -> tuple[RangedSelection | None, Selection | RangedSelection, TemplateInfo, Iterator[Any]]:
    """The selection and the stream of the workers' results, started: where the workers read,
    the driver decides on the rows' facts and never holds a row; else it reads and selects,
    and cuts the selected rows into blocks. The workers write the blocks' shards into the
    temporary ``folder`` themselves (a format without shards, one file for the set, is written
    here: `_sharded`)."""
    ranged = None if ranges is None or plan is None else RangedSelection(selection, ranges, plan)
    selected: Selection | RangedSelection = ranged or Selection(selection, plan)
    tasks = read_tasks(ranged) if ranged else []
    # while the template loads (a core idle), the driver scans the first ranges itself
    early = ranged.scan_ahead(tasks, stage.ready) if ranged else []
    blocks = held.blocks = iter(tasks[len(early) :]) if ranged else cut_blocks(selected.rows())
    fmt = opts.output_format if _sharded(opts.output_format) else None
    reads = selection if ranged else None
    info, stream = stage.start(
        # read tasks are in memory already: none read ahead (pickled, a scan's budget
        # would count each as one row)
        iter(()) if ranged else blocks,
        lambda info: BlockJob(mask_config(opts, spec, info), fmt, folder, info.vocab_size, reads),
    )
    if ranged:  # the first read gives the facts; the second reads, renders and writes,
        # interleaved: a range is written as soon as it and every range before are decided
        budget = SCAN_ROWS_PER_WORKER * stage.engine.workers
        scans = stage.engine.map(blocks, max_rows=budget)
        stream = _decided(ranged, tasks, _scans_first(early, scans))
    return ranged, selected, info, stream


def _drive_rows(
    stage: RowStage,
    stream: Iterator[Any],
    acct: Accounting,
    writer: Writer,
    sinks: tuple[_JsonlSink, _JsonlSink],
    read_back: _ReadBack,
    on_progress: Callable[[int, int], None] | None,
    total: int,
) -> None:
    """Every result taken in order (`_drive`) until all work is back; the workers exit."""
    rejects, prompts = sinks
    for done in _drive(stage.engine, stream, acct, writer, rejects, prompts, read_back):
        if on_progress:
            on_progress(done, total or done)
    stage.engine.finish()  # all work is back: the workers exit now


def _selection_notes(opts: BuildOptions, acct: Accounting) -> list[str]:
    """What sampling could not give: rows short of a count, sampled rows rejected."""
    available = {name: c.available for name, c in acct.sources.items()}
    notes = sampling_notes(opts.sources, available, opts.max_samples, opts.mix)
    if opts.mix is None:  # sampled rows the filters or the row step rejected: not replaced
        counts = {s.name: s.count for s in opts.sources}
        per_source = {name: c.to_json() for name, c in acct.sources.items()}
        notes += sampled_rejects_notes(per_source, counts, opts.max_samples)
    return notes


def _template_notes(opts: BuildOptions, acct: Accounting, info: TemplateInfo) -> list[str]:
    """What the template and its encoder made of the rows, when the user should know."""
    return [
        n
        for n in (
            _no_end_of_turn_note(acct, opts, info),
            _object_arguments_note(acct, info),
            _own_encoder_note(opts),
            _unread_kwargs_note(opts, info),
        )
        if n
    ]


def _write_and_finalize(
    opts: BuildOptions,
    tmp: Path,
    manifest: dict[str, Any],
    listing: _SourceListing,
    benchmarks: dict[Path, tuple[int, int] | None],
    notes: list[str],
) -> None:
    """The manifest written and the folder renamed into place, once the sources and the
    benchmark files are known unchanged while the manifest hashed them."""
    for s in opts.sources:  # the manifest listed them again, as the files that were read
        if problem := _listing_changed(s, listing.listed[s.name]):
            raise SourceError(problem)
    if problem := _benchmarks_changed(benchmarks):  # and while it hashed them
        raise SourceError(problem)
    write_manifest(tmp, manifest)
    if left := finalize_output(tmp, opts.out, opts.overwrite):
        notes.append(left)


def _checks_of_the_set(
    opts: BuildOptions,
    writer: Writer,
    acct: Accounting,
    facts: SetFacts | None,
    digests: dict[str, str],
) -> list[CheckResult]:
    """verify's fast checks of the set in place, from the workers' read-back (none when the
    set holds no row)."""
    checks: list[CheckResult] = []
    try:
        if writer.rows or acct.total().needs_generation:
            # token_freq.pt read back without torch (verify reads it with torch.load)
            checks = fast_checks(opts.out, load_pt=read_token_freq_pt, facts=facts, digests=digests)
    except KeyboardInterrupt as exc:  # the set is in place, whole: the line says so
        mark_set_written(exc, opts.out)
        raise
    return checks


class _ReadBack:
    """What the workers read back of the shards they wrote (`BlockResult.facts`, `.digests`),
    in part order: the build's checks and manifest take them instead of reading the set again
    (issue 27: the driver's work stays a few bytes a row, to the end)."""

    def __init__(self) -> None:
        self.facts = SetFacts()  # folded as each block comes back, in block order
        self.digests: list[str] = []

    def add(self, result: BlockResult) -> None:
        if len(result.facts) != len(result.parts) or len(result.digests) != len(result.parts):
            raise RunError(f"block {result.index}: a worker sent no read-back of its shards")
        for shard in result.facts:
            self.facts.add_shard(shard)
        self.digests.extend(result.digests)

    def named(self, shards: list[Path], folder: Path) -> tuple[SetFacts | None, dict[str, str]]:
        """The set's facts, and its shards' digests by name in ``folder``, once the writer has
        named the parts (``shards``: its finished files, the parts first, in order); (None, {})
        when no block wrote a shard (an empty set's one shard is the driver's)."""
        n = len(self.digests)
        if n == 0 or len(shards) < n:
            return None, {}
        names = [rel_name(folder, shard) for shard in shards[:n]]
        return self.facts, dict(zip(names, self.digests, strict=True))


SCAN_ROWS_PER_WORKER = 16_384
"""Rows of scans in flight a worker. A finished scan's facts (~200 bytes a row with exact
dedup, ~800 with near) wait in the driver until every scan before it is decided; without a
budget, 3 tasks a worker of them were the whole input's facts from ~22 local workers (~1.9 GB
at 10M rows with exact dedup). Scans cost about a tenth of the writes, so this keeps every
worker fed: 3 MB a worker with exact dedup, 13 MB with near."""


def _scans_first(early: list[Any], scans: Iterator[Any]) -> Iterator[Any]:
    """The driver's early scans, then the workers', with the workers' first scans submitted
    before the early ranges' writes: a worker runs its tasks in submission order, and a scan
    queued behind writes (seconds each) left the other worker idle until its decision came
    (~2.5 s of 18 in a 10K-row build once the template loaded sooner). The first scan's
    result is waited for here, while the workers scan."""
    if not early:
        yield from scans
        return
    first = next(scans, None)  # submits a window of scans, before any write
    yield from early
    if first is not None:
        yield first
        yield from scans


def _decided(
    ranged: RangedSelection, tasks: list[ReadTask], facts: Iterable[Any]
) -> Iterator[ReadTask]:
    """Each read task with the driver's decisions on its rows, decided in input order as the
    scanned ranges come back."""
    for task, scanned in zip(tasks, facts, strict=True):
        yield ranged.decide(task, scanned)
    ranged.finish()


def _sharded(output_format: str) -> bool:
    """Whether the format's shards can be written block by block by the workers (every
    `ShardedWriter`: arrow, parquet); the driver's writer then only gathers and names them."""
    return issubclass(writer_class(output_format), ShardedWriter)


def _let_go(
    stage: RowStage,
    blocks: Iterator[Block] | None,
    writer: Writer | None,
    sinks: list[_JsonlSink],
) -> None:
    """After a failure: stop the workers first (they write into the temporary folder, which
    goes next), then close the input stream (and so the source file it reads), the open shard
    and the JSONL files, each whatever the others do; the failure itself is raised next."""
    steps = [
        stage.stop,
        getattr(blocks, "close", None),
        writer and writer.abandon,
        *(s.close for s in sinks),
    ]
    for step in steps:
        if step is not None:
            with contextlib.suppress(Exception):
                step()


def _drive(
    engine: Engine,
    blocks: Iterator[Batch],
    acct: Accounting,
    writer: Writer,
    rejects: _JsonlSink,
    prompts: _JsonlSink,
    read_back: _ReadBack,
) -> Iterator[int]:
    """The blocks' results in block order: their counts added up, their shards gathered (with
    what the workers read back of them), their reject and prompt lines written; yields the
    input rows done so far. No row passes here, but for a format without shards (its rows
    come back and are written here, in order)."""
    done = 0
    for result in engine.map(blocks):
        acct += result.accounting
        if result.results is not None:
            write_results(result.results, writer, result.rejects, result.prompts)
        else:
            assert isinstance(writer, ShardedWriter)
            writer.add_block([writer.folder / name for name in result.parts], result.counts)
            read_back.add(result)
        rejects.write_lines(result.lines("rejects", writer.folder))  # spilled ones from their file
        prompts.write_lines(result.lines("prompts", writer.folder))
        done += result.rows_in
        yield done


def _write_vocab(
    opts: BuildOptions, tmp: Path, writer: Writer, vocab_size: int
) -> tuple[list[Path], dict[str, Any]]:
    """token_freq (.npy and .pt, no torch needed) and, when asked, the draft vocabulary
    d2t/t2d; returns the files written and the manifest's record of token_freq.pt (always
    written now; sets built before recorded why not when torch was missing)."""
    write_token_freq(tmp, writer.token_freq)
    files = [tmp / "token_freq.npy", tmp / "token_freq.pt"]
    size = opts.draft_vocab_size
    if size:
        files += write_draft_vocab(tmp, writer.token_freq, size, vocab_size)
    return files, {"written": True, "reason": None}


def _copies_lost_note(filters: Filters | None, rejects: Path) -> list[str]:
    """Copies dedup dropped for a kept row the row step then rejected whole: nothing of their
    prompt is in the set (`select.dedup.copies_lost`); said, never silent."""
    if filters is None or not filters.dedupers:
        return []
    with rejects.open(encoding="utf-8") as f:
        copies, rows, why, kinds = copies_lost(filters.dedupers, map(json.loads, f))
    if not copies:
        return []
    what = " and ".join({"exact": "duplicates", "near": "near duplicates"}[k] for k in kinds)
    return [
        f"{plural(copies, 'row was', 'rows were')} dropped as {what} of"
        f" {plural(rows, 'kept row')} then rejected ({fmt_counts(dict(why))}): nothing"
        f" of {'its prompt' if rows == 1 else 'their prompts'} is in the set; each copy's reject"
        " line names its kept row (--dedup none keeps every copy)"
    ]


def _own_encoder_note(opts: BuildOptions) -> str:
    """The model is one vLLM serves with its own encoder by default, not the chat template the
    rows follow (`vllm_own_encoder`): said once, with what to do."""
    folder = Path(opts.tokenizer).expanduser()
    mode = vllm_own_encoder(folder) if opts.serving_engine == "vllm" else None
    if mode is None:
        return ""
    return (
        f"vLLM serves this model with its own {mode!r} encoder by default (--tokenizer-mode"
        f" auto), not the chat template these rows follow: serve it with --tokenizer-mode hf,"
        " or check the set against your server with verify --render-server (docs/semantics.md)"
    )


def _unread_kwargs_note(opts: BuildOptions, info: TemplateInfo) -> str:
    """``--template-kwargs`` keys the chat template reads no variable of: they change nothing
    (vLLM drops them too), so a misspelled ``enable_thinkng`` built the set with thinking on
    without a word. A template that does not parse here says nothing."""
    names = _template_variables(info.kit.template_text)
    if names is not None and info.kit.tool_use is not None:  # a named set: rows with tools
        more = _template_variables(info.kit.tool_use.template_text)  # are rendered by it
        names = None if more is None else names | more
    if names is None:
        return ""
    unread = [k for k in opts.template_kwargs or {} if k not in names]
    if not unread:
        return ""
    close = {k: m[0] for k in unread if (m := difflib.get_close_matches(k, sorted(names), n=1))}
    meant = ", ".join(f"{m}" if len(unread) == 1 else f"{m} for {k}" for k, m in close.items())
    what = (
        "no variable of that name, so it changes"
        if len(unread) == 1
        else "none of these, so they change"
    )
    return (
        f"--template-kwargs {', '.join(unread)}: the chat template reads {what} nothing"
        f"{f' (did you mean {meant}?)' if meant else ''}"
    )


def _template_variables(text: str) -> set[str] | None:
    """The top-level variables a template reads, parsed by plain jinja2 (transformers' own
    parser would import it into the driver, seconds); None when that parse fails."""
    # lazy: jinja2 only once the build has its template
    import jinja2  # lazy: as above
    from jinja2 import meta  # lazy: as above

    from draftset.mask.sandbox import quick_parse  # lazy: as above

    try:
        root = quick_parse(text)
    except jinja2.TemplateError:
        return None
    # a name the template also sets ({% set reasoning_content = ... %}) is none of its inputs,
    # unless it asks whether it was given (`{% if not thinking is defined %}{% set thinking =
    # false %}`: DeepSeek-V3.1's own template) or gives it a default (`thinking | default`)
    stored = {n.name for n in root.find_all(jinja2.nodes.Name) if n.ctx == "store"}
    asked = {
        n.node.name
        for n in root.find_all((jinja2.nodes.Test, jinja2.nodes.Filter))
        if n.name in ("defined", "undefined", "default", "d")
        and isinstance(n.node, jinja2.nodes.Name)
    }
    return set(meta.find_undeclared_variables(root)) - (stored - asked)


_OBJECT_ARGUMENTS_ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}


def _object_arguments_note(acct: Accounting, info: TemplateInfo) -> str:
    """Once per run: the template reads tool-call arguments only as text (it concatenates
    them: DeepSeek-V3.1, R1), which vLLM and SGLang hand over as objects
    (`mask.reads.served_reads`): its turns holding a call are `template_error`, as the server
    answers them with HTTP 400."""
    kit = info.kit
    n = acct.total().row_rejects.get(reasons.TEMPLATE_ERROR, 0)
    server = _OBJECT_ARGUMENTS_ENGINES.get(kit.serving_engine)
    if not n or not kit.string_arguments or kit.harmony or server is None:
        return ""
    return (
        f"template_error rejects ({n:,}): this template reads tool-call arguments only as text,"
        f" and {server} (--serving-engine {kit.serving_engine}) hands them over as objects, so it"
        " refuses every request whose render holds a call (HTTP 400): those turns have no"
        " served form."
        " Serve with a template that reads arguments as objects, or build with the"
        " --serving-engine you serve with"
    )


def _no_end_of_turn_note(acct: Accounting, opts: BuildOptions, info: TemplateInfo) -> str:
    """Once per run: the template writes no stop token after some answers (GLM-4.5's serving
    template after any answer, Gemma-4 after tool calls), so those turns stay context."""
    n = acct.total().context_turns.get(reasons.TURN_NO_END_OF_TURN, 0)
    if not n:
        return ""
    name = Path(opts.chat_template_path).name if opts.chat_template_path else opts.tokenizer
    return (
        f"{n:,} assistant turns are context only: template {name} writes none of the stop"
        f" tokens ({', '.join(info.kit.eot_tokens)}) after them as their rows go on"
        " (no_end_of_turn; a template may end a turn with the next message's header: GLM's"
        " `<|user|>` after an answer, no stop token before a system message)"
    )


class AccountingError(RunError):
    """read != written + rejected + needs_generation: a bug, never a success."""


class OutputWriteError(RunError):
    """The output could not be written (disk full, quota, read-only): exit 1, nothing left."""


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


def _is_disk_error(exc: OSError) -> bool:
    # pyarrow's IO errors carry the OS message but not always the errno; numpy's short write
    # (np.save on a full disk) carries neither
    return (
        exc.errno in _DISK_ERRNOS
        or "No space left on device" in str(exc)
        or _SHORT_WRITE.fullmatch(str(exc)) is not None
    )


_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def _disk_error(exc: OSError) -> str:
    text = str(exc.strerror or exc)
    return f"{text} (a short write: is the disk full?)" if _SHORT_WRITE.fullmatch(text) else text


def _scan(source: Source) -> tuple[list[Path], list[dict[str, str]]]:
    """A local source's files and the entries of its folder skipped on purpose (hidden,
    unsupported type); nothing for a hub dataset."""
    if str(source.path).startswith(HUB_PREFIX):
        return [], []
    return scan_source(source.path)


def _states(files: list[Path]) -> dict[Path, tuple[int, int] | None]:
    """Each file's (size, mtime_ns), None for a folder entry (a ``save_to_disk`` set)."""
    states: dict[Path, tuple[int, int] | None] = {}
    for path in files:
        try:
            st = path.stat()
        except OSError:
            states[path] = (-1, -1)  # gone: `_listing_changed` names it
            continue
        states[path] = None if path.is_dir() else (st.st_size, st.st_mtime_ns)
    return states


def _listing_changed(source: Source, before: dict[Path, tuple[int, int] | None]) -> str | None:
    """Why a source's files now differ from ``before`` (their `_states` when the build
    started), or None. The manifest lists and hashes them once the rows are read: a file
    copied into a source folder during the build was listed as read though its rows never
    were (exit 0, and a full verify failed "row dropped?"), one removed was left out with its
    rows kept, and a file changed after its read was hashed with its new bytes."""
    if str(source.path).startswith(HUB_PREFIX):
        return None
    now = _states(_scan(source)[0])
    if now == before:
        return None
    root = Path(source.path)
    if not root.is_dir() and len(before) == 1 and list(now) == list(before):
        (was,), (then,) = before.values(), now.values()
        sizes = f" ({was[0]:,} bytes, now {then[0]:,})" if was and then else ""
        return (
            f"{root}: the file changed during the build{sizes}; is something writing it? Copy"
            " it, or wait for the writer to finish"
        )
    names = {p: p.relative_to(root).as_posix() if p != root else p.name for p in [*before, *now]}
    changes = [f"{names[p]} added" for p in now if p not in before]
    changes += [f"{names[p]} removed" for p in before if p not in now]
    changes += [f"{names[p]} changed" for p in now if p in before and now[p] != before[p]]
    return (
        f"{root}: its files changed during the build ({', '.join(changes)}); is something"
        " writing into it? Copy the folder, or wait for the writer to finish"
    )


def _benchmarks_changed(before: dict[Path, tuple[int, int] | None]) -> str | None:
    """Why a ``--decontaminate`` file now differs from ``before`` (its `_states` when the
    build started, before its prompts were read), or None: the manifest hashed an edited
    file's new bytes, describing a benchmark other than the one the rows were checked
    against (exit 0), as a source's (`_listing_changed`)."""
    states = _states(list(before))
    for path, was in before.items():
        now = states[path]
        if now == was:
            continue
        gone = now == (-1, -1)
        sizes = f" ({was[0]:,} bytes, now {now[0]:,})" if was and now and not gone else ""
        what = "was removed during the build" if gone else f"changed during the build{sizes}"
        return (
            f"{option_name(BuildArgs, 'decontaminate')} {path}: the file {what}, after its"
            " prompts were read (the"
            " manifest would describe other bytes than the ones the rows were checked"
            " against); is something writing it? Copy it, or wait for the writer to finish"
        )
    return None


def _generated(files: list[Path]) -> list[dict[str, Any]]:
    """How the `draftset generate` runs that wrote a source's answers files ended (their run
    files beside them; none for other files): a set built of a killed run's answers looked
    complete, its unanswered and errored rows said nowhere."""
    found = []
    for path in files:
        status = answers_status(path)
        if status is not None:
            found.append({"file": str(path), **status})
    return found


def _generated_notes(name: str, runs: list[dict[str, Any]]) -> list[str]:
    """The build summary's notes on a source's answers files: a `generate` that did not
    finish (rows it never answered are not in the set), rows that ended as its errors (in
    neither the set nor its rejects)."""
    notes = []
    for run in runs:
        rows = run["rows"]
        if run["finished"] is False:
            if "not_done" in rows:
                got = (
                    f"{rows['answered']:,} of {plural(rows['input'], 'row')} answered,"
                    f" {rows['not_done']:,} not done yet"
                )
            else:
                got = "no end recorded: killed, or still running"
            notes.append(
                f"source {name}: {run['file']} is the output of a draftset generate that did not"
                f" finish ({run['run_file']}: {got}): the rows it has not answered are not in"
                " this set; rerun that generate command to finish, then build again"
            )
        errors = rows.get("errors") or {}
        if n := sum(errors.values()):
            counts = fmt_counts(errors)
            notes.append(
                f"source {name}: {run['file']}: {plural(n, 'row')} of it ended as"
                f" {'an error' if n == 1 else 'errors'} in draftset generate ({counts}; see"
                f" {errors_path(Path(run['file']))}): not in this set, nor in its rejects"
            )
    return notes


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
            where = r.get("id") or f"{r.get('source')} row {r.get('row')}"  # unparsed: no id
            where += f" ({r['file']})" if r.get("file") else ""  # a source of several files
            notes.append(f"reject {where}: {r['reason']}: {r['message']}")
            if len(notes) >= n:
                break
    return notes
