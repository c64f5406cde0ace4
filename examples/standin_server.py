"""A stand-in for a vLLM / SGLang server, for the quick start and tests: NOT a model.

It speaks the OpenAI-compatible HTTP that `draftset generate` and `draftset run` use
(``GET /v1/models``, ``POST /v1/chat/completions``) and answers deterministically from the
request alone, so a demo runs anywhere in seconds and a resumed run gives the same set:

- the answer quotes the last message; with ``enable_thinking`` (the default) it also returns
  ``reasoning_content``;
- when the request offers ``tools`` and the last message is the user's, it calls the first tool
  (so tool-calling prompts end at that call, as they do when a real model calls a tool);
- after a tool result it answers in text.

Run it with ``python examples/standin_server.py --port 8000`` (prints its URL), or in
a thread: ``with StandinServer() as srv: srv.url``. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "standin-model"


def completion(req: dict[str, Any], model: str) -> dict[str, Any]:
    """The deterministic answer to one chat-completions request."""
    msgs = req.get("messages") or []
    last = msgs[-1] if msgs else {"role": "user", "content": ""}
    turn = sum(1 for m in msgs if m.get("role") == "assistant")
    content = last.get("content") or ""
    if not isinstance(content, str):
        content = json.dumps(content)
    message: dict[str, Any] = {"role": "assistant"}
    finish = "stop"
    tools = req.get("tools") or []
    if tools and last.get("role") == "user":
        name = tools[0].get("function", {}).get("name", "tool")
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps({"query": content[:40]})},
            }
        ]
        finish = "tool_calls"
    else:
        message["content"] = f"(stand-in answer {turn + 1}) You said: {content[:60]}"
    kwargs = req.get("chat_template_kwargs") or {}
    if kwargs.get("enable_thinking", True):
        message["reasoning_content"] = f"The user wrote {len(content)} characters."
    words = len((message.get("content") or "").split()) + 1
    prompt = sum(len(str(m.get("content") or "").split()) + 4 for m in msgs)
    return {
        "id": f"standin-{turn}",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": words,
            "total_tokens": prompt + words,
        },
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server.model}]})
        else:
            self._send(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length))
        except ValueError:
            self._send(400, {"error": "body is not JSON"})
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": f"no route {self.path}"})
        elif req.get("model") != self.server.model:
            self._send(404, {"error": f"model {req.get('model')!r} is not served"})
        else:
            self.server.requests += 1
            self._send(200, completion(req, self.server.model))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    model: str = MODEL
    requests: int = 0


class StandinServer:
    """Serve in a background thread: ``with StandinServer() as srv: srv.url``."""

    def __init__(self, port: int = 0, model: str = MODEL) -> None:
        self.httpd = _Server(("127.0.0.1", port), _Handler)
        self.httpd.model = model
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return self.httpd.requests

    def __enter__(self) -> StandinServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python examples/standin_server.py",
        description="A deterministic stand-in for a vLLM server (not a model): for demos/tests.",
    )
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    ap.add_argument("--model", default=MODEL, help=f"served model name (default {MODEL})")
    a = ap.parse_args(argv)
    srv = _Server(("127.0.0.1", a.port), _Handler)
    srv.model = a.model
    print(
        f"stand-in for vLLM (not a model) serving {a.model!r} at "
        f"http://127.0.0.1:{srv.server_address[1]}/v1",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        srv.serve_forever()


if __name__ == "__main__":
    main()
