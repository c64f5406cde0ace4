"""draftset's memoizing copy of transformers' sandbox (draftset.mask.sandbox): the same
verdicts as the stock check on every object and name, the same refusals for hostile templates,
and it is the environment draftset actually renders with. Render equality with
`apply_chat_template` on every golden conversation and every trl template:
tests/mask/test_template.py and tests/mask/test_families.py."""

from __future__ import annotations

import abc
import collections
import types
from collections.abc import MutableSequence

import jinja2
import pytest
from conftest import qwen3_tokenizer_dir, trl_template
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from markupsafe import Markup
from test_render import CASES
from transformers.utils.chat_template_utils import _compile_jinja_template

from draftset.mask.sandbox import MemoSandbox, compile_template, memo_applies
from draftset.mask.template import ChatTemplate, Renderer, TemplateSpec

STOCK = ImmutableSandboxedEnvironment()


def _memo_env() -> MemoSandbox:
    return MemoSandbox.overlay_of(ImmutableSandboxedEnvironment())


class Chameleon:
    """``__class__`` is per object: the stock isinstance checks see it, so the memo must not."""

    def __init__(self, cls: type | None = None) -> None:
        self._cls = cls

    @property  # type: ignore[misc]
    def __class__(self):
        return self._cls or type(self)


class Registered:
    """Becomes a MutableSequence (by ABC registration) half-way through a test."""

    def append(self, x: object) -> None:
        pass


class OddName(str):
    def startswith(self, *args: object) -> bool:  # type: ignore[override]
        return False


def _gen():
    yield 1


async def _coro() -> None:
    pass


def _objects() -> list[object]:
    try:
        raise ValueError
    except ValueError as exc:
        tb = exc.__traceback__
    gen = _gen()
    coro = _coro()
    coro.close()
    ns = jinja2.utils.Namespace(a=1)
    return [
        {}, [], (), "s", Markup("m"), 1, 1.5, True, None, {1}, frozenset(), collections.deque(),
        collections.OrderedDict(), _gen, Chameleon().__init__, "s".split, dict, type, str,
        ns, gen, coro, _gen.__code__, tb, tb.tb_frame, Chameleon(), Chameleon(list),
        Chameleon(types.FunctionType), Registered(), jinja2.runtime.Undefined(),
    ]  # fmt: skip


NAMES = [
    "append", "pop", "update", "clear", "add", "extend", "insert", "sort", "remove", "popitem",
    "setdefault", "discard", "appendleft", "rotate", "items", "get", "keys", "split", "strip",
    "format", "format_map", "startswith", "mro", "__class__", "__subclasses__", "__globals__",
    "__init__", "__code__", "__mro__", "_private", "gi_frame", "gi_code", "cr_frame", "cr_code",
    "f_globals", "tb_frame", "co_code", "a", "real", "func_globals",
]  # fmt: skip


def _verdicts(env: ImmutableSandboxedEnvironment, objs: list[object]) -> list[bool]:
    out = []
    for obj in objs:
        for name in [*NAMES, OddName("__class__"), OddName("append")]:
            out.append(env.is_safe_attribute(obj, name, None))  # the value is never read
    return out


def test_memo_verdicts_equal_the_stock_check_on_every_object_and_name():
    objs = _objects()
    want = _verdicts(STOCK, objs)
    env = _memo_env()
    assert _verdicts(env, objs) == want  # stored
    assert _verdicts(env, objs) == want  # answered from the memo
    assert _verdicts(env, objs[::-1]) == _verdicts(STOCK, objs[::-1])
    assert env._memo  # the memo was used, not bypassed
    # the answers that matter most, spelled out
    assert not env.is_safe_attribute([], "append", None)
    assert not env.is_safe_attribute({}, "update", None)
    assert not env.is_safe_attribute(dict, "mro", None)
    assert not env.is_safe_attribute("", "__class__", None)
    assert env.is_safe_attribute([], "index", None) and env.is_safe_attribute("", "split", None)


def test_an_object_whose_class_is_not_its_type_is_checked_as_itself():
    env = _memo_env()
    honest, liar = Chameleon(), Chameleon(list)
    assert env.is_safe_attribute(honest, "append", None)  # stored for (Chameleon, "append")
    assert not STOCK.is_safe_attribute(liar, "append", None)  # isinstance(liar, list)
    assert not env.is_safe_attribute(liar, "append", None)


def test_an_abc_registration_drops_the_stored_verdicts():
    env = _memo_env()
    assert env.is_safe_attribute(Registered(), "append", None)
    MutableSequence.register(Registered)
    assert not STOCK.is_safe_attribute(Registered(), "append", None)
    assert not env.is_safe_attribute(Registered(), "append", None)
    assert abc.get_cache_token() == env._abc_token


def _outcome(template: jinja2.Template, **kw: object) -> str:
    try:
        return "ok: " + template.render(**kw)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


# Each hostile template first reads safe attributes of the same types (so their verdicts are in
# the memo), then reaches for an unsafe one and uses it (reading it alone gives an undefined that
# prints as nothing; using it raises).
HOSTILE = {
    "class": "{{ messages[0].content.split('x') }}{{ messages[0].content.__class__.__name__ }}",
    "subclasses": "{{ ''.split() }}{{ ().__class__.__base__.__subclasses__() }}",
    "mro": "{% set ns = namespace(a=1) %}{{ ns.a }}{{ namespace.mro() }}",
    "list_append": "{{ messages.index(messages[0]) }}{{ messages.append(1) }}",
    "dict_update": "{% set d = {'a': 1} %}{{ d.items()|list }}{{ d.update({'b': 2}) }}",
    "dict_pop": "{{ messages[0].get('role') }}{{ messages[0].pop('role') }}",
    "globals": "{{ raise_exception.__globals__.keys() }}",
    "format": "{{ '{0}'.format(1) }}{{ '{0.__class__.__name__}'.format(1) }}",
    "format_map": "{{ '{a.__class__.__mro__}'.format_map({'a': 1}) }}",
    "namespace_private": "{% set ns = namespace() %}{% set ns._x = 1 %}{{ ns._x }}",
    "loop_internals": "{% for m in messages %}{{ loop.index }}{{ loop._iterator.gi_frame }}"
    "{% endfor %}",
    "strftime": "{{ strftime_now.__globals__.keys() }}",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_the_sandbox_still_refuses_what_transformers_refuses(name):
    text = HOSTILE[name]
    fast = compile_template(text)
    stock = _compile_jinja_template(text)
    assert isinstance(fast.environment, MemoSandbox)
    messages = [{"role": "user", "content": "hi"}]
    for _ in range(2):  # the second time from the memo
        got = _outcome(fast, messages=messages)
        assert got == _outcome(stock, messages=messages)
        assert got.startswith("SecurityError: "), got
        with pytest.raises(SecurityError):
            fast.render(messages=messages)
    assert messages == [{"role": "user", "content": "hi"}]  # nothing was modified


def test_draftset_renders_through_the_memo_and_leaves_transformers_stock():
    assert memo_applies(_compile_jinja_template("{{ 1 }}").environment)  # jinja2 3.1.x here
    text = trl_template("qwen3_6").read_text()
    t = ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), text))
    worker = Renderer.from_kit(t.kit())
    assert worker is not None
    for r in (t, worker):
        assert type(r._compiled.environment) is MemoSandbox
        messages, tools = CASES["tools"]
        assert r.render(messages, tools) == t.render_reference(messages, tools)
        assert r._compiled.environment._memo
    ours = t._compiled.environment
    base = _compile_jinja_template("").environment  # what it is an overlay of
    assert type(base) is ImmutableSandboxedEnvironment  # transformers' own is untouched
    assert ours.linked_to is base and ours.globals is base.globals
    assert ours.filters is base.filters and ours.tests is base.tests
    # transformers builds the same environment for every template text
    stock = _compile_jinja_template(text).environment
    assert type(stock) is ImmutableSandboxedEnvironment
    for name in ("globals", "filters", "tests", "extensions", "policies"):
        assert getattr(stock, name).keys() == getattr(ours, name).keys(), name
    assert {k: type(v).__qualname__ for k, v in stock.globals.items()} == {
        k: type(v).__qualname__ for k, v in ours.globals.items()
    }
    for opt in ("trim_blocks", "lstrip_blocks", "autoescape", "finalize", "undefined"):
        assert getattr(stock, opt) == getattr(ours, opt), opt


def test_a_templates_globals_are_one_dict_of_the_stock_globals():
    """`make_globals`: the objects transformers' template sees, in one plain dict taken at
    compile time (the ChainMap was copied key by key on every render); a template's own
    globals still come first."""
    text = trl_template("qwen3_6").read_text()
    ours = compile_template(text)
    stock = _compile_jinja_template("").environment.from_string(text)  # the one it copies
    assert type(ours.globals) is dict
    assert ours.globals.keys() == stock.globals.keys()
    assert all(ours.globals[k] is stock.globals[k] for k in stock.globals)
    stock_env, memo_env = _env_with(x="environment's", y="environment's")
    src = "{{ x }}|{{ y }}|{{ range(2)|list }}|{{ cycler is defined }}"
    for env in (stock_env, memo_env):
        t = env.from_string(src, globals={"x": "template's"})
        assert t.render() == "template's|environment's|[0, 1]|True"
    memo = memo_env.from_string("{{ y }}")
    stock_env.globals["y"] = "changed after loading"  # what Jinja asks nobody to do
    assert memo.render() == "environment's"


def test_syntax_errors_raise_as_transformers_raises_them():
    with pytest.raises(jinja2.TemplateSyntaxError) as fast:
        compile_template("{% if %}")
    with pytest.raises(jinja2.TemplateSyntaxError) as stock:
        _compile_jinja_template("{% if %}")
    assert (fast.value.lineno, fast.value.message) == (stock.value.lineno, stock.value.message)


# --- the two lookups MemoSandbox makes without the stock steps (dict items, builtin calls) ------
class AttrDict(dict):
    """A dict subclass with an attribute: `getattr` must prefer the attribute, as stock does."""

    role = "attribute"


def _env_with(**globals_: object) -> tuple[jinja2.Environment, jinja2.Environment]:
    stock = ImmutableSandboxedEnvironment()
    stock.globals.update(globals_)
    return stock, MemoSandbox.overlay_of(stock)


LOOKUPS = {
    # dict items read as attributes, missing ones, names dict itself defines, a subclass
    "item": "{{ m.role }}|{{ m.content }}|{{ m.missing is defined }}|{{ m.missing }}",
    "dict_names": "{{ m.items }}|{{ m.get('role') }}|{{ m.keys()|list }}|{{ m.values is defined }}",
    "shadowed": "{{ d.items }}|{{ d.get }}|{{ d['items'] }}|{{ d.copy is defined }}",
    "unsafe_dict_method": "{{ m.update }}|{{ m.pop is defined }}|{{ m.__class__ }}",
    "subclass": "{{ a.role }}|{{ a['role'] }}|{{ a.other }}",
    "non_str_name": "{{ n[1] }}|{{ n.x is defined }}",
    # builtin method calls: plain, with keywords, inside loops (the `_loop_vars` keyword) and
    # blocks, a StopIteration raised by the callee, builtins reached as globals
    "calls": "{{ m.content.strip().split('o') }}|{{ m.content.replace('e', 'E', 1) }}"
    "|{{ m.content.split(maxsplit=1) }}",
    "in_loop": "{% for x in xs %}{{ x.upper() }}{{ loop.index }}{{ ','.join([x, x]) }}{% endfor %}",
    "in_macro_and_set_block": "{% macro f(s) %}{{ s.title() }}{% endmacro %}{{ f(m.content) }}"
    "{% set y %}{{ m.role.upper() }}{% endset %}{{ y }}",
    "stop_iteration": "[{{ nxt(empty) }}]|{{ nxt(empty) is defined }}|{{ nxt(it) }}",
    "builtin_global": "{{ ln(xs) }}|{{ srt(xs, reverse=True) }}",
    "format": "{{ '{0}-{1}'.format(1, 2) }}|{{ '{0.real}'.format(3) }}",
    "format_escape": "{{ '{0.__class__}'.format(1) }}",
}


@pytest.mark.parametrize("name", LOOKUPS)
def test_direct_lookups_and_calls_give_the_stock_result(name):
    stock_env, memo_env = _env_with(nxt=next, ln=len, srt=sorted)
    variables = {
        "m": {"role": "user", "content": " hello world "},
        "d": {"items": "an item", "get": "a get"},
        "a": AttrDict(role="item", other=1),
        "n": {1: "one"},
        "xs": ["a", "b"],
    }
    stock = stock_env.from_string(LOOKUPS[name])
    memo = memo_env.from_string(LOOKUPS[name])
    for _ in range(2):  # the second time with the memo filled
        got = _outcome(memo, empty=iter(()), it=iter([7]), **variables)
        assert got == _outcome(stock, empty=iter(()), it=iter([7]), **variables)
        assert not got.startswith(("TypeError", "AttributeError")), got


def test_a_dict_item_is_read_directly_and_a_dict_attribute_through_the_stock_path():
    env = MemoSandbox.overlay_of(ImmutableSandboxedEnvironment())
    m = {"role": "user", "items": "not the method"}
    assert env.getattr(m, "role") == "user"
    assert env.getattr(m, "items") == m.items  # the attribute wins, as in the stock getattr
    assert isinstance(env.getattr(m, "nope"), jinja2.Undefined)
    assert isinstance(env.getattr(m, "update"), jinja2.Undefined)  # refused: it mutates
    assert env.getattr(AttrDict(role="item"), "role") == "attribute"


def test_a_builtin_method_call_drops_the_loop_variables_and_turns_stop_iteration_undefined():
    env = MemoSandbox.overlay_of(ImmutableSandboxedEnvironment())
    ctx = env.from_string("").new_context({})
    assert env.call(ctx, " a b ".split, _loop_vars={}, _block_vars={}) == ["a", "b"]
    out = env.call(ctx, next, iter(()))
    stock = STOCK.call(STOCK.from_string("").new_context({}), next, iter(()))
    assert isinstance(out, jinja2.Undefined) and isinstance(stock, jinja2.Undefined)
    assert out._undefined_hint == stock._undefined_hint
    assert "StopIteration" in out._undefined_hint
