"""A ``--chat-template`` written for another model family than the tokenizer's, found when the
template loads (one usage line, exit 2), not after every row is rejected ``no_end_of_turn``.

The template renders a two-exchange conversation. It is another family's when that render
holds none of the tokenizer's stop tokens (``generation_config.json``'s, its EOS, any
``--eot-token``) anywhere, not even as a later turn's header (GLM's ``<|user|>``: draftset reads
the stop after an answer from the next turn, `mask.render.stop_after_answer`), and it writes
special tokens the tokenizer does not have: ``<|…|>``, ``<｜…｜>``, ``<|…>`` or ``<…|>`` ones
(Llama's ``<|eot_id|>``, ChatML's ``<|im_end|>``, DeepSeek's ``<｜User｜>``, Gemma-4's
``<|turn>``), or, when it writes none of the tokenizer's own special tokens either (its BOS
aside: a template writes ``bos_token`` whatever it is), ``<snake_case>`` markers (Gemma's
``<start_of_turn>``). A template writing no special token at all (plain text markers) is never
refused here: prompt-only builds need no stop.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

_SPECIAL_SHAPE = re.compile(r"<\|[^|<>\s]{1,64}\|>|<｜[^｜<>\s]{1,64}｜>|<\|\w{1,64}>|<\w{1,64}\|>")
_MARKER_SHAPE = re.compile(r"<[A-Za-z]+(?:_[A-Za-z]+)+>")
_USER = "DRAFTSET_FAMILY_PROBE_USER_7f3a"
_ANSWER = "DRAFTSET_FAMILY_PROBE_ANSWER_7f3a"
_SHOWN = 4  # foreign tokens named in the message


def foreign_template_problem(
    render: Callable[..., str],
    stops: Collection[str],
    vocab: Collection[str],
    special: Collection[str],
    template: str,
    tokenizer: str,
) -> str | None:
    """Why the template is another family's than the tokenizer's (one line), or None.

    ``render(messages)`` renders without a generation prompt; ``stops`` are the tokens a server
    stops on, ``vocab`` every token of the tokenizer, ``special`` its special tokens but its
    BOS. A render
    that fails says nothing here (the rows say it)."""
    messages: list[dict[str, Any]] = []
    for i in range(2):
        messages += [
            {"role": "user", "content": f"{_USER}{i}"},
            {"role": "assistant", "content": f"{_ANSWER}{i}"},
        ]
    try:
        text = render(messages)
    except Exception:
        return None
    if not isinstance(text, str) or any(stop in text for stop in stops):
        return None
    foreign = [tok for tok in dict.fromkeys(_SPECIAL_SHAPE.findall(text)) if tok not in vocab]
    if not foreign and not any(tok in text for tok in special):
        foreign = [tok for tok in dict.fromkeys(_MARKER_SHAPE.findall(text)) if tok not in vocab]
    if not foreign:
        return None
    named = ", ".join(repr(tok) for tok in foreign[:_SHOWN])
    more = f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else ""
    return (
        f"chat template {template} is for another model family than tokenizer {tokenizer}: it"
        f" writes none of the tokenizer's stop tokens ({', '.join(stops)}) and writes special"
        f" tokens the tokenizer does not have ({named}{more}); give the template of the"
        " tokenizer's model (or leave --chat-template out to use its own)"
    )
