"""The row step: render & mask → encode, a batch at a time — pure, what every engine runs.

`MaskConfig` is everything a worker needs, named and frozen (it travels to worker processes and
Ray actors by pickle); `config.build()` makes the `MaskStep` that turns a batch of normalized
rows into `ItemResult`s. Nothing here reads files or writes output: engines decide where a step
runs, the driver decides what is written.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path

import numpy as np

from draftset.core import defaults, reasons
from draftset.core.counters import Accounting, SourceCounts
from draftset.core.records import (
    Conversation,
    Normalized,
    PreTokenized,
    PromptOnly,
    Reject,
    in_file,
)
from draftset.mask.encode import (
    EncodedRow,
    LengthRules,
    encode_plans,
    encode_pretokenized,
    finish_row,
)
from draftset.mask.hygiene import (
    EmptyThinkProbe,
    all_placeholder_answers,
    lacks_reasoning,
    row_kwargs_key,
)
from draftset.mask.limits import RenderLimit, bounded_row
from draftset.mask.render import (
    ConversationPlan,
    RowPlan,
    TurnMode,
    plan_conversation,
    server_prompt_ids,
    server_prompt_problem,
)
from draftset.mask.template import (
    ChatTemplate,
    Renderer,
    RenderKit,
    TemplateSpec,
)


@dataclass(slots=True)
class ItemResult:
    """Everything the main process needs to know about one input row."""

    item: Normalized
    rows: list[EncodedRow] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    plan_stats: ConversationPlan | None = None
    # facts about the row that the summary's hints count (`count_results` below), noted
    # before the row's texts are dropped: every answer a placeholder; written, with answers
    # without reasoning that the template trains as an empty think block
    placeholder_only: bool = False
    empty_think: bool = False


@dataclass(frozen=True)
class MaskConfig:
    """What a worker needs to build its row step, from the driver's loaded template."""

    spec: TemplateSpec
    kit: RenderKit | None  # None: transformers' internals moved; workers load the tokenizer
    rules: LengthRules
    mode: TurnMode
    placeholders: tuple[str, ...]
    vocab_size: int
    render_timeout: float | None = defaults.RENDER_TIMEOUT

    def build(self, template: Renderer | None = None) -> MaskStep:
        """The step; ``template``: reuse one already loaded in this process (inline engine)."""
        return MaskStep(self, template)


class MaskStep:
    """Render & mask & encode; one per worker process (or actor), built from a `MaskConfig`."""

    def __init__(self, config: MaskConfig, template: Renderer | None = None) -> None:
        # workers rebuild the driver's renderer from its kit (no AutoTokenizer import); only
        # when transformers' internals moved do they load the full tokenizer themselves
        kit = config.kit
        self.template = template or (kit and Renderer.from_kit(kit)) or ChatTemplate(config.spec)
        self.rules = config.rules
        self.mode = config.mode
        self.placeholders = config.placeholders
        self.vocab_size = config.vocab_size
        self.render_timeout = config.render_timeout
        self.template_kwargs = config.spec.template_kwargs
        self.probe = EmptyThinkProbe(
            self.template.template_text,
            self.template.base_kwargs,
            serving_engine=self.template.serving_engine,
            timeout=config.render_timeout,
            name=config.spec.template_name(),
        )
        # a named set's 'tool_use' template renders the rows with tools (`Renderer.for_tools`)
        tool_use = self.template.tool_use
        self.tool_use_probe = tool_use and EmptyThinkProbe(
            tool_use.template_text,
            tool_use.base_kwargs,
            serving_engine=tool_use.serving_engine,
            timeout=config.render_timeout,
            name=f"'tool_use' of {config.spec.template_name()}",
        )

    def __call__(self, batch: list[Normalized]) -> list[ItemResult]:
        return self.process(batch)

    def process(self, batch: list[Normalized]) -> list[ItemResult]:
        results = [ItemResult(item) for item in batch]
        plans = []
        owners = []
        for res in results:
            item = res.item
            if isinstance(item, Conversation):
                try:
                    cplan = self._plan(item)
                except RenderLimit as exc:  # a hostile template costs this row, not the run
                    res.rejects.append(
                        Reject(item.source, item.row, item.id, exc.reason, exc.message)
                    )
                    continue
                except Exception as exc:  # never let one row end a long run: reject it, loudly
                    res.rejects.append(_internal_error(item, exc))
                    continue
                res.rejects.extend(cplan.rejects)
                res.plan_stats = replace(cplan, rows=[], rejects=[])  # its counters
                for rp in cplan.rows:
                    plans.append(rp)
                    owners.append(res)
            elif isinstance(item, PreTokenized):
                out = encode_pretokenized(item, self.rules, self.vocab_size, self.template.eot_ids)
                (res.rows if isinstance(out, EncodedRow) else res.rejects).append(out)  # type: ignore[arg-type]
        encoded = encode_plans(self.template.backend, plans, self.rules, self._token_bytes(plans))
        for rp, enc, res in zip(plans, encoded, owners, strict=True):
            out = finish_row(rp, enc, self.rules)
            if isinstance(out, EncodedRow):
                out = _served_prompts_agree(out, rp, res.item)
            if isinstance(out, EncodedRow):
                res.rows.append(out)
                assert res.plan_stats is not None
                if rp.tokens_differ:  # turns encoding made context (written rows only)
                    res.plan_stats.context_turns[reasons.TURN_HISTORY_TOKENS_DIFFER] += (
                        rp.tokens_differ
                    )
                res.plan_stats.rows.append(
                    rp
                )  # keep supervised-turn counts; segments dropped below
            else:
                res.rejects.append(out)
        for res in results:  # texts are big and the main process does not need them back
            for reject in res.rejects:  # its reject lines name its file, as its own would
                in_file(reject, res.item.file)
            if isinstance(res.item, Conversation):
                self._note_facts(res)
                item = res.item
                res.item = Conversation(item.id, item.source, item.row, [], file=item.file)
            if res.plan_stats is not None:
                for rp in res.plan_stats.rows:
                    rp.segments, rp.server_ids, rp.turn_of_segment = [], {}, {}
        return results

    def _note_facts(self, res: ItemResult) -> None:
        item = res.item
        if all_placeholder_answers(item, self.placeholders):
            res.placeholder_only = True
        elif res.rows and lacks_reasoning(item, self.template_kwargs):
            assert isinstance(item, Conversation) and res.plan_stats is not None
            served = self.template.for_tools(item.tools) is not self.template
            probe = self.tool_use_probe if served and self.tool_use_probe else self.probe
            wrapper = probe.wrapper(row_kwargs_key(item))
            # the row's own supervised text, not the template's habit: a turn it renders
            # without the block (no user turn before it, Qwen3) is no empty think block
            res.empty_think = bool(wrapper) and any(
                text.startswith(wrapper)
                for rp in res.plan_stats.rows
                for text, supervised in rp.segments
                if supervised
            )

    def _token_bytes(self, plans: list[RowPlan]) -> int | None:
        """The renderer's `token_bytes` (worked out once, ~1 s, and kept on it), asked only
        once a row is long enough to need it: no real tokenizer has a bound under 16 bytes a
        token."""
        if "token_bytes" not in vars(self.template):  # not worked out yet: is it needed?
            limit = 16 * self.rules.max_length
            if not any(sum(len(t) for t, _ in rp.segments) > limit for rp in plans):
                return None
        return self.template.token_bytes

    def _plan(self, item: Conversation) -> ConversationPlan:
        """Render & mask one row within its bounds: time, and characters per render."""
        template = self.template.for_tools(item.tools)  # the one its request is served by
        with bounded_row(template, item, self.render_timeout):
            return plan_conversation(template, item, self.mode, self.placeholders)


def _internal_error(item: Conversation, exc: Exception) -> Reject:
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return Reject(
        item.source,
        item.row,
        item.id,
        reasons.INTERNAL_ERROR,
        f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno};"
        " please report it)",
    )


def count_results(results: Sequence[ItemResult]) -> Accounting:
    """The counts of one batch of row-step results: pure, so whoever ran the batch can count it;
    the driver adds the batches up (``acct += count_results(results)``)."""
    acct = Accounting(list(dict.fromkeys(res.item.source for res in results)))
    for res in results:
        item = res.item
        counts = acct[item.source]
        if isinstance(item, Reject):
            counts.rejected[item.reason] += 1
            counts.row_rejects[item.reason] += 1
            continue
        if isinstance(item, PromptOnly):
            counts.needs_generation += 1
            continue
        counts.row_rejects.update(r.reason for r in res.rejects)
        if res.rows:
            counts.written += 1
            counts.rows_out += len(res.rows)
            for r in res.rows:
                counts.tokens += int(r.input_ids.shape[0])
                counts.supervised_tokens += int(r.loss_mask.sum(dtype=np.int64))
                counts.truncated += int(r.truncated)
        else:
            counts.rejected[res.rejects[0].reason] += 1
        if res.plan_stats is not None:
            stats = res.plan_stats
            for name in _summed_by_name(type(stats)):  # the fields both declare, added in place
                value = getattr(stats, name)
                if isinstance(value, Counter):
                    getattr(counts, name).update(value)
                elif value:
                    setattr(counts, name, getattr(counts, name) + value)
            counts.supervised_turns += sum(rp.supervised_turns for rp in stats.rows)
        if res.placeholder_only:
            if not res.rows and any(r.reason == reasons.NO_SUPERVISED_TURN for r in res.rejects):
                counts.placeholder_rows += 1
        elif res.empty_think and res.rows:
            counts.empty_think_rows += 1
    return acct


@cache
def _summed_by_name(stats_type: type) -> tuple[str, ...]:
    """The row step's per-row counters (`render.ConversationPlan`) named like a field here:
    summed into it by name, so a new counter is declared in the two places it means something."""
    ours = {f.name for f in fields(SourceCounts)}
    return tuple(f.name for f in fields(stats_type) if f.name in ours)


def _served_prompts_agree(row: EncodedRow, plan: RowPlan, item: Normalized) -> EncodedRow | Reject:
    """The row, or a `reasons.SERVER_PROMPT_DIFFERS` reject when the generation server's own
    prompt tokens for one of its supervised answers are not the row's tokens before it."""
    prompts = server_prompt_ids(item) if isinstance(item, Conversation) else {}
    if not prompts:
        return row
    turns = [plan.turn_of_segment[i] for i, (_, sup) in enumerate(plan.segments) if sup]
    problem = server_prompt_problem(row.input_ids, row.loss_mask, turns, prompts)
    if problem is None:
        return row
    return Reject(row.source, row.row, row.id, reasons.SERVER_PROMPT_DIFFERS, problem)
