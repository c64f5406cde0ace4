"""Command line: a thin layer over `draftset.api` (options parsed into its keyword arguments).

Exit codes: 0 success, 1 the job ran but failed (a check, the accounting, nothing written),
2 unusable arguments (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from draftset.core import defaults
from draftset.core.errors import EXIT_FAIL, EXIT_OK, EXIT_USAGE, DraftsetError, UsageError
from draftset.mask.serving import SERVING_ENGINES
from draftset.output import FORMATS

# The commands' modules load in the functions below, not here: every worker and helper process
# is spawn-started and re-imports the console script's module, so whatever this module imports
# at the top, every child pays for (pyarrow, rich, the readers: ~35 MB a process).

__all__ = ["EXIT_FAIL", "EXIT_OK", "EXIT_USAGE", "UsageError", "build_arguments", "main"]


class Terminated(KeyboardInterrupt):
    """SIGTERM: handled exactly like Ctrl-C (clean-up runs), exit code 143 (128 + 15)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the clean-up finish
    raise Terminated


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises `Terminated` in this block (main thread only); the old handler after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage otherwise)
        raise UsageError(message)


class _Version(argparse.Action):
    """``--version``, read from the package metadata only when asked (~90 ms of imports that
    every build, and every spawned child re-importing this module, would pay otherwise)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any):
        kw.setdefault("help", "show program's version number and exit")  # argparse's wording
        kw.setdefault("default", argparse.SUPPRESS)  # no `version` in the parsed arguments
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from draftset.core.version import package_version

        print(f"draftset {package_version()}")  # on stdout, as argparse's own version action
        parser.exit()


BUILD_HELP = """\
Tokenize chat data with the target model's own chat template into a loss-masked,
fully accounted training set: an HF save_to_disk folder read as-is by speculators, or
Parquet shards for datasets.load_dataset and the hub (--output-format parquet).

Supervised tokens are exactly what the target model generates at serving time for an
assistant turn: reasoning, content, tool-call markup and the end-of-turn token. Prompt-only
rows are never given answers: they go to DIR/prompts.jsonl for `draftset generate`
(`draftset run RECIPE.yaml` does the whole round trip: answers, build, verify, report).

SOURCE is a file (.jsonl .json .parquet .arrow, optionally .gz/.zst), a folder of them,
or an HF save_to_disk folder; PATH@weight=W or PATH@count=N mixes sources. A single
RECIPE.yaml argument reads everything from a recipe (command-line options override it).
"""


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command="build"`` only what parsing a build needs.

    The other commands' options are defined in their modules, whose imports (pyarrow, rich,
    the readers: ~0.4 s) would delay the start of a build's template load by as much.
    """
    p = _Parser(
        prog="draftset", description="Verified training sets for speculative-decoding drafters."
    )
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_build_command(sub)
    if command == "build":  # `draftset build ...` reaches only this subparser
        return p

    # lazy: see the note on the imports
    from draftset.checks import verify
    from draftset.generation import job as generate
    from draftset.pipeline import run
    from draftset.review import report, show

    for module in (verify, show, report, generate, run):
        module.register_cli(sub)
    return p


def _add_build_command(sub: Any) -> None:
    """`draftset build`: its options in groups named for the stage they reach."""
    b = sub.add_parser(
        "build",
        help="tokenize and mask chat data into a training set",
        description=BUILD_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("inputs", nargs="+", metavar="SOURCE|RECIPE.yaml")
    _add_template_options(b)
    _add_source_options(b)
    _add_mask_options(b)
    _add_selection_options(b)
    _add_output_options(b)
    b.set_defaults(handler=cmd_build)


def _add_template_options(b: argparse.ArgumentParser) -> None:
    """The tokenizer and chat template that define what is supervised."""
    b.add_argument("--tokenizer", help="tokenizer folder (or hub id when online)")
    b.add_argument("--chat-template", help="Jinja file overriding the tokenizer's template")
    b.add_argument(
        "--template-kwargs",
        help="JSON object passed to the template, e.g. '{\"enable_thinking\": false}'",
    )


def _add_source_options(b: argparse.ArgumentParser) -> None:
    """How the command-line sources' rows are read."""
    b.add_argument(
        "--format",
        choices=["messages", "sharegpt", "alpaca", "prompt", "pretokenized"],
        help="force the row shape of the command-line sources (default: detected per row)",
    )
    b.add_argument(
        "--field",
        action="append",
        metavar="CANONICAL=COLUMN",
        help="map a column to a canonical field, e.g. instruction=text (repeatable)",
    )
    b.add_argument(
        "--preset",
        help="column layout of a known public set for the command-line sources "
        "(openorca, ultrachat-200k, xlam-function-calling-60k, ...; see docs/mixtures.md)",
    )


def _add_mask_options(b: argparse.ArgumentParser) -> None:
    """Which tokens are supervised and which rows are rejected."""
    b.add_argument(
        "--turns",
        choices=["all", "last", "each"],
        help="which assistant turns to supervise (default all)",
    )
    b.add_argument(
        "--max-length", type=int, help=f"max tokens per row (default {defaults.MAX_LENGTH})"
    )
    b.add_argument(
        "--truncation",
        choices=["drop", "truncate"],
        help="over-long rows: reject or cut (default drop)",
    )
    b.add_argument("--min-supervised-tokens", type=int, help="reject rows with fewer (default 1)")
    b.add_argument(
        "--eot-token",
        action="append",
        help="extra stop token, added to generation_config.json's eos_token_id (repeatable;"
        " default: none)",
    )
    b.add_argument(
        "--placeholder",
        action="append",
        help="answer text never supervised (default: 'OK.', 'OK'; empty answers always)",
    )
    b.add_argument(
        "--render-timeout",
        type=float,
        metavar="SECONDS",
        help="reject a row whose template render takes longer (template_timeout; default 5, "
        "0 = no bound)",
    )


def _add_selection_options(b: argparse.ArgumentParser) -> None:
    """Which rows are taken: sampling, dedup, decontamination."""
    b.add_argument(
        "--max-samples", type=int, help="total rows to take, split over sources by weight"
    )
    b.add_argument("--seed", type=int, help="seed of the sampling (default 0)")
    b.add_argument(
        "--dedup",
        choices=["exact", "near", "none"],
        help="drop duplicates: exact content hash (default), + MinHash near-duplicates, or none",
    )
    b.add_argument(
        "--near-dup-threshold", type=float, help="Jaccard threshold for --dedup near (0.8)"
    )
    b.add_argument(
        "--decontaminate",
        action="append",
        metavar="FILE",
        help="benchmark prompts (any readable file, or .txt one per line); rows sharing a "
        "13-word n-gram with one are removed (repeatable)",
    )


def _add_output_options(b: argparse.ArgumentParser) -> None:
    """Where and how the set is written."""
    b.add_argument("--out", help="output folder (refused if it exists, unless --overwrite)")
    b.add_argument(
        "--overwrite", action="store_true", default=None, help="replace an existing output folder"
    )
    b.add_argument(
        "--workers",
        type=int,
        help="render/encode processes (default: all cores; output is identical for any N)",
    )
    b.add_argument(
        "--engine",
        choices=["local", "ray"],
        help="where render/encode runs: local processes (default) or Ray actors on a cluster "
        "(needs draftset[ray]; same output bytes; --workers then counts actors, default all "
        "the cluster's CPUs)",
    )
    b.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="--engine ray: the cluster to join (auto, HOST:PORT or ray://HOST:PORT; default: "
        "RAY_ADDRESS, else a private Ray on this machine)",
    )
    b.add_argument(
        "--draft-vocab-size", type=int, help="also write d2t-N.npy / t2d-N.npy (EAGLE-3)"
    )
    b.add_argument(
        "--target-vocab-size",
        type=int,
        help="target vocabulary when the tokenizer folder has no config.json",
    )
    b.add_argument(
        "--output-format",
        choices=list(FORMATS),
        help="arrow: HF save_to_disk folder, read as-is by speculators (default); parquet:"
        " data/train-*.parquet shards for datasets.load_dataset and the hub",
    )
    b.add_argument(
        "--serving-engine",
        choices=list(SERVING_ENGINES),
        help="prepare tools as this engine does before rendering (default vllm; transformers ="
        " as given; docs/semantics.md)",
    )
    b.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """`draftset build`'s parsed options as `draftset.api.build`'s keyword arguments (the
    command is this mapping and nothing else: both run `api.build`)."""
    inputs = list(args.inputs)
    recipe = inputs[0] if len(inputs) == 1 and inputs[0].endswith((".yaml", ".yml")) else None
    return {
        "recipe": recipe,
        "sources": None if recipe else inputs,
        "tokenizer": args.tokenizer,
        "out": args.out,
        "chat_template": args.chat_template,
        "template_kwargs": args.template_kwargs,
        "format": args.format,
        "fields": args.field,
        "preset": args.preset,
        "turns": args.turns,
        "max_length": args.max_length,
        "truncation": args.truncation,
        "min_supervised_tokens": args.min_supervised_tokens,
        "max_samples": args.max_samples,
        "seed": args.seed,
        "workers": args.workers,
        "engine": args.engine,
        "ray_address": args.ray_address,
        "draft_vocab_size": args.draft_vocab_size,
        "target_vocab_size": args.target_vocab_size,
        "eot_tokens": args.eot_token,
        "placeholders": args.placeholder,
        "overwrite": args.overwrite,
        "dedup": args.dedup,
        "near_dup_threshold": args.near_dup_threshold,
        "decontaminate": args.decontaminate,
        "render_timeout": args.render_timeout,
        "output_format": args.output_format,
        "serving_engine": args.serving_engine,
    }


def cmd_build(args: argparse.Namespace) -> int:
    # lazy: see the note on the imports; the printers after the build (the helper process
    # starts loading the template sooner without their imports ahead of it)
    from draftset import api

    show = not args.no_progress and sys.stderr.isatty()
    with _sigterm_as_interrupt():
        result = api.build(**build_arguments(args), progress=show)
    from draftset.checks.verify import print_results
    from draftset.pipeline.summary import print_build_summary

    print_build_summary(result)
    if not result.finalized:
        print(
            f"draftset: no rows written: nothing was created at {result.out}"
            " (rejects above, by reason)",
            file=sys.stderr,
        )
        return EXIT_FAIL
    print_results(result.checks)
    if not result.ok:
        return EXIT_FAIL
    print(f"next: draftset verify {result.out}   (re-derives every mask from the sources)")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    given = sys.argv[1:] if argv is None else argv
    parser = _build_parser(given[0] if given else None)
    try:
        args = parser.parse_args(argv)
        return int(args.handler(args))
    except DraftsetError as exc:  # every run-level error carries its exit code
        from draftset.core.terminal import visible  # lazy: only on an error

        print(visible(exc.cli_line()), file=sys.stderr)  # a path may hold ESC sequences
        return exc.exit_code
    except KeyboardInterrupt as exc:
        how = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"draftset: {how}; nothing was finalized", file=sys.stderr)
        code = 143 if isinstance(exc, Terminated) else 130
        if argv is None:
            _exit_by_deadline(code)
        return code


if __name__ == "__main__":
    sys.exit(main())
