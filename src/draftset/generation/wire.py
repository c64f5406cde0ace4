"""A lean HTTP/1.1 client for `generate`: keep-alive connections on asyncio protocols.

Why not httpx: at the request rates a zero-latency server allows, httpx spent 1.4-2 ms of CPU per
request (connection-pool bookkeeping over every pooled connection, model objects, two sends per
request), 3-4x what speculators' aiohttp loop needs, and more as concurrency grew. The servers
`generate` talks to (vLLM, SGLang, ``transformers serve``) speak plain HTTP/1.1 JSON, so this
client does only that: one ``write`` per request, a response parser for ``Content-Length``,
``chunked`` and close-delimited bodies, ``gzip``/``deflate`` decoding, TLS through `ssl`.

Every response is bounded: the head by `MAX_HEAD_BYTES`, the body by ``max_body`` bytes both as
received and after decoding, so a huge body or a small gzip body that inflates to gigabytes (a
"gzip bomb") raises `BodyTooLarge` having held at most ``max_body`` bytes. No proxy support: the
client connects to the endpoint's host directly.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import zlib
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

MAX_HEAD_BYTES = 64 * 1024
"""Status line and headers of one response, at most."""

HIGH_WATER = 1 << 20
"""Bytes buffered from a socket before reading from it pauses until the parser catches up."""

USER_AGENT = b"draftset-generate"


class WireError(Exception):
    """The connection failed or the server broke the protocol; ``kind`` is ``connect`` (refused,
    reset, closed early) or ``invalid_response`` (not HTTP/1.x we can read)."""

    def __init__(self, kind: str, message: str, sent: bool = True) -> None:
        super().__init__(message)
        self.kind = kind
        self.sent = sent  # False: nothing of the response arrived (a reused connection may retry)


class BodyTooLarge(Exception):
    """A response body over the limit (as received or decoded); the connection is closed."""

    def __init__(self, limit: int, decoded: bool) -> None:
        what = "decompresses to more than" if decoded else "is larger than"
        super().__init__(f"response body {what} {limit:,} bytes (--max-response-bytes)")
        self.limit = limit
        self.decoded = decoded


@dataclass(frozen=True)
class Target:
    """Where an endpoint URL points, and how it may be shown."""

    scheme: str
    host: str
    port: int
    prefix: str  # path before /chat/completions, e.g. /v1
    display: str  # the URL without user:password@ (for metadata, messages, logs)
    basic_auth: str | None  # "Basic ..." from user:password@ in the URL

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def not_visible_ascii(text: str) -> str | None:
    """The first character of ``text`` that is not visible ASCII (a space, CR/LF, a control,
    non-ASCII), else None: what may not go raw into a request line or header."""
    return next((c for c in text if not "!" <= c <= "~"), None)


def parse_target(url: str) -> Target:
    """Split an ``http(s)://[user:pass@]host[:port]/prefix`` URL; the credentials never show."""
    bad = not_visible_ascii(url)
    if bad is not None:  # it would go into the request line raw: CR/LF, spaces, non-ASCII
        raise ValueError(
            f"{redact_url(url)!r} is not a valid URL: it holds {bad!r} (percent-encode it)"
        )
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:  # "Port out of range 0-65535", "Invalid IPv6 URL", ...
        raise ValueError(f"{redact_url(url)!r} is not a valid URL: {exc}") from None
    if parts.port == 0 or parts.netloc.endswith(":"):  # urlsplit reads both as "no port"
        raise ValueError(f"{redact_url(url)!r} is not a valid URL: give a port from 1 to 65535")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact_url(url)!r} is not an http(s) URL")
    auth = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode()
    return Target(
        parts.scheme,
        parts.hostname,
        port,
        parts.path.rstrip("/"),
        redact_url(url),
        auth,
    )


def redact_url(url: str) -> str:
    """``http://user:pass@host/v1`` -> ``http://host/v1`` (anything else unchanged)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = authority.rpartition("@")[2]
    return f"{scheme}://{authority}{slash}{path}"


@dataclass
class Response:
    status: int
    headers: dict[bytes, bytes]  # lower-case names; repeated headers joined with ", "
    body: bytes

    def header(self, name: str) -> str | None:
        value = self.headers.get(name.encode())
        return value.decode("latin-1") if value is not None else None


class _Conn(asyncio.Protocol):
    """One keep-alive connection: bytes in a buffer, a future to wait for more."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    # reading
    @property
    def reusable(self) -> bool:
        t = self.transport
        return not self.eof and not self.buf and t is not None and not t.is_closing()

    async def more(self, got_any: bool) -> None:
        """Wait for more bytes; `WireError` when the connection ends first."""
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        if self.eof:
            detail = f": {self.error}" if self.error else ""
            raise WireError("connect", f"server closed the connection{detail}", sent=got_any)
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def take(self, n: int) -> bytes:
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.eof = True


class Client:
    """Keep-alive HTTP/1.1 connections to one server; as many as requests in flight."""

    def __init__(
        self,
        target: Target,
        headers: dict[str, str] | None = None,
        max_body: int = 32 * 1024 * 1024,
        connect_timeout: float = 30.0,
    ) -> None:
        self.target = target
        self.max_body = max_body
        self.connect_timeout = connect_timeout
        fixed = {
            "Host": target.host_header,
            "User-Agent": USER_AGENT.decode(),
            "Accept": "application/json",
            "Accept-Encoding": "gzip, deflate",
        }
        if target.basic_auth:
            fixed["Authorization"] = target.basic_auth
        fixed.update(headers or {})
        self._head_tail = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._idle: list[_Conn] = []
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if target.scheme == "https" else None
        )
        self.secrets: tuple[str, ...] = ()  # redacted from error messages (API key, password)
        self.closed = False

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        t = self.target
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    _Conn,
                    t.host,
                    t.port,
                    ssl=self._ssl,
                    server_hostname=t.host if self._ssl else None,
                )
        except TimeoutError:
            raise WireError(
                "connect", f"connect timed out after {self.connect_timeout:g}s"
            ) from None
        except OSError as exc:
            raise WireError("connect", f"{type(exc).__name__}: {exc}") from None
        return conn

    async def request(self, method: str, path: str, body: bytes | None = None) -> Response:
        """Send one request and read the whole response (bounded). A reused connection that
        the server had closed meanwhile is replaced once, transparently."""
        head = f"{method} {self.target.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
        head += self._head_tail
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        data = head + b"\r\n" + (body or b"")
        while True:
            reused = False
            conn = None
            while self._idle:
                c = self._idle.pop()
                if c.reusable:
                    conn, reused = c, True
                    break
                c.close()
            if conn is None:
                conn = await self._connect()
            try:
                assert conn.transport is not None
                conn.transport.write(data)
                resp, keep = await read_response(conn, self.max_body)
            except WireError as exc:
                conn.close()
                if reused and not exc.sent:
                    continue  # the server closed an idle connection: try a fresh one
                raise
            except BaseException:  # too large, timeout, cancellation: the stream is unusable
                conn.close()
                raise
            if keep and not self.closed:
                self._idle.append(conn)
            else:
                conn.close()
            return resp

    async def aclose(self) -> None:
        self.closed = True
        while self._idle:
            self._idle.pop().close()


async def read_response(conn: _Conn, max_body: int) -> tuple[Response, bool]:
    """(response, connection reusable). 1xx interim responses are skipped."""
    got_any = False
    while True:
        while (end := conn.buf.find(b"\r\n\r\n")) < 0:
            if len(conn.buf) > MAX_HEAD_BYTES:
                raise WireError("invalid_response", "response head over 64 KiB")
            got_any = got_any or bool(conn.buf)
            await conn.more(got_any)
        got_any = True
        head = conn.take(end + 4)
        status, version, headers = _parse_head(head)
        if status >= 200:
            break
    keep = version == b"HTTP/1.1" and b"close" not in headers.get(b"connection", b"").lower()
    if status in (204, 304):
        return Response(status, headers, b""), keep
    coding = headers.get(b"content-encoding", b"identity").strip().lower()
    decoder = _decoder(coding, max_body)
    te = headers.get(b"transfer-encoding", b"").lower()
    if b"chunked" in te:
        raw = await _read_chunked(conn, max_body)
    elif (cl := headers.get(b"content-length")) is not None:
        try:
            n = int(cl)
        except ValueError:
            raise WireError("invalid_response", f"bad Content-Length {cl!r}") from None
        if n < 0:
            raise WireError("invalid_response", f"bad Content-Length {cl!r}")
        if n > max_body:
            raise BodyTooLarge(max_body, decoded=False)
        while len(conn.buf) < n:
            await conn.more(True)
        raw = conn.take(n)
    else:  # delimited by the end of the connection
        keep = False
        while not conn.eof:
            if len(conn.buf) > max_body:
                raise BodyTooLarge(max_body, decoded=False)
            try:
                await conn.more(True)
            except WireError:
                break
        if len(conn.buf) > max_body:
            raise BodyTooLarge(max_body, decoded=False)
        raw = conn.take(len(conn.buf))
    body = decoder(raw) if decoder is not None else raw
    return Response(status, headers, body), keep


def _parse_head(head: bytes) -> tuple[int, bytes, dict[bytes, bytes]]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise WireError("invalid_response", f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise WireError("invalid_response", f"malformed header line {line[:80]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = headers[key] + b", " + value if key in headers else value
    return int(parts[1]), parts[0], headers


async def _read_chunked(conn: _Conn, max_body: int) -> bytes:
    out = bytearray()
    while True:
        while (eol := conn.buf.find(b"\r\n")) < 0:
            if len(conn.buf) > 4096:
                raise WireError("invalid_response", "chunk size line too long")
            await conn.more(True)
        line = conn.take(eol + 2)[:-2]
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise WireError("invalid_response", f"bad chunk size {line[:40]!r}") from None
        if size == 0:
            break
        if len(out) + size > max_body:
            raise BodyTooLarge(max_body, decoded=False)
        while len(conn.buf) < size + 2:
            await conn.more(True)
        chunk = conn.take(size + 2)
        if chunk[-2:] != b"\r\n":
            raise WireError("invalid_response", "chunk not followed by CRLF")
        out += chunk[:-2]
    # trailer section: header lines up to an empty line
    while True:
        while (eol := conn.buf.find(b"\r\n")) < 0:
            if len(conn.buf) > MAX_HEAD_BYTES:
                raise WireError("invalid_response", "chunked trailer too long")
            await conn.more(True)
        if conn.take(eol + 2) == b"\r\n":
            return bytes(out)


def _decoder(coding: bytes, max_body: int):  # type: ignore[no-untyped-def]
    """A bounded decoder for Content-Encoding ``coding`` (None: identity)."""
    if coding in (b"identity", b""):
        return None
    if coding in (b"gzip", b"x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif coding == b"deflate":
        wbits = zlib.MAX_WBITS  # RFC 9110 "deflate" is the zlib format
    else:
        raise WireError("invalid_response", f"unsupported Content-Encoding {coding!r}")

    def decode(raw: bytes) -> bytes:
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(raw, max_body + 1)  # never inflates more than the limit
        except zlib.error as exc:
            msg = f"cannot decode {coding.decode()} body: {exc}"
            raise WireError("invalid_response", msg) from None
        if len(out) > max_body or d.unconsumed_tail:
            raise BodyTooLarge(max_body, decoded=True)
        return out

    return decode
