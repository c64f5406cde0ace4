"""`GenerateOptions`: what one `draftset generate` job runs with, resolved and checked (by
`draftset.api.generate` from `config.schema.GenerateArgs`, or by `draftset run` from a
recipe's `generate:` section)."""

from __future__ import annotations

import functools
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftset.config.fields import (
    boolean_text_problem,
    json_value_problem,
    option_name,
    scheme_hint,
)
from draftset.config.schema import GenerateArgs
from draftset.core import defaults
from draftset.core.errors import UsageError
from draftset.core.naming import on_command_line
from draftset.generation.http import concurrency_problem
from draftset.generation.wire import not_visible_ascii, parse_target, redact_url
from draftset.sources.read import Source

API_KEY_ENV = ("DRAFTSET_API_KEY", "OPENAI_API_KEY")
"""Environment variables read, in this order, for the API key when ``--api-key`` is not given."""

SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "max_tokens", "seed")
RESERVED_BODY_KEYS = frozenset(
    {"model", "messages", "tools", "chat_template_kwargs", "stream", "n"}
)
DEDICATED = "use the dedicated options"
RESERVED_WHY = {
    "n": "draftset keeps one answer per request (choice 0): the server would generate n and all"
    " but one be thrown away; to answer a prompt twice, list its row twice under another id",
    "stream": "draftset reads whole responses, not a stream of server-sent events",
}
"""Why ``--extra-body`` may not set a reserved field that no option sets (the others: the
dedicated options, or the rows, set them)."""

UNKEPT_BODY_FIELDS = ("logprobs", "top_logprobs", "prompt_logprobs")
"""Request fields that have the server compute and send what `generate` never keeps: refused
unless off (false, 0 or null)."""

UNKEPT_WHY = (
    "draftset keeps no log-probabilities: the server would compute and send them with every"
    " token (some 100 bytes a token, 2 KB with top_logprobs 20) to be thrown away, and a long"
    " answer's response could go over --max-response-bytes, its row lost (the longest answers"
    " first)"
)

PROMPT_BODY_KEYS = frozenset(
    {
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "add_special_tokens",
        "documents",
        "truncate_prompt_tokens",
        "echo",
    }
)
"""vLLM's (and SGLang's) request fields that render, tokenize, cut or echo the prompt otherwise
than the target's template with its generation prompt, which is what `build` renders: an answer
to such a prompt would be trained after a prompt it was not generated from."""

NO_VALUE = object()
"""`ANSWER_BODY_FIELDS`: no value of the field may be sent."""

ANSWER_BODY_FIELDS: dict[str, tuple[Any, str]] = {
    "include_reasoning": (
        True,
        "the server would leave the reasoning the model generated out of its answer (vLLM),"
        " and the row would be trained as an answer without thinking",
    ),
    "parallel_tool_calls": (
        True,
        "the server would keep only the model's first tool call (vLLM), and the row would be"
        " trained without the calls the model made after it",
    ),
    "ignore_eos": (
        False,
        "the server would go on past the model's end of turn (vLLM drops its text) until"
        " max_tokens or another stop token, and the row would train what followed the model's"
        " own end as one answer",
    ),
    "thinking_token_budget": (
        None,
        "the server would end the model's thinking itself at that many tokens (vLLM forces the"
        " end-of-thinking token), and the row would train an end of thinking the model did not"
        " write",
    ),
    "tool_choice": (
        NO_VALUE,
        "'required' or a named tool has the model write its calls as a JSON list under a"
        " grammar, which build renders as the template's call markup the model never wrote;"
        " 'none' cuts the calls out of the answer (vLLM), and templates read it into the"
        " prompt; 'auto' is what the server picks for a row with tools, and vLLM refuses the"
        " field on a row without (each such row an http_4xx error)",
    ),
}
"""Request fields whose other values make the server's answer hold something else than the
model generated after the prompt build renders (vLLM 0.33), with the one value allowed: the
default, sent or not (`NO_VALUE`: none, the field is left out)."""


class GenerateUsageError(UsageError):
    """Unusable arguments: one line on stderr, exit code 2."""


class GenerateCallError(GenerateUsageError, TypeError):
    """A call of `api.generate` its signature does not take (``generate(src, url, out)``):
    the TypeError Python raises for it, in one line that names the keywords (exit code 2)."""


def _named(section: str | None) -> Callable[[str], str]:
    """How messages name generate's options: as the caller gave them (``section`` None: the
    command line's flags, the API's keywords, `option_name`), or as a recipe's keys under
    ``section`` (``generate.``)."""
    if section is None:
        return lambda name: option_name(GenerateArgs, name)
    return lambda name: f"{section}{name}"


def extra_body_clash(
    extra_body: dict[str, Any],
    settings: Any,
    kwargs: dict[str, Any],
    section: str | None = None,
) -> str | None:
    """Why ``extra_body`` may not go with the options, or None: a request field that a
    dedicated option also sets, to another value (``settings``: the parsed options, whose
    sampling options and ``return_token_ids`` are None or False when not given: `generate`'s
    or a recipe's `generate:` section; ``kwargs``: the template kwargs, whose
    ``reasoning_effort`` is sent as that field too). The body builder lets the extra body win,
    so ``--temperature 0.6`` went out as 1.5, and the run file recorded that while the user
    believed 0.6; a contradiction is refused, as ``enable_thinking``'s is. ``section``: the
    recipe's section the options come from (`_named`), None for `generate`'s own."""
    options = {k: getattr(settings, k) for k in (*SAMPLING_FLAGS, "return_token_ids")}
    named = _named(section)
    body_name = named("extra_body")
    given = {
        key: (named(key), value)
        for key, value in options.items()
        if value is not None and value is not False
    }
    # a recipe's template kwargs are its top-level key, build's (run renders with them)
    kwargs_name = "template_kwargs" if section else named("chat_template_kwargs")
    if "reasoning_effort" in kwargs:
        given["reasoning_effort"] = (f"{kwargs_name} reasoning_effort", kwargs["reasoning_effort"])
    elif "reasoning_effort" in extra_body:
        # vLLM hands the request's effort to the template (and harmony reads it there), while
        # build renders each row with the template kwargs it records: without it there, the
        # rows were trained after a prompt of another effort than their answers'
        return (
            f"{body_name} sets reasoning_effort {_json(extra_body['reasoning_effort'])}, which"
            f" the server renders into the prompt, and {kwargs_name} does not: build would"
            f" render the rows without it; give it in {kwargs_name} instead (it is sent as the"
            " request's field too)"
        )
    for key in sorted(given.keys() & extra_body.keys()):
        option, value = given[key]
        if not _same_json(extra_body[key], value):
            return (
                f"{body_name} sets {key} {_json(extra_body[key])}, and {option} {_json(value)}:"
                " one request field, two values; set it in one place"
            )
    # OpenAI's newer name for max_tokens: vLLM and SGLang take it over max_tokens, so
    # `--max-tokens 32` with it at 9999 generated up to 9999 tokens, recorded as 32
    limit = given.get("max_tokens")
    if limit is None and "max_tokens" in extra_body:
        limit = (f"{body_name} max_tokens", extra_body["max_tokens"])
    alias = extra_body.get("max_completion_tokens")
    if limit is not None and alias is not None and not _same_json(alias, limit[1]):
        return (
            f"{body_name} sets max_completion_tokens {_json(alias)}, and {limit[0]}"
            f" {_json(limit[1])}: the server reads both as the answer's token limit (the first"
            " wins); set it in one place"
        )
    return None


def _same_json(a: Any, b: Any) -> bool:
    """One JSON value: numbers by value (1 and 1.0), but true is no 1 (Python's ``True == 1``
    let ``"seed": true`` past ``--seed 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def split_thinking(
    kwargs: dict[str, Any], thinking: str | bool | None, flag: str, kwargs_flag: str
) -> tuple[dict[str, Any], str]:
    """(template kwargs to send, ``on`` / ``off`` / ``mix:F``): ``enable_thinking`` in the
    template kwargs counts as the setting (and is not sent twice). ``flag`` / ``kwargs_flag``
    name the two options in messages (``--thinking``, or a recipe's ``generate.thinking``)."""
    if problem := boolean_text_problem(kwargs, kwargs_flag):  # "false" was thinking on
        raise GenerateUsageError(problem)
    kwargs = dict(kwargs)
    if isinstance(thinking, bool):  # YAML's `thinking: off` is a boolean
        thinking = "on" if thinking else "off"
    if "enable_thinking" in kwargs:
        given = "on" if kwargs.pop("enable_thinking") else "off"
        if thinking is not None and thinking != given:
            raise GenerateUsageError(
                f"{flag} {thinking} contradicts enable_thinking in {kwargs_flag}"
            )
        return kwargs, given
    thinking = thinking or "on"
    if thinking in ("on", "off"):
        return kwargs, thinking
    kind, _, value = thinking.partition(":")
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if kind != "mix" or not 0.0 <= fraction <= 1.0:
        raise GenerateUsageError(
            f"{flag} must be on, off or mix:F with 0 <= F <= 1, not {thinking!r}"
        )
    return kwargs, thinking


def check_servers(
    endpoints: list[str], concurrency: int, extra_body: dict[str, Any], section: str | None = None
) -> None:
    """What the option schema cannot say alone: http(s) URLs, a concurrency the endpoints'
    connections can take, no request field set twice. ``section``: None names the options
    as the caller gave them (``--endpoint``, the API's ``endpoints``), ``generate.`` as a
    recipe's keys."""
    named = _named(section)
    # `--endpoint URL`; a keyword or a key is followed by a colon: `endpoints: 'ftp://x' ...`
    name = named("endpoints") if section is None and on_command_line() else f"{named('endpoints')}:"
    for url in endpoints:
        if not str(url).startswith(("http://", "https://")):
            raise GenerateUsageError(
                f"{name} {redact_url(str(url))!r} is not an http(s) URL"
                + scheme_hint(redact_url(str(url)), "/v1")
            )
        try:  # the client's own parser: a port out of range, an unclosed IPv6 bracket
            parse_target(str(url))
        except ValueError as exc:
            raise GenerateUsageError(f"{name} {exc}") from None
    if problem := concurrency_problem(concurrency, len(endpoints), named("concurrency")):
        raise GenerateUsageError(problem)
    body_name = named("extra_body")
    if problem := json_value_problem(extra_body, body_name):
        raise GenerateUsageError(problem)
    clash = sorted(RESERVED_BODY_KEYS & extra_body.keys())
    if clash:
        why = next((RESERVED_WHY[k] for k in clash if k in RESERVED_WHY), None)
        said = [k for k in clash if k in RESERVED_WHY][:1] if why else clash
        raise GenerateUsageError(f"{body_name} may not set {said}: {why or DEDICATED}")
    for key in UNKEPT_BODY_FIELDS:
        value = extra_body.get(key)
        if value not in (None, False, 0):
            raise GenerateUsageError(f"{body_name} sets {key} {_json(value)}: {UNKEPT_WHY}")
    for key in sorted(ANSWER_BODY_FIELDS.keys() & extra_body.keys()):
        allowed, why = ANSWER_BODY_FIELDS[key]
        if allowed is NO_VALUE or not _same_json(extra_body[key], allowed):
            default = "" if allowed is NO_VALUE else f" ({_json(allowed)} is the default)"
            raise GenerateUsageError(
                f"{body_name} sets {key} {_json(extra_body[key])}: {why}; leave it out{default}"
            )
    prompt = sorted(PROMPT_BODY_KEYS & extra_body.keys())
    if prompt:
        raise GenerateUsageError(
            f"{body_name} may not set {prompt}: the server would answer another prompt than"
            " the one build renders (the tokenizer's template, with its generation prompt);"
            " start the server with the template build uses (vLLM --chat-template) instead"
        )


@dataclass
class GenerateOptions:
    sources: list[Source]
    endpoints: list[str]
    out: Path
    model: str | None = None
    api_key: str | None = None  # resolved by whoever builds the options (CLI: env fallback)
    concurrency: int = defaults.CONCURRENCY  # per endpoint
    request_timeout: float = defaults.REQUEST_TIMEOUT
    max_retries: int = defaults.MAX_RETRIES
    backoff_base: float = defaults.BACKOFF
    backoff_cap: float = defaults.BACKOFF_CAP
    health_interval: float = defaults.HEALTH_INTERVAL
    give_up_after: float = defaults.GIVE_UP_AFTER
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    thinking: str = "on"  # on | off | mix:F
    keep_length: bool = False
    return_token_ids: bool = False
    retry_errors: bool = False
    max_response_bytes: int = defaults.MAX_RESPONSE_BYTES
    restart: bool = False  # discard the previous run's answers (only files generate wrote)
    # texts of the target tokenizer's special tokens (--tokenizer; `run`: its template's): a
    # leaked stop token ending an answer is cut, any other such text fails the row
    special_tokens: tuple[str, ...] = ()
    special_token_ids: tuple[int, ...] = ()  # a stop token id among them is the model's own end

    def sampling(self) -> dict[str, Any]:
        """Every generation option sent with each request (recorded in each row's metadata)."""
        out = {k: getattr(self, k) for k in SAMPLING_FLAGS if getattr(self, k) is not None}
        out.update(self.extra_body)
        return out

    def settings(self) -> dict[str, Any]:
        """What a resumed run must share with the run that began the answers file: sampling,
        template options, thinking, how length cut-offs and token ids are kept, and how the
        inputs are read (the model is added once the endpoints name it)."""
        return {
            "sampling": self.sampling(),
            "chat_template_kwargs": self.chat_template_kwargs,
            "thinking": self.thinking,
            "keep_length": self.keep_length,
            "return_token_ids": self.return_token_ids,
            "inputs": {
                s.name: {
                    "format": s.format,
                    "fields": s.fields,
                    "preset": s.preset,
                }
                for s in self.sources
            },
        }

    def thinking_for(self, row_id: str) -> bool:
        """Thinking on or off for one row; ``mix:F`` draws it from the seed and the row id, so a
        resumed run makes the same choice for the same row."""
        if self.thinking in ("on", "off"):
            return self.thinking == "on"
        fraction = float(self.thinking.partition(":")[2])
        return random.Random(f"{self.seed or 0}:{row_id}").random() < fraction


def api_key_problem(key: str | None, where: str) -> str | None:
    """Why ``key`` cannot be sent as ``Authorization: Bearer KEY`` (never echoing it), or None.

    Keys servers issue are visible ASCII; a CR/LF would end the header early and put the
    rest in a header of its own, a non-Latin-1 character cannot be encoded at all."""
    bad = None if key is None else not_visible_ascii(key)
    if bad is None:
        return None
    what = {"\r": "a carriage return", "\n": "a newline", " ": "a space"}.get(bad)
    return (
        f"the API key {where} holds {what or f'the character U+{ord(bad):04X}'}, which no HTTP"
        " header carries (keys are visible ASCII): copy it again without it"
    )


def api_key_from_env() -> str | None:
    """The API key from ``DRAFTSET_API_KEY`` or ``OPENAI_API_KEY`` (None when neither is set)."""
    for name in API_KEY_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


def special_tokens_of(folder: str | None, strict: bool = True) -> tuple[str, ...]:
    """The texts of a tokenizer folder's special tokens (``tokenizer.json``): --tokenizer, and
    `run`'s tokenizer (``strict=False``: a hub id or a folder without the file gives none)."""
    return tuple(sorted(set(_special_tokens(folder, strict).values())))


def special_token_ids_of(folder: str | None, strict: bool = True) -> tuple[int, ...]:
    """The ids of the special tokens `special_tokens_of` names."""
    return tuple(sorted(_special_tokens(folder, strict)))


def _special_tokens(folder: str | None, strict: bool) -> dict[int, str]:
    """id -> text of a tokenizer folder's special tokens."""
    if folder is None:
        return {}
    path = Path(folder).expanduser() / "tokenizer.json"
    try:
        st = path.stat()
        return _read_special_tokens(str(path), st.st_mtime_ns, st.st_size)
    except Exception as exc:
        if not strict:
            return {}
        flag = option_name(GenerateArgs, "tokenizer")  # `--tokenizer`, the API's `tokenizer`
        raise GenerateUsageError(f"{flag}: cannot read {path}: {exc}") from exc


@functools.lru_cache(maxsize=4)
def _read_special_tokens(path: str, mtime_ns: int, size: int) -> dict[int, str]:
    """`_special_tokens` of one version of a file (read once for the texts and the ids)."""
    from tokenizers import Tokenizer  # lazy: only with a tokenizer

    added = Tokenizer.from_file(path).get_added_tokens_decoder()
    return {i: t.content for i, t in added.items() if t.special}
