"""OpenAI-compatible endpoints for `generate`: routing, health, retries, response checks.

Every request goes to the least-loaded healthy endpoint (fewest requests in flight, at most
``concurrency`` each); a retry to one it has not failed on, when one can serve. An endpoint
that keeps failing (connection errors, timeouts, 5xx) is taken out of rotation and probed on
``/v1/models`` until it answers again with the right model; then it is re-admitted. One whose
check passes while it keeps failing is cooled down when another endpoint can serve.
Transient failures are retried with exponential backoff and full jitter; a 4xx other than 429
and 408 is final. A 200 whose body is not a valid chat completion is treated as transient too:
servers under load do emit those. A 429 or 503 is a throttle, not a failure of the request: it
waits (its ``Retry-After`` honoured, jittered) without spending the row's retries, up to
``give_up_after`` seconds of such waits in all (`complete`).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import re
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from draftset.core import defaults, reasons
from draftset.generation.wire import BodyTooLarge, Client, Response, WireError, parse_target
from draftset.sources.read import has_lone_surrogate

FAILURES_BEFORE_CHECK = 3
"""Consecutive transient failures after which an endpoint is health-checked at once (and taken
out only if the check fails too): one prompt the server cannot handle must not take it out."""

DEFAULT_MAX_RESPONSE_BYTES = defaults.MAX_RESPONSE_BYTES
"""Largest response body accepted, as received and after gzip/deflate decoding."""

RESPONSE_TOO_LARGE = reasons.GEN_RESPONSE_TOO_LARGE

MAX_COOLDOWN = 60.0
"""Longest cool-down of an endpoint that keeps failing while its health check passes (each
cool-down in a row doubles, from ``health_interval``)."""

MAX_RETRY_AFTER = 60.0
"""A server's Retry-After is honoured up to this many seconds, or the request timeout when that
is shorter (a wait longer than a whole request may take is not worth it): a date in 2099 must
not stall a row for minutes per retry."""


ABORTED = "abort"
"""vLLM's finish_reason (and error kind here) for a request the engine ended itself: at
shutdown, sleep or scale-down (a restart mid-run), or on an abort request. Retried as a 5xx
is (vllm-project/vllm#57082: a 200 with the cut answer); when every try aborts, the row is
``unfinished``."""

THROTTLE_KINDS = frozenset({"http_429", "http_503"})
"""Answers that say "busy, come back later" (a rate limit, an overloaded server or gateway):
waited out without spending a row's ``--max-retries``, up to ``--give-up-after`` seconds of
waits per row. A throttled but healthy server failed every row its 429s outlasted."""

THROTTLE_JITTER = 0.2
"""A ``Retry-After`` is waited out to up to this share longer: every request throttled at once
must not come back at the same instant."""


@dataclass
class Throttling:
    """Requests a server throttled (429, 503), for the progress line and the summary."""

    waiting: int = 0  # requests waiting out a throttle now
    waits: int = 0  # throttle waits so far
    seconds: float = 0.0  # their waits summed
    last: str = ""  # the latest one: ``HTTP 429, Retry-After 5s``
    notify: Callable[[], None] | None = None  # called as a wait starts and ends

    def _changed(self) -> None:
        if self.notify is not None:
            self.notify()


FILES_KEPT_FREE = 64
"""Open files a generate process keeps for itself (its output, logs, sources, the event loop)."""


def concurrency_problem(concurrency: int, endpoints: int, flag: str) -> str | None:
    """Why ``concurrency`` requests per endpoint cannot be in flight at once, or None.

    Each request in flight holds a connection, an open file: more than the process may open
    (``ulimit -n``) can never run, and a typo such as 1000000000 used to create that many
    tasks up front (2.1 GB in 30 s). One line instead, before any work.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    usable = max(1, soft - FILES_KEPT_FREE)
    if concurrency * endpoints <= usable:
        return None
    per = f" x {endpoints} endpoints" if endpoints > 1 else ""
    return (
        f"{flag} {concurrency}{per}: more requests in flight than this process may open"
        f" connections ({usable:,}: `ulimit -n` {soft:,} less {FILES_KEPT_FREE} kept free);"
        " lower it, or raise the limit"
    )


@dataclass
class RetryPolicy:
    max_retries: int = defaults.MAX_RETRIES  # retries after the first attempt
    backoff_base: float = defaults.BACKOFF  # s; attempt k waits uniform(0, min(cap, base * 2**k))
    backoff_cap: float = defaults.BACKOFF_CAP
    request_timeout: float = defaults.REQUEST_TIMEOUT  # whole request, connect to last byte

    def backoff(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.backoff_cap, self.backoff_base * 2**attempt))

    def throttle_wait(self, streak: int, retry_after: float | None, rng: random.Random) -> float:
        """How long to wait after the ``streak``-th throttle in a row (0 first): the
        server's ``Retry-After`` (capped, see `MAX_RETRY_AFTER`) and up to `THROTTLE_JITTER`
        more; without one, exponential backoff with equal jitter (never at once: a server
        that throttles wants fewer requests, and full jitter sends some straight back)."""
        step = min(self.backoff_cap, self.backoff_base * 2**streak)
        backoff = step / 2 + rng.uniform(0.0, step / 2)
        if retry_after is None:
            return backoff
        honoured = min(retry_after, self.request_timeout)
        return max(honoured * rng.uniform(1.0, 1.0 + THROTTLE_JITTER), backoff)


class FinalError(Exception):
    """A request that must not be retried (4xx but 429 and 408); ``kind`` is e.g. ``http_400``."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.attempts = 0  # requests this row's turn sent (set by `complete`; 0: none sent)


class TransientError(Exception):
    """A failure worth retrying: 429, 408, 5xx, timeout, connection error, invalid 200 body."""

    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


class RetriesExhausted(Exception):
    """Every attempt failed transiently; carries the last failure."""

    def __init__(self, last: TransientError, attempts: int) -> None:
        super().__init__(str(last))
        self.last = last
        self.attempts = attempts


class NoEndpoint(Exception):
    """No endpoint has been healthy for longer than the give-up time: the run cannot go on."""


ENDPOINT_REFUSALS = frozenset({401, 404, 407})
"""Statuses that refuse the endpoint's requests, not a row's: a key that expired or is wrong,
a proxy's authentication, a gateway's route or model gone. The run stops at the first one
(`EndpointRefused`), its rows left for the rerun: they were each written as a final error,
every row after the key expired, in a second, and the run exited 0. Not 403: a moderating
gateway answers it for one flagged prompt, and a run stopped there would stop there again."""


class EndpointRefused(Exception):
    """An endpoint answered with one of `ENDPOINT_REFUSALS`: the run cannot go on as it is."""


@dataclass
class Completion:
    """The parts of a chat completion that `generate` keeps."""

    message: dict[str, Any]  # role, content, reasoning_content?, tool_calls?
    finish_reason: str
    usage: dict[str, int]
    endpoint: str
    model: str | None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    attempts: int = 1
    special_stripped: str | None = None  # a leaked stop token's text cut from the answer's end
    stop_string: str | None = None  # the stop string that ended it (vLLM stop_reason, SGLang
    # matched_stop): the server cut the answer there, the model did not end it
    stop_token: int | None = None  # the stop token id that ended it (the same fields, an int)
    stop_eos: bool = False  # vLLM's ``stop_reason: null`` on a model-ended answer: its EOS
    requested_stop: bool = False  # that id is one the request set, not a special token: a cut

    def server_ended(self) -> str | None:
        """How the server, not the model, ended this answer (None: the model ended it, or it
        was cut at max_tokens, which is "length"'s own reason). The model ends an answer with
        a stop token (``stop``, with no stop string) or a tool call; vLLM's ``abort``, OpenAI's
        ``content_filter``, a stop string and a stop token id the request set that is no
        special token (``requested_stop``, set by the caller) are the server's doing."""
        if self.finish_reason == "length":
            return None
        if self.finish_reason not in MODEL_FINISH_REASONS:
            return f"ended with finish_reason {self.finish_reason!r}"
        if self.stop_string is not None:
            return f"was ended by the stop string {self.stop_string!r}"
        if self.requested_stop:
            return (
                f"was ended by the stop token id {self.stop_token} that the request's"
                " stop_token_ids set (not a special token of --tokenizer)"
            )
        return None


CALL_FINISH_REASONS = frozenset({"tool_calls", "function_call"})
"""finish_reason values that say the answer is a tool call."""

MODEL_FINISH_REASONS = frozenset({"stop", "tool_calls", "function_call"})
"""finish_reason values that say the model itself ended the answer (OpenAI's, vLLM's, SGLang's)."""


@dataclass
class Endpoint:
    """One server: its client, load and health."""

    url: str  # base URL ending in /v1, without user:password@ (shown in metadata and messages)
    client: Client
    concurrency: int
    in_flight: int = 0
    healthy: bool = True
    failures: int = 0  # consecutive transient failures
    requests: int = 0
    ejections: int = 0  # times taken out of rotation
    cooldowns: int = 0  # times cooled down: failing, health check passing, another serving
    cool_until: float = 0.0  # monotonic time before which it gets no request (others serve)
    cooling_streak: int = 0  # cool-downs since its last success (each one twice as long)
    served_models: list[str] = field(default_factory=list)
    model_roots: dict[str, str] = field(default_factory=dict)  # id -> "root" (vLLM: weights path)
    other_weights: str | None = None  # the model's root it came back with, not the run's: kept out
    down_why: str = ""  # what its last failed health check found (said when the run stops)

    async def aclose(self) -> None:
        await self.client.aclose()


def base_url(url: str) -> str:
    """``http://h:8000``, ``http://h:8000/``, ``http://h:8000/v1`` -> ``http://h:8000/v1``."""
    url = url.rstrip("/")
    for suffix in ("/chat/completions", "/models"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url if url.endswith("/v1") else url + "/v1"


def make_endpoint(
    url: str,
    concurrency: int,
    api_key: str | None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Endpoint:
    """An endpoint for ``url`` (any of the forms `base_url` takes; ``user:pass@`` becomes Basic
    auth unless an API key is given, and is never shown)."""
    target = parse_target(base_url(url))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    secrets = [api_key] if api_key else []
    if target.basic_auth:
        secrets += _url_secrets(url)
    client = Client(target, headers, max_response_bytes)
    client.secrets = tuple(s for s in secrets if s)
    return Endpoint(target.display, client, concurrency)


def _url_secrets(url: str) -> list[str]:
    parts = urlsplit(url)
    return [x for x in (parts.password, unquote(parts.password or "")) if x]


_AUTH_ECHO = re.compile(
    r"""(?i)(authorization|api[-_]?key|x-api-key|bearer)(["']?\s*[:=]?\s*["']?\s*(?:bearer\s+|basic\s+)?)"""
    r"""[^\s"',;}\]]+"""
)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` without the given secrets and without echoed ``Authorization``/API-key values
    (error bodies of some proxies echo the request headers)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return _AUTH_ECHO.sub(lambda m: m.group(1) + m.group(2) + "[redacted]", text)


async def list_models(ep: Endpoint, timeout: float) -> list[str]:
    """Model ids served by ``ep`` (``GET /v1/models``); raises `TransientError` when down."""
    try:
        async with asyncio.timeout(timeout):
            resp = await ep.client.request("GET", "/models")
    except TimeoutError:
        raise TransientError("timeout", f"GET /models timed out after {timeout:g}s") from None
    except WireError as exc:
        raise TransientError("connect", f"GET /models: {exc}") from None
    except BodyTooLarge as exc:
        raise TransientError("invalid_response", f"GET /models: {exc}") from None
    if resp.status != 200:
        raise TransientError(
            f"http_{resp.status}", f"GET /models: HTTP {resp.status}", _retry_after(resp)
        )
    try:
        data = json.loads(resp.body)["data"]
        models = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, KeyError, TypeError):
        raise TransientError("invalid_response", "GET /models: not an OpenAI model list") from None
    ep.model_roots = {m["id"]: m["root"] for m in models if isinstance(m.get("root"), str)}
    return [m["id"] for m in models]


START_THROTTLE_BOUND = 60.0
"""Longest the start's ``GET /v1/models`` waits out 429/503 throttles in all (or
``--give-up-after`` when shorter), when no endpoint answered it otherwise: a gateway's rate
limit on every route answered it 429, and the run ended at once, exit 1, `no endpoint
answered`."""


async def list_models_patiently(
    ep: Endpoint, timeout: float, policy: RetryPolicy, bound: float, rng: random.Random
) -> list[str]:
    """`list_models`, a throttle (429, 503) waited out as a completion's is, up to ``bound``
    seconds of waits in all; any other failure, or the bound reached, raises at once."""
    waited, streak = 0.0, 0
    while True:
        try:
            return await list_models(ep, timeout)
        except TransientError as exc:
            if exc.kind not in THROTTLE_KINDS or waited >= bound:
                raise
            wait = min(policy.throttle_wait(streak, exc.retry_after, rng), bound - waited)
            streak += 1
            waited += wait
            await asyncio.sleep(wait)


class EndpointPool:
    """Least-loaded routing over healthy endpoints, with health checks, ejection, re-admission.

    Endpoint health is told apart from a failing request: after `FAILURES_BEFORE_CHECK`
    consecutive failures an endpoint pauses for an immediate ``/v1/models`` check; it is taken
    out only when that check fails (then probed every ``health_interval`` until it serves the
    model again). So a prompt the server answers with 500 every time ends as that row's error
    while the endpoint keeps serving the other rows. When the check passes but another
    endpoint can serve, the failing one is cooled down instead (no request for
    ``health_interval``, doubling per cool-down in a row up to `MAX_COOLDOWN`): a server that
    fails every completion fast while its model list answers looked least loaded forever and
    drew every retry. A retry goes to an endpoint this request has not failed on, when one can
    serve.
    """

    def __init__(
        self,
        endpoints: list[Endpoint],
        model: str,
        health_interval: float = defaults.HEALTH_INTERVAL,
        give_up_after: float = defaults.GIVE_UP_AFTER,
        root: str | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.model = model
        self.root = root  # the weights the model is served from (``root``), when listed
        self.health_interval = health_interval
        self.give_up_after = give_up_after
        self._changed = asyncio.Condition()
        self._checkers: dict[str, asyncio.Task[None]] = {}
        self._all_down_since: float | None = None
        self._rr = 0
        self._waiting = 0  # acquire() calls waiting on the condition
        self.closed = False
        self.throttling = Throttling()
        self.last_answer = time.monotonic()  # when an endpoint last answered a completion

    async def acquire(self, avoid: frozenset[str] = frozenset()) -> Endpoint:
        """Wait for a free slot on a healthy endpoint; the least loaded one wins. ``avoid``:
        the URLs this request failed on, used only when no other endpoint can serve."""
        if len(self.endpoints) == 1:  # the common case, without the condition's lock
            ep = self.endpoints[0]
            if ep.healthy and ep.in_flight < ep.concurrency and ep.url not in self._checkers:
                ep.in_flight += 1
                return ep
        async with self._changed:
            while True:
                ep = self._pick(avoid)
                if ep is not None:
                    ep.in_flight += 1
                    return ep
                if not any(e.healthy for e in self.endpoints):
                    down = time.monotonic() - (self._all_down_since or time.monotonic())
                    if down > self.give_up_after:
                        limit = f"--give-up-after {self.give_up_after:g}"
                        found = "; ".join(
                            f"{e.url}: {e.down_why}" for e in self.endpoints if e.down_why
                        )
                        why = f": {found}" if found else ""
                        raise NoEndpoint(f"no endpoint healthy for {down:.0f}s ({limit}){why}")
                self._waiting += 1
                try:
                    async with asyncio.timeout(self.health_interval):
                        await self._changed.wait()
                except TimeoutError:
                    pass
                finally:
                    self._waiting -= 1

    def _serving(self, avoid: frozenset[str] = frozenset()) -> list[Endpoint]:
        """Endpoints in rotation: healthy, not under a check, not cooling down, not in
        ``avoid``; when that leaves none, the cooling ones too, then the avoided ones: a
        request is never held back while an endpoint it could use is there."""
        now = time.monotonic()
        up = [e for e in self.endpoints if e.healthy and e.url not in self._checkers]
        warm = [e for e in up if e.cool_until <= now]
        for pool in (
            [e for e in warm if e.url not in avoid],
            [e for e in up if e.url not in avoid],
            warm,
            up,
        ):
            if pool:
                return pool
        return []

    def _pick(self, avoid: frozenset[str] = frozenset()) -> Endpoint | None:
        free = [e for e in self._serving(avoid) if e.in_flight < e.concurrency]
        if not free:
            return None
        if len(free) == 1:
            return free[0]
        self._rr += 1
        n = len(free)
        # least relative load; ties rotate so equal endpoints share the work
        order = sorted(
            range(n), key=lambda i: (free[i].in_flight / free[i].concurrency, (i - self._rr) % n)
        )
        return free[order[0]]

    async def release(self, ep: Endpoint, ok: bool | None) -> None:
        """Give the slot back; ``ok`` False counts a transient failure, None is neutral."""
        ep.in_flight -= 1
        if ok:
            ep.failures = 0
            ep.cooling_streak = 0
        elif ok is False:
            ep.failures += 1
            if ep.healthy and ep.failures >= FAILURES_BEFORE_CHECK:
                self._check(ep, eject_first=False)
        if self._waiting:  # wake waiters only when there are some (the lock costs per request)
            async with self._changed:
                self._changed.notify_all()

    def _check(self, ep: Endpoint, eject_first: bool) -> None:
        """Start the health check of ``ep`` (unless one runs): paused meanwhile."""
        if eject_first:
            self._eject(ep)
        if ep.url not in self._checkers and not self.closed:
            self._checkers[ep.url] = asyncio.get_running_loop().create_task(
                self._probe(ep, first_now=not eject_first)
            )

    def _eject(self, ep: Endpoint) -> None:
        if ep.healthy:
            ep.ejections += 1
        ep.healthy = False
        if not any(e.healthy for e in self.endpoints) and self._all_down_since is None:
            self._all_down_since = time.monotonic()

    def mark_down(self, ep: Endpoint) -> None:
        """Take an endpoint out from the start (unreachable at launch)."""
        self._check(ep, eject_first=True)

    async def _probe(self, ep: Endpoint, first_now: bool) -> None:
        """Health-check ``ep`` (at once after failures, else after ``health_interval``) until it
        serves the model again; a failed immediate check takes it out of rotation."""
        try:
            wait = 0.0 if first_now else self.health_interval
            after_failures = first_now  # this check was made by failures, not an outage
            while not self.closed:
                await asyncio.sleep(wait)
                wait = self.health_interval
                try:
                    models = await list_models(ep, timeout=max(self.health_interval, 5.0))
                    up = self.model in models and self._same_weights(ep)
                    ep.down_why = "" if up else self._not_served(ep, models)
                except TransientError as exc:
                    up = False
                    ep.down_why = str(exc)
                if up:
                    async with self._changed:
                        if after_failures and self._others_serve(ep):
                            self._cool(ep)  # failing, though it lists the model: others serve
                        ep.healthy = True
                        ep.failures = 0
                        self._all_down_since = None
                        self._checkers.pop(ep.url, None)
                        self._changed.notify_all()
                    return
                after_failures = False
                async with self._changed:
                    self._eject(ep)
                    self._changed.notify_all()
        finally:
            if self._checkers.get(ep.url) is asyncio.current_task():
                self._checkers.pop(ep.url, None)
            if not self.closed:
                async with self._changed:
                    self._changed.notify_all()

    def _not_served(self, ep: Endpoint, models: list[str]) -> str:
        """What a health check that answered found instead of the run's model."""
        if self.model not in models:
            shown = models[:5] + (["..."] if len(models) > 5 else [])
            return (
                f"lists {shown}, not {self.model!r} (restarted under another name? vLLM and"
                " SGLang list the weights' path unless --served-model-name is given)"
            )
        return f"serves {self.model!r} from {ep.other_weights!r}, not {self.root!r}"

    def _same_weights(self, ep: Endpoint) -> bool:
        """The endpoint serves the model from the run's weights, as far as /v1/models says (a
        ``root`` on either side unknown counts as the same). One restarted with another
        checkpoint under the same served name passed on the name alone and answered rows."""
        root = ep.model_roots.get(self.model)
        same = self.root is None or root is None or root == self.root
        ep.other_weights = None if same else root
        return same

    def hold_off(self, ep: Endpoint, wait: float) -> bool:
        """``ep`` throttled a request: no request for ``wait`` seconds while another endpoint
        can serve (as a cool-down, not counted as one). True when another can serve now: the
        throttled request goes there without waiting. A throttling endpoint answered its
        429s fast, so least-loaded routing drew every row to it, each to wait out its
        Retry-After before the healthy endpoint got it."""
        ep.cool_until = max(ep.cool_until, time.monotonic() + wait)
        return self._others_serve(ep)

    def _others_serve(self, ep: Endpoint) -> bool:
        now = time.monotonic()
        return any(
            e is not ep and e.healthy and e.url not in self._checkers and e.cool_until <= now
            for e in self.endpoints
        )

    def _cool(self, ep: Endpoint) -> None:
        """No request to ``ep`` for a while (twice as long as its last cool-down in a row)."""
        wait = min(self.health_interval * 2**ep.cooling_streak, MAX_COOLDOWN)
        ep.cool_until = time.monotonic() + wait
        ep.cooling_streak += 1
        ep.cooldowns += 1

    async def close(self) -> None:
        self.closed = True
        for task in list(self._checkers.values()):
            task.cancel()
        for ep in self.endpoints:
            await ep.aclose()


async def complete(
    pool: EndpointPool, body: dict[str, Any], policy: RetryPolicy, rng: random.Random
) -> Completion:
    """POST /chat/completions, retried; raises `FinalError`, `RetriesExhausted`, `NoEndpoint`.

    A throttle (429, 503: `THROTTLE_KINDS`) is waited out (`RetryPolicy.throttle_wait`)
    without spending ``policy.max_retries``, up to ``pool.give_up_after`` seconds of such
    waits for this request; past that it is `RetriesExhausted`, or `NoEndpoint` (the run
    stops, resumable) when no endpoint has answered any completion since its first throttle."""
    payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
    attempt = 0  # retries spent (throttles spend none)
    sent = 0  # requests sent
    streak = 0  # throttles in a row
    throttled = 0.0  # seconds waited out on throttles
    since = 0.0  # when the first throttle came
    failed_on: frozenset[str] = frozenset()  # a retry goes elsewhere when it can
    while True:
        ep = await pool.acquire(failed_on)
        ok: bool | None = None
        throttle: TransientError | None = None
        sent += 1
        try:
            result = await _post(ep, payload, policy.request_timeout)
            ok = True
            pool.last_answer = time.monotonic()
            result.attempts = sent
            return result
        except TransientError as exc:
            ok = None if exc.kind == "http_429" else False  # busy is not unhealthy
            failed_on |= {ep.url}
            if exc.kind in THROTTLE_KINDS:
                bound = pool.give_up_after
                since = since or time.monotonic()
                if throttled >= bound:
                    _throttled_too_long(pool, exc, throttled, sent, since)
                wait = min(policy.throttle_wait(streak, exc.retry_after, rng), bound - throttled)
                if pool.hold_off(ep, wait):  # another endpoint serves: go there at once
                    wait = 0.0
                else:
                    streak += 1
                    throttled += wait
                    throttle = exc
            else:
                streak = 0
                if attempt >= policy.max_retries:
                    raise RetriesExhausted(exc, sent) from None
                attempt += 1
                wait = policy.backoff(attempt - 1, rng)
                if exc.retry_after is not None:
                    wait = max(wait, min(exc.retry_after, policy.request_timeout))
        except EndpointRefused:
            ok = None  # not the endpoint's health: its credentials or route
            raise
        except FinalError as exc:
            # the server is fine; the request is not (a too-large body says nothing either way)
            ok = None if exc.kind == RESPONSE_TOO_LARGE else True
            exc.attempts = sent  # counted in the summary like any other request
            raise
        finally:
            ep.requests += 1
            await pool.release(ep, ok)
        if throttle is not None:
            await _wait_throttled(pool.throttling, throttle, wait)
        else:
            await asyncio.sleep(wait)


async def _wait_throttled(stats: Throttling, exc: TransientError, wait: float) -> None:
    """Sleep ``wait`` seconds out of a throttle, counted where the progress line reads it."""
    after = f", Retry-After {exc.retry_after:g}s" if exc.retry_after is not None else ""
    stats.last = f"HTTP {exc.kind.removeprefix('http_')}{after}"
    stats.waiting += 1
    stats.waits += 1
    stats.seconds += wait
    stats._changed()
    try:
        await asyncio.sleep(wait)
    finally:
        stats.waiting -= 1
        stats._changed()


def _throttled_too_long(
    pool: EndpointPool, exc: TransientError, throttled: float, sent: int, since: float
) -> None:
    """A request throttled ``--give-up-after`` seconds in all: the run stops (`NoEndpoint`)
    when no completion came back from any endpoint since its first throttle (every request
    is throttled: a million rows would each wait that long, then fail), else the row's
    retries are over (`RetriesExhausted`, which ``--retry-errors`` asks again)."""
    status = exc.kind.removeprefix("http_")
    limit = f"--give-up-after {pool.give_up_after:g}"
    if pool.last_answer < since:
        raise NoEndpoint(
            f"every endpoint throttled the requests (HTTP {status}) for {throttled:.0f}s and"
            f" answered none ({limit}): the server is overloaded or its rate limit spent"
        )
    last = TransientError(
        exc.kind, f"{exc}; throttled (HTTP {status}) for {throttled:.0f}s in all ({limit})"
    )
    raise RetriesExhausted(last, sent)


async def _post(ep: Endpoint, payload: bytes, timeout: float) -> Completion:
    secrets: tuple[str, ...] = ep.client.secrets
    try:
        async with asyncio.timeout(timeout):
            resp = await ep.client.request("POST", "/chat/completions", payload)
    except TimeoutError:
        raise TransientError("timeout", f"no complete response within {timeout:g}s") from None
    except WireError as exc:
        raise TransientError(exc.kind, redact(str(exc), secrets)) from None
    except BodyTooLarge as exc:
        raise FinalError(RESPONSE_TOO_LARGE, str(exc)) from None
    status = resp.status
    if status == 200:
        try:
            completion = parse_completion(resp.body, ep.url)
        except TransientError:
            _raise_in_band_error(resp, secrets)
            raise
        if completion.finish_reason == ABORTED:
            raise TransientError(
                ABORTED,
                "answer ended with finish_reason 'abort', not by the model (the server ended"
                " the request: vLLM does so at shutdown, sleep or scale-down)",
            )
        return _without_secrets(completion, secrets)
    text = f"HTTP {status}: {_snippet(resp, secrets)}"
    if status == 429:
        raise TransientError("http_429", text, _retry_after(resp))
    if status >= 500 or status == 408:  # 408: a gateway timed out waiting, a timeout
        raise TransientError(f"http_{status}", text, _retry_after(resp))
    if status in ENDPOINT_REFUSALS:
        raise EndpointRefused(
            f"{ep.url} answered {text} (the API key, a proxy's authentication or a gateway's"
            " route or model, not a row's fault): fix that first"
        )
    if status >= 400:
        raise FinalError(f"http_{status}", text, status)
    raise TransientError("invalid_response", f"unexpected HTTP {status}")


def _raise_in_band_error(resp: Response, secrets: tuple[str, ...]) -> None:
    """A 200 whose body is an error object (``{"error": {...}}``, a proxy's; ``{"object":
    "error", ...}``, vLLM's older ErrorResponse) raises as its ``code`` would as a status: a
    4xx is final, 429 and 503 throttle, others are retried, each with the server's message
    (it was ``body has no choices[0].message``, and a 400 was asked 7 times). Else nothing."""
    try:
        data = json.loads(resp.body)
    except ValueError:
        return
    if not isinstance(data, dict) or "choices" in data:
        return
    error = data.get("error")
    if isinstance(error, dict):
        code = error.get("code")
    elif data.get("object") == "error" or isinstance(error, str):
        code = data.get("code")
    else:
        return
    status = int(code) if isinstance(code, int | str) and str(code).isdigit() else None
    said = f" {status}" if status is not None else ""
    text = f"HTTP 200 carrying an error{said}: {_snippet(resp, secrets)}"
    if status is None or not 400 <= status <= 599:
        raise TransientError("invalid_response", text)
    if status == 408 or status == 429 or status >= 500:
        raise TransientError(f"http_{status}", text)
    raise FinalError(f"http_{status}", text, status)


def _without_secrets(result: Completion, secrets: tuple[str, ...]) -> Completion:
    """A 200 answer that echoes the API key (or the URL's password) is kept with the key
    redacted: the answers file is training data, shared and uploaded. Its token ids then no
    longer spell the text, so they are dropped (build re-encodes the text)."""
    secrets = tuple(s for s in secrets if s)
    if not secrets:
        return result

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for secret in secrets:
                value = value.replace(secret, "[redacted]")
            return value
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    result.model = clean(result.model)
    message = clean(result.message)
    if message != result.message:
        result.message = message
        result.completion_token_ids = None
    return result


def parse_completion(content: bytes, endpoint: str) -> Completion:
    """The kept parts of a 200 body; `TransientError` ``invalid_response`` if it is not one.

    Text that cannot be written as UTF-8 is refused here, never written: a body that is not
    UTF-8, or a ``\\uD800``-style escape of a lone surrogate (a server that cut a UTF-16 pair).
    """
    try:
        data = json.loads(content.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise TransientError("invalid_response", f"body is not UTF-8 (byte {exc.start})") from None
    except ValueError as exc:
        if content.lstrip().startswith((b"data:", b"event:")):  # server-sent events
            raise TransientError(
                "invalid_response",
                "body is a stream of server-sent events, not JSON: the server streams though"
                " draftset does not ask it to (a streaming-only proxy?)",
            ) from None
        raise TransientError("invalid_response", f"body is not JSON: {exc}") from None
    if (b"\\ud" in content or b"\\uD" in content) and has_lone_surrogate(data):
        raise TransientError(
            "invalid_response", "body holds a lone UTF-16 surrogate (\\uD800-\\uDFFF escape)"
        )
    try:
        choices = data["choices"]
        # the answer asked for is choice 0, wherever it is listed (a proxy may merge replies)
        listed = (c for c in choices if isinstance(c, dict) and c.get("index") == 0)
        choice = next(listed, None) or choices[0]
        msg = choice["message"]
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError):
        raise TransientError("invalid_response", "body has no choices[0].message") from None
    if not isinstance(msg, dict) or not isinstance(finish, str):
        raise TransientError("invalid_response", "choices[0] lacks a message or finish_reason")
    message = _kept_message(msg, finish)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Completion(
        message=message,
        finish_reason=finish,
        usage={k: v for k, v in usage.items() if isinstance(v, int)},
        endpoint=endpoint,
        model=data.get("model") if isinstance(data.get("model"), str) else None,
        prompt_token_ids=_ids(data.get("prompt_token_ids") or choice.get("prompt_token_ids")),
        completion_token_ids=_ids(choice.get("token_ids")),
        stop_string=_stop_string(choice),
        stop_token=_stop_token(choice),
        stop_eos=_stop_eos(choice),
    )


def _stop_string(choice: dict[str, Any]) -> str | None:
    """The stop *string* that ended a ``stop`` answer: vLLM's ``stop_reason`` or SGLang's
    ``matched_stop`` as text (an int there is a stop token's id: the model's own end)."""
    for key in ("stop_reason", "matched_stop"):
        value = choice.get(key)
        if isinstance(value, str):
            return value
    return None


def _stop_token(choice: dict[str, Any]) -> int | None:
    """The stop token id that ended a ``stop`` answer (vLLM's ``stop_reason``, SGLang's
    ``matched_stop`` as an int; vLLM says None for the tokenizer's own EOS)."""
    for key in ("stop_reason", "matched_stop"):
        value = choice.get(key)
        if type(value) is int:
            return value
    return None


def _stop_eos(choice: dict[str, Any]) -> bool:
    """Whether the tokenizer's EOS ended a model-ended answer, as vLLM says it: a written-out
    ``stop_reason: null`` (vLLM names any other stop token by its id, a stop string by its
    text; `SamplingParams.update_from_generation_config` keeps the EOS apart). A server that
    writes no ``stop_reason`` (OpenAI) or answers with SGLang's ``matched_stop`` says nothing."""
    return (
        choice.get("finish_reason") in MODEL_FINISH_REASONS
        and "stop_reason" in choice
        and choice["stop_reason"] is None
        and "matched_stop" not in choice
    )


def _kept_message(msg: dict[str, Any], finish: str) -> dict[str, Any]:
    """The answer's fields (``content: null`` beside a call or reasoning kept as null); ``content:
    null`` with nothing else is the empty answer ``""`` (a
    model that ended at once, as some servers spell it): written, then rejected by build as a
    placeholder, as ``""`` is, not retried 6 times. A ``finish_reason`` ``tool_calls`` or
    ``function_call`` without a call (whatever text or reasoning is there) lacks the call the
    model made: invalid, retried (it was written as the model's whole answer)."""
    content = msg.get("content")
    calls = msg.get("tool_calls")
    legacy = msg.get("function_call")  # OpenAI's shape before tool_calls: one call, no id
    if calls is None and isinstance(legacy, dict):
        calls = [{"type": "function", "function": legacy}]
    reasoning = msg.get("reasoning_content")
    if reasoning is None:
        reasoning = msg.get("reasoning")
    if content is not None and not isinstance(content, str):
        raise TransientError("invalid_response", f"message content is {type(content).__name__}")
    if calls is not None and not _valid_calls(calls):
        raise TransientError("invalid_response", "message tool_calls are malformed")
    if reasoning is not None and not isinstance(reasoning, str):
        raise TransientError("invalid_response", "message reasoning is not a string")
    if finish in CALL_FINISH_REASONS and not calls:  # the call the model made is not here
        raise TransientError("invalid_response", f"finish_reason {finish} without a tool call")
    # a call or reasoning with content null keeps the null: vLLM hands a template that reads
    # content as parts no parts for it, one empty part for "" (Qwen3-VL renders them apart)
    kept = None if content is None and (calls or reasoning) else content or ""
    out: dict[str, Any] = {"role": "assistant", "content": kept}
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = [_call(c) for c in calls]
    return out


def _valid_calls(calls: Any) -> bool:
    if not isinstance(calls, list):
        return False
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return False
        if not isinstance(fn.get("arguments", ""), str | dict):
            return False
    return True


def _call(c: dict[str, Any]) -> dict[str, Any]:
    """A tool call as the server gave it, reduced to id / type / function (name, arguments)."""
    fn = c["function"]
    out: dict[str, Any] = {}
    if isinstance(c.get("id"), str):
        out["id"] = c["id"]
    out["type"] = "function"
    out["function"] = {"name": fn["name"], "arguments": fn.get("arguments", "")}
    return out


def _ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value
    return None


def _retry_after(resp: Response) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), capped."""
    value = resp.header("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _snippet(resp: Response, secrets: tuple[str, ...] = (), limit: int = 300) -> str:
    """The start of an error body, one line, redacted (kept in the errors file)."""
    text = redact(resp.body[: 4 * limit].decode("utf-8", "replace"), secrets)
    text = text.strip().replace("\n", " ")
    return text[:limit] + ("..." if len(text) > limit else "")
