"""The target model's tokenizer and chat template, loaded once per process.

Rendering goes through `transformers`' own `apply_chat_template` (its sandboxed Jinja), exactly
as a serving stack renders prompts; nothing here knows any particular model. The end-of-turn
tokens are the tokens the server stops on: ``generation_config.json``'s ``eos_token_id`` (what
vLLM and SGLang read) plus the tokenizer's EOS and ``--eot-token``; they are read, never probed
(without that file and without ``--eot-token`` loading fails with a usage error). Facts about
how the template reads messages are probed once per template: content as a list of parts,
``reasoning_content`` before the answer, tool-call arguments as a string and ``content: None``
on tool calls (docs/semantics.md).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from draftset.core import defaults
from draftset.core.digests import vocabulary_sample_sha256
from draftset.core.errors import UsageError
from draftset.core.hub import cache_revisions, cached_model_folder, hub_offline
from draftset.core.optional_torch import broken_torch_kept_out
from draftset.core.records import Message
from draftset.mask.ambient import clock_kwargs, render_stock, split_clock
from draftset.mask.content_format import content_format, sglang_content_format
from draftset.mask.family import foreign_template_problem
from draftset.mask.harmony import HarmonyRender, served_with_harmony
from draftset.mask.limits import (
    RENDER_CAP_FLOOR,
    RenderLimit,
    join_within,
    time_limit,
    too_large,
)
from draftset.mask.sandbox import MemoSandbox, compile_template, constant_too_large
from draftset.mask.serving import (
    DEFAULT_SERVING_ENGINE,
    prepare_tools,
    require_engine,
    served_template_kwargs,
)

_PROBE = "DRAFTSET_PROBE_ANSWER_7f3a"
_PROBE_REASONING = "DRAFTSET_PROBE_REASONING_7f3a"
_PROBE_USER = "DRAFTSET_PROBE_USER_7f3a"
_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


# vLLM 0.33 (`renderers/hf.py` `resolve_chat_template`) and transformers' `apply_chat_template`
# call ``tokenizer.get_chat_template(None, tools=tools)``: 'tool_use' for a request with tools
# (``tools is not None``), 'default' for any other; a row is rendered by the one its request
# is served by (`Renderer.for_tools`), so reaching the 'default' with tools is a bug
NAMED_TOOL_USE = (
    "the tokenizer's chat templates are named, and a server renders a request with tools by its"
    " 'tool_use' template, not by the 'default' one: this row was given to the wrong template"
    " (please report it)"
)


class NamedToolUse(ValueError):
    """A row with tools given to the ``default`` of a named set whose ``tool_use`` serves it."""


class TokenizerError(UsageError):
    """The tokenizer or template cannot be loaded (a usage error: exit code 2)."""


@dataclass(slots=True)
class TemplateSpec:
    """Everything needed to re-create the exact renderer in another process (or in `verify`)."""

    tokenizer: str
    chat_template: str | None = None  # the template text; None = the tokenizer's own
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    eot_tokens: tuple[str, ...] = ()  # extra end-of-turn tokens given by the user
    now: str | None = None  # the instant `strftime_now` reads (mask/ambient.py); None: the clock
    # how tools reach the template (mask/serving.py); "transformers" = as given
    serving_engine: str = DEFAULT_SERVING_ENGINE
    # the probes' time bound (--render-timeout; None or 0: none), and where the template text
    # came from (its file), named in messages
    render_timeout: float | None = defaults.RENDER_TIMEOUT
    origin: str | None = None
    # the template is the tokenizer's own (its named set's 'default': `NamedToolUse`); None:
    # exactly when no text is given (verify gives the manifest's text, built without one)
    own_template: bool | None = None

    def template_name(self) -> str:
        if self.origin:
            return self.origin
        return "(given as text)" if self.chat_template else f"of tokenizer {self.tokenizer}"


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
"""A tokenizer folder holds at least one of these (what `AutoTokenizer` reads)."""
EXPECTED_FILES = (
    "tokenizer.json (or tokenizer_config.json with vocab.json + merges.txt, or tokenizer.model)"
)
HUB_HINT = "a hub id such as Qwen/Qwen3-8B is read from the hub when online"
_HUB_ID = re.compile(r"^(?:[\w\-.]+/)?[\w\-.]+$")


def could_be_hub_id(name: str) -> bool:
    """huggingface_hub's repo-id rule: ``name`` or ``org/name`` of word characters, ``-`` and
    ``.``, no ``--`` or ``..``, at most 96 characters; never ``/abs``, ``./x``, ``~/x``."""
    return (
        len(name) <= 96
        and bool(_HUB_ID.match(name))
        and "--" not in name
        and ".." not in name
        and not name.startswith(".")
    )


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host takes a TCP connection within ``timeout`` (assumed when a proxy
    is configured: the connection would go through it). Without this, a typo'd relative folder
    waits ~50 s of huggingface_hub's retries before its error."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout):
            return True
    except OSError:
        return False


def _hub_cache_hint(folder: Path) -> str:
    """Where the files are when ``folder`` is the hub cache's folder of a model
    (``models--Qwen--Qwen3-8B``: its files under ``snapshots/<revision>/``), else ``""``."""
    found = cache_revisions(folder)
    if found is None:
        return ""
    _, chosen, is_main = found
    ref = " (refs/main)" if is_main else ""
    revision = folder / "snapshots" / chosen
    return f"; it is a hub cache folder: give a revision's folder, {revision}{ref}"


def resolve_tokenizer_path(name: str) -> str:
    """The folder to load, or ``name`` as a hub id; one line (`TokenizerError`, exit 2) at once
    for a missing folder, a folder without tokenizer files, or a hub id the hub cannot serve."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            # the tokenizer.json (or another file) of a tokenizer folder: name that folder
            held = path.name in TOKENIZER_FILES or path.name in _TOKENIZER_FILES
            hint = f" (give the folder holding it: {path.parent})" if held else ""
            raise TokenizerError(f"tokenizer path is not a folder: {name}{hint}")
        if not any((path / f).is_file() for f in TOKENIZER_FILES):
            raise TokenizerError(
                f"tokenizer folder {name} holds no tokenizer files: expected {EXPECTED_FILES}"
                + _hub_cache_hint(path)
            )
        return str(path)
    if not could_be_hub_id(name):
        raise TokenizerError(
            f"tokenizer folder not found: {name} (give the folder holding tokenizer.json; "
            f"{HUB_HINT})"
        )
    offline = hub_offline()
    if offline and cached_model_folder(name) is not None:
        return name  # offline, transformers reads it from the hub cache
    if offline:
        raise TokenizerError(
            f"tokenizer folder not found and {offline} is set: {name} (no such folder here;"
            f" as a hub id it needs the network: unset {offline})"
        )
    if not _hub_reachable():
        raise TokenizerError(
            f"tokenizer folder not found: {name} (no such folder here, and the hub cannot be"
            " reached to read it as a hub id)"
        )
    return name  # a hub id; from_pretrained downloads it


def tokenizer_files_fingerprint(folder: Path) -> str:
    """sha256 over a tokenizer folder's files (name and content): the same tokenizer however
    its path is spelled or wherever it lies (the manifest's ``tokenizer.fingerprint``)."""
    h = hashlib.sha256()
    for name in _TOKENIZER_FILES:
        f = folder / name
        if f.exists():
            h.update(name.encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def folder_vocabulary_sample(folder: Path) -> str | None:
    """`vocabulary_sample_sha256` of a tokenizer folder's ``tokenizer.json``, read with
    `tokenizers` alone (a fraction of a second, no transformers): a set's manifest records it,
    so a set's tokenizer is known before this one loads. None without a readable file."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer  # lazy: only a build given a built set reads it here

    try:
        return vocabulary_sample_sha256(Tokenizer.from_file(str(path)))
    except Exception:  # unreadable here: the tokenizer's own load says why
        return None


def import_template_compiler() -> None:
    """Import transformers' template compiler now (~0.7 s): workers do it while they wait.
    Its advisories stay out of the build's output, as `ChatTemplate`'s (without torch, an
    extra: "PyTorch was not found", once a worker)."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with contextlib.suppress(ImportError):
        import transformers.utils.chat_template_utils  # noqa: F401  # lazy: the point of it


def _compile(template_text: str) -> Any:
    """transformers' compiled, sandboxed template, in draftset's memoizing copy of its sandbox
    (`draftset.mask.sandbox`); None when transformers' internals moved."""
    return compile_template(template_text)


@dataclass(frozen=True, slots=True)
class RenderKit:
    """What a worker process needs to render and encode exactly like the main process.

    Picklable and cheap to load: the live tokenizer serialized as tokenizer.json text, the
    template text, and the keyword arguments `apply_chat_template` would pass. Workers built
    from it never import `AutoTokenizer` (which pulls torch when installed), so they start in
    about a second.
    """

    template_text: str
    base_kwargs: dict[str, Any]
    tokenizer_json: str
    eot_tokens: tuple[str, ...]
    content_parts: bool = False  # the template reads content as a list of typed parts
    renders_reasoning: bool = True  # ... and renders reasoning_content before the answer
    string_arguments: bool = False  # ... and reads tool-call arguments as a JSON string
    part_lists: bool = False  # ... renders a list of text parts (given a row's parts as sent)
    serving_engine: str = DEFAULT_SERVING_ENGINE  # tools prepared as this engine does
    harmony: bool = False  # the engine renders with harmony, not the template (mask/harmony.py)
    # the tokenizer's named templates hold a 'tool_use' one the server renders tools by: its kit
    tool_use: RenderKit | None = None
    eos_token: str | None = None  # the tokenizer's EOS: vLLM's stop_reason null (`other_stop`)


class Renderer:
    """Render (transformers' compiled sandboxed template) + encode + find end-of-turn tokens."""

    backend: Any
    template_text: str
    eot_tokens: tuple[str, ...]
    eot_ids: frozenset[int]
    content_parts: bool = False
    renders_reasoning: bool = True
    string_arguments: bool = False
    part_lists: bool = False
    serving_engine: str = "transformers"  # tools as given unless a spec or kit says otherwise
    harmony: HarmonyRender | None = None  # set: the engine ignores the template (gpt-oss, vLLM)
    eos_token: str | None = None  # the tokenizer's EOS, the token vLLM names no id for
    # the named set's 'tool_use' template, which a server renders a request with tools by
    # (`for_tools`); this renderer is then its 'default'
    tool_use: Renderer | None = None
    _compiled: Any
    _base_kwargs: dict[str, Any]
    # most characters one render may produce (`limits.render_char_cap`); None = unbounded
    max_chars: int | None = None

    @classmethod
    def from_kit(cls, kit: RenderKit, backend: Any = None) -> Renderer | None:
        """A light renderer, or None when transformers' compiled-template helper is missing
        (``backend``: the tokenizer already built from the kit's text, a named set's other)."""
        compiled = _compile(kit.template_text)
        if compiled is None:
            return None
        from tokenizers import Tokenizer  # lazy: only workers that rebuild from a kit need it

        r = cls.__new__(cls)
        r.backend = backend or Tokenizer.from_str(kit.tokenizer_json)
        r.template_text = kit.template_text
        r.eot_tokens = kit.eot_tokens
        r.eot_ids = frozenset(r.backend.token_to_id(t) for t in kit.eot_tokens)
        r.content_parts = kit.content_parts
        r.renders_reasoning = kit.renders_reasoning
        r.string_arguments = kit.string_arguments
        r.part_lists = kit.part_lists
        r.serving_engine = kit.serving_engine
        r.harmony = HarmonyRender() if kit.harmony else None
        r.eos_token = kit.eos_token
        r.tool_use = None
        if kit.tool_use is not None:
            r.tool_use = cls.from_kit(kit.tool_use, r.backend)
            if r.tool_use is None:
                return None
        r._compiled = compiled
        r._base_kwargs = kit.base_kwargs
        return r

    @functools.cached_property
    def token_bytes(self) -> int | None:
        """Most UTF-8 bytes one token of this tokenizer stands for (`encode.token_bytes_bound`),
        None when unknown. Worked out (~1 s) once per renderer, the first time it is asked:
        build's row step (`mask.step`) and verify's length bound (`checks.mask`) both ask it
        here, so a renderer holds the one cached value."""
        # lazy: encode imports render, which imports this module
        from draftset.mask.encode import token_bytes_bound

        return token_bytes_bound(self.backend)

    @property
    def base_kwargs(self) -> dict[str, Any]:
        """What every render is given: the special tokens map plus the run's template options
        (the template path's as the engine passes them, `served_template_kwargs`; harmony reads
        the effort alone)."""
        if self.harmony is not None:
            return dict(self._base_kwargs)
        return dict(served_template_kwargs(self._base_kwargs, self.serving_engine))

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        row_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """Text the serving stack would build for these messages (raises on template errors).

        ``row_kwargs`` (the template options a row was generated with, recorded by `generate`)
        override the run's ``--template-kwargs``.
        """
        if self.harmony is not None:
            return self._render_harmony(messages, tools, add_generation_prompt, row_kwargs)
        if self._compiled is None:  # only a full ChatTemplate (fast=False) lacks it
            return self.render_reference(messages, tools, add_generation_prompt, row_kwargs)
        return self._render_compiled(messages, tools, add_generation_prompt, row_kwargs)

    def check_size(self, text: str) -> str:
        """``text``, or `RenderTooLarge` when it is longer than ``max_chars``."""
        if self.max_chars is not None and len(text) > self.max_chars:
            raise too_large(self.max_chars)
        return text

    def _render_harmony(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        row_kwargs: dict[str, Any] | None,
    ) -> str:
        """What the engine renders instead of the template (mask/harmony.py)."""
        assert self.harmony is not None
        kwargs = self._base_kwargs if not row_kwargs else {**self._base_kwargs, **row_kwargs}
        text = self.harmony.render(
            messages, self.served_tools(tools), add_generation_prompt, kwargs
        )
        return self.check_size(text)

    def render_reference(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        row_kwargs: dict[str, Any] | None = None,
    ) -> str:
        raise NotImplementedError("the reference path needs the full tokenizer (ChatTemplate)")

    def _render_compiled(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        row_kwargs: dict[str, Any] | None,
    ) -> str:
        """Fast path: the same compiled sandboxed template, without the per-call wrapper work.

        `apply_chat_template` copies every message into plain JSON types, drops None values and
        aliases reasoning fields on each call. Normalized messages are already plain JSON (no
        None values), so only the aliasing is repeated here. Tested equal to `render_reference`
        on the golden conversations and the shared samples.
        """
        tools = self.served_tools(tools)
        chat = self.served_messages(messages)
        kwargs = self._kwargs(row_kwargs)
        env = self._compiled.environment
        if type(env) is MemoSandbox:  # no value a render builds may outgrow what it may write
            env.value_cap = self.max_chars or RENDER_CAP_FLOOR
        if self.max_chars is None:
            return self._compiled.render(
                messages=chat,
                tools=tools,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **kwargs,
            )
        return render_within(
            self._compiled,
            self.max_chars,
            messages=chat,
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )

    def _kwargs(self, row_kwargs: dict[str, Any] | None) -> dict[str, Any]:
        """What a render's template is given: the base (special tokens, the run's options, the
        clock) under the row's own options, as the serving engine passes them
        (`served_template_kwargs`: vLLM leaves out a ``None`` or ``"auto"`` value)."""
        kwargs = self._base_kwargs if not row_kwargs else {**self._base_kwargs, **row_kwargs}
        return served_template_kwargs(kwargs, self.serving_engine)

    def served_messages(self, messages: list[Message]) -> list[Message]:
        """The reasoning fields the serving engine gives the template. vLLM 0.33 gives an
        answer's reasoning as ``reasoning`` and ``reasoning_content`` and never as ``thinking``
        (it pins transformers < 5.21, whose `apply_chat_template` aliases nothing): a template
        that reads ``message.thinking`` alone (LFM2.5's) renders no reasoning there. Any other
        engine renders with transformers 5.21+, which adds ``thinking`` beside it."""
        vllm = self.serving_engine == "vllm"
        alias = "reasoning" if vllm else "thinking"

        def served(m: Message) -> Message:
            given = {alias: m["reasoning_content"]}
            # vLLM sets its field after the message's keys, over its own; transformers adds
            # its alias first, a key of the message's own standing
            return {**m, **given} if vllm else {**given, **m}

        return [served(m) if "reasoning_content" in m else m for m in messages]

    def _unaliased(self, messages: list[Message]) -> bool:
        """Render these messages past transformers' public path, which would alias reasoning
        fields the engine does not give (`served_messages`)."""
        return self.serving_engine == "vllm" and any("reasoning_content" in m for m in messages)

    def for_tools(self, tools: list[dict[str, Any]] | None) -> Renderer:
        """The renderer a server renders a request with these ``tools`` by: a named set's
        'tool_use' when the request has tools, else this one (vLLM 0.33 `resolve_chat_template`
        and transformers' `get_chat_template`: ``tools is not None``; a row's tools are never
        an empty list, read as none, and no request draftset sends holds one)."""
        return self.tool_use if tools is not None and self.tool_use is not None else self

    def served_tools(self, tools: list[dict[str, Any]] | None) -> list[Any] | None:
        """``tools`` as the serving engine gives them to the template (mask/serving.py)."""
        if tools is not None and self.tool_use is not None:
            raise NamedToolUse(NAMED_TOOL_USE)
        if tools is None or self.serving_engine == "transformers":
            return tools
        memo = getattr(self, "_tools_memo", None)  # a conversation renders its tools many times
        if memo is not None and memo[0] is tools:
            return memo[1]
        prepared = prepare_tools(tools, self.serving_engine)
        self._tools_memo = (tools, prepared)
        return prepared

    def template_fingerprint(self) -> str:
        return hashlib.sha256(self.template_text.encode()).hexdigest()

    def find_end_of_turn(self, text: str, start: int = 0) -> int:
        """Index just past the first end-of-turn token at or after ``start``, or -1."""
        best = -1
        for tok in self.eot_tokens:
            i = text.find(tok, start)
            if i >= 0 and (best < 0 or i + len(tok) < best):
                best = i + len(tok)
        return best

    @property
    def has_generation_tags(self) -> bool:
        """The template marks assistant output with ``{% generation %}`` blocks."""
        return self.harmony is None and bool(_GENERATION_TAG.search(self.template_text))

    def generation_tag_spans(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        row_kwargs: dict[str, Any] | None = None,
    ) -> tuple[str, list[tuple[int, int]]]:
        """The full render and the character spans its ``{% generation %}`` blocks cover.

        Only used to cross-check the prefix rule on templates that have such tags.
        """
        # lazy: transformers (~0.7 s) loads in the processes that render, when they render
        from transformers.utils.chat_template_utils import render_jinja_template

        kwargs, clock = split_clock(self._kwargs(row_kwargs))
        unaliased = self._unaliased(messages)
        # render_jinja_template cannot pass a function to the template, and aliases reasoning
        if clock is not None or unaliased:
            text, spans = render_stock(
                self.template_text,
                self.served_messages(messages) if unaliased else messages,
                self.served_tools(tools),
                False,
                kwargs,
                clock,
                True,
                alias=not unaliased,
            )
            return self.check_size(text), [(a, b) for a, b in spans if b > a]
        rendered, indices = render_jinja_template(
            conversations=[messages],
            tools=self.served_tools(tools),
            chat_template=self.template_text,
            return_assistant_tokens_mask=True,
            **kwargs,
        )
        return self.check_size(rendered[0]), [(int(a), int(b)) for a, b in indices[0] if b > a]

    def decode(self, ids: list[int]) -> str:
        """Token ids back to text, special tokens kept, no clean-up of spaces."""
        return str(self.backend.decode(ids, skip_special_tokens=False))


def config_vocab_size(tokenizer: str) -> int | None:
    """``vocab_size`` of ``config.json`` (or its ``text_config``) in a tokenizer folder, else None.

    The target model's vocabulary: it may exceed the tokenizer's length (Qwen3: 151,936 vs
    151,669), and EAGLE-3's ``t2d`` must have exactly this length.
    """
    path = Path(tokenizer).expanduser() / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        cfg = cfg.get("text_config", cfg)
        n = int(cfg["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return n if n > 0 else None


def render_within(compiled: Any, cap: int, **variables: Any) -> str:
    """``compiled.render(**variables)`` that stops at ``cap`` characters (`RenderTooLarge`).

    The same render as pieces (Jinja's render is "".join of them), so a template that writes
    without end is stopped at the cap instead of filling memory (`limits.join_within`); and
    every value it builds is held to the same cap (`MemoSandbox.value_cap`).
    """
    env = compiled.environment
    if type(env) is MemoSandbox:
        env.value_cap = cap
    return join_within(compiled.generate(**variables), cap)


@dataclass(frozen=True, slots=True)
class TemplateInfo:
    """A loaded template's kit plus the facts the manifest records about it."""

    kit: RenderKit
    fingerprint: str
    template_sha256: str
    template_kwargs: dict[str, Any]
    vocab_size: int
    tokenizer_size: int
    vocabulary_sample_sha256: str  # core.digests.vocabulary_sample_sha256: show's decoder check
    # the named set's 'tool_use' template (rows with tools rendered by it), else None
    tool_use_sha256: str | None = None


def load_template_info(spec: TemplateSpec, target_vocab_size: int | None = None) -> TemplateInfo:
    """Load the tokenizer and template (raises `TokenizerError`) and describe them."""
    return describe_template(ChatTemplate(spec), target_vocab_size)


def describe_template(t: ChatTemplate, target_vocab_size: int | None = None) -> TemplateInfo:
    """The kit and manifest facts of a loaded template (the build's load: a ``--chat-template``
    of another model family is refused here, `mask.family`)."""
    refuse_foreign_template(t)
    return TemplateInfo(
        kit=t.kit(),
        fingerprint=t.fingerprint(),
        template_sha256=t.template_fingerprint(),
        template_kwargs=dict(t.template_kwargs),
        vocab_size=t.vocab_size(target_vocab_size),
        tokenizer_size=len(t.tokenizer),
        vocabulary_sample_sha256=vocabulary_sample_sha256(t.backend),
        tool_use_sha256=t.tool_use.template_fingerprint() if t.tool_use is not None else None,
    )


def refuse_foreign_template(t: ChatTemplate) -> None:
    """`TokenizerError` when a ``--chat-template`` is another model family's than the
    tokenizer's (`mask.family`); never for the tokenizer's own template or harmony."""
    if not t.spec.chat_template or t.spec.own_template or t.harmony is not None:
        return
    with t.bounded_probes():
        problem = foreign_template_problem(
            lambda m: t.render(as_content_parts(m) if t.content_parts else m),
            t.eot_tokens,
            t.tokenizer.get_vocab(),
            t.special_tokens - {str(t.tokenizer.bos_token)},
            t.spec.template_name(),
            t.spec.tokenizer,
        )
    if problem:
        raise TokenizerError(problem)


def _eot_hint(given: str, tokenizer: Any) -> str:
    """Why an ``--eot-token`` is no token, when it shows: several special tokens in one value
    (``'<|im_end|>,<|endoftext|>'``, a list written as one flag) or one misspelt (``im_end``,
    the brackets left out); said only "is not a token of this tokenizer" before."""
    special = [str(t) for t in tokenizer.get_added_vocab()]
    parts = [p for p in re.split(r"[\s,;]+", given) if p]
    if len(parts) > 1 and all(p in special for p in parts):
        named = ", ".join(repr(p) for p in parts[:-1]) + f" and {parts[-1]!r}"
        return (
            f": it is {len(parts)} tokens, {named}: give --eot-token once for each (a recipe's"
            " eot_tokens: a list)"
        )
    bare = {re.sub(r"[^0-9a-z]", "", t.lower()): t for t in special}
    key = re.sub(r"[^0-9a-z]", "", given.lower())
    meant = bare.get(key) if key else None
    return f": did you mean {meant!r}?" if meant else ""


class ChatTemplate(Renderer):
    """Tokenizer + chat template + options: the render primitives mask derivation needs."""

    def __init__(self, spec: TemplateSpec, fast: bool = True) -> None:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            # a torch that is installed but fails to import would fail the load (transformers
            # imports it whenever it finds it); a tokenizer needs none
            with broken_torch_kept_out():
                # lazy: transformers costs ~2-4 s (python -X importtime); workers rebuilding
                # from a kit, `draftset --help` and show never load it
                from transformers import AutoTokenizer
                from transformers.utils import logging as hf_logging  # lazy: as above

                hf_logging.set_verbosity_error()
                path = resolve_tokenizer_path(spec.tokenizer)
                self.tokenizer = AutoTokenizer.from_pretrained(path)
        except TokenizerError:
            raise
        except Exception as exc:  # any loader failure is one clear line for the user
            why = " ".join(str(exc).split())  # transformers' messages span several lines
            raise TokenizerError(f"cannot load tokenizer {spec.tokenizer!r}: {why}") from exc
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise TokenizerError(f"tokenizer {spec.tokenizer!r} has no fast (Rust) backend")
        self.spec = spec
        self.backend = backend
        self.path = Path(path) if Path(path).is_dir() else None
        # vLLM renders gpt-oss with harmony and ignores the template (mask/harmony.py)
        self.harmony = (
            HarmonyRender() if served_with_harmony(path, self.path, spec.serving_engine) else None
        )
        self.template_text: str = spec.chat_template or self._own_template()
        own = not spec.chat_template if spec.own_template is None else spec.own_template
        self.template_kwargs = dict(spec.template_kwargs)
        require_engine(spec.serving_engine)  # its rule's library, before any row
        self.serving_engine = spec.serving_engine
        name = spec.template_name()
        try:
            self._compiled = _compile(self.template_text) if fast else None
            checker = self._compiled if self._compiled is not None else _compile("")
        except Exception as exc:  # a Jinja syntax error is one line, not a traceback
            msg = f"line {getattr(exc, 'lineno', '?')}: {getattr(exc, 'message', exc)}"
            raise TokenizerError(f"chat template does not compile: {msg}") from exc
        # transformers' own compile (its public renderer, which verify and the tag cross-check
        # use) would build such a constant while compiling: refused before any render
        huge = checker and constant_too_large(checker.environment, self.template_text)
        if huge:
            raise TokenizerError(
                f"chat template {name}: {huge}, more than a render may write ({RENDER_CAP_FLOOR:,})"
            )
        self._clock = clock_kwargs(spec.now)  # the template's clock, fixed (mask/ambient.py)
        self._base_kwargs = {
            **self.tokenizer.special_tokens_map,
            **self.template_kwargs,
            **self._clock,
        }
        eos = getattr(self.tokenizer, "eos_token", None)
        self.eos_token = str(eos) if eos else None
        self.special_tokens = frozenset(
            str(tok) for tok in self.tokenizer.added_tokens_decoder.values() if tok.special
        )
        with self.bounded_probes():
            shape = probe_shape(self.render, self.template_text, self.serving_engine, self.harmony)
        self.content_parts, self.renders_reasoning, self.string_arguments, self.part_lists = shape
        # read from files, not rendered: outside the probes' time bound (a vocabulary of
        # 150k tokens took seconds on a loaded machine)
        self.eot_tokens: tuple[str, ...] = self._end_of_turn_tokens(spec.eot_tokens)
        if not self.eot_tokens:
            raise TokenizerError(
                "no end-of-turn token found for this template; pass --eot-token (e.g. '<|im_end|>')"
            )
        self.eot_ids = frozenset(
            self.tokenizer.convert_tokens_to_ids(tok) for tok in self.eot_tokens
        )
        tool_use = self._named_tool_use() if own and self.harmony is None else None
        self.tool_use = None
        if tool_use is not None:  # a second renderer, all its own probes, the same tokenizer
            self.tool_use = ChatTemplate(
                replace(
                    spec,
                    chat_template=tool_use,
                    own_template=False,
                    origin=f"'tool_use' of tokenizer {spec.tokenizer}",
                ),
                fast,
            )

    @contextlib.contextmanager
    def bounded_probes(self) -> Iterator[None]:
        """The probes are renders too, bounded like a row's: ``--render-timeout`` for them all,
        and a row's size cap on each render and each value it builds. A probe past a bound is
        one usage line (exit 2) naming the bound and the template, before any row is read.

        Inside a row's bounds (`bounded_row`: verify probes on its first row when the shape
        was not asked before) those bounds hold: a second timer would replace the row's and
        cancel it on leaving, and the row's cap would be dropped."""
        if self.max_chars is not None:
            yield
            return
        self.max_chars = RENDER_CAP_FLOOR
        try:
            with time_limit(self.spec.render_timeout):
                yield
        except RenderLimit as exc:
            raise TokenizerError(
                f"chat template {self.spec.template_name()}: a probe render (how it reads"
                f" messages) stopped: {exc.message or exc}"
            ) from None
        finally:
            self.max_chars = None

    # --- rendering ---------------------------------------------------------------------------
    def kit(self, tokenizer_json: str | None = None) -> RenderKit:
        """Everything a worker needs to render and encode exactly like this object
        (``tokenizer_json``: the tokenizer's text already dumped, one string for both kits of a
        named set, which pickle sends once)."""
        tokenizer_json = tokenizer_json or self.backend.to_str()
        return RenderKit(
            self.template_text,
            self.base_kwargs,
            tokenizer_json,
            self.eot_tokens,
            self.content_parts,
            self.renders_reasoning,
            self.string_arguments,
            self.part_lists,
            self.serving_engine,
            self.harmony is not None,
            self.tool_use.kit(tokenizer_json) if self.tool_use is not None else None,
            self.eos_token,
        )

    def render_reference(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        row_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """The plain path: `transformers`' public ``apply_chat_template(tokenize=False)``."""
        if self.harmony is not None:
            return self._render_harmony(messages, tools, add_generation_prompt, row_kwargs)
        kwargs, clock = split_clock(
            served_template_kwargs(
                {**self.template_kwargs, **self._clock, **(row_kwargs or {})}, self.serving_engine
            )
        )
        unaliased = self._unaliased(messages)
        # apply_chat_template cannot pass a function to the template, aliases reasoning, and
        # holds all a template writes (bounded: stopped at the row's cap, as build stops)
        if clock is not None or unaliased or self.max_chars is not None:
            special = self.tokenizer.special_tokens_map
            args = {**special, **kwargs}
            text, _ = render_stock(
                self.template_text,
                self.served_messages(messages) if unaliased else messages,
                self.served_tools(tools),
                add_generation_prompt,
                args,
                clock,
                alias=not unaliased,
                cap=self.max_chars,
            )
            return self.check_size(text)
        text = self.tokenizer.apply_chat_template(
            messages,
            tools=self.served_tools(tools),
            chat_template=self.template_text,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **kwargs,
        )
        if not isinstance(text, str):  # batched output shapes differ between versions
            text = text[0]
        return self.check_size(text)

    # --- identity ----------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """sha256 over the tokenizer's files (or its vocabulary when no folder is known)."""
        if self.path is not None:
            return tokenizer_files_fingerprint(self.path)
        return hashlib.sha256(self.backend.to_str().encode()).hexdigest()

    def vocab_size(self, override: int | None = None) -> int:
        """Target model vocabulary size: config.json's `vocab_size` (may exceed the tokenizer's)."""
        n = len(self.tokenizer)
        if override is not None:
            if override < n:  # its ids would not fit the model's embedding: refuse, never cut
                raise TokenizerError(
                    f"--target-vocab-size {override} is smaller than the tokenizer's {n} tokens"
                    " (the target model's config.json vocab_size is at least that)"
                )
            return override
        configured = config_vocab_size(str(self.path)) if self.path is not None else None
        return n if configured is None else max(n, configured)

    # --- internals ---------------------------------------------------------------------------
    def _own_template(self) -> str:
        tmpl = getattr(self.tokenizer, "chat_template", None)
        if isinstance(tmpl, dict):  # named templates: use the default one
            tmpl = tmpl.get("default")
        if not tmpl and self.harmony is not None:
            return ""  # the engine needs none: it renders harmony
        if not tmpl:
            beside = (  # a processor's (multimodal models ship it so): the tokenizer skips it
                " (its chat_template.json holds a processor's template: save its chat_template"
                " value as a .jinja file and give that)"
                if self.path is not None and (self.path / "chat_template.json").is_file()
                else ""
            )
            raise TokenizerError(
                f"tokenizer {self.spec.tokenizer!r} has no chat template; pass --chat-template"
                f" FILE{beside}"
            )
        return str(tmpl)

    def _named_tool_use(self) -> str | None:
        """The tokenizer's named templates' ``tool_use`` one when it is not the ``default``
        (Hermes-2-Pro, Hermes-3, Command-R): the one a server renders a request with tools by."""
        tmpl = getattr(self.tokenizer, "chat_template", None)
        if not isinstance(tmpl, dict):
            return None
        tool_use = tmpl.get("tool_use")
        return str(tool_use) if tool_use and tool_use != tmpl.get("default") else None

    def _end_of_turn_tokens(self, extra: tuple[str, ...]) -> tuple[str, ...]:
        """What the server stops on: ``--eot-token`` extras, ``generation_config.json``'s
        ``eos_token_id`` and the tokenizer's EOS. Never probed from the template: without that
        file (and without ``--eot-token``) a usage error says how to supply them."""
        found: list[str] = []

        def add(tok: str | None) -> None:
            if tok and tok not in found:
                found.append(tok)

        for tok in extra:
            if tok not in self.tokenizer.get_vocab():
                said = f"--eot-token {tok!r} is not a token of this tokenizer"
                if tok.isdigit() and int(tok) < len(self.tokenizer):  # an id (the config's)
                    text = self.tokenizer.convert_ids_to_tokens(int(tok))
                    said += (
                        f": it takes the token's text, and id {tok} is {text!r}"
                        f" (--eot-token {text!r})"
                    )
                else:
                    said += _eot_hint(tok, self.tokenizer)
                raise TokenizerError(said)
            special = tok in self.tokenizer.get_added_vocab() or tok in getattr(
                self.tokenizer, "all_special_tokens", ()
            )
            if not special:  # a word, which answers hold
                eos = self.eos_token
                raise TokenizerError(
                    f"--eot-token {tok!r} is an ordinary token of the vocabulary, not a special"
                    " token a server stops on (give the model's end-of-turn token"
                    + (f", e.g. this tokenizer's EOS {eos!r})" if eos else ")")
                )
            add(tok)
        stop_ids = self._generation_config_eos_ids()
        if stop_ids is None and not extra:
            raise TokenizerError(missing_stops_message(self.spec.tokenizer))
        for tok_id in stop_ids or ():
            add(self.tokenizer.convert_ids_to_tokens(tok_id))
        add(self.eos_token)
        return tuple(found)

    def _generation_config_eos_ids(self) -> list[int] | None:
        """``eos_token_id`` of ``generation_config.json`` (int or list); None when absent."""
        return model_stop_ids(self.spec.tokenizer, self.path, len(self.tokenizer))


def model_stop_ids(tokenizer: str, folder: Path | None, n_tokens: int) -> list[int] | None:
    """``generation_config_stop_ids`` of the tokenizer folder, or of the hub repo's own
    ``generation_config.json`` when the tokenizer is a hub id (None when it has none)."""
    if folder is None:
        try:
            from huggingface_hub import hf_hub_download  # lazy: only hub ids need it (~40 ms)

            folder = Path(hf_hub_download(tokenizer, "generation_config.json")).parent
        except Exception:  # no such file in the repo, or offline: nothing to read
            return None
    return generation_config_stop_ids(folder, n_tokens)


def missing_stops_message(tokenizer: str) -> str:
    """The one-line usage error when nothing says where the model's generations end."""
    return (
        f"no generation_config.json with an eos_token_id beside the tokenizer {tokenizer}: the"
        " stop tokens are read from it, never guessed; put the model's generation_config.json"
        " in the tokenizer folder, or pass --eot-token TOKEN for each token the server stops on"
        " (`eot_tokens` in a recipe or the Python API)"
    )


def generation_config_stop_ids(folder: Path, n_tokens: int) -> list[int] | None:
    """The ids a server stops on per the folder's ``generation_config.json``, else None.

    A file that does not parse, or holds no valid id, raises `TokenizerError`: guessing the
    stop tokens instead would silently change every mask.
    """
    f = folder / "generation_config.json"
    if not f.is_file():
        return None
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{f} is not valid JSON: {exc}") from exc
    ids = cfg.get("eos_token_id") if isinstance(cfg, dict) else None
    if ids is None:
        return None
    ids = [ids] if isinstance(ids, int) else ids
    if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < n_tokens for i in ids):
        raise TokenizerError(f"{f}: eos_token_id {ids!r} is not a token id or a list of them")
    return ids


# --- per-template probes (docs/semantics.md): how the template reads messages ------------------
def as_content_parts(messages: list[Message]) -> list[Message]:
    """String content as one text part, for templates that only read lists of parts."""
    return [
        {**m, "content": [{"type": "text", "text": m["content"]}]}
        if m.get("role") != "tool" and isinstance(m.get("content"), str) and m["content"]
        else m
        for m in messages
    ]


def probe_shape(
    render: Any, template_text: str, engine: str, harmony: Any
) -> tuple[bool, bool, bool, bool]:
    """(content as parts, renders reasoning, arguments as text, renders lists of parts): how
    the template reads messages. On vLLM's template path the first and last are not probed
    but vLLM's own choice, its content format (`mask.content_format`): a template that loops
    over content gets every message's content as parts, any other strings; under SGLang every
    string stays a string and its own detection (`sglang_content_format`) decides the last."""
    if engine == "vllm" and not harmony:
        parts = lists = content_format(template_text) == "openai"
    elif engine == "sglang" and not harmony:  # strings stay strings there, whatever it detects
        parts, lists = False, sglang_content_format(template_text) == "openai"
    else:
        parts = probe_content_parts(render)
        lists = parts or probe_part_lists(render)
    reasoning = probe_renders_reasoning(render, parts)
    return parts, reasoning, probe_string_arguments(render, parts), lists


def probe_content_parts(render: Any) -> bool:
    """True when the template renders string content as nothing but a text part as its text
    (SmolVLM, Idefics3, LLaVA-NeXT): then content is passed as parts."""
    msgs: list[Message] = [{"role": "user", "content": _PROBE_USER}]
    try:
        if _PROBE_USER in render(msgs, None, True):
            return False
        return _PROBE_USER in render(as_content_parts(msgs), None, True)
    except Exception:
        return False


_PROBE_PART_1 = "DRAFTSET_PROBE_PART_ONE_7f3a"
_PROBE_PART_2 = "DRAFTSET_PROBE_PART_TWO_7f3a"


def probe_part_lists(render: Any) -> bool:
    """True when the template renders a message's list of text parts as their texts (it loops
    over the content): vLLM then hands it a row's parts as sent (its "openai" content format),
    where a template that reads content only as a string gets them joined by a newline."""
    parts = [{"type": "text", "text": _PROBE_PART_1}, {"type": "text", "text": _PROBE_PART_2}]
    try:
        text = render([{"role": "user", "content": parts}], None, True)
    except Exception:
        return False
    shown = _PROBE_PART_1 in text and _PROBE_PART_2 in text
    return shown and "'type'" not in text and '"type"' not in text  # not the list's repr / JSON


def probe_renders_reasoning(render: Any, content_parts: bool = False) -> bool:
    """True when the template renders an answer's ``reasoning_content`` before its content, in
    that turn: only then is inline ``<think>…</think>`` reasoning moved there."""
    msgs: list[Message] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": _PROBE, "reasoning_content": _PROBE_REASONING},
    ]
    try:
        text = render(as_content_parts(msgs) if content_parts else msgs)
    except Exception:
        return False
    i = text.find(_PROBE_REASONING)
    return 0 <= i < text.find(_PROBE)


_PROBE_TOOL = "draftset_probe_tool_7f3a"
_PROBE_ARGUMENT = "DRAFTSET_PROBE_ARGUMENT_7f3a"


def probe_string_arguments(render: Any, content_parts: bool = False) -> bool:
    """True when the template renders a tool call's ``arguments`` only as a JSON string (it
    concatenates them: DeepSeek-V3.1, DeepSeek-R1), not as the object normalization makes of
    them: then every call's arguments are given as the row's own JSON text."""

    def shows(arguments: Any) -> bool:
        call = {"type": "function", "function": {"name": _PROBE_TOOL, "arguments": arguments}}
        msgs: list[Message] = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
        ]
        try:
            return _PROBE_ARGUMENT in render(as_content_parts(msgs) if content_parts else msgs)
        except Exception:
            return False

    as_object = {"probe": _PROBE_ARGUMENT}
    return not shows(as_object) and shows(json.dumps(as_object))
