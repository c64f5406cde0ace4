"""gpt-oss as vLLM serves it: the harmony format, rendered by the harmony library.

vLLM 0.33.0 never applies a chat template to a model whose ``config.json`` says
``model_type: gpt_oss`` (``OnlineRenderer.use_harmony``): it turns the request's messages into
harmony messages (``vllm/entrypoints/openai/parser/harmony_utils.py``) and renders them with
the harmony library (``oss-harmony``, import name ``openai_harmony``), so the chat template given
with ``--chat-template`` changes nothing. This module does the same steps, with the same library:

- a **system message** from the library's defaults (model identity "You are ChatGPT, …",
  ``Knowledge cutoff: 2024-06``, reasoning effort medium unless the request sets
  ``reasoning_effort``) and ``Current date:`` the server's local date — here the build's pinned
  clock (mask/ambient.py, manifest ``template.now``);
- a leading system/developer message becomes the **developer message**'s instructions, the
  request's tools its function tools (``description or ""``, parameters as given);
- each message as vLLM converts it: an assistant's ``reasoning`` → analysis channel, content →
  final (or commentary beside tool calls), each call → commentary to ``functions.NAME`` with
  content type ``json`` and the arguments' text; a tool result → author ``functions.NAME``
  (found by ``tool_call_id``); empty assistant messages dropped;
- analysis messages before the last final answer dropped, the prompt ended by
  ``<|start|>assistant``, and tool-call headers rewritten to the form gpt-oss was trained on
  (``assistant to=functions.NAME<|channel|>commentary json``, vLLM's
  ``_use_legacy_tool_call_headers``).

That is the **context** of a turn. The **generation** is what the model writes after
``<|start|>assistant``: its analysis (``<|end|>``), then its final answer ending ``<|return|>``
or one tool call ending ``<|call|>`` (the stop tokens of its ``generation_config.json``) — not
the history form vLLM puts in later prompts (no analysis, ``<|end|>``). A later turn whose
prompt holds an earlier turn in another form than it was generated is context
(docs/semantics.md, "gpt-oss under vLLM").
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from draftset.core.errors import UsageError
from draftset.mask.ambient import split_clock
from draftset.mask.serving import answered_calls

HARMONY_MODEL_TYPE = "gpt_oss"
"""The ``config.json`` model type vLLM renders with harmony (``hf_config.model_type``)."""
HARMONY_PIN = "oss-harmony==0.0.11"
"""The harmony build vLLM 0.33.0 installs (its fork of openai-harmony, the vocabulary embedded)."""
_EFFORTS = ("low", "medium", "high")


def model_type(folder: str | Path) -> str | None:
    """``model_type`` of ``config.json`` in a tokenizer folder (None when absent)."""
    try:
        cfg = json.loads((Path(folder).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kind = cfg.get("model_type") if isinstance(cfg, dict) else None
    return kind if isinstance(kind, str) else None


def served_with_harmony(tokenizer: str, folder: str | Path | None, engine: str) -> bool:
    """Whether ``engine`` renders this model with harmony instead of its chat template: the
    ``config.json`` beside the tokenizer (or in its hub repo) says ``gpt_oss``."""
    if engine != "vllm":
        return False
    if folder is None:
        try:  # lazy: only hub ids need it
            from huggingface_hub import hf_hub_download

            folder = Path(hf_hub_download(tokenizer, "config.json")).parent
        except Exception:  # no such file in the repo, or offline: the template decides
            return False
    return model_type(folder) == HARMONY_MODEL_TYPE


def _library() -> Any:
    try:
        import openai_harmony  # lazy: only gpt-oss sets served by vLLM need it
    except ImportError:
        raise UsageError(
            "vLLM renders gpt-oss (config.json model_type gpt_oss) with the harmony library,"
            f" which is not installed: pip install 'draftset[harmony]' ({HARMONY_PIN}),"
            " or build with --serving-engine transformers to use the chat template"
        ) from None
    return openai_harmony


_ENCODING: list[Any] = []


def _encoding(h: Any) -> Any:
    """The gpt-oss encoding, loaded once per process (the vocabulary is embedded)."""
    if not _ENCODING:
        _ENCODING.append(h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS))
    return _ENCODING[0]


class HarmonyRender:
    """vLLM 0.33.0's harmony render of chat messages (text; the tokens are the library's)."""

    def __init__(self) -> None:
        h = _library()
        self.h = h
        self.enc = _encoding(h)
        special = {
            name: self.enc.encode(f"<|{name}|>", allowed_special="all")[0]
            for name in ("start", "channel", "constrain", "message", "end", "return", "call")
        }
        self.ids = special

    # --- what vLLM builds ----------------------------------------------------------------
    def _system(self, kwargs: dict[str, Any]) -> Any:
        h = self.h
        content = h.SystemContent.new()
        effort = kwargs.get("reasoning_effort")
        if effort is not None:
            if effort not in _EFFORTS:
                raise ValueError(f"reasoning_effort={effort!r} is not supported by harmony")
            content = content.with_reasoning_effort(h.ReasoningEffort(effort.capitalize()))
        _, clock = split_clock(kwargs)
        date = clock("%Y-%m-%d") if clock is not None else datetime.now().strftime("%Y-%m-%d")
        content = content.with_conversation_start_date(date)
        return h.Message.from_role_and_content(h.Role.SYSTEM, content)

    def _developer(self, instructions: str | None, tools: list[Any] | None) -> Any:
        h = self.h
        content = h.DeveloperContent.new()
        if instructions is not None:
            content = content.with_instructions(instructions)
        functions = []
        for tool in tools or []:
            kind = tool.get("type")
            if kind in ("web_search_preview", "code_interpreter", "container"):
                continue
            if kind != "function":
                raise ValueError(f"tool type {kind!r} is not supported.")
            fn = tool["function"]
            functions.append(
                h.ToolDescription.new(
                    name=fn["name"],
                    description=fn.get("description") or "",
                    parameters=fn.get("parameters"),
                )
            )
        if functions:
            content = content.with_function_tools(functions)
        return h.Message.from_role_and_content(h.Role.DEVELOPER, content)

    def _message(self, msg: dict[str, Any], tool_name: str) -> list[Any]:
        """``parse_chat_input_to_harmony_message``: one chat message as harmony messages
        (``tool_name``: a tool result's, `_tool_names`)."""
        h = self.h
        role = msg.get("role")
        calls = msg.get("tool_calls") or []
        reasoning = msg.get("reasoning_content", msg.get("reasoning"))
        out: list[Any] = []
        if role == "assistant" and calls:
            text = _flatten(msg.get("content"))
            if text:
                out.append(self._assistant(text, "commentary"))
            if reasoning:
                out.append(self._analysis(reasoning))
            out.extend(self._call(call) for call in calls)
            return out
        if role == "tool":
            author = h.Author.new(h.Role.TOOL, f"functions.{tool_name}")
            text = _flatten(msg.get("content")) or ""
            return [
                h.Message.from_author_and_content(author, text)
                .with_channel("commentary")
                .with_recipient("assistant")
            ]
        if role == "assistant" and reasoning:
            out.append(self._analysis(reasoning))
        content = msg.get("content") or ""
        if isinstance(content, str):
            texts = [h.TextContent(text=content)]
        else:
            texts = [h.TextContent(text=c.get("text", "")) for c in content]
        if role == "assistant" and texts and texts[0].text:
            out.append(h.Message.from_role_and_contents(role, texts).with_channel("final"))
        elif role in ("system", "developer"):
            text = _flatten(msg.get("content"))
            if text is not None:
                out.append(self._developer(text, None))
        elif role != "assistant":
            out.append(h.Message.from_role_and_contents(role, texts))
        return out

    def _analysis(self, text: str) -> Any:
        return self._assistant(text, "analysis")

    def _assistant(self, text: str, channel: str) -> Any:
        h = self.h
        return h.Message.from_role_and_content(h.Role.ASSISTANT, text).with_channel(channel)

    def _call(self, call: dict[str, Any]) -> Any:
        h = self.h
        fn = call.get("function") or {}
        arguments = fn.get("arguments", "") or ""
        if not isinstance(arguments, str):  # the wire form is text; an object is a 400 there
            raise TypeError("tool-call arguments must be a JSON string")
        return (
            h.Message.from_role_and_content(h.Role.ASSISTANT, arguments)
            .with_channel("commentary")
            .with_recipient(f"functions.{fn.get('name', '')}")
            .with_content_type("json")
        )

    def prompt_ids(
        self, messages: list[dict[str, Any]], tools: list[Any] | None, kwargs: dict[str, Any]
    ) -> list[int]:
        """The token ids vLLM feeds the model for ``messages`` (``_make_request_with_harmony``)."""
        h = self.h
        chat = list(messages)
        instructions = None
        if chat and chat[0].get("role") in ("system", "developer"):
            instructions = _flatten(chat[0].get("content"))
            chat = chat[1:]
        harmony = [self._system(kwargs)]
        if instructions or tools:
            harmony.append(self._developer(instructions, tools))
        names = _tool_names(chat)
        for i, m in enumerate(chat):
            harmony.extend(self._message(m, names.get(i, "")))
        harmony = _drop_analysis(harmony)
        ids = self.enc.render_conversation_for_completion(
            h.Conversation.from_messages(harmony),
            h.Role.ASSISTANT,
            config=h.RenderConversationConfig(auto_drop_analysis=False),
        )
        return self._legacy_headers(list(ids))

    def generation_ids(self, msg: dict[str, Any]) -> list[int]:
        """What gpt-oss writes after ``<|start|>assistant`` for assistant message ``msg``: its
        analysis, then its final answer (``<|return|>``) or its first tool call (``<|call|>``,
        where the model stops: a further call is another generation)."""
        parts: list[Any] = []
        reasoning = msg.get("reasoning_content", msg.get("reasoning"))
        if reasoning:
            parts.append(self._analysis(reasoning))
        calls = msg.get("tool_calls") or []
        text = _flatten(msg.get("content")) or ""
        if calls:
            if text:
                parts.append(self._assistant(text, "commentary"))
            parts.extend(self._call(call) for call in calls)
        else:
            parts.append(self._assistant(text, "final"))
        ids: list[int] = []
        for part in parts:
            ids.extend(self.enc.render(part))
        if not calls and ids and ids[-1] == self.ids["end"]:
            ids[-1] = self.ids["return"]  # a final answer ends the generation with <|return|>
        ids = self._legacy_headers(ids)
        head = [self.ids["start"], *self.enc.encode("assistant")]
        return ids[len(head) :] if ids[: len(head)] == head else ids

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[Any] | None,
        add_generation_prompt: bool,
        kwargs: dict[str, Any],
    ) -> str:
        """The prompt (with ``add_generation_prompt``), or the prompt before the last assistant
        message followed by that message as the model generates it."""
        if add_generation_prompt or not messages:
            return self.enc.decode(self.prompt_ids(messages, tools, kwargs))
        if messages[-1].get("role") == "assistant":
            prompt = self.prompt_ids(messages[:-1], tools, kwargs)
            return self.enc.decode(prompt + self.generation_ids(messages[-1]))
        prompt = self.prompt_ids(messages, tools, kwargs)
        tail = [self.ids["start"], *self.enc.encode("assistant")]
        if prompt[-len(tail) :] == tail:
            prompt = prompt[: -len(tail)]
        return self.enc.decode(prompt)

    def _legacy_headers(self, ids: list[int]) -> list[int]:
        """vLLM's ``_use_legacy_tool_call_headers``: ``assistant<|channel|>C to=R <|constrain|>T``
        headers back to ``assistant to=R<|channel|>C T``."""
        start, channel, constrain, message = (
            self.ids["start"],
            self.ids["channel"],
            self.ids["constrain"],
            self.ids["message"],
        )
        out = ids.copy()
        i = 0
        while i < len(out):
            if out[i] != start:
                i += 1
                continue
            try:
                head_end = out.index(message, i + 1)
                ch = out.index(channel, i + 1, head_end)
                co = out.index(constrain, ch + 1, head_end)
            except ValueError:
                i += 1
                continue
            author = self.enc.decode(out[i + 1 : ch])
            chan_recipient = self.enc.decode(out[ch + 1 : co])
            content_type = self.enc.decode(out[co + 1 : head_end])
            if (
                author != "assistant"
                or " to=" not in chan_recipient
                or not chan_recipient.endswith(" ")
            ):
                i = head_end + 1
                continue
            chan, recipient = chan_recipient[:-1].split(" to=", 1)
            if not chan or not recipient or not content_type:
                i = head_end + 1
                continue
            legacy = [
                start,
                *self.enc.encode(f"assistant to={recipient}"),
                channel,
                *self.enc.encode(f"{chan} {content_type}"),
                message,
            ]
            out[i : head_end + 1] = legacy
            i += len(legacy)
        return out

    # --- reading a generation back (verify) ------------------------------------------------
    def parse_generation(self, ids: list[int]) -> list[tuple[str | None, str | None, str]]:
        """(channel, recipient, text) of each message in a generation, as vLLM's output parser
        reads the model's tokens (the library's ``StreamableParser``)."""
        h = self.h
        parser = h.StreamableParser(self.enc, role=h.Role.ASSISTANT)
        for tok in ids:
            parser.process(tok)
        out = []
        for m in parser.messages:
            text = "".join(getattr(c, "text", "") for c in m.content)
            out.append((m.channel, m.recipient, text))
        return out

    def expected_generation(self, msg: dict[str, Any]) -> list[tuple[str | None, str | None, str]]:
        """(channel, recipient, text) the row's assistant message stands for."""
        out: list[tuple[str | None, str | None, str]] = []
        reasoning = msg.get("reasoning_content", msg.get("reasoning"))
        if reasoning:
            out.append(("analysis", None, reasoning))
        text = _flatten(msg.get("content")) or ""
        calls = msg.get("tool_calls") or []
        if calls:
            if text:
                out.append(("commentary", None, text))
            fn = calls[0].get("function") or {}
            out.append(("commentary", f"functions.{fn.get('name', '')}", fn.get("arguments") or ""))
        else:
            out.append(("final", None, text))
        return out


def _tool_names(chat: list[dict[str, Any]]) -> dict[int, str]:
    """Per tool result, the name of the tool whose call it answers (`answered_calls`): vLLM
    writes its author ``functions.NAME``, ``functions.`` when it answers no call."""
    out: dict[int, str] = {}
    for i, call in answered_calls(chat).items():
        fn = chat[call[0]]["tool_calls"][call[1]].get("function") or {} if call else {}
        out[i] = str(fn.get("name") or "")
    return out


def _flatten(content: Any) -> str | None:
    """vLLM's ``flatten_input_text_content``."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [
        item if isinstance(item, str) else item.get("text")
        for item in content
        if isinstance(item, str) or (isinstance(item, dict) and item.get("text") is not None)
    ]
    return "".join(texts) if texts else None


def _drop_analysis(msgs: list[Any]) -> list[Any]:
    """vLLM's ``auto_drop_analysis_messages``: analysis before the last final answer goes."""
    last_final = -1
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].author.role == "assistant" and msgs[i].channel == "final":
            last_final = i
            break
    return [m for i, m in enumerate(msgs) if not (i < last_final and m.channel == "analysis")]
