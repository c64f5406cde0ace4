"""What every command shares: one-line argument errors, SIGTERM as Ctrl-C, the progress flag."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from draftset.core.errors import UsageError
from draftset.core.files import is_recipe


class Parser(argparse.ArgumentParser):
    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)  # for `error`'s hint
        if problem := self._first_words_problem(self._argv):
            raise UsageError(problem)
        return super().parse_known_args(args, namespace)

    def _first_words_problem(self, argv: list[str]) -> str | None:
        """Why an option given as whole words that only begin one of this parser's options is
        refused (argparse reads the start of an option as the whole of it: ``build --template
        Qwen/Qwen3-8B`` was ``--template-kwargs``, "not valid JSON"; ``--output o`` was
        ``--output-format``, "invalid choice: 'o'"), or None. A shortened word (``--max-len``)
        reads as before."""
        known = [o for o in self._option_string_actions if o.startswith("--")]
        for arg in argv:
            if arg == "--":
                return None
            name = arg.split("=", 1)[0]
            if not name.startswith("--") or name in known:
                continue
            if not any(o.startswith(name + "-") for o in known):
                continue
            words = set(name[2:].split("-"))
            meant = {o for o in known if words <= set(o[2:].split("-"))}
            meant.update(difflib.get_close_matches(name, known, n=2, cutoff=0.7))
            listed = " or ".join(sorted(meant))
            return (
                f"{name} is not an option of {self.prog}: did you mean {listed}? (write options"
                " in full)"
            )
        return None

    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage otherwise)
        argv = getattr(self, "_argv", [])
        hint = getattr(self, "error_hint", None)  # a command's own: `show DIR 3`
        said = hint(self, message, argv) if hint is not None else None
        out = self._option_string_actions.get("--out")
        said = said or (out_hint(self.prog, argv) if out is not None else "")
        raise UsageError(message + (said or _dash_file_hint(argv)))

    def positionals(self, argv: list[str]) -> list[str]:
        """The arguments of ``argv`` no option takes (each option's values skipped)."""
        found: list[str] = []
        values = 0
        for arg in argv:
            if values:
                values -= 1
            elif arg.startswith("--") or (arg.startswith("-") and not _number(arg)):
                action = self._option_string_actions.get(arg.split("=", 1)[0])
                takes = action is not None and action.nargs != 0 and "=" not in arg
                values = 1 if takes else 0
            else:
                found.append(arg)
        return found


def out_hint(prog: str, argv: list[str]) -> str:
    """Where ``-o`` (report's flag) was given to a command naming its output with ``--out``:
    ``draftset build a.jsonl -o out`` said only "unrecognized arguments: -o out"."""
    before = argv[: argv.index("--")] if "--" in argv else argv
    if not any(a == "-o" or (a.startswith("-o") and not a.startswith("--")) for a in before):
        return ""
    return f" (-o is report's flag; {prog} names its output with --out)"


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _dash_file_hint(argv: list[str]) -> str:
    """How to give a path whose name starts with a dash, when one is on the line: argparse
    reads ``-x.jsonl`` as an option, and said only "the following arguments are required:
    SOURCE" of ``draftset build -x.jsonl ...``."""
    for arg in argv:
        if arg == "--":
            break  # what follows is positional already
        if len(arg) < 2 or not arg.startswith("-"):
            continue
        try:
            exists = os.path.exists(arg)
        except (OSError, ValueError):  # a name too long, a NUL byte: no such path
            exists = False
        if exists:
            kind = "folder" if os.path.isdir(arg) else "file"
            return f" ({arg} is a {kind}: give it as ./{arg}, or after -- at the end of the line)"
    return ""


class Terminated(KeyboardInterrupt):
    """SIGTERM: handled exactly like Ctrl-C (clean-up runs), exit code 143 (128 + 15)."""


_sigterm_received = False
"""Set by `_on_sigterm` in a `sigterm_as_interrupt` block: Ray's `get` raises a plain
`KeyboardInterrupt` for any exception a signal handler raises, `Terminated` included."""


def _on_sigterm(signum: int, frame: Any) -> None:
    global _sigterm_received
    _sigterm_received = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the clean-up finish
    raise Terminated


def was_terminated(exc: KeyboardInterrupt) -> bool:
    """Whether ``exc`` is SIGTERM's (exit 143), not Ctrl-C's (130), even once Ray's `get`
    has raised it again as a plain `KeyboardInterrupt`."""
    return isinstance(exc, Terminated) or _sigterm_received


def interrupted(exc: KeyboardInterrupt) -> int:
    """The line and exit code of a resumable command (`generate`, `run`) stopped by Ctrl-C
    (130) or SIGTERM (143)."""
    how, code = ("terminated", 143) if was_terminated(exc) else ("interrupted", 130)
    print(f"draftset: {how}; rerun the same command to resume", file=sys.stderr)
    return code


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises `Terminated` in this block (main thread only); the old handler after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _sigterm_received
    _sigterm_received = False
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def build_helper_ahead(argv: list[str]) -> Any:
    """`draftset build`'s helper process, started before the command's parser is built: the
    option schema's imports (pydantic: ~0.15 s, several times that on a loaded machine) would
    delay the template load by as much. Only ``--workers`` and ``--engine`` decide it (read
    here, the flags `BuildArgs` gives them: a test holds them equal); a recipe, ``--help`` or
    a value argparse would refuse leaves the choice to `api.build`, and the message to the
    command's parser (this read says nothing: a plain ArgumentParser printed its usage line
    and the error before the command's parser said it again). The caller stops it."""
    if any(a in ("-h", "--help", "--version") or is_recipe(a) for a in argv):
        return None
    early = Parser(add_help=False)  # its `error` raises: nothing printed here
    early.add_argument("--workers", type=int)
    early.add_argument("--engine")
    try:
        known, _ = early.parse_known_args(argv[1:])
    except (UsageError, argparse.ArgumentError):  # a bad value: the real parser says so
        return None
    from draftset.pipeline.helper_ahead import start_helper  # lazy: only for a build

    return start_helper(None, known.workers, known.engine)


def add_command(sub: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_no_progress(
    p: argparse.ArgumentParser, what: str = "no progress bar (in a log: no line a minute)"
) -> None:
    p.add_argument("--no-progress", action="store_true", help=what)


def progress_wanted(args: argparse.Namespace) -> bool:
    """Progress unless --no-progress: a bar on a terminal, a line a minute in a log (nohup,
    Slurm, CI), where it printed nothing before the summary (`console.ProgressLines`)."""
    return not args.no_progress


def is_stdout(path: str) -> bool:
    """Whether ``path`` is this process's standard output (``/dev/stdout``, ``/dev/fd/1``, the
    file or pipe it is redirected to), judged before the page is written over it."""
    try:
        a, b = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
