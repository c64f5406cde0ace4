"""`draftset build`: tokenize and mask chat data into a verified, accounted training set."""

from __future__ import annotations

import argparse
import sys
from shlex import quote
from typing import TYPE_CHECKING, Any

from draftset.commands.common import (
    add_command,
    add_no_progress,
    progress_wanted,
    sigterm_as_interrupt,
)
from draftset.commands.options import add_options, parsed
from draftset.config.schema import BuildArgs
from draftset.core.errors import EXIT_FAIL, EXIT_OK, UsageError, mark_set_written
from draftset.core.files import is_recipe

if TYPE_CHECKING:
    from draftset.pipeline.build import BuildResult

BUILD_HELP = """\
Tokenize chat data with the target model's own chat template into a loss-masked,
fully accounted training set: an HF save_to_disk folder read as-is by speculators, or
Parquet shards for datasets.load_dataset and the hub (--output-format parquet).

Supervised tokens are exactly what the target model generates at serving time for an
assistant turn: reasoning, content, tool-call markup and the end-of-turn token. Prompt-only
rows are never given answers: they go to DIR/prompts.jsonl for `draftset generate`
(`draftset run RECIPE.yaml` does the whole round trip: answers, build, verify, report).

SOURCE is a file (.jsonl .json .parquet .arrow, optionally .gz/.zst), a folder of them,
or an HF save_to_disk folder; PATH@weight=W or PATH@count=N mixes sources (W: a share of
--max-samples, 0 = none; a path that exists is read as it is, @ and all). A single
RECIPE.yaml argument reads everything from a recipe (command-line options override it;
--format, --field and --preset apply to command-line sources only: a recipe's sources take
format:, fields: and preset: per source).
"""


def register(sub: Any) -> None:
    b = add_command(sub, "build", "tokenize and mask chat data into a training set", BUILD_HELP)
    b.add_argument("inputs", nargs="+", metavar="SOURCE|RECIPE.yaml")
    add_options(b, BuildArgs)
    add_no_progress(b)
    b.set_defaults(handler=cmd_build)


def build_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """`draftset build`'s parsed options as `draftset.api.build`'s keyword arguments (the
    command is this mapping and nothing else: both run `api.build`)."""
    inputs = list(args.inputs)
    recipes = [i for i in inputs if is_recipe(i)]
    if recipes and len(inputs) > 1:  # it said "--tokenizer is required" of a recipe that has one
        raise UsageError(
            f"{recipes[0]} is a recipe: give it alone (its sources are listed in it), or give"
            " source files and options without it"
        )
    recipe = recipes[0] if recipes else None
    return {"recipe": recipe, **parsed(args, BuildArgs), "sources": None if recipe else inputs}


def cmd_build(args: argparse.Namespace) -> int:
    # lazy: the API (and its stages) after parsing; the printers after the build (the helper
    # process starts loading the template sooner without their imports ahead of it)
    from draftset import api

    with sigterm_as_interrupt():
        result = api.build(
            **build_arguments(args),
            progress=progress_wanted(args),
            helper=getattr(args, "helper", None),  # started ahead by `cli.main`
        )
    try:
        return _report(result)
    except KeyboardInterrupt as exc:  # Ctrl-C while the summary prints: the set is there
        if result.finalized:
            mark_set_written(exc, result.out)
        raise


def _report(result: BuildResult) -> int:
    """The summary, the checks and the exit code of a finished build."""
    from draftset.commands.verify import print_results  # lazy: after the build, as above
    from draftset.pipeline.build import ADVISORY_CHECKS  # lazy: as above
    from draftset.pipeline.summary import print_build_summary  # lazy: as above

    print_build_summary(result)
    if not result.finalized:
        where = f"nothing was created at {result.out}"
        if result.out.exists():  # --overwrite of an earlier set: that set is untouched
            where = f"{result.out} is left as it was"
        print(f"draftset: no rows written: {where} (rejects above, by reason)", file=sys.stderr)
        return EXIT_FAIL
    print_results(result.checks, advisory=ADVISORY_CHECKS)
    if not result.ok:
        return EXIT_FAIL
    print(
        f"next: draftset verify {quote(str(result.out))}   (re-derives every mask from the sources)"
    )
    return EXIT_OK
