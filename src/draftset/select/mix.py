"""Select: which input rows enter the run, and as which normalized items.

Between normalize and render sits the mixture: per-source sampling by weight or count, unique
ids, presets, decontamination, deduplication and the mode/source mix. Each is a small step on
the stream with its own counters (`dedup`, `decontam`, `modes`, `presets` hold the logic).
`build`, `run` and `verify` all go through `Selection` with a `SelectionSpec` recorded in the
manifest, so `verify` sees exactly the rows `build` saw. `Selection` is a stream step: it
yields the rows and keeps its own counts and report, which the caller reads once the rows are
drained (nothing is written into the caller's objects).

Order of the steps for every row: read → weight/count sampling (``max_samples``, a source's
``count``: by row index, so a sampled row the filters or the row step reject is not replaced)
→ (preset) normalize → unique id → decontaminate → exact dedup → near dedup → mix selection
(a mix replaces the sampling: it chooses among the rows the filters kept). Decontamination runs
first so a contaminated row never becomes the "kept" copy its clean duplicates are reported
against.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from draftset.core import defaults, rules
from draftset.core.counters import Accounting, SourceCounts
from draftset.core.modes import row_mode
from draftset.core.records import (
    Conversation,
    Normalized,
    PreTokenized,
    PromptOnly,
    RawRow,
    in_file,
)
from draftset.core.words import plural
from draftset.select.decontam import DEFAULT_N, Decontaminator, load_benchmark_prompts
from draftset.select.dedup import make_dedupers
from draftset.select.facts import Decider, Scanner, apply, can_train
from draftset.select.modes import MixTargets, select_mix
from draftset.sources.normalize import UNREAD_FIELDS
from draftset.sources.overlay import Overlay
from draftset.sources.presets import source_normalizer
from draftset.sources.read import Source, count_rows, iter_raw_rows, sha256_file


@dataclass
class SelectionSpec:
    """Everything that decides which rows a run takes (recorded in the manifest)."""

    sources: list[Source]
    max_samples: int | None = None
    seed: int = defaults.SEED
    dedup: str = defaults.DEDUP  # exact | near | none
    near_dup_threshold: float = defaults.NEAR_DUP_THRESHOLD
    decontaminate: list[str] = field(default_factory=list)  # benchmark files
    decontaminate_ngram: int = DEFAULT_N
    mix: dict[str, Any] | None = None  # {"modes": {mode: share}, "sources": {name: share}}
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # for thinking-off detection
    # `draftset run`: answer / error files by row id that replace selected rows (overlay.py)
    overlay: list[str] = field(default_factory=list)
    # which rows can train (`select.facts.can_train`, for dedup): the build's turns and
    # placeholders, and `run`'s `regenerate` (None in a build); recorded in the manifest's
    # `options` and `run` sections, not here
    turns: str = defaults.TURNS
    placeholders: tuple[str, ...] = rules.DEFAULT_PLACEHOLDERS
    answered: str | None = None

    def trains(self, item: Normalized) -> bool:
        """`can_train` under this run's turns, placeholders and answers (dedup, the mix)."""
        return can_train(item, self.turns, self.placeholders, self.answered)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for elsewhere in ("sources", "template_kwargs", "turns", "placeholders", "answered"):
            out.pop(elsewhere)
        if not out["overlay"]:
            out.pop("overlay")
        return out


# --- per-source sampling by weight / count ------------------------------------------------------
def _weight(source: Source) -> float:
    return source.weight if source.weight is not None else 1.0


def _quotas(
    sources: list[Source], available: dict[str, int], max_samples: int | None
) -> dict[str, int]:
    """Rows to take from each source: explicit counts first (at most what a source has), the
    rest of ``max_samples`` split by weight. A weight-0 source takes no row of the split, and
    none of the rows a short source cannot give (those go on, in order, to the weighted
    sources with rows left); without ``max_samples`` every source gives every row."""
    quotas: dict[str, int] = {}
    for s in sources:
        if s.count is not None:
            quotas[s.name] = min(s.count, available[s.name])
    rest = [s for s in sources if s.count is None]
    if max_samples is None:
        for s in rest:
            quotas[s.name] = available[s.name]
        return quotas
    for s in rest:
        quotas[s.name] = 0
    weighted = [s for s in rest if _weight(s) > 0]
    if not weighted:
        return quotas
    budget = max(0, max_samples - sum(quotas.values()))
    # never more than the weighted sources hold (they give every row then, as before): a
    # budget of 10**400 overflowed the float products below
    budget = min(budget, sum(available[s.name] for s in weighted))
    weights = [_weight(s) for s in weighted]
    top = max(weights)
    if not math.isfinite(budget * top * len(weights)):  # 1e308: the sum or a product overflows
        weights = [w / top for w in weights]  # the same ratios; finite weights split as before
    total_w = sum(weights)
    # largest remainder, then cap at what each source has and hand leftovers on in order
    raw = [budget * w / total_w for w in weights]
    take = [int(x) for x in raw]
    leftover = budget - sum(take)
    for i in sorted(range(len(weighted)), key=lambda i: (-(raw[i] - take[i]), i))[:leftover]:
        take[i] += 1
    spill = 0
    for i, s in enumerate(weighted):
        take[i] = take[i] + spill
        spill = max(0, take[i] - available[s.name])
        take[i] = min(take[i], available[s.name])
    for i, s in enumerate(weighted):
        if spill <= 0:
            break
        extra = min(spill, available[s.name] - take[i])
        take[i] += extra
        spill -= extra
    for i, s in enumerate(weighted):
        quotas[s.name] = take[i]
    return quotas


def _selection(name: str, available: int, quota: int, seed: int) -> np.ndarray | None:
    """Boolean mask of the rows taken from one source (None = all), seeded per source name."""
    if quota >= available:
        return None
    rng = random.Random(f"{seed}:{name}")
    chosen = np.zeros(available, dtype=bool)
    chosen[rng.sample(range(available), quota)] = True
    return chosen


def plan_selection(
    sources: list[Source],
    max_samples: int | None,
    seed: int,
    available: dict[str, int] | None = None,
) -> tuple[dict[str, int], dict[str, np.ndarray | None]]:
    """Rows available per source and the seeded selection of rows each source contributes.

    ``available``: the rows per source, already counted (`select.ranged.SourceRanges` counts
    them while it plans the workers' ranges); else each source is counted here."""
    if available is None:
        available = {s.name: count_rows(s) for s in sources}
    quotas = _quotas(sources, available, max_samples)
    selections = {
        s.name: _selection(s.name, available[s.name], quotas[s.name], seed) for s in sources
    }
    return available, selections


# --- filters: decontamination and deduplication ------------------------------------------------
class Filters:
    """The stateful row filters of one pass: decontamination, then the dedupers, in that order
    (`select.facts.Decider` runs them)."""

    def __init__(self, spec: SelectionSpec) -> None:
        self.decontaminator = None
        if spec.decontaminate:
            items = load_benchmark_prompts(spec.decontaminate)
            self.decontaminator = Decontaminator(items, n=spec.decontaminate_ngram)
        self.dedupers = make_dedupers(spec.dedup, spec.near_dup_threshold)
        self.spec = spec

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dedup": [d.stats() for d in self.dedupers]}
        if self.decontaminator is not None:
            out["decontamination"] = self.decontaminator.stats()
        return out


def _stream(
    spec: SelectionSpec,
    selections: dict[str, np.ndarray | None],
    acct: Accounting,
    filters: Filters,
    keep: Callable[[Normalized], bool] | None = None,
) -> Iterator[Normalized]:
    """Every selected row, normalized, with a unique id, through the filters; ``keep``: the
    mix's choice, made after the filters (a row it leaves out counts as sampled out)."""
    decider = Decider(filters)
    scanner = Scanner(filters)
    for src in spec.sources:
        chosen = selections[src.name]
        counts = acct[src.name]
        norm = source_normalizer(src)
        for raw in iter_raw_rows(src):
            if chosen is not None and not chosen[raw.row]:
                counts.sampled_out += 1
                continue
            item = read_item(raw, norm, counts)
            facts = scanner.facts(item, raw.file)
            item = in_file(apply(item, decider.decide(raw.source, raw.row, facts)), raw.file)
            if keep is not None and not keep(item):
                counts.sampled_out += 1
                continue
            counts.read += 1
            yield item


def read_item(
    raw: RawRow, norm: Callable[[RawRow], Normalized], counts: SourceCounts
) -> Normalized:
    """A read row normalized (its reader's reject, if any); fields it left unread counted."""
    item: Normalized = raw.reject if raw.reject is not None else norm(raw)
    if isinstance(item, Conversation | PromptOnly) and UNREAD_FIELDS in item.meta:
        counts.unread_fields.update(item.meta.pop(UNREAD_FIELDS))
    return item


# --- the mode / source mix --------------------------------------------------------------------
def _is_candidate(item: Normalized, spec: SelectionSpec) -> bool:
    """Rows the mix chooses among: the ones that can become training rows. A conversation that
    cannot train (`can_train`: answered "OK.", cut off, ...) is left to the row step's reject,
    never chosen in place of one that can."""
    if isinstance(item, PreTokenized):
        return True
    return isinstance(item, Conversation) and spec.trains(item)


def _mix_selection(spec: SelectionSpec) -> tuple[set[tuple[str, int]], dict[str, Any]]:
    """Pre-pass: every candidate row's (source, mode), then a selection meeting the targets."""
    assert spec.mix is not None
    names = [s.name for s in spec.sources]
    keys: list[tuple[str, int]] = []
    srcs: list[str] = []
    modes: list[str] = []
    selections: dict[str, np.ndarray | None] = dict.fromkeys(names)
    for item in _stream(spec, selections, Accounting(names), Filters(spec)):
        if _is_candidate(item, spec):
            keys.append((item.source, item.row))
            srcs.append(item.source)
            modes.append(row_mode(item, spec.template_kwargs, spec.turns))
    counts = {s.name: s.count for s in spec.sources if s.count is not None}
    targets = MixTargets(
        total=spec.max_samples,
        mode_shares=spec.mix.get("modes"),
        source_shares=spec.mix.get("sources"),
        source_counts=counts or None,
    )
    result = select_mix(srcs, modes, targets, seed=spec.seed)
    chosen = {k for k, keep in zip(keys, result.selected.tolist(), strict=True) if keep}
    return chosen, result.report()


class Selection:
    """The selection stream step: `rows()` yields the rows of a run in order; once they are
    drained, `counts` (available, read, sampled_out per source) and `report` (filter and mix
    stats, the manifest's ``mixture``) say what it did.

    Without a mix: per-source weight/count sampling, then the filters. With a mix: the filters
    see every row (a pre-pass finds each candidate's mode), and candidates the mix does not
    select are counted as sampled out. ``plan``: a `plan_selection` already made (build makes
    it first for the progress bar's total).
    """

    def __init__(
        self,
        spec: SelectionSpec,
        plan: tuple[dict[str, int], dict[str, np.ndarray | None]] | None = None,
    ) -> None:
        self.spec = spec
        self.plan = plan
        self.counts = Accounting([s.name for s in spec.sources])
        self.report: dict[str, Any] = {}
        self.filters: Filters | None = None  # the pass's, once `rows()` has begun

    def rows(self) -> Iterator[Normalized]:
        if not self.spec.overlay:
            yield from self._selected()
            return
        overlay = Overlay(self.spec.overlay)  # after selection: answers rejoin their rows by id
        try:
            for item in self._selected():
                yield overlay.apply(item)
        finally:
            overlay.close()

    def _selected(self) -> Iterator[Normalized]:
        spec, counts = self.spec, self.counts
        filters = self.filters = Filters(spec)
        if spec.mix is None:
            plan = self.plan or plan_selection(spec.sources, spec.max_samples, spec.seed)
            available, selections = plan
            for s in spec.sources:
                counts[s.name].available = available[s.name]
            yield from _stream(spec, selections, counts, filters)
        else:
            chosen, mix_report = _mix_selection(spec)
            for s in spec.sources:
                counts[s.name].available = count_rows(s)

            def keep(item: Normalized) -> bool:
                return not _is_candidate(item, spec) or (item.source, item.row) in chosen

            selections = {s.name: None for s in spec.sources}
            yield from _stream(spec, selections, counts, filters, keep)
            self.report["mix"] = mix_report
        self.report.update(filters.stats())


def sampling_notes(
    sources: list[Source],
    available: dict[str, int],
    max_samples: int | None,
    mix: dict[str, Any] | None = None,
) -> list[str]:
    """What the weight/count sampling did that the options alone do not say: a source with
    fewer rows than its ``count`` (every row taken), a weight that cannot act (no
    ``--max-samples`` to split: every row taken, whatever the weight; or a count beside it,
    which takes that many rows whatever the weight), a ``--max-samples`` the
    sources cannot give (a smaller set than asked). Lines for the build's notes. A mix chooses
    by its own shares (a count it cannot meet is a `MixError`), so it has none."""
    if mix is not None:
        return []
    notes = []
    for s in sources:
        have = available.get(s.name)
        if have is None:
            continue
        if s.count is not None and s.count > have:
            notes.append(
                f"source {s.name}: count {s.count:,} asked, {have:,} available (all taken)"
            )
        if s.count is not None and s.weight is not None:  # `{count: 5, weight: 2}`
            notes.append(
                f"source {s.name}: weight {s.weight:g} has no effect beside its count"
                f" {s.count:,} (a count takes that many rows)"
            )
        elif s.count is None and s.weight is not None and max_samples is None:
            notes.append(
                f"source {s.name}: weight {s.weight:g} has no effect without --max-samples"
                f" (all {plural(have, 'row')} taken)"
            )
    if max_samples is not None and all(s.name in available for s in sources):
        taken = sum(_quotas(sources, available, max_samples).values())
        if taken < max_samples:  # the set is smaller than asked: say so, as for a count
            why = []
            if any(s.count is not None and s.count < available[s.name] for s in sources):
                why.append("a source with a count gives at most that many")
            if any(s.count is None and _weight(s) == 0 and available[s.name] for s in sources):
                why.append("a source at weight 0 gives none")
            because = "".join(f"; {w}" for w in why)
            notes.append(
                f"max_samples {max_samples:,} asked, {taken:,} available (all taken{because})"
            )
    return notes


def selection_total(plan: tuple[dict[str, int], dict[str, np.ndarray | None]]) -> int:
    """Rows a weight/count selection takes (for a progress bar)."""
    available, selections = plan
    return sum(
        available[name] if sel is None else int(sel.sum()) for name, sel in selections.items()
    )


def benchmark_files(spec: SelectionSpec) -> list[dict[str, Any]]:
    """Decontamination files with their hashes, for the manifest."""
    return [{"path": p, "sha256": sha256_file(Path(p))} for p in spec.decontaminate]


def overlay_files(spec: SelectionSpec) -> list[dict[str, Any]]:
    """`run`'s answer / error files with their hashes, for the manifest (verify re-reads them)."""
    return [
        {"path": p, "sha256": sha256_file(Path(p)) if Path(p).exists() else None}
        for p in spec.overlay
    ]
