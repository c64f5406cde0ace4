"""One base for every run-level error, carrying its exit code.

`cli.main` maps any `DraftsetError` to its exit code (no list of classes by name), and the
Python API raises the same exceptions, so a caller can tell a usage error (2: fix the
arguments, nothing was done) from a failed run (1) without parsing messages. No imports:
worker processes import this through the row modules.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class DraftsetError(Exception):
    """A run-level error: one line for the user and the exit code of the command."""

    exit_code: int = EXIT_USAGE

    def cli_line(self) -> str:
        """The one line the command prints on stderr for this error."""
        return f"draftset: error: {self}" if self.exit_code == EXIT_USAGE else f"draftset: {self}"


class UsageError(DraftsetError):
    """Bad arguments or unusable inputs: printed as one line, exit code 2."""


class RunError(DraftsetError):
    """The job started and failed (accounting, disk, helper process): exit code 1."""

    exit_code = EXIT_FAIL


_SET_WRITTEN = "draftset_set_written"


def mark_set_written(exc: BaseException, out: object) -> None:
    """``exc`` (Ctrl-C, SIGTERM) came after the set was renamed into place at ``out``: the
    command's line says so (`set_written`), not that nothing was finalized."""
    setattr(exc, _SET_WRITTEN, out)


def set_written(exc: BaseException) -> object | None:
    """Where the set was written before ``exc`` interrupted the command (`mark_set_written`)."""
    return getattr(exc, _SET_WRITTEN, None)
