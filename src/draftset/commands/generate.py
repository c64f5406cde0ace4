"""`draftset generate`: the target model answers the prompts, crash-safe and resumable."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from draftset.commands.common import (
    add_command,
    add_no_progress,
    interrupted,
    progress_wanted,
    sigterm_as_interrupt,
)
from draftset.commands.options import add_options, parsed
from draftset.config.schema import GenerateArgs
from draftset.console import safe
from draftset.core.errors import EXIT_FAIL, EXIT_OK
from draftset.generation.outcomes import WRITTEN, GenerateResult

GENERATE_HELP = """\
Have the target model answer prompts through OpenAI-compatible servers (vLLM, SGLang,
transformers serve), turn by turn, crash-safe: rerun the same command to resume.

SOURCE is anything `draftset build` reads, e.g. its DIR/prompts.jsonl, or a build recipe
(its sources with their format, fields and preset). The API key is read from DRAFTSET_API_KEY
or OPENAI_API_KEY unless --api-key is given. Rows that already have
answers keep their system/user turns and get every assistant turn regenerated. Output: one
conversation per line in OUT, errors with a reason code in OUT.errors.jsonl (see docs/generate.md).
"""


def register(sub: Any) -> None:
    g = add_command(
        sub,
        "generate",
        "answer prompts with the target model through OpenAI-compatible servers",
        GENERATE_HELP,
    )
    add_options(g, GenerateArgs)
    add_no_progress(g)
    g.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    """0 done (errors counted), 1 could not run, stopped early or had no row, 2 bad
    arguments."""
    from draftset import api  # lazy: the stages load when the command runs

    try:
        with sigterm_as_interrupt():
            result = api.generate(**parsed(args, GenerateArgs), progress=progress_wanted(args))
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    print_summary(result)
    if result.total_rows == 0:  # as `build` on an empty source: never exit 0 having done nothing
        print("draftset: the sources hold no row: nothing to answer", file=sys.stderr)
        return EXIT_FAIL
    if result.aborted:
        print(
            f"draftset: stopped early: {result.aborted}; rerun the same command to resume",
            file=sys.stderr,
        )
        return EXIT_FAIL
    if why := result.nothing_answered():  # never exit 0 having answered nothing
        print(f"draftset: {why}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def print_summary(r: GenerateResult, console: Console | None = None) -> None:
    """Counts by outcome, then throughput and where the files are."""
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
    if r.throttle_waits:
        console.print(
            f"throttled {r.throttle_waits:,}x (HTTP 429 / 503): waited out and sent again,"
            " counted in the requests and retries above but spending no row's --max-retries;"
            f" {r.throttled_seconds:,.0f}s of waits in all, latest {r.throttle_last}"
        )
    if r.ejections:
        console.print(
            "taken out of rotation (health check failed): "
            + ", ".join(f"{u} {n}x" for u, n in r.ejections.items())
        )
    for why in r.other_weights.values():
        console.print(f"{why}: kept out of rotation (its answers would be another model's)")
    if r.cooldowns:
        console.print(
            "cooled down (kept failing, health check passing): "
            + ", ".join(f"{u} {n}x" for u, n in r.cooldowns.items())
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
