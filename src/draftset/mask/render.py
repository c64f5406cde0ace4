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

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from draftset.core import reasons, rules
from draftset.core.records import Conversation, Message, Reject
from draftset.mask.ambient import clock_kwargs, valid_now
from draftset.mask.reads import served_reads
from draftset.mask.template import Renderer, as_content_parts

TurnMode = Literal["all", "last", "each"]
NEXT_TURN_PROBE = "DRAFTSET_NEXT_TURN_PROBE_5d2c"


@dataclass(slots=True)
class RowPlan:
    """One output row before tokenization: text segments and whether each is supervised."""

    id: str
    source: str
    row: int
    segments: list[tuple[str, bool]]
    # every supervised segment ends with an end-of-turn token by construction
    supervised_turns: int = 0
    # segment index -> token ids the server returned for that generation (used as they are)
    server_ids: dict[int, list[int]] = field(default_factory=dict)
    # segment index -> index of the assistant message it is the generation of
    turn_of_segment: dict[int, int] = field(default_factory=dict)
    # turns made context at encoding: the row's tokens before them are not the served
    # prompt's (`encode.encode_plans`, reason `history_tokens_differ`)
    tokens_differ: int = 0

    def demote(self, seg_index: int) -> None:
        """Make supervised segment ``seg_index`` context: it joins its neighbouring context
        segments, which are then tokenized as one piece (as a server tokenizes a prompt)."""
        old_turns, old_ids = self.turn_of_segment, self.server_ids
        flags = [sup and i != seg_index for i, (_, sup) in enumerate(self.segments)]
        segments: list[tuple[str, bool]] = []
        self.turn_of_segment, self.server_ids = {}, {}
        for i, ((text, _), sup) in enumerate(zip(self.segments, flags, strict=True)):
            if not sup and segments and not segments[-1][1]:
                segments[-1] = (segments[-1][0] + text, False)
                continue
            if sup:
                self.turn_of_segment[len(segments)] = old_turns[i]
                if i in old_ids:
                    self.server_ids[len(segments)] = old_ids[i]
            segments.append((text, sup))
        self.segments = segments
        self.supervised_turns -= 1
        self.tokens_differ += 1


@dataclass(slots=True)
class ConversationPlan:
    """What render & mask made of one conversation (one or more rows, or row-level rejects)."""

    rows: list[RowPlan] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    context_turns: Counter[str] = field(default_factory=Counter)
    trailing_turns_trimmed: int = 0
    # templates with {% generation %} tags: does what they mark equal the derived spans?
    generation_tags_agree: int = 0
    generation_tags_disagree: int = 0
    reasoning_not_rendered: int = 0  # supervised answers whose recorded reasoning G lacks
    server_ids_used: int = 0  # generations whose tokens came from the server
    server_ids_mismatch: int = 0  # server ids that did not decode to the generation: re-encoded


@dataclass(slots=True)
class _Turn:
    """Where assistant message j starts in renders of the conversation and what it generates."""

    index: int  # position in messages
    prompt: str | None = None  # P: render(0..j-1, generation prompt)
    generation: str | None = None  # G
    reason: str | None = None  # set when the turn cannot be supervised
    message: str = ""
    # the row's text up to the end of G when G runs past render(0..j): the template writes the
    # stop only with the next turn (GLM's <|user|>), the model emits it after its answer
    continued: str | None = None


def _drops_reject(conv: Conversation, j: int, what: str, row_id: str | None = None) -> Reject:
    return Reject(
        conv.source,
        conv.row,
        row_id or conv.id,
        reasons.TEMPLATE_DROPS_CONTENT,
        f"the template's render of assistant message {j} does not contain {what}",
    )


def _template_reject(conv: Conversation, exc: Exception, row_id: str | None = None) -> Reject:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Reject(conv.source, conv.row, row_id or conv.id, reasons.TEMPLATE_ERROR, text)


def row_template_kwargs(conv: Conversation) -> dict | None:
    """Template options a row was generated with (recorded by `draftset generate`), and the
    instant its prompts were rendered at (``metadata.template_now``, mask/ambient.py)."""
    recorded = conv.meta.get("metadata")
    if not isinstance(recorded, dict):
        return None
    kwargs = recorded.get("chat_template_kwargs")
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    now = valid_now(recorded.get("template_now"))
    if now is not None:
        kwargs = {**kwargs, **clock_kwargs(now)}
    return kwargs or None


def server_completion_ids(conv: Conversation) -> dict[int, list[int]]:
    """message index -> completion token ids, when the generation server returned them."""
    return _server_turn_ids(conv, "completion")


def server_prompt_ids(conv: Conversation) -> dict[int, list[int]]:
    """message index -> the prompt token ids the generation server answered that message
    after, when it returned them (`generate --return-token-ids`)."""
    return _server_turn_ids(conv, "prompt")


def _server_turn_ids(conv: Conversation, key: str) -> dict[int, list[int]]:
    recorded = conv.meta.get("metadata")
    turns = (recorded.get("token_ids") or {}).get("turns") if isinstance(recorded, dict) else None
    out: dict[int, list[int]] = {}
    for t in turns if isinstance(turns, list) else []:
        ids = t.get(key) if isinstance(t, dict) else None
        if (
            isinstance(t.get("message"), int)
            and isinstance(ids, list)
            and all(type(i) is int for i in ids)
        ):
            out[t["message"]] = ids
    return out


def server_prompt_problem(
    input_ids: Any, loss_mask: Any, turn_of_run: list[int], prompts: dict[int, list[int]]
) -> str | None:
    """Why a row cannot train its answers, as one line, when the generation server's prompt
    tokens for a supervised answer are not the row's tokens before it (the server rendered
    another prompt and the answer was generated after that one); None when they are, or the
    server returned none. ``turn_of_run``: the message index of each supervised run, in order."""
    mask = np.asarray(loss_mask, dtype=np.int8)
    starts = np.flatnonzero(np.diff(np.concatenate([[0], mask])) == 1).tolist()
    for start, j in zip(starts, turn_of_run, strict=False):
        want = prompts.get(j)
        if want is None:
            continue
        have = [int(x) for x in input_ids[:start]]
        if have == want:
            continue
        at = next((k for k, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), None)
        at = min(len(have), len(want)) if at is None else at
        return (
            f"the generation server's prompt for assistant message {j} is not this row's tokens"
            f" before it: at token {at}, server {want[at : at + 4]} vs row {have[at : at + 4]}"
            f" ({len(want)} vs {len(have)} tokens); it rendered another prompt (template,"
            " template kwargs or tokenizer differ from the build's)"
        )
    return None


SERVER_EOS = "eos"
"""`server_stop_tokens`' value for an answer the tokenizer's EOS ended (vLLM's null)."""


def server_stop_tokens(conv: Conversation) -> dict[int, int | str]:
    """message index -> the id of the stop token that ended that answer, as `generate` recorded
    it (``metadata.stop_tokens``: vLLM's ``stop_reason``, SGLang's ``matched_stop``, given when a
    token of the model's stop list other than the tokenizer's EOS ended it), or `SERVER_EOS`
    where vLLM said the EOS ended it (``{"eos": true}``)."""
    recorded = conv.meta.get("metadata")
    stops = recorded.get("stop_tokens") if isinstance(recorded, dict) else None
    out: dict[int, int | str] = {}
    for s in stops if isinstance(stops, list) else []:
        if not isinstance(s, dict) or type(s.get("message")) is not int:
            continue
        if type(s.get("id")) is int:
            out[s["message"]] = s["id"]
        elif s.get("eos") is True:
            out[s["message"]] = SERVER_EOS
    return out


def other_stop(tmpl: Renderer, stops: dict[int, int | str], j: int, generation: str) -> bool:
    """Whether answer j ended on another stop token than the one its generation ends with
    (G ends with the template's stop by construction; ``stops``: `server_stop_tokens`; an id
    this tokenizer lacks is another; the EOS is the tokenizer's, unknown: not judged): then
    the template's token was never generated there, and the turn is context
    (`reasons.TURN_OTHER_STOP`; verify holds the set to the same rule)."""
    stop = stops.get(j)
    if stop is None:
        return False
    if stop == SERVER_EOS:
        text = tmpl.eos_token
        if text is None:
            return False
    else:
        text = tmpl.backend.id_to_token(stop)
    return text is None or not generation.endswith(text)


def server_text_differs(
    tmpl: Renderer,
    server: tuple[dict[int, list[int]], dict[int, list[int]]],
    j: int,
    prompt: str,
    generation: str,
) -> bool:
    """Whether the generation server's completion ids for answer j (after prompt P) spell other
    text than the generation G the template renders for it: the server's parsers returned a
    message the template does not write back as the model wrote it (vLLM 0.33's hermes parser
    gives a Qwen3 call written `Checking.\\n<tool_call>` the content "\\n\\nChecking.\\n",
    which Qwen3's template renders `Checking.\\n\\n<tool_call>`), so G
    was never generated there and the turn is context (`reasons.TURN_SERVER_TEXT_DIFFERS`;
    verify holds the set to the same rule). Not when G's own tokens decode to the same text
    (a lossy decode is no evidence), when the server only left the end-of-turn token off or
    returned more after it (never generated: the model stopped there), or when the ids are
    none or not this tokenizer's (they spell nothing: G is encoded from text). ``server``: the
    row's `server_completion_ids` and `server_prompt_ids`; an answer the server gave after
    another prompt than P is left to `server_prompt_problem`, which rejects the row naming it."""
    completions, prompts = server
    ids = completions.get(j)
    if not ids or not in_vocabulary(ids, tmpl.backend):
        return False
    asked = prompts.get(j)
    if asked is not None and (
        not in_vocabulary(asked, tmpl.backend) or tmpl.decode(asked) != prompt
    ):
        return False
    got = tmpl.decode(ids)
    mine = tmpl.decode(tmpl.backend.encode(generation, add_special_tokens=False).ids)
    if got in (generation, mine):
        return False
    if tmpl.find_end_of_turn(generation) != len(generation):
        return True
    if got.startswith(generation) or got.startswith(mine):  # ids past the model's stop
        return False
    if mine.startswith(got):
        tail = tmpl.backend.encode(mine[len(got) :], add_special_tokens=False).ids
        return not (len(tail) == 1 and tail[0] in tmpl.eot_ids)
    return True


@dataclass(frozen=True, slots=True)
class TurnEvidence:
    """What a row holds beside its messages that can make a derived answer context: the
    placeholder answers, the stop tokens `generate` recorded (`server_stop_tokens`), and the
    server's completion and prompt ids (`server_completion_ids`, `server_prompt_ids`)."""

    placeholders: tuple[str, ...]
    stops: dict[int, int | str]
    server: tuple[dict[int, list[int]], dict[int, list[int]]]

    @classmethod
    def of(cls, conv: Conversation, placeholders: tuple[str, ...]) -> TurnEvidence:
        server = (server_completion_ids(conv), server_prompt_ids(conv))
        return cls(placeholders, server_stop_tokens(conv), server)


def turn_context_reason(
    tmpl: Renderer, evidence: TurnEvidence, original: Message, j: int, prompt: str, generation: str
) -> str | None:
    """The reason answer j is context once its prompt P and generation G are known (None: none
    of these rules holds): a placeholder as rendered, another stop token, server text that
    differs, checked in that order. The one place a rule of this kind is added, so build's
    planners and verify's own derivation apply the same list. ``original``: the normalized
    message j."""
    if rules.placeholder_as_rendered(original, generation, evidence.placeholders):
        return reasons.TURN_PLACEHOLDER
    if other_stop(tmpl, evidence.stops, j, generation):
        return reasons.TURN_OTHER_STOP
    if server_text_differs(tmpl, evidence.server, j, prompt, generation):
        return reasons.TURN_SERVER_TEXT_DIFFERS
    return None


def in_vocabulary(ids: list[int], backend: Any) -> bool:
    """Whether every id is one of the tokenizer's (``backend``: a `tokenizers.Tokenizer`).
    A server's ids outside it spell nothing: decode skips an unknown id (so ``[vocab + 5,
    *ids]`` decoded as ``ids`` do) and raises on a negative one."""
    size = backend.get_vocab_size(with_added_tokens=True)
    return all(0 <= i < size for i in ids)


def derive_turn(
    tmpl: Renderer,
    messages: list[Message],
    tools: list | None,
    j: int,
    full_render: str | None = None,
    row_kwargs: dict | None = None,
) -> _Turn:
    """P and G for assistant message j (raises on template errors)."""
    turn = _Turn(index=j)
    prompt = tmpl.render(messages[:j], tools, add_generation_prompt=True, row_kwargs=row_kwargs)
    full = (
        full_render
        if full_render is not None
        else tmpl.render(messages[: j + 1], tools, row_kwargs=row_kwargs)
    )
    turn.prompt = prompt
    if not full.startswith(prompt):
        turn.reason = reasons.TURN_NOT_GENERABLE
        turn.message = "render(0..j) does not start with the generation prompt"
        return turn
    end = tmpl.find_end_of_turn(full, len(prompt))
    if end < 0:
        tail = stop_after_answer(tmpl, messages, tools, j, prompt, full, row_kwargs)
        if tail is None:
            turn.reason = reasons.TURN_NO_END_OF_TURN
            turn.message = "no end-of-turn token after the generation prompt"
            return turn
        turn.continued = full + tail
        turn.generation = turn.continued[len(prompt) :]
        return turn
    turn.generation = full[len(prompt) : end]
    return turn


def next_turn_probe(messages: list[Message], j: int, content_parts: bool) -> Message:
    """The message that follows answer j: the real next one (its text replaced by a probe),
    else a tool result after an answer that calls tools, a user message after any other."""
    if j + 1 < len(messages):
        nxt: Message = {**messages[j + 1], "content": NEXT_TURN_PROBE}
    elif messages[j].get("tool_calls"):
        call = messages[j]["tool_calls"][0]
        nxt = {"role": "tool", "content": NEXT_TURN_PROBE, "name": call["function"]["name"]}
        if "id" in call:
            nxt["tool_call_id"] = call["id"]
    else:
        nxt = {"role": "user", "content": NEXT_TURN_PROBE}
    return as_content_parts([nxt])[0] if content_parts else nxt


def stop_after_answer(
    tmpl: Renderer,
    messages: list[Message],
    tools: list | None,
    j: int,
    prompt: str,
    full: str,
    row_kwargs: dict | None,
) -> str | None:
    """What the model writes after answer j up to its stop when render(0..j) has no stop token
    (docs/semantics.md): the text the template writes between the end of the answer and the
    next message, up to and including the first stop token there; None when there is none.

    The answer's end is located in the continued render by the longest end of the answer's
    own render that occurs there before the next message (history renders may drop a turn's
    reasoning, never the end of its answer).
    """
    nxt = next_turn_probe(messages, j, tmpl.content_parts)
    try:
        cont = tmpl.render([*messages[: j + 1], nxt], tools, row_kwargs=row_kwargs)
    except Exception:  # the template refuses the continuation: no stop to read
        return None
    limit = cont.find(NEXT_TURN_PROBE)
    answer = full[len(prompt) :]
    if limit < 0 or not answer:
        return None
    lo, hi = 0, len(answer)  # longest suffix of the answer found before the next message
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cont.find(answer[-mid:], 0, limit) >= 0:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return None
    start = cont.rfind(answer[-lo:], 0, limit) + lo
    end = tmpl.find_end_of_turn(cont[:limit], start)
    return cont[start:end] if end > start else None


def make_row(
    conv: Conversation, row_id: str, text: str, spans: list[tuple[int, int, int]]
) -> RowPlan:
    """Split ``text`` into (piece, supervised) segments at sorted, disjoint ``spans``.

    Each span is (start, end, message index); the row remembers which segment is which turn.
    """
    row = RowPlan(row_id, conv.source, conv.row, [], len(spans))
    pos = 0
    for start, end, message_index in spans:
        if start > pos:
            row.segments.append((text[pos:start], False))
        row.turn_of_segment[len(row.segments)] = message_index
        row.segments.append((text[start:end], True))
        pos = end
    if pos < len(text):
        row.segments.append((text[pos:], False))
    return row


def plan_conversation(
    tmpl: Renderer,
    conv: Conversation,
    mode: TurnMode = "all",
    placeholders: tuple[str, ...] = rules.DEFAULT_PLACEHOLDERS,
) -> ConversationPlan:
    """Reference path: derive the supervised spans of one conversation from the template."""
    plan = ConversationPlan()
    messages = conv.messages
    assistant_idx = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    last = assistant_idx[-1]
    if last + 1 < len(messages):  # turns after the last answer teach nothing: drop, but count
        plan.trailing_turns_trimmed = len(messages) - last - 1
        messages = messages[: last + 1]
    leak = rules.special_token_in_answer(messages, _special_pattern(tmpl))
    if leak is not None:  # text the model never writes as text: reject, never guess
        msg = rules.special_token_in_answer_message(leak)
        plan.rejects.append(
            Reject(conv.source, conv.row, conv.id, reasons.SPECIAL_TOKEN_IN_ANSWER, msg)
        )
        return plan
    harmony, engine = tmpl.harmony is not None, tmpl.serving_engine
    problem = rules.unservable(
        messages, conv.meta, tmpl.template_text, engine, harmony, _special_pattern(tmpl), conv.tools
    )
    if problem is not None:
        plan.rejects.append(
            Reject(conv.source, conv.row, conv.id, reasons.UNSUPPORTED_CONTENT, problem)
        )
        return plan
    # what the template is given: system text, inline reasoning, content shape and roles as
    # the serving engine hands them over and the template reads them
    shape = (tmpl.content_parts, tmpl.renders_reasoning, tmpl.string_arguments, tmpl.part_lists)
    shown = served_reads(messages, conv.meta, shape, tmpl.template_text, engine, harmony)
    if mode == "each":
        _plan_each(tmpl, conv, shown, messages, assistant_idx, placeholders, plan)
    else:
        _plan_whole(tmpl, conv, shown, messages, assistant_idx, mode, placeholders, plan)
    server = server_completion_ids(conv)
    if server:
        _attach_server_ids(tmpl, plan, server)
    return plan


def _special_pattern(tmpl: Renderer) -> re.Pattern[str] | None:
    """`rules.special_token_pattern` of the tokenizer's special tokens, once per renderer."""
    try:
        return tmpl._special_pattern  # type: ignore[attr-defined,no-any-return]
    except AttributeError:
        added = tmpl.backend.get_added_tokens_decoder().values()
        pattern = rules.special_token_pattern({t.content for t in added if t.special})
        tmpl._special_pattern = pattern  # type: ignore[attr-defined]
        return pattern


def _attach_server_ids(
    tmpl: Renderer, plan: ConversationPlan, server: dict[int, list[int]]
) -> None:
    """Use the server's own completion tokens for a generation when they spell exactly it.

    The server's ids may stop before the end-of-turn token (some servers drop the stop token):
    then it is appended. Ids that decode to anything else are not trusted: the generation is
    re-encoded from text and the mismatch counted.
    """
    for row in plan.rows:
        for seg_index, message_index in row.turn_of_segment.items():
            ids = server.get(message_index)
            if ids is None:
                continue
            text = row.segments[seg_index][0]
            if not in_vocabulary(ids, tmpl.backend):  # spells nothing: encoded from the text
                plan.server_ids_mismatch += 1
                continue
            decoded = tmpl.decode(ids)
            ends = tmpl.find_end_of_turn(text) == len(text)
            # equal text is not enough: a stop token spelled as text is no model's end
            if decoded == text and (not ends or (ids and ids[-1] in tmpl.eot_ids)):
                row.server_ids[seg_index] = list(ids)
            elif ends and text.startswith(decoded):
                tail = tmpl.backend.encode(text[len(decoded) :], add_special_tokens=False).ids
                if len(tail) == 1 and tail[0] in tmpl.eot_ids:
                    row.server_ids[seg_index] = [*ids, tail[0]]
            if seg_index in row.server_ids:
                plan.server_ids_used += 1
            else:
                plan.server_ids_mismatch += 1


def _plan_whole(
    tmpl: Renderer,
    conv: Conversation,
    messages: list[Message],
    originals: list[Message],
    assistant_idx: list[int],
    mode: TurnMode,
    placeholders: tuple[str, ...],
    plan: ConversationPlan,
) -> None:
    """`all` and `last`: one row, the full render, supervised where it equals the generation.

    ``messages`` are rendered; ``originals`` (the normalized messages) decide placeholders and
    cut-off answers and hold the text each generation must contain.
    """
    row_kwargs = row_template_kwargs(conv)
    marks = rules.row_marks(originals, conv.meta)
    evidence = TurnEvidence.of(conv, placeholders)
    try:
        full = tmpl.render(messages, conv.tools, row_kwargs=row_kwargs)
        spans: list[tuple[int, int, int]] = []
        for j in assistant_idx:
            if mode == "last" and j != assistant_idx[-1]:
                plan.context_turns[reasons.TURN_NOT_LAST] += 1
                continue
            if j == 0:  # nothing before it: no prompt it could have been generated from
                plan.context_turns[reasons.TURN_NO_PROMPT] += 1
                continue
            why = rules.never_supervised(originals, j, marks, placeholders)
            if why is not None:
                plan.context_turns[why] += 1
                continue
            is_last = j == assistant_idx[-1]
            turn = derive_turn(tmpl, messages, conv.tools, j, full if is_last else None, row_kwargs)
            if turn.reason is None:
                assert turn.prompt is not None and turn.generation is not None
                if is_last and turn.continued is not None:
                    full = turn.continued  # the row ends with the stop the model emits
                start = len(turn.prompt)
                if full.startswith(turn.prompt) and full.startswith(turn.generation, start):
                    parts = rules.answer_parts(conv.meta, j)
                    what = rules.dropped_content(originals[j], turn.generation, parts)
                    if what is not None:
                        plan.rejects.append(_drops_reject(conv, j, what))
                        return
                    why = turn_context_reason(
                        tmpl, evidence, originals[j], j, turn.prompt, turn.generation
                    )
                    if why is not None:
                        plan.context_turns[why] += 1
                        continue
                    if spans and spans[-1][1] == start:  # one run would hold two answers
                        plan.context_turns[reasons.TURN_FOLLOWS_ANSWER] += 1
                        continue
                    if rules.reasoning_not_rendered(originals[j], turn.generation):
                        plan.reasoning_not_rendered += 1
                    spans.append((start, start + len(turn.generation), j))
                    continue
                turn.reason = reasons.TURN_HISTORY_RENDER_DIFFERS
            plan.context_turns[turn.reason] += 1
    except Exception as exc:  # the template's own error message is the reason
        plan.rejects.append(_template_reject(conv, exc))
        return
    if not spans:
        msg = rules.no_supervised_turn_message(plan.context_turns)
        plan.rejects.append(Reject(conv.source, conv.row, conv.id, reasons.NO_SUPERVISED_TURN, msg))
        return
    plan.rows.append(make_row(conv, conv.id, full, spans))
    if mode == "all" and tmpl.has_generation_tags:
        _cross_check_tags(tmpl, conv, messages, full, spans, row_kwargs, plan)


def _cross_check_tags(
    tmpl: Renderer,
    conv: Conversation,
    messages: list[Message],
    full: str,
    spans: list[tuple[int, int, int]],
    row_kwargs: dict | None,
    plan: ConversationPlan,
) -> None:
    """Count whether the template's own tags mark exactly the spans the prefix rule derived.

    Tags are written by hand and often cover a separator after the end-of-turn token, or
    history turns the template renders differently: the prefix rule stays the authority, and
    the manifest says how often the tags agree.
    """
    try:
        tagged_text, tagged = tmpl.generation_tag_spans(messages, conv.tools, row_kwargs)
    except Exception:
        plan.generation_tags_disagree += 1
        return
    derived = [(a, b) for a, b, _ in spans]
    if tagged_text == full and tagged == derived:
        plan.generation_tags_agree += 1
    else:
        plan.generation_tags_disagree += 1


def _plan_each(
    tmpl: Renderer,
    conv: Conversation,
    messages: list[Message],
    originals: list[Message],
    assistant_idx: list[int],
    placeholders: tuple[str, ...],
    plan: ConversationPlan,
) -> None:
    """`each`: one row per assistant turn j, rendered as the server sees it at that step."""
    row_kwargs = row_template_kwargs(conv)
    marks = rules.row_marks(originals, conv.meta)
    evidence = TurnEvidence.of(conv, placeholders)
    for k, j in enumerate(assistant_idx):
        row_id = f"{conv.id}#{k}"
        if j == 0:
            plan.context_turns[reasons.TURN_NO_PROMPT] += 1
            continue
        why = rules.never_supervised(originals, j, marks, placeholders)
        if why is not None:
            plan.context_turns[why] += 1
            continue
        try:
            full = tmpl.render(messages[: j + 1], conv.tools, row_kwargs=row_kwargs)
            turn = derive_turn(tmpl, messages, conv.tools, j, full, row_kwargs)
        except Exception as exc:
            plan.rejects.append(_template_reject(conv, exc, row_id))
            continue
        if turn.reason is not None:
            plan.context_turns[turn.reason] += 1
            continue
        assert turn.prompt is not None and turn.generation is not None
        parts = rules.answer_parts(conv.meta, j)
        what = rules.dropped_content(originals[j], turn.generation, parts)
        if what is not None:
            plan.rejects.append(_drops_reject(conv, j, what, row_id))
            continue
        why = turn_context_reason(tmpl, evidence, originals[j], j, turn.prompt, turn.generation)
        if why is not None:
            plan.context_turns[why] += 1
            continue
        if rules.reasoning_not_rendered(originals[j], turn.generation):
            plan.reasoning_not_rendered += 1
        start = len(turn.prompt)
        text = full if turn.continued is None else turn.continued
        plan.rows.append(make_row(conv, row_id, text, [(start, start + len(turn.generation), j)]))
    if not plan.rows and not plan.rejects:
        msg = rules.no_supervised_turn_message(plan.context_turns)
        plan.rejects.append(Reject(conv.source, conv.row, conv.id, reasons.NO_SUPERVISED_TURN, msg))
