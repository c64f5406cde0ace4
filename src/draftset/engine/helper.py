"""One helper process that loads the template, so a build's main process never imports torch.

`AutoTokenizer` imports torch when it is installed (~1-3 s, ~230 MB that stay). A build with
worker processes loads the template in one spawn child, one job after another: load the
template (while the workers start and the main process reads ahead), drop the load's garbage
(`release_memory`, after the kit is on its way), run the row step on the loaded template as one
of the local engine's workers (`engine.worker.load_and_keep`; with Ray it waits idle). The load
keeps torch out (`without_torch`: a tokenizer needs none), so the helper works rows as lean as
the other workers; ``token_freq.pt`` needs no torch either (`draftset.output.pt_file`), so no
process of a build imports it.

A child that dies (killed, out of memory) raises `SidecarError` in the caller, never hangs it.
A spawned child re-running a script that calls draftset at its top level (no
``if __name__ == "__main__":``) stops with one line instead (`refuse_to_spawn_while_starting`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Any, NoReturn, TypeVar

from draftset.core.errors import RunError
from draftset.core.optional_torch import torch_hidden
from draftset.engine import IN_DRIVER, engine_name
from draftset.engine.base import hold_tokenizer_threads
from draftset.engine.lifeline import die_with_parent, quiet_resource_tracker

T = TypeVar("T")


class SidecarError(RunError):
    """The helper process died (the job's own exceptions are re-raised as they are)."""


class MainGuardMissing(SidecarError):
    """The helper could not start: the calling script lacks its ``__main__`` guard."""


MAIN_GUARD = (
    "a script that calls draftset (build, run, verify, ...) must do so under"
    ' `if __name__ == "__main__":` (draftset starts its worker processes with spawn, which'
    " imports the script again)"
)
_REFUSED = 2  # the exit code of a child stopped by `refuse_to_spawn_while_starting`


def refuse_to_spawn_while_starting() -> None:
    """In a spawned child still importing its parent's script (draftset was called at that
    script's top level), stop with one line and exit 2 instead of multiprocessing's
    RuntimeError traceback; the parent then reports `MAIN_GUARD` too (`Sidecar`)."""
    # the flag multiprocessing's own check reads: set while a spawned child imports the main
    # module, before it runs its target
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        print(f"draftset: {MAIN_GUARD}", file=sys.stderr)
        raise SystemExit(_REFUSED)


def check_main_respawnable() -> None:
    """A script read from standard input (``python - <<EOF``) names ``<stdin>`` as its file,
    which a spawned child then fails to import; the caller heard "killed, or out of memory?".
    Said in one line before any process starts. (``python -c`` and notebooks have no file:
    the children skip it.)"""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if getattr(getattr(main, "__spec__", None), "name", None) is not None or path is None:
        return
    if not os.path.isfile(path):
        raise SidecarError(
            f"the calling script has no file ({path!r}: read from standard input?), and"
            " draftset's worker processes (spawn) import the script again from its file: save"
            " it as a file and run that, or pass workers=1 (standard input is fine then)"
        )


def _start_helper(threads: int | None) -> None:
    die_with_parent()
    hold_tokenizer_threads(threads)


class Sidecar:
    """A single spawn-started helper process; jobs run one after another, state is kept."""

    def __init__(self, threads: int | None = None) -> None:
        """``threads``: the tokenizer's threads in the helper when it runs the row step as one
        of the workers (`base.tokenizer_threads`), set before anything there encodes."""
        refuse_to_spawn_while_starting()
        check_main_respawnable()
        quiet_resource_tracker()  # a kill -9 then prints no "leaked semaphore" warning
        self._ex = ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_helper,
            initargs=(threads,),
        )
        self._process: Any = None  # the child, once started: its exit code explains a death

    def submit(self, fn: Callable[..., T], *args: Any, what: str | None = None) -> Future[T]:
        """``fn(*args)`` started in the helper; ``what``: the job as a failure names it (the
        helper found dead already), by default the function's name."""
        try:
            future = self._ex.submit(fn, *args)
        except BrokenProcessPool as exc:
            self._died(what or f"running {getattr(fn, '__name__', 'a job')}", exc)
        if self._process is None:
            self._process = next(iter((getattr(self._ex, "_processes", None) or {}).values()), None)
        return future

    def result(self, future: Future[T], what: str) -> T:
        """The job's result; its exception as it is; `SidecarError` when the process died."""
        try:
            return future.result()
        except BrokenProcessPool as exc:
            self._died(what, exc)

    def _died(self, what: str, exc: BrokenProcessPool) -> NoReturn:
        if self._process is not None:
            self._process.join(5)  # reaped by the pool already, or about to be
            if self._process.exitcode == _REFUSED:  # it said why in one line: nothing to add
                raise MainGuardMissing(
                    f"the helper process could not start: {MAIN_GUARD}"
                ) from None
        raise SidecarError(
            f"the helper process died while {what} (killed, or out of memory?)"
        ) from exc

    def call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        return self.result(self.submit(fn, *args, what=what), what)

    def close(self, wait: bool = True) -> None:
        self._ex.shutdown(wait=wait, cancel_futures=True)

    def kill(self) -> None:
        """Stop the helper now, whatever it is doing (the build is being abandoned)."""
        stop_pool(self._ex)

    def __enter__(self) -> Sidecar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # after a failure or an interrupt, the child's job is of no use; after a success every
        # job's result has been taken: either way it is stopped at once, so nobody waits for
        # its interpreter and torch to tear down (~0.7 s the driver's exit used to wait)
        self.kill()
        self.close(wait=True)


def stop_pool(ex: ProcessPoolExecutor) -> None:
    """Cancel what has not started and terminate the pool's processes (SIGTERM) now.

    `ProcessPoolExecutor.shutdown` would wait for the running jobs (a batch of rows, a template
    load); an interrupted build has no use for them. Returns once the processes are reaped and
    the pool's manager thread is done (each waited for at most 5 s).
    """
    processes = list((getattr(ex, "_processes", None) or {}).values())
    manager = getattr(ex, "_executor_manager_thread", None)  # shutdown forgets it
    # terminated before the shutdown: the shutdown sends each idle process its exit sentinel,
    # and one that read it before the SIGTERM came exited normally, running its interpreter's
    # teardown and atexit handlers (torch's among them) while the caller waited
    for p in processes:
        if p.is_alive():
            p.terminate()
    ex.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        p.join(5)
    if manager is not None:
        # It reaps the processes too and closes the pool's pipes; at exit CPython 3.11 wakes it
        # through one of them, and a thread still closing it prints "Exception ignored ... Bad
        # file descriptor" after what should be one line (a usage error with the helper
        # started ahead).
        manager.join(5)


def uses_helper(workers: int | None, engine: str) -> bool:
    """Whether a build loads its template in the helper: every build but the inline one (one
    local worker, where the driver loads it itself). ``workers``: as given (None or 0: one per
    core)."""
    return engine_name(engine, workers) != IN_DRIVER


@contextlib.contextmanager
def torch_kept_out() -> Iterator[None]:
    """transformers sees no torch inside: ``sys.modules["torch"] = None`` is Python's own way to
    make a module unimportable, and ``importlib.util.find_spec`` (transformers'
    ``is_torch_available``) then reports it absent. For the helper's template load: once
    transformers has decided, it stays torch-less in that process (it caches the answer), which
    is right for a process that only loads tokenizers — never for the caller's own process,
    where a notebook may load a model next (the command line's process, which ends with its
    command, keeps it out too: `cli.TORCH_KEPT_OUT`). A torch imported already is left as it
    is.
    """
    with torch_hidden():
        yield


def without_torch(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with torch kept out (`torch_kept_out`): a helper job."""
    with torch_kept_out():
        return fn(*args)


def import_tokenizer_loader() -> None:
    """The helper's first job when it starts ahead of the driver's own imports (`api.build`):
    import ``AutoTokenizer``, the head of the template load (~1 s; torch kept out)."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # as `ChatTemplate` sets it
    with torch_kept_out(), contextlib.suppress(ImportError):  # the load reports it, in one line
        from transformers import AutoTokenizer  # noqa: F401  # lazy: the point of the job


def release_memory() -> None:
    """Give freed heap pages back to the OS (glibc keeps them otherwise: ~70 MB here)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the pages stay, no harm
        ctypes.CDLL("libc.so.6").malloc_trim(0)
