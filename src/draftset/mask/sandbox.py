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

A compiled template's globals are one plain dict (`MemoSandbox.make_globals`) instead of Jinja's
ChainMap over the environment's, which every render copied key by key in Python.

Everything else (the globals themselves, filters, tests, extensions, options) is transformers'
environment itself, copied by Jinja's own ``Environment.overlay``; the memo's size is bounded by the
attributes the template's types actually have. Tested equal to ``apply_chat_template`` on every
golden conversation and every trl template, and refusing what the stock sandbox refuses.
"""

from __future__ import annotations

import abc
from types import BuiltinFunctionType
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# the jinja2 versions whose sandbox the reasoning above was checked against (jinja2/sandbox.py)
CHECKED_JINJA = "3.1."

# The attributes an exact dict instance has: the names defined by the classes of its type's MRO
# (a dict instance has no __dict__, and neither built-in class can be changed).
_DICT_ATTRIBUTES = frozenset(name for klass in dict.__mro__ for name in vars(klass))


class MemoSandbox(ImmutableSandboxedEnvironment):
    """`ImmutableSandboxedEnvironment` whose attribute verdicts are kept per (type, name)."""

    _memo: dict[tuple[type, str], bool]
    _abc_token: object

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
        kwargs.pop("_block_vars", None)  # as `Context.call` does
        kwargs.pop("_loop_vars", None)
        try:
            return obj(*args, **kwargs)
        except StopIteration:
            return context.environment.undefined(
                "value was undefined because a callable raised a StopIteration exception"
            )


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
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        return None
    env = _compile_jinja_template("").environment
    if not memo_applies(env):
        return _compile_jinja_template(template_text)
    return MemoSandbox.overlay_of(env).from_string(template_text)
