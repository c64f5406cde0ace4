"""Terminal output every stage shares: progress bars with rate and ETA, text from the data made
safe for rich. The build's summary table and its notes are `pipeline/summary.py`."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from draftset.core.terminal import visible


class StdoutConsole(Console):
    """rich's console on standard output whose reader leaving (`draftset show DIR | head`)
    is the command line's to end (`cli.main`: quietly, with the command's exit), not rich's
    own ``SystemExit(1)`` (`Console.on_broken_pipe`)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is printed, as rich's own
        raise BrokenPipeError(errno.EPIPE, "the reader of standard output left")


def _console(stderr: bool = False) -> Console:
    """Rich console; when not a terminal (logs, CI, a pipe) a width that fits the summary
    table, and sentences never hard-wrapped (soft wrap: a line is one line in the log)."""
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return probe
    return Console(stderr=stderr, width=140, soft_wrap=True)


out = _console()
err = _console(stderr=True)


@contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """Yields ``update(done, total)``; rows/s and ETA shown on stderr when enabled."""
    if not enabled:
        yield lambda done, total: None
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    )
    task = progress.add_task(label, total=None, rate="")

    def update(done: int, total: int) -> None:
        speed = progress.tasks[0].speed
        rate = f"{speed:,.0f} rows/s" if speed else ""
        progress.update(task, completed=done, total=total, rate=rate)

    with progress:
        yield update


def thousands(n: int) -> str:
    """A count with thousands separators (1,234,567)."""
    return f"{n:,}"


def safe(text: object) -> str:
    """A name or path from the user's files for `console.print`: control and bidi characters
    as visible escapes (a file name holding ESC [2J must not clear the terminal), rich markup
    escaped (a file named ``[bold]x`` prints as itself)."""
    return escape(visible(str(text)))
