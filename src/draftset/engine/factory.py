"""The engine factory: which engine runs a build's row step, and everything around starting it.

`draftset.engine.ENGINES` is the registry (name → the module whose ``ENGINE`` is the `Engine`
class): a new engine is one module and one line there. `open_stage` owns what every build used
to do by hand in `pipeline.build`: the inline / pool / Ray choice (``local`` with one worker
runs inline, in the driver), the helper process that loads the template while the workers
start (and, for the local pool, keeps it and works as one of them), and the read-ahead that
keeps the driver busy meanwhile. The build asks for a `RowStage` and runs rows through it; it
names no engine class.
"""

from __future__ import annotations

import contextlib
import importlib
import pickle
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from draftset.engine import ENGINES, engine_name
from draftset.engine.base import Batch, Engine, EnginePlan, WorkerTask, tokenizer_threads
from draftset.engine.helper import (
    Sidecar,
    import_tokenizer_loader,
    release_memory,
    without_torch,
)
from draftset.engine.worker import load_and_keep
from draftset.mask.template import (
    ChatTemplate,
    TemplateInfo,
    TemplateSpec,
    describe_template,
    load_template_info,
)


def engine_class(name: str) -> type[Engine]:
    """The `Engine` class registered as ``name`` (a key of `ENGINES`)."""
    return importlib.import_module(ENGINES[name]).ENGINE


# Rows read, normalized and pickled for the workers while the template loads (the loader is
# one thread, so a core would sit idle); pickles are ~3x smaller than the live objects.
READ_AHEAD_BYTES = 64_000_000


def read_ahead(batches: Iterator[Any], ready: Callable[[], bool]) -> deque[bytes]:
    """Batches taken from ``batches`` and pickled until ``ready()`` or `READ_AHEAD_BYTES`."""
    ahead: deque[bytes] = deque()
    size = 0
    while size < READ_AHEAD_BYTES and not ready():
        batch = next(batches, None)
        if batch is None:
            break
        ahead.append(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
        size += len(ahead[-1])
    return ahead


def drain(ahead: deque[bytes]) -> Iterator[bytes]:
    """The read-ahead batches, each let go once handed over (not kept for the whole run).

    Once all are handed over, their heap pages go back to the OS (up to 64 MB that glibc would
    otherwise keep for the rest of the run).
    """
    if not ahead:
        return
    while ahead:
        yield ahead.popleft()
    release_memory()


@dataclass
class RowStage:
    """How a build runs its row step: the engine, where the template loads, the helper."""

    engine: Engine
    loaded: Callable[[], TemplateInfo]  # waits for the template
    ready: Callable[[], bool]  # has it loaded yet? (read ahead until then)
    side: Sidecar | None  # the helper process (None: everything in the driver)

    def start(
        self, batches: Iterator[Any], config: Callable[[TemplateInfo], WorkerTask]
    ) -> tuple[TemplateInfo, Iterator[Batch]]:
        """Read ``batches`` ahead until the template has loaded, then start the engine on
        ``config(info)``; returns the template and the whole stream of batches to map."""
        ahead = read_ahead(batches, self.ready)
        info = self.loaded()
        self.engine.start(config(info))
        return info, chain(drain(ahead), batches)

    def stop(self) -> None:
        """A failed build: stop every worker now, the helper too (they may be writing into
        the temporary folder the build removes next)."""
        self.engine.close(failed=True)
        if self.side is not None:
            self.side.kill()


@contextlib.contextmanager
def open_stage(
    spec: TemplateSpec,
    engine: str,
    workers: int | None,
    ray_address: str | None = None,
    target_vocab_size: int | None = None,
    helper: Sidecar | None = None,
) -> Iterator[RowStage]:
    """The engine for ``engine`` / ``workers``, started, with the template loading: in the
    driver for an engine that runs there, else in the helper process (``helper`` when the
    caller started it ahead, `api.build`) while the workers start and the driver reads ahead.
    Everything is stopped on leaving, the helper included."""
    cls = engine_class(engine_name(engine, workers))
    if cls.in_driver:
        if helper is not None:
            helper.kill()
        template = ChatTemplate(spec)
        info = describe_template(template, target_vocab_size)
        with cls.open(EnginePlan(workers or 1, template=template)) as eng:
            yield RowStage(eng, lambda: info, lambda: True, None)
        return
    # The template loads once, in the helper process (fail fast, fingerprint, vocab size),
    # while the workers start and the driver reads ahead: the driver neither renders nor
    # imports torch, and workers render from the kit. With the local
    # engine the helper keeps the template and is one of the workers itself.
    with helper or Sidecar(tokenizer_threads(workers)) as side:
        # the head of the load (at once when the helper was started ahead: api.build)
        imported = side.submit(import_tokenizer_loader)
        load = load_and_keep if cls.helper_works else load_template_info
        # torch kept out: the helper works rows beside the workers as lean as they are
        pending = side.submit(without_torch, load, spec, target_vocab_size, what="loading")
        side.submit(release_memory)  # then drop the load's garbage, off the critical path

        def loaded() -> TemplateInfo:
            # a load that fails raises its own error (a bad tokenizer: exit 2); the helper
            # dying meanwhile (killed, out of memory) is `SidecarError`, exit 1, as later on
            return side.result(pending, f"loading tokenizer {spec.tokenizer!r}")

        # started before the template has loaded, so worker start-up overlaps it (Ray's too)
        plan = EnginePlan(workers or 0, ray_address, helper=side, start_after=imported)
        with cls.open(plan) as eng:
            yield RowStage(eng, loaded, pending.done, side)
