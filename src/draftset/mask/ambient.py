"""What a chat template reads besides its arguments: the clock.

transformers gives every template two functions: ``raise_exception`` (pure) and
``strftime_now(format)``, which is ``datetime.now().strftime(format)`` in the rendering
process. A template that calls it (gpt-oss: ``Current date: 2026-12-02``) renders differently
on another day, so a set built on one day would fail `verify` on the next, and a row generated
by a server on one day would be masked against another day's prompt. draftset therefore renders
with one recorded instant: the build's own (taken once, recorded in the manifest as
``template.now`` when the template calls ``strftime_now``), or, for a row `draftset generate`
wrote, the instant its answers were asked for (``metadata.template_now``). The instant is given
to the template as a render variable of the same name, which shadows the global in Jinja: no
library is patched, and transformers' ``apply_chat_template`` passes it the same way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

CLOCK = "strftime_now"
"""The clock function transformers' template environment provides."""


class FrozenClock:
    """``strftime_now`` at a fixed instant (picklable: it travels to workers in the kit).

    A plain class, not a dataclass: `apply_chat_template` turns dataclass arguments into dicts.
    """

    __slots__ = ("now",)

    def __init__(self, now: str) -> None:
        self.now = now  # ISO 8601, local time without zone: what datetime.now() gives

    def __call__(self, fmt: str) -> str:
        return datetime.fromisoformat(self.now).strftime(fmt)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FrozenClock) and other.now == self.now

    def __hash__(self) -> int:
        return hash(self.now)

    def __repr__(self) -> str:
        return f"FrozenClock({self.now!r})"


def reads_clock(template_text: str) -> bool:
    """Whether the template can read the clock (it names ``strftime_now``)."""
    return CLOCK in template_text


def now_iso() -> str:
    """This process's local time now, to the second (what ``strftime_now`` would read)."""
    return datetime.now().replace(microsecond=0).isoformat()


def valid_now(value: Any) -> str | None:
    """``value`` when it is an ISO date-time ``FrozenClock`` can read, else None."""
    if not isinstance(value, str):
        return None
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return None
    return value


def clock_kwargs(now: str | None) -> dict[str, Any]:
    """Render variables that fix the clock at ``now`` (none when ``now`` is None)."""
    return {CLOCK: FrozenClock(now)} if now else {}


def split_clock(kwargs: dict[str, Any]) -> tuple[dict[str, Any], FrozenClock | None]:
    """(kwargs without a frozen clock, that clock or None)."""
    clock = kwargs.get(CLOCK)
    if not isinstance(clock, FrozenClock):
        return kwargs, None
    return {k: v for k, v in kwargs.items() if k != CLOCK}, clock


def render_stock(
    template_text: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    kwargs: dict[str, Any],
    clock: FrozenClock | None,
    with_indices: bool = False,
    alias: bool = True,
    cap: int | None = None,
) -> tuple[str, list[tuple[int, int]]]:
    """transformers' own render (`render_jinja_template`'s steps, its stock compiled template)
    with the clock fixed: ``(text, {% generation %} spans when with_indices)``.

    `apply_chat_template` rebuilds every argument out of plain JSON types, so a clock function
    given there reaches the template as an inert string; here the messages, tools and options
    go through that same conversion and the clock is added after it (``clock`` None: the
    template's own ``strftime_now``). ``alias`` False leaves out transformers' aliasing of
    reasoning fields (``thinking`` beside ``reasoning_content``, transformers 5.21+): the
    messages already carry the fields the serving engine gives (vLLM 0.33 pins transformers
    < 5.21: `ChatTemplate.served_messages`). ``cap`` (without indices): the render stops
    with `RenderTooLarge` once it has written more characters, as build's does, instead of
    holding all it writes (a template writing without end filled memory until the timer).
    """
    from transformers.utils import chat_template_utils as ctu  # lazy: ~0.7 s

    compiled = ctu._compile_jinja_template(template_text)
    chat = ctu._plain_template_data(messages)
    if alias:
        chat = ctu._alias_reasoning_fields(chat)
    variables = {
        "messages": chat,
        "tools": ctu._plain_template_data(tools),
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        **ctu._plain_template_data(kwargs),
        **({CLOCK: clock} if clock is not None else {}),
    }
    if not with_indices:
        if cap is None:
            return compiled.render(**variables), []
        from draftset.mask.limits import join_within  # lazy: keeps ambient's imports light

        return join_within(compiled.generate(**variables), cap), []
    text, spans = ctu._render_with_assistant_indices(compiled_template=compiled, **variables)
    return text, [(int(a), int(b)) for a, b in spans]
