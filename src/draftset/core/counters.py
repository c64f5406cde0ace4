"""Account: per-source counters that every outcome passes through.

The invariant ``read == written + rejected + needs_generation`` (per source, by input row) is
checked before a build may report success. With ``--turns each`` one input row can give several
output rows: a row counts as written when at least one of its rows was written, as rejected when
none was; ``rows_out`` and ``row_rejects`` count the individual rows.

Counters are declared once, as dataclass fields, and merge by addition (``a + b``, ``+=``) the
way datatrove's stats merge across ranks: a batch's counts (`count_results`, pure) added up in
any grouping equal the counts of the whole stream. The JSON form, the totals and the merge are
derived from the fields, so a new counter is one new line here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from draftset.core import reasons
from draftset.core.records import PromptOnly, Reject

if TYPE_CHECKING:  # the row step's result type; core never imports the mask stage at run time
    from draftset.mask.step import ItemResult


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


def count_results(results: Sequence[ItemResult]) -> Accounting:
    """The counts of one batch of row-step results: pure, so whoever ran the batch can count it;
    the driver adds the batches up (``acct += count_results(results)``)."""
    acct = Accounting(list(dict.fromkeys(res.item.source for res in results)))
    for res in results:
        item = res.item
        counts = acct[item.source]
        if isinstance(item, Reject):
            counts.rejected[item.reason] += 1
            counts.row_rejects[item.reason] += 1
            continue
        if isinstance(item, PromptOnly):
            counts.needs_generation += 1
            continue
        counts.row_rejects.update(r.reason for r in res.rejects)
        if res.rows:
            counts.written += 1
            counts.rows_out += len(res.rows)
            for r in res.rows:
                counts.tokens += int(r.input_ids.shape[0])
                counts.supervised_tokens += int(r.loss_mask.sum(dtype=np.int64))
                counts.truncated += int(r.truncated)
        else:
            counts.rejected[res.rejects[0].reason] += 1
        if res.plan_stats is not None:
            stats = res.plan_stats
            for name in _summed_by_name(type(stats)):  # the fields both declare, added in place
                value = getattr(stats, name)
                if isinstance(value, Counter):
                    getattr(counts, name).update(value)
                elif value:
                    setattr(counts, name, getattr(counts, name) + value)
            counts.supervised_turns += sum(rp.supervised_turns for rp in stats.rows)
        if res.placeholder_only:
            if not res.rows and any(r.reason == reasons.NO_SUPERVISED_TURN for r in res.rejects):
                counts.placeholder_rows += 1
        elif res.empty_think and res.rows:
            counts.empty_think_rows += 1
    return acct


@cache
def _summed_by_name(stats_type: type) -> tuple[str, ...]:
    """The row step's per-row counters (`render.ConversationPlan`) named like a field here:
    summed into it by name, so a new counter is declared in the two places it means something."""
    ours = {f.name for f in fields(SourceCounts)}
    return tuple(f.name for f in fields(stats_type) if f.name in ours)
