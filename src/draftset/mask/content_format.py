"""Which content shape vLLM hands a chat template: strings, or lists of typed parts.

vLLM does not pass a message's ``content`` to the template as the client sent it. It reads the
template's syntax tree once: a template that loops over a message's content (``{% for item in
message['content'] %}``, or over a name bound to it) gets the **"openai"** format — every
message's content as a list of parts, a string as one text part (``""`` as one empty part), no
content as no parts (``[]``), a tool result's parts joined back into one string; any other
template gets the **"string"** format — parts joined by a newline. A template that renders a
one-part list unlike the string (Gemma-4 writes a system prompt's parts trimmed with a space
after; Qwen3-VL writes a newline before the tool calls of an answer whose content is one empty
part) therefore renders differently from ``apply_chat_template`` with the row's strings.

`content_format` is that detection, written after vLLM 0.33.0
(``vllm/renderers/hf.py``: ``_detect_content_format`` and the walkers it calls) and tested equal
to it on every template of the suite (tests/checks/test_render_server.py). It keeps vLLM's
order and its quirks: a loop whose target is not a plain name met before any match makes the
whole detection fall back to "string", as vLLM's does (it asserts, and catches the error).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from functools import lru_cache
from typing import Literal

from jinja2 import nodes

from draftset.mask.sandbox import parse_template

ContentFormat = Literal["string", "openai"]


def _is_name(node: nodes.Node, varname: str) -> bool:
    """``varname`` read as a variable: a plain name, or a dotted alias ``ns.attr``."""
    if isinstance(node, nodes.Name):
        return node.ctx == "load" and node.name == varname
    if isinstance(node, nodes.Getattr) and "." in varname:
        base, _, attr = varname.rpartition(".")
        return node.attr == attr and _is_name(node.node, base)
    return False


def _is_key_of(node: nodes.Node, varname: str, key: str) -> bool:
    """``varname[key]`` or ``varname.key``."""
    if isinstance(node, nodes.Getitem):
        return (
            _is_name(node.node, varname)
            and isinstance(node.arg, nodes.Const)
            and node.arg.value == key
        )
    if isinstance(node, nodes.Getattr):
        return _is_name(node.node, varname) and node.attr == key
    return False


def _reads(node: nodes.Node, varname: str, key: str | None = None) -> bool:
    """The variable (or its ``key``) read through any filters, tests and slices."""
    if isinstance(node, nodes.Filter):
        return node.node is not None and _reads(node.node, varname, key)
    if isinstance(node, nodes.Test):
        return _reads(node.node, varname, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _reads(node.node, varname, key)
    return _is_key_of(node, varname, key) if key else _is_name(node, varname)


def _dotted(node: nodes.Node) -> str | None:
    """An attribute target such as ``ns.rest`` as its dotted name."""
    if isinstance(node, nodes.NSRef):
        return f"{node.name}.{node.attr}"
    parts = []
    while isinstance(node, nodes.Getattr):
        parts.append(node.attr)
        node = node.node
    if isinstance(node, nodes.Name):
        parts.append(node.name)
        return ".".join(reversed(parts))
    return None


def _aliases(root: nodes.Template, varname: str) -> Iterator[str]:
    """``varname`` and every name assigned from it, transitively (``{% set x = varname %}``,
    ``namespace(rest=varname)``, ``{% set ns.rest = varname %}``)."""
    yield varname
    seen = {varname}
    queue = deque([varname])
    while queue:
        current = queue.popleft()
        for assign in root.find_all(nodes.Assign):
            lhs, rhs = assign.target, assign.node
            found: list[str] = []
            if isinstance(lhs, nodes.Name) and _reads(rhs, current):
                found.append(lhs.name)
            if (
                isinstance(lhs, nodes.Name)
                and isinstance(rhs, nodes.Call)
                and isinstance(rhs.node, nodes.Name)
                and rhs.node.name == "namespace"
            ):
                found += [f"{lhs.name}.{kw.key}" for kw in rhs.kwargs if _reads(kw.value, current)]
            elif isinstance(lhs, nodes.Getattr | nodes.NSRef) and _reads(rhs, current):
                dotted = _dotted(lhs)
                found += [dotted] if dotted is not None else []
            for name in found:
                yield name
                if name != current and name not in seen:
                    seen.add(name)
                    queue.append(name)


def _loop_name(loop: nodes.For) -> str:
    if not isinstance(loop.target, nodes.Name):  # vLLM asserts here; its caller falls back
        raise ValueError("loop target is not a plain name")
    return loop.target.name


def _message_names(root: nodes.Template) -> list[str]:
    """The loop variables of ``{% for message in messages %}`` (or over an alias of it)."""
    messages = list(_aliases(root, "messages"))
    out = []
    for loop in root.find_all(nodes.For):
        if any(_reads(loop.iter, name) for name in messages):
            out.append(_loop_name(loop))
    return out


def _content_loops(root: nodes.Template) -> Iterator[str]:
    """Loops over a message's content: ``message['content']``, a macro parameter some call
    passes ``message.content`` to, or a name ``content`` outside macros."""
    messages = _message_names(root)
    params_by_loop: dict[int, set[str]] = {}
    in_macros: set[int] = set()
    for macro in root.find_all(nodes.Macro):
        names = {arg.name for arg in macro.args}
        params: set[str] = set()
        for call in root.find_all(nodes.Call):
            if not (isinstance(call.node, nodes.Name) and call.node.name == macro.name):
                continue
            for i, arg in enumerate(call.args):
                if i < len(macro.args) and any(_reads(arg, m, "content") for m in messages):
                    params.add(macro.args[i].name)
            for kw in call.kwargs:
                if (
                    isinstance(kw, nodes.Keyword)
                    and kw.key in names
                    and any(_reads(kw.value, m, "content") for m in messages)
                ):
                    params.add(kw.key)
        for loop in macro.find_all(nodes.For):
            in_macros.add(id(loop))
            if params:
                params_by_loop[id(loop)] = params
    for loop in root.find_all(nodes.For):
        if any(_reads(loop.iter, m, "content") for m in messages):
            yield _loop_name(loop)
            continue
        it = loop.iter
        if not isinstance(it, nodes.Name):
            continue
        params = params_by_loop.get(id(loop))
        in_macro = id(loop) in in_macros
        if (params is not None and it.name in params) or (not in_macro and it.name == "content"):
            yield _loop_name(loop)


@lru_cache(maxsize=32)
def content_format(template_text: str) -> ContentFormat:
    """vLLM's "openai" when the template loops over a message's content, else "string" (also
    when the template does not parse, as vLLM falls back)."""
    try:
        root = parse_template(template_text)
        next(_content_loops(root))
    except StopIteration:
        return "string"
    except Exception:  # vLLM logs and falls back to its default
        return "string"
    return "openai"


# SGLang's detection (`parser/jinja_template_utils.py` `detect_jinja_template_content_format`,
# adapted there from an older vLLM; read from its source, not run here: SGLang needs a GPU)
_SGLANG_MEDIA_WORDS = ("image", "audio", "video", "vision")
_SGLANG_MESSAGE_NAMES = ("message", "msg", "m")


@lru_cache(maxsize=32)
def sglang_content_format(template_text: str) -> ContentFormat:
    """SGLang's "openai" when the template's text names a medium anywhere (its shortcut: a word
    in a comment is enough) or a loop iterates ``message``/``msg``/``m``'s content directly
    (through filters, tests and slices, no bound names followed), else "string" (also when the
    template does not parse)."""
    if any(word in template_text for word in _SGLANG_MEDIA_WORDS):
        return "openai"
    try:
        root = parse_template(template_text)
    except Exception:  # SGLang logs and falls back to "string"
        return "string"
    for loop in root.find_all(nodes.For):
        if any(_reads(loop.iter, name, "content") for name in _SGLANG_MESSAGE_NAMES):
            return "openai"
    return "string"
