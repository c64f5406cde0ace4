"""The Ray engine (`--engine ray`): the row step on Ray actors, on this machine or a cluster.

One actor per worker, each asking one CPU, builds its `MaskStep` once (tokenizer and template)
and runs batches; the driver keeps selection and the writer, submits batches in order, keeps
`base.InFlightLimit` in flight (`IN_FLIGHT_PER_WORKER` per actor; a row budget for scans), and
takes results back in submission order — the local pool's contract, so the set's bytes are the
same for any engine and worker count.

Why actors and not Ray Data's ``map_batches``: rows start as the driver's ordered, stateful
selection (ids, dedup, mix), a Python iterator; Ray Data reads from datasources run as tasks and
cannot stream a driver iterator with bounded memory (a one-read-task source fed by the driver
held every block until the read ended; docs/scaling.md has the figures). Ray's own fault
tolerance does the rest: a killed actor is restarted (`MAX_RESTARTS`) and its in-flight
batches are retried (`MAX_TASK_RETRIES`); the driver takes each batch's result exactly once.

A fresh or restarted actor builds its step on its first batch from the driver's `MaskConfig`,
put once in the object store (so a restart needs nothing from the driver).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import socket
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

from draftset.core.errors import RunError, UsageError
from draftset.core.naming import as_given
from draftset.core.words import ascii_digits
from draftset.engine.base import (
    Batch,
    Engine,
    EnginePlan,
    InFlightLimit,
    WorkerTask,
    available_cpus,
    unpack,
)
from draftset.engine.lifeline import DescendantGuard, guard_descendants
from draftset.mask.template import import_template_compiler

RAY_EXTRA = "draftset[ray]"
CONNECT_TIMEOUT = 5.0
"""Seconds to reach a cluster's address before giving up (ray.init itself retries for minutes)."""
ACTOR_CPUS = 1
"""CPUs each actor asks Ray for, and the tokenizer threads it runs."""
START_TIMEOUT = 300.0
"""Seconds for every actor to be placed and started: no free CPUs fails the build, never hangs."""
MAX_RESTARTS = 3
MAX_TASK_RETRIES = 3
"""A killed worker is restarted and its batches rerun this often; a batch that kills its worker
every time fails the build instead of looping."""
OBJECT_STORE_BYTES = 200 * 1024 * 1024
"""A local cluster's object store: results are drained at once, a few batches per worker."""


class RayUnavailable(UsageError):
    """`--engine ray` without Ray installed, or an address that cannot be reached (exit 2)."""


def _named(name: str) -> str:
    """A build option as the caller gave it: ``--ray-address``, the API's ``ray_address``."""
    return as_given("--" + name.replace("_", "-"), name)


def check_ray(address: str | None) -> None:
    """Preflight: Ray is importable and ``address`` (if any) answers, within seconds."""
    if importlib.util.find_spec("ray") is None:
        engine = as_given("--engine ray", "engine='ray'")
        raise RayUnavailable(f"{engine} needs Ray: pip install '{RAY_EXTRA}'")
    target = _host_port(address)
    if target is None:
        return
    host, port = target
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise RayUnavailable(f"cannot reach the Ray cluster at {address}: {reason}") from None
    if not _speaks_grpc(host, port):
        raise RayUnavailable(
            f"{address} answers, but not as Ray: no gRPC there within {CONNECT_TIMEOUT:g} s"
            " (give a Ray head's GCS address, HOST:6379 by default, or ray://HOST:10001)"
        )


def _speaks_grpc(host: str, port: int) -> bool:
    """Whether ``host:port`` completes a gRPC (HTTP/2) handshake, as a Ray head's GCS and Ray
    Client server do. Something else listening there (a web server, another service) made
    `ray.init` retry for 13.5 minutes and print 61 lines of warnings before failing."""
    try:
        import grpc  # lazy: installed with Ray, which speaks it
    except ImportError:  # cannot tell: ray.init will
        return True
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    channel = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT)
        return True
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()


def _host_port(address: str | None) -> tuple[str, int] | None:
    """Where ``address`` points (None: a new local cluster); ``auto`` is looked up as Ray does."""
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or None
    if address in (None, "local"):
        return None
    if address.lower().startswith(("http://", "https://")):  # the dashboard's URL: Ray's own
        # lookup failed as "Name or service not known" on the whole URL
        raise RayUnavailable(
            f"{_named('ray_address')} {address}: that is a web URL (the Ray dashboard's, port"
            " 8265), not the cluster's address: give HOST:PORT (the head's GCS, 6379 by default) or"
            " ray://HOST:PORT (Ray Client, 10001 by default)"
        )
    if address.startswith("ray://"):
        parts = urlsplit(address)
        if not parts.hostname or not parts.port:
            raise RayUnavailable(f"{_named('ray_address')} {address}: expected ray://HOST:PORT")
        return parts.hostname, parts.port
    if address == "auto":
        # lazy: Ray is optional (draftset[ray]); Ray's own lookup of `ray start`'s address
        from ray._private.services import canonicalize_bootstrap_address

        try:
            found = canonicalize_bootstrap_address("auto")
        except (ConnectionError, ValueError) as exc:
            raise RayUnavailable(f"{_named('ray_address')} auto: {exc}") from None
        if found is None:
            raise RayUnavailable(
                f"{_named('ray_address')} auto: no running Ray cluster found on this machine"
            )
        address = found
    host, sep, port = address.rpartition(":")
    if not sep or not ascii_digits(port):
        raise RayUnavailable(
            f"{_named('ray_address')} {address}: expected HOST:PORT, ray://HOST:PORT or auto"
        )
    return host.strip("[]"), int(port)


class _Worker:
    """One Ray actor: a `MaskStep`, built on its first batch (and again after a restart)."""

    def __init__(self) -> None:
        # the Rust tokenizer's batch encode on its thread pool, one thread for the one CPU the
        # actor holds: its one-thread path (TOKENIZERS_PARALLELISM=false, used here before)
        # costs 1.25x the CPU for the same ids (docs/benchmarks.md, "Session 13"); values
        # the user set (a runtime env) are kept
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
        os.environ.setdefault("RAYON_NUM_THREADS", str(ACTOR_CPUS))
        import_template_compiler()  # the heavy imports, while the driver's template loads
        self.step: Any = None

    def ready(self) -> int:
        return os.getpid()

    def process(self, config: list[Any], batch: Batch) -> Any:
        if self.step is None:  # the config comes boxed so Ray hands over the ref, not its value
            import ray  # lazy: loaded in the actor already; Ray is optional for draftset

            self.step = ray.get(config[0]).build()
        return self.step(unpack(batch))


class RayEngine(Engine):
    name = "ray"

    @classmethod
    def open(cls, plan: EnginePlan) -> RayEngine:
        return cls(plan.workers, plan.ray_address)  # 0 workers: the cluster's CPUs

    def __init__(self, workers: int = 0, address: str | None = None) -> None:
        import ray  # lazy: Ray is optional (draftset[ray]); preflight checked it is there

        self._ray = ray
        self._owns = not ray.is_initialized()
        self._guard = _init(address) if self._owns else None
        try:
            resources = ray.cluster_resources()
            self.cpus = float(resources.get("CPU", 0))
            self.nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
            self.workers = workers or max(1, int(self.cpus))
            if self.workers > self.cpus:
                raise RayUnavailable(
                    f"{_named('workers')} {self.workers}: the Ray cluster has {self.cpus:g} CPUs"
                )
            actor = ray.remote(_Worker).options(
                num_cpus=ACTOR_CPUS,
                max_restarts=MAX_RESTARTS,
                max_task_retries=MAX_TASK_RETRIES,
            )
            self._actors = [actor.remote() for _ in range(self.workers)]
            self._pending_ready = [a.ready.remote() for a in self._actors]
            self._config: list[Any] | None = None
            self._load = [0] * self.workers
        except BaseException:
            self.close(failed=True)
            raise

    def start(self, config: WorkerTask) -> None:
        self._config = [self._ray.put(config)]
        ready, waiting = self._ray.wait(
            self._pending_ready, num_returns=len(self._pending_ready), timeout=START_TIMEOUT
        )
        if waiting:
            raise RunError(
                f"{len(waiting)} of {self.workers} Ray workers did not start within "
                f"{START_TIMEOUT:.0f} s (the cluster has {self.cpus:g} CPUs; others busy?)"
            )
        self._ray.get(ready)  # an actor that failed to start raises here

    def map(self, batches: Iterable[Batch], max_rows: int | None = None) -> Iterator[Any]:
        assert self._config is not None, "start() first"
        ray = self._ray
        # unfinished tasks per actor, shared by every map running at once (a build's reads and
        # writes interleave): a task goes to the actor with the fewest of either
        load = self._load
        window: deque[tuple[Any, int]] = deque()
        limit = InFlightLimit(self.workers, max_rows)

        def take() -> Any:
            ref, i = window.popleft()
            load[i] -= 1
            try:
                return ray.get(ref)
            except ray.exceptions.RayActorError as exc:  # restarts and retries used up
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise RunError(
                    f"a Ray worker died and Ray gave up on its batch ({MAX_RESTARTS} restarts, "
                    f"{MAX_TASK_RETRIES} retries): {first}"
                ) from None

        for batch in batches:
            i = min(range(self.workers), key=load.__getitem__)
            window.append((self._actors[i].process.remote(self._config, batch), i))
            load[i] += 1
            limit.add(batch)
            while limit.full():
                yield take()
                limit.took()
        while window:
            yield take()

    def finish(self) -> None:
        self._kill_actors()

    def close(self, failed: bool) -> None:
        self._kill_actors()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
        if self._guard is not None:  # and whatever of the private Ray outlived its shutdown
            self._guard.close()
            self._guard = None

    def _kill_actors(self) -> None:
        for a in getattr(self, "_actors", ()):
            with contextlib.suppress(Exception):
                self._ray.kill(a, no_restart=True)
        self._actors = []

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "workers": self.workers,
            "cluster": {"cpus": self.cpus, "nodes": self.nodes},
        }


ENGINE = RayEngine


def _init(address: str | None) -> DescendantGuard | None:
    """Connect to ``address``, or start a private local cluster sized to this machine (then
    with the guard that ends its processes when the driver ends, `DescendantGuard`)."""
    import ray  # lazy: Ray is optional (draftset[ray])

    quiet = dict(log_to_driver=False, configure_logging=False, include_dashboard=False)
    logging.getLogger("ray").setLevel(logging.ERROR)  # no start-up chatter on the CLI
    target = address or os.environ.get("RAY_ADDRESS") or None
    guard = None
    # `ray.init` replaces the driver's SIGTERM handler with its own (``sys.exit(15)``, after
    # its C++ dump): the build's (SIGTERM as Ctrl-C: clean-up, one line, exit 143) goes back
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if target in (None, "local"):
            # a private cluster for one build: no usage report sent from the user's machine
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            guard = guard_descendants()  # its agents must not outlive a killed driver
            ray.init(
                address="local",
                # the machine's CPUs, not the workers asked for: more workers than that are
                # refused (preflight, and the cluster check below), never promised
                num_cpus=available_cpus(),
                object_store_memory=OBJECT_STORE_BYTES,
                **quiet,
            )
        else:
            ray.init(address=target, **quiet)
    except BaseException as exc:
        if guard is not None:
            guard.close()
        if isinstance(exc, ConnectionError | ValueError | RuntimeError):
            raise RayUnavailable(f"cannot start Ray at {target or 'local'}: {exc}") from None
        if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM and callable(sigterm):
            sigterm(signal.SIGTERM, None)  # SIGTERM met Ray's handler: the build's says it
        raise
    finally:
        main = threading.current_thread() is threading.main_thread()
        # not over SIG_IGN: the build's handler set it, handling a SIGTERM (clean-up first)
        if main and sigterm is not None and signal.getsignal(signal.SIGTERM) != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, sigterm)
    return guard
