"""The local engine (`--workers N`): N processes on this machine run the row step.

Workers start at once, before the template has loaded (imports overlap the load), and each
waits for its task (a `MaskConfig`, or the build's block job) on a queue. Whatever happens,
every worker is given something (a task, or None when the load failed) before shutdown, so
none is left blocked. Workers are
started with ``spawn``: the Rust tokenizer's thread pool does not survive ``fork``.

Given the build's helper process (which loaded the template, `worker.load_and_keep`), the
engine counts it as one of the N: it runs the row step on its own loaded template while N - 1
pool processes rebuild theirs from the kit. Each batch goes to whichever side has fewer
unfinished batches per process; results still come back in submission order, and every
process's step gives the same results (the inline engine's), so the set does not depend on
which process ran which batch.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, NoReturn

from draftset.core.errors import RunError
from draftset.engine import worker
from draftset.engine.base import (
    Batch,
    Engine,
    EnginePlan,
    InFlightLimit,
    WorkerTask,
    kitless,
    tokenizer_threads,
)
from draftset.engine.helper import (
    Sidecar,
    check_main_respawnable,
    refuse_to_spawn_while_starting,
    stop_pool,
)
from draftset.engine.lifeline import quiet_resource_tracker

InFlight = tuple[Future[Any], bool]
"""A submitted batch's future, and whether the helper runs it."""


ROW_STEP = "running the row step"
"""What a worker or the helper was doing when found dead (its error says so)."""


class WorkerDied(RunError):
    """A pool process died (killed, out of memory): the pool is broken, the build fails (exit
    1) with one line, as when the helper or a Ray worker dies."""


def _died(exc: BrokenProcessPool) -> NoReturn:
    raise WorkerDied(f"a worker process died while {ROW_STEP} (killed, or out of memory?)") from exc


class LocalPoolEngine(Engine):
    name = "local"
    helper_works = True

    @classmethod
    def open(cls, plan: EnginePlan) -> LocalPoolEngine:
        return cls(plan.workers or os.cpu_count() or 1, plan.helper, plan.start_after)

    def __init__(
        self,
        workers: int,
        helper: Sidecar | None = None,
        start_after: Future[Any] | None = None,
    ) -> None:
        refuse_to_spawn_while_starting()
        check_main_respawnable()
        self.workers = workers
        self._helper = helper if workers > 1 else None
        self._pool_size = workers - 1 if self._helper else workers
        ctx = multiprocessing.get_context("spawn")
        quiet_resource_tracker()  # before the first semaphore (the queue below)
        self._configs = ctx.Queue()
        self._fed = 0
        self._pool = ProcessPoolExecutor(
            self._pool_size,
            mp_context=ctx,
            initializer=worker.init_worker,
            initargs=(self._configs, tokenizer_threads(workers)),
        )
        # With ``start_after`` (the helper importing the tokenizer loader), the processes start
        # when it is done: their own imports (~1.3 CPU-s) would otherwise take CPU from the
        # template load, the start-up's critical path, and they still finish well before the
        # loaded template's kit arrives.
        if start_after is None:
            self._start_processes()
        else:
            start_after.add_done_callback(lambda _: self._start_processes())

    def _start_processes(self) -> None:
        try:
            for _ in range(self._pool_size):  # each submit starts one more (spawn is lazy)
                self._pool.submit(worker.worker_ready)
        except RuntimeError:  # closed first (the build failed before): nothing to start
            pass

    def _feed(self, config: WorkerTask | None) -> None:
        for _ in range(self._pool_size - self._fed):
            self._configs.put(config)
        self._fed = self._pool_size

    def start(self, config: WorkerTask) -> None:
        self._feed(config)
        if self._helper is not None:  # the helper builds its step on the template it holds
            self._helper.submit(worker.start_on_kept, kitless(config), what=ROW_STEP)

    def map(self, batches: Iterable[Batch], max_rows: int | None = None) -> Iterator[Any]:
        window: deque[InFlight] = deque()
        limit = InFlightLimit(self.workers, max_rows)
        for batch in batches:
            window.append(self._submit(batch, window))
            limit.add(batch)
            while limit.full():
                yield self._result(*window.popleft())
                limit.took()
        while window:
            yield self._result(*window.popleft())

    def _submit(self, batch: Batch, window: deque[InFlight]) -> InFlight:
        """Submit to the side with fewer unfinished batches per process (ties: the pool); a
        batch not yet done is still in the window (results leave it only once done)."""
        to_helper = False
        if self._helper is not None:
            unfinished = [in_helper for future, in_helper in window if not future.done()]
            to_helper = unfinished.count(True) * self._pool_size < unfinished.count(False)
        if to_helper and self._helper is not None:
            return self._helper.submit(worker.process_batch, batch, what=ROW_STEP), True
        try:
            return self._pool.submit(worker.process_batch, batch), False
        except BrokenProcessPool as exc:  # a process died since the last batch
            _died(exc)

    def _result(self, future: Future[Any], in_helper: bool) -> Any:
        if in_helper:  # a dead helper is a `SidecarError` (exit 1), not a bare traceback
            assert self._helper is not None
            return self._helper.result(future, ROW_STEP)
        try:
            return future.result()
        except BrokenProcessPool as exc:
            _died(exc)

    def finish(self) -> None:
        self._pool.shutdown(wait=False)

    def close(self, failed: bool) -> None:
        if failed:  # failed or interrupted (Ctrl-C, SIGTERM): stop the workers now
            stop_pool(self._pool)
        self._feed(None)
        self._pool.shutdown(wait=not failed)
        # a task a dead process never took (MBs of kit) would stay in the queue's pipe, and
        # multiprocessing's exit hook would wait for its feeder thread to deliver it: forever
        self._configs.cancel_join_thread()


ENGINE = LocalPoolEngine
