"""A tiny OpenAI-compatible server on 127.0.0.1 that injects faults on request.

Standard library only (asyncio, hand-written HTTP/1.1 with keep-alive), so tests need nothing
heavy. Answers are deterministic: they depend only on the request's messages, so an
interrupted-and-resumed run must produce the same set of lines as an uninterrupted one.

Faults are asked for inside the first user message, e.g. ``"hello [500x2]"``: the first two
attempts of each turn of that row fail with HTTP 500, the third succeeds. Directives:

- ``[500xN]`` / ``[502xN]`` / ``[408xN]`` / ``[429xN]`` / ``[503xN]`` / ``[slowxN]`` /
  ``[dropxN]`` / ``[badjsonxN]`` / ``[badshapexN]``: the first N attempts get a 500, a
  gateway's HTML 502 or 408, a 429 with ``Retry-After`` (none when ``retry_after`` is None), a
  503 without one (an overloaded server), a response slower than ``slow_seconds``, a connection
  closed without response, a 200 with malformed JSON, a 200 JSON without ``choices``;
  ``[abortxN]``: a 200 whose answer has ``finish_reason: "abort"`` (vLLM shutting down);
- ``[length]``: every answer has ``finish_reason: "length"``; ``[400]``: always HTTP 400;
- ``[legacycall]``: the legacy ``message.function_call`` with ``finish_reason:
  "function_call"``; ``[fcnocall]``: that finish_reason with no call at all;
- ``[finish:REASON]``: every answer has that ``finish_reason`` (vLLM's ``abort``, OpenAI's
  ``content_filter``); ``[stopstr]``: ``finish_reason: "stop"`` with ``stop_reason: "###"``
  (vLLM: a stop string ended it) and ``[stoptoken]`` with ``stop_reason: 151645`` (a stop
  token id) — SGLang's ``matched_stop`` likewise with ``[matchedstr]``; ``[stopid:N]``:
  ``stop_reason: N`` (a stop token id the request's ``stop_token_ids`` may have set);
  ``[eosnull]``: ``stop_reason: null`` written out, as vLLM does for an answer ended by the
  tokenizer's EOS (the default answer has no ``stop_reason`` key, as OpenAI's);
- ``[call:NAME]``: the model calls tool NAME whenever the last message is not a tool result;
- ``[reasoningfield]``: reasoning is returned as ``reasoning`` instead of ``reasoning_content``;
- ``[huge]``: a 200 whose body is ``huge_bytes`` long; ``[gzipbomb]``: a 200 of ~64 KiB, gzip
  encoded, that inflates to ``bomb_bytes``; ``[gzip]`` / ``[chunked]``: a normal answer, gzip
  encoded / sent in chunks;
- ``[surrogate]``: an answer whose content is the JSON escape of a lone surrogate (``\\ud800``);
- ``[echoauth]``: HTTP 401 whose body echoes the request's ``Authorization`` header;
  ``[echoauth200]``: a normal 200 answer whose content and reasoning echo it.
- ``[model:NAME]``: a normal answer whose ``model`` field says NAME (a server that switched
  models, or a proxy routing to another one).
- ``[nullcontent]``: ``content: null`` with no reasoning and no tool call, ``finish_reason:
  "stop"`` (a model that ended its answer at once, as some servers spell an empty one).
- ``[twochoices]``: a second choice (``index: 1``, cut at ``length``) listed before the answer.
- ``[err200:CODE]`` / ``[err200:CODExN]``: a 200 whose body is ``{"error": {"message",
  "code": CODE}}`` (a proxy's in-band error; ``none``: no code), every attempt or the first N;
  ``[err200old:CODE]``: vLLM's older shape ``{"object": "error", "message", "code"}``.
- ``[leak]``: every answer's last text field ends with ``<|im_end|>`` (a server that leaks the
  stop token's text, as `transformers serve` did).

Every request's headers are kept in ``headers`` (lower-case names).

Run ``python tests/fault_server.py --port 0`` to serve from another process (prints the URL).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
import threading
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MODEL = "fault-model"
_DIRECTIVE = re.compile(r"\[(500|502|429|503|408|slow|drop|badjson|badshape|abort)x(\d+)\]")
_BOMBS: dict[int, bytes] = {}
_CALL = re.compile(r"\[call:(\w+)\]")
_MODEL = re.compile(r"\[model:([\w.-]+)\]")
_ERR200 = re.compile(r"\[err200(old)?:(\d+|none)(?:x(\d+))?\]")
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    429: "Too Many Requests",
    408: "Request Timeout",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    404: "Not Found",
}


@dataclass
class FaultServer:
    """Serve in a background thread: ``with FaultServer() as srv: srv.url``."""

    latency: float = 0.0  # seconds before every completion
    slow_seconds: float = 5.0  # how long a [slow] response takes
    retry_after: str | None = "1"  # the 429's Retry-After header (None: no header)
    model: str = MODEL
    root: str | None = None  # the weights /v1/models names as the model's ``root`` (vLLM, SGLang)
    down: bool = False  # answer 503 to everything (health checks included)
    close_after_reply: bool = False  # close every connection after one reply (no header says so)
    down_after: int | None = None  # go down after this many 200 completions (no timer races)
    broken: bool = False  # 500 to every completion, fast, while /v1/models answers (a sick GPU)
    throttled: bool = False  # 429 (with retry_after) to every completion: a spent quota
    models_throttled: int = 0  # 429 (with retry_after) to this many first GET /v1/models
    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)  # completion bodies received
    attempts: Counter[tuple[str, int]] = field(default_factory=Counter)
    completions: int = 0  # 200 completions sent
    huge_bytes: int = 2 * 1024 * 1024
    bomb_bytes: int = 256 * 1024 * 1024
    headers: list[dict[str, str]] = field(default_factory=list)  # of every request

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FaultServer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(self.start())
        self._ready.set()
        loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(loop)  # open connections: end them before the loop closes
        for t in tasks:
            t.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks))
        # one more turn of the loop: the transports those tasks closed drop their sockets in a
        # callback (left unrun, each is a "ResourceWarning: unclosed transport" later on)
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()

    async def start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        return server

    # --- HTTP ---------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, headers = _parse_head(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.headers.append(headers)
                reply = await self._route(method, path, body, headers)
                if reply is None:  # drop the connection without an answer
                    break
                writer.write(reply)
                await writer.drain()
                if self.close_after_reply:
                    await asyncio.sleep(0.01)
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()  # also on cancellation at shutdown

    async def _route(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> bytes | None:
        if self.down:
            return _response(503, {"error": "down"})
        if method == "GET" and path.rstrip("/") == "/v1/models":
            if self.models_throttled > 0:  # a gateway's rate limit on every route
                self.models_throttled -= 1
                return await self._fault("429")
            listed: dict[str, Any] = {"id": self.model, "object": "model"}
            if self.root is not None:
                listed["root"] = self.root
            return _response(200, {"object": "list", "data": [listed]})
        if method == "POST" and path.rstrip("/") == "/v1/chat/completions":
            return await self._complete(json.loads(body), headers)
        return _response(404, {"error": f"no route {method} {path}"})

    async def _complete(self, req: dict[str, Any], headers: dict[str, str]) -> bytes | None:
        self.requests.append(req)
        msgs = req["messages"]
        first = next(m["content"] for m in msgs if m["role"] == "user")
        turn = sum(1 for m in msgs if m["role"] == "assistant")
        key = (first, turn)
        self.attempts[key] += 1
        attempt = self.attempts[key]
        if self.latency:
            await asyncio.sleep(self.latency)
        if req.get("model") != self.model:
            return _response(404, {"error": f"model {req.get('model')!r} not served"})
        if self.broken:
            return _response(500, {"error": "broken (injected)"})
        if self.throttled:
            return await self._fault("429")
        if "[400]" in first:
            return _response(400, {"error": "bad request (injected)"})
        if "[echoauth]" in first:
            echo = {
                "error": "unauthorized",
                "headers": {"authorization": headers.get("authorization")},
            }
            return _response(401, echo)
        if "[huge]" in first:
            return _raw(200, b" " * self.huge_bytes)
        if "[gzipbomb]" in first:
            return _raw(200, _bomb(self.bomb_bytes), {"Content-Encoding": "gzip"})
        err = _ERR200.search(first)
        if err and (err.group(3) is None or attempt <= int(err.group(3))):
            code = None if err.group(2) == "none" else int(err.group(2))
            fields = {"message": "context length (injected)", "type": "BadRequestError"}
            if err.group(1):
                return _response(200, {"object": "error", **fields, "code": code})
            return _response(200, {"error": {**fields, "code": code}})
        for kind, n in _DIRECTIVE.findall(first):
            if attempt <= int(n):
                return await self._fault(kind)
        self.completions += 1
        reply = _completion(req, first, turn)
        if "[echoauth200]" in first:
            msg = reply["choices"][0]["message"]
            msg["content"] += f" your header was {headers.get('authorization')}"
            msg["reasoning_content"] = f"the key {headers.get('authorization', '')[7:]} echoed"
        if "[surrogate]" in first:
            text = json.dumps(reply).replace("answer ", "answer \\ud800 ", 1)
            return _raw(200, text.encode())
        if "[gzip]" in first:
            return _raw(
                200, gzip.compress(json.dumps(reply).encode()), {"Content-Encoding": "gzip"}
            )
        if "[chunked]" in first:
            return _chunked(json.dumps(reply).encode())
        if self.down_after is not None and self.completions >= self.down_after:
            self.down, self.down_after = True, None  # once: the test brings it back up
        return _response(200, reply)

    async def _fault(self, kind: str) -> bytes | None:
        if kind == "500":
            return _response(500, {"error": "injected 500"})
        if kind == "502":  # a gateway in front of the server: HTML, no JSON
            return _raw(502, b"<html><body>502 Bad Gateway</body></html>")
        if kind == "408":  # a gateway that timed out waiting (nginx, a cloud load balancer)
            return _raw(408, b"<html><body>408 Request Time-out</body></html>")
        if kind == "429":
            after = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return _response(429, {"error": "slow down"}, after)
        if kind == "503":  # an overloaded server (SGLang, a gateway), no Retry-After
            return _response(503, {"error": "overloaded"})
        if kind == "slow":
            await asyncio.sleep(self.slow_seconds)
            return _response(500, {"error": "too late"})
        if kind == "badjson":
            return _raw(200, b'{"choices": [{"message": {"content": "trunc')
        if kind == "badshape":
            return _response(200, {"object": "chat.completion", "data": []})
        if kind == "abort":  # a cut answer, as vLLM ends the requests in flight at shutdown
            reply = _completion(self.requests[-1], "aborted", 0)
            reply["choices"][0]["finish_reason"] = "abort"
            return _response(200, reply)
        return None  # drop


def _completion(req: dict[str, Any], first: str, turn: int) -> dict[str, Any]:
    msgs = req["messages"]
    last = msgs[-1]
    history = " | ".join((m["content"] or "")[:20] for m in msgs if m["role"] == "assistant")
    message: dict[str, Any] = {"role": "assistant"}
    finish = "length" if "[length]" in first else "stop"
    if m_finish := re.search(r"\[finish:(\w+)\]", first):
        finish = m_finish.group(1)
    call = _CALL.search(first)
    if call and last["role"] != "tool":
        message["content"] = None
        args = json.dumps({"turn": turn})
        message["tool_calls"] = [
            {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": call.group(1), "arguments": args},
            }
        ]
        finish = "tool_calls"
    else:
        tail = f" after tool {last['content']}" if last["role"] == "tool" else ""
        message["content"] = f"answer {turn} to {last['content'][:40]!r}{tail} (history: {history})"
    kwargs = req.get("chat_template_kwargs") or {}
    if kwargs.get("enable_thinking", True):
        field_name = "reasoning" if "[reasoningfield]" in first else "reasoning_content"
        message[field_name] = f"thinking about turn {turn}"
    if "[nullcontent]" in first:  # the model ended at once: `content: null`, nothing else
        message = {"role": "assistant", "content": None}
    if "[leak]" in first:
        leaky = "content" if message.get("content") else "reasoning_content"
        if message.get(leaky):
            message[leaky] += "<|im_end|>"
    text = message.get("content") or ""
    out: dict[str, Any] = {
        "id": f"cmpl-{turn}",
        "object": "chat.completion",
        "model": m.group(1) if (m := _MODEL.search(first)) else req["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": 3 * len(msgs),
            "completion_tokens": len(text.split()),
            "total_tokens": 3 * len(msgs) + len(text.split()),
        },
    }
    choice = out["choices"][0]
    if "[legacycall]" in first:  # the pre-tools OpenAI shape: message.function_call
        message.pop("content", None)
        message["content"] = None
        message["function_call"] = {"name": "lookup", "arguments": '{"q": 1}'}
        choice["finish_reason"] = "function_call"
    if "[fcnocall]" in first:
        choice["finish_reason"] = "function_call"
    if "[stopstr]" in first:
        choice["stop_reason"] = "###"
    if "[stoptoken]" in first:
        choice["stop_reason"] = 151645
    if m_stopid := re.search(r"\[stopid:(\d+)\]", first):
        choice["stop_reason"] = int(m_stopid.group(1))
    if "[eosnull]" in first:
        choice["stop_reason"] = None
    if "[matchedstr]" in first:
        choice["matched_stop"] = "###"
    if "[twochoices]" in first:  # another sample listed first (a proxy merging replies)
        other = {"role": "assistant", "content": "another sample, cut"}
        out["choices"].insert(0, {"index": 1, "message": other, "finish_reason": "length"})
    if req.get("return_token_ids"):
        out["prompt_token_ids"] = list(range(3 * len(msgs)))
        out["choices"][0]["token_ids"] = list(range(100, 100 + len(text.split())))
    return out


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return method, path, headers


def _response(status: int, obj: Any, headers: dict[str, str] | None = None) -> bytes:
    return _raw(status, json.dumps(obj).encode(), headers)


def _raw(status: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _bomb(size: int) -> bytes:
    """``size`` spaces (rounded up to 1 MiB), gzip-compressed to about size / 1000 bytes."""
    if size not in _BOMBS:
        comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        block = b" " * (1 << 20)
        body = b"".join(comp.compress(block) for _ in range(-(-size >> 20))) + comp.flush()
        _BOMBS[size] = body
    return _BOMBS[size]


def _chunked(body: bytes) -> bytes:
    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    out = bytearray(head.encode())
    for i in range(0, len(body), 7):
        part = body[i : i + 7]
        out += b"%x;ext=1\r\n" % len(part) + part + b"\r\n"
    return bytes(out + b"0\r\nX-Trailer: 1\r\n\r\n")


async def _serve_forever(srv: FaultServer) -> None:
    server = await srv.start()
    print(srv.url, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.0)
    a = ap.parse_args()
    asyncio.run(_serve_forever(FaultServer(latency=a.latency, port=a.port)))
