"""OpenAI-compatible endpoints for `generate`: routing, health, retries, response checks.

Every request goes to the least-loaded healthy endpoint (fewest requests in flight, at most
``concurrency`` each). An endpoint that keeps failing (connection errors, timeouts, 5xx) is
taken out of rotation and probed on ``/v1/models`` until it answers again with the right model;
then it is re-admitted. Transient failures are retried with exponential backoff and full jitter
(a 429's ``Retry-After`` is honoured); a 4xx other than 429 is final. A 200 whose body is not a
valid chat completion is treated as transient too: servers under load do emit those.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

FAILURES_BEFORE_EJECT = 3
"""Consecutive transient failures after which an endpoint is taken out and health-checked."""

CONNECTIONS_PER_CLIENT = 8
"""httpx's connection pool scans all its connections on every request; several small pools
(one per 8 connections) keep that cost flat (measured here: ~2.5x the req/s at concurrency 128)."""

MAX_RETRY_AFTER = 300.0
"""A server's Retry-After is honoured up to this many seconds."""


@dataclass
class RetryPolicy:
    max_retries: int = 6  # retries after the first attempt
    backoff_base: float = 0.5  # seconds; attempt k waits uniform(0, min(cap, base * 2**k))
    backoff_cap: float = 30.0
    request_timeout: float = 600.0  # whole request, connect to last byte

    def backoff(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.backoff_cap, self.backoff_base * 2**attempt))


class FinalError(Exception):
    """A request that must not be retried (4xx other than 429); ``kind`` is e.g. ``http_400``."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class TransientError(Exception):
    """A failure worth retrying: 429, 5xx, timeout, connection error, invalid 200 body."""

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


@dataclass
class Endpoint:
    """One server: its client, load and health."""

    url: str  # base URL ending in /v1
    clients: list[httpx.AsyncClient]
    concurrency: int
    in_flight: int = 0
    healthy: bool = True
    failures: int = 0  # consecutive transient failures
    requests: int = 0
    served_models: list[str] = field(default_factory=list)
    _next: int = 0

    @property
    def client(self) -> httpx.AsyncClient:
        """The next of the endpoint's connection pools, in turn."""
        self._next = (self._next + 1) % len(self.clients)
        return self.clients[self._next]

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()


def base_url(url: str) -> str:
    """``http://h:8000``, ``http://h:8000/``, ``http://h:8000/v1`` -> ``http://h:8000/v1``."""
    url = url.rstrip("/")
    for suffix in ("/chat/completions", "/models"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url if url.endswith("/v1") else url + "/v1"


def make_clients(concurrency: int, api_key: str | None) -> list[httpx.AsyncClient]:
    """Connection pools for ``concurrency`` requests in flight (see CONNECTIONS_PER_CLIENT)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    n = -(-concurrency // CONNECTIONS_PER_CLIENT)
    size = -(-concurrency // n) + 1
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    # the whole-request deadline is enforced with asyncio.timeout; httpx's own is a backstop
    timeout = httpx.Timeout(None, connect=30.0)
    return [httpx.AsyncClient(limits=limits, headers=headers, timeout=timeout) for _ in range(n)]


async def list_models(ep: Endpoint, timeout: float) -> list[str]:
    """Model ids served by ``ep`` (``GET /v1/models``); raises `TransientError` when down."""
    try:
        async with asyncio.timeout(timeout):
            resp = await ep.client.get(ep.url + "/models")
    except TimeoutError:
        raise TransientError("timeout", f"GET /models timed out after {timeout:g}s") from None
    except httpx.HTTPError as exc:
        raise TransientError("connect", f"GET /models: {_describe(exc)}") from None
    if resp.status_code != 200:
        raise TransientError(f"http_{resp.status_code}", f"GET /models: HTTP {resp.status_code}")
    try:
        data = resp.json()["data"]
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, KeyError, TypeError):
        raise TransientError("invalid_response", "GET /models: not an OpenAI model list") from None


class EndpointPool:
    """Least-loaded routing over healthy endpoints, with ejection and re-admission."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        model: str,
        health_interval: float = 5.0,
        give_up_after: float = 600.0,
    ) -> None:
        self.endpoints = endpoints
        self.model = model
        self.health_interval = health_interval
        self.give_up_after = give_up_after
        self._changed = asyncio.Condition()
        self._checkers: dict[str, asyncio.Task[None]] = {}
        self._all_down_since: float | None = None
        self._rr = 0
        self.closed = False

    async def acquire(self) -> Endpoint:
        """Wait for a free slot on a healthy endpoint; the least loaded one wins."""
        async with self._changed:
            while True:
                ep = self._pick()
                if ep is not None:
                    ep.in_flight += 1
                    return ep
                if not any(e.healthy for e in self.endpoints):
                    down = time.monotonic() - (self._all_down_since or time.monotonic())
                    if down > self.give_up_after:
                        limit = f"--give-up-after {self.give_up_after:g}"
                        raise NoEndpoint(f"no endpoint healthy for {down:.0f}s ({limit})")
                try:
                    async with asyncio.timeout(self.health_interval):
                        await self._changed.wait()
                except TimeoutError:
                    pass

    def _pick(self) -> Endpoint | None:
        free = [e for e in self.endpoints if e.healthy and e.in_flight < e.concurrency]
        if not free:
            return None
        self._rr += 1
        n = len(free)
        # least relative load; ties rotate so equal endpoints share the work
        order = sorted(
            range(n), key=lambda i: (free[i].in_flight / free[i].concurrency, (i - self._rr) % n)
        )
        return free[order[0]]

    async def release(self, ep: Endpoint, ok: bool | None) -> None:
        """Give the slot back; ``ok`` False counts a transient failure, None is neutral."""
        async with self._changed:
            ep.in_flight -= 1
            if ok:
                ep.failures = 0
            elif ok is False:
                ep.failures += 1
                if ep.healthy and ep.failures >= FAILURES_BEFORE_EJECT:
                    self._eject(ep)
            self._changed.notify_all()

    def _eject(self, ep: Endpoint) -> None:
        ep.healthy = False
        if not any(e.healthy for e in self.endpoints):
            self._all_down_since = time.monotonic()
        if ep.url not in self._checkers and not self.closed:
            self._checkers[ep.url] = asyncio.get_running_loop().create_task(self._probe(ep))

    def mark_down(self, ep: Endpoint) -> None:
        """Take an endpoint out from the start (unreachable at launch)."""
        self._eject(ep)

    async def _probe(self, ep: Endpoint) -> None:
        """Health-check an ejected endpoint until it serves the model again."""
        try:
            while not self.closed:
                await asyncio.sleep(self.health_interval)
                try:
                    models = await list_models(ep, timeout=max(self.health_interval, 5.0))
                except TransientError:
                    continue
                if self.model in models:
                    async with self._changed:
                        ep.healthy = True
                        ep.failures = 0
                        self._all_down_since = None
                        self._changed.notify_all()
                    return
        finally:
            self._checkers.pop(ep.url, None)

    async def close(self) -> None:
        self.closed = True
        for task in list(self._checkers.values()):
            task.cancel()
        for ep in self.endpoints:
            await ep.aclose()


async def complete(
    pool: EndpointPool, body: dict[str, Any], policy: RetryPolicy, rng: random.Random
) -> Completion:
    """POST /chat/completions, retried; raises `FinalError`, `RetriesExhausted`, `NoEndpoint`."""
    payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
    attempt = 0
    while True:
        ep = await pool.acquire()
        ok: bool | None = None
        try:
            result = await _post(ep, payload, policy.request_timeout)
            ok = True
            result.attempts = attempt + 1
            return result
        except TransientError as exc:
            ok = None if exc.kind == "http_429" else False  # busy is not unhealthy
            if attempt >= policy.max_retries:
                raise RetriesExhausted(exc, attempt + 1) from None
            wait = policy.backoff(attempt, rng)
            if exc.retry_after is not None:
                wait = max(wait, exc.retry_after)
        except FinalError:
            ok = True  # the server is fine; the request is not
            raise
        finally:
            ep.requests += 1
            await pool.release(ep, ok)
        attempt += 1
        await asyncio.sleep(wait)


async def _post(ep: Endpoint, payload: bytes, timeout: float) -> Completion:
    try:
        async with asyncio.timeout(timeout):
            resp = await ep.client.post(
                ep.url + "/chat/completions",
                content=payload,
                headers={"Content-Type": "application/json"},
            )
    except TimeoutError:
        raise TransientError("timeout", f"no complete response within {timeout:g}s") from None
    except httpx.HTTPError as exc:
        raise TransientError("connect", _describe(exc)) from None
    status = resp.status_code
    if status == 429:
        raise TransientError("http_429", f"HTTP 429: {_snippet(resp)}", _retry_after(resp))
    if status >= 500:
        raise TransientError(
            f"http_{status}", f"HTTP {status}: {_snippet(resp)}", _retry_after(resp)
        )
    if status >= 400:
        raise FinalError(f"http_{status}", f"HTTP {status}: {_snippet(resp)}", status)
    if status != 200:
        raise TransientError("invalid_response", f"unexpected HTTP {status}")
    return parse_completion(resp.content, ep.url)


def parse_completion(content: bytes, endpoint: str) -> Completion:
    """The kept parts of a 200 body; `TransientError` ``invalid_response`` if it is not one."""
    try:
        data = json.loads(content)
    except ValueError as exc:
        raise TransientError("invalid_response", f"body is not JSON: {exc}") from None
    try:
        choice = data["choices"][0]
        msg = choice["message"]
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError):
        raise TransientError("invalid_response", "body has no choices[0].message") from None
    if not isinstance(msg, dict) or not isinstance(finish, str):
        raise TransientError("invalid_response", "choices[0] lacks a message or finish_reason")
    message = _kept_message(msg)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Completion(
        message=message,
        finish_reason=finish,
        usage={k: v for k, v in usage.items() if isinstance(v, int)},
        endpoint=endpoint,
        model=data.get("model") if isinstance(data.get("model"), str) else None,
        prompt_token_ids=_ids(data.get("prompt_token_ids") or choice.get("prompt_token_ids")),
        completion_token_ids=_ids(choice.get("token_ids")),
    )


def _kept_message(msg: dict[str, Any]) -> dict[str, Any]:
    content = msg.get("content")
    calls = msg.get("tool_calls")
    reasoning = msg.get("reasoning_content")
    if reasoning is None:
        reasoning = msg.get("reasoning")
    if content is not None and not isinstance(content, str):
        raise TransientError("invalid_response", f"message content is {type(content).__name__}")
    if calls is not None and not _valid_calls(calls):
        raise TransientError("invalid_response", "message tool_calls are malformed")
    if reasoning is not None and not isinstance(reasoning, str):
        raise TransientError("invalid_response", "message reasoning is not a string")
    if content is None and not calls and reasoning is None:
        raise TransientError("invalid_response", "message has no content, reasoning or tool_calls")
    out: dict[str, Any] = {"role": "assistant", "content": content or ""}
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


def _retry_after(resp: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), capped."""
    value = resp.headers.get("retry-after")
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


def _snippet(resp: httpx.Response, limit: int = 300) -> str:
    text = resp.text.strip().replace("\n", " ")
    return text[:limit] + ("..." if len(text) > limit else "")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
