"""Tools as the serving engine hands them to the chat template.

A server does not give the template the request's ``tools`` as sent: vLLM validates each tool
into its own pydantic model and dumps it again, SGLang does the same with other models. The
template then writes that dump (Qwen3: ``{{ tool | tojson }}``), so a tool without a
description, with extra keys or with keys in another order renders differently from the raw
JSON — and every token after the tools block differs from what the served model sees. Build and
verify prepare tools here, by the set's ``serving_engine``, before every render
(docs/semantics.md, "Tools as the serving engine gives them").
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Literal

from draftset.core.errors import UsageError
from draftset.core.records import DEVELOPER, PART_TEXTS

ServingEngine = Literal["vllm", "sglang", "transformers"]
SERVING_ENGINES: tuple[str, ...] = ("vllm", "sglang", "transformers")
# the engine the README recommends for serving and for `draftset generate`
DEFAULT_SERVING_ENGINE: ServingEngine = "vllm"
# the version each rule was read from (vLLM's is also proven against its renderer in the tests):
# vllm: vllm 0.33.0 (ChatCompletionToolsParam / FunctionDefinition)
# sglang: sglang 0.5.23 (protocol.Tool / Function, serving_chat._validate_request); read from
#   its source, not run here: unproven
# transformers: transformers apply_chat_template / `transformers serve`: tools as given


class ToolRejected(ValueError):
    """The engine would refuse this request's tools (HTTP 400): the row cannot be served."""


_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


def _lax_bool(value: Any, where: str, floats: bool = False) -> bool | None:
    """pydantic's lax ``bool | None`` (what both engines' models accept), else ToolRejected;
    ``floats``: 0.0 and 1.0 too (pydantic's rule; the vLLM rule, proven without, keeps it)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if floats and isinstance(value, float) and value in (0.0, 1.0):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise ToolRejected(f"{where} must be a boolean or null, got {value!r}")


def _function_of(tool: Any, index: int) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise ToolRejected(f"tool {index} is not an object")
    function = tool.get("function")
    if not isinstance(function, dict):
        raise ToolRejected(f"tool {index} has no 'function' object")
    if not isinstance(function.get("name"), str):
        raise ToolRejected(f"tool {index}: function.name must be a string")
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise ToolRejected(f"tool {index}: function.description must be a string or null")
    return function


def _vllm_tool(tool: Any, index: int) -> dict[str, Any]:
    """vLLM 0.33.0: ``ChatCompletionToolsParam.model_dump()``.

    ``{"type": "function", "function": {"name", "description", "parameters"[, "strict"]
    [, "defer_loading"]}[, "defer_loading"]}``: a missing description or parameters becomes
    null, ``strict``/``defer_loading`` appear only when set (a tool-level ``defer_loading`` is
    copied into the function when the function has none), every other key is dropped.
    """
    function = _function_of(tool, index)
    if tool.get("type", "function") != "function":
        raise ToolRejected(f"tool {index}: type must be 'function', got {tool.get('type')!r}")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise ToolRejected(f"tool {index}: function.parameters must be an object or null")
    strict = _lax_bool(function.get("strict"), f"tool {index}: function.strict")
    tool_defer = _lax_bool(tool.get("defer_loading"), f"tool {index}: defer_loading")
    fn_defer = _lax_bool(function.get("defer_loading"), f"tool {index}: function.defer_loading")
    if fn_defer is None:
        fn_defer = tool_defer
    out_fn: dict[str, Any] = {
        "name": function["name"],
        "description": function.get("description"),
        "parameters": parameters,
    }
    if strict is not None:
        out_fn["strict"] = strict
    if fn_defer is not None:
        out_fn["defer_loading"] = fn_defer
    out: dict[str, Any] = {"type": "function", "function": out_fn}
    if tool_defer is not None:
        out["defer_loading"] = tool_defer
    return out


def _sglang_tool(tool: Any, index: int) -> dict[str, Any]:
    """sglang 0.5.23: ``Tool.model_dump()`` after ``_validate_request``.

    ``{"type": <as given, any string; "function" when missing>, "function": {...},
    "defer_loading": <the tool's, or null>}``. The function holds the client's keys in the
    client's order among ``name``/``description``/``parameters``/``strict``/``defer_loading``
    (``Function._capture_key_order`` / ``_serialize``), ``strict`` and ``defer_loading`` only
    when not null, then a missing description or parameters appended as null; a tool-level
    ``defer_loading`` is copied into a function without one (``Tool._propagate_defer_loading``,
    appended last unless the client's keys name it); other keys dropped. ``parameters`` has its
    type aliases rewritten (`normalize_schema_types`) and must pass JSON Schema Draft 2020-12's
    ``check_schema``, else HTTP 400 (`ToolRejected`). Read from its source, not run here.
    """
    function = _function_of(tool, index)
    kind = tool.get("type", "function")
    if not isinstance(kind, str):
        raise ToolRejected(f"tool {index}: type must be a string")
    strict = _lax_bool(function.get("strict"), f"tool {index}: function.strict", True)
    tool_defer = _lax_bool(tool.get("defer_loading"), f"tool {index}: defer_loading", True)
    fn_defer = _lax_bool(
        function.get("defer_loading"), f"tool {index}: function.defer_loading", True
    )
    if fn_defer is None:
        fn_defer = tool_defer
    parameters = function.get("parameters")
    if parameters is not None:
        parameters = _checked_schema(copy.deepcopy(parameters), index)
    fields: dict[str, Any] = {
        "description": function.get("description"),
        "name": function["name"],
        "parameters": parameters,
    }
    if strict is not None:
        fields["strict"] = strict
    if fn_defer is not None:
        fields["defer_loading"] = fn_defer
    out_fn = {k: fields[k] for k in function if k in fields}
    out_fn.update((k, v) for k, v in fields.items() if k not in out_fn)
    return {"type": kind, "function": out_fn, "defer_loading": tool_defer}


def _schema_validator() -> Any:
    """jsonschema's Draft 2020-12 validator class (what sglang checks tool parameters with)."""
    try:
        from jsonschema import Draft202012Validator  # lazy: only the sglang rule needs it
    except ImportError:
        raise UsageError(
            "the sglang serving engine checks tool parameters with jsonschema, which is not"
            " installed: pip install 'draftset[sglang]'"
        ) from None
    return Draft202012Validator


def require_engine(engine: str) -> None:
    """What ``engine``'s rule needs is installed (UsageError: one line, exit 2, before any row)."""
    if engine == "sglang":
        _schema_validator()


def _checked_schema(schema: Any, index: int) -> Any:
    """``schema`` (a copy: rewritten in place) as sglang 0.5.23 gives it to the template, or
    ToolRejected where it answers HTTP 400."""
    validator = _schema_validator()  # one line when jsonschema is missing
    from jsonschema import SchemaError  # lazy: only the sglang rule needs it (installed here)

    try:
        normalize_schema_types(schema)
        validator.check_schema(schema)
    except SchemaError as exc:
        raise ToolRejected(
            f"tool {index}: function.parameters must be a valid JSON schema: {exc.message}"
        ) from None
    except RecursionError:
        raise ToolRejected(f"tool {index}: function.parameters is nested too deeply") from None
    return schema


# sglang 0.5.13+ `function_call/utils.py` (as of 0.5.23): DB/ORM type names in a tool's
# parameters rewritten to JSON Schema types before the check; the template sees the result
_STANDARD_TYPES = {"null", "boolean", "object", "array", "number", "string", "integer"}
_TYPE_ALIASES = {
    **dict.fromkeys(
        [
            "str",
            "text",
            "varchar",
            "char",
            "enum",
            "uuid",
            "date",
            "datetime",
            "time",
            "timestamp",
            "binary",
            "blob",
            "bytea",
            "bytes",
            "varbinary",
        ],
        "string",
    ),
    "bool": "boolean",
    **dict.fromkeys(["bigint", "smallint", "tinyint"], "integer"),
    **dict.fromkeys(["double", "decimal", "real", "numeric"], "number"),
    **dict.fromkeys(["arr", "tuple", "set"], "array"),
    "map": "object",
}
_PREFIX_BOUNDARY = frozenset("0123456789[<( \t")
_PREFIX_RULES = (
    (("int", "uint", "long", "short", "unsigned"), "integer"),
    (("num", "float"), "number"),
    (("list",), "array"),
    (("dict",), "object"),
)
_NESTED_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_NESTED_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_NESTED = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)


def _standard_type(raw: Any) -> Any:
    if not isinstance(raw, str) or raw in _STANDARD_TYPES:
        return raw
    base = raw.split("(", 1)[0].strip().lower()
    if base in _STANDARD_TYPES:
        return base
    if base in _TYPE_ALIASES:
        return _TYPE_ALIASES[base]
    for prefixes, target in _PREFIX_RULES:
        for p in prefixes:
            if base == p or (
                len(base) > len(p) and base.startswith(p) and base[len(p)] in _PREFIX_BOUNDARY
            ):
                return target
    return raw


def normalize_schema_types(schema: Any) -> None:
    """sglang's ``normalize_json_schema_types``: rewrite non-standard ``type`` values in place
    (``varchar(255)``, ``str`` → ``string``; ``int32`` → ``integer``; ``list[str]`` → ``array``
    ...), unknown ones left for the schema check to refuse."""
    if isinstance(schema, list):
        for item in schema:
            normalize_schema_types(item)
        return
    if not isinstance(schema, dict):
        return
    if "type" in schema:
        t = schema["type"]
        if isinstance(t, str):
            schema["type"] = _standard_type(t)
        elif isinstance(t, list):
            seen: list[Any] = []
            for item in t:
                item = _standard_type(item)
                if item not in seen:
                    seen.append(item)
            schema["type"] = seen
    for key in _NESTED_MAPS:
        nested = schema.get(key)
        if isinstance(nested, dict):
            for v in nested.values():
                normalize_schema_types(v)
    for key in _NESTED_LISTS:
        nested = schema.get(key)
        if isinstance(nested, list):
            for v in nested:
                normalize_schema_types(v)
    for key in _NESTED:
        if key in schema:
            normalize_schema_types(schema[key])


def prepare_tools(tools: list[Any] | None, engine: str) -> list[Any] | None:
    """``tools`` as ``engine`` gives them to the chat template (raises `ToolRejected`)."""
    if tools is None or engine == "transformers":
        return tools
    if engine == "vllm":
        return [_vllm_tool(t, i) for i, t in enumerate(tools)]
    if engine == "sglang":
        return [_sglang_tool(t, i) for i, t in enumerate(tools)]
    raise ValueError(f"unknown serving engine {engine!r} (one of {', '.join(SERVING_ENGINES)})")


VLLM_UNSET_VALUES: tuple[Any, ...] = (None, "auto")
"""Template option values vLLM 0.33 does not give the template: every chat request's
``chat_template_kwargs`` are merged over the server's defaults (``ChatParams.with_defaults``,
always run: the defaults hold ``tools`` and ``tokenize``) by ``renderers/params.py``
``merge_kwargs``, which drops a request key whose value is one of its ``unset_values``."""


def served_template_kwargs(kwargs: dict[str, Any], engine: str) -> dict[str, Any]:
    """The template options ``engine`` gives a chat template for these request options: under
    vLLM without the keys whose value is ``None`` or ``"auto"`` (`VLLM_UNSET_VALUES`: the
    template sees such a name undefined, `{% if x is defined %}` false); as given otherwise
    (transformers' ``apply_chat_template`` passes ``None`` as a value; SGLang not read here)."""
    if engine != "vllm" or not any(_unset(v) for v in kwargs.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if not _unset(v)}


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value in VLLM_UNSET_VALUES)


CLAUDE_CODE_BILLING_HEADER = "x-anthropic-billing-header"
"""vLLM 0.33 drops a system text part's first line when it starts with this (Claude Code's
per-request attribution header, `_strip_claude_code_billing_header` in
``vllm/renderers/chat_utils/chat_message.py``): the served model never sees it."""


def served_system_texts(
    messages: list[dict[str, Any]], meta: dict[str, Any], engine: str, harmony: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``messages`` (and ``meta``'s text parts) with system text as ``engine`` gives it to the
    template: vLLM without Claude Code's billing-header line in a system message (a developer
    message keeps it, and so does its harmony path), every other engine as it is."""
    if engine != "vllm" or harmony:
        return messages, meta
    parts = meta.get(PART_TEXTS) or {}
    developer = meta.get(DEVELOPER) or {}  # vLLM strips system messages' only
    out, new_parts = messages, dict(parts)
    for i, m in enumerate(messages):
        if m.get("role") != "system" or i in developer:
            continue
        texts = parts.get(i) or [m.get("content") or ""]
        kept = [_without_header(t) for t in texts]
        if kept == texts:
            continue
        kept = [t for t in kept if t is not None]
        if out is messages:
            out = list(messages)
        out[i] = {**m, "content": "\n".join(kept)}
        if i in parts:
            new_parts[i] = kept
    if out is messages:
        return messages, meta
    return out, {**meta, PART_TEXTS: new_parts}


def _without_header(text: str) -> str | None:
    """A text part as vLLM keeps it: without a first line that is the billing header (None
    when nothing is left: the part is dropped)."""
    if not isinstance(text, str) or not text.startswith(CLAUDE_CODE_BILLING_HEADER):
        return text
    rest = text.partition("\n")[2]
    return rest or None


# vLLM 0.33's `--tokenizer-mode auto` (vllm/config/model.py, vllm/tokenizers/registry.py): an
# architecture served with the model's own prompt encoder instead of its chat template
_OWN_ENCODER_ARCHITECTURES = {
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "DeepseekV4ForCausalLM": "deepseek_v4",
    "DeepseekV4ForConditionalGeneration": "deepseek_v4",
    "DeepseekV41ForCausalLM": "deepseek_v41",
    "InklingForCausalLM": "inkling",
    "InklingForConditionalGeneration": "inkling",
    "KimiK3ForConditionalGeneration": "kimi_k3",
    "MoonshotKimiaForCausalLM": "kimi_audio",
    "Alpamayo2Super": "alpamayo2_super",
}


def vllm_own_encoder(folder: str | Path) -> str | None:
    """The tokenizer mode vLLM 0.33 serves a local model folder with by default when that mode
    does not render the chat template (None: it renders the template, or harmony, which
    draftset reproduces): ``mistral`` for a Mistral repo (``consolidated*.safetensors`` beside
    ``tekken.json`` or ``tokenizer.model.v*``), else the architecture's own encoder."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        return None
    names = [p.name for p in root.iterdir()]
    weights = any(n.startswith("consolidated") and n.endswith(".safetensors") for n in names)
    if weights and any(n == "tekken.json" or n.startswith("tokenizer.model.v") for n in names):
        return "mistral"
    try:
        cfg = json.loads((root / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    arch = archs[0] if isinstance(archs, list) and archs else None
    return _OWN_ENCODER_ARCHITECTURES.get(arch) if isinstance(arch, str) else None


def answered_calls(messages: list[dict[str, Any]]) -> dict[int, tuple[int, int] | None]:
    """Per tool message index, the call it answers as (message index, call index), or None.

    By its ``tool_call_id`` (the last call with that id; an id no call holds answers none, as
    vLLM finds none); without one, the next call of the latest calling message not answered
    yet, in order, as a client pairs them: it must send an id for each (vLLM refuses a call
    without), and vLLM's harmony path names a result's author by it. Build (harmony) and
    verify's requests pair results alike through this."""
    by_id: dict[Any, tuple[int, int]] = {}
    for i, m in enumerate(messages):
        for k, call in enumerate(m.get("tool_calls") or []):
            if isinstance(call, dict) and call.get("id") is not None:
                by_id[call["id"]] = (i, k)
    out: dict[int, tuple[int, int] | None] = {}
    pending: list[tuple[int, int]] = []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            pending = [(i, k) for k in range(len(m["tool_calls"]))]
        elif m.get("role") == "tool":
            given = m.get("tool_call_id")
            call = by_id.get(given) if given is not None else (pending[0] if pending else None)
            if call in pending:
                pending.remove(call)
            out[i] = call
    return out


def with_call_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as a client must send them to vLLM: a tool call without an ``id`` given
    ``call_<message>_<call>`` (vLLM answers a call without one with HTTP 400), then a tool
    result without ``tool_call_id`` given the id of the call it answers (`answered_calls`). A
    template that names a result by its call's id (Gemma-4) then names the call the client
    paired, as in the served prompt. The messages themselves are not changed."""
    out = list(messages)
    for i, m in enumerate(messages):
        calls = m.get("tool_calls")
        if not (m.get("role") == "assistant" and isinstance(calls, list)):
            continue
        if any(isinstance(c, dict) and c.get("id") is None for c in calls):
            out[i] = {
                **m,
                "tool_calls": [
                    {**c, "id": f"call_{i}_{k}"}
                    if isinstance(c, dict) and c.get("id") is None
                    else c
                    for k, c in enumerate(calls)
                ],
            }
    for i, call in answered_calls(out).items():
        if call is not None and out[i].get("tool_call_id") is None:
            called = out[call[0]]["tool_calls"][call[1]]
            if isinstance(called, dict) and called.get("id") is not None:
                out[i] = {**out[i], "tool_call_id": called["id"]}
    return out
