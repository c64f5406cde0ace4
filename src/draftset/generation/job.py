"""`draftset generate`: the target model answers the prompts, through OpenAI-compatible servers.

A drafter learns to predict its target model, so its training answers should come from that
model. This job reads anything `build` reads (including `build`'s own ``prompts.jsonl``), asks
one or more servers (vLLM, SGLang, ``transformers serve``) for every assistant turn, and writes
one OpenAI-messages conversation per line that `build` reads as is.

Every input row ends as exactly one output line or one error line (``OUT`` ->
``OUT.errors.jsonl``), and the job is crash-safe: lines are appended whole, and a rerun of the
same command skips the row ids already present in either file (a torn last line left by
``kill -9`` is cut away first). See docs/generate.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from draftset.config.fields import option_name
from draftset.config.schema import GenerateArgs
from draftset.core.errors import RunError
from draftset.core.ids import IdRegistry
from draftset.core.naming import on_command_line
from draftset.generation.dialog import Job
from draftset.generation.http import (
    START_THROTTLE_BOUND,
    THROTTLE_KINDS,
    Endpoint,
    EndpointPool,
    EndpointRefused,
    NoEndpoint,
    RetryPolicy,
    TransientError,
    list_models,
    list_models_patiently,
    make_endpoint,
)
from draftset.generation.inputs import iter_inputs
from draftset.generation.options import GenerateOptions, GenerateUsageError
from draftset.generation.outcomes import GenerateResult, ProgressFn
from draftset.generation.resume import (
    check_and_record,
    done_ids,
    previous_run,
    record_end,
    remove_previous,
)
from draftset.generation.runner import Runner
from draftset.generation.store import (
    RunLock,
    WriteFailed,
    check_output_path,
    errors_path,
    lock_path,
    run_path,
)
from draftset.sources.read import count_rows
from draftset.sources.shapes import check_row_shapes

T = TypeVar("T")


class Unreachable(RunError):
    """No endpoint could be used at all: exit code 1, nothing was done."""


# --- the run ---------------------------------------------------------------------------------
async def _open_pool(opts: GenerateOptions) -> EndpointPool:
    """Clients for every endpoint, checked against ``--model`` on ``/v1/models``."""
    eps = [
        make_endpoint(u, opts.concurrency, opts.api_key, opts.max_response_bytes)
        for u in opts.endpoints
    ]
    timeout = min(opts.request_timeout, 30.0)
    answers = await asyncio.gather(
        *(list_models(ep, timeout) for ep in eps), return_exceptions=True
    )
    if all(isinstance(a, TransientError) for a in answers) and any(
        a.kind in THROTTLE_KINDS for a in answers if isinstance(a, TransientError)
    ):  # none answered, some only busy: wait those out (one answering starts the run)
        policy = RetryPolicy(opts.max_retries, opts.backoff_base, opts.backoff_cap, timeout)
        bound, rng = min(START_THROTTLE_BOUND, opts.give_up_after), random.Random()
        answers = await asyncio.gather(
            *(list_models_patiently(ep, timeout, policy, bound, rng) for ep in eps),
            return_exceptions=True,
        )
    up = []
    for ep, models in zip(eps, answers, strict=True):
        if isinstance(models, TransientError):
            continue
        if isinstance(models, BaseException):
            raise models
        ep.served_models = models
        up.append(ep)
    if not up:
        details = "; ".join(f"{ep.url}: {err}" for ep, err in zip(eps, answers, strict=True))
        await _close_clients(eps)
        raise Unreachable(f"no endpoint answered GET /v1/models ({details})")
    try:
        model = _served_model(opts.model, up)
        root = _served_weights(model, up)
    except GenerateUsageError:
        await _close_clients(eps)
        raise
    pool = EndpointPool(eps, model, opts.health_interval, opts.give_up_after, root)
    for ep in eps:
        if ep not in up:
            pool.mark_down(ep)
    return pool


def check_reachable(opts: GenerateOptions) -> None:
    """`Unreachable` (or `ModelNotServed`/`NoCommonModel`) now, as the first step of a run
    would find it: `draftset run` asks before it selects rows, which takes minutes on big data."""

    async def probe() -> None:
        pool = await _open_pool(opts)
        await pool.close()

    run_sync(probe())


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``; where an event loop already runs in this thread (Jupyter, an
    async app), in a thread of its own, since ``asyncio.run`` refuses to start there. Ctrl-C
    while it runs cancels it, and it has ended when the `KeyboardInterrupt` is raised."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    held: dict[str, Any] = {}
    started, ended = threading.Event(), threading.Event()

    async def main() -> T:
        held["loop"], held["task"] = asyncio.get_running_loop(), asyncio.current_task()
        started.set()
        return await coro

    def target() -> None:
        try:
            held["value"] = asyncio.run(main())
        except BaseException as exc:  # handed to the calling thread
            held["error"] = exc
        finally:
            started.set()
            ended.set()

    # in the caller's context (a thread starts in an empty one): `named_by_flags` of a command
    # holds there too, so its messages name flags, not keywords
    context = contextvars.copy_context()
    threading.Thread(
        target=context.run, args=(target,), name="draftset-generate", daemon=True
    ).start()
    # waited on with an Event: a `Thread.join` that Ctrl-C interrupts takes the thread for
    # ended (CPython 3.11), and a second join returns at once while it runs on
    try:
        while not ended.wait(0.1):
            pass
    except KeyboardInterrupt:
        started.wait()
        if "task" in held:
            held["loop"].call_soon_threadsafe(held["task"].cancel)
        ended.wait()
        raise
    if "error" in held:
        raise held["error"]
    return held["value"]


async def _close_clients(eps: list[Endpoint]) -> None:
    for ep in eps:
        await ep.aclose()


class ModelNotServed(GenerateUsageError):
    """An endpoint does not serve the model asked for; ``wording(option)`` names the option
    in the caller's terms (``--model``, the API's ``model``, a recipe's ``generate.model``)."""

    def __init__(self, url: str, served: list[str], wanted: str) -> None:
        self.url, self.served, self.wanted = url, served, wanted
        super().__init__(self.wording(option_name(GenerateArgs, "model")))

    def wording(self, option: str) -> str:
        return f"{self.url} serves {self.served}, not {option} {self.wanted!r}"


class NoCommonModel(GenerateUsageError):
    """No model asked for, and the endpoints do not all serve one and the same."""

    def __init__(self, listing: str) -> None:
        self.listing = listing
        # `--model NAME` on the command line, the API's `model="NAME"`
        super().__init__(self.wording("pass --model" if on_command_line() else "pass model=..."))

    def wording(self, advice: str) -> str:
        return f"endpoints do not serve exactly one common model ({self.listing}); {advice}"


def _served_model(wanted: str | None, up: list[Endpoint]) -> str:
    """The model every reachable endpoint must serve: ``--model``, or the one they all serve."""
    if wanted is not None:
        for ep in up:
            if wanted not in ep.served_models:
                raise ModelNotServed(ep.url, ep.served_models, wanted)
        return wanted
    names = {tuple(ep.served_models) for ep in up}
    if len(names) != 1 or len(up[0].served_models) != 1:
        raise NoCommonModel(", ".join(f"{ep.url}: {ep.served_models}" for ep in up))
    return up[0].served_models[0]


def _served_weights(model: str, up: list[Endpoint]) -> str | None:
    """The weights (``root`` in /v1/models: vLLM's and SGLang's model path) every reachable
    endpoint serves ``model`` from, None when none says. Two servers under one served name
    with other checkpoints (a quantized copy, a newer revision) answered half the rows each,
    and the run file named the first one's: refused, exit 2, before any request."""
    roots = {ep.url: ep.model_roots[model] for ep in up if model in ep.model_roots}
    if len(set(roots.values())) > 1:
        listing = ", ".join(f"{url}: {root!r}" for url, root in roots.items())
        raise GenerateUsageError(
            f"the endpoints serve {model!r} from other weights ({listing}): the answers would"
            " mix two models; give only endpoints that serve the same weights"
        )
    return next(iter(roots.values()), None)


async def run_generate(opts: GenerateOptions, progress: ProgressFn | None = None) -> GenerateResult:
    """Answer every row not done yet; returns counts (``aborted`` set when it had to stop).

    Holds ``OUT``'s lock for the whole run (`StoreError` at once when another run holds it),
    and refuses (`GenerateUsageError`) to resume answers made with other settings or another
    model unless ``opts.restart``."""
    t0 = time.monotonic()
    result = GenerateResult(opts.out, errors_path(opts.out))
    _check_out_apart(opts)  # never read back, never removed by --restart: before anything
    check_output_path(opts.out)  # /dev/null, a FIFO, an unwritable path: one line, exit 2
    previous_run(opts)  # a file generate did not write is refused before a lock file is made
    # build's check: a source without rows, or whose first rows no shape reads, is one line
    check_row_shapes(opts.sources)
    with RunLock(opts.out):
        previous = previous_run(opts)
        pool = await _open_pool(opts)
        try:
            if opts.restart:
                remove_previous(opts.out)
                previous = None
            run_file = check_and_record(opts, pool, previous)
            result.total_rows = sum(count_rows(s) for s in opts.sources)
            done = done_ids(opts, result)
            runner = Runner(opts, pool, result)  # opens the two files it appends to
        except BaseException:
            await pool.close()
            raise
        result.model = pool.model
        runner.run_file = run_file
        runner.progress = progress
        try:
            await _drive(runner, opts, done)
        except (NoEndpoint, EndpointRefused, WriteFailed) as exc:  # stop, resumable
            result.aborted = str(exc)
        finally:
            for writer in (runner.out, runner.errors):
                try:
                    writer.close()
                except WriteFailed as exc:  # its last lines may not be on disk: not finished
                    result.aborted = result.aborted or str(exc)
            await pool.close()
            # rows count their requests as they end: those of rows a stop cut short too
            result.requests = max(result.requests, sum(ep.requests for ep in pool.endpoints))
            result.ejections = {ep.url: ep.ejections for ep in pool.endpoints if ep.ejections}
            result.cooldowns = {ep.url: ep.cooldowns for ep in pool.endpoints if ep.cooldowns}
            result.other_weights = {
                ep.url: f"{ep.url} serves {pool.model!r} from {ep.other_weights!r}, not"
                f" {pool.root!r}"
                for ep in pool.endpoints
                if ep.other_weights is not None
            }
            result.seconds = time.monotonic() - t0
        try:
            record_end(opts, run_file, result)  # its lines are synced: the run file says so now
        except OSError as exc:  # it still says finished: false, which a rerun corrects
            result.aborted = result.aborted or str(WriteFailed(run_path(opts.out), exc))
    return result


def _check_out_apart(opts: GenerateOptions) -> None:
    """``--out`` and the files beside it that generate writes are no source, not inside a
    source folder (build's check): ``--restart`` would delete the input, a rerun would read
    its own answers (and run file) back as rows."""
    # lazy: build's preflight (and the template module it imports) only when a run starts
    from draftset.config.preflight import check_apart_from_sources, local_sources

    sources = local_sources(opts.sources)
    for path in (opts.out, errors_path(opts.out), run_path(opts.out), lock_path(opts.out)):
        check_apart_from_sources(option_name(GenerateArgs, "out"), path, sources)


async def _drive(runner: Runner, opts: GenerateOptions, done: IdRegistry) -> None:
    """Feed jobs to a fixed set of workers through a small queue (memory stays bounded).

    A worker that fails (e.g. `NoEndpoint`) cancels the feeding loop, which then raises that
    failure: no polling of the workers per row (that cost grew with the concurrency)."""
    workers = opts.concurrency * len(opts.endpoints)
    queue: asyncio.Queue[Job | None] = asyncio.Queue(maxsize=min(2 * workers, 4096))
    result = runner.result
    feeder = asyncio.current_task()
    failures: list[BaseException] = []

    async def worker() -> None:
        try:
            while (job := await queue.get()) is not None:
                await runner.answer(job)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if not failures and feeder is not None:
                feeder.cancel()
            failures.append(exc)
            raise

    # started as jobs arrive, up to ``workers``: a large concurrency costs only what is used
    tasks: list[asyncio.Task[None]] = []
    try:
        for item in iter_inputs(opts.sources):
            key = item.id if isinstance(item, Job) else item["id"]
            if key in done:
                result.skipped += 1
                continue
            if isinstance(item, dict):
                runner.fail(item)
                continue
            if len(tasks) < workers:
                tasks.append(asyncio.create_task(worker()))
            await queue.put(item)
        for _ in tasks:
            await queue.put(None)
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        if failures:  # cancelled by a failing worker, not from outside
            cur = asyncio.current_task()
            if cur is not None:
                cur.uncancel()
            raise failures[0] from None
        raise
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
