"""Whether the command line or a Python call gave a job its options: how a message names one.

`cli.main` runs a command under `named_by_flags`; the API functions it calls then name an
option by its flag (``--out``, ``DIR``), as the user typed it. Anywhere else (a script, a
notebook) a message names the keyword the call wrote (``out``, ``dir``): a flag is no name
that appears in the call. `config.fields.option_name` reads the flags from the option schema;
the stages below it (sources, select, output, engine) spell the two names themselves. No
imports of draftset: every layer may ask.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_ON_COMMAND_LINE: ContextVar[bool] = ContextVar("draftset_on_command_line", default=False)
"""True while a command runs (`cli.main`): the API functions it calls name an option by its
flag. False in a script or a notebook, where the flag is no name the caller wrote."""


@contextmanager
def named_by_flags() -> Iterator[None]:
    """The command line's calls of the API: an option's messages name its flag (``--out``,
    ``DIR``), as the user typed it, not its keyword."""
    token = _ON_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_COMMAND_LINE.reset(token)


def on_command_line() -> bool:
    """Whether a command called the API (`named_by_flags`): its messages name the flags."""
    return _ON_COMMAND_LINE.get()


def as_given(flag: str, keyword: str) -> str:
    """``flag`` on the command line (``--overwrite``), ``keyword`` in the API
    (``overwrite=True``): an option as the caller wrote it."""
    return flag if on_command_line() else keyword
