"""Presets: the column layouts of common public chat / instruction sets.

A preset names a `normalize` shape (``format``), a canonical-key -> column mapping (``fields``)
and, for sets whose encoding needs more than renaming keys, a ``transform`` that rewrites one
raw row into a shape `normalize` understands (tool calls in XML or in a text transcript,
reasoning between OpenThoughts markers, Nemotron's on/off column). A transform never invents
content: it only moves text between keys, and it raises `RowProblem` (a row-level reject,
never a run failure) when a row does not have the preset's layout. Where each layout comes from
is documented in docs/mixtures.md.

Use `normalize_with_preset(preset, raw)` (or call ``preset.transform`` yourself, then
``normalize(raw, preset.format, preset.fields)``).
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from draftset.core import reasons
from draftset.core.errors import UsageError
from draftset.core.records import Normalized, RawRow, Reject, RowProblem
from draftset.sources.normalize import FORMATS, json_text, no_lone_surrogate, normalize

Row = dict[str, Any]


@dataclass(frozen=True)
class Preset:
    """How to read one public data set (see docs/mixtures.md for each layout's source)."""

    name: str
    hub_id: str | None  # the HF dataset id (only used when online); None: files only
    format: str  # one of normalize.FORMATS
    fields: dict[str, str] | None = None  # canonical key -> the set's column
    transform: Callable[[Row], Row] | None = None  # row -> row in a shape normalize reads
    description: str = ""
    hub_config: str | None = None
    hub_split: str = "train"
    aliases: tuple[str, ...] = field(default=())
    signature: tuple[str, ...] = field(default=())  # keys that name the layout (a hint on
    # `unknown_format` rows read without a preset)


class UnknownPresetError(UsageError, KeyError):
    """`apply_preset` was given a name no preset (or alias) has (exit code 2)."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0])


# --- shared helpers -------------------------------------------------------------------------


def _require(row: Row, key: str, kind: type | tuple[type, ...]) -> Any:
    value = row.get(key)
    if not isinstance(value, kind):
        what = "missing" if value is None else f"a {type(value).__name__}"
        raise RowProblem(reasons.UNKNOWN_FORMAT, f"column {key!r} is {what}")
    return value


def _json_or_literal(text: str, where: str, reason: str = reasons.INVALID_TOOL_CALL) -> Any:
    """JSON, else a Python literal (some sets print dicts with single quotes)."""
    try:
        return json_text(text, where)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise RowProblem(reason, f"{where}: not valid JSON: {text[:80]!r}") from None
    return no_lone_surrogate(text, value, where)


def _metadata_dict(row: Row) -> dict[str, Any]:
    """The row's ``metadata`` as a dict (Nemotron stores a JSON string; other values kept)."""
    meta = row.get("metadata")
    if isinstance(meta, dict):
        return dict(meta)
    if isinstance(meta, str) and meta.strip():
        try:
            parsed = json.loads(meta)
        except ValueError:
            return {"raw": meta}
        return dict(parsed) if isinstance(parsed, dict) else {"raw": parsed}
    return {}


def _thinking_flag(value: Any) -> str | None:
    """Nemotron's ``reasoning`` column: ``"on"`` / ``"off"`` (anything else: unknown)."""
    if isinstance(value, str) and value.strip().lower() in ("on", "off"):
        return value.strip().lower()
    return None


# --- Nemotron ------------------------------------------------------------------------------


def nemotron_v1_row(row: Row) -> Row:
    """Nemotron-Post-Training-Dataset-v1/v2: ``messages`` + ``reasoning`` on/off + ``metadata``.

    Reasoning sits in the assistant content as ``<think>...</think>`` (normalize moves it to
    ``reasoning_content``). ``reasoning`` is recorded as ``metadata.thinking`` so a
    reasoning-off row counts as thinking explicitly off (see modes.py); ``metadata`` (a JSON
    string in the set) becomes a dict so it is carried along.
    """
    out = dict(row)
    _require(row, "messages", list)
    meta = _metadata_dict(row)
    flag = _thinking_flag(row.get("reasoning"))
    if flag is not None:
        meta["thinking"] = flag
    if out.get("tools") is None and isinstance(meta.get("tools"), list | str):
        out["tools"] = meta.pop("tools")  # tool_calling split: schemas in metadata, if anywhere
    out["metadata"] = meta
    return out


_LLAMA3_HEADER = re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n")
_LLAMA3_SPECIALS = ("<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>")


def _llama3_transcript(text: str) -> list[Row]:
    """Messages from a Llama-3 rendered prompt (the v1 files stored ``input`` that way)."""
    parts = _LLAMA3_HEADER.split(text)
    turns: list[Row] = []
    for role, body in zip(parts[1::2], parts[2::2], strict=True):
        for special in _LLAMA3_SPECIALS:
            body = body.replace(special, "")
        turns.append({"role": role, "content": body})
    if turns and turns[-1]["role"] == "assistant" and not turns[-1]["content"].strip():
        turns.pop()  # the trailing generation prompt, not a turn
    if not turns:
        raise RowProblem(reasons.UNKNOWN_FORMAT, "'input' holds no Llama-3 chat turns")
    return turns


def llama_nemotron_row(row: Row) -> Row:
    """Llama-Nemotron-Post-Training-Dataset: ``input`` (messages, or a Llama-3 rendered string
    in early files) + ``output`` + ``system_prompt`` ("detailed thinking on/off") + ``reasoning``.
    """
    raw_input = row.get("input")
    if isinstance(raw_input, str):
        turns = _llama3_transcript(raw_input)
    elif isinstance(raw_input, list):
        turns = list(raw_input)
    else:
        raise RowProblem(reasons.UNKNOWN_FORMAT, "column 'input' is missing")
    output = row.get("output")
    messages: list[Row] = []
    system = row.get("system_prompt")
    if isinstance(system, str) and system and not (turns and turns[0].get("role") == "system"):
        messages.append({"role": "system", "content": system})
    messages.extend(turns)
    if isinstance(output, str):
        for special in _LLAMA3_SPECIALS:
            output = output.replace(special, "")
        messages.append({"role": "assistant", "content": output})
    out = {k: v for k, v in row.items() if k not in ("input", "output", "system_prompt")}
    out["messages"] = messages
    meta = _metadata_dict(row)
    flag = _thinking_flag(row.get("reasoning"))
    if flag is not None:
        meta["thinking"] = flag
    out["metadata"] = meta
    return out


# --- OpenThoughts / Bespoke-Stratos / Sky-T1 markers -------------------------------------

THOUGHT_OPEN = "<|begin_of_thought|>"
THOUGHT_CLOSE = "<|end_of_thought|>"
SOLUTION_OPEN = "<|begin_of_solution|>"
SOLUTION_CLOSE = "<|end_of_solution|>"


def split_thought_markers(text: str) -> tuple[str, str | None, bool]:
    """(content, reasoning, unterminated) from a Sky-T1 / OpenThoughts style answer.

    ``<|begin_of_thought|> R <|end_of_thought|> <|begin_of_solution|> S <|end_of_solution|>``
    gives reasoning R and content S, each stripped of surrounding whitespace (the markers are
    padded with blank lines). A trace cut before ``<|end_of_thought|>`` is all reasoning, with
    content "" and ``unterminated`` True. Text without the markers is returned unchanged.
    """
    start = text.find(THOUGHT_OPEN)
    if start == -1 or text[:start].strip():
        return text, None, False
    body = text[start + len(THOUGHT_OPEN) :]
    end = body.find(THOUGHT_CLOSE)
    if end == -1:
        return "", body.strip() or None, True
    reasoning = body[:end].strip() or None
    rest = body[end + len(THOUGHT_CLOSE) :].strip()
    if rest.startswith(SOLUTION_OPEN):
        rest = rest[len(SOLUTION_OPEN) :]
        close = rest.find(SOLUTION_CLOSE)
        rest = rest[:close] if close != -1 else rest
    return rest.strip(), reasoning, False


def openthoughts_row(row: Row) -> Row:
    """OpenThoughts-114k / Bespoke-Stratos-17k: ``system`` + ``conversations`` (from/value) whose
    assistant values carry the thought / solution markers -> ``reasoning_content`` + content."""
    turns = _require(row, "conversations", list)
    out_turns: list[Any] = []
    unterminated = False
    for turn in turns:
        if not isinstance(turn, dict):
            out_turns.append(turn)
            continue
        role = turn.get("from", turn.get("role"))
        key = "value" if "value" in turn else "content"
        text = turn.get(key)
        if str(role).lower() in ("assistant", "gpt") and isinstance(text, str):
            content, reasoning, cut = split_thought_markers(text)
            turn = dict(turn)
            turn[key] = content
            if reasoning is not None:
                turn["reasoning_content"] = reasoning
            unterminated = unterminated or cut
        out_turns.append(turn)
    out = dict(row)
    out["conversations"] = out_turns
    if unterminated:
        meta = _metadata_dict(row)
        meta["reasoning_unterminated"] = True
        out["metadata"] = meta
    return out


# --- Hermes function calling --------------------------------------------------------------

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_TOOLS_BLOCK = re.compile(r"<tools>\s*(.*?)\s*</tools>", re.DOTALL)
_HERMES_ROLES = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}


def _hermes_calls(text: str, where: str) -> tuple[str, list[Row]]:
    """(remaining text, calls) of a gpt value with inline ``<tool_call>{json}</tool_call>``."""
    calls = []
    for k, body in enumerate(_TOOL_CALL.findall(text)):
        call = _json_or_literal(body, f"{where} <tool_call> {k}")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise RowProblem(reasons.INVALID_TOOL_CALL, f"{where} <tool_call> {k}: no name")
        calls.append({"name": call["name"], "arguments": call.get("arguments") or {}})
    return _TOOL_CALL.sub("", text).strip(), calls


def _hermes_responses(text: str) -> list[Row]:
    """One tool message per ``<tool_response>`` block (the OpenAI shape: a result per call)."""
    bodies = _TOOL_RESPONSE.findall(text)
    if not bodies:
        return [{"role": "tool", "content": text}]
    out = []
    for body in bodies:
        msg: Row = {"role": "tool", "content": body}
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("name"), str):
            msg["name"] = parsed["name"]
        out.append(msg)
    return out


def hermes_markup(data: Any) -> bool:
    """Whether a plain chat row is Hermes function calling: a system turn listing ``<tools>``
    and an assistant turn writing ``<tool_call>`` (the layout `hermes_row` reads)."""
    turns = data.get("conversations", data.get("messages")) if isinstance(data, dict) else None
    tools = calls = False
    for turn in turns if isinstance(turns, list) else []:
        if not isinstance(turn, dict):
            continue
        role = str(turn.get("from", turn.get("role"))).lower()
        text = turn.get("value", turn.get("content"))
        if isinstance(text, str):
            tools = tools or (role == "system" and "<tools>" in text)
            calls = calls or (role in ("gpt", "assistant") and "<tool_call>" in text)
    return tools and calls


def hermes_row(row: Row) -> Row:
    """NousResearch hermes-function-calling-v1: ShareGPT with inline XML tool markup.

    The system turn that lists the tools in ``<tools>`` is Hermes' own tool prompt: it is
    dropped and its schemas become ``tools`` (unless the row has a ``tools`` column), so the
    target model's chat template renders the tools its own way, as at serving time.
    """
    turns = _require(row, "conversations", list)
    tools = row.get("tools")
    if isinstance(tools, str) and tools.strip() in ("", "[]"):
        tools = None
    messages: list[Row] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RowProblem(reasons.INVALID_CONTENT, f"turn {i} is not an object")
        src_role = turn.get("from", turn.get("role"))
        text = turn.get("value", turn.get("content"))
        role = _HERMES_ROLES.get(str(src_role).lower(), src_role)
        if not isinstance(text, str):
            messages.append({"role": role, "content": text})
            continue
        if role == "system" and "<tools>" in text:
            blocks = [b for b in _TOOLS_BLOCK.findall(text) if b]  # skip "<tools> </tools>" prose
            if tools is None and blocks:
                tools = _json_or_literal(blocks[-1], f"turn {i} <tools>", reasons.INVALID_TOOLS)
            continue
        if role == "assistant" and "<tool_call>" in text:
            content, calls = _hermes_calls(text, f"turn {i}")
            messages.append({"role": "assistant", "content": content, "tool_calls": calls})
        elif role == "tool":
            messages.extend(_hermes_responses(text))
        else:
            messages.append({"role": role, "content": text})
    out = {k: v for k, v in row.items() if k != "conversations"}
    out["messages"] = messages
    if tools is not None:
        out["tools"] = tools
    return out


# --- Glaive function calling v2 -----------------------------------------------------------

_GLAIVE_TURN = re.compile(r"(?:^|\n+)\s*(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]?")
_GLAIVE_EOT = "<|endoftext|>"
_GLAIVE_CALL = "<functioncall>"
_GLAIVE_ROLES = {"USER": "user", "ASSISTANT": "assistant", "FUNCTION RESPONSE": "tool"}


def _glaive_system(text: str) -> tuple[str, list[Row]]:
    """(prose, tool schemas) of a glaive ``system`` value: ``SYSTEM: prose - {json} {json}``."""
    text = text.removeprefix("SYSTEM:").strip()
    start = text.find("{")
    if start == -1:
        return text, []
    prose, rest = text[:start].rstrip(), text[start:]
    decoder = json.JSONDecoder()
    tools: list[Row] = []
    pos = 0
    while pos < len(rest):
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
        if pos >= len(rest):
            break
        try:
            obj, pos = decoder.raw_decode(rest, pos)
        except ValueError:
            raise RowProblem(
                reasons.INVALID_TOOLS, f"glaive system: function schema {len(tools)} is not JSON"
            ) from None
        if isinstance(obj, dict):
            tools.append(obj)
    return prose, tools


def _glaive_call(text: str, where: str) -> Row:
    """``{"name": "f", "arguments": '{...}'}`` (arguments single-quoted JSON text) -> call."""
    name = re.search(r'"name"\s*:\s*"([^"]+)"', text)
    if name is None:
        raise RowProblem(reasons.INVALID_TOOL_CALL, f"{where}: function call has no name")
    args: Any = {}
    m = re.search(r'"arguments"\s*:\s*', text)
    if m is not None:
        rest = text[m.end() :].strip()
        if rest.startswith("'"):
            close = rest.rfind("'")
            args_text = rest[1:close] if close > 0 else rest[1:]
        else:
            args_text = rest[: rest.rfind("}")].strip() if rest.endswith("}") else rest
        try:
            args = json_text(args_text, where) if args_text.strip() else {}
        except ValueError:
            msg = f"{where}: arguments are not valid JSON: {args_text[:80]!r}"
            raise RowProblem(reasons.INVALID_TOOL_CALL, msg) from None
    return {"name": name.group(1), "arguments": args}


def _glaive_chat(chat: str) -> list[Row]:
    parts = _GLAIVE_TURN.split(chat)
    if parts[0].strip():
        raise RowProblem(reasons.UNKNOWN_FORMAT, "glaive chat does not start with a role")
    messages: list[Row] = []
    for k, (marker, body) in enumerate(zip(parts[1::2], parts[2::2], strict=True)):
        role = _GLAIVE_ROLES[marker]
        body = body.strip()
        if role == "assistant":
            body = body.removesuffix(_GLAIVE_EOT).rstrip()
            at = body.find(_GLAIVE_CALL)
            if at != -1:
                call = _glaive_call(body[at + len(_GLAIVE_CALL) :], f"turn {k}")
                content = body[:at].strip()
                messages.append({"role": role, "content": content, "tool_calls": [call]})
                continue
        messages.append({"role": role, "content": body})
    return messages


def glaive_row(row: Row) -> Row:
    """glaive-function-calling-v2 raw text (``system`` + ``chat`` transcript), or passes the
    LLaMA-Factory shape (``conversations`` with function_call/observation, ``tools``) as is."""
    if "chat" not in row:
        return row
    chat = _require(row, "chat", str)
    system = row.get("system")
    prose, tools = _glaive_system(system) if isinstance(system, str) else ("", [])
    messages = _glaive_chat(chat)
    if prose:
        messages.insert(0, {"role": "system", "content": prose})
    out = {k: v for k, v in row.items() if k not in ("system", "chat")}
    out["messages"] = messages
    out["tools"] = tools or None
    return out


# --- xLAM function calling 60k ------------------------------------------------------------


def xlam_row(row: Row) -> Row:
    """xlam-function-calling-60k: ``query`` + ``tools`` (JSON text) + ``answers`` (JSON text,
    a list of ``{name, arguments}``) -> user turn + one assistant turn holding the calls."""
    query = _require(row, "query", str)
    answers = row.get("answers")
    if isinstance(answers, str):
        answers = _json_or_literal(answers, "answers")
    if not isinstance(answers, list):
        raise RowProblem(reasons.INVALID_TOOL_CALL, "'answers' is not a list of calls")
    messages: list[Row] = [{"role": "user", "content": query}]
    if answers:
        messages.append({"role": "assistant", "content": "", "tool_calls": answers})
    out = {k: v for k, v in row.items() if k not in ("query", "answers")}
    out["messages"] = messages
    return out


# --- SkyThought evaluation dumps ----------------------------------------------------------

_SKYTHOUGHT_EVAL_KEYS = ("gt", "gt_cot", "answer", "solution", "pred", "report", "score", "win")


def skythought_row(row: Row) -> Row:
    """NovaSky-AI SkyThought evaluation outputs: ``question`` + ``code`` (a list of the model's
    generations with ``<|begin_of_thought|>`` ... ``<|end_of_solution|>`` markers) + grading
    columns -> user turn + assistant turn (reasoning R, content S) from the first generation.

    The grading columns (``gt``, ``pred``, ``score``, the reference ``solution``, ...) are
    kept in ``metadata``, never trained: they are the benchmark's, not the model's.
    """
    question = _require(row, "question", str)
    code = row.get("code")
    generations = [code] if isinstance(code, str) else code
    if not isinstance(generations, list) or not generations:
        raise RowProblem(reasons.UNKNOWN_FORMAT, "column 'code' holds no generation")
    first = generations[0]
    if not isinstance(first, str):
        raise RowProblem(reasons.INVALID_CONTENT, f"code[0] is a {type(first).__name__}")
    content, reasoning, cut = split_thought_markers(first)
    answer: Row = {"role": "assistant", "content": content}
    if reasoning is not None:
        answer["reasoning_content"] = reasoning
    meta = _metadata_dict(row)
    meta.update({k: row[k] for k in _SKYTHOUGHT_EVAL_KEYS if k in row})
    if len(generations) > 1:
        meta["generations"] = len(generations)  # the first is trained
    if cut:
        meta["reasoning_unterminated"] = True
    out = {k: v for k, v in row.items() if k not in ("question", "code", *_SKYTHOUGHT_EVAL_KEYS)}
    out["messages"] = [{"role": "user", "content": question}, answer]
    out["metadata"] = meta
    return out


# --- ToolBench answer trees -----------------------------------------------------------------


def toolbench_row(row: Row) -> Row:
    """OpenBMB ToolBench DFSDT answers (``data/answer/G*_answer/*.json``): the final chain of
    ``answer_generation.train_messages`` (a list of growing prefixes of one trajectory; the
    last is the whole of it) -> messages, ``answer_generation.function`` -> tools.

    Legacy OpenAI ``function_call`` turns and ``function`` results read as tool calls and tool
    messages. The search ``tree`` and ``compare_candidates`` (other branches, not this
    trajectory) are left out; ``finish_type`` / ``valid_data`` / ``query_count`` go to
    ``metadata``. ToolBench's AutoGPT system prompt is kept: it is the row's instruction.
    """
    ag = _require(row, "answer_generation", dict)
    prefixes = ag.get("train_messages")
    if not isinstance(prefixes, list) or not prefixes or not isinstance(prefixes[-1], list):
        raise RowProblem(reasons.UNKNOWN_FORMAT, "answer_generation.train_messages is empty")
    chain = prefixes[-1]
    for k, prefix in enumerate(prefixes[:-1]):
        if not isinstance(prefix, list) or chain[: len(prefix)] != prefix:
            msg = f"train_messages[{k}] is not a prefix of the last one (not one trajectory)"
            raise RowProblem(reasons.UNKNOWN_FORMAT, msg)
    meta = _metadata_dict(row)
    meta.update({k: ag[k] for k in ("finish_type", "valid_data", "query_count") if k in ag})
    out: Row = {"messages": list(chain), "metadata": meta}
    if isinstance(ag.get("function"), list):
        out["tools"] = ag["function"]
    for key in ("id", "query_id"):
        if row.get(key) is not None:
            out[key] = row[key]
    return out


# --- the table ------------------------------------------------------------------------------

_ALL = [
    Preset(
        "openorca",
        "Open-Orca/OpenOrca",
        "alpaca",
        {"system": "system_prompt", "instruction": "question", "output": "response"},
        description="OpenOrca: id, system_prompt, question, response (GPT-4 / GPT-3.5 answers).",
    ),
    Preset(
        "evol-codealpaca",
        "theblackcat102/evol-codealpaca-v1",
        "alpaca",
        {"instruction": "instruction", "output": "output"},
        description="Evol-CodeAlpaca v1: instruction, output.",
    ),
    Preset(
        "codealpaca",
        "sahil2801/CodeAlpaca-20k",
        "alpaca",
        {"instruction": "instruction", "input": "input", "output": "output"},
        description="CodeAlpaca-20k: instruction, input (joined to the instruction), output.",
    ),
    Preset(
        "magicoder-evol-instruct",
        "ise-uiuc/Magicoder-Evol-Instruct-110K",
        "alpaca",
        {"instruction": "instruction", "output": "response"},
        description="Magicoder-Evol-Instruct-110K: instruction, response.",
        aliases=("magicoder",),
    ),
    Preset(
        "magicoder-oss-instruct",
        "ise-uiuc/Magicoder-OSS-Instruct-75K",
        "alpaca",
        {"instruction": "problem", "output": "solution"},
        description="Magicoder-OSS-Instruct-75K: problem, solution (+ lang, seed, index).",
    ),
    Preset(
        "ultrachat-200k",
        "HuggingFaceH4/ultrachat_200k",
        "messages",
        {"id": "prompt_id"},
        description="UltraChat-200k: prompt, prompt_id, messages (prompt repeats turn 0).",
        hub_split="train_sft",
        aliases=("ultrachat",),
    ),
    Preset(
        "sharegpt",
        "Aeala/ShareGPT_Vicuna_unfiltered",
        "sharegpt",
        description="ShareGPT / Vicuna: id, conversations [{from: human|gpt|system, value}].",
        aliases=("vicuna", "sharegpt-vicuna"),
    ),
    Preset(
        "nemotron-post-training",
        "nvidia/Nemotron-Post-Training-Dataset-v1",
        "messages",
        {"id": "uuid"},
        nemotron_v1_row,
        "Nemotron-Post-Training-Dataset v1/v2: uuid, messages (reasoning as <think> in the "
        "answer), reasoning on/off, metadata (JSON text).",
        hub_split="chat",
        aliases=("nemotron-post-training-v1", "nemotron-post-training-v2", "nemotron"),
    ),
    Preset(
        "llama-nemotron-post-training",
        "nvidia/Llama-Nemotron-Post-Training-Dataset",
        "messages",
        None,
        llama_nemotron_row,
        "Llama-Nemotron-Post-Training-Dataset: input (messages), output (<think> answer), "
        'system_prompt ("detailed thinking on|off"), reasoning on/off.',
        hub_config="SFT",
        hub_split="chat",
        aliases=("llama-nemotron",),
    ),
    Preset(
        "openthoughts",
        "open-thoughts/OpenThoughts-114k",
        "sharegpt",
        None,
        openthoughts_row,
        "OpenThoughts / Bespoke-Stratos: system, conversations with <|begin_of_thought|> ... "
        "<|end_of_solution|> markers -> reasoning_content + content.",
        aliases=("bespoke-stratos",),
    ),
    Preset(
        "hermes-function-calling",
        "NousResearch/hermes-function-calling-v1",
        "messages",
        None,
        hermes_row,
        "Hermes function calling v1: ShareGPT (system/human/gpt/tool), <tools> in the system "
        "prompt, <tool_call> / <tool_response> XML inline, tools (JSON text).",
        hub_config="func_calling_singleturn",
        aliases=("hermes",),
    ),
    Preset(
        "glaive-function-calling-v2",
        "glaiveai/glaive-function-calling-v2",
        "messages",
        None,
        glaive_row,
        "glaive-function-calling-v2: system + chat transcript (USER: / ASSISTANT: <functioncall>"
        " / FUNCTION RESPONSE:); the LLaMA-Factory conversations form reads as is.",
        aliases=("glaive",),
        signature=("system", "chat"),
    ),
    Preset(
        "xlam-function-calling-60k",
        "Salesforce/xlam-function-calling-60k",
        "messages",
        None,
        xlam_row,
        "xLAM function calling 60k: id, query, tools (JSON text), answers (JSON text list of "
        "calls) -> user turn + assistant tool_calls.",
        aliases=("xlam",),
        signature=("query", "answers", "tools"),
    ),
    Preset(
        "skythought",
        None,
        "messages",
        {"id": "idx"},
        skythought_row,
        "SkyThought evaluation dumps: idx, question, code (generations with <|begin_of_thought|>"
        " ... <|end_of_solution|> markers) -> user + assistant (reasoning_content + content);"
        " grading columns to metadata.",
        aliases=("sky-t1", "skythought-eval"),
        signature=("question", "code", "pred"),
    ),
    Preset(
        "toolbench",
        None,
        "messages",
        None,
        toolbench_row,
        "ToolBench DFSDT answer trees: answer_generation.train_messages (last = whole"
        " trajectory; function_call / function turns) + answer_generation.function -> tools.",
        aliases=("toolbench-dfsdt",),
        signature=("answer_generation",),
    ),
]

PRESETS: dict[str, Preset] = {p.name: p for p in _ALL}
"""Preset name -> preset (aliases resolve through `apply_preset`)."""

_ALIASES: dict[str, str] = {a: p.name for p in _ALL for a in p.aliases}

for _p in _ALL:
    assert _p.format in FORMATS, _p


def apply_preset(name: str) -> Preset:
    """The preset called ``name`` (or one of its aliases); a clear error listing known names."""
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    known = ", ".join(sorted(PRESETS))
    close = difflib.get_close_matches(key, [*PRESETS, *_ALIASES], n=1)
    meant = f": did you mean {close[0]!r}?" if close else ""
    raise UnknownPresetError(f"unknown preset {name!r}{meant}; known presets: {known}")


def transform_raw(preset: Preset, raw: RawRow) -> RawRow | Reject:
    """The raw row after the preset's transform, or a `Reject` when it does not fit the layout."""
    if preset.transform is None or raw.data is None:
        return raw
    try:
        data = preset.transform(raw.data)
    except RowProblem as bad:
        rid = _raw_id(raw.data, preset)
        msg = f"preset {preset.name}: {bad.message}"
        return Reject(raw.source, raw.row, rid, bad.reason, msg)
    return RawRow(raw.source, raw.row, data, raw.reject)


def normalize_with_preset(preset: Preset, raw: RawRow) -> Normalized:
    """Transform (if any) then `normalize` with the preset's format and field mapping."""
    if raw.reject is not None:
        return raw.reject
    out = transform_raw(preset, raw)
    if isinstance(out, Reject):
        return out
    return normalize(out, preset.format, preset.fields)


def _raw_id(data: Row, preset: Preset) -> str | None:
    key = (preset.fields or {}).get("id", "id")
    value = data.get(key, data.get("id"))
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None


def source_normalizer(src: Any) -> Callable[[RawRow], Normalized]:
    """How `build` (and `generate`) normalize one source's rows: its preset's columns and
    transform, else its format and field mapping. Rows the reader already rejected
    (``raw.reject``) are the caller's to pass on."""
    if src.preset:
        preset = apply_preset(src.preset)
        return lambda raw: normalize_with_preset(preset, raw)
    if src.format or src.fields:
        return lambda raw: normalize(raw, src.format, src.fields)
    return _with_preset_hint


def _with_preset_hint(raw: RawRow) -> Normalized:
    """`normalize`; an ``unknown_format`` row whose keys are a preset's layout says so."""
    item = normalize(raw)
    if isinstance(item, Reject) and item.reason == reasons.UNKNOWN_FORMAT:
        hint = preset_hint(raw.data)
        if hint:
            return Reject(item.source, item.row, item.id, item.reason, f"{item.message}; {hint}")
    return item


def preset_hint(data: Any) -> str | None:
    """``these keys are the layout of preset NAME (...)`` when a preset's signature matches."""
    if not isinstance(data, dict):
        return None
    for p in _ALL:
        if p.signature and all(k in data for k in p.signature):
            return (
                f"these keys are the layout of preset {p.name!r} ({p.description.split(':')[0]}):"
                f" give the source `preset: {p.name}` (or --preset {p.name})"
            )
    return None
