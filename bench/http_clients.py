"""CPU per request of `generate`'s HTTP client, hand-written (asyncio) vs aiohttp, at a real
server's latency: answers take 50-500 ms (uniform, seeded), 8 endpoints, 256 requests in
flight (32 per endpoint), through `generate`'s own request path (`EndpointPool` routing,
`complete`: JSON body out, completion parsed back).

The server (this file with ``--serve``, standard-library asyncio, keep-alive, a ~600-byte chat
completion) runs in its own process; every client run is a fresh process timing its own
request loop: CPU seconds of the process (``time.process_time``) and wall seconds over the
loop. Clients alternate, ``--repeat`` times; the table shows medians and the range.

The hand-written client is `draftset.generation.wire.Client` as of ``--wire-rev`` (git, default
HEAD: the one `generate` uses); the aiohttp client is `AiohttpClient` below (the same interface,
bounds and gzip guard, as it would ship).

    .venv/bin/python bench/http_clients.py [--requests 3000] [--repeat 3]
        [--latency 0.05 0.5] [--endpoints 8] [--concurrency 256] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WIRE_REV = "HEAD"
"""The revision whose generation/wire.py `Client` is measured as the hand-written client."""

REPLY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "A short answer of a few dozen tokens, like a real one. " * 6,
                    "reasoning_content": "Some reasoning first.",
                },
            }
        ],
        "usage": {"prompt_tokens": 40, "completion_tokens": 80, "total_tokens": 120},
    }
).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "bench-model"}]}).encode()


# --- the server ---------------------------------------------------------------------------------
async def _handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lo: float, hi: float
) -> None:
    rng = random.Random()
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            body = MODELS if b" /v1/models " in head.split(b"\r\n", 1)[0] else REPLY
            if body is REPLY:
                await asyncio.sleep(rng.uniform(lo, hi))
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(n: int, lo: float, hi: float) -> None:
    servers = [
        await asyncio.start_server(lambda r, w: _handle(r, w, lo, hi), "127.0.0.1", 0, backlog=1024)
        for _ in range(n)
    ]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print(json.dumps(ports), flush=True)
    await asyncio.Event().wait()


# --- the aiohttp client measured ---------------------------------------------------------------
# `draftset.generation.wire.Client`'s interface on aiohttp, as `generate` would use it: the body
# bounded as received and decoded by wire's bounded decoder (gzip bombs), proxies from the
# environment looked up once per endpoint (aiohttp's trust_env asks a worker thread per request:
# 2x the CPU measured here), no connection limit of its own (`EndpointPool` bounds it).
from draftset.generation import wire  # noqa: E402


class AiohttpClient:
    """`Client`'s interface on aiohttp (what speculators uses): keep-alive pooling, TLS,
    ``HTTP(S)_PROXY`` / ``NO_PROXY`` from the environment, a maintained protocol stack. The body
    is read in pieces and bounded as received (``max_body``); decoding is this module's bounded
    decoder (aiohttp's own decompression is off), so a gzip bomb holds at most ``max_body``."""

    def __init__(
        self,
        target: Any,
        headers: dict[str, str] | None = None,
        max_body: int = 32 * 1024 * 1024,
        connect_timeout: float = 30.0,
    ) -> None:
        self.target = target
        self.max_body = max_body
        self.connect_timeout = connect_timeout
        fixed = {
            "User-Agent": wire.USER_AGENT.decode(),
            "Accept": "application/json",
            "Accept-Encoding": "gzip, deflate",
        }
        if target.basic_auth:
            fixed["Authorization"] = target.basic_auth
        fixed.update(headers or {})
        self._headers = fixed
        host = f"[{target.host}]" if ":" in target.host else target.host
        self._base = f"{target.scheme}://{host}:{target.port}{target.prefix}"
        self._session: Any = None
        self._proxy: tuple[Any, Any] = (None, None)
        self.secrets: tuple[str, ...] = ()
        self.closed = False

    def _open(self) -> Any:
        import aiohttp

        if self._session is None:
            from aiohttp.helpers import get_env_proxy_for_url
            from yarl import URL

            # HTTP(S)_PROXY / NO_PROXY (and ~/.netrc proxy credentials), looked up once: every
            # request goes to the same host (aiohttp's trust_env asks a thread per request)
            try:
                self._proxy = get_env_proxy_for_url(URL(self._base))
            except LookupError:
                self._proxy = (None, None)
            tls = ssl.create_default_context() if self.target.scheme == "https" else None
            self._session = aiohttp.ClientSession(
                # no connection limit of its own: `EndpointPool` bounds requests in flight
                connector=aiohttp.TCPConnector(limit=0, ssl=tls if tls is not None else True),
                headers=self._headers,
                auto_decompress=False,  # decoded here, bounded
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout),
            )
        return self._session

    async def request(self, method: str, path: str, body: bytes | None = None) -> Any:
        """Send one request and read the whole response (bounded)."""
        import aiohttp

        session = self._open()
        headers = {"Content-Type": "application/json"} if body is not None else None
        for attempt in (0, 1):
            try:
                proxy, proxy_auth = self._proxy
                async with session.request(
                    method,
                    self._base + path,
                    data=body,
                    headers=headers,
                    proxy=proxy,
                    proxy_auth=proxy_auth,
                ) as resp:
                    n = resp.content_length
                    if n is not None and n > self.max_body:
                        raise wire.BodyTooLarge(self.max_body, decoded=False)
                    raw = bytearray()
                    async for piece in resp.content.iter_any():
                        raw += piece
                        if len(raw) > self.max_body:
                            raise wire.BodyTooLarge(self.max_body, decoded=False)
                    got: dict[bytes, bytes] = {}
                    for name, value in resp.raw_headers:
                        key = name.lower()
                        got[key] = got[key] + b", " + value if key in got else value
                    coding = got.get(b"content-encoding", b"identity").strip().lower()
                    decoder = wire._decoder(coding, self.max_body)
                    data = decoder(bytes(raw)) if decoder is not None else bytes(raw)
                    return wire.Response(resp.status, got, data)
            except aiohttp.ServerDisconnectedError as exc:
                if attempt == 0:  # an idle keep-alive connection the server had closed
                    continue
                raise wire.WireError("connect", f"server closed the connection: {exc}") from None
            except aiohttp.ClientConnectorError as exc:
                raise wire.WireError("connect", f"{type(exc.os_error).__name__}: {exc}") from None
            except (aiohttp.ClientPayloadError, aiohttp.ClientResponseError) as exc:
                raise wire.WireError("invalid_response", f"{type(exc).__name__}: {exc}") from None
            except (aiohttp.ClientOSError, aiohttp.ClientConnectionError) as exc:
                raise wire.WireError("connect", f"{type(exc).__name__}: {exc}") from None
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self.closed = True
        if self._session is not None:
            await self._session.close()


# --- one client run -----------------------------------------------------------------------------
def _hand_written_client(rev: str) -> Any:
    """`Client` from generation/wire.py at ``rev`` (the hand-written one)."""
    src = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:src/draftset/generation/wire.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "wire_hand_written.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("wire_hand_written", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wire_hand_written"] = module
    spec.loader.exec_module(module)
    return module.Client


async def _client_run(kind: str, ports: list[int], requests: int, concurrency: int, rev: str):
    from draftset.generation import http

    cls = _hand_written_client(rev) if kind == "hand-written" else AiohttpClient
    per = max(1, concurrency // len(ports))
    endpoints = []
    for port in ports:
        target = wire.parse_target(f"http://127.0.0.1:{port}/v1")
        endpoints.append(http.Endpoint(target.display, cls(target), per))
    pool = http.EndpointPool(endpoints, "bench-model")
    policy = http.RetryPolicy(max_retries=0, request_timeout=60)
    rng = random.Random(0)
    body = {
        "model": "bench-model",
        "messages": [{"role": "user", "content": "Explain TCP slow start in two sentences."}],
        "max_tokens": 128,
    }
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)

    async def worker() -> int:
        done = 0
        while True:
            try:
                queue.get_nowait()
            except asyncio.QueueEmpty:
                return done
            await http.complete(pool, body, policy, rng)
            done += 1

    # warm-up: one connection per slot, then the timed loop
    warm = min(concurrency, requests)
    await asyncio.gather(*(http.complete(pool, body, policy, rng) for _ in range(warm)))
    cpu0, wall0 = time.process_time(), time.monotonic()
    done = sum(await asyncio.gather(*(worker() for _ in range(concurrency))))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    await pool.close()
    return {"client": kind, "requests": done, "cpu_s": cpu, "wall_s": wall}


# --- the driver ---------------------------------------------------------------------------------
def _run_client(kind: str, ports: list[int], args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, __file__, "--client", kind, "--ports", json.dumps(ports)]
    cmd += ["--requests", str(args.requests), "--concurrency", str(args.concurrency)]
    cmd += ["--wire-rev", args.wire_rev]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"{args.endpoints} endpoints, {args.concurrency} in flight, answers in"
        f" {args.latency[0] * 1000:.0f}-{args.latency[1] * 1000:.0f} ms, {args.requests:,}"
        f" requests per run, {args.repeat} runs each (median [min-max])",
        "",
        f"{'client':<14} {'CPU ms/request':>24} {'requests/s':>22} {'CPU cores busy':>22}"
        f" {'server CPU ms/request':>26}",
    ]
    for kind in ("hand-written", "aiohttp"):
        mine = [r for r in runs if r["client"] == kind]
        ms = [1000 * r["cpu_s"] / r["requests"] for r in mine]
        rps = [r["requests"] / r["wall_s"] for r in mine]
        cores = [r["cpu_s"] / r["wall_s"] for r in mine]

        def cell(xs: list[float], fmt: str) -> str:
            return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}-{max(xs):{fmt}}]"

        srv = [1000 * r["server_cpu_s"] / (r["requests"] + args.concurrency) for r in mine]
        lines.append(
            f"{kind:<14} {cell(ms, '.3f'):>24} {cell(rps, '.0f'):>22} {cell(cores, '.3f'):>22}"
            f" {cell(srv, '.3f'):>26}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--endpoints", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--latency", type=float, nargs=2, default=[0.05, 0.5], metavar=("LO", "HI"))
    ap.add_argument("--wire-rev", default=WIRE_REV)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve(args.endpoints, *args.latency))
        return
    if args.client:
        ports = json.loads(args.ports)
        result = asyncio.run(
            _client_run(args.client, ports, args.requests, args.concurrency, args.wire_rev)
        )
        print(json.dumps(result))
        return
    cmd = [sys.executable, __file__, "--serve", "--endpoints", str(args.endpoints)]
    cmd += ["--latency", *map(str, args.latency)]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        ports = json.loads(server.stdout.readline())
        import psutil

        srv = psutil.Process(server.pid)
        runs = []
        for _ in range(args.repeat):
            for kind in ("hand-written", "aiohttp"):
                before = sum(srv.cpu_times()[:2])
                runs.append(_run_client(kind, ports, args))
                # the server's CPU over the whole client process (warm-up included)
                runs[-1]["server_cpu_s"] = sum(srv.cpu_times()[:2]) - before
                print(json.dumps(runs[-1]), file=sys.stderr)
    finally:
        server.terminate()
        server.wait(10)
    print(_table(runs, args))
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "runs": runs})
        )


if __name__ == "__main__":
    main()
