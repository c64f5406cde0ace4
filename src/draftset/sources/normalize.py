"""Turn one raw row of any supported shape into a normalized outcome.

Every row becomes exactly one of `Conversation`, `PromptOnly`, `PreTokenized` or `Reject`;
`normalize` never raises on bad data (each problem is a `Reject` with a stable code from
`reasons` and a message naming the turn / key at fault). Text is kept byte-for-byte: the only
rewrite is moving a leading ``<think>...</think>`` block of an assistant turn into
``reasoning_content``, and the original content is kept in ``meta["inline_reasoning"]``: a
template that does not render ``reasoning_content`` before the answer gets it back unchanged
(`draftset.mask.reads.as_template_reads`). Data is never run through Jinja. See docs/formats.md.
"""

from __future__ import annotations

import json
import math
from typing import Any

from draftset.core import reasons
from draftset.core.records import (
    ARGUMENTS_TEXT,
    DEVELOPER,
    INLINE_REASONING,
    NO_CONTENT,
    NOT_TRAINED,
    OTHER_TEXT_PARTS,
    PART_TEXTS,
    REASONING_UNTERMINATED,
    Conversation,
    Message,
    Normalized,
    PreTokenized,
    PromptOnly,
    RawRow,
    Reject,
    RowProblem,
)

FORMATS = ("messages", "sharegpt", "alpaca", "prompt", "pretokenized")
"""Row shapes `detect_format` returns and `normalize(fmt=...)` accepts."""

ROLE_TABLE: dict[str, str] = {
    # users
    "user": "user",
    "human": "user",
    # the model
    "assistant": "assistant",
    "gpt": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "chatgpt": "assistant",
    # glaive / LLaMA-Factory: an assistant turn whose value is a JSON tool call
    "function_call": "assistant",
    # instructions; OpenAI's `developer` is a system turn: most chat templates only know system
    "system": "system",
    "developer": "system",
    # tool results
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "ipython": "tool",
    "tool_response": "tool",
}
"""Lowercased source role -> normalized role. A role not listed rejects the row (never guessed)."""

CALL_ROLES = frozenset({"function_call"})
"""Roles whose turn value is a tool call (JSON ``{"name", "arguments"}``), not text."""

ID_KEYS = ("id", "uid", "question_id", "prompt_id", "conversation_id", "task_id", "query_id")
"""Keys holding a row's own id, first present wins; else the id is ``"{source}:{row}"``."""

# vLLM's order: an OpenAI request's ``reasoning`` wins over the older ``reasoning_content``
REASONING_KEYS = ("reasoning", "reasoning_content", "thinking")
WEIGHT_KEYS = ("weight", "loss_weight")
"""An answer's training weight: OpenAI fine-tuning's and axolotl's ``weight``, LLaMA-Factory's
``loss_weight``; 0 marks it not to train on (`NOT_TRAINED`), 1 (or null) trains it."""
TURN_TEXT_KEYS = ("content", "value", "text")
"""Where a turn's text is: OpenAI ``content``, ShareGPT ``value``, OpenAssistant ``text`` —
the first one holding text (not null, not blank), else the first one not null."""
_TURN_KEYS_NOT_TEXT = frozenset(
    (
        *TURN_TEXT_KEYS,
        *REASONING_KEYS,
        *WEIGHT_KEYS,
        *("role", "from", "name", "id", "type", "tool_call_id", "model", "lang", "language"),
        *("timestamp", "created_at", "finish_reason", "status", "recipient", "channel"),
    )
)
"""Turn keys whose strings are not the turn's text (a textless turn with text elsewhere is
rejected, that key named: `_check_textless`)."""
TURN_LIST_KEYS = ("messages", "conversations", "chosen_messages")
INSTRUCTION_KEYS = ("instruction", "prompt")
ANSWER_KEYS = ("output", "completion", "response", "chosen")
"""Alpaca-like answer keys, first non-null wins (``prompt`` + ``completion`` is the TRL form)."""
PROMPT_KEYS = ("turns", "prompt", "question", "query", "instruction")
TOOLS_KEYS = ("tools", "functions", "function")
"""``tools`` (list or JSON string); ``functions`` (legacy OpenAI) / ``function`` (BFCL) only as
lists, since ``function`` is a plain text column in some code sets."""

ALPACA_SEPARATOR = "\n\n"
"""Between an Alpaca ``instruction`` and a non-empty ``input`` (the Stanford Alpaca prompt's
own section break; LLaMA-Factory uses ``"\\n"``)."""

TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
"""Parts read as text; vLLM reads these (and ``thinking``, which draftset reads as reasoning)."""
REASONING_PARTS = frozenset({"reasoning", "thinking"})
MEDIA_PARTS = frozenset(
    {
        "image",
        "image_url",
        "input_image",
        "audio",
        "input_audio",
        "video",
        "video_url",
        "file",
        "input_file",
    }
)
CONTENT_TEXT_KEYS = ("answer", "text", "content")
"""Dict content (arena-hard ``{"answer": ...}``) -> the first of these holding a string."""

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# --- shape detection ---------------------------------------------------------------------------


def detect_format(data: dict[str, Any]) -> str | None:
    """The row's shape from its keys, or None when nothing matches (never guesses further)."""
    if "input_ids" in data and "loss_mask" in data:
        return "pretokenized"
    if isinstance(data.get("messages"), list):
        return "messages"
    conversations = data.get("conversations")
    if isinstance(conversations, list):
        first = conversations[0] if conversations else None
        if isinstance(first, dict) and "from" not in first and "role" in first:
            return "messages"
        return "sharegpt"
    if isinstance(data.get("chosen_messages"), list):
        return "messages"
    prompt = data.get("prompt")
    if isinstance(prompt, list) or (prompt is None and isinstance(data.get("chosen"), list)):
        return "messages"  # TRL conversational: prompt/completion or prompt/chosen as messages
    if _whole_conversation(_first(data, ("completion", "chosen"))):
        return "messages"  # ultrafeedback_binarized without `messages`: prompt text + chosen
    instruction = _first(data, INSTRUCTION_KEYS)
    if isinstance(instruction, str) and _first(data, ANSWER_KEYS) not in (None, ""):
        return "alpaca"
    if any(data.get(key) is not None for key in PROMPT_KEYS):
        return "prompt"
    return None


def _first(data: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """Value of the first key present with a non-null value."""
    for key in keys:
        value = data.get(key)
        if value is not None:
            return value
    return None


# --- entry point --------------------------------------------------------------------------------


def normalize(
    raw: RawRow, fmt: str | None = None, fields: dict[str, str] | None = None
) -> Normalized:
    """One outcome for one raw row. ``fmt`` forces a shape; ``fields`` maps canonical key names
    to the row's own keys (e.g. ``{"instruction": "text", "output": "code"}``, or turn-level
    ``{"role": "speaker", "content": "text"}``)."""
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    source, row = raw.source, raw.row
    data = raw.data
    if data is None:
        if raw.reject is not None:
            return raw.reject
        return Reject(source, row, None, reasons.INVALID_JSON, "row could not be read")
    if not isinstance(data, dict):
        msg = f"row is {type(data).__name__}, not an object"
        return Reject(source, row, None, reasons.NOT_AN_OBJECT, msg)
    turn_keys = (None, None)
    if fields:
        data, turn_keys = _remap(data, fields)
    try:
        data, unparsed = _parsed_turn_list(data)
    except RowProblem as bad:  # a lone surrogate escape in the JSON text
        return bad.reject(source, row, _row_id(data, source, row))
    rid = _row_id(data, source, row)
    shape = fmt or detect_format(data)
    try:
        if shape is None and unparsed is not None:
            raise RowProblem(reasons.INVALID_CONTENT, unparsed)
        if shape is None:
            raise RowProblem(
                reasons.UNKNOWN_FORMAT,
                f"no known shape matches keys {_keys(data)}; {shape_hint(data)}",
            )
        if shape == "pretokenized":
            ids, mask = _pretokenized(data)
            return PreTokenized(rid, source, row, ids, mask)
        if _undesirable(data.get("label"), "completion" in data):
            msg = f"label is {data['label']!r} (undesirable KTO example)"
            raise RowProblem(reasons.UNDESIRABLE_EXAMPLE, msg)
        meta: dict[str, Any] = {"format": shape}
        messages = _messages(data, shape, turn_keys, meta)
        tools = _tools(data)
    except RowProblem as bad:
        return bad.reject(source, row, rid)
    metadata = data.get("metadata")
    if isinstance(metadata, dict):
        meta["metadata"] = metadata
    unread = unread_fields(raw.data, data, shape, fields, messages)
    if unread:
        meta[UNREAD_FIELDS] = unread
    if any(m["role"] == "assistant" for m in messages):
        return Conversation(rid, source, row, messages, tools, meta)
    if not any(str(m.get("content") or "").strip() for m in messages):
        # nothing to answer: sent as it is, the model would answer an empty request
        msg = "the prompt has no text (every message is empty or whitespace)"
        return Reject(source, row, rid, reasons.EMPTY_CONVERSATION, msg)
    return PromptOnly(rid, source, row, messages, tools, meta)


_TURN_FIELDS = ("role", "content")


def json_text(text: str, where: str) -> Any:
    """``json.loads`` of JSON text inside a row (a call's arguments, a ``tools`` or
    ``messages`` column, a ``function_call`` turn): raises ``ValueError`` as ``json.loads``
    does, and `RowProblem` ``invalid_utf8`` when an escape there decodes to a lone UTF-16
    surrogate (``\\ud83d`` alone). The reader rejects such an escape in the row itself
    (`sources.read`), but sees the row's own escapes only; text holding one encodes as no
    UTF-8, and the batch encode's TypeError stopped the whole build."""
    return no_lone_surrogate(text, json.loads(text), where)


def no_lone_surrogate(text: str, value: Any, where: str) -> Any:
    """``value`` parsed from ``text`` (JSON, or a Python literal: the same ``\\u`` escapes);
    `RowProblem` ``invalid_utf8`` when it holds a lone surrogate."""
    if "\\ud" in text or "\\uD" in text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            msg = f"{where}: \\u escape encodes a lone surrogate"
            raise RowProblem(reasons.INVALID_UTF8, msg) from None
    return value


def _parsed_turn_list(data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A ``messages`` / ``conversations`` column stored as JSON text (agentic coding traces
    such as SWE-smith trajectories and CoderForge keep whole OpenAI message lists as one
    string column) read as the list it holds; any other string is left to fail as before.
    Second: why such a text (it starts with ``[``) does not parse, for the reject's message
    (it was `unknown_format` advising ``--format prompt``, the cause unsaid)."""
    for key in ("messages", "conversations"):
        value = data.get(key)
        if isinstance(value, str) and value.lstrip().startswith("["):
            try:
                parsed = json_text(value, f"'{key}'")
            except ValueError as exc:
                return data, f"'{key}' is JSON text that does not parse: {exc}"
            except RecursionError:
                return data, f"'{key}' is JSON text that does not parse: nested too deeply"
            if isinstance(parsed, list):
                return {**data, key: parsed}, None
    return data, None


def _remap(
    data: dict[str, Any], fields: dict[str, str]
) -> tuple[dict[str, Any], tuple[str | None, str | None]]:
    """A shallow copy with canonical keys taken from the mapped ones (absent source -> absent)."""
    out = dict(data)
    for canonical, key in fields.items():
        if canonical in _TURN_FIELDS:
            continue
        if key in data:
            out[canonical] = data[key]
        else:
            out.pop(canonical, None)
    return out, (fields.get("role"), fields.get("content"))


def _row_id(data: dict[str, Any], source: str, row: int) -> str:
    for key in ID_KEYS:
        value = data.get(key)
        if isinstance(value, str):
            if value:
                return value
        elif isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        elif isinstance(value, float) and math.isfinite(value):
            # a dataframe's integer id column with a gap is floats: 7.0 is the id 7
            return str(int(value)) if value.is_integer() else str(value)
    return f"{source}:{row}"  # none, or NaN (a dataframe's missing id)


def field_mapping(data: dict[str, Any]) -> tuple[str, dict[str, str]] | None:
    """A shape and field mapping that would read a row of an unknown shape, built from its own
    keys: a list of messages as ``messages``; two text columns as Alpaca instruction/output; one
    as a prompt (answered by `draftset run` / `generate`). None when no key fits."""
    keys = [k for k in data if isinstance(k, str) and k not in ID_KEYS]
    lists = [k for k in keys if isinstance(data[k], list) and data[k]]
    lists = [k for k in lists if all(_looks_like_message(m) for m in data[k])]
    # an identifier column (`answer_id`, `model_id`) is never a prompt or an answer
    texts = [k for k in keys if isinstance(data[k], str) and not k.lower().endswith("id")]
    if lists:
        return "messages", {"messages": lists[0]}
    if len(texts) >= 2:
        return "alpaca", {"instruction": texts[0], "output": texts[1]}
    if texts:
        return "prompt", {"prompt": texts[0]}
    return None


def _looks_like_message(value: Any) -> bool:
    """A message object: a role and a content (FastChat's `choices` list of `{index, turns}`
    objects is not one: `--field messages=choices` was suggested and rejected every row)."""
    return (
        isinstance(value, dict)
        and ("role" in value or "from" in value)
        and ("content" in value or "value" in value)
    )


def mapping_options(fmt: str, fields: dict[str, str]) -> str:
    """``--format F --field K=V ...``: a `field_mapping` as command-line options."""
    return " ".join([f"--format {fmt}", *(f"--field {k}={v}" for k, v in fields.items())])


def shape_hint(data: dict[str, Any]) -> str:
    """How to read a row of an unknown shape (`field_mapping`), as options to give."""
    mapping = field_mapping(data)
    if mapping is None:
        return "map its columns with --format and --field (see docs/formats.md)"
    how = mapping_options(*mapping)
    if mapping[0] == "prompt":
        how += " (a prompt without an answer)"
    return f"map its columns with --format / --field, e.g. {how} (see docs/formats.md)"


def _keys(data: dict[str, Any], limit: int = 20) -> str:
    keys = [str(k) for k in data]
    more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return "[" + ", ".join(keys[:limit]) + "]" + more


def _type(value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):  # `json.dumps(df.to_dict("records"))`
        return "NaN (a dataframe's missing value, written by json.dumps)"
    return "null" if value is None else type(value).__name__


def _nan_fix(value: Any) -> str:
    """What to write instead of a NaN (`_type`), for an optional field."""
    return (
        ": write null, or leave the key out"
        if isinstance(value, float) and math.isnan(value)
        else ""
    )


# --- fields a shape does not read ---------------------------------------------------------------

UNREAD_FIELDS = "unread_fields"
"""``meta`` key: the row's non-empty text fields its shape did not read (the selection counts
them per source and pops the key; see `unread_fields`)."""

_ALWAYS_READ = frozenset(
    (*ID_KEYS, *TOOLS_KEYS, "system", "metadata", "label", "rejected", "rejected_messages")
)
"""Read by every shape (ids, tools, system, metadata, KTO label) or ignored by rule (the
rejected answer of a preference row: a drafter never learns it)."""

_SHAPE_READS: dict[str, frozenset[str]] = {
    "messages": frozenset((*TURN_LIST_KEYS, "completion", "chosen")),
    "sharegpt": frozenset((*TURN_LIST_KEYS, "completion", "chosen")),
    "alpaca": frozenset((*INSTRUCTION_KEYS, "input", "history", *ANSWER_KEYS)),
    "prompt": frozenset((*PROMPT_KEYS, "input", "history")),
}


MAPPABLE_FIELDS = frozenset(
    (
        *_ALWAYS_READ,
        *(key for keys in _SHAPE_READS.values() for key in keys),
        "input_ids",
        "loss_mask",
        *_TURN_FIELDS,
    )
)
"""The canonical names ``fields`` (``--field CANONICAL=COLUMN``) may map: what a shape reads
(docs/formats.md, "Field mapping"); any other name maps a column nothing reads."""


def unread_fields(
    original: dict[str, Any],
    data: dict[str, Any],
    shape: str,
    fields: dict[str, str] | None,
    messages: list[Message],
) -> tuple[str, ...]:
    """Top-level fields of the row (``original``; ``data`` is it after the ``fields`` mapping)
    holding text (a non-blank string, or a list / object with one) that ``shape`` did not read:
    a trace in ``code``, a second answer column. Numbers and flags (scores, indices) are not
    counted. A ``prompt`` string that repeats the first user turn (UltraChat) counts as read."""
    read = set(_ALWAYS_READ | _SHAPE_READS.get(shape, frozenset()))
    if shape == "alpaca":  # the first answer key wins; a second one is not read
        answer = next((k for k in ANSWER_KEYS if data.get(k) is not None), None)
        read -= {k for k in ANSWER_KEYS if k != answer}
    if shape in ("messages", "sharegpt"):  # the first turn list present is the one read
        used = next((k for k in TURN_LIST_KEYS if data.get(k) is not None), None)
        read -= {k for k in TURN_LIST_KEYS if k != used}
        if used is None:  # TRL conversational: the `prompt` list is the turns
            read.add("prompt")
    if shape == "prompt":  # the one prompt key `_prompt_turns` / `_alpaca_turns` reads
        if _first(data, INSTRUCTION_KEYS) is not None:
            used = "instruction" if data.get("instruction") is not None else "prompt"
        else:
            used = next((k for k in PROMPT_KEYS[:4] if data.get(k) is not None), "")
        read -= {k for k in PROMPT_KEYS if k != used}
    if fields:  # a mapped canonical key was read from the row's own column, not its namesake
        mapped = {k for k, v in fields.items() if k not in _TURN_FIELDS}
        read = (read - mapped) | {fields[k] for k in read & mapped}
    out = []
    for key, value in original.items():
        if key in read or not _holds_text(value):
            continue
        if key == "prompt" and isinstance(value, str):
            first = next((m["content"] for m in messages if m["role"] == "user"), None)
            if first == value:
                continue
        out.append(str(key))
    return tuple(out)


def _holds_text(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        return bool(value.strip()) and value.strip() not in ("None", "null")
    if depth < 3 and isinstance(value, list):
        return any(_holds_text(v, depth + 1) for v in value[:8])
    if depth < 3 and isinstance(value, dict):
        return any(_holds_text(v, depth + 1) for v in list(value.values())[:16])
    return False


# --- pre-tokenized ------------------------------------------------------------------------------


def _pretokenized(data: dict[str, Any]) -> tuple[list[int], list[int]]:
    ids, mask = data.get("input_ids"), data.get("loss_mask")
    if not isinstance(ids, list) or not isinstance(mask, list):
        msg = f"input_ids ({_type(ids)}) and loss_mask ({_type(mask)}) must be lists"
        raise RowProblem(reasons.INVALID_PRETOKENIZED, msg)
    if not ids:
        raise RowProblem(reasons.INVALID_PRETOKENIZED, "input_ids is empty")
    if len(ids) != len(mask):
        msg = f"input_ids has {len(ids)} tokens but loss_mask has {len(mask)} values"
        raise RowProblem(reasons.INVALID_PRETOKENIZED, msg)
    if not all(type(t) is int and 0 <= t < _ID_LIMIT for t in ids):
        i = next(i for i, t in enumerate(ids) if not (type(t) is int and 0 <= t < _ID_LIMIT))
        msg = f"input_ids[{i}] = {ids[i]!r} is not a token id (an integer 0 <= id < 2**31)"
        raise RowProblem(reasons.INVALID_PRETOKENIZED, msg)
    if not all(type(m) is int and 0 <= m <= 1 for m in mask):
        bad = next((i for i, m in enumerate(mask) if not _is_bit(m)), None)
        if bad is not None:
            msg = f"loss_mask[{bad}] = {mask[bad]!r} is not 0 or 1"
            raise RowProblem(reasons.INVALID_PRETOKENIZED, msg)
        mask = [int(m) for m in mask]  # booleans
    return ids, mask


_ID_LIMIT = 2**31
"""Token ids are stored as int32; a larger one is no token of any vocabulary."""


def _undesirable(label: Any, kto_shape: bool) -> bool:
    """A KTO ``label`` that marks the example bad: ``false`` or the text ``"false"`` (any case:
    CSV exports), which were trained on; in TRL's KTO shape (``prompt`` / ``completion`` /
    ``label``) also ``0``, ``"0"`` and ``"no"``. Elsewhere a ``label`` of ``0`` or ``"no"`` may
    be a class or a gold answer, not a verdict on the row."""
    if isinstance(label, bool):
        return not label
    if isinstance(label, str) and label.strip().lower() == "false":
        return True
    if not kto_shape:
        return False
    if isinstance(label, int):
        return label == 0
    return isinstance(label, str) and label.strip().lower() in ("0", "no")


def _is_bit(value: Any) -> bool:
    return type(value) in (int, bool) and 0 <= value <= 1


# --- chat shapes --------------------------------------------------------------------------------


def _messages(
    data: dict[str, Any],
    shape: str,
    turn_keys: tuple[str | None, str | None],
    meta: dict[str, Any],
) -> list[Message]:
    if shape in ("messages", "sharegpt"):
        turns = _turn_list(data)
    elif shape == "alpaca" or (shape == "prompt" and _first(data, INSTRUCTION_KEYS) is not None):
        turns = _alpaca_turns(data, shape, with_answer=shape == "alpaca")
    else:
        turns = _prompt_turns(data)
    if not turns:
        raise RowProblem(reasons.EMPTY_CONVERSATION, "the conversation has no messages")
    messages = _parse_turns(turns, turn_keys, meta)
    system = data.get("system")
    if system is not None and system != "":
        if not isinstance(system, str):
            raise RowProblem(reasons.INVALID_CONTENT, f"'system' is {_type(system)}, not a string")
        if messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": system})
            shifted_keys = (
                INLINE_REASONING,
                ARGUMENTS_TEXT,
                PART_TEXTS,
                OTHER_TEXT_PARTS,
                REASONING_UNTERMINATED,
                DEVELOPER,
                NOT_TRAINED,
                NO_CONTENT,
            )
            for key in shifted_keys:
                shifted = meta.get(key)
                if shifted:  # keys are message indices
                    meta[key] = {i + 1: value for i, value in shifted.items()}
    return messages


def _turn_list(data: dict[str, Any]) -> list[Any]:
    """The raw turns of a messages / ShareGPT row, plus a preference row's chosen answer (or
    its chosen conversation, when ``chosen`` holds the whole of it)."""
    for key in TURN_LIST_KEYS:
        turns = data.get(key)
        if turns is not None:
            break
    else:
        key, turns = "prompt", data.get("prompt")  # TRL conversational
        if turns is None:
            if _first(data, ("completion", "chosen")) is None:
                msg = f"no 'messages' or 'conversations' list; keys {_keys(data)}"
                raise RowProblem(reasons.UNKNOWN_FORMAT, msg)
            turns = []
    answer = None if key == "chosen_messages" else _first(data, ("completion", "chosen"))
    if _whole_conversation(answer):
        return _chosen_conversation(key, turns, answer)
    if not isinstance(turns, list):
        raise RowProblem(reasons.INVALID_CONTENT, f"'{key}' is {_type(turns)}, not a list")
    if answer is None:
        return turns
    if isinstance(answer, str):
        answer = [{"role": "assistant", "content": answer}]
    elif isinstance(answer, dict):
        answer = [answer]
    elif not isinstance(answer, list):
        raise RowProblem(reasons.INVALID_CONTENT, f"chosen answer is {_type(answer)}")
    if turns and answer and _raw_role(turns[-1]) == "assistant":
        if [_raw_text(t) for t in turns[-len(answer) :]] == [_raw_text(t) for t in answer]:
            return turns  # the answer, given twice
        which = "completion" if data.get("completion") is not None else "chosen"
        raise RowProblem(
            reasons.INVALID_CONTENT,
            f"'{key}' already ends in an answer and '{which}' gives another"
            " (which one to train is unclear)",
        )
    return turns + answer


def _raw_role(turn: Any) -> str | None:
    """A raw turn's normalized role (None: no such turn, or a role not in the table)."""
    if not isinstance(turn, dict):
        return None
    role = turn.get("role")
    role = turn.get("from") if role is None else role
    return ROLE_TABLE.get(role.lower()) if isinstance(role, str) else None


def _raw_text(turn: Any) -> Any:
    """A raw turn's text (None: none that holds text)."""
    if not isinstance(turn, dict):
        return turn
    key = _text_key(turn)
    value = turn.get(key) if key is not None else None
    return value if _has_text(value) else None


def _text_key(turn: dict[str, Any]) -> str | None:
    """The key a turn's text is read from (`TURN_TEXT_KEYS`): the first holding text, else
    the first not null, else the first present; None when the turn has none of them."""
    for holds in (_has_text, lambda value: value is not None):
        key = next((k for k in TURN_TEXT_KEYS if holds(turn.get(k))), None)
        if key is not None:
            return key
    return next((k for k in TURN_TEXT_KEYS if k in turn), None)


def _said(turn: Any) -> tuple[str | None, Any]:
    """Who said what in a raw turn (other keys — ids, weights — aside)."""
    return _raw_role(turn), _raw_text(turn)


def _whole_conversation(answer: Any) -> bool:
    """A preference row's ``chosen`` holding the whole conversation (ultrafeedback_binarized,
    HH-RLHF as messages), not the answer alone: it has a user or system turn."""
    return isinstance(answer, list) and any(_raw_role(t) in ("user", "system") for t in answer)


def _chosen_conversation(key: str, turns: Any, chosen: list[Any]) -> list[Any]:
    """``chosen`` is the conversation; the row's prompt (a turn list, or the first user text)
    must be where it begins, or which conversation to train is unclear."""
    if isinstance(turns, list) and [_said(t) for t in turns] == [
        _said(t) for t in chosen[: len(turns)]
    ]:
        return chosen
    if isinstance(turns, str):
        first = next((t for t in chosen if _raw_role(t) == "user"), None)
        if _raw_text(first) == turns:
            return chosen
    raise RowProblem(
        reasons.INVALID_CONTENT,
        f"'chosen' holds a whole conversation that does not begin with '{key}'",
    )


def _alpaca_turns(data: dict[str, Any], shape: str, with_answer: bool) -> list[Any]:
    """instruction (+ separator + input) as the user turn, the answer as the assistant turn
    (not for the ``prompt`` shape: forcing it means "regenerate the answers")."""
    key = "instruction" if data.get("instruction") is not None else "prompt"
    instruction = data.get(key)
    if instruction is None:
        msg = f"format {shape!r} needs an 'instruction' or 'prompt' field; keys {_keys(data)}"
        raise RowProblem(reasons.UNKNOWN_FORMAT, msg)
    if not isinstance(instruction, str):
        raise RowProblem(reasons.INVALID_CONTENT, f"'{key}' is {_type(instruction)}, not a string")
    extra = data.get("input")
    if extra is not None and not isinstance(extra, str):
        raise RowProblem(
            reasons.INVALID_CONTENT, f"'input' is {_type(extra)}, not a string{_nan_fix(extra)}"
        )
    user = instruction + ALPACA_SEPARATOR + extra if extra else instruction
    turns: list[Any] = _history_turns(data.get("history"))
    turns.append({"role": "user", "content": user})
    answer = _first(data, ANSWER_KEYS) if with_answer else None
    if answer is not None and not isinstance(answer, str):
        raise RowProblem(reasons.INVALID_CONTENT, f"the answer is {_type(answer)}, not a string")
    if answer:
        turns.append({"role": "assistant", "content": answer})
    return turns


def _history_turns(history: Any) -> list[Any]:
    """LLaMA-Factory Alpaca ``history``: ``[[user, assistant], ...]`` before the instruction."""
    if history is None:
        return []
    if not isinstance(history, list):
        raise RowProblem(reasons.INVALID_CONTENT, f"'history' is {_type(history)}, not a list")
    turns: list[Any] = []
    for i, pair in enumerate(history):
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)
        ):
            raise RowProblem(
                reasons.INVALID_CONTENT, f"history[{i}] is not a [user, assistant] pair"
            )
        turns.append({"role": "user", "content": pair[0]})
        turns.append({"role": "assistant", "content": pair[1]})
    return turns


def _prompt_turns(data: dict[str, Any]) -> list[Any]:
    """User turns of a prompt-only row: ``turns``, ``prompt``, ``question`` or ``query``."""
    for key in PROMPT_KEYS[:4]:
        value = data.get(key)
        if value is not None:
            break
    else:
        raise RowProblem(reasons.UNKNOWN_FORMAT, f"no prompt field; keys {_keys(data)}")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise RowProblem(
            reasons.INVALID_CONTENT, f"'{key}' is {_type(value)}, not a string or list"
        )
    turns: list[Any] = []
    for item in value:
        if isinstance(item, str):
            turns.append({"role": "user", "content": item})
        elif isinstance(item, list):  # BFCL: one list of messages per user turn
            turns.extend(item)
        elif isinstance(item, dict) and "role" not in item and "from" not in item:
            turns.append({"role": "user", "content": item.get("content")})
        else:
            turns.append(item)
    return turns


# --- turns ----------------------------------------------------------------------------------------


def _parse_turns(
    turns: list[Any], turn_keys: tuple[str | None, str | None], meta: dict[str, Any]
) -> list[Message]:
    role_key, content_key = turn_keys
    out: list[Message] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RowProblem(reasons.INVALID_CONTENT, f"turn {i} is {_type(turn)}, not an object")
        if role_key is not None:
            role = turn.get(role_key)
        else:
            role = turn.get("role")
            if role is None:
                role = turn.get("from")
        key = content_key or _text_key(turn)
        content = turn.get(key) if key is not None else None
        if _role(i, role) == "assistant":
            _read_weight(i, turn, meta)
        elif content is None:
            _check_textless(i, turn, role, key)
        msg = _parse_turn(i, turn, role, content, meta)
        out.append(msg)
        call_turn = isinstance(role, str) and role.lower() in CALL_ROLES  # content: the call
        if msg["role"] != "tool" and (content is None or content == [] or call_turn):
            meta.setdefault(NO_CONTENT, {})[i] = True
        if isinstance(role, str) and role.lower() == "developer":
            meta.setdefault(DEVELOPER, {})[i] = True  # a server gives it back as developer
    return out


def _has_text(value: Any) -> bool:
    """Text worth reading: not null, not a blank string (a Parquet/CSV export fills the unused
    text columns with "" as often as with null)."""
    return value is not None and not (isinstance(value, str) and not value.strip())


def _check_textless(i: int, turn: dict[str, Any], role: Any, key: str | None) -> None:
    """A user, system or tool turn with no text. Null content is refused by a server (OpenAI's
    and vLLM's schema); absent, the server reads it as no parts (""). But a turn whose text sits
    under another key would be read as empty: rejected, that key named. (An answer without
    content is "": a call, reasoning only, a refusal or a pad, never supervised as text it
    lacks; its caller does not ask.)"""
    others = [
        str(k)
        for k, v in turn.items()
        if k not in _TURN_KEYS_NOT_TEXT and isinstance(v, str) and v.strip()
    ]
    if others:
        name = key or "content"
        msg = (
            f"turn {i} ({role}) has no text under {name!r} but {others[0]!r} holds text"
            f" (map it: --field content={others[0]})"
        )
        raise RowProblem(reasons.INVALID_CONTENT, msg)
    if key is not None and key in turn:
        msg = f"turn {i} ({role}) content is null (an OpenAI-compatible server refuses it)"
        raise RowProblem(reasons.INVALID_CONTENT, msg)


def _read_weight(i: int, turn: dict[str, Any], meta: dict[str, Any]) -> None:
    """An answer's training weight (`WEIGHT_KEYS`): 0 marks it `NOT_TRAINED`; a weight the
    mask cannot express (it trains a token or not) rejects the row."""
    for key in WEIGHT_KEYS:
        weight = turn.get(key)
        if weight is None:
            continue
        if type(weight) not in (int, float, bool) or weight not in (0, 1):
            msg = (
                f"turn {i}: {key} is {weight!r}; the loss mask trains an answer or not"
                " (weight 0 or 1)"
            )
            raise RowProblem(reasons.INVALID_CONTENT, msg)
        if weight == 0:
            meta.setdefault(NOT_TRAINED, {})[i] = True


def _role(i: int, role: Any) -> str:
    if not isinstance(role, str):
        what = "has no role" if role is None else f"role is {_type(role)}, not a string"
        raise RowProblem(reasons.INVALID_CONTENT, f"turn {i} {what}")
    mapped = ROLE_TABLE.get(role) or ROLE_TABLE.get(role.lower())
    if mapped is None:
        raise RowProblem(reasons.UNKNOWN_ROLE, f"unknown role {role!r} in turn {i}")
    return mapped


def _parse_turn(
    i: int, turn: dict[str, Any], role: Any, content: Any, meta: dict[str, Any]
) -> Message:
    mapped = _role(i, role)
    if mapped == "assistant":
        if role.lower() in CALL_ROLES:
            calls = _calls_from_value(content, f"turn {i} ({role})")
            return {"role": "assistant", "content": "", "tool_calls": calls}
        return _assistant(i, turn, content, meta)
    if mapped == "tool":
        return _tool(i, turn, content, meta)
    text, reasoning, calls = _content(i, content, meta)
    if reasoning is not None or calls:
        raise RowProblem(
            reasons.INVALID_CONTENT, f"turn {i} ({role}) has reasoning or tool-call parts"
        )
    return {"role": mapped, "content": text}


def _assistant(i: int, turn: dict[str, Any], content: Any, meta: dict[str, Any]) -> Message:
    text, part_reasoning, calls = _content(i, content, meta)
    reasoning = _first(turn, REASONING_KEYS)
    if reasoning is not None and not isinstance(reasoning, str):
        raise RowProblem(reasons.INVALID_CONTENT, f"turn {i}: reasoning is {_type(reasoning)}")
    if part_reasoning is not None:
        if reasoning and reasoning != part_reasoning:
            raise RowProblem(
                reasons.INVALID_CONTENT, f"turn {i}: reasoning given twice, differently"
            )
        reasoning = part_reasoning
    if reasoning is None:  # an explicit "" is reasoning given (empty): the content stays whole
        original = text
        text, reasoning, unterminated = _split_think(text)
        if unterminated:  # cut off: never supervised (rules.cut_off_answers)
            meta.setdefault(REASONING_UNTERMINATED, {})[i] = True
        if text != original:
            meta.setdefault(INLINE_REASONING, {})[i] = original
    first = len(calls or [])
    calls = (calls or []) + _message_calls(i, turn)
    written = _written_arguments(turn.get("tool_calls"), first)
    if written:
        meta.setdefault(ARGUMENTS_TEXT, {})[i] = written
    msg: Message = {"role": "assistant", "content": text}
    if reasoning is not None:  # "" kept: vLLM gives the template "", which reads it as given
        msg["reasoning_content"] = reasoning
    if calls:
        msg["tool_calls"] = calls
    return msg


def _written_arguments(tool_calls: Any, first: int) -> dict[int, str]:
    """Call index -> arguments as the row wrote them, for OpenAI calls given as JSON text."""
    out: dict[int, str] = {}
    for k, c in enumerate(tool_calls if isinstance(tool_calls, list) else []):
        fn = c.get("function") if isinstance(c, dict) else None
        src = fn if isinstance(fn, dict) else c
        args = src.get("arguments") if isinstance(src, dict) else None
        if isinstance(args, str):  # "" too: vLLM's harmony path writes it as given
            out[first + k] = args
    return out


def _split_think(text: str) -> tuple[str, str | None, bool]:
    """Move a leading ``<think>...</think>`` to reasoning (Qwen3 style: reasoning stripped of
    newlines, content of leading newlines). Unclosed: all of it is reasoning, content ""."""
    if not text.startswith(THINK_OPEN):
        if not (text[:1].isspace() and text.lstrip().startswith(THINK_OPEN)):
            return text, None, False
        text = text.lstrip()
    start = len(THINK_OPEN)
    end = text.find(THINK_CLOSE, start)
    if end == -1:
        return "", text[start:].strip("\n") or None, True
    reasoning = text[start:end].strip("\n") or None
    return text[end + len(THINK_CLOSE) :].lstrip("\n"), reasoning, False


def _tool(i: int, turn: dict[str, Any], content: Any, meta: dict[str, Any]) -> Message:
    if isinstance(content, str):
        text = content
    elif isinstance(content, list) and all(
        isinstance(p, dict) and isinstance(p.get("type"), str) for p in content
    ):
        # joined by a newline, as vLLM's template path joins a tool result's parts; the parts
        # kept for its harmony path, which joins them with nothing (mask/reads.py)
        text, reasoning, calls = _content(i, content, meta)
        if reasoning is not None or calls:
            raise RowProblem(
                reasons.INVALID_CONTENT, f"turn {i} (tool) has reasoning or tool-call parts"
            )
    elif content is None:
        text = ""
    else:
        text = json.dumps(content, ensure_ascii=False)
    msg: Message = {"role": "tool", "content": text}
    for key in ("tool_call_id", "name"):
        value = turn.get(key)
        if value is None:
            continue
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise RowProblem(reasons.INVALID_CONTENT, f"turn {i}: {key} is {_type(value)}")
        msg[key] = str(value)
    return msg


# --- content ----------------------------------------------------------------------------------


def _content(
    i: int, value: Any, meta: dict[str, Any] | None = None
) -> tuple[str, str | None, list[dict[str, Any]] | None]:
    """(text, reasoning from typed parts, tool calls from typed parts) of a turn's content.

    Text parts are joined by a newline, as vLLM joins them for a template that reads content as
    a string; several of them are also kept in ``meta`` (`PART_TEXTS`) for templates that read
    lists of parts, which vLLM gives the parts as sent."""
    if type(value) is str:
        return value, None, None
    if value is None:
        return "", None, None
    if isinstance(value, list):
        texts, reasoning, calls = _parts(i, value)
        if meta is not None:
            if len(texts) > 1:
                meta.setdefault(PART_TEXTS, {})[i] = texts
            other = sorted({t for p in value if (t := _part_type(p)) in TEXT_PARTS - {"text"}})
            if other:
                meta.setdefault(OTHER_TEXT_PARTS, {})[i] = other
        # vLLM drops an empty part before it joins them (its `if parse_res`)
        return "\n".join(t for t in texts if t), reasoning, calls
    if isinstance(value, dict):
        for key in CONTENT_TEXT_KEYS:
            text = value.get(key)
            if isinstance(text, str):
                return text, None, None
        msg = f"turn {i}: content object has no text field (keys {_keys(value)})"
        raise RowProblem(reasons.INVALID_CONTENT, msg)
    msg = f"turn {i}: content is {_type(value)}, expected a string or a list of parts"
    raise RowProblem(reasons.INVALID_CONTENT, msg)


def _part_type(part: Any) -> str | None:
    kind = part.get("type", "text") if isinstance(part, dict) else None
    return kind if isinstance(kind, str) else None


def _parts(i: int, parts: list[Any]) -> tuple[list[str], str | None, list[dict[str, Any]] | None]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            hint = (  # `content: ["a", "b"]`: no server takes it
                ', not a part: a list of parts holds {"type": "text", "text": ...} objects (a'
                " server refuses a list of strings); join the strings into one content string"
                if isinstance(part, str)
                else ""
            )
            raise RowProblem(reasons.INVALID_CONTENT, f"turn {i}: part {j} is {_type(part)}{hint}")
        ptype = part.get("type", "text")
        if not isinstance(ptype, str):
            raise RowProblem(reasons.INVALID_CONTENT, f"turn {i}: part {j} type is {_type(ptype)}")
        if ptype == "thinking" and "thinking" in part:
            # Anthropic's form: vLLM reads it as text of the answer, in the prompt of every
            # later turn too, where draftset would give the template reasoning: the two differ
            msg = (
                f"turn {i}: Anthropic 'thinking' part {j} (vLLM reads it as answer text);"
                " give the reasoning as reasoning_content"
            )
            raise RowProblem(reasons.UNSUPPORTED_CONTENT, msg)
        if ptype in TEXT_PARTS or ptype in REASONING_PARTS:
            # the text under "text" or "value", or OpenAI's "refusal" under its own name
            keys = ("text", "value", ptype)
            text = next((part[k] for k in keys if part.get(k) is not None), None)
            if not isinstance(text, str):
                msg = f"turn {i}: {ptype} part {j} has no string 'text' or 'value'"
                raise RowProblem(reasons.INVALID_CONTENT, msg)
            (texts if ptype in TEXT_PARTS else thoughts).append(text)
        elif ptype == "tool_call":
            calls.extend(_calls_from_value(part.get("value"), f"turn {i} part {j}"))
        elif ptype in MEDIA_PARTS:
            raise RowProblem(reasons.UNSUPPORTED_CONTENT, f"turn {i}: {ptype!r} part (text only)")
        else:
            raise RowProblem(reasons.UNSUPPORTED_CONTENT, f"turn {i}: unknown part type {ptype!r}")
    return texts, ("".join(thoughts) if thoughts else None), calls or None


# --- tool calls and tools -----------------------------------------------------------------------


def _message_calls(i: int, turn: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI ``tool_calls`` and legacy ``function_call`` of an assistant message."""
    calls: list[dict[str, Any]] = []
    tool_calls = turn.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            msg = f"turn {i}: tool_calls is {_type(tool_calls)}, not a list"
            raise RowProblem(reasons.INVALID_TOOL_CALL, msg)
        calls.extend(_call(c, f"tool call {k} in turn {i}") for k, c in enumerate(tool_calls))
    function_call = turn.get("function_call")
    if function_call is not None:
        calls.extend(_calls_from_value(function_call, f"function_call in turn {i}"))
    return calls


def _calls_from_value(value: Any, where: str) -> list[dict[str, Any]]:
    """Calls from a JSON string or object/list (glaive ``function_call`` turns, typed parts)."""
    if isinstance(value, str):
        try:
            value = json_text(value, where)
        except (ValueError, RecursionError) as exc:
            raise RowProblem(reasons.INVALID_TOOL_CALL, f"{where}: not valid JSON: {exc}") from None
    if isinstance(value, dict):
        return [_call(value, where)]
    if isinstance(value, list) and value:
        return [_call(c, f"{where} call {k}") for k, c in enumerate(value)]
    raise RowProblem(reasons.INVALID_TOOL_CALL, f"{where}: a call is {_type(value)}, not an object")


def _call(obj: Any, where: str) -> dict[str, Any]:
    """``{"id"?, "type": "function", "function": {"name", "arguments": dict}}`` from the OpenAI
    form or a bare ``{name, arguments}`` (``parameters`` accepted, as in Llama 3 JSON calls)."""
    if not isinstance(obj, dict):
        raise RowProblem(reasons.INVALID_TOOL_CALL, f"{where} is {_type(obj)}, not an object")
    fn = obj.get("function")
    src = fn if isinstance(fn, dict) else obj
    name = src.get("name")
    if not isinstance(name, str) or not name:
        raise RowProblem(reasons.INVALID_TOOL_CALL, f"{where} has no function name")
    args = src.get("arguments")
    if args is None and fn is not src:
        args = src.get("parameters")
    call: dict[str, Any] = {}
    call_id = obj.get("id")
    if call_id is not None:
        if not isinstance(call_id, str | int) or isinstance(call_id, bool):
            raise RowProblem(
                reasons.INVALID_TOOL_CALL, f"{where} ({name!r}): id is {_type(call_id)}"
            )
        call["id"] = str(call_id)
    call["type"] = "function"
    call["function"] = {"name": name, "arguments": _arguments(args, f"{where} ({name!r})")}
    return call


def _arguments(args: Any, where: str) -> dict[str, Any]:
    # no arguments: none, "", or only whitespace (vLLM reads "  " as {} too; its harmony path
    # writes the text as given, kept in ARGUMENTS_TEXT)
    if args is None or (isinstance(args, str) and not args.strip()):
        return {}
    if isinstance(args, str):
        try:
            args = json_text(args, f"{where}: arguments")
        except (ValueError, RecursionError) as exc:
            msg = f"{where}: arguments are not valid JSON: {exc}"
            raise RowProblem(reasons.INVALID_TOOL_CALL, msg) from None
    if not isinstance(args, dict):
        raise RowProblem(
            reasons.INVALID_TOOL_CALL, f"{where}: arguments are {_type(args)}, not an object"
        )
    return args


def _tools(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Tool schemas as ``[{"type": "function", "function": {...}}]``; None when there are none."""
    key, value = "tools", data.get("tools")
    if value is None:
        for key in TOOLS_KEYS[1:]:
            value = data.get(key)
            if isinstance(value, list):
                break
        else:
            return None
    if isinstance(value, str):
        try:
            value = json_text(value, f"'{key}'") if value.strip() else None
        except (ValueError, RecursionError) as exc:
            raise RowProblem(reasons.INVALID_TOOLS, f"'{key}' is not valid JSON: {exc}") from None
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise RowProblem(reasons.INVALID_TOOLS, f"'{key}' is {_type(value)}, not a list of schemas")
    return [_tool_schema(t, f"{key}[{k}]") for k, t in enumerate(value)]


def _tool_schema(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise RowProblem(reasons.INVALID_TOOLS, f"{where} is {_type(tool)}, not an object")
    fn = tool.get("function")
    if isinstance(fn, dict):
        # a tool that names its type keeps it: the serving engine judges it (vLLM refuses any
        # type but `function`: mask/serving.py), where rewriting it served a request vLLM refuses
        typed = tool.get("type") is not None
        wrapped = tool if typed else {"type": "function", "function": fn}
    else:
        fn, wrapped = tool, {"type": "function", "function": tool}
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise RowProblem(reasons.INVALID_TOOLS, f"{where} has no function name")
    return wrapped
