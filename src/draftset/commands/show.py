"""`draftset show DIR --row N | --id ID`: one row with its supervised tokens highlighted."""

from __future__ import annotations

import argparse
from typing import Any

from draftset.commands.common import add_command
from draftset.commands.options import add_options, parsed
from draftset.config.schema import ShowArgs
from draftset.core.errors import EXIT_OK

SHOW_HELP = """\
Print one row of a built set: its facts (id, source, tokens, supervised tokens, runs,
truncated, DFlash anchors) and its text with the supervised tokens (loss_mask = 1)
highlighted; --tokens marks token boundaries. Without colours (piped, NO_COLOR) supervised runs
are wrapped in ⟦…⟧. Control characters from the data (ESC sequences, bidi overrides) are shown
as escapes (\\x1b, \\u202e), never sent to the terminal. Decoding needs the tokenizer: the
manifest's path, or --tokenizer.
"""


def row_index(value: str) -> int:
    """``--row``: an index into the set (-1 the last row, as in Python); a value that is not
    one (``pad-1``) is likely an id."""
    try:
        index = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a row index (0, 1, 2, ...): for a row id use --id {value}"
        ) from None
    return index


def register(sub: Any) -> None:
    p = add_command(
        sub, "show", "print one training row with its supervised tokens highlighted", SHOW_HELP
    )
    add_options(p, ShowArgs, required_mutex=frozenset({"which"}), types={"row": row_index})
    p.set_defaults(handler=cmd_show)
    p.error_hint = _row_without_flag  # type: ignore[attr-defined]


def _row_without_flag(parser: Any, message: str, argv: list[str]) -> str | None:
    """Where the row goes when it was given as a second argument (``draftset show DIR 3``
    said only "one of the arguments --row --id is required", as if no row were given)."""
    given = parser.positionals(argv)
    if "--row --id is required" not in message or len(given) != 2:
        return None
    folder, row = given
    try:
        int(row)
        told = f"--row {row}"
    except ValueError:
        told = f"--id {row}"
    return f" (the row goes after its flag: draftset show {folder} {told})"


def cmd_show(args: argparse.Namespace) -> int:
    from draftset import api  # lazy: the stages load when the command runs

    api.show(**parsed(args, ShowArgs))
    return EXIT_OK
