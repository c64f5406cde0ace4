"""`draftset report DIR`: the self-contained HTML report of a built set."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from draftset.commands.common import add_command, is_stdout
from draftset.commands.options import add_options, parsed
from draftset.config.schema import ReportArgs
from draftset.core.errors import EXIT_OK

REPORT_HELP = """\
Write one self-contained HTML page about a built set (default DIR/report.html): the last full
`draftset verify` (passed, FAILED, or STALE when the set changed since), the fast checks,
composition by source, rejects and context-only turns by reason (each reason explained),
sequence-length and supervised-token histograms, truncation, DFlash anchors, the
draft-vocabulary coverage curve (to choose --draft-vocab-size) and example rows with the mask
highlighted. No script, no network: open it anywhere. Prints the path and the verification in
one line (`checks: ...`); exits 0 once the page is written, whatever the set's checks say
(`draftset verify DIR` is the command whose exit code judges a set).
"""


def register(sub: Any) -> None:
    p = add_command(sub, "report", "write a self-contained HTML report of a built set", REPORT_HELP)
    add_options(p, ReportArgs)
    p.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from draftset import api  # lazy: the stages load when the command runs

    verdicts: list[str] = []
    # the page on standard output (-o /dev/stdout): these lines after it went into the page
    said = sys.stderr if args.output and is_stdout(args.output) else sys.stdout
    path = api.report(**parsed(args, ReportArgs), on_verdict=verdicts.append)
    print(f"report written to {path}", file=said)
    for line in verdicts:
        print(f"checks: {line}", file=said)
    return EXIT_OK
