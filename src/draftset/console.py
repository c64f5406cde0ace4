"""Terminal output every stage shares: progress bars with rate and ETA (plain lines in a log),
text from the data made safe for rich. The build's summary table and its notes are
`pipeline/summary.py`."""

from __future__ import annotations

import errno
import time
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


LOG_SECONDS = 60.0
"""Seconds between two progress lines where standard error is no terminal (nohup, a Slurm or CI
log, a pipe): a bar draws nothing there until the run ends."""


def draws_bars(console: Console) -> bool:
    """Whether ``console`` shows a live bar (a terminal, a notebook) rather than a log's lines."""
    return console.is_terminal or console.is_jupyter


class ProgressLines:
    """Progress for a log: a plain line every `LOG_SECONDS` (rows done of the total, share,
    rate, elapsed, ETA), and a last one at the end when any was printed; a run shorter than
    that prints none."""

    def __init__(self, label: str, console: Console, every: float = LOG_SECONDS) -> None:
        self.label, self.console, self.every = label, console, every
        self.t0 = self.last = time.monotonic()
        self.printed = 0
        self._latest: tuple[int, int | None, str] | None = None
        self._shown: tuple[int, int | None, str] | None = None

    def update(self, done: int, total: int | None, rates: str = "") -> None:
        """Note the progress; a line when `every` seconds passed since the last one. ``rates``:
        what the line says of the speed instead of rows/s."""
        self._latest = (done, total, rates)
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._line(now)

    def close(self) -> None:
        if self.printed and self._latest != self._shown:
            self._line(time.monotonic())

    def _line(self, now: float) -> None:
        assert self._latest is not None
        done, total, rates = self._shown = self._latest
        elapsed = max(now - self.t0, 1e-9)
        speed = done / elapsed
        parts = [
            f"{done:,} of {total:,} rows ({100 * done // max(total, 1)}%)"
            if total
            else f"{done:,} rows"
        ]
        parts.append(rates or f"{speed:,.0f} rows/s")
        parts.append(f"{_clock(elapsed)} elapsed")
        if total and speed > 0 and done < total:
            parts.append(f"ETA {_clock((total - done) / speed)}")
        self.console.print(f"{self.label}: {', '.join(parts)}", markup=False, highlight=False)
        self.printed += 1


def _clock(seconds: float) -> str:
    """``H:MM:SS``, as rich's elapsed and remaining columns show time."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


@contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """Yields ``update(done, total)``; rows/s and ETA shown on stderr when enabled: a bar on a
    terminal, a line every `LOG_SECONDS` in a log (`ProgressLines`)."""
    if not enabled:
        yield lambda done, total: None
        return
    if not draws_bars(err):
        lines = ProgressLines(label, err)
        try:
            yield lines.update
        finally:
            lines.close()
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
