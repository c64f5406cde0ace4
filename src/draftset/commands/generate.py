"""`draftset generate`: the target model answers the prompts, crash-safe and resumable."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from draftset.commands.common import (
    add_command,
    add_no_progress,
    progress_wanted,
    standalone,
)
from draftset.commands.options import add_options, parsed
from draftset.config.schema import GenerateArgs
from draftset.core.errors import EXIT_FAIL, EXIT_OK

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
    """0 done (errors counted), 1 could not run or stopped early, 2 bad arguments."""
    from draftset import api  # lazy: the stages load when the command runs
    from draftset.generation.console import print_summary

    try:
        result = api.generate(**parsed(args, GenerateArgs), progress=progress_wanted(args))
    except KeyboardInterrupt:
        print("draftset: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    print_summary(result)
    if result.aborted:
        print(
            f"draftset: stopped early: {result.aborted}; rerun the same command to resume",
            file=sys.stderr,
        )
        return EXIT_FAIL
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return standalone("generate", argv)


if __name__ == "__main__":
    sys.exit(main())
