"""Terminal output of `generate` while it runs: a progress bar (rows, requests/s, tokens/s,
ETA), or in a log a plain line now and then (`console.ProgressLines`). The end-of-run summary
is the command's (`draftset.commands.generate`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from draftset.console import ProgressLines, draws_bars

if TYPE_CHECKING:
    from draftset.generation.outcomes import GenerateResult, ProgressFn

REFRESH_SECONDS = 0.25


@contextmanager
def progress(enabled: bool = True) -> Iterator[ProgressFn | None]:
    """Yields a callback taking the live `GenerateResult` (None when disabled)."""
    if not enabled:
        yield None
        return
    console = Console(stderr=True)
    if not draws_bars(console):  # a log (nohup, Slurm, CI): a plain line now and then
        lines = ProgressLines("generate", console)

        def log(r: GenerateResult) -> None:
            lines.update(r.done, _total(r), _rates(r, lines.t0, ", "))

        try:
            yield log
        finally:
            lines.close()
        return
    bar = Progress(
        TextColumn("[bold]generate"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rates]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )
    task = bar.add_task("generate", total=None, rates="")
    t0 = time.monotonic()
    last = 0.0
    latest: list[GenerateResult] = []

    def show(r: GenerateResult) -> None:
        bar.update(task, completed=r.done, total=_total(r), rates=_rates(r, t0, "  "))

    def update(r: GenerateResult) -> None:
        nonlocal last
        latest[:] = [r]
        if time.monotonic() - last >= REFRESH_SECONDS:  # redraw a few times a second at most
            last = time.monotonic()
            show(r)

    with bar:
        yield update
        if latest:
            show(latest[0])


def _total(r: GenerateResult) -> int:
    """Rows this run answers: those not answered before it (never fewer than it has done)."""
    return max(r.total_rows - r.skipped, r.done)


def _rates(r: GenerateResult, t0: float, sep: str) -> str:
    """Requests and completion tokens a second since ``t0``."""
    elapsed = max(time.monotonic() - t0, 1e-9)
    rates = f"{r.requests / elapsed:,.1f} req/s{sep}{r.completion_tokens / elapsed:,.0f} tok/s"
    if r.throttled_now:  # waiting out 429s / 503s: slow because the server asks so
        rates += f"{sep}throttled: {r.throttled_now:,} waiting ({r.throttle_last})"
    return rates
