"""The end-of-build summary: per-source accounting, reasons, tokens, notes and hints on one
screen, printed by `draftset build` from the job's `BuildResult`."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from draftset.console import out, safe, thousands
from draftset.core.counters import SUMMARY_COLUMNS, summary_row
from draftset.core.words import plural
from draftset.pipeline.build import BuildResult


def unread_fields_notes(per_source: dict[str, dict[str, int]], limit: int = 6) -> list[str]:
    """One line per source whose rows had text fields their shape did not read (the manifest's
    ``unread_fields``): a reasoning trace or an answer in another column is otherwise silently
    left out, and the row re-answered or trained without it."""
    lines = []
    for name, unread in per_source.items():
        if not unread:
            continue
        ranked = sorted(unread.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{k} ({thousands(v)} rows)" for k, v in ranked[:limit])
        more = f" and {len(ranked) - limit} more" if len(ranked) > limit else ""
        lines.append(
            f"note: source {safe(name)}: fields not read by its shape: {shown}{more}. If one holds"
            " the answer or the reasoning, map it (`fields: {output: FIELD}` with `format:"
            " alpaca`, docs/formats.md#field-mapping) or use a preset (docs/mixtures.md#presets,"
            " e.g. `skythought` for SkyThought eval dumps)"
        )
    return lines


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


def print_build_summary(result: BuildResult, console: Console | None = None) -> None:
    """One screen: per-source accounting, reasons, tokens, notes, hints."""
    console = console or out
    acct = result.accounting
    table = Table(title=f"draftset build → {safe(result.out)}", title_justify="left")
    table.add_column("source", justify="left")
    for header, _ in SUMMARY_COLUMNS:
        table.add_column(header, justify="right")
    rows = [*acct.sources.items(), ("TOTAL", acct.total())]
    for i, (name, c) in enumerate(rows):
        if i == len(rows) - 1:
            table.add_section()
        table.add_row(safe(name), *(thousands(n) for n in summary_row(c.to_json())))
    console.print(table)
    total = acct.total()
    if total.sampled_out:
        console.print(
            "sampled out (not selected by --max-samples / weights / counts):"
            f" {thousands(total.sampled_out)}"
        )
    if total.row_rejects:
        reasons = ", ".join(f"{k}={thousands(v)}" for k, v in total.row_rejects.most_common())
        where = f"  (details: {safe(result.out)}/rejects.jsonl)" if result.finalized else ""
        console.print(f"rejects by reason: {reasons}{where}")
    if total.context_turns:
        ctx = ", ".join(f"{k}={thousands(v)}" for k, v in total.context_turns.most_common())
        console.print(f"assistant turns kept as context only: {ctx}")
    if total.context_turns.get("history_render_differs"):
        console.print(
            "hint: the template renders some history turns differently from how the model generated"
            " them (e.g. reasoning stripped); --turns each supervises every turn in its own row"
        )
    if total.context_turns.get("history_tokens_differ"):
        console.print(
            "hint: some turns follow history the server tokenizes differently from how the model"
            " generated it (history_tokens_differ: same text, other tokens); --turns each"
            " supervises every turn in its own row"
        )
    not_generable = total.context_turns.get("not_generable", 0)
    if not_generable:
        console.print(
            f"hint: {plural(not_generable, 'turn')} {_were(not_generable)} not_generable: the"
            " template's render of the answer does not begin with its generation prompt, so"
            " what the model generates cannot be read from it (reasoning recorded under"
            " enable_thinking false; a template that pre-fills `<think>\\n` but renders answers"
            " without it, as DeepSeek-R1's own: use one that renders them as generated);"
            ' docs/semantics.md, "The rule"'
        )
    if total.generation_tags_disagree:
        console.print(
            f"note: the template's {{% generation %}} tags mark something other than what the"
            f" model generates on {plural(total.generation_tags_disagree, 'row')} (agree on"
            f" {thousands(total.generation_tags_agree)}); masks follow serving, not the tags"
        )
    if total.needs_generation:
        console.print(
            f"{plural(total.needs_generation, 'prompt-only row')} queued in"
            f" {safe(result.out)}/prompts.jsonl"
            " (answer them with `draftset generate`, or the whole round trip with `draftset run`)"
        )
    if total.placeholder_rows:
        console.print(
            f"{plural(total.placeholder_rows, 'row')} whose every answer is a placeholder"
            f' ("OK.", empty) {_were(total.placeholder_rows)} rejected no_supervised_turn;'
            " `draftset run` has the target model answer them instead"
        )
    if total.empty_think_rows:
        console.print(
            f"note: {plural(total.empty_think_rows, 'row')}"
            f" {'has' if total.empty_think_rows == 1 else 'have'} answers without reasoning,"
            " trained as empty think blocks under this thinking template; `draftset run` with"
            " `regenerate: missing_reasoning` has the target model answer them with reasoning"
        )
    if total.reasoning_not_rendered:
        console.print(reasoning_note(total.reasoning_not_rendered))
    for line in unread_fields_notes({n: dict(c.unread_fields) for n, c in acct.sources.items()}):
        console.print(escape(line))
    rate = total.read / result.seconds if result.seconds > 0 else 0.0
    console.print(
        f"accounting balanced: read = written + rejected + needs_generation for every source;"
        f" {result.seconds:.1f}s, {rate:,.0f} rows/s"
    )
    for note in result.notes:
        console.print(f"note: {safe(note)}")
    sys.stdout.flush()


def reasoning_note(n: int) -> str:
    """Recorded reasoning the template drops: said, since those answers train without it."""
    return (
        f"note: the recorded reasoning of {plural(n, 'supervised answer')} is not rendered by this"
        " template (it has no place for it, e.g. Llama-3.x): only the answers are trained;"
        " for reasoning, build for a target whose template renders it"
    )
