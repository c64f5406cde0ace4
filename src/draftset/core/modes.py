"""A row's thinking mode: ``thinking``, ``no_thinking`` or ``no_reasoning``.

A fact about the row alone, read by selection (mode balance, `select/modes.py`) and by the row
step (`mask/hygiene.py`: answers without reasoning under a thinking template), so it lives
below both.

Modes (`row_mode`), first match wins:

- ``thinking``: an assistant turn has non-empty ``reasoning_content`` (recorded reasoning wins
  over any "off" flag: the row does hold a thinking answer);
- ``no_thinking``: thinking is explicitly off for the row: ``metadata.chat_template_kwargs.
  enable_thinking`` is false, ``metadata.thinking == "off"`` (set by the Nemotron presets from
  the set's ``reasoning: off`` column), the Llama-Nemotron system prompt is exactly
  ``detailed thinking off``, a system turn holds ``/no_think`` (Nemotron v1.5 / Nano-2 and
  Qwen3 soft switch), or the run renders with ``enable_thinking=False``;
- ``no_reasoning``: everything else (plain chat / instruction data, no statement either way).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from draftset.core.records import Conversation, Normalized, PreTokenized, PromptOnly

THINKING = "thinking"
NO_THINKING = "no_thinking"
NO_REASONING = "no_reasoning"
MODES: tuple[str, ...] = (THINKING, NO_THINKING, NO_REASONING)

NEMOTRON_OFF_PROMPT = "detailed thinking off"
NO_THINK_SWITCH = "/no_think"


def _meta_says_off(meta: Mapping[str, Any]) -> bool:
    metadata = meta.get("metadata")
    for holder in (meta, metadata if isinstance(metadata, Mapping) else {}):
        kwargs = holder.get("chat_template_kwargs")
        if isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is False:
            return True
        thinking = holder.get("thinking")
        if thinking is False or (isinstance(thinking, str) and thinking.lower() == "off"):
            return True
    return False


def _prompt_says_off(messages: Sequence[Mapping[str, Any]]) -> bool:
    for m in messages:
        if m.get("role") != "system":
            continue
        text = m.get("content") or ""
        if text.strip().lower() == NEMOTRON_OFF_PROMPT or NO_THINK_SWITCH in text:
            return True
    return False


def row_mode(
    item: Normalized, template_kwargs: Mapping[str, Any] | None = None, turns: str = "all"
) -> str:
    """The row's mode, one of `MODES` (rules in the module docstring).

    ``template_kwargs`` are the run's template options: ``enable_thinking=False`` there makes
    every row without recorded reasoning ``no_thinking``. ``turns="last"``: the reasoning that
    counts is the last answer's, the one answer trained (an earlier answer's reasoning trains
    nothing there).
    """
    if isinstance(item, PreTokenized):
        return NO_REASONING  # no messages to look at
    if not isinstance(item, Conversation | PromptOnly):
        raise TypeError(f"row_mode needs a Conversation or PromptOnly, got {type(item).__name__}")
    answers = [m for m in item.messages if m.get("role") == "assistant"]
    if any(m.get("reasoning_content") for m in (answers[-1:] if turns == "last" else answers)):
        return THINKING
    if (
        _meta_says_off(item.meta)
        or _prompt_says_off(item.messages)
        or (template_kwargs is not None and template_kwargs.get("enable_thinking") is False)
    ):
        return NO_THINKING
    return NO_REASONING
