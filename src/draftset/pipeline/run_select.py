"""Stage 1 of `draftset run`: select rows exactly as `build` does, and decide which need an
answer (``queue.jsonl``) and which prompts are too long to send (``too_long.jsonl``)."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftset.core import reasons
from draftset.core.records import Conversation, PromptOnly
from draftset.core.words import fmt_counts
from draftset.generation.options import (
    GenerateOptions,
    split_thinking,
)
from draftset.mask.hygiene import (
    EmptyThinkProbe,
    run_sends,
)
from draftset.mask.limits import RenderLimit, bounded_row
from draftset.mask.template import ChatTemplate
from draftset.pipeline.run_state import RunOptions, maybe_die

if TYPE_CHECKING:  # build's modules load when a run starts, not for `draftset --help`
    from draftset.config.options import BuildOptions


# --- stage 1: select and decide -----------------------------------------------------------------
def select_rows(opts: RunOptions, work: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Rows to answer (``queue.jsonl``) and prompts too long to send (``too_long.jsonl``)."""
    # lazy: selection (dedup, decontamination) loads when a run starts, not at CLI start
    from draftset.select.mix import Selection, plan_selection

    b = opts.build
    kwargs, thinking = split_thinking(
        b.template_kwargs, opts.generate.thinking, "generate.thinking", "template_kwargs"
    )
    # the same per-row thinking choice `generate` makes (mix:F is seeded by the row id)
    chooser = GenerateOptions(
        sources=[], endpoints=[], out=work, thinking=thinking, seed=opts.generate.seed
    )
    tmpl = ChatTemplate(b.template_spec())
    probe = EmptyThinkProbe(  # no kit: no tokenizer dump
        tmpl.template_text,
        tmpl.base_kwargs,
        serving_engine=tmpl.serving_engine,
        timeout=b.render_timeout,
        name=tmpl.spec.template_name(),
    )
    # a named set's 'tool_use' template serves the rows with tools: its own empty think block
    tool_use = tmpl.tool_use
    tool_use_probe = tool_use and EmptyThinkProbe(
        tool_use.template_text,
        tool_use.base_kwargs,
        serving_engine=tool_use.serving_engine,
        timeout=b.render_timeout,
        name=f"'tool_use' of {tmpl.spec.template_name()}",
    )
    regenerate = opts.generate.regenerate
    # the rows this run has the target answer can train: a copy of one is no copy to keep
    spec = replace(b.selection_spec(), answered=regenerate)
    plan = None if spec.mix else plan_selection(b.sources, b.max_samples, b.seed)
    selected = Selection(spec, plan)
    queued: dict[str, Counter[str]] = {s.name: Counter() for s in b.sources}
    too_long: Counter[str] = Counter()
    qpath, lpath = work / "queue.jsonl", work / "too_long.jsonl"
    qtmp, ltmp = work / "queue.jsonl.tmp", work / "too_long.jsonl.tmp"
    n = 0
    with qtmp.open("w", encoding="utf-8") as q, ltmp.open("w", encoding="utf-8") as lf:
        for item in selected.rows():
            served = tmpl.for_tools(getattr(item, "tools", None)) is not tmpl
            row_probe = tool_use_probe if served and tool_use_probe else probe
            why, msgs = _needs_answer(item, b, regenerate, row_probe)
            if why is None:
                continue
            assert isinstance(item, Conversation | PromptOnly)
            row_kwargs = {**kwargs, "enable_thinking": chooser.thinking_for(item.id)}
            first = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), len(msgs))
            problem = _prompt_problem(tmpl, item, msgs[:first], row_kwargs, b)
            if problem is not None:
                reason, message = problem
                line = {"id": item.id, "reason": reason, "message": message}
                lf.write(json.dumps({**line, "source": item.source, "row": item.row}) + "\n")
                too_long[item.source] += 1
                continue
            out: dict[str, Any] = {"id": item.id, "messages": msgs}
            if item.tools:
                out["tools"] = item.tools
            out["metadata"] = {"source": item.source, "row": item.row}
            q.write(json.dumps(out, ensure_ascii=False) + "\n")
            queued[item.source][why] += 1
            n += 1
            if n == 2:
                q.flush()
                maybe_die("select")
        q.flush()
        os.fsync(q.fileno())
        lf.flush()
        os.fsync(lf.fileno())
    os.replace(ltmp, lpath)
    os.replace(qtmp, qpath)
    total = selected.counts.total()
    stats = {
        "read": total.read,
        "queued": {k: dict(v) for k, v in queued.items()},
        "queued_total": n,
        "too_long": dict(too_long),
    }
    by_why: Counter[str] = Counter()
    for c in queued.values():
        by_why.update(c)
    detail = fmt_counts(by_why) or "none"
    say(
        f"select: {total.read:,} rows selected; {n:,} to answer ({detail});"
        f" {sum(too_long.values()):,} prompts too long or unrenderable, never sent"
    )
    return stats


def _needs_answer(
    item: Any, b: BuildOptions, regenerate: str, probe: EmptyThinkProbe
) -> tuple[str | None, list[dict[str, Any]]]:
    """(why the row is queued, the messages to send) or (None, []): `hygiene.run_sends`, the
    rule verify re-derives by too."""
    return run_sends(item, b.placeholders, b.template_kwargs, regenerate, probe.thinks)


def _prompt_problem(
    tmpl: Any,
    item: Conversation | PromptOnly,
    msgs: list[dict[str, Any]],
    row_kwargs: dict[str, Any],
    b: BuildOptions,
) -> tuple[str, str] | None:
    """``too_long`` when the rendered prompt alone leaves no room for an answer; the render
    bounded as build bounds a row's (``template_timeout``, ``template_too_large``)."""
    max_length = b.max_length
    tmpl = tmpl.for_tools(item.tools)  # a named set's 'tool_use' for a row with tools
    try:
        with bounded_row(tmpl, item, b.render_timeout):
            text = tmpl.render(msgs, item.tools, add_generation_prompt=True, row_kwargs=row_kwargs)
    except RenderLimit as exc:
        return exc.reason, exc.message
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return reasons.TEMPLATE_ERROR, first
    n = len(tmpl.backend.encode(text, add_special_tokens=False).ids)
    if n >= max_length:
        return (
            reasons.TOO_LONG,
            f"the prompt alone is {n:,} tokens, max_length is {max_length:,}: never sent",
        )
    return None
