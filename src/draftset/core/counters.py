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
