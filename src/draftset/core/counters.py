"""Account: per-source counters that every outcome passes through.

The invariant ``read == written + rejected + needs_generation`` (per source, by input row) is
checked before a build may report success. With ``--turns each`` one input row can give several
output rows: a row counts as written when at least one of its rows was written, as rejected when
none was; ``rows_out`` and ``row_rejects`` count the individual rows.

Counters are declared once, as dataclass fields, and merge by addition (``a + b``, ``+=``) the
way datatrove's stats merge across ranks: a batch's counts (`mask.step.count_results`, pure)
added up in any grouping equal the counts of the whole stream. The JSON form, the totals and
the merge are derived from the fields, so a new counter is one new line here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

from draftset.core.words import fmt_counts, plural


@dataclass
class SourceCounts:
    available: int = 0  # rows in the source files
    sampled_out: int = 0  # not selected by --max-samples / weights / counts
    read: int = 0  # rows taken into the run
    written: int = 0  # input rows with at least one output row
    # input rows, by reason; a counter by reason is ``<name>_by_reason`` in JSON, preceded by
    # ``<name>`` (its sum) when its metadata says "total"
    rejected: Counter[str] = field(default_factory=Counter, metadata={"total": True})
    needs_generation: int = 0  # prompt-only rows, written to prompts.jsonl
    rows_out: int = 0  # output rows (== written unless --turns each)
    row_rejects: Counter[str] = field(default_factory=Counter)  # every reject line, by reason
    truncated: int = 0
    supervised_turns: int = 0
    context_turns: Counter[str] = field(default_factory=Counter)
    trailing_turns_trimmed: int = 0
    tokens: int = 0
    supervised_tokens: int = 0
    server_ids_used: int = 0  # generations tokenized by the generation server itself
    server_ids_mismatch: int = 0  # server ids that did not spell the generation: re-encoded
    generation_tags_agree: int = 0  # rows whose {% generation %} tags mark the derived spans
    generation_tags_disagree: int = 0  # rows where they mark something else
    placeholder_rows: int = 0  # rejected no_supervised_turn: every answer a placeholder
    empty_think_rows: int = 0  # written rows trained as empty think blocks (thinking template)
    reasoning_not_rendered: int = 0  # supervised answers whose recorded reasoning the template
    # does not write (Llama-3.x): trained without it
    # rows per top-level text field their shape did not read (a trace in `code`, ...); JSON
    # name as is: the keys are the source's field names, not reasons
    unread_fields: Counter[str] = field(default_factory=Counter, metadata={"keyed": True})

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def balance_error(self) -> str | None:
        total = self.written + self.rejected_total + self.needs_generation
        if self.read != total:
            return (
                f"read {self.read} != written {self.written} + rejected {self.rejected_total}"
                f" + needs_generation {self.needs_generation}"
            )
        if self.available != self.read + self.sampled_out:
            return (
                f"available {self.available} != read {self.read} + sampled_out {self.sampled_out}"
            )
        return None

    def __iadd__(self, other: SourceCounts) -> SourceCounts:
        if not isinstance(other, SourceCounts):
            return NotImplemented
        for f in fields(self):
            mine = getattr(self, f.name)
            if isinstance(mine, Counter):
                mine.update(getattr(other, f.name))  # update keeps zero counts, unlike +
            else:
                setattr(self, f.name, mine + getattr(other, f.name))
        return self

    def __add__(self, other: SourceCounts) -> SourceCounts:
        if not isinstance(other, SourceCounts):
            return NotImplemented
        out = type(self)()
        out += self
        out += other
        return out

    def to_json(self) -> dict[str, Any]:
        """Every field in declaration order; a counter by reason as ``<name>_by_reason``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Counter):
                if f.metadata.get("total"):
                    out[f.name] = sum(value.values())
                name = f.name if f.metadata.get("keyed") else f"{f.name}_by_reason"
                out[name] = dict(sorted(value.items()))
            else:
                out[f.name] = value
        return out


# The per-source summary table (terminal summary and HTML report): header, key in to_json().
SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("read", "read"),
    ("written", "written"),
    ("rejected", "rejected"),
    ("needs gen", "needs_generation"),
    ("rows out", "rows_out"),
    ("truncated", "truncated"),
    ("tokens", "tokens"),
    ("supervised", "supervised_tokens"),
)


def summary_row(counts: dict[str, Any]) -> list[int]:
    """One source's numbers in `SUMMARY_COLUMNS` order, from its `to_json()` form."""
    return [int(counts.get(key) or 0) for _, key in SUMMARY_COLUMNS]


class Accounting:
    """Counters for every source of a run, in source order."""

    def __init__(self, source_names: list[str]) -> None:
        self.sources: dict[str, SourceCounts] = {name: SourceCounts() for name in source_names}

    def __getitem__(self, name: str) -> SourceCounts:
        return self.sources[name]

    def __iadd__(self, other: Accounting) -> Accounting:
        """Add ``other``'s counts source by source (a source new to this run goes last)."""
        if not isinstance(other, Accounting):
            return NotImplemented
        for name, counts in other.sources.items():
            if name in self.sources:
                self.sources[name] += counts
            else:
                self.sources[name] = SourceCounts() + counts
        return self

    def __add__(self, other: Accounting) -> Accounting:
        if not isinstance(other, Accounting):
            return NotImplemented
        out = Accounting([])
        out += self
        out += other
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Accounting) and self.sources == other.sources

    def total(self) -> SourceCounts:
        return sum(self.sources.values(), SourceCounts())

    def balance_errors(self) -> list[str]:
        return [
            f"{name}: {err}"
            for name, c in self.sources.items()
            if (err := c.balance_error()) is not None
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "per_source": {name: c.to_json() for name, c in self.sources.items()},
            "total": self.total().to_json(),
        }


# --- what sampling cost: said by build's summary (which run prints) and by report -----------
def sampled_rejects_notes(
    per_source: dict[str, dict[str, Any]],
    counts: dict[str, int | None],
    max_samples: int | None,
) -> list[str]:
    """A sampled build (``max_samples``, a source's ``count``) samples the rows it reads, before
    dedup and the row step: a sampled row rejected there is not replaced by one that was not
    sampled, so the set can hold fewer rows than asked while rows were left out. One note when
    that happened (sampled rows rejected, rows not sampled), with what to raise; none else.

    ``per_source``: each source's counts in their JSON form (`SourceCounts.to_json`, as in the
    manifest); ``counts``: each source's ``count`` (None: weighted). A mix chooses after the
    filters and reports its own shortfall: not for it (the caller leaves it out)."""
    if max_samples is not None:
        names = list(per_source)
        weighted_left = any(
            _n(per_source[n], "sampled_out") for n in names if counts.get(n) is None
        )
        what = "--max-samples" if weighted_left else "the sources' counts"
        note = _sampled_note(f"--max-samples {max_samples:,}", per_source.values(), what)
        return [note] if note else []
    notes = []
    for name, c in per_source.items():
        if counts.get(name) is not None:
            label = f"source {name}: count {counts[name]:,}"
            if note := _sampled_note(label, [c], "its count"):
                notes.append(note)
    return notes


def manifest_sampling_notes(manifest: dict[str, Any]) -> list[str]:
    """`sampled_rejects_notes` from a set's manifest (report): its options' ``max_samples``,
    its inputs' counts, its per-source counts; none for a mix."""
    if ((manifest.get("selection") or {}).get("mix")) or not isinstance(
        manifest.get("counts"), dict
    ):
        return []
    per_source = manifest["counts"].get("per_source") or {}
    counts = {i.get("name"): i.get("count") for i in manifest.get("inputs") or []}
    max_samples = (manifest.get("options") or {}).get("max_samples")
    return sampled_rejects_notes(per_source, counts, max_samples)


def _n(counts: dict[str, Any], key: str) -> int:
    return int(counts.get(key) or 0)


def _sampled_note(label: str, group: Any, what: str) -> str | None:
    """The note for ``group`` (counts of the sources sampled together), or None."""
    rows = list(group)
    rejected: Counter[str] = Counter()
    for c in rows:
        rejected.update(c.get("rejected_by_reason") or {})
    left = sum(_n(c, "sampled_out") for c in rows)
    if not left or not sum(rejected.values()):
        return None
    sampled = sum(_n(c, "read") for c in rows)
    queued = sum(_n(c, "needs_generation") for c in rows)
    parts = [
        f"{plural(sampled, 'row')} sampled (before dedup and the row step)",
        f"{sum(_n(c, 'written') for c in rows):,} written",
    ]
    if queued:
        parts.append(f"{queued:,} queued for generation")
    parts.append(f"{sum(rejected.values()):,} rejected ({fmt_counts(dict(rejected))})")
    return (
        f"{label}: {', '.join(parts)}: rejected rows are not replaced;"
        f" {plural(left, 'row was', 'rows were')} not sampled: raise {what} to get more"
    )
