"""The target model's tokenizer and chat template, loaded once per process.

Rendering goes through `transformers`' own `apply_chat_template` (its sandboxed Jinja), exactly
as a serving stack renders prompts; nothing here knows any particular model. The end-of-turn
tokens are found by probing the template (the first special token it writes after an assistant
answer) plus the tokenizer's EOS and ``generation_config.json``'s stop ids.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from draftset.limits import RENDER_CAP_FACTOR, RENDER_CAP_FLOOR, RenderTooLarge
from draftset.records import Message

_PROBE = "DRAFTSET_PROBE_ANSWER_7f3a"
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


class TokenizerError(Exception):
    """The tokenizer or template cannot be loaded (a usage error: exit code 2)."""


@dataclass(slots=True)
class TemplateSpec:
    """Everything needed to re-create the exact renderer in another process (or in `verify`)."""

    tokenizer: str
    chat_template: str | None = None  # the template text; None = the tokenizer's own
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    eot_tokens: tuple[str, ...] = ()  # extra end-of-turn tokens given by the user


def _resolve_tokenizer_path(name: str) -> str:
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise TokenizerError(f"tokenizer path is not a folder: {name}")
        return str(path)
    if os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "True", "YES", "yes"):
        raise TokenizerError(f"tokenizer folder not found and HF_HUB_OFFLINE is set: {name}")
    return name  # a hub id; from_pretrained downloads it


def import_template_compiler() -> None:
    """Import transformers' template compiler now (~0.7 s): workers do it while they wait."""
    with contextlib.suppress(ImportError):
        import transformers.utils.chat_template_utils  # noqa: F401


def _compile(template_text: str) -> Any:
    """transformers' own compiled, sandboxed template (None when its internals moved)."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        return None
    return _compile_jinja_template(template_text)


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


class Renderer:
    """Render (transformers' compiled sandboxed template) + encode + find end-of-turn tokens."""

    backend: Any
    template_text: str
    eot_tokens: tuple[str, ...]
    eot_ids: frozenset[int]
    _compiled: Any
    _base_kwargs: dict[str, Any]
    # most characters one render may produce (`limits.render_char_cap`); None = unbounded
    max_chars: int | None = None

    @classmethod
    def from_kit(cls, kit: RenderKit) -> Renderer | None:
        """A light renderer, or None when transformers' compiled-template helper is missing."""
        compiled = _compile(kit.template_text)
        if compiled is None:
            return None
        from tokenizers import Tokenizer

        r = cls.__new__(cls)
        r.backend = Tokenizer.from_str(kit.tokenizer_json)
        r.template_text = kit.template_text
        r.eot_tokens = kit.eot_tokens
        r.eot_ids = frozenset(r.backend.token_to_id(t) for t in kit.eot_tokens)
        r._compiled = compiled
        r._base_kwargs = kit.base_kwargs
        return r

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
        if self._compiled is None:  # only a full ChatTemplate (fast=False) lacks it
            return self.render_reference(messages, tools, add_generation_prompt, row_kwargs)
        return self._render_compiled(messages, tools, add_generation_prompt, row_kwargs)

    def check_size(self, text: str) -> str:
        """``text``, or `RenderTooLarge` when it is longer than ``max_chars``."""
        if self.max_chars is not None and len(text) > self.max_chars:
            raise _too_large(self.max_chars)
        return text

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
        chat = [
            {"thinking": m["reasoning_content"], **m} if "reasoning_content" in m else m
            for m in messages
        ]
        kwargs = self._base_kwargs if not row_kwargs else {**self._base_kwargs, **row_kwargs}
        if self.max_chars is None:
            return self._compiled.render(
                messages=chat,
                tools=tools,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **kwargs,
            )
        # the same render as pieces (Jinja's render is "".join of them), so a template that
        # writes without end is stopped at the cap instead of filling memory
        cap = self.max_chars
        pieces = self._compiled.generate(
            messages=chat,
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        parts: list[str] = []
        size = 0
        while chunk := list(islice(pieces, 256)):  # counted a chunk at a time: C-speed
            size += sum(map(len, chunk))
            if size > cap:
                raise _too_large(cap)
            parts += chunk
        return "".join(parts)

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
        return bool(_GENERATION_TAG.search(self.template_text))

    def generation_tag_spans(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        row_kwargs: dict[str, Any] | None = None,
    ) -> tuple[str, list[tuple[int, int]]]:
        """The full render and the character spans its ``{% generation %}`` blocks cover.

        Only used to cross-check the prefix rule on templates that have such tags.
        """
        from transformers.utils.chat_template_utils import render_jinja_template

        kwargs = self._base_kwargs if not row_kwargs else {**self._base_kwargs, **row_kwargs}
        rendered, indices = render_jinja_template(
            conversations=[messages],
            tools=tools,
            chat_template=self.template_text,
            return_assistant_tokens_mask=True,
            **kwargs,
        )
        return self.check_size(rendered[0]), [(int(a), int(b)) for a, b in indices[0] if b > a]

    def decode(self, ids: list[int]) -> str:
        """Token ids back to text, special tokens kept, no clean-up of spaces."""
        return str(self.backend.decode(ids, skip_special_tokens=False))


def _too_large(cap: int) -> RenderTooLarge:
    return RenderTooLarge(
        f"the template wrote more than {cap:,} characters for this row ({RENDER_CAP_FLOOR:,}"
        f" + {RENDER_CAP_FACTOR}x the row's own text: a loop without end?)"
    )


@dataclass(frozen=True, slots=True)
class TemplateInfo:
    """A loaded template's kit plus the facts the manifest records about it."""

    kit: RenderKit
    fingerprint: str
    template_sha256: str
    template_kwargs: dict[str, Any]
    vocab_size: int
    tokenizer_size: int


def load_template_info(spec: TemplateSpec, target_vocab_size: int | None = None) -> TemplateInfo:
    """Load the tokenizer and template (raises `TokenizerError`) and describe them."""
    return describe_template(ChatTemplate(spec), target_vocab_size)


def describe_template(t: ChatTemplate, target_vocab_size: int | None = None) -> TemplateInfo:
    """The kit and manifest facts of a loaded template."""
    return TemplateInfo(
        kit=t.kit(),
        fingerprint=t.fingerprint(),
        template_sha256=t.template_fingerprint(),
        template_kwargs=dict(t.template_kwargs),
        vocab_size=t.vocab_size(target_vocab_size),
        tokenizer_size=len(t.tokenizer),
    )


class ChatTemplate(Renderer):
    """Tokenizer + chat template + options: the render primitives mask derivation needs."""

    def __init__(self, spec: TemplateSpec, fast: bool = True) -> None:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            from transformers import AutoTokenizer
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            path = _resolve_tokenizer_path(spec.tokenizer)
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except TokenizerError:
            raise
        except Exception as exc:  # any loader failure is one clear line for the user
            raise TokenizerError(f"cannot load tokenizer {spec.tokenizer!r}: {exc}") from exc
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise TokenizerError(f"tokenizer {spec.tokenizer!r} has no fast (Rust) backend")
        self.spec = spec
        self.backend = backend
        self.path = Path(path) if Path(path).is_dir() else None
        self.template_text: str = spec.chat_template or self._own_template()
        self.template_kwargs = dict(spec.template_kwargs)
        self._compiled = _compile(self.template_text) if fast else None
        self._base_kwargs = {**self.tokenizer.special_tokens_map, **self.template_kwargs}
        self.special_tokens = frozenset(
            str(tok) for tok in self.tokenizer.added_tokens_decoder.values() if tok.special
        )
        self.eot_tokens: tuple[str, ...] = self._end_of_turn_tokens(spec.eot_tokens)
        if not self.eot_tokens:
            raise TokenizerError(
                "no end-of-turn token found for this template; pass --eot-token (e.g. '<|im_end|>')"
            )
        self.eot_ids = frozenset(
            self.tokenizer.convert_tokens_to_ids(tok) for tok in self.eot_tokens
        )

    # --- rendering ---------------------------------------------------------------------------
    def kit(self) -> RenderKit:
        """Everything a worker needs to render and encode exactly like this object."""
        return RenderKit(
            self.template_text, dict(self._base_kwargs), self.backend.to_str(), self.eot_tokens
        )

    def render_reference(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        row_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """The plain path: `transformers`' public ``apply_chat_template(tokenize=False)``."""
        kwargs = self.template_kwargs if not row_kwargs else {**self.template_kwargs, **row_kwargs}
        text = self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
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
        h = hashlib.sha256()
        if self.path is not None:
            for name in _TOKENIZER_FILES:
                f = self.path / name
                if f.exists():
                    h.update(name.encode())
                    h.update(hashlib.sha256(f.read_bytes()).digest())
        else:
            h.update(self.backend.to_str().encode())
        return h.hexdigest()

    def template_fingerprint(self) -> str:
        return hashlib.sha256(self.template_text.encode()).hexdigest()

    def vocab_size(self, override: int | None = None) -> int:
        """Target model vocabulary size: config.json's `vocab_size` (may exceed the tokenizer's)."""
        if override is not None:
            return override
        n = len(self.tokenizer)
        if self.path is not None and (self.path / "config.json").exists():
            try:
                cfg = json.loads((self.path / "config.json").read_text())
                cfg = cfg.get("text_config", cfg)
                n = max(n, int(cfg["vocab_size"]))
            except (ValueError, KeyError, TypeError):
                pass
        return n

    # --- internals ---------------------------------------------------------------------------
    def _own_template(self) -> str:
        tmpl = getattr(self.tokenizer, "chat_template", None)
        if isinstance(tmpl, dict):  # named templates: use the default one
            tmpl = tmpl.get("default")
        if not tmpl:
            raise TokenizerError(
                f"tokenizer {self.spec.tokenizer!r} has no chat template; pass --chat-template FILE"
            )
        return str(tmpl)

    def _end_of_turn_tokens(self, extra: tuple[str, ...]) -> tuple[str, ...]:
        found: list[str] = []

        def add(tok: str | None) -> None:
            if tok and tok not in found:
                found.append(tok)

        for tok in extra:
            if tok not in self.tokenizer.get_vocab():
                raise TokenizerError(f"--eot-token {tok!r} is not a token of this tokenizer")
            add(tok)
        probes = (
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": _PROBE}],
            [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": _PROBE},
                {"role": "user", "content": "Again"},
                {"role": "assistant", "content": "Sure"},
            ],
        )
        for messages in probes:
            try:
                text = self.render(messages)
            except Exception:
                continue
            i = text.find(_PROBE)
            if i < 0:
                continue
            suffix = text[i + len(_PROBE) :]
            for tok in self.backend.encode(suffix, add_special_tokens=False).tokens:
                if tok in self.special_tokens:
                    add(tok)
                    break
        add(getattr(self.tokenizer, "eos_token", None))
        for tok_id in self._generation_config_eos_ids():
            add(self.tokenizer.convert_ids_to_tokens(tok_id))
        return tuple(found)

    def _generation_config_eos_ids(self) -> list[int]:
        if self.path is None or not (self.path / "generation_config.json").exists():
            return []
        try:
            cfg = json.loads((self.path / "generation_config.json").read_text())
        except ValueError:
            return []
        ids = cfg.get("eos_token_id")
        if isinstance(ids, int):
            return [ids]
        return [i for i in ids or [] if isinstance(i, int)]
