"""The local engine (`--workers N`): N spawn-started worker processes on this machine.

Workers start at once, before the template has loaded (imports overlap the load), and each
waits for its `MaskConfig` on a queue. Whatever happens, every worker is given something (a
config, or None when the load failed) before shutdown, so none is left blocked. Workers are
started with ``spawn``: the Rust tokenizer's thread pool does not survive ``fork``.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor

from draftset.engine import worker
from draftset.engine.base import Batch, Engine
from draftset.engine.helper import stop_pool
from draftset.mask.step import ItemResult, MaskConfig

IN_FLIGHT_PER_WORKER = 3
"""Batches in flight per worker: enough to keep every worker busy, few enough for flat memory."""


class LocalPoolEngine(Engine):
    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = workers
        ctx = multiprocessing.get_context("spawn")
        self._configs = ctx.Queue()
        self._fed = 0
        self._pool = ProcessPoolExecutor(
            workers, mp_context=ctx, initializer=worker.init_worker, initargs=(self._configs,)
        )
        for _ in range(workers):  # each submit starts one more process (spawn is lazy)
            self._pool.submit(worker.worker_ready)

    def _feed(self, config: MaskConfig | None) -> None:
        for _ in range(self.workers - self._fed):
            self._configs.put(config)
        self._fed = self.workers

    def start(self, config: MaskConfig) -> None:
        self._feed(config)

    def map(self, batches: Iterable[Batch]) -> Iterator[list[ItemResult]]:
        window: deque[Future[list[ItemResult]]] = deque()
        for batch in batches:
            window.append(self._pool.submit(worker.process_batch, batch))
            if len(window) >= IN_FLIGHT_PER_WORKER * self.workers:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()

    def finish(self) -> None:
        self._pool.shutdown(wait=False)

    def close(self, failed: bool) -> None:
        if failed:  # failed or interrupted (Ctrl-C, SIGTERM): stop the workers now
            stop_pool(self._pool)
        self._feed(None)
        self._pool.shutdown(wait=not failed)
