"""Selection where the workers read (issue 27): the driver decides on facts, never on rows.

Each source is cut into row ranges (`sources.read.plan_ranges`: byte offsets of JSONL lines,
row groups of Parquet); a `ReadTask` is one range and the sampling plan's slice of it. A
worker reads and normalizes its range twice: first for the rows' facts (`scan`: a few bytes a
row, `select.facts.RowFacts`), then, once the driver has decided on them, for the rows
themselves with the decisions made on them (`selected_rows`), which it renders and writes. The
driver (`RangedSelection`) plans the tasks and decides on each task's facts in input order, so
ids, the first copy kept and every counter are the ones `select.mix.Selection` gives reading
the rows itself.

Not for every run: a source read in one piece (compressed, a ``.json`` document, the hub), a
mode/source mix (a pre-pass over every row) or `run`'s answer overlay keep the driver reading
(`why_driver_reads`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from draftset.core.counters import Accounting, SourceCounts
from draftset.core.records import Normalized, in_file
from draftset.select.facts import Decider, Decision, RowFacts, Scanner, apply
from draftset.select.mix import Filters, SelectionSpec, read_item
from draftset.sources.presets import source_normalizer
from draftset.sources.read import (
    RowRange,
    Source,
    iter_raw_range,
    plan_ranges,
    range_readable,
)

SCAN_AHEAD_ROWS = 8192
"""Rows the driver scans at most while the template loads (a start-up cost, never a row's)."""


@dataclass
class ReadTask:
    """One range of one source, read by a worker: first for its facts, then (``decisions``
    set) for its selected rows."""

    index: int
    source: Source
    range: RowRange
    chosen: np.ndarray | None  # the sampling plan's rows of the range (None: all)
    decisions: dict[int, Decision] | None = None  # by row offset in the range; None: scan

    @property
    def selected(self) -> int:
        """Rows of the range the sampling plan takes (the progress bar counts these)."""
        return _selected(self.chosen, self.range.rows)

    @property
    def rows(self) -> int:
        """Rows the scan's facts hold (its selected ones): what a map's row budget counts
        (`engine.base.batch_rows`)."""
        return self.selected

    def offsets(self) -> Iterator[tuple[int, Any]]:
        """(offset, raw row) of the range's rows the sampling plan takes (the others are not
        even parsed)."""
        first = self.range.first
        for raw in iter_raw_range(self.source, self.range, self.chosen):
            yield raw.row - first, raw


@dataclass
class RangeFacts:
    """A scanned range: one entry per row (None: not in the sampling plan), and the fields
    its rows left unread."""

    index: int
    facts: list[RowFacts | None]
    unread: Counter[str] = field(default_factory=Counter)


def why_driver_reads(spec: SelectionSpec) -> str | None:
    """Why this run's rows must be read by the driver, or None: the workers read them."""
    if spec.mix is not None:
        return "a mode/source mix chooses among every row first"
    if spec.overlay:
        return "answers rejoin their rows by id"
    for s in spec.sources:
        if not range_readable(s):
            return f"source {s.name} is read in one piece (compressed, a JSON document, the hub)"
    return None


class Readers:
    """A worker's normalizers by source name, and its scanner (built on first use: the
    benchmark index of decontamination loads once per worker; ``filters``: ones already built,
    the driver's own when it scans ahead)."""

    def __init__(self, spec: SelectionSpec, filters: Filters | None = None) -> None:
        self.spec = spec
        self._norms: dict[str, Any] = {}
        self._scanner: Scanner | None = Scanner(filters) if filters is not None else None

    def normalizer(self, source: Source) -> Any:
        norm = self._norms.get(source.name)
        if norm is None:
            norm = self._norms[source.name] = source_normalizer(source)
        return norm

    @property
    def scanner(self) -> Scanner:
        if self._scanner is None:
            self._scanner = Scanner(Filters(self.spec))
        return self._scanner

    def scan(self, task: ReadTask) -> RangeFacts:
        """The facts of every row of the range (the worker's first read)."""
        facts: list[RowFacts | None] = [None] * task.range.rows
        counts = SourceCounts()
        norm, scanner = self.normalizer(task.source), self.scanner
        for i, raw in task.offsets():
            facts[i] = scanner.facts(read_item(raw, norm, counts), raw.file)
        return RangeFacts(task.index, facts, counts.unread_fields)

    def selected_rows(self, task: ReadTask) -> Iterator[Normalized]:
        """The range's selected rows with the driver's decisions made (the second read)."""
        assert task.decisions is not None
        decisions, norm, counts = task.decisions, self.normalizer(task.source), SourceCounts()
        for i, raw in task.offsets():
            yield in_file(apply(read_item(raw, norm, counts), decisions.get(i)), raw.file)


def _selected(chosen: np.ndarray | None, rows: int) -> int:
    return rows if chosen is None else int(chosen.sum())


def _join(
    units: list[tuple[Source, RowRange, np.ndarray | None]], unit: int, share: int, most: int
) -> list[ReadTask]:
    """Consecutive ranges of one file joined into tasks (see `RangedSelection.tasks`)."""
    left = sum(_selected(chosen, rng.rows) for _, rng, chosen in units)
    tasks: list[ReadTask] = []
    i = 0
    while i < len(units):
        source, first, _ = units[i]
        want = min(most, max(unit, left // share))
        rows = taken = 0
        parts: list[np.ndarray | None] = []
        while i < len(units):
            src, rng, chosen = units[i]
            if src is not source or rng.path != first.path or (rows and taken >= want):
                break
            rows += rng.rows
            taken += _selected(chosen, rng.rows)
            parts.append(chosen)
            i += 1
        chosen_all = None if all(p is None for p in parts) else np.concatenate(parts)
        tasks.append(ReadTask(len(tasks), source, replace(first, rows=rows), chosen_all))
        left -= taken
    return tasks


@dataclass(frozen=True)
class SourceRanges:
    """Every source cut into ranges of ``unit`` rows (`plan_ranges`), each source with its
    path made absolute (a worker's working folder may not be the driver's) and the state of
    each file as planned (``Source.seen``: a worker refuses a file changed since). One pass
    over each file: the sampling plan takes its row counts from here (`available`)."""

    unit: int
    sources: dict[str, tuple[Source, list[RowRange]]]

    @property
    def available(self) -> dict[str, int]:
        """Rows per source, as `count_rows` counts them."""
        return {name: sum(r.rows for r in ranges) for name, (_, ranges) in self.sources.items()}


def plan_source_ranges(spec: SelectionSpec, unit: int) -> SourceRanges:
    """`SourceRanges` of the run's sources (`SourceError` for a file that cannot be read or
    changes while planned)."""
    planned: dict[str, tuple[Source, list[RowRange]]] = {}
    for s in spec.sources:
        source = replace(s, path=Path(s.path).absolute(), seen={})
        planned[s.name] = (source, plan_ranges(source, unit))
    return SourceRanges(unit, planned)


class RangedSelection:
    """The driver's side: the read tasks in input order, then a decision per scanned range,
    in the same order; `counts` and `report` as `select.mix.Selection` keeps them."""

    def __init__(
        self,
        spec: SelectionSpec,
        ranges: SourceRanges,
        plan: tuple[dict[str, int], dict[str, np.ndarray | None]],
    ) -> None:
        self.spec = spec
        self.ranges = ranges
        self.plan = plan
        self.counts = Accounting([s.name for s in spec.sources])
        self.filters = Filters(spec)
        self.decider = Decider(self.filters)
        self.report: dict[str, Any] = {}

    def tasks(self, share: int = 1, most: int | None = None) -> list[ReadTask]:
        """Every source's ranges (`SourceRanges`, of ``unit`` rows) with the sampling plan's
        slices, joined while in one file into tasks of about 1/``share`` of the selected rows
        still to come, at least ``unit`` and at most ``most`` (big tasks first, small ones at
        the end to keep every worker busy: few shards, no straggler). Decided by the plan
        alone, never the worker count."""
        available, selections = self.plan
        unit = self.ranges.unit
        units: list[tuple[Source, RowRange, np.ndarray | None]] = []
        for s in self.spec.sources:
            self.counts[s.name].available = available[s.name]
            source, ranges = self.ranges.sources[s.name]
            chosen = selections[s.name]
            for rng in ranges:
                part = None if chosen is None else chosen[rng.first : rng.first + rng.rows]
                units.append((source, rng, part))
        return _join(units, unit, share, most or unit)

    def scan_ahead(
        self, tasks: list[ReadTask], ready: Callable[[], bool], most: int | None = None
    ) -> list[RangeFacts]:
        """The first tasks scanned here, until ``ready()`` (the template has loaded and the
        workers take over) or ``most`` rows: the driver reads rows only while it would
        otherwise wait, at start-up (``most``: `SCAN_AHEAD_ROWS`)."""
        most = SCAN_AHEAD_ROWS if most is None else most
        readers = Readers(self.spec, self.filters)  # its pure parts: no second benchmark index
        early: list[RangeFacts] = []
        rows = 0
        for task in tasks:
            if rows >= most or ready():
                break
            early.append(readers.scan(task))
            rows += task.range.rows
        return early

    def decide(self, task: ReadTask, scanned: RangeFacts) -> ReadTask:
        """The task again, with the decisions on its rows (in input order: call it for the
        tasks in order)."""
        assert scanned.index == task.index
        counts = self.counts[task.source.name]
        name, first = task.source.name, task.range.first
        decisions: dict[int, Decision] = {}
        decide = self.decider.decide
        for i, facts in enumerate(scanned.facts):
            if facts is None:
                continue
            decision = decide(name, first + i, facts)
            if decision is not None:
                decisions[i] = decision
        counts.read += task.selected
        counts.sampled_out += task.range.rows - task.selected
        counts.unread_fields.update(scanned.unread)
        return replace(task, decisions=decisions)

    def finish(self) -> None:
        """Every range decided: the filters' report, as `Selection` makes it."""
        self.report.update(self.filters.stats())
