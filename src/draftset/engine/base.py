"""The engine seam: what runs the pure row step over ordered batches.

A build is read → select (ordered, stateful, on the driver) → **row step** (pure: render & mask
→ encode, a batch at a time) → write (ordered, on the driver). Only the row step is distributed,
so an engine has one job: take batches in order, run `MaskStep` on each wherever it likes, and
hand the results back *in submission order*, with a bounded number of batches in flight. That
order is what makes the output byte-identical for every engine and worker count.

An engine may start its workers before the template has loaded (`__enter__`); `start` hands
them the frozen `MaskConfig` once it has.
"""

from __future__ import annotations

import os
import pickle
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from draftset.core.records import Normalized

if TYPE_CHECKING:  # the plan names them; an engine module imports what it uses
    from draftset.engine.helper import Sidecar
    from draftset.mask.template import Renderer

Batch = list[Normalized] | Any | bytes
"""Rows (or a block of them), or the same pickled by the driver while reading ahead
(see `unpack`)."""


class WorkerTask(Protocol):
    """What an engine hands each worker once the template has loaded: ``build`` makes the
    worker's callable, run on each batch in turn (a `MaskConfig` builds the row step; a build's
    `pipeline.block.BlockJob` builds one that also writes the block's shards)."""

    def build(self, template: Renderer | None = None) -> Any: ...


def kitless(task: Any) -> Any:
    """``task`` for a process that holds the loaded template already (the local helper): the
    kit, which the others rebuild the template from, is not sent there."""
    own = getattr(task, "kitless", None)
    return own() if own is not None else replace(task, kit=None)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity, e.g. a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def tokenizer_threads(workers: int | None) -> int:
    """The Rust tokenizer's threads for each of ``workers`` row-step processes on this machine
    (None or 0: one per CPU): its CPUs shared out, at least one. With its default, a pool of
    every CPU per process, two workers on two CPUs ran up to four encode threads beside two
    renders: 4-8% more CPU for the same ids (docs/benchmarks.md, "Issue 27, session 19")."""
    cpus = available_cpus()
    return max(1, cpus // (workers or cpus))


def hold_tokenizer_threads(threads: int | None) -> None:
    """In a row-step process, before its tokenizer encodes (the pool's size is read once):
    ``RAYON_NUM_THREADS``, unless the user set it. The pool path itself is kept
    (``TOKENIZERS_PARALLELISM=true``: its one-thread loop costs 1.25x the CPU)."""
    if threads:
        os.environ.setdefault("RAYON_NUM_THREADS", str(threads))


IN_FLIGHT_PER_WORKER = 3
"""Batches in flight per worker: enough to keep every worker busy, few enough for flat memory."""


def batch_rows(batch: Batch) -> int:
    """Rows a batch carries, for a map's row budget: a read task's or block's ``rows``, a list's
    length (a pickled batch counts one: the driver's read-ahead, never budgeted)."""
    rows = getattr(batch, "rows", None)
    if isinstance(rows, int):
        return rows
    return len(batch) if isinstance(batch, list) else 1


class InFlightLimit:
    """How much one `Engine.map` keeps submitted and not yet taken back: `IN_FLIGHT_PER_WORKER`
    batches a worker and, with ``max_rows``, at most that many rows (one batch at least,
    whatever its size). Results come back in order, so a finished batch waits for the ones
    before it in the driver; the row budget bounds what waits there however many workers run
    (a scan's facts: hundreds of bytes a row)."""

    def __init__(self, workers: int, max_rows: int | None = None) -> None:
        self.batches = IN_FLIGHT_PER_WORKER * workers
        self.max_rows = max_rows
        self._rows: deque[int] = deque()
        self._total = 0

    def add(self, batch: Batch) -> None:
        rows = batch_rows(batch) if self.max_rows is not None else 0
        self._rows.append(rows)
        self._total += rows

    def full(self) -> bool:
        """Take the oldest result back before submitting another."""
        count = len(self._rows)
        over_rows = self.max_rows is not None and self._total >= self.max_rows
        return count >= self.batches or (count > 0 and over_rows)

    def took(self) -> None:
        self._total -= self._rows.popleft()


def unpack(batch: Batch) -> list[Normalized]:
    return pickle.loads(batch) if isinstance(batch, bytes) else batch


@dataclass(frozen=True)
class EnginePlan:
    """What the factory (`engine.factory`) hands an engine class to open one: every engine
    takes what it needs of it, so the factory never knows an engine's constructor."""

    workers: int
    """Workers to run: as given, with 0 = one per CPU (Ray: the cluster's CPUs)."""
    ray_address: str | None = None
    template: Renderer | None = None
    """The template the driver loaded (`in_driver` engines only)."""
    helper: Sidecar | None = None
    """The build's helper process, which loads the template (every other engine)."""
    start_after: Future[Any] | None = None
    """Done once the helper has imported the tokenizer loader (start processes after it)."""


class Engine(ABC):
    """Runs the row step over ordered batches; results come back in submission order."""

    name: ClassVar[str]
    workers: int = 1
    in_driver: ClassVar[bool] = False
    """The row step runs in the driver, on the template it loads itself (no helper process)."""
    helper_works: ClassVar[bool] = False
    """The helper keeps the template it loaded and runs the row step as one of the workers."""

    @classmethod
    @abstractmethod
    def open(cls, plan: EnginePlan) -> Engine:
        """Start the engine's workers (before the template has loaded)."""

    @abstractmethod
    def start(self, config: WorkerTask) -> None:
        """The template has loaded: every worker builds its callable from ``config``."""

    @abstractmethod
    def map(self, batches: Iterable[Batch], max_rows: int | None = None) -> Iterator[Any]:
        """One result per batch (a list of `ItemResult`, or a block's result), in the
        batches' order; a bounded number in flight (`InFlightLimit`: ``max_rows`` bounds
        their rows too)."""

    def finish(self) -> None:  # noqa: B027 - an optional hook: engines without workers skip it
        """Every result is back: workers may go now (before the writer's last steps)."""

    def close(self, failed: bool) -> None:  # noqa: B027 - likewise
        """Release the workers; after a failure or an interrupt, stop them at once."""

    def describe(self) -> dict[str, Any]:
        """What the manifest records about how the set was built (never its bytes)."""
        return {"name": self.name, "workers": self.workers}

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(failed=exc_type is not None)
