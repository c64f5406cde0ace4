"""Row facts `build` reports and `run` acts on: placeholder-only answers, empty think blocks.

- A conversation whose every assistant turn is a placeholder ("OK.", empty) teaches nothing:
  `build` rejects it `no_supervised_turn` and says how many; `run` drops those turns and has the
  target model answer the prompt.
- An answer without reasoning, built under a template that thinks, is trained as an *empty*
  think block (``<think>\\n\\n</think>`` then the answer): the drafter learns that the model skips
  thinking. Whether a template does that is asked of the template itself, with one probe
  conversation rendered with and without reasoning: no per-model list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from draftset.core import defaults, reasons, rules
from draftset.core.modes import NO_REASONING, row_mode
from draftset.core.records import NOT_TRAINED, Conversation, Normalized, PromptOnly
from draftset.mask.limits import RENDER_CAP_FLOOR, RenderLimit, time_limit
from draftset.mask.sandbox import compile_template
from draftset.mask.serving import served_template_kwargs
from draftset.mask.template import TokenizerError, render_within

_ANSWER, _REASONING = "ANSWER-7f3a", "REASONING-7f3a"


def all_placeholder_answers(item: Normalized, placeholders: tuple[str, ...]) -> bool:
    """A conversation whose every assistant turn is a placeholder (an earlier pipeline's pad),
    by the one definition render and verify use."""
    if not isinstance(item, Conversation):
        return False
    turns = [m for m in item.messages if m["role"] == "assistant"]
    return bool(turns) and all(rules.is_placeholder_answer(m, placeholders) for m in turns)


def lacks_reasoning(item: Normalized, template_kwargs: Mapping[str, Any] | None) -> bool:
    """Answers without reasoning and not declared thinking-off (mode ``no_reasoning``)."""
    return isinstance(item, Conversation) and row_mode(item, template_kwargs) == NO_REASONING


def row_kwargs_key(item: Conversation) -> str:
    """The template options the row is rendered with (recorded by `generate`), as a key."""
    meta = item.meta.get("metadata")
    kwargs = meta.get("chat_template_kwargs") if isinstance(meta, dict) else None
    return json.dumps(kwargs if isinstance(kwargs, dict) else {}, sort_keys=True)


# why `draftset run` sends a row to the target (its summary and the manifest's `run` section)
Q_PROMPT = "prompt_only"
Q_PLACEHOLDER = reasons.TURN_PLACEHOLDER  # "placeholder_answer"
Q_MISSING_REASONING = "missing_reasoning"
Q_ALL = "regenerate_all"


def run_sends(
    item: Normalized,
    placeholders: tuple[str, ...],
    template_kwargs: Mapping[str, Any] | None,
    regenerate: str | None,
    thinks: Callable[[str], bool],
) -> tuple[str | None, list[dict[str, Any]]]:
    """The one rule of which selected rows `draftset run` has the target answer: (why, the
    messages sent) or (None, []). `run` queues by it (`pipeline.run_select`); verify re-derives
    from the source row and the manifest, never from run's files, by the same rule
    (`checks.records`), so a change to it holds in both.

    A prompt; a conversation whose every answer is a pad (a placeholder or a prompt copy: the
    pads dropped, a prompt again); by ``regenerate``, every row (``all``) or one whose answers
    lack reasoning under a template that then trains an empty think block
    (``missing_reasoning``: ``thinks`` is `EmptyThinkProbe.thinks`, asked with the row's own
    template options). A row with answers weighted 0 is never sent: a regenerated row would
    lose the weights and train them; built as it is, those turns are context."""
    if isinstance(item, PromptOnly):
        return Q_PROMPT, item.messages
    if not isinstance(item, Conversation) or item.meta.get(NOT_TRAINED):
        return None, []
    if rules.all_padded_answers(item, placeholders):  # "OK." or the prompt copied
        return Q_PLACEHOLDER, [m for m in item.messages if m["role"] != "assistant"]
    if regenerate == "all":
        return Q_ALL, item.messages
    if (
        regenerate == "missing_reasoning"
        and lacks_reasoning(item, template_kwargs)
        and thinks(row_kwargs_key(item))
    ):
        return Q_MISSING_REASONING, item.messages
    return None, []


class EmptyThinkProbe:
    """Does the template train an answer without reasoning as an empty think block?

    Answered once per distinct set of row template options (see `trains_empty_think`).
    ``call`` runs the probe elsewhere (build's helper process, so the main process never
    imports transformers); None runs it here.
    """

    def __init__(
        self,
        template_text: str,
        base_kwargs: Mapping[str, Any],
        call: Callable[..., bool] | None = None,
        *,
        serving_engine: str,
        timeout: float | None = defaults.RENDER_TIMEOUT,
        name: str = "(given as text)",
    ) -> None:
        self.template_text = template_text
        self.base_kwargs = dict(base_kwargs)
        self.serving_engine = serving_engine  # a row's options as it passes them
        self.call = call or partial(trains_empty_think, timeout=timeout, name=name)
        self._cache: dict[str, str] = {}

    def thinks(self, row_kwargs_json: str = "{}") -> bool:
        return bool(self.wrapper(row_kwargs_json))

    def wrapper(self, row_kwargs_json: str = "{}") -> str:
        """The text the template writes before an answer without reasoning (Qwen3's
        ``<think>\n\n</think>\n\n``), or "" when it trains no empty think block."""
        if row_kwargs_json not in self._cache:
            kwargs = served_template_kwargs(
                {**self.base_kwargs, **json.loads(row_kwargs_json)}, self.serving_engine
            )
            found = self.call(self.template_text, kwargs)
            self._cache[row_kwargs_json] = found if isinstance(found, str) else ""
        return self._cache[row_kwargs_json]


def trains_empty_think(
    template_text: str,
    kwargs: dict[str, Any],
    timeout: float | None = defaults.RENDER_TIMEOUT,
    name: str = "(given as text)",
) -> str:
    """Render ``user, assistant`` with and without reasoning and compare the generations: the
    template "thinks" when the generation with reasoning, minus the reasoning text, equals the
    generation without it (same wrapper, nothing inside) and that wrapper is not blank. A
    template that cannot render the probe says False; one that passes a bound (``timeout``
    for the three renders, a row's size cap on each) is a `TokenizerError` naming ``name``.
    Returns that wrapper (what the generation writes before the answer), "" when it does not
    think."""
    try:
        compiled = compile_template(template_text)

        def render(msgs: list[dict[str, Any]], gen: bool) -> str:
            return render_within(
                compiled,
                RENDER_CAP_FLOOR,
                messages=msgs,
                tools=None,
                documents=None,
                add_generation_prompt=gen,
                **kwargs,
            )

        user = {"role": "user", "content": "Q"}
        plain = {"role": "assistant", "content": _ANSWER}
        with_r = {**plain, "reasoning_content": _REASONING, "thinking": _REASONING}
        with time_limit(timeout):
            prompt = render([user], True)
            full_plain, full_r = render([user, plain], False), render([user, with_r], False)
    except RenderLimit as exc:
        raise TokenizerError(
            f"chat template {name}: a probe render (does it train an empty think block)"
            f" stopped: {exc.message or exc}"
        ) from None
    except Exception:
        return ""
    if not (full_plain.startswith(prompt) and full_r.startswith(prompt)):
        return ""
    gen_plain, gen_r = full_plain[len(prompt) :], full_r[len(prompt) :]
    if _REASONING not in gen_r or _ANSWER not in gen_plain:
        return ""
    wrapper = gen_plain[: gen_plain.index(_ANSWER)]
    squash = re.compile(r"\s+")
    same = squash.sub("", gen_r.replace(_REASONING, "")) == squash.sub("", gen_plain)
    return wrapper if same and wrapper.strip() else ""
