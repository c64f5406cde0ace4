"""Stable reason codes.

Row-level codes end up in ``rejects.jsonl`` (``reason``) and in the manifest counts; turn-level
codes explain why an assistant turn was kept as context only (not supervised). Codes are part of
the output format: never rename one, only add. The rules that decide them (which answer is
never supervised, what a template dropped) are `core/rules.py`'s.
"""

from __future__ import annotations

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
