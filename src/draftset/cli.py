"""Command line: a thin layer over the stage functions.

Exit codes: 0 success, 1 the job ran but failed (a check, the accounting, nothing written),
2 unusable arguments (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from draftset import __version__

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments or unusable inputs: printed as one line, exit code 2."""


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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage otherwise)
        raise UsageError(message)


BUILD_HELP = """\
Tokenize chat data with the target model's own chat template into a loss-masked,
fully accounted training set (HF save_to_disk folder read as-is by speculators).

Supervised tokens are exactly what the target model generates at serving time for an
assistant turn: reasoning, content, tool-call markup and the end-of-turn token. Prompt-only
rows are never given answers: they go to DIR/prompts.jsonl for `draftset generate`.

SOURCE is a file (.jsonl .json .parquet .arrow, optionally .gz/.zst), a folder of them,
or an HF save_to_disk folder; PATH@weight=W or PATH@count=N mixes sources. A single
RECIPE.yaml argument reads everything from a recipe (command-line options override it).
"""


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="draftset", description="Verified training sets for speculative-decoding drafters."
    )
    p.add_argument("--version", action="version", version=f"draftset {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser(
        "build",
        help="tokenize and mask chat data into a training set",
        description=BUILD_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("inputs", nargs="+", metavar="SOURCE|RECIPE.yaml")
    b.add_argument("--tokenizer", help="tokenizer folder (or hub id when online)")
    b.add_argument("--out", help="output folder (refused if it exists, unless --overwrite)")
    b.add_argument("--chat-template", help="Jinja file overriding the tokenizer's template")
    b.add_argument(
        "--template-kwargs",
        help="JSON object passed to the template, e.g. '{\"enable_thinking\": false}'",
    )
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
        "--turns",
        choices=["all", "last", "each"],
        help="which assistant turns to supervise (default all)",
    )
    b.add_argument("--max-length", type=int, help="max tokens per row (default 4096)")
    b.add_argument(
        "--truncation",
        choices=["drop", "truncate"],
        help="over-long rows: reject or cut (default drop)",
    )
    b.add_argument("--min-supervised-tokens", type=int, help="reject rows with fewer (default 1)")
    b.add_argument(
        "--max-samples", type=int, help="total rows to take, split over sources by weight"
    )
    b.add_argument("--seed", type=int, help="seed of the sampling (default 0)")
    b.add_argument(
        "--workers",
        type=int,
        help="render/encode processes (default: all cores; output is identical for any N)",
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
        "--eot-token",
        action="append",
        help="extra end-of-turn token (default: probed from the template)",
    )
    b.add_argument(
        "--placeholder",
        action="append",
        help="answer text never supervised (default: 'OK.', 'OK'; empty answers always)",
    )
    b.add_argument(
        "--overwrite", action="store_true", default=None, help="replace an existing output folder"
    )
    b.add_argument(
        "--preset",
        help="column layout of a known public set for the command-line sources "
        "(openorca, ultrachat-200k, xlam-function-calling-60k, ...; see docs/mixtures.md)",
    )
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
    b.add_argument(
        "--render-timeout",
        type=float,
        metavar="SECONDS",
        help="reject a row whose template render takes longer (template_timeout; default 5, "
        "0 = no bound)",
    )
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(handler=cmd_build)

    from draftset import generate, report, show, verify

    for module in (verify, show, report, generate):
        module.register_cli(sub)
    return p


def _build_options(args: argparse.Namespace) -> Any:
    from draftset.build import BuildOptions
    from draftset.limits import DEFAULT_RENDER_TIMEOUT
    from draftset.read import HUB_PREFIX
    from draftset.recipe import (
        load_recipe,
        parse_fields,
        parse_json_object,
        parse_source_arg,
        unique_names,
    )

    recipe: dict[str, Any] = {}
    inputs = list(args.inputs)
    if len(inputs) == 1 and inputs[0].endswith((".yaml", ".yml")):
        recipe = load_recipe(Path(inputs[0]))
        sources = recipe.get("sources") or []
        if not sources:
            raise UsageError(f"recipe {inputs[0]} lists no sources")
    else:
        fields = parse_fields(args.field)
        sources = [parse_source_arg(a, args.format, fields, args.preset) for a in inputs]
    sources = unique_names(sources)
    for s in sources:
        if not s.path.exists() and not str(s.path).startswith(HUB_PREFIX):
            raise UsageError(f"source not found: {s.path}")

    def pick(name: str, default: Any) -> Any:
        value = getattr(args, name, None)
        if value is not None:
            return value
        return recipe.get(name, default)

    tokenizer = pick("tokenizer", None)
    out = pick("out", None)
    if not tokenizer:
        raise UsageError("--tokenizer is required (or `tokenizer:` in the recipe)")
    if not out:
        raise UsageError("--out is required (or `out:` in the recipe)")
    kwargs = recipe.get("template_kwargs") or {}
    if args.template_kwargs:
        kwargs = parse_json_object(args.template_kwargs, "--template-kwargs")
    template = pick("chat_template", None)
    if template and not Path(template).is_file():
        raise UsageError(f"chat template file not found: {template}")
    opts = BuildOptions(
        sources=sources,
        tokenizer=str(tokenizer),
        out=Path(out),
        chat_template_path=template,
        template_kwargs=kwargs,
        eot_tokens=tuple(args.eot_token or recipe.get("eot_tokens") or ()),
        max_length=int(pick("max_length", 4096)),
        truncation=pick("truncation", "drop"),
        min_supervised_tokens=int(pick("min_supervised_tokens", 1)),
        turns=pick("turns", "all"),
        seed=int(pick("seed", 0)),
        max_samples=pick("max_samples", None),
        workers=int(pick("workers", 0)),
        draft_vocab_size=pick("draft_vocab_size", None),
        target_vocab_size=pick("target_vocab_size", None),
        placeholders=tuple(args.placeholder or recipe.get("placeholders") or ("OK.", "OK")),
        overwrite=bool(pick("overwrite", False)),
        dedup=pick("dedup", "exact"),
        near_dup_threshold=float(pick("near_dup_threshold", 0.8)),
        decontaminate=list(args.decontaminate or recipe.get("decontaminate") or []),
        mix=recipe.get("mix"),
        render_timeout=_seconds(pick("render_timeout", DEFAULT_RENDER_TIMEOUT)),
    )
    for bench in opts.decontaminate:
        if not Path(bench).exists():
            raise UsageError(f"--decontaminate file not found: {bench}")
    if opts.dedup not in ("exact", "near", "none"):
        raise UsageError(f"dedup must be exact, near or none, not {opts.dedup!r}")
    for s in sources:
        if s.preset:
            from draftset.presets import UnknownPresetError, apply_preset

            try:
                apply_preset(s.preset)
            except UnknownPresetError as exc:
                raise UsageError(str(exc).strip("'\"")) from None
    if opts.truncation not in ("drop", "truncate"):
        raise UsageError(f"truncation must be drop or truncate, not {opts.truncation!r}")
    if opts.turns not in ("all", "last", "each"):
        raise UsageError(f"turns must be all, last or each, not {opts.turns!r}")
    if opts.max_length < 1 or opts.min_supervised_tokens < 0 or opts.workers < 0:
        raise UsageError("--max-length must be >= 1, --min-supervised-tokens and --workers >= 0")
    return opts


def _seconds(value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise UsageError(f"--render-timeout must be a number of seconds >= 0, not {value!r}")
    return seconds


def cmd_build(args: argparse.Namespace) -> int:
    from draftset.build import run_build
    from draftset.console import print_build_summary, progress_bar

    opts = _build_options(args)
    show = not args.no_progress and sys.stderr.isatty()
    with _sigterm_as_interrupt(), progress_bar("build", enabled=show) as update:
        result = run_build(opts, on_progress=update)
    print_build_summary(result)
    total = result.accounting.total()
    if total.rows_out == 0 and total.needs_generation == 0:
        print(f"draftset: no rows written to {result.out} (see rejects.jsonl)", file=sys.stderr)
        return EXIT_FAIL
    from draftset.verify import print_results

    checks = result.checks
    print_results(checks)
    # drafter fitness is advice for DFlash training, not an integrity failure of the build
    if any(c.failed for c in checks if c.name != "drafter_fitness"):
        return EXIT_FAIL
    print(f"next: draftset verify {result.out}   (re-derives every mask from the sources)")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    from draftset.read import SourceError
    from draftset.recipe import RecipeError
    from draftset.template import TokenizerError
    from draftset.write import OutputExistsError

    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.handler(args))
    except (UsageError, SourceError, RecipeError, TokenizerError, OutputExistsError) as exc:
        print(f"draftset: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        how = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"draftset: {how}; nothing was finalized", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except Exception as exc:
        from draftset.build import AccountingError
        from draftset.modes import MixError
        from draftset.sidecar import SidecarError

        if isinstance(exc, MixError):  # a mix target the data cannot meet: fix the recipe
            print(f"draftset: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(exc, AccountingError | SidecarError):
            print(f"draftset: {exc}", file=sys.stderr)
            return EXIT_FAIL
        raise


if __name__ == "__main__":
    sys.exit(main())
