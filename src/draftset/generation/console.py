"""Terminal output of `generate`: a progress bar (rows, requests/s, tokens/s, ETA) and the
end-of-run summary by outcome."""

from __future__ import annotations

import sys
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
from rich.table import Table

from draftset.console import safe

if TYPE_CHECKING:
    from draftset.generation.job import GenerateResult, ProgressFn

REFRESH_SECONDS = 0.25


@contextmanager
def progress(enabled: bool = True) -> Iterator[ProgressFn | None]:
    """Yields a callback taking the live `GenerateResult` (None when disabled)."""
    if not enabled:
        yield None
        return
    bar = Progress(
        TextColumn("[bold]generate"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rates]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    task = bar.add_task("generate", total=None, rates="")
    t0 = time.monotonic()
    last = 0.0
    latest: list[GenerateResult] = []

    def show(r: GenerateResult) -> None:
        elapsed = max(time.monotonic() - t0, 1e-9)
        rates = f"{r.requests / elapsed:,.1f} req/s  {r.completion_tokens / elapsed:,.0f} tok/s"
        bar.update(task, completed=r.done, total=max(r.total_rows - r.skipped, r.done), rates=rates)

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


def print_summary(r: GenerateResult, console: Console | None = None) -> None:
    """Counts by outcome, then throughput and where the files are."""
    # lazy: job imports this module (import cycle)
    from draftset.generation.job import WRITTEN

    console = console or Console(highlight=False)
    table = Table(title=f"draftset generate → {safe(r.out)}", title_justify="left")
    table.add_column("outcome")
    table.add_column("rows", justify="right")
    table.add_row("answered (written to output)", f"{r.outcomes.get(WRITTEN, 0):,}")
    for reason, n in sorted(r.outcomes.items(), key=lambda kv: (-kv[1], kv[0])):
        if reason != WRITTEN:
            table.add_row(f"error: {reason}", f"{n:,}")
    table.add_row("already done (resumed)", f"{r.skipped:,}")
    pending = r.total_rows - r.skipped - r.done
    if pending:
        table.add_row("not done yet (rerun to resume)", f"{pending:,}")
    table.add_section()
    table.add_row("input rows", f"{r.total_rows:,}")
    console.print(table)
    secs = max(r.seconds, 1e-9)
    console.print(
        f"model {r.model}; {r.requests:,} requests ({r.retries:,} retries), "
        f"{r.completion_tokens:,} generated tokens in {r.seconds:.1f}s: "
        f"{r.requests / secs:,.1f} req/s, {r.completion_tokens / secs:,.0f} tok/s"
    )
    if len(r.endpoints) > 1:
        console.print(
            "answers per endpoint: " + ", ".join(f"{u}={n:,}" for u, n in r.endpoints.items())
        )
    if r.ejections:
        console.print(
            "taken out of rotation (health check failed): "
            + ", ".join(f"{u} {n}x" for u, n in r.ejections.items())
        )
    if r.special_stripped:
        console.print(
            f"{r.special_stripped:,} answers ended with a special token's text (a stop token"
            " the server leaked): cut, counted in each row's metadata.special_tokens_stripped"
        )
    if r.torn_bytes:
        console.print(f"cut a torn last line ({r.torn_bytes} bytes) left by an earlier crash")
    errors = sum(n for k, n in r.outcomes.items() if k != WRITTEN)
    if errors:
        console.print(f"errors: {safe(r.errors)}")
    sys.stdout.flush()
