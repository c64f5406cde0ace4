"""Command line: the dispatcher of `draftset.commands` (each a thin layer over `draftset.api`).

Exit codes: 0 success, 1 the job ran but failed (a check, the accounting, nothing written),
2 unusable arguments (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import select
import sys
import threading
import time
from shlex import quote
from typing import Any

from draftset.core.errors import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    DraftsetError,
    UsageError,
    set_written,
)

# The commands load in the functions below, not here: every worker and helper process is
# spawn-started and re-imports the console script's module, so whatever this module imports at
# the top, every child pays for (pydantic, pyarrow, rich, the readers: ~35 MB a process).

__all__ = ["COMMANDS", "EXIT_FAIL", "EXIT_OK", "EXIT_USAGE", "UsageError", "main"]

COMMANDS = ("build", "verify", "show", "report", "generate", "run")
"""Each is `draftset.commands.<name>`, with ``register(subparsers)``."""

EXIT_DEADLINE = 5.0
"""Seconds an interrupted program may take to exit once its clean-up has run."""


def _exit_by_deadline(code: int) -> None:
    """End the process with ``code`` if it is still exiting ``EXIT_DEADLINE`` s from now.

    An interrupted job has cleaned up by the time `main` returns, but Python's exit hooks still
    join threads without a timeout (concurrent.futures' joins its pools' threads): one stuck
    there kept a SIGTERMed ``--workers 2`` build alive after its line, until kill -9 (3 of 17
    trials). Armed only when `main` runs as the program, never when a caller passes ``argv``.
    """

    def deadline() -> None:
        time.sleep(EXIT_DEADLINE)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    threading.Thread(target=deadline, name="draftset-exit-deadline", daemon=True).start()


class _Version(argparse.Action):
    """``--version``, read from the package metadata only when asked (~90 ms of imports that
    every build, and every spawned child re-importing this module, would pay otherwise)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any):
        kw.setdefault("help", "show program's version number and exit")  # argparse's wording
        kw.setdefault("default", argparse.SUPPRESS)  # no `version` in the parsed arguments
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from draftset.core.version import package_version  # lazy: importlib.metadata, ~70 ms

        print(f"draftset {package_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command="build"`` only what parsing a build needs (the other
    commands' modules import rich and more, which would delay a build's template load)."""
    from draftset.commands.common import Parser  # lazy: see the note on the imports

    p = Parser(
        prog="draftset", description="Verified training sets for speculative-decoding drafters."
    )
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in ("build",) if command == "build" else COMMANDS:
        importlib.import_module(f"draftset.commands.{name}").register(sub)
    return p


def parse_command_line(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(the parsed arguments, the ones no option took). A command's own arguments are parsed
    intermixed: ``build a.jsonl --out o b.jsonl`` reads both sources (argparse's plain parse
    wants positionals together and called ``b.jsonl`` an unrecognized argument); argparse
    cannot intermix across subparsers, so the command's own parser does it."""
    parser = _build_parser(argv[0] if argv else None)
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = sub.choices.get(argv[0]) if sub is not None and argv else None
    if command is None or "--" in argv:
        # no command, or an option first (--version, --help): the plain parse; and after "--"
        # (sources named like options: "-- -x.jsonl"), which Python's intermixed parse loses
        return parser.parse_known_args(argv)
    return command.parse_known_intermixed_args(argv[1:], argparse.Namespace(command=argv[0]))


def _stdout_reader_left() -> bool:
    """Whether standard output is a pipe whose reader has gone (poll says POLLERR): only then
    is a `BrokenPipeError` the reader leaving, not a pipe of draftset's own breaking."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no fileno (a captured stdout), no poll
        return False


READ_AS_FAR_AS_WANTED = frozenset({"show", "report"})
"""Commands whose output's reader may leave early (`| head`) and the command still did its
work (the row shown as far as wanted, the page written): they end quietly, exit 0. Any other
(verify, build, generate, run) exits 1 then: its verdict, printed last, went unread."""


TORCH_KEPT_OUT = frozenset({"build", "generate", "report", "show"})
"""Commands whose process keeps torch out (`torch_hidden`) when `main` runs as the program.

They need a tokenizer at most, never torch, but transformers imports an installed torch with
`AutoTokenizer` (~1.3 CPU-s and ~210 MB: a ``--workers 1`` build loads the template in this
process; with workers the helper loads it, torch kept out). transformers then caches "no
torch" for the process, harmless in a program that ends with its command; a caller of
``main(argv)`` or of `draftset.api` keeps its torch (a notebook may load a model next). Hence
decided here, around the whole command, not by an option the API passes down: only the program
knows its process ends with the command, and the API and stages stay as they are. report's
fast checks then read token_freq.pt with draftset's own reader, as build's do. verify and run
keep torch: verify reads token_freq.pt with ``torch.load`` as speculators does and runs
speculators' loader, which needs torch (run ends in that verify)."""


_NOT_A_COMMAND = {
    "train": "draftset writes the set a drafter is trained on, it does not train one"
    " (speculators train --data-path OUT reads the set: README, 'Training the result with"
    " speculators')",
}
"""Commands people expect of a tool of this kind, and what to do instead."""


def _command_problem(argv: list[str]) -> str | None:
    """Why the command line names no command draftset has, in one line, or None (an option
    first, ``--help``/``--version``, is argparse's). ``draftset`` alone said "the following
    arguments are required: command"; a typo "invalid choice: 'biuld' (choose from ...)"."""
    listed = ", ".join(COMMANDS)
    if not argv:
        return (
            f"give a command: {', '.join(COMMANDS[:-1])} or {COMMANDS[-1]}"
            " (draftset COMMAND --help explains one)"
        )
    word = argv[0]
    if word.startswith("-") or word in COMMANDS:
        return None
    if word in _NOT_A_COMMAND:
        return f"unknown command {word!r}: {_NOT_A_COMMAND[word]}"
    import difflib  # lazy: only on a mistake

    close = difflib.get_close_matches(word.lower(), COMMANDS, n=1, cutoff=0.6)
    meant = f": did you mean {close[0]}?" if close else ""
    return f"unknown command {word!r}{meant} (commands: {listed})"


def _out_hint(argv: list[str]) -> str:
    """`commands.common.out_hint` for a command that names its output with ``--out``."""
    if argv[0] not in ("build", "generate"):
        return ""
    from draftset.commands.common import out_hint  # lazy: see the note on the imports

    return out_hint(f"draftset {argv[0]}", argv[1:])


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    given = sys.argv[1:] if argv is None else argv
    helper = None
    command = given[0] if given else None
    try:
        if given and given[0] == "build":  # before the parser: see `build_helper_ahead`
            # lazy: see the note on the imports
            from draftset.commands.common import build_helper_ahead

            helper = build_helper_ahead(given)
        if given and given[0] == "help":  # `draftset help [COMMAND]`: git's and pip's spelling
            given = [*given[1:2], "--help"]
        if problem := _command_problem(given):
            raise UsageError(problem)
        args, extra = parse_command_line(given)
        if extra:  # a command may say where an option it lacks belongs (`run`: the recipe)
            hint = getattr(args, "unknown_hint", None)
            raise UsageError(
                (hint(extra, given) if hint else None)
                or f"unrecognized arguments: {' '.join(extra)}{_out_hint(given)}"
            )
        args.helper = helper
        from draftset.core.naming import named_by_flags  # lazy: only when a command runs
        from draftset.core.optional_torch import torch_hidden  # lazy: workers re-import cli

        # the program's own process only (argv None: the console script, python -m draftset)
        keep_torch_out = argv is None and args.command in TORCH_KEPT_OUT
        with (
            torch_hidden() if keep_torch_out else contextlib.nullcontext(),
            named_by_flags(),  # the API's messages name the flags typed, not the keywords
        ):
            code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        if not _stdout_reader_left():  # another pipe broke (a worker's): not the reader
            raise
        # the reader left (`draftset report DIR | head -1`): nothing more can be said; its
        # output goes nowhere from now on (the exit's flush too)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0 if command in READ_AS_FAR_AS_WANTED else 1
    except DraftsetError as exc:  # every run-level error carries its exit code
        from draftset.core.terminal import visible  # lazy: only on an error

        print(visible(exc.cli_line()), file=sys.stderr)  # a path may hold ESC sequences
        return exc.exit_code
    except KeyboardInterrupt as exc:
        from draftset.commands.common import was_terminated  # lazy: only on an interrupt

        terminated = was_terminated(exc)
        how = "terminated" if terminated else "interrupted"
        if (out := set_written(exc)) is not None:  # the build's rename was done
            shown = quote(str(out))
            print(
                f"draftset: {how} after the set was written to {out}, before its checks ended"
                f" (`draftset verify {shown}` checks it)",
                file=sys.stderr,
            )
        else:
            print(f"draftset: {how}; nothing was finalized", file=sys.stderr)
        code = 143 if terminated else 130
        if argv is None:
            _exit_by_deadline(code)
        return code
    finally:
        if helper is not None:  # a usage error before the build took it over (else stopped)
            helper.kill()


if __name__ == "__main__":
    sys.exit(main())
