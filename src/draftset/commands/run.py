"""`draftset run RECIPE.yaml`: raw rows to a verified set, answers from the target, resumable."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from draftset.commands.common import (
    add_command,
    add_no_progress,
    interrupted,
    progress_wanted,
    sigterm_as_interrupt,
)
from draftset.commands.options import add_options, parsed
from draftset.config.fields import cli_fields, cli_of, flag_of, help_of
from draftset.config.recipe import RECIPE_SECTIONS
from draftset.config.schema import BuildArgs, RunArgs
from draftset.core.errors import EXIT_FAIL, EXIT_OK
from draftset.core.terminal import visible
from draftset.core.words import fmt_counts, plural

if TYPE_CHECKING:
    from draftset.pipeline.run_state import RunResult

RUN_HELP = """\
From raw rows to a verified set in one resumable command, answers from the target model:
select rows exactly as `build` does; have the target model (vLLM, SGLang, transformers serve)
answer prompt-only rows, rows whose answers are placeholders ("OK.", empty) and, with
`regenerate: missing_reasoning | all`, rows without reasoning / every row; build the set with
the answers rejoining their rows (same ids, same sources); verify it; write the report.

RECIPE.yaml is a `build` recipe plus a `generate:` section (see docs/run.md):
  generate:
    endpoints: [http://127.0.0.1:8000/v1]   # key: $DRAFTSET_API_KEY or $OPENAI_API_KEY
    thinking: mix:0.5                        # on | off | mix:F
    max_tokens: 4096
    temperature: 0.6                         # top_p, top_k, seed, extra_body
    concurrency: 64
    request_timeout: 600
    regenerate: missing                      # missing | missing_reasoning | all

State lives in OUT.run/ (the answers the set is built from: keep it). Rerun the same command
after a crash or kill to resume: a finished set is verified again (built again from the
answers when it is gone); a changed recipe, input, answers file or generation setting (or a
server now serving another model) is refused (exit 2) unless --restart. --retry-errors asks
again the rows that failed retries_exhausted / invalid_response / model_mismatch / unfinished /
generate_internal_error.
Exit codes: 0 verify passed, 1 verify failed or the run stopped (rerun to resume), 2 unusable
recipe / arguments / changed settings.
"""


def register(sub: Any) -> None:
    p = add_command(
        sub, "run", "recipe -> answers from the target -> verified set, resumable", RUN_HELP
    )
    add_options(p, RunArgs)
    add_no_progress(p, "no progress bars (in a log: no line a minute)")
    p.set_defaults(handler=cmd_run, unknown_hint=recipe_place)


def recipe_place(extra: list[str], argv: list[str]) -> str | None:
    """Where in the recipe a `build` or `generate` flag given to `run` belongs (one line), or
    None for a flag no command has: `run` reads those settings from its recipe, and argparse's
    bare "unrecognized arguments" left the user no way forward."""
    places: dict[str, list[tuple[str, str, str | None, Any]]] = {}
    for model, where in (
        (BuildArgs, "at the recipe's top level"),
        *((m, f"under its `{section}:`") for section, m in RECIPE_SECTIONS.items()),
    ):
        for name in model.model_fields:
            if model is BuildArgs and name not in cli_fields(model):
                continue
            cli = cli_of(model, name)
            for flag in cli.flags or (flag_of(model, name),):
                places.setdefault(flag, []).append((name, where, cli.action, model))
    for name in ("format", "fields", "preset"):  # `SourceEntry`'s keys
        places[flag_of(BuildArgs, name)] = [(name, "on each entry of its `sources:`", None, None)]
    for arg in extra:
        flag, eq, value = arg.partition("=")
        if flag not in places:
            continue
        options = places[flag]
        if options[0][2] == "store_true":
            value = "true"
        elif not eq:
            at = argv.index(arg) if arg in argv else -1
            following = argv[at + 1] if 0 <= at < len(argv) - 1 else ""
            value = following if following and not following.startswith("-") else "..."
        said = []
        for key, where, action, model in options:
            shown = value
            if key == "fields":
                canonical, _, column = value.partition("=")
                shown = f"{{{canonical}: {column or '...'}}}"
            elif action == "append":
                shown = f"[{value}]"
            what = f" ({_first_clause(help_of(model, key))})" if len(options) > 1 else ""
            said.append(f"`{key}: {shown}` {where}{what}")
        return f"run reads {flag} from its recipe: set {', or '.join(said)} (docs/run.md)"
    return None


def _first_clause(text: str | None) -> str:
    return (text or "").split(";")[0].split(" (")[0].strip()


def cmd_run(args: argparse.Namespace) -> int:
    # RunUsageError, generate's StoreError (2) and RunFailed (1) are DraftsetErrors: `cli.main`
    # prints their one line and returns their exit code
    from draftset import api  # lazy: the stages load when the command runs
    from draftset.commands.verify import print_results
    from draftset.pipeline.build import ADVISORY_CHECKS  # lazy: as above

    try:
        with sigterm_as_interrupt():
            result = api.run(
                **parsed(args, RunArgs),
                progress=progress_wanted(args),
                say=lambda text: print(visible(text), flush=True),  # paths may hold ESC
                # one verdict: run's; drafter fitness is advice there as in build
                show_checks=lambda checks: print_results(
                    checks, verdict=False, advisory=ADVISORY_CHECKS
                ),
            )
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    if not print_summary(result):
        return EXIT_FAIL
    return EXIT_OK if result.passed else EXIT_FAIL


def print_summary(result: RunResult) -> bool:
    """The run's summary, read from the set's manifest; False (one line on stderr) when it
    cannot be read: a set removed after its verify is no verified set to report."""
    # lazy: rich, after the run; build's wording
    from draftset.pipeline.summary import reasoning_note, unread_fields_notes

    path = result.out / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        print(f"draftset: {visible(str(path))}: cannot read: {exc.strerror}", file=sys.stderr)
        return False
    except ValueError:
        print(f"draftset: {visible(str(path))}: cannot read: not JSON", file=sys.stderr)
        return False
    total = (manifest.get("counts") or {}).get("total") or {}
    run_info = manifest.get("run") or {}
    queued = run_info.get("queued") or {}
    errors = run_info.get("generation_errors") or {}
    print(
        f"run: {plural(total.get('read', 0), 'row')} read, {total.get('written', 0):,} written,"
        f" {total.get('rejected', 0):,} rejected; answers by {run_info.get('model')!r}:"
        f" {run_info.get('answered', 0):,} of {sum(queued.values()):,} queued"
        f" ({fmt_counts(queued)}), {sum(errors.values()):,} not answered"
        f"{f' ({fmt_counts(errors)})' if errors else ''},"
        f" {run_info.get('ends_at_tool_call', 0):,} end at a tool call"
    )
    if run_info.get("special_tokens_stripped"):
        print(
            f"note: {run_info['special_tokens_stripped']:,} answers ended with a special token's"
            " text (a stop token the server leaked): cut before building"
        )
    context = total.get("context_turns_by_reason") or {}
    if context:  # as build's summary says them: turns trained as context only
        print(f"assistant turns kept as context only: {fmt_counts(context)}")
    if total.get("empty_think_rows"):
        n = total["empty_think_rows"]
        print(
            f"note: {plural(n, 'row')} {'has' if n == 1 else 'have'} answers without reasoning,"
            " trained as empty think blocks under this thinking template; `regenerate:"
            " missing_reasoning` in the recipe's generate section has the target answer them"
        )
    if total.get("reasoning_not_rendered"):
        print(reasoning_note(total["reasoning_not_rendered"]))
    differ = {
        k: context[k] for k in ("history_render_differs", "history_tokens_differ") if context.get(k)
    }
    if differ:
        print(
            f"hint: {fmt_counts(differ)} assistant turns kept as context only: the server shows"
            " them differently in later prompts (text or tokens) than the model generated them;"
            " `turns: each` in the recipe (--turns each) supervises every turn in its own row"
        )
    per_source = (manifest.get("counts") or {}).get("per_source") or {}
    for line in unread_fields_notes({n: c.get("unread_fields") for n, c in per_source.items()}):
        print(line)
    out = visible(str(result.out))
    if result.passed:  # verified by this run (a rerun verifies again); report printed by its stage
        print(f"verified: {out}")
    else:
        print(f"draftset: verify failed for {out} (details above)", file=sys.stderr)
    return True
