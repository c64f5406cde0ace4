"""Account: per-source counters that every outcome passes through.

The invariant ``read == written + rejected + needs_generation`` (per source, by input row) is
checked before a build may report success. With ``--turns each`` one input row can give several
output rows: a row counts as written when at least one of its rows was written, as rejected when
none was; ``rows_out`` and ``row_rejects`` count the individual rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SourceCounts:
    available: int = 0  # rows in the source files
    sampled_out: int = 0  # not selected by --max-samples / weights / counts
    read: int = 0  # rows taken into the run
    written: int = 0  # input rows with at least one output row
    rejected: Counter[str] = field(default_factory=Counter)  # input rows, by reason
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

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "sampled_out": self.sampled_out,
            "read": self.read,
            "written": self.written,
            "rejected": self.rejected_total,
            "rejected_by_reason": dict(sorted(self.rejected.items())),
            "needs_generation": self.needs_generation,
            "rows_out": self.rows_out,
            "row_rejects_by_reason": dict(sorted(self.row_rejects.items())),
            "truncated": self.truncated,
            "supervised_turns": self.supervised_turns,
            "context_turns_by_reason": dict(sorted(self.context_turns.items())),
            "trailing_turns_trimmed": self.trailing_turns_trimmed,
            "tokens": self.tokens,
            "supervised_tokens": self.supervised_tokens,
            "server_ids_used": self.server_ids_used,
            "server_ids_mismatch": self.server_ids_mismatch,
            "generation_tags_agree": self.generation_tags_agree,
            "generation_tags_disagree": self.generation_tags_disagree,
            "placeholder_rows": self.placeholder_rows,
            "empty_think_rows": self.empty_think_rows,
        }


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

    def total(self) -> SourceCounts:
        t = SourceCounts()
        for c in self.sources.values():
            for name in (
                "available",
                "sampled_out",
                "read",
                "written",
                "needs_generation",
                "rows_out",
                "truncated",
                "supervised_turns",
                "trailing_turns_trimmed",
                "tokens",
                "supervised_tokens",
                "server_ids_used",
                "server_ids_mismatch",
                "generation_tags_agree",
                "generation_tags_disagree",
                "placeholder_rows",
                "empty_think_rows",
            ):
                setattr(t, name, getattr(t, name) + getattr(c, name))
            t.rejected.update(c.rejected)
            t.row_rejects.update(c.row_rejects)
            t.context_turns.update(c.context_turns)
        return t

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
