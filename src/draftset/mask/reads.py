"""What a chat template is given for a row: the normalized messages put back the way this
template reads them (docs/semantics.md: one rule for build and verify).

`sources.normalize` moves inline reasoning and keeps the tool-call arguments as written in
``Conversation.meta``; a template concern decides what it sees, so it lives beside the template.
"""

from __future__ import annotations

import json
from typing import Any

from draftset.core.records import (
    ARGUMENTS_TEXT,
    DEVELOPER,
    INLINE_REASONING,
    NO_CONTENT,
    PART_TEXTS,
    Message,
)
from draftset.core.rules import developer_role
from draftset.mask.serving import served_system_texts, with_call_ids
from draftset.mask.template import as_content_parts


def served_reads(
    messages: list[Message],
    meta: dict[str, Any],
    shape: tuple[bool, bool, bool, bool],
    template_text: str,
    engine: str,
    harmony: bool,
) -> list[Message]:
    """What the template is given as the serving engine hands a row over (build's and verify's
    one path): system text as the engine keeps it (`served_system_texts`), then
    `as_template_reads` with the template's probed ``shape`` (content as parts, renders
    reasoning, arguments as text — not under vLLM or SGLang, which give objects —, renders lists of
    parts) and the developer role when the template is given it."""
    on_template = engine == "vllm" and not harmony  # vLLM's own template path
    if on_template:  # a call without an id is given one, its result paired, as a client must
        messages = with_call_ids(messages)
    served, served_meta = served_system_texts(messages, meta, engine, harmony)
    content_parts, renders_reasoning, string_arguments, part_lists = shape
    if engine == "sglang" and not harmony:
        served, served_meta = sglang_joins(served, served_meta, part_lists)
    return as_template_reads(
        served,
        served_meta,
        content_parts,
        renders_reasoning,
        # vLLM (0.33, `_postprocess_messages`) and SGLang (0.5.14+, as of 0.5.23
        # `normalize_assistant_tool_call_arguments`; read from its source, not run here) parse
        # every call's arguments into an object before any template runs: a template that reads
        # them only as text raises there (vLLM's harmony is no template: it writes the
        # arguments' text as the row gave it; SGLang renders gpt-oss with its template)
        string_arguments and (engine == "transformers" or harmony),
        part_lists,
        tool_parts=harmony,
        developer_role=developer_role(template_text, engine, harmony),
        every_part=on_template,
    )


def sglang_joins(
    messages: list[Message], meta: dict[str, Any], part_lists: bool
) -> tuple[list[Message], dict[str, Any]]:
    """A message's several text parts as SGLang hands them to the template (its Jinja path,
    `process_content_for_template_format` and `normalize_tool_content`; read from its source,
    not run here): joined by a space, the empty ones too, for a "string"-format template and
    for every tool result; as sent (left in ``meta`` for `as_template_reads`) to an
    "openai"-format one (``part_lists``). Inline reasoning moved out of such a message is left
    to `as_template_reads`."""
    parts = meta.get(PART_TEXTS)
    if not parts:
        return messages, meta
    moved = meta.get(INLINE_REASONING) or {}
    out, kept = list(messages), {}
    for i, texts in parts.items():
        if i >= len(out) or i in moved or (part_lists and out[i].get("role") != "tool"):
            kept[i] = texts
            continue
        out[i] = {**out[i], "content": " ".join(texts)}
    return out, {**meta, PART_TEXTS: kept}


def as_template_reads(
    messages: list[Message],
    meta: dict[str, Any],
    content_parts: bool = False,
    renders_reasoning: bool = True,
    string_arguments: bool = False,
    part_lists: bool = False,
    tool_parts: bool = False,
    developer_role: bool = False,
    every_part: bool = False,
) -> list[Message]:
    """The messages a template is given (docs/semantics.md, one rule for build and verify).

    Inline reasoning stays moved only when the template renders ``reasoning_content`` before
    the answer (``renders_reasoning``, probed once per template); otherwise the turn gets its
    content back exactly as written. A move may change the render (gpt-oss: the analysis
    channel; MiniMax-M3: ``<mm:think>``): the turn is then rendered as the model writes
    reasoning (docs/semantics.md). Templates that read content only as a list of parts
    (``content_parts``) get the text as one text part. Templates that read tool-call
    arguments only as a string (``string_arguments``) get each call's arguments as the row
    wrote them (the JSON text the model generated), or as compact JSON when the row gave an
    object. A message the row gave as several text parts (`PART_TEXTS`) is those parts for a
    template that renders lists of parts (``part_lists``), its texts joined by a newline
    otherwise (the empty ones left out, as the normalized content): what vLLM gives the
    template in each case (a tool result: joined by a newline, for a list-reading template
    with its empty parts too, except under harmony (``tool_parts``), which joins them itself).
    A message the row gave as ``developer`` is that role again for a template that names it
    (``developer_role``; `rules.names_developer`), ``system`` otherwise. With
    ``every_part`` (vLLM's template path) ``content_parts`` is vLLM's "openai" content format:
    every message's content as parts, ``""`` and no content told apart (`as_served_parts`).
    """
    inline = meta.get(INLINE_REASONING) if not renders_reasoning else None
    out = messages
    if string_arguments:
        out = _arguments_as_text(out, meta.get(ARGUMENTS_TEXT) or {})
    if inline:
        out = list(messages)
        for i, original in inline.items():
            if i < len(out):
                msg = {k: v for k, v in out[i].items() if k != "reasoning_content"}
                msg["content"] = original
                out[i] = msg
    parts = meta.get(PART_TEXTS) if part_lists or content_parts or tool_parts else None
    if parts:
        moved = meta.get(INLINE_REASONING) or {}  # its text as read above, never twice
        out = list(out)
        for i, texts in parts.items():
            kept = i < len(out) and i not in moved
            is_tool = out[i].get("role") == "tool" if kept else False
            if kept and is_tool and not tool_parts:  # vLLM joins a list-format tool result's
                out[i] = {**out[i], "content": "\n".join(texts)}  # parts, empty ones too
                continue
            kept = kept and (tool_parts if is_tool else part_lists or content_parts)
            if kept:
                out[i] = {**out[i], "content": [{"type": "text", "text": t} for t in texts]}
    developer = meta.get(DEVELOPER) if developer_role else None
    if developer:  # a template that names the role gets it, as vLLM gives it
        out = [
            {**m, "role": "developer"} if i in developer and m.get("role") == "system" else m
            for i, m in enumerate(out)
        ]
    if content_parts and every_part:
        return as_served_parts(out, meta)
    return as_content_parts(out) if content_parts else out


def as_served_parts(messages: list[Message], meta: dict[str, Any]) -> list[Message]:
    """vLLM's "openai" content format (`mask.content_format`): every message but a tool
    result with its content as a list of parts — a string as one text part, ``""`` included,
    a message the row gave no content (`NO_CONTENT`) as no parts."""
    empty = meta.get(NO_CONTENT) or {}
    out = []
    for i, m in enumerate(messages):
        text = m.get("content")
        if m.get("role") != "tool" and isinstance(text, str):
            parts = [] if i in empty and not text else [{"type": "text", "text": text}]
            m = {**m, "content": parts}
        out.append(m)
    return out


def _arguments_as_text(messages: list[Message], texts: dict[int, dict[int, str]]) -> list[Message]:
    out = list(messages)
    for i, m in enumerate(messages):
        calls = m.get("tool_calls")
        if m.get("role") != "assistant" or not calls:
            continue
        written = texts.get(i) or {}
        out[i] = {
            **m,
            "tool_calls": [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": written[k]
                        if k in written
                        else json.dumps(c["function"]["arguments"], ensure_ascii=False),
                    },
                }
                for k, c in enumerate(calls)
            ],
        }
    return out
