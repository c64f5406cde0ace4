"""`draftset verify DIR`: every check of a built set, one line each, then the verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from draftset.commands.common import add_command, is_stdout
from draftset.commands.options import add_options, parsed
from draftset.config.schema import VerifyArgs
from draftset.core.errors import EXIT_FAIL, EXIT_OK
from draftset.core.terminal import visible

if TYPE_CHECKING:
    from draftset.output.readback import CheckResult

VERIFY_HELP = """\
Prove a built training set is what its manifest says: structure, file hashes, accounting,
token counts, d2t/t2d, drafter fitness (the fast checks, which `build` runs too: --fast runs
only these), then the tokenizer and template, the unchanged sources, every row's identity and
its mask re-derived from its source row, placeholder leakage, truncation and speculators'
loader. Every check is listed in docs/verify.md.

Exit 0 every check passed (a skip always says why; drafter fitness is advice, WARN, as in
`build`), 1 a check failed (named, with a count and example row ids), 2 unusable arguments.
A full run records its result in DIR/verify.json, which `draftset report` shows.
"""


def register(sub: Any) -> None:
    p = add_command(
        sub, "verify", "check a built training set against its manifest and sources", VERIFY_HELP
    )
    add_options(p, VerifyArgs)
    p.set_defaults(handler=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from draftset import api  # lazy: the stages load when the command runs
    from draftset.checks.fast import ADVISORY_CHECKS  # lazy: as above

    # the result on standard output (--json /dev/stdout): these lines after it broke its JSON
    to_err = bool(args.json) and is_stdout(args.json)
    result = api.verify(**parsed(args, VerifyArgs))
    console = _wide_console(stderr=True) if to_err else None
    print_results(result.checks, console, advisory=ADVISORY_CHECKS)
    if result.recorded is not None:
        shown = Path(args.dir) / result.recorded.name
        said = sys.stderr if to_err else sys.stdout
        print(f"result recorded in {shown} (shown by `draftset report`)", file=said)
    return EXIT_OK if result.ok else EXIT_FAIL


def _wide_console(stderr: bool = False) -> Console:
    """Terminal width on a terminal; wide enough for one line per check in logs."""
    probe = Console(highlight=False, stderr=stderr)
    if probe.is_terminal:
        return probe
    return Console(highlight=False, width=160, soft_wrap=True, stderr=stderr)


def print_results(
    results: list[CheckResult],
    console: Console | None = None,
    verdict: bool = True,
    advisory: frozenset[str] = frozenset(),
) -> None:
    """One line per check; failures with count, example ids and the first few messages; then
    the verdict (``verdict=False``: the caller says its own, as `run` does: one verdict)."""
    console = console or _wide_console()
    style = {"pass": "green", "fail": "bold red", "skip": "yellow"}
    for r in results:
        label = r.status.upper()
        if r.failed and r.name in advisory:  # advice (build's drafter fitness): not a failure
            label, r_style = "WARN", "bold yellow"
        else:
            r_style = style[r.status]
        line = f"[{r_style}]{label:4}[/] {r.name}: {escape(visible(r.summary))}"
        if r.failed:
            line += f" [bold](count {r.count:,})[/]"
            if r.examples:
                line += " e.g. " + escape(visible(", ".join(r.examples)))
        console.print(line)
        if r.failed:
            for msg in r.details.get("messages", []):
                console.print(f"       {escape(visible(str(msg)))}")
    failed = [r.name for r in results if r.failed and r.name not in advisory]
    warned = [r.name for r in results if r.failed and r.name in advisory]
    if not verdict:
        return
    if failed:
        console.print(f"[bold red]verify failed[/]: {', '.join(failed)}")
    else:
        console.print(
            "[green]verify passed[/]"
            + (" (with skips)" if any(r.status == "skip" for r in results) else "")
            + (f"; advice above: {', '.join(warned)}" if warned else "")
        )
