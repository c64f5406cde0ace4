"""The three kinds of step a run is made of, named so each new part knows which one it is.

datatrove's manner without a framework: plain classes that happen to have these shapes.

- A **row step** turns a batch into a batch of results, purely: nothing read, nothing written,
  built on each worker from a frozen, picklable config. It is all an engine distributes
  (`mask.step.MaskStep`, run by `engine.*`).
- A **stream step** is ordered and stateful and runs on the driver: it yields rows and, once they
  are drained, says what it did in its own `counts` and `report`, which the driver merges
  (`select.mix.Selection`).
- A **sink** takes what the driver hands it, in order, and is closed once
  (the `output.base.Writer` of each format, build's JSONL sinks for rejects and prompts).

Counts from any of them merge by addition (`core.counters`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, TypeVar, runtime_checkable

from draftset.core.counters import Accounting

In = TypeVar("In", contravariant=True)
Out = TypeVar("Out", covariant=True)
Row = TypeVar("Row")  # invariant, as the lists a row step takes and gives are
Result = TypeVar("Result")


@runtime_checkable
class RowStep(Protocol[Row, Result]):
    """Batch in, results out, in the batch's order; pure, so any worker may run it."""

    def __call__(self, batch: list[Row]) -> list[Result]: ...


@runtime_checkable
class StreamStep(Protocol[Out]):
    """Rows in order; `counts` and `report` are complete once `rows()` is drained."""

    counts: Accounting
    report: dict[str, Any]

    def rows(self) -> Iterator[Out]: ...


@runtime_checkable
class Sink(Protocol[In]):
    """Takes items in order; `close` finishes the output (what it returns is the sink's own)."""

    def write(self, item: In) -> None: ...

    def close(self) -> object: ...
