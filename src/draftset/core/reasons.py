"""Stable reason codes.

Row-level codes end up in ``rejects.jsonl`` (``reason``) and in the manifest counts; turn-level
codes explain why an assistant turn was kept as context only (not supervised). Codes are part of
the output format: never rename one, only add.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from draftset.core import records  # meta keys (not reason codes: kept out of this namespace)

# --- row rejects: reading -------------------------------------------------------------------
INVALID_JSON = "invalid_json"  # a line / document that does not parse as JSON
INVALID_UTF8 = "invalid_utf8"  # bytes that are not UTF-8
NOT_AN_OBJECT = "not_an_object"  # a JSON value that is not an object (row must be a dict)

# --- row rejects: normalizing ---------------------------------------------------------------
UNKNOWN_FORMAT = "unknown_format"  # no known shape matches the row's keys
UNKNOWN_ROLE = "unknown_role"  # a role name not in the documented table (never guessed)
EMPTY_CONVERSATION = "empty_conversation"  # no messages at all, or a prompt of blank text
INVALID_CONTENT = "invalid_content"  # wrong types (content not str/parts, role not str, ...)
UNSUPPORTED_CONTENT = "unsupported_content"  # e.g. image/audio parts in a text-only pipeline
INVALID_TOOL_CALL = "invalid_tool_call"  # tool call without a name, arguments not JSON, ...
INVALID_TOOLS = "invalid_tools"  # `tools` not a list / JSON list of schemas
INVALID_PRETOKENIZED = "invalid_pretokenized"  # input_ids/loss_mask malformed
UNDESIRABLE_EXAMPLE = "undesirable_example"  # preference / KTO rows marked bad (label false)
DUPLICATE_ID = "duplicate_id"  # an id used in this run, even as source:id and source:row:id

# --- row rejects: render & mask / encode -------------------------------------------------
TEMPLATE_ERROR = "template_error"  # the chat template raised (message is the template's own)
TEMPLATE_TIMEOUT = "template_timeout"  # rendering the row took longer than --render-timeout
TEMPLATE_TOO_LARGE = "template_too_large"  # a render far longer than the row's own text
NO_SUPERVISED_TURN = "no_supervised_turn"  # every assistant turn is context only
TOO_LONG = "too_long"  # longer than --max-length with --truncation drop
TOO_FEW_SUPERVISED_TOKENS = "too_few_supervised_tokens"  # below --min-supervised-tokens
TEMPLATE_DROPS_CONTENT = "template_drops_content"  # a generation lacks its message's text
INTERNAL_ERROR = "internal_error"  # a bug met on this row: the row is rejected, the run goes on
# an assistant answer holds a special token's text (a server leaked its stop token): it would
# tokenize to a control token the model never writes there (docs/semantics.md)
SPECIAL_TOKEN_IN_ANSWER = "special_token_in_answer"
# the generation server's own prompt tokens for an answer (`generate --return-token-ids`) are
# not the row's tokens before it: the answer was generated after another prompt
SERVER_PROMPT_DIFFERS = "server_prompt_differs"

# --- row rejects: mixture (dedup / decontamination) ----------------------------------------
DUPLICATE = "duplicate"
NEAR_DUPLICATE = "near_duplicate"
CONTAMINATED = "contaminated"

# --- row rejects: generation in `draftset run` (same codes as `generate`'s errors file) -------
GEN_LENGTH = "length"  # an answer hit max_tokens
GEN_TOOL_MISMATCH = "tool_mismatch"  # the model's tool calls differ from the recorded ones
GEN_NOTHING = "nothing_to_generate"  # no user turn or tool result to answer
GEN_HTTP_4XX = "http_4xx"  # the server refused the request
GEN_RETRIES_EXHAUSTED = "retries_exhausted"  # 429 / 5xx / timeouts on every try
GEN_INVALID_RESPONSE = "invalid_response"  # every try got a body that is not a completion
GEN_PRETOKENIZED = "pretokenized"  # no text to send
GEN_MODEL_MISMATCH = "model_mismatch"  # the answer came from another model than the run's
GEN_RESPONSE_TOO_LARGE = "response_too_large"  # the body (or its gzip decoding) was too large
GEN_UNFINISHED = "unfinished"  # the server, not the model, ended an answer
GEN_INTERNAL_ERROR = "generate_internal_error"  # a draftset bug met on the row in generate

# --- outcomes that are not rejects ----------------------------------------------------------
NEEDS_GENERATION = "needs_generation"  # prompt-only: written to prompts.jsonl

# --- turn-level: why an assistant turn is context only -------------------------------------
TURN_NOT_GENERABLE = "not_generable"  # render(0..j) does not start with render(0..j-1, gen=True)
TURN_NO_END_OF_TURN = "no_end_of_turn"  # no end-of-turn token after the generation prompt
TURN_HISTORY_RENDER_DIFFERS = "history_render_differs"  # full render shows it differently
TURN_PLACEHOLDER = "placeholder_answer"  # "OK.", "", whitespace: never supervised
TURN_PROMPT_COPY = "prompt_copy"  # the answer is its user turn verbatim: never supervised
TURN_WEIGHT_ZERO = "weight_zero"  # the row weighted the answer 0 (OpenAI's `weight`, ...)
# `all`: the answer's generation starts where the previous supervised one ends (two assistant
# messages in a row, no header between): one run would hold two generations
TURN_FOLLOWS_ANSWER = "follows_answer"
TURN_NOT_LAST = "not_last_turn"  # --turns last: earlier turns are context by request
TURN_NO_PROMPT = "no_prompt"  # the first message: nothing before it to generate from
# the answer was cut off (max tokens, an unclosed think block): the template would close it with
# markup and an end-of-turn token the model never generated
TURN_TRUNCATED = "answer_truncated"
# `all`: the row's tokens before the turn are not the served prompt's tokens (same text,
# tokenized in other pieces: e.g. a history generation's edge merges differently)
TURN_HISTORY_TOKENS_DIFFER = "history_tokens_differ"
# the model ended the answer on another of its stop tokens than the one the template writes
# after it (Qwen3 on <|endoftext|> where the template writes <|im_end|>), as generate recorded
TURN_OTHER_STOP = "other_stop_token"
# the generation server's completion ids for the answer spell other text than the template
# renders for it (its parsers returned a message the template writes back otherwise)
TURN_SERVER_TEXT_DIFFERS = "server_completion_differs"

READING_REASONS = frozenset(
    {
        INVALID_JSON,
        INVALID_UTF8,
        NOT_AN_OBJECT,
        UNKNOWN_FORMAT,
        UNKNOWN_ROLE,
        EMPTY_CONVERSATION,
        INVALID_CONTENT,
        UNSUPPORTED_CONTENT,
        INVALID_TOOL_CALL,
        INVALID_TOOLS,
        INVALID_PRETOKENIZED,
        UNDESIRABLE_EXAMPLE,
    }
)
"""Reasons of reading and normalizing a row (its own content): one that reads now was fixed."""

ROW_STEP_REASONS = frozenset(
    {
        TEMPLATE_ERROR,
        TEMPLATE_TIMEOUT,
        TEMPLATE_TOO_LARGE,
        NO_SUPERVISED_TURN,
        TOO_LONG,
        TOO_FEW_SUPERVISED_TOKENS,
        TEMPLATE_DROPS_CONTENT,
        INTERNAL_ERROR,
        SPECIAL_TOKEN_IN_ANSWER,
        UNSUPPORTED_CONTENT,
        INVALID_PRETOKENIZED,
        SERVER_PROMPT_DIFFERS,
    }
)
"""Reasons the row step (render, mask, encode) gives; every other one is decided by reading,
selecting or generating, which verify re-runs, so a row those stages pass cannot carry it."""

ROW_REJECT_REASONS = (
    READING_REASONS
    | ROW_STEP_REASONS
    | frozenset(
        {
            DUPLICATE_ID,
            DUPLICATE,
            NEAR_DUPLICATE,
            CONTAMINATED,
            GEN_LENGTH,
            GEN_TOOL_MISMATCH,
            GEN_NOTHING,
            GEN_HTTP_4XX,
            GEN_RETRIES_EXHAUSTED,
            GEN_INVALID_RESPONSE,
            GEN_PRETOKENIZED,
            GEN_MODEL_MISMATCH,
            GEN_RESPONSE_TOO_LARGE,
            GEN_UNFINISHED,
            GEN_INTERNAL_ERROR,
        }
    )
)

EXPLANATIONS: dict[str, str] = {
    INVALID_JSON: "the line or document does not parse as JSON",
    INVALID_UTF8: "bytes that are not UTF-8",
    NOT_AN_OBJECT: "a JSON value that is not an object",
    UNKNOWN_FORMAT: "no known row shape matches its keys (see --format / --field)",
    UNKNOWN_ROLE: "a role name draftset does not know (never guessed)",
    EMPTY_CONVERSATION: "no messages at all, or a prompt with no text in any message",
    INVALID_CONTENT: "a message of the wrong type (content not text or parts, role not text)",
    UNSUPPORTED_CONTENT: "image, audio or other non-text parts, or a shape the serving engine"
    " would not render as given (docs/semantics.md)",
    INVALID_TOOL_CALL: "a tool call without a name or with arguments that are not JSON",
    INVALID_TOOLS: "`tools` is not a list of tool schemas",
    INVALID_PRETOKENIZED: "input_ids / loss_mask malformed",
    UNDESIRABLE_EXAMPLE: "a preference row marked bad",
    DUPLICATE_ID: "an id already used in this run",
    TEMPLATE_ERROR: "the chat template raised on this row",
    TEMPLATE_TIMEOUT: "rendering took longer than --render-timeout",
    TEMPLATE_TOO_LARGE: "the render is far longer than the row's own text",
    NO_SUPERVISED_TURN: "every assistant turn is context only (see the turn reasons)",
    TOO_LONG: "longer than --max-length (with --truncation drop)",
    TOO_FEW_SUPERVISED_TOKENS: "fewer supervised tokens than --min-supervised-tokens",
    TEMPLATE_DROPS_CONTENT: "the template leaves out an answer's text or tool names",
    INTERNAL_ERROR: "a draftset bug met on this row (please report it)",
    SERVER_PROMPT_DIFFERS: "the generation server's prompt tokens for an answer are not the"
    " row's tokens before it (it rendered another prompt: template, kwargs or tokenizer)",
    DUPLICATE: "the same conversation as an earlier row (--dedup)",
    NEAR_DUPLICATE: "nearly the same prompt as an earlier row (--dedup near)",
    CONTAMINATED: "shares a 13-word n-gram with a benchmark prompt (--decontaminate)",
    GEN_LENGTH: "the generated answer hit max_tokens",
    GEN_TOOL_MISMATCH: "the model's tool calls differ from the recorded ones",
    GEN_NOTHING: "no user turn or tool result to answer",
    GEN_HTTP_4XX: "the server refused the request",
    GEN_RETRIES_EXHAUSTED: "429 / 5xx / timeouts on every try",
    GEN_INVALID_RESPONSE: "every try got a body that is not a chat completion",
    GEN_PRETOKENIZED: "pre-tokenized: no text to send",
    TURN_NOT_GENERABLE: "the template renders the turn in a way that does not continue the"
    " generation prompt (the model never generates it so)",
    TURN_NO_END_OF_TURN: "no end-of-turn token after the generation",
    TURN_HISTORY_RENDER_DIFFERS: "the template renders this earlier turn differently in the"
    " history than the model generated it (e.g. reasoning stripped): --turns each supervises"
    " every turn in its own row",
    TURN_PLACEHOLDER: 'a placeholder answer ("OK.", empty): never supervised',
    TURN_PROMPT_COPY: "the answer is its user turn verbatim (an echo, or padding): never"
    " supervised",
    TURN_WEIGHT_ZERO: "the row weights the answer 0 (`weight`, `loss_weight`): not to train on",
    TURN_FOLLOWS_ANSWER: "the answer follows the previous supervised answer with no prompt"
    " between (two assistant messages in a row): in one row its run would merge with that one",
    TURN_NOT_LAST: "--turns last: earlier turns are context by request",
    TURN_NO_PROMPT: "the first message: nothing before it to generate it from",
    TURN_TRUNCATED: "the answer was cut off (max tokens, an unclosed think block): its"
    " rendered end and end-of-turn token were never generated",
    TURN_OTHER_STOP: "the model ended this answer on another stop token than the one the"
    " template writes after it (recorded by generate): that token was never generated there",
    TURN_SERVER_TEXT_DIFFERS: "the generation server's token ids for this answer spell other"
    " text than the template renders for its message (recorded by generate): that text was"
    " never generated there",
    TURN_HISTORY_TOKENS_DIFFER: "the row's tokens before this turn differ from the served"
    " prompt's (the history re-tokenizes differently): --turns each supervises every turn in"
    " its own row",
    SPECIAL_TOKEN_IN_ANSWER: "an answer holds a special token's text (a leaked stop token?),"
    " which would encode as the control token itself",
    GEN_MODEL_MISMATCH: "the answer came from another model than the run's",
    GEN_UNFINISHED: "the server ended the answer, not the model (finish_reason abort or"
    " content_filter, or a stop string)",
    GEN_INTERNAL_ERROR: "a draftset bug met on this row while generating its answers (please"
    " report it); --retry-errors asks again",
    GEN_RESPONSE_TOO_LARGE: "the server's response body (or its gzip decoding) was larger than"
    " the largest accepted (32 MiB by default)",
}
"""One line per reason code, for people: the report explains every code it shows."""

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
