"""The values that flow between stages.

Every input row becomes exactly one of: a `Conversation` (goes on to render & mask), a
`PromptOnly` (queued for generation, never trained on), a `PreTokenized` row (validated and
passed through) or a `Reject` (written to rejects.jsonl with a stable reason code). Accounting
counts these outcomes, so nothing can leave the stream without being counted.

Normalized message schema (OpenAI chat form, what HF chat templates expect):

- ``role``: one of ``system``, ``user``, ``assistant``, ``tool``;
- ``content``: always a ``str`` (``""`` allowed);
- assistant only, optional: ``reasoning_content`` (str, present when the row gave reasoning, ``""``
  included: a template reads an empty string as given),
  ``tool_calls``: ``[{"type": "function", "function": {"name": str, "arguments": dict}}]`` (an
  ``"id"`` key is kept when the source had one);
- tool only, optional: ``tool_call_id`` (str), ``name`` (str).

``tools`` is ``None`` or a list of ``{"type": "function", "function": {...}}`` schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass(slots=True)
class RawRow:
    """One row as read from a source file, before any interpretation.

    ``data`` is the parsed JSON object (or Arrow row as a dict); when the row could not even be
    parsed, ``data`` is None and ``reject`` says why.
    """

    source: str
    row: int
    data: dict[str, Any] | None
    reject: Reject | None = None
    # the file inside a source of several files (relative to the source folder), else None:
    # ids clashing between two files of one source are told apart by it (`IdRegistry`)
    file: str | None = None


INLINE_REASONING = "inline_reasoning"
"""``Conversation.meta`` key: message index -> assistant content as the row wrote it, for turns
whose leading ``<think>…</think>`` was moved to ``reasoning_content``."""
REASONING_UNTERMINATED = "reasoning_unterminated"
"""``Conversation.meta`` key: message index -> True for answers whose think block the
normalizer found unclosed: cut off, never supervised (`rules.cut_off_answers`); a preset's
rows say it in their ``metadata``, as `generate` says ``metadata.truncated``."""
NOT_TRAINED = "not_trained"
"""``Conversation.meta`` key: message index -> True for answers the row weighted 0 (OpenAI's
``weight``, LLaMA-Factory's ``loss_weight``): context, never supervised
(`rules.never_supervised`)."""
DEVELOPER = "developer"
"""``Conversation.meta`` key: message index -> True for messages the row gave as ``developer``
(normalized to ``system``). vLLM gives a template that names the role the message as
``developer``; for any other it converts it to ``system`` and merges every system message into
one at the start (`mask.reads.as_template_reads`, `rules.unservable`)."""
PART_TEXTS = "text_parts"
"""``Conversation.meta`` key: message index -> the texts of its content's text parts, for
messages given as more than one part. The content itself is the non-empty ones joined by a
newline, as vLLM joins them for a template that reads content as a string; a template that
reads lists of parts is given the parts (`mask.reads.as_template_reads`), as vLLM passes them
(a tool result's joined by a newline, empty ones too)."""
OTHER_TEXT_PARTS = "other_text_parts"
"""``Conversation.meta`` key: message index -> the types of its text parts other than
``text`` (``refusal``, ``input_text``, ``output_text``): read as text, as vLLM's template path
reads them; its harmony path reads only a part's ``text`` key, so there such a row is not
served as given (`rules.unservable`)."""
NO_CONTENT = "no_content"
"""``Conversation.meta`` key: message index -> True for messages (other than tool results) the
row gave no content at all (null, absent, an empty list of parts, a ShareGPT call turn): their
normalized content is ``""``, but vLLM hands a template that loops over content such a message
as no parts (``[]``) where ``""`` is one empty text part (`mask.reads.as_served_parts`)."""
ARGUMENTS_TEXT = "arguments_text"
"""``Conversation.meta`` key: message index -> {call index: the call's ``arguments`` exactly as
the row wrote them, a JSON string}, for templates that read arguments as a string."""


@dataclass(slots=True)
class Conversation:
    """A normalized chat that has at least one assistant turn."""

    id: str
    source: str
    row: int
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    # free-form facts carried along (e.g. thinking mode, server token ids from `generate`)
    meta: dict[str, Any] = field(default_factory=dict)
    # the file inside a source of several files (relative to the source folder), else None:
    # its reject lines name it (`in_file`)
    file: str | None = None


@dataclass(slots=True)
class PromptOnly:
    """A chat with no assistant answer yet: goes to prompts.jsonl, never into training."""

    id: str
    source: str
    row: int
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # the file inside a source of several files (relative to the source folder), else None:
    # its reject lines name it (`in_file`)
    file: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Its prompts.jsonl line (what `generate` answers; verify compares it whole)."""
        line: dict[str, Any] = {"id": self.id, "messages": self.messages}
        if self.tools:
            line["tools"] = self.tools
        line["metadata"] = {"source": self.source, "row": self.row}
        return line


@dataclass(slots=True)
class PreTokenized:
    """A row that already carries ``input_ids`` and ``loss_mask`` (validated, passed through)."""

    id: str
    source: str
    row: int
    input_ids: list[int]
    loss_mask: list[int]
    # the file inside a source of several files (relative to the source folder), else None:
    # its reject lines name it (`in_file`)
    file: str | None = None


@dataclass(slots=True)
class Reject:
    """A row that cannot be used, with a stable reason code (see `reasons`)."""

    source: str
    row: int
    id: str | None
    reason: str
    message: str
    # the file inside a source of several files (relative to the source folder), else None:
    # its reject lines name it (`in_file`)
    file: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Its rejects.jsonl line: ``file`` only for a row of a source of several files."""
        line: dict[str, Any] = {"source": self.source, "row": self.row}
        if self.file is not None:
            line["file"] = self.file
        line.update(id=self.id, reason=self.reason, message=self.message)
        return line


class RowProblem(Exception):
    """Why one row cannot be used: a stable reason code (see `reasons`) and a message.

    The one row-problem type: readers return it as a value for a line that does not parse,
    normalizers and preset transforms raise it; either way it becomes that row's `Reject`,
    never a run failure.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def reject(self, source: str, row: int, row_id: str | None) -> Reject:
        """This problem as the row's `Reject`."""
        return Reject(source, row, row_id, self.reason, self.message)


Normalized = Conversation | PromptOnly | PreTokenized | Reject


def in_file(item: Normalized, file: str | None) -> Normalized:
    """``item`` marked as a row of ``file`` (a source of several files; None: of one file):
    every reject made of it later (selection, the row step) names that file too."""
    if file is not None:
        item.file = file
    return item
