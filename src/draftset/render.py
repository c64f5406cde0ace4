"""Render & mask: which characters of the rendered chat the target model generates.

The contract (docs/semantics.md): for assistant turn j, P = render(turns 0..j-1, generation
prompt) and F = render(turns 0..j). When F starts with P, the model's generation G is F after P
up to and including the first end-of-turn token. Everything else is context. This works for any
template, with or without ``{% generation %}`` tags, because it only asks the template itself
what a server would send and what the model would then write.

The output of this stage is a `RowPlan`: the row's text as alternating segments, each marked
supervised or not. Encoding (encode.py) tokenizes each segment separately, so no token ever
straddles a prompt/generation edge, exactly as at serving time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from draftset import reasons
from draftset.records import Conversation, Message, Reject
from draftset.template import ChatTemplate

TurnMode = Literal["all", "last", "each"]


@dataclass(slots=True)
class RowPlan:
    """One output row before tokenization: text segments and whether each is supervised."""

    id: str
    source: str
    row: int
    segments: list[tuple[str, bool]]
    # every supervised segment ends with an end-of-turn token by construction
    supervised_turns: int = 0


@dataclass(slots=True)
class ConversationPlan:
    """What render & mask made of one conversation (one or more rows, or row-level rejects)."""

    rows: list[RowPlan] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    context_turns: Counter[str] = field(default_factory=Counter)
    trailing_turns_trimmed: int = 0


@dataclass(slots=True)
class _Turn:
    """Where assistant message j starts in renders of the conversation and what it generates."""

    index: int  # position in messages
    prompt: str | None = None  # P: render(0..j-1, generation prompt)
    generation: str | None = None  # G
    reason: str | None = None  # set when the turn cannot be supervised
    message: str = ""


def _is_placeholder_turn(msg: Message, placeholders: tuple[str, ...]) -> bool:
    return (
        not msg.get("tool_calls")
        and not msg.get("reasoning_content")
        and reasons.is_placeholder(msg.get("content") or "", placeholders)
    )


def _template_reject(conv: Conversation, exc: Exception, row_id: str | None = None) -> Reject:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Reject(conv.source, conv.row, row_id or conv.id, reasons.TEMPLATE_ERROR, text)


def derive_turn(
    tmpl: ChatTemplate,
    messages: list[Message],
    tools: list | None,
    j: int,
    full_render: str | None = None,
) -> _Turn:
    """P and G for assistant message j (raises on template errors)."""
    turn = _Turn(index=j)
    prompt = tmpl.render(messages[:j], tools, add_generation_prompt=True)
    full = full_render if full_render is not None else tmpl.render(messages[: j + 1], tools)
    turn.prompt = prompt
    if not full.startswith(prompt):
        turn.reason = reasons.TURN_NOT_GENERABLE
        turn.message = "render(0..j) does not start with the generation prompt"
        return turn
    end = tmpl.find_end_of_turn(full, len(prompt))
    if end < 0:
        turn.reason = reasons.TURN_NO_END_OF_TURN
        turn.message = "no end-of-turn token after the generation prompt"
        return turn
    turn.generation = full[len(prompt) : end]
    return turn


def segments_for(text: str, spans: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """Split ``text`` into (piece, supervised) segments at sorted, disjoint ``spans``."""
    out: list[tuple[str, bool]] = []
    pos = 0
    for start, end in spans:
        if start > pos:
            out.append((text[pos:start], False))
        out.append((text[start:end], True))
        pos = end
    if pos < len(text):
        out.append((text[pos:], False))
    return out


def plan_conversation(
    tmpl: ChatTemplate,
    conv: Conversation,
    mode: TurnMode = "all",
    placeholders: tuple[str, ...] = reasons.DEFAULT_PLACEHOLDERS,
) -> ConversationPlan:
    """Reference path: derive the supervised spans of one conversation from the template."""
    plan = ConversationPlan()
    messages = conv.messages
    assistant_idx = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    last = assistant_idx[-1]
    if last + 1 < len(messages):  # turns after the last answer teach nothing: drop, but count
        plan.trailing_turns_trimmed = len(messages) - last - 1
        messages = messages[: last + 1]
    if mode == "each":
        _plan_each(tmpl, conv, messages, assistant_idx, placeholders, plan)
    else:
        _plan_whole(tmpl, conv, messages, assistant_idx, mode, placeholders, plan)
    return plan


def _plan_whole(
    tmpl: ChatTemplate,
    conv: Conversation,
    messages: list[Message],
    assistant_idx: list[int],
    mode: TurnMode,
    placeholders: tuple[str, ...],
    plan: ConversationPlan,
) -> None:
    """`all` and `last`: one row, the full render, supervised where it equals the generation."""
    try:
        full = tmpl.render(messages, conv.tools)
        spans: list[tuple[int, int]] = []
        for j in assistant_idx:
            if mode == "last" and j != assistant_idx[-1]:
                plan.context_turns[reasons.TURN_NOT_LAST] += 1
                continue
            if _is_placeholder_turn(messages[j], placeholders):
                plan.context_turns[reasons.TURN_PLACEHOLDER] += 1
                continue
            is_last = j == assistant_idx[-1]
            turn = derive_turn(tmpl, messages, conv.tools, j, full if is_last else None)
            if turn.reason is None:
                assert turn.prompt is not None and turn.generation is not None
                start = len(turn.prompt)
                if full.startswith(turn.prompt) and full.startswith(turn.generation, start):
                    spans.append((start, start + len(turn.generation)))
                    continue
                turn.reason = reasons.TURN_HISTORY_RENDER_DIFFERS
            plan.context_turns[turn.reason] += 1
    except Exception as exc:  # the template's own error message is the reason
        plan.rejects.append(_template_reject(conv, exc))
        return
    if not spans:
        why = ", ".join(f"{k}={v}" for k, v in sorted(plan.context_turns.items()))
        plan.rejects.append(
            Reject(
                conv.source,
                conv.row,
                conv.id,
                reasons.NO_SUPERVISED_TURN,
                f"no assistant turn can be supervised ({why})",
            )
        )
        return
    plan.rows.append(
        RowPlan(conv.id, conv.source, conv.row, segments_for(full, spans), len(spans))
    )


def _plan_each(
    tmpl: ChatTemplate,
    conv: Conversation,
    messages: list[Message],
    assistant_idx: list[int],
    placeholders: tuple[str, ...],
    plan: ConversationPlan,
) -> None:
    """`each`: one row per assistant turn j, rendered as the server sees it at that step."""
    for k, j in enumerate(assistant_idx):
        row_id = f"{conv.id}#{k}"
        if _is_placeholder_turn(messages[j], placeholders):
            plan.context_turns[reasons.TURN_PLACEHOLDER] += 1
            continue
        try:
            full = tmpl.render(messages[: j + 1], conv.tools)
            turn = derive_turn(tmpl, messages, conv.tools, j, full)
        except Exception as exc:
            plan.rejects.append(_template_reject(conv, exc, row_id))
            continue
        if turn.reason is not None:
            plan.context_turns[turn.reason] += 1
            continue
        assert turn.prompt is not None and turn.generation is not None
        start = len(turn.prompt)
        spans = [(start, start + len(turn.generation))]
        plan.rows.append(RowPlan(row_id, conv.source, conv.row, segments_for(full, spans), 1))
    if not plan.rows and not plan.rejects:
        why = ", ".join(f"{k}={v}" for k, v in sorted(plan.context_turns.items()))
        plan.rejects.append(
            Reject(
                conv.source,
                conv.row,
                conv.id,
                reasons.NO_SUPERVISED_TURN,
                f"no assistant turn can be supervised ({why})",
            )
        )
