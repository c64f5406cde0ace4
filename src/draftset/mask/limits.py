"""Bounds on the work one input row may cost: render time and render size.

A chat template is code. A hostile or buggy one (a nested loop, a string multiplied a billion
times) must cost one rejected row, never a hung or out-of-memory run. `time_limit` bounds the
wall time of a block; `RenderTooLarge` is raised by the renderer when its output passes
`render_char_cap`.

Both limits are `BaseException`s, like `KeyboardInterrupt`: template code, Jinja and the
render-and-mask stage catch `Exception` to turn a template's own errors into `template_error`
rejects, and none of them must swallow a limit.

The timer is ``SIGALRM`` via ``setitimer`` when the block runs in the main thread (the CLI, and
every worker process: `ProcessPoolExecutor` runs jobs in the worker's main thread); elsewhere
(the Python API called from a thread) a watchdog thread raises the exception in the bounded
thread with ``PyThreadState_SetAsyncExc``. Either way the exception is raised again every
0.1 s until the block has ended, so code that swallows one (an ``except BaseException`` in a
``__del__``) cannot turn the bound off; and either way it only lands between two Python
bytecodes, so a tokenizer or C call in progress is never torn (the process stays usable).
"""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any

from draftset.core import reasons

# A render may be this many characters longer than the row's own text (a real template adds a
# few hundred per message; some repeat the tools or system prompt) ...
RENDER_CAP_FLOOR = 16 * 1024 * 1024
# ... plus this many times the row's text (no real template writes a conversation 4 times).
RENDER_CAP_FACTOR = 4
_RETRY_SECONDS = 0.1


class RenderLimit(BaseException):
    """A row passed a work bound; ``reason`` is its reject code."""

    reason = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class RenderTimeout(RenderLimit):
    reason = reasons.TEMPLATE_TIMEOUT


class RenderTooLarge(RenderLimit):
    reason = reasons.TEMPLATE_TOO_LARGE


def too_large(cap: int) -> RenderTooLarge:
    """The `RenderTooLarge` of a render that wrote more than ``cap`` characters."""
    return RenderTooLarge(
        f"the template wrote more than {cap:,} characters for this row ({RENDER_CAP_FLOOR:,}"
        f" + {RENDER_CAP_FACTOR}x the row's own text: a loop without end?)"
    )


def join_within(pieces: Iterator[str], cap: int) -> str:
    """``"".join(pieces)`` (a Jinja render's ``generate``), stopped with `RenderTooLarge` past
    ``cap`` characters instead of holding all a template writes; counted a chunk at a time
    (C-speed). Build's render and verify's reference render both end so."""
    parts: list[str] = []
    size = 0
    while chunk := list(islice(pieces, 256)):
        size += sum(map(len, chunk))
        if size > cap:
            raise too_large(cap)
        parts += chunk
    return "".join(parts)


def render_char_cap(messages: Any, tools: Any = None) -> int:
    """Most characters a render of this row may have: floor + factor x its text."""
    return RENDER_CAP_FLOOR + RENDER_CAP_FACTOR * (text_chars(messages) + text_chars(tools))


def text_chars(obj: Any) -> int:
    """Characters of every string (keys included) in a JSON-like value: its text's size."""
    if isinstance(obj, str):
        return len(obj)
    if isinstance(obj, dict):
        return sum(len(k) if isinstance(k, str) else 8 for k in obj) + sum(
            text_chars(v) for v in obj.values()
        )
    if isinstance(obj, list | tuple):
        return sum(text_chars(v) for v in obj)
    return 8 if obj is not None else 0  # numbers, booleans: a few characters when rendered


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise `RenderTimeout` in this block once it has run ``seconds`` (None or 0: no bound)."""
    if not seconds or seconds <= 0:
        yield
        return
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        with _alarm(seconds):
            yield
    else:
        with _watchdog(seconds):
            yield


@contextmanager
def bounded_row(template: Any, conv: Any, seconds: float | None) -> Iterator[None]:
    """Render one row within both bounds: ``seconds`` of wall time, and a character cap on
    each render set from the row's own text (`render_char_cap`), removed afterwards.

    Build's row step and verify's re-render both use it, so verify judges a row by the bounds
    it was built under.
    """
    template.max_chars = render_char_cap(conv.messages, conv.tools)
    try:
        with time_limit(seconds):
            yield
    finally:
        template.max_chars = None


def _timeout_message(seconds: float) -> str:
    return f"rendering took longer than --render-timeout {seconds:g} s"


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    armed = True

    def on_alarm(signum: int, frame: Any) -> None:
        # a signal already pending when the block ended is ignored; so is one that lands
        # while a limit is being handled (on its way out through the exits of the blocks,
        # this one's included: raised there, it would skip the disarming below and fire on
        # for ever, seen on a loaded machine); once that handling ends, it fires again
        if armed and not isinstance(sys.exception(), RenderLimit):
            raise RenderTimeout(_timeout_message(seconds))

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:  # started inside: an alarm landing as it starts (1e-6 s) still disarms below
        signal.setitimer(signal.ITIMER_REAL, seconds, _RETRY_SECONDS)
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)  # no new signal from here on
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)


@contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    target = threading.get_ident()
    lock = threading.Lock()
    done = threading.Event()
    state = {"armed": True, "fired": False}
    set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc  # (thread id, class or NULL)

    def fire() -> None:
        wait = seconds
        while not done.wait(wait):
            with lock:
                if not state["armed"]:
                    return
                set_async(ctypes.c_ulong(target), ctypes.py_object(RenderTimeout))
                state["fired"] = True
            wait = _RETRY_SECONDS

    dog = threading.Thread(target=fire, name="draftset-render-watchdog", daemon=True)
    dog.start()
    try:
        yield
    except RenderTimeout as exc:  # raised without arguments: give it its message
        raise RenderTimeout(_timeout_message(seconds)) from exc
    finally:
        with lock:
            state["armed"] = False
            if state["fired"]:  # clear one that has not landed yet
                set_async(ctypes.c_ulong(target), None)
        done.set()
