"""The mask rules build and verify share, each decided once: which assistant answer is never
supervised whatever the template renders (placeholders, copies of the prompt, answers the row
cuts off or weights 0), what a render dropped of an answer, which rows the serving engine would
not render as given, and the reject messages both write. The codes they give are
`core/reasons.py`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from draftset.core import records  # meta keys (not reason codes: kept out of this namespace)
from draftset.core.reasons import (
    TURN_PLACEHOLDER,
    TURN_PROMPT_COPY,
    TURN_TRUNCATED,
    TURN_WEIGHT_ZERO,
)

DEFAULT_PLACEHOLDERS: tuple[str, ...] = ("OK.", "OK")
"""Answers never supervised (besides empty / whitespace-only ones, always placeholders)."""


def is_placeholder(text: str, placeholders: tuple[str, ...] = DEFAULT_PLACEHOLDERS) -> bool:
    """True for an answer that is empty, whitespace only, or a known dummy answer."""
    stripped = text.strip()
    return stripped == "" or stripped in placeholders


def answer_text(msg: dict) -> str:
    """The answer a turn gives, without template markup: its reasoning and content, each
    stripped, joined by a newline (whitespace-only reasoning is no reasoning)."""
    parts = [str(msg.get("reasoning_content") or "").strip(), str(msg.get("content") or "").strip()]
    return "\n".join(x for x in parts if x)


def is_placeholder_answer(msg: dict, placeholders: tuple[str, ...] = DEFAULT_PLACEHOLDERS) -> bool:
    """The one definition build and verify share: an assistant turn without tool calls whose
    answer text (`answer_text`) is empty or a known dummy answer is never supervised."""
    return not msg.get("tool_calls") and is_placeholder(answer_text(msg), placeholders)


def cut_off_answers(messages: list[dict], meta: dict) -> frozenset[int]:
    """The one rule build and verify share for `answer_truncated`: the assistant messages known
    to be cut off before the model ended them. An unclosed ``<think>`` (the normalizer's
    `REASONING_UNTERMINATED`), and the last answer when the row's ``metadata`` says
    ``truncated`` (`generate --keep-length`: it hit max_tokens) or ``reasoning_unterminated``
    (a preset's trace cut before its end marker). The template would close such an answer with
    markup and an end-of-turn token the model never generated, so it is never supervised."""
    cut = {i for i in meta.get(records.REASONING_UNTERMINATED) or () if isinstance(i, int)}
    recorded = meta.get("metadata")
    if isinstance(recorded, dict) and (
        recorded.get("truncated") is True or recorded.get(records.REASONING_UNTERMINATED) is True
    ):
        last = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        cut.update(last[-1:])
    return frozenset(cut)


def unservable(
    messages: list[dict],
    meta: dict,
    template_text: str,
    engine: str,
    harmony: bool,
    special: re.Pattern[str] | None = None,
    tools: Any = None,
) -> str | None:
    """The one rule build and verify share for rows the serving engine would not render as
    given (`unsupported_content`), as one line, or None:

    - under harmony (vLLM's gpt-oss), a message other than a tool result that the row gave as
      several text parts with text (``meta["text_parts"]``): harmony tokenizes each part on its
      own, and no text of the row encodes to those tokens (a tool result's parts it joins; an
      empty part adds no tokens, but an answer whose first part is empty it drops whole);
    - under harmony, a special token's text (``special``, `special_token_pattern`) in a
      message or the tools: harmony encodes it as ordinary text, the row's text would encode
      it as the control token (answers are `special_token_in_answer`'s, checked first);
    - under SGLang, a part of type ``input_text``, ``output_text`` or ``refusal``
      (``meta["other_text_parts"]``): its request model has only ``text`` parts and answers
      HTTP 400 (read from its source, not run here);
    - a developer message (``meta["developer"]``) under a template that does not name the
      role, with a system message not first or several of them: vLLM converts it to system and
      merges every system message into one at the start, so the turns would sit elsewhere
      than the row's. Not for `transformers` (it gives the role as sent) nor under harmony
      (its own developer message).
    """
    parts = meta.get(records.PART_TEXTS) or {}
    split = {
        i: why
        for i in parts
        if i < len(messages) and (why := _harmony_parts(messages[i], parts[i])) is not None
    }
    if harmony and split:
        i = min(split)
        return f"message {i} {split[i]}"
    other = {
        i: t for i, t in (meta.get(records.OTHER_TEXT_PARTS) or {}).items() if i < len(messages)
    }
    if harmony and other:
        i = min(other)
        return (
            f"message {i} has a {other[i][0]!r} part: vLLM serves this model with harmony, whose"
            " path reads only a part's 'text' (it would serve it empty); give it as text"
        )
    if engine == "sglang" and not harmony and other:
        i = min(other)
        return (
            f"message {i} has a {other[i][0]!r} part: SGLang's request model takes only 'text'"
            " parts (it answers HTTP 400); give it as text"
        )
    if harmony and special is not None:
        found = _special_text(messages, tools, special)
        if found is not None:
            where, token = found
            return (
                f"{where} holds the text of special token {token!r}: vLLM serves this model"
                " with harmony, which encodes it as ordinary text (no row text encodes to"
                " those tokens)"
            )
    developer = [i for i in meta.get(records.DEVELOPER) or {} if i < len(messages)]
    if harmony or engine != "vllm" or not developer or names_developer(template_text):
        return None  # only vLLM merges (transformers and SGLang 0.5.23 give the role as sent)
    systems = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    if len(systems) < 2 and not any(i > 0 for i in systems):
        return None
    return (
        f"{engine} merges this row's developer and system messages into one at the start for"
        " a template that does not name the developer role: its turns would sit elsewhere than"
        " the row's; give the row one system message, first"
    )


def _special_text(
    messages: list[dict], tools: Any, special: re.Pattern[str]
) -> tuple[str, str] | None:
    """(where, token) of the first special token's text in a message's content (its parts too)
    or the tools' JSON."""
    for i, m in enumerate(messages):
        content = m.get("content")
        texts = content if isinstance(content, list) else [content]
        for t in texts:
            text = t.get("text") if isinstance(t, dict) else t
            hit = special.search(text) if isinstance(text, str) else None
            if hit:
                return f"message {i} ({m.get('role')})", hit.group(0)
    if tools:
        hit = special.search(json.dumps(tools, ensure_ascii=False))
        if hit:
            return "the tools", hit.group(0)
    return None


def names_developer(template_text: str) -> bool:
    """vLLM's test of a template's developer role (``_detect_developer_role_support``): the
    quoted name anywhere in its text."""
    return '"developer"' in template_text or "'developer'" in template_text


def developer_role(template_text: str, engine: str, harmony: bool) -> bool:
    """Whether the template is given a row's developer messages as ``developer``: always by
    transformers and SGLang (0.5.23's Jinja path; read from its source, not run here), by vLLM
    when the template names the role."""
    return not harmony and (engine != "vllm" or names_developer(template_text))


def row_marks(messages: list[dict], meta: dict) -> dict[int, str]:
    """Assistant messages the row itself marks never supervised, by index: cut off
    (`cut_off_answers`) or weighted 0 (the normalizer's `NOT_TRAINED`)."""
    marks = {j: TURN_WEIGHT_ZERO for j in meta.get(records.NOT_TRAINED) or () if isinstance(j, int)}
    marks.update({j: TURN_TRUNCATED for j in cut_off_answers(messages, meta)})
    return marks


def never_supervised(
    messages: list, j: int, marks: Mapping[int, str], placeholders: tuple[str, ...]
) -> str | None:
    """Why assistant message ``j`` is context whatever the template renders (build and verify
    ask this before any render): a placeholder answer, one the row marks (`row_marks`: cut off,
    weighted 0), or one that is its user turn verbatim (verify's leakage check fails such a
    supervised answer)."""
    msg = messages[j]
    if is_placeholder_answer(msg, placeholders):
        return TURN_PLACEHOLDER
    if j in marks:
        return marks[j]
    if copies_its_prompt(messages, j):
        return TURN_PROMPT_COPY
    return None


def may_supervise(
    messages: list[dict], meta: dict, turns: str, placeholders: tuple[str, ...]
) -> bool:
    """Whether some assistant turn ``turns`` would supervise (the last one under ``last``) is not
    ruled out before any render: it has a prompt before it and `never_supervised` gives no
    reason. False: the row step rejects the row `NO_SUPERVISED_TURN` whatever the template
    renders (the rule `mask.render` applies turn by turn, asked of the whole row)."""
    answers = [j for j, m in enumerate(messages) if m.get("role") == "assistant"]
    if turns == "last":
        answers = answers[-1:]
    marks = row_marks(messages, meta)
    return any(j > 0 and not never_supervised(messages, j, marks, placeholders) for j in answers)


def all_padded_answers(item: records.Normalized, placeholders: tuple[str, ...]) -> bool:
    """Every assistant turn is a pad: a placeholder or a copy of its user turn (both never
    supervised, `never_supervised`): `draftset run` asks the target for such a row."""
    if not isinstance(item, records.Conversation):
        return False
    turns = [j for j, m in enumerate(item.messages) if m["role"] == "assistant"]
    return bool(turns) and all(
        is_placeholder_answer(item.messages[j], placeholders) or copies_its_prompt(item.messages, j)
        for j in turns
    )


def reasoning_not_rendered(msg: dict, generation: str) -> bool:
    """A supervised answer's recorded reasoning is not in its generation: the template does not
    render reasoning (Llama-3.x), so only the answer is trained (a note, not a reject: that is
    what the model generates under this template)."""
    reasoning = str(msg.get("reasoning_content") or "").strip()
    return bool(reasoning) and reasoning not in generation


def placeholder_as_rendered(
    msg: dict, generation: str, placeholders: tuple[str, ...] = DEFAULT_PLACEHOLDERS
) -> bool:
    """A placeholder once the template dropped its reasoning ("OK." with recorded reasoning,
    under Llama-3.x): what would be supervised is the dummy answer alone, so it is context
    (`TURN_PLACEHOLDER`), by the rule build and verify share."""
    if not str(msg.get("reasoning_content") or "").strip():
        return False  # nothing to drop: `is_placeholder_answer` judged it before any render
    return is_placeholder_answer(
        {**msg, "reasoning_content": None}, placeholders
    ) and reasoning_not_rendered(msg, generation)


def copies_its_prompt(messages: list, j: int) -> bool:
    """Assistant message ``j``'s text is the last user turn before it, verbatim (stripped)."""
    content = messages[j].get("content")
    text = content.strip() if isinstance(content, str) else ""
    prompt = next((m for m in reversed(messages[:j]) if m.get("role") == "user"), None)
    asked = prompt.get("content") if prompt is not None else None
    return bool(text) and isinstance(asked, str) and text == asked.strip()


def drops_content(msg: dict, generation: str, parts: list[str] | None = None) -> bool:
    """The one rule build and verify share for `template_drops_content`: the template rendered
    this turn without its text or the name of a tool it calls (string content given to a
    template that reads only lists of parts, tool calls given to a template without tool
    support, an all-reasoning answer given to a template that drops reasoning), so supervising
    it would teach markup alone. ``parts``: the texts of an answer the row gave as several
    parts (`answer_parts`), which a template that loops over parts joins its own way
    (Qwen3.6 ``Red.Green.``, Mistral ``Red.\n\nGreen.``): each in order is its text then."""
    return dropped_content(msg, generation, parts) is not None


def dropped_content(msg: dict, generation: str, parts: list[str] | None = None) -> str | None:
    """What `drops_content` finds missing from the generation, in words for the reject line
    (None: nothing)."""
    text = str(msg.get("content") or "").strip()
    if text and text not in generation and not (parts and _in_order(parts, generation)):
        return "its text"
    names = [str((c.get("function") or {}).get("name")) for c in msg.get("tool_calls") or ()]
    reasoning = str(msg.get("reasoning_content") or "").strip()
    # each call writes its name: two calls of one tool need it twice (gpt-oss writes only the
    # first call of a message, where it stops); a name the answer's text or reasoning mentions
    # ("I will use get_weather") is no call, so they are taken out first
    calls = generation
    for said in (text, reasoning, *(p.strip() for p in parts or ())):
        if said:
            calls = calls.replace(said, "", 1)
    for n in dict.fromkeys(names):
        want, got = names.count(n), calls.count(n)
        if got < want:
            if len(names) == 1:
                return f"its call to {n!r}"
            return (
                f"all {len(names)} of its tool calls ({n!r}: {got} of {want}; the generation"
                " ends at its first stop token)"
            )
    # an answer that is all reasoning, under a template that drops reasoning (Llama): the
    # generation would be the end-of-turn token alone
    if not text and not names and reasoning and reasoning not in generation:
        return "its reasoning (the answer is all reasoning)"
    return None


def _harmony_parts(message: dict, texts: list[str]) -> str | None:
    """Why vLLM's harmony path (0.33, `parse_chat_input_to_harmony_message`) serves a message
    of several text parts unlike any text of the row, or None. It tokenizes each part on its
    own, so two parts with text have tokens no row text holds; an empty part adds none (the
    row's text is the other part's). A tool result's parts it joins (`flatten_input_text_content`).
    An answer without calls it keeps only when its *first* part has text: ``["", "Hi."]`` is
    dropped from the history whole, where the row's text is ``Hi.``."""
    if message.get("role") == "tool":
        return None
    full = [t for t in texts if t]
    if len(full) > 1:
        return (
            f"is {len(texts)} text parts: vLLM serves this model with harmony, which tokenizes"
            " each part on its own (no row text holds those tokens); join the parts in the data"
        )
    answer = message.get("role") == "assistant" and not message.get("tool_calls")
    if answer and full and not texts[0]:
        return (
            "is text parts whose first is empty: vLLM serves this model with harmony, which"
            " then drops the answer from the conversation; leave the empty part out"
        )
    return None


def answer_parts(meta: dict, j: int) -> list[str] | None:
    """The texts of message ``j`` when the row gave it as several text parts, else None."""
    parts = (meta.get(records.PART_TEXTS) or {}).get(j)
    return parts if isinstance(parts, list) else None


def _in_order(parts: list[str], text: str) -> bool:
    at = 0
    for part in (p.strip() for p in parts):
        found = text.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


def special_token_pattern(special_texts: frozenset[str] | set[str]) -> re.Pattern[str] | None:
    """One regex over a tokenizer's special tokens' texts (longest first), None without any."""
    texts = sorted((t for t in special_texts if t), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, texts))) if texts else None


def special_token_in_answer(
    messages: list[dict], pattern: re.Pattern[str] | None
) -> tuple[int, str, str] | None:
    """The one rule build and verify share for `special_token_in_answer`: the first assistant
    message whose content, reasoning or tool calls (names, argument keys and values) hold a
    special token's text, as (message index, field, token). Such text tokenizes to the control
    token itself (``<|im_end|>`` -> 151645): a stop token the model emits only to end its turn,
    or markup only the template writes. Its being there means the server leaked it
    (`transformers serve`: ``"Hello world.<|im_end|>"``), and what the model generated around
    it cannot be told from the text; in a call's arguments the turn's supervision would even
    stop there, the rest of the call made context."""
    if pattern is None:
        return None
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        for key, text in answer_strings(msg):
            hit = pattern.search(text)
            if hit:
                return i, key, hit.group(0)
    return None


def special_token_in_answer_message(leak: tuple[int, str, str]) -> str:
    """The `special_token_in_answer` reject's message for `special_token_in_answer`'s find
    (build writes it, verify re-derives it)."""
    j, key, token = leak
    return (
        f"assistant message {j}'s {key} holds the text of special token {token!r}"
        " (a server that leaked its stop token?); it would be encoded as that token"
    )


def no_supervised_turn_message(context_turns: Mapping[str, int]) -> str:
    """The `no_supervised_turn` reject's message: each context-only turn reason's count
    (build writes it, verify re-derives it)."""
    why = ", ".join(f"{k}={v}" for k, v in sorted(context_turns.items()))
    return f"no assistant turn can be supervised ({why})"


def answer_strings(msg: dict) -> Iterator[tuple[str, str]]:
    """(field, text) of every string an assistant message gives the template to render."""
    for key in ("reasoning_content", "content"):
        value = msg.get(key)
        if isinstance(value, str):
            yield key, value
        elif isinstance(value, list):
            for part in value:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield key, part["text"]
    for n, call in enumerate(msg.get("tool_calls") or ()):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            continue
        for field in ("name", "arguments"):
            for text in _strings(fn.get(field)):
                yield f"tool_calls[{n}].function.{field}", text


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
