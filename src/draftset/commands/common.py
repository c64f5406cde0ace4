"""What every command shares: one-line argument errors, SIGTERM as Ctrl-C, the progress flag."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from draftset.core.errors import UsageError


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage otherwise)
        raise UsageError(message)


class Terminated(KeyboardInterrupt):
    """SIGTERM: handled exactly like Ctrl-C (clean-up runs), exit code 143 (128 + 15)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the clean-up finish
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises `Terminated` in this block (main thread only); the old handler after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def add_command(sub: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_no_progress(p: argparse.ArgumentParser, what: str = "no progress bar") -> None:
    p.add_argument("--no-progress", action="store_true", help=what)


def progress_wanted(args: argparse.Namespace) -> bool:
    """A progress bar on a terminal unless --no-progress."""
    return not args.no_progress and sys.stderr.isatty()


def standalone(command: str, argv: list[str] | None) -> int:
    """``python -m draftset.commands.<command>``: the CLI's parser and exit codes."""
    from draftset.cli import main  # lazy: cli loads the commands when it runs

    return main([command, *(sys.argv[1:] if argv is None else argv)])
