"""draftset's own compile of a chat template: transformers' sandbox, its attribute verdicts kept.

Mask derivation renders every conversation about 2k times (P and F for each of k answers), and
on Qwen3.6's template a third of each render went to Jinja's sandbox deciding, lookup by
lookup, whether an attribute such as ``loop.last``, ``ns.found`` or ``content.split`` may be
read (``ImmutableSandboxedEnvironment.is_safe_attribute``). In jinja2 3.1 that verdict ignores
the value and is ``not (attr.startswith("_") or is_internal_attribute(obj, attr) or
modifies_known_mutable(obj, attr))``: the name, plus isinstance checks of the object against
function, method, type, code, frame, generator types and the mutable ABCs. Those isinstance
checks read only ``type(obj)`` and ``obj.__class__`` (and the ABC registry), so for an object
whose ``__class__`` is its type the verdict is a function of ``(type(obj), attr)``.

`MemoSandbox` is a subclass of that environment whose ``is_safe_attribute`` remembers the
stock verdict per ``(type(obj), attr)``. It answers from the memo only when that reasoning
holds, and asks the stock check otherwise:

- the attribute name is exactly a ``str`` (not a subclass that could compare differently);
- ``obj.__class__ is type(obj)`` (isinstance would otherwise also consult ``__class__``);
- no ABC was registered since the verdict was stored (``abc.get_cache_token()``; jinja2's own
  ABC checks use the same token to drop their caches);
- jinja2 is 3.1.x and transformers compiled with exactly `ImmutableSandboxedEnvironment`
  (`compile_template` falls back to transformers' own template otherwise).

It also assumes what jinja2's own code assumes of its module constants: the ``UNSAFE_*``
attribute sets in ``jinja2.sandbox`` are not edited while a template is in use (no code in
draftset, transformers or jinja2 edits them).

``is_safe_callable`` is not memoized: it reads ``unsafe_callable``/``alters_data`` from the
object itself. Neither are ``getattr``'s other steps (``str.format`` wrapping, the lookup).

Two lookups skip steps whose outcome is fixed by the object's exact type (the types are built
in, so nothing can change them):

- ``message.content`` on an exact ``dict`` whose type has no attribute of that name: the stock
  ``getattr`` first tries the attribute, catches the ``AttributeError`` (the expensive part),
  then subscripts. Here it subscripts at once, with the same fallback to undefined; a name
  that ``dict`` or ``object`` defines (``items``, ``update``, ``__class__``, ...) takes the
  stock path.
- calling an exact ``builtin_function_or_method`` (``content.strip``, ``text.split``, ...): such
  an object has no ``__dict__``, so the stock checks (``unsafe_callable``/``alters_data``,
  ``jinja_pass_arg`` on it and on its ``__call__``) read only its type and always find
  nothing; the call is made as ``Context.call`` makes it (loop/block variables dropped, a
  ``StopIteration`` turned into undefined). Which bound methods are reachable at all is still
  decided by ``getattr`` above (``list.append`` is refused there).

Values a template builds are bounded before they are built (docs/semantics.md, "Bounded work"):
``*``, ``**`` and ``+`` are intercepted binary operators (`call_binop`), ``~`` is compiled to
`MemoSandbox.call_concat` (`BoundedCodeGenerator`, Jinja's ``code_generator_class`` hook), and a
str method that pads to a width (``center``, ``ljust``, ``rjust``, ``zfill``, ``expandtabs``) is
checked in `call`: a result longer than ``value_cap`` characters (items, digits) raises
`RenderTooLarge` from its operands' sizes, so ``'x' * 3000000000`` costs nothing, and a string
doubled in a loop (``s ~ s``, ``s + s``) stops at the cap instead of at the timeout, gigabytes
later. Jinja never folds an intercepted operator into a constant while compiling, so compiling
such a template costs nothing either.

A compiled template's globals are one plain dict (`MemoSandbox.make_globals`) instead of Jinja's
ChainMap over the environment's, which every render copied key by key in Python.

Everything else (the globals themselves, filters, tests, extensions, options) is transformers'
environment itself, copied by Jinja's own ``Environment.overlay``; the memo's size is bounded by the
attributes the template's types actually have. Tested equal to ``apply_chat_template`` on every
golden conversation and every trl template, and refusing what the stock sandbox refuses.
"""

from __future__ import annotations

import abc
import functools
from types import BuiltinFunctionType
from typing import Any, ClassVar

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.sandbox import ImmutableSandboxedEnvironment

from draftset.mask.limits import RENDER_CAP_FLOOR, RenderTooLarge

# the jinja2 versions whose sandbox the reasoning above was checked against (jinja2/sandbox.py)
CHECKED_JINJA = "3.1."

# The attributes an exact dict instance has: the names defined by the classes of its type's MRO
# (a dict instance has no __dict__, and neither built-in class can be changed).
_DICT_ATTRIBUTES = frozenset(name for klass in dict.__mro__ for name in vars(klass))

# str methods whose result is as long as a width argument, whatever the string
_PADDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})
_LOG2_10 = 3.3219


def _size(value: Any) -> int | None:
    """Characters of a str, items of a list or tuple; None for anything else."""
    return len(value) if isinstance(value, str | list | tuple) else None


def binop_result_size(operator: str, left: Any, right: Any) -> int:
    """Characters, items or decimal digits ``left <operator> right`` would have (0: small or
    not a sized value), computed from the operands alone."""
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            n = _size(seq)
            if n is not None and isinstance(times, int):
                return n * max(times, 0)
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            return int(right * abs(left).bit_length() / _LOG2_10)
    elif operator == "+":
        a, b = _size(left), _size(right)
        if a is not None and b is not None:
            return a + b
    return 0


def _refuse(size: int, cap: int, what: str) -> RenderTooLarge:
    return RenderTooLarge(
        f"the template would build a value of {size:,} characters ({what}), more than the"
        f" {cap:,} a render may write"
    )


class BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, except that ``a ~ b`` calls ``environment.call_concat`` with the
    join Jinja would call, so the joined size is checked first (`MemoSandbox.call_concat`)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        # the join Jinja's own visit_Concat picks (jinja2/compiler.py, 3.1)
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            join = "markup_join"
        else:
            join = "str_join"
        self.write(f"environment.call_concat({join}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class MemoSandbox(ImmutableSandboxedEnvironment):
    """`ImmutableSandboxedEnvironment` whose attribute verdicts are kept per (type, name)."""

    _memo: dict[tuple[type, str], bool]
    _abc_token: object
    # the operators that build a value larger than their operands: never folded into a
    # constant while compiling, checked by `call_binop` while rendering. ``+`` too: at most the
    # sum of two values a render holds, but ``s + s`` in a loop doubles a string to gigabytes
    # within the time bound (3.5 GB in 5 s)
    intercepted_binops = frozenset({"*", "**", "+"})
    code_generator_class = BoundedCodeGenerator
    value_cap: int = RENDER_CAP_FLOOR
    """Most characters (items, digits) one value may have; the renderer sets the row's cap."""

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+":  # the common case, kept to two len() calls
            if type(left) is str and type(right) is str:
                if len(left) + len(right) > self.value_cap:
                    raise _refuse(len(left) + len(right), self.value_cap, "str + str")
                return left + right
            size = binop_result_size(operator, left, right)
            if size > self.value_cap:
                raise _refuse(size, self.value_cap, f"{type(left).__name__} + ...")
            return left + right
        size = binop_result_size(operator, left, right)
        if size > self.value_cap:
            raise _refuse(size, self.value_cap, f"{type(left).__name__} {operator} ...")
        return super().call_binop(context, operator, left, right)

    def call_concat(self, join: Any, parts: tuple[Any, ...]) -> Any:
        """``a ~ b ~ ...``: Jinja's own join of the parts (``str_join`` or ``markup_join``),
        refused before it runs when the parts' text is longer than ``value_cap``."""
        size = 0
        for part in parts:
            size += len(part) if type(part) is str else len(str(part))
        if size > self.value_cap:
            raise _refuse(size, self.value_cap, "~")
        return join(parts)

    @classmethod
    def overlay_of(cls, env: ImmutableSandboxedEnvironment) -> MemoSandbox:
        """A copy of ``env`` (Jinja's ``overlay``: same globals, filters, tests, extensions
        re-bound, options) that checks attributes through the memo."""
        rv = env.overlay()
        rv.__class__ = cls  # adds behaviour only; the state is exactly overlay's
        assert isinstance(rv, cls)
        rv._memo = {}
        rv._abc_token = abc.get_cache_token()
        return rv

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        tp = type(obj)
        if type(attr) is not str or obj.__class__ is not tp:
            return super().is_safe_attribute(obj, attr, value)
        token = abc.get_cache_token()
        if token != self._abc_token:  # an ABC was registered: isinstance answers may change
            self._memo.clear()
            self._abc_token = token
        key = (tp, attr)
        try:
            return self._memo[key]
        except KeyError:
            ok = self._memo[key] = super().is_safe_attribute(obj, attr, value)
            return ok

    def make_globals(self, d: Any) -> dict[str, Any]:
        """A template's globals as one plain dict, copied when the template is compiled.

        Jinja's ChainMap over the environment's globals is read key by key in Python on every
        render (``new_context`` copies it into the render's context, ``Context`` lists its
        keys): a fifth to a third of a one-message render (timed, session 7). Lookups find
        the same objects in the same order (the template's own globals before the
        environment's). Jinja asks that globals not change once a template is loaded, and
        nothing changes these after transformers builds the environment.
        """
        return {**self.globals, **(d or {})}

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and type(attribute) is str and attribute not in _DICT_ATTRIBUTES:
            try:  # the stock path raises and catches AttributeError before this subscript
                return obj[attribute]
            except (TypeError, LookupError):
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        if type(obj) is not BuiltinFunctionType:
            return super().call(context, obj, *args, **kwargs)
        if obj.__name__ in _PADDING_METHODS or obj.__name__ == "expandtabs":
            self._check_padding(obj, args, kwargs)
        kwargs.pop("_block_vars", None)  # as `Context.call` does
        kwargs.pop("_loop_vars", None)
        try:
            return obj(*args, **kwargs)
        except StopIteration:
            return context.environment.undefined(
                "value was undefined because a callable raised a StopIteration exception"
            )

    def _check_padding(self, method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refuse ``s.center(10**9)`` (and the other padding methods) before it runs."""
        text = getattr(method, "__self__", None)
        if not isinstance(text, str):
            return
        name = method.__name__
        if name == "expandtabs":
            width = args[0] if args else kwargs.get("tabsize", 8)
            size = text.count("\t") * width + len(text) if isinstance(width, int) else 0
        else:
            width = args[0] if args else kwargs.get("width")
            size = width if isinstance(width, int) else 0
        if size > self.value_cap:
            raise _refuse(size, self.value_cap, f"str.{name}")


def constant_too_large(env: Any, template_text: str, cap: int = RENDER_CAP_FLOOR) -> str | None:
    """A constant expression of ``template_text`` that Jinja's optimizer would build while
    compiling (``'x' * 3000000000``: 9.2 GB, 71 s) in an environment that does not intercept
    its operator (transformers' own, used by its public renderer); None when there is none.

    Walks the parsed template (parsing folds nothing) bottom-up, sizing each foldable
    operation from its operands, which are known to be small by then.
    """

    def walk(node: nodes.Node) -> str | None:
        for child in node.iter_child_nodes():
            if (found := walk(child)) is not None:
                return found
        if isinstance(node, nodes.BinExpr) and node.operator in ("*", "**", "+"):
            try:
                left, right = node.left.as_const(), node.right.as_const()
            except Exception:  # not a constant: evaluated (and bounded) while rendering
                return None
            size = binop_result_size(node.operator, left, right)
            if size > cap:
                return f"line {node.lineno}: a constant of {size:,} characters ({node.operator})"
        return None

    return walk(env.parse(template_text))


def memo_applies(env: Any) -> bool:
    """Whether `MemoSandbox` keeps exactly ``env``'s verdicts (else the stock template is used)."""
    return type(env) is ImmutableSandboxedEnvironment and jinja2.__version__.startswith(
        CHECKED_JINJA
    )


def compile_template(template_text: str) -> Any:
    """The template compiled once, in a `MemoSandbox` copy of transformers' environment.

    transformers builds the same environment for every template text; the one it built for an
    empty template (cached by transformers, so once per process) is the one copied, and the
    text is compiled only here. None when transformers' template compiler is missing;
    transformers' own compiled template when the memo's premises do not hold. Syntax errors
    raise as transformers raises them (same parser, same extensions).
    """
    try:
        # lazy: transformers' template module costs ~0.7 s warm (python -X importtime); a worker
        # that compiles from a kit or a build that fails early never pays it
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        return None
    env = _compile_jinja_template("").environment
    if not memo_applies(env):
        return _compile_jinja_template(template_text)
    return MemoSandbox.overlay_of(env).from_string(template_text)


class GenerationTag(jinja2.ext.Extension):
    """transformers' ``{% generation %}`` block, for parsing only: its body in a scope."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


@functools.cache
def _parsing_env() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(extensions=[jinja2.ext.loopcontrols, GenerationTag])


def quick_parse(template_text: str) -> nodes.Template:
    """The template's syntax tree by plain jinja2 with transformers' extensions known
    (``loopcontrols``, ``{% generation %}``), without importing transformers (seconds in the
    driver); raises `jinja2.TemplateSyntaxError` where it does not parse."""
    return _parsing_env().parse(template_text)


def parse_template(template_text: str) -> nodes.Template:
    """The template's syntax tree, parsed by transformers' environment (its extensions, such
    as ``{% generation %}``, known), as vLLM parses it to choose the content format."""
    from transformers.utils.chat_template_utils import _compile_jinja_template  # lazy: as above

    return _compile_jinja_template("").environment.parse(template_text)
