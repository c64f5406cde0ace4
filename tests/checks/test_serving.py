"""Tools prepared as the serving engine prepares them (mask/serving.py), and the
`--render-server` option's usage errors. The rules are proven against vLLM's own renderer in
tests/serving/test_render_server.py; these tests pin them without a server.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template
from rows import WEATHER_TOOL

from draftset import api
from draftset.core.errors import UsageError
from draftset.mask.serving import ToolRejected, prepare_tools
from draftset.mask.template import ChatTemplate, TemplateSpec

UNDESCRIBED = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}
# long enough for a DFlash anchor (verify's drafter_fitness fails a set without any)
LONG_ANSWER = (
    "I looked it up: the capital of Peru is Lima, a coastal city founded in 1535 that is home"
    " to about a third of the country's population and most of its government offices."
)
REORDERED = {
    "function": {
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "name": "roll",
        "x-owner": "games",
        "description": "Roll dice.",
    },
    "type": "function",
    "metadata": {"v": 2},
}


def test_vllm_rule_orders_keys_adds_null_description_and_drops_unknown_keys() -> None:
    got = prepare_tools([UNDESCRIBED, REORDERED], "vllm")
    assert json.dumps(got) == json.dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": None,
                    "parameters": {"type": "object", "properties": {}},
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "roll",
                    "description": "Roll dice.",
                    "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
                },
            },
        ]
    )


def test_vllm_rule_keeps_strict_and_defer_loading_only_when_set() -> None:
    tool = {
        "type": "function",
        "defer_loading": True,
        "function": {"name": "f", "strict": "true", "description": "d"},
    }
    (got,) = prepare_tools([tool], "vllm")
    assert list(got) == ["type", "function", "defer_loading"]
    assert got["function"] == {
        "name": "f",
        "description": "d",
        "parameters": None,
        "strict": True,
        "defer_loading": True,
    }


def test_sglang_rule_keeps_the_clients_key_order_and_appends_nulls() -> None:
    """sglang 0.5.23 (`protocol.Function`'s `_capture_key_order`/`_serialize`, `Tool`): the
    function's keys in the client's order, unknown keys dropped, a missing description or
    parameters appended as null, the top-level ``defer_loading: null`` always there. Expected
    dumps derived from the 0.5.23 source (its Tool/Function models rebuilt with pydantic), not
    from a running server."""
    got = prepare_tools([UNDESCRIBED, REORDERED, {"function": {"name": "g"}}], "sglang")
    assert json.dumps(got) == json.dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "parameters": {"type": "object", "properties": {}},
                    "description": None,
                },
                "defer_loading": None,
            },
            {
                "type": "function",
                "function": {
                    "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
                    "name": "roll",
                    "description": "Roll dice.",
                },
                "defer_loading": None,
            },
            {
                "type": "function",
                "function": {"name": "g", "description": None, "parameters": None},
                "defer_loading": None,
            },
        ]
    )


def test_sglang_rule_keeps_strict_and_defer_loading_only_when_set() -> None:
    """sglang 0.5.23: ``strict``/``defer_loading`` in the function only when not null (lax
    booleans), in the client's place; a tool-level ``defer_loading`` copied into a function
    without one (appended last). Derived from the 0.5.23 source, not run here."""
    tools = [
        {
            "type": "function",
            "defer_loading": True,
            "function": {"name": "f", "strict": "true", "description": "d"},
        },
        {
            "type": "function",
            "defer_loading": "no",
            "function": {"defer_loading": 1, "name": "f", "strict": None},
        },
        {"type": "function", "function": {"name": "f", "strict": 0.0}},
    ]
    assert json.dumps(prepare_tools(tools, "sglang")) == json.dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "strict": True,
                    "description": "d",
                    "parameters": None,
                    "defer_loading": True,
                },
                "defer_loading": True,
            },
            {
                "type": "function",
                "function": {
                    "defer_loading": True,
                    "name": "f",
                    "description": None,
                    "parameters": None,
                },
                "defer_loading": False,
            },
            {
                "type": "function",
                "function": {"name": "f", "strict": False, "description": None, "parameters": None},
                "defer_loading": None,
            },
        ]
    )


def test_sglang_rule_rewrites_type_aliases_and_keeps_the_row() -> None:
    """sglang 0.5.13+ (`function_call.utils.normalize_json_schema_types`, in
    `_validate_request`) rewrites DB/ORM type names in ``parameters`` in place, and that
    schema is what the template writes; any other type string stays (boolean schemas pass).
    The row's own tools are not changed. Derived from the 0.5.23 source, not run here."""
    params = {
        "type": "object",
        "properties": {
            "s": {"type": "varchar(255)"},
            "n": {"type": "int32"},
            "tags": {"type": "list[str]", "items": {"type": "str"}},
            "x": {"type": ["int", "integer", "null"]},
            "m": {"type": "map", "additionalProperties": {"type": "double"}},
            "u": {"anyOf": [{"type": "uuid"}, {"type": "bool"}]},
        },
    }
    tool = {"type": "function", "function": {"name": "q", "parameters": params}}
    before = json.dumps(tool)
    (got,) = prepare_tools([tool], "sglang")
    assert json.dumps(tool) == before
    assert got["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "x": {"type": ["integer", "null"]},
            "m": {"type": "object", "additionalProperties": {"type": "number"}},
            "u": {"anyOf": [{"type": "string"}, {"type": "boolean"}]},
        },
    }
    boolean = {"type": "function", "function": {"name": "f", "parameters": True}}
    assert prepare_tools([boolean], "sglang")[0]["function"] == {
        "name": "f",
        "parameters": True,
        "description": None,
    }


def test_sglang_rule_takes_any_type_string() -> None:
    """sglang 0.5.23's ``Tool.type`` is any string (default ``function``): kept as given."""
    (got,) = prepare_tools([{"type": "code_interpreter", "function": {"name": "f"}}], "sglang")
    assert got["type"] == "code_interpreter"


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "function", "function": {"name": 5}},
        {"type": 5, "function": {"name": "f"}},
        {"type": "function", "function": {"name": "f", "description": 3}},
        {"type": "function", "function": {"name": "f", "strict": "maybe"}},
        {"type": "function", "function": {"name": "f", "strict": 2}},
        {"type": "function", "function": {"name": "f", "parameters": "{}"}},
        {"type": "function", "function": {"name": "f", "parameters": []}},
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"a": {"type": "internal"}}},
            },
        },
    ],
)
def test_sglang_rule_refuses_what_sglang_answers_with_400(tool: dict) -> None:
    """sglang 0.5.23 answers HTTP 400 to a tool its models refuse, or whose ``parameters``
    fail `Draft202012Validator.check_schema` after the alias rewrite (``internal`` is no
    alias: ``int`` must end at a digit or bracket). Derived from its source, not run here."""
    with pytest.raises(ToolRejected):
        prepare_tools([tool], "sglang")


def test_transformers_rule_is_the_tools_as_given() -> None:
    tools = [REORDERED]
    assert prepare_tools(tools, "transformers") is tools
    assert prepare_tools(None, "vllm") is None


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "code_interpreter", "function": {"name": "f"}},
        {"type": "function", "function": {"name": "f", "description": 3}},
        {"type": "function", "function": {"name": "f", "parameters": "{}"}},
        {"type": "function", "function": {"name": "f", "strict": "maybe"}},
    ],
)
def test_vllm_rule_refuses_what_vllm_answers_with_400(tool: dict) -> None:
    with pytest.raises(ToolRejected):
        prepare_tools([tool], "vllm")


def test_render_prepares_tools_by_the_spec_engine() -> None:
    """The render the build masks on holds vLLM's dump; `transformers` renders the raw JSON."""
    msgs = [{"role": "user", "content": "hi"}]
    tok, tmpl = str(qwen3_tokenizer_dir()), trl_template("qwen3").read_text()
    vllm = ChatTemplate(TemplateSpec(tok, tmpl, {}, (), serving_engine="vllm"))
    raw = ChatTemplate(TemplateSpec(tok, tmpl, {}, (), serving_engine="transformers"))
    assert '"name": "lookup", "description": null, "parameters"' in vllm.render(msgs, [UNDESCRIBED])
    assert '"description"' not in raw.render(msgs, [UNDESCRIBED])
    # the reference path (verify's) prepares them the same way
    assert vllm.render_reference(msgs, [UNDESCRIBED]) == vllm.render(msgs, [UNDESCRIBED])


@pytest.mark.parametrize("name", ["qwen3", "llama3_2"])
def test_every_render_path_prepares_tools_also_for_templates_reading_the_clock(name: str) -> None:
    """Llama-3.2's template reads the clock, so its renders go through the clock-pinning path
    (mask/ambient.py): that path once rendered the tools as given, so build (fast path) and
    verify (reference path) disagreed on every row with an undescribed tool."""
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}]
    tok = str(llama32_tokenizer_dir() if name == "llama3_2" else qwen3_tokenizer_dir())
    text = trl_template(name).read_text()
    # a build pins the clock (template.now): the path a clock-reading template then takes
    spec = TemplateSpec(tok, text, {}, (), now="2026-01-02T03:04:05", serving_engine="vllm")
    tmpl = ChatTemplate(spec)
    ref = tmpl.render_reference(msgs, [UNDESCRIBED])
    assert '"description": null' in ref
    assert tmpl.render(msgs, [UNDESCRIBED]) == ref


def _write(tmp: Path) -> Path:
    src = tmp / "rows.jsonl"
    row = {
        "id": "t",
        "tools": [UNDESCRIBED],
        "messages": [
            {"role": "user", "content": "Look it up."},
            {"role": "assistant", "content": LONG_ANSWER},
        ],
    }
    src.write_text(json.dumps(row) + "\n")
    return src


def test_manifest_records_the_engine_and_verify_renders_with_it(tmp_path: Path) -> None:
    """A set built for transformers verifies as transformers; a manifest without the field
    (sets built before it existed) is read as transformers too."""
    src = _write(tmp_path)
    common = {"tokenizer": str(qwen3_tokenizer_dir()), "workers": 1, "progress": False}
    for engine in ("vllm", "transformers"):
        out = tmp_path / engine
        api.build(sources=[str(src)], out=str(out), serving_engine=engine, **common)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["template"]["serving_engine"] == engine
        assert api.verify(out, speculators=False).ok
    old = tmp_path / "transformers"
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["template"]["serving_engine"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    checks = {c.name: c.status for c in api.verify(old, speculators=False).checks}
    assert checks["mask_fidelity"] == "pass"


def test_unknown_serving_engine_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="serving_engine must be"):
        api.build(
            sources=[str(_write(tmp_path))],
            tokenizer=str(qwen3_tokenizer_dir()),
            out=str(tmp_path / "o"),
            serving_engine="tgi",
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_render_server_is_one_line_exit_2_before_any_work(tmp_path: Path) -> None:
    missing = tmp_path / "not-a-set"  # never read: the server is checked first
    url = f"http://127.0.0.1:{_free_port()}"
    proc = subprocess.run(
        [sys.executable, "-m", "draftset.cli", "verify", str(missing), "--render-server", url],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "render server" in lines[0] and url in lines[0]


def test_run_recipe_render_server_is_checked_before_any_work(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    out = tmp_path / "out"
    url = f"http://127.0.0.1:{_free_port()}"
    recipe.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\nout: {out}\n"
        f"sources:\n  - {{path: {_write(tmp_path)}}}\n"
        f"generate:\n  endpoints: [http://127.0.0.1:1/v1]\nverify:\n  render_server: {url}\n"
    )
    with pytest.raises(UsageError, match="render server"):
        api.run(recipe)
    assert not out.exists() and not (tmp_path / "out.run").exists()


def test_a_row_with_a_tool_type_vllm_refuses_is_rejected_not_rewritten() -> None:
    """The normalizer rewrote `{"type": "custom", "function": ...}` to a function tool, so a
    row vLLM answers with HTTP 400 (`tools.0.type Input should be 'function'`) was built as if
    served; the type is kept now, and the vLLM rule rejects the row."""
    from draftset.core.records import Conversation, RawRow
    from draftset.mask.render import plan_conversation
    from draftset.sources.normalize import normalize

    tool = {"type": "custom", "function": {"name": "f", "parameters": {"type": "object"}}}
    row = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "tools": [tool],
    }
    conv = normalize(RawRow("s", 0, row))
    assert isinstance(conv, Conversation) and conv.tools == [tool]
    tok, tmpl = str(qwen3_tokenizer_dir()), trl_template("qwen3").read_text()
    vllm = ChatTemplate(TemplateSpec(tok, tmpl, {}, ("<|im_end|>",), serving_engine="vllm"))
    plan = plan_conversation(vllm, conv)
    assert [(r.reason, "type must be 'function'" in r.message) for r in plan.rejects] == [
        ("template_error", True)
    ]


def test_vllm_drops_claude_codes_billing_header_from_system_text() -> None:
    """vLLM 0.33 drops a system text's first line when it is Claude Code's per-request
    billing header: the row's context held 26 tokens the served model never sees (verify
    --render-server caught it; build now renders what vLLM renders)."""
    from draftset.mask.serving import served_system_texts

    header = "x-anthropic-billing-header: cc_version=1.0.80; cch=abc123"
    msgs = [{"role": "system", "content": f"{header}\nYou are a coding agent."}]
    assert served_system_texts(msgs, {}, "vllm")[0][0]["content"] == "You are a coding agent."
    assert served_system_texts(msgs, {}, "transformers")[0] is msgs
    parts = {"text_parts": {0: [header, "Be brief."]}}
    joined = [{"role": "system", "content": f"{header}\nBe brief."}]
    got, meta = served_system_texts(joined, parts, "vllm")
    assert got[0]["content"] == "Be brief." and meta["text_parts"] == {0: ["Be brief."]}
    tok, tmpl = str(qwen3_tokenizer_dir()), trl_template("qwen3").read_text()
    from draftset.core.records import Conversation
    from draftset.mask.render import plan_conversation

    vllm = ChatTemplate(TemplateSpec(tok, tmpl, {}, ("<|im_end|>",), serving_engine="vllm"))
    conv = Conversation(
        "c",
        "s",
        0,
        [*msgs, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    (row,) = plan_conversation(vllm, conv).rows
    text = "".join(t for t, _ in row.segments)
    assert "billing" not in text and "You are a coding agent." in text


def test_vllm_keeps_the_billing_header_of_a_developer_message() -> None:
    """vLLM strips the header from ``role == "system"`` messages only: a row's developer
    message (normalized to system, `records.DEVELOPER`) keeps it, as the served prompt does
    (an outside probe against `vllm launch render`: draftset had stripped it)."""
    from draftset.mask.serving import served_system_texts

    header = "x-anthropic-billing-header: cc_version=1.0.80; cch=abc123"
    msgs = [{"role": "system", "content": f"{header}\nBe brief."}]
    got, _ = served_system_texts(msgs, {"developer": {0: True}}, "vllm")
    assert got[0]["content"] == f"{header}\nBe brief."


def test_render_server_requests_carry_the_call_ids_a_client_must_send() -> None:
    """vLLM refuses a tool call without ``id`` (HTTP 400, OpenAI's schema): verify
    --render-server failed every row whose calls had none (glaive, ShareGPT function calls),
    though its set was right. The request gives such a call an id and ``type`` as a client
    must; a template that renders ids then shows the difference, as it should."""
    from draftset.checks.serving import _messages
    from draftset.core.records import RawRow
    from draftset.sources.normalize import normalize

    row = {
        "messages": [
            {"role": "user", "content": "Time?"},
            {"role": "assistant", "function_call": {"name": "now", "arguments": "{}"}},
            {"role": "function", "name": "now", "content": "12:00"},
            {"role": "assistant", "content": "Noon."},
        ]
    }
    conv = normalize(RawRow("s", 0, row))
    tmpl = ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), trl_template("qwen3").read_text()))
    sent = _messages(tmpl, conv)
    (call,) = sent[1]["tool_calls"]
    assert call["type"] == "function" and isinstance(call["id"], str) and call["id"]
    assert call["function"] == {"name": "now", "arguments": "{}"}
    # and the result the id of the call it answers, as a client pairs them (harmony names the
    # result's author by it)
    assert sent[2]["tool_call_id"] == call["id"]


def test_a_supervised_run_is_matched_to_the_turn_whose_prompt_it_follows() -> None:
    """gpt-oss, --turns all: a tool loop with reasoning, then a final answer and a later turn.
    The loop's turns are context; the server's prompt for one of them holds analysis the later
    prompt drops, so it is longer than the supervised turn's context: verify took the first
    prompt at least as long as the run's start and failed a right row (outside probe)."""
    from draftset.checks.serving import _turn_of_run

    lengths = {1: 10, 3: 40, 5: 120, 7: 100}

    class Server:
        def render(self, msgs, tools, kwargs, generation_prompt):
            return [0] * lengths[len(msgs)]

    msgs = [{"role": "user"}] * 8
    turn, prompt, nxt = _turn_of_run(Server(), msgs, None, {}, [1, 3, 5, 7], 0, 100)
    assert (turn, len(prompt), nxt) == (7, 100, 4)
    # no prompt of that length: the first at least as long is reported (as before)
    turn, _, _ = _turn_of_run(Server(), msgs, None, {}, [1, 3, 5, 7], 0, 90)
    assert turn == 5
    turn, _, _ = _turn_of_run(Server(), msgs, None, {}, [1, 3], 0, 90)
    assert turn == 3  # none long enough: the last


def test_a_supervised_run_is_matched_to_the_prompt_it_follows_not_one_as_long() -> None:
    """GLM-4.5, --turns all, a real tool-use row (llamafactory reason_tool_use, row 15):
    the prompts of turns 4 and 6 are both 1,468 tokens (the prompt of 4 holds the call's
    reasoning, which that of 6 drops after the next user turn). Turn 4 is context, the run
    at 1,468 is turn 6's: verify took the first prompt of that length and failed the right row
    ("turn 4: context differs from the server's prompt at token 1050")."""
    from draftset.checks.serving import _turn_of_run

    prompts = {1: [1] * 10, 3: [1] * 40, 5: [2] * 100, 7: [3] * 100, 9: [4] * 100}

    class Server:
        def render(self, msgs, tools, kwargs, generation_prompt):
            return prompts[len(msgs)]

    msgs = [{"role": "user"}] * 10
    row = [3] * 100 + [9] * 5  # turn 7's prompt, then its run
    turn, prompt, nxt = _turn_of_run(Server(), msgs, None, {}, [1, 3, 5, 7, 9], 0, 100, row[:100])
    assert (turn, prompt, nxt) == (7, prompts[7], 4)
    # no prompt is the row's context: the first of that length is reported (its difference)
    turn, _, nxt = _turn_of_run(Server(), msgs, None, {}, [1, 3, 5, 7, 9], 0, 100, [5] * 100)
    assert (turn, nxt) == (5, 3)


def test_tool_results_are_paired_with_calls_by_id_else_in_order() -> None:
    """One rule for build's harmony authors and verify's requests (`answered_calls`)."""
    from draftset.mask.serving import answered_calls

    def calls(*ids):
        return [
            {"id": i, "function": {"name": "f"}} if i else {"function": {"name": "f"}} for i in ids
        ]

    msgs = [
        {"role": "user"},
        {"role": "assistant", "tool_calls": calls("a", "b")},
        {"role": "tool", "tool_call_id": "b"},  # by id
        {"role": "tool"},  # the next not answered: a
        {"role": "tool", "tool_call_id": "zz"},  # an id no call holds: none
        {"role": "assistant", "tool_calls": calls(None, None)},
        {"role": "tool"},
        {"role": "tool"},
        {"role": "tool"},  # more results than calls: none
    ]
    assert answered_calls(msgs) == {
        2: (1, 1),
        3: (1, 0),
        4: None,
        6: (5, 0),
        7: (5, 1),
        8: None,
    }


class _TransformersRenderServer:
    """A stand-in for `vllm launch render`: the tokenizer's own template through transformers
    (what the server does for a plain conversation), tokenized as the server tokenizes."""

    url, model = "local", "stand-in"

    def __init__(self, folder: Path, kwargs: dict) -> None:
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(folder))
        self.kwargs = kwargs

    def render(self, messages, tools, kwargs, generation_prompt, continue_final=False):
        text = self.tok.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=generation_prompt,
            tokenize=False,
            **{**self.kwargs, **kwargs},
        )
        return self.tok(text, add_special_tokens=False)["input_ids"]


def _glm_set(tmp_path: Path, conversation: list[dict], mode: str, **build: Any) -> Any:
    """A verified GLM-4.7-Flash set (real tokenizer files) of one conversation, id ``two``;
    returns (the open set, its template, the template kwargs, the family)."""
    from real_families import REAL_FAMILIES

    from draftset.checks.mask import load_template
    from draftset.output.readback import open_output

    fam = REAL_FAMILIES["glm4_7"]
    kwargs = dict(fam.kwargs)
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps({"id": "two", "messages": conversation}) + "\n")
    out = tmp_path / mode
    api.build(
        sources=[src],
        tokenizer=str(fam.folder()),
        out=out,
        workers=1,
        turns=mode,
        template_kwargs=kwargs,
        **build,
    )
    assert api.verify(out).ok
    folder = open_output(out)
    return folder, load_template(folder.manifest, None), kwargs, fam


@pytest.mark.parametrize("mode", ["all", "last", "each"])
def test_render_server_accepts_glm_turns_that_end_with_the_next_header(
    tmp_path: Path, mode: str
) -> None:
    """GLM ends a turn with the next turn's header (`<|user|>`, an eos id): the server's render
    of a conversation ending in an answer has no stop token, so `--render-server` failed every
    supervised run and every row text of a right GLM set (outside probe against vLLM)."""
    from draftset.checks.serving import check_render_server

    conversation = [
        {"role": "user", "content": "Favourite colour?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": LONG_ANSWER},
    ]
    rows = [{"id": "two", "messages": conversation}]
    folder, tmpl, kwargs, fam = _glm_set(tmp_path, conversation, mode)
    server = _TransformersRenderServer(fam.folder(), kwargs)
    result = check_render_server(folder, tmpl, server, None, 0)
    assert result.status == "pass", result.to_json()
    if mode != "each":
        return
    # which stop token ends the turn is the next message's header, as the server renders it:
    # `<|observation|>` (an eos id too) in place of `<|user|>` was accepted (second probe)
    from draftset.checks.serving import check_row
    from draftset.core.records import RawRow
    from draftset.sources.normalize import normalize

    row = folder.row(0)
    ids, mask = [int(i) for i in row["input_ids"]], row["loss_mask"]
    assert row["id"] == "two#0" and tmpl.decode(ids[-1:]) == "<|user|>"
    ids[-1] = tmpl.backend.token_to_id("<|observation|>")
    conv = normalize(RawRow("c", 0, rows[0]))
    problems = check_row(server, tmpl, conv, "two#0", ids, mask, "each", kwargs)
    assert any("supervised tokens differ" in p for p in problems), problems


@pytest.mark.parametrize("mode", ["all", "each"])
def test_render_server_asks_each_render_of_a_row_once(tmp_path: Path, mode: str) -> None:
    """A row's run check and its whole-row check rendered the same finished turn twice (and,
    for templates ending a turn with the next header, that render twice more): one HTTP
    request per row more than needed against a real server. Each distinct render is asked
    once per row, and the verdict is the same."""
    from draftset.checks.serving import check_render_server

    conversation = [
        {"role": "user", "content": "Favourite colour?"},
        {"role": "assistant", "content": LONG_ANSWER},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": LONG_ANSWER + " Blue."},
    ]
    folder, tmpl, kwargs, fam = _glm_set(tmp_path, conversation, mode)

    class Counting(_TransformersRenderServer):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            self.asked: list[str] = []

        def render(self, messages, tools, kwargs, generation_prompt, continue_final=False):
            self.asked.append(json.dumps([messages, generation_prompt, continue_final]))
            return super().render(messages, tools, kwargs, generation_prompt, continue_final)

    server = Counting(fam.folder(), kwargs)
    result = check_render_server(folder, tmpl, server, None, 0)
    assert result.status == "pass", result.to_json()
    assert server.asked and len(server.asked) == len(set(server.asked)), server.asked


def test_sglang_rule_without_jsonschema_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sglang rule checks parameters with jsonschema (extra ``draftset[sglang]``): without
    it, a usage error naming the extra before any row, never a traceback per row."""
    from draftset.mask.serving import require_engine

    monkeypatch.setitem(sys.modules, "jsonschema", None)
    require_engine("vllm")
    with pytest.raises(UsageError, match=r"draftset\[sglang\]"):
        require_engine("sglang")


@pytest.mark.parametrize("mode", ["all", "each"])
def test_render_server_accepts_a_row_cut_by_truncation(tmp_path: Path, mode: str) -> None:
    """A `--truncation truncate` row of exactly `max_length` tokens ends inside its last
    generation: its run is a prefix of the server's generation and the row a prefix of the
    server's render (docs/verify.md, rule 5). `--render-server` compared them whole and failed
    every such row of a right set (outside probe against vLLM); a row that is not a prefix
    still fails."""
    from draftset.checks.serving import check_render_server, check_row
    from draftset.core.records import RawRow
    from draftset.sources.normalize import normalize

    counting = " ".join(str(i) for i in range(1, 41)) + "."
    conversation = [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Count to forty."},
        {"role": "assistant", "content": counting},
    ]
    folder, tmpl, kwargs, fam = _glm_set(
        tmp_path, conversation, mode, max_length=48, truncation="truncate", min_supervised_tokens=1
    )
    cut = [i for i in range(len(folder.ids())) if len(folder.row(i)["input_ids"]) == 48]
    assert cut, "no row was cut: the test would prove nothing"
    server = _TransformersRenderServer(fam.folder(), kwargs)
    result = check_render_server(folder, tmpl, server, None, 0)
    assert result.status == "pass", result.to_json()
    # a cut row whose last run is not the generation's prefix still fails
    row = folder.row(cut[0])
    ids, mask = [int(i) for i in row["input_ids"]], row["loss_mask"]
    ids[-2] = tmpl.backend.token_to_id("Hello")
    conv = normalize(RawRow("c", 0, {"id": "two", "messages": conversation}))
    problems = check_row(server, tmpl, conv, row["id"], ids, mask, mode, kwargs)
    assert any("supervised tokens differ" in p for p in problems), problems


def test_render_server_still_compares_a_whole_row_not_cut_by_truncation(tmp_path: Path) -> None:
    """The truncation rule (prefixes) is for rows cut by `--truncation truncate` only: a name
    reused inside the row check made every row after its first run judged as a prefix, so a
    row missing its last token passed (docs-vs-code probe, session 25)."""
    from draftset.checks.mask import load_template
    from draftset.checks.serving import check_row
    from draftset.core.records import RawRow
    from draftset.output.readback import open_output
    from draftset.sources.normalize import normalize

    row = {
        "id": "two",
        "messages": [
            {"role": "user", "content": "Favourite colour?"},
            {"role": "assistant", "content": LONG_ANSWER},
            {"role": "user", "content": "Why?"},
            {"role": "assistant", "content": LONG_ANSWER + " Blue."},
        ],
    }
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps(row) + "\n")
    folder_path = qwen3_tokenizer_dir()
    out = tmp_path / "o"
    api.build(
        sources=[src],
        tokenizer=str(folder_path),
        chat_template=str(trl_template("qwen3")),
        eot_tokens=["<|im_end|>", "<|endoftext|>"],
        out=out,
        workers=1,
    )
    folder = open_output(out)
    tmpl = load_template(folder.manifest, None)
    built = folder.row(0)
    ids, mask = [int(i) for i in built["input_ids"]], built["loss_mask"]
    server = _TransformersRenderServer(folder_path, {})
    server.tok.chat_template = trl_template("qwen3").read_text()
    conv = normalize(RawRow("c", 0, row))
    assert check_row(server, tmpl, conv, "two", ids, mask, "all", {}) == []
    assert tmpl.decode(ids[-1:]) == "\n"  # the separator after the last answer's stop token
    short = check_row(server, tmpl, conv, "two", ids[:-1], mask[:-1], "all", {})
    assert any("the row's text differs" in p for p in short), short


def _vllm_template_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """The kwargs vLLM 0.33 gives a chat template for a request body
    (``ChatCompletionRequest.build_chat_params``): ``chat_template_kwargs``, then the request's
    own ``reasoning_effort`` over them and, when they name no ``enable_thinking``,
    ``enable_thinking = reasoning_effort != "none"``."""
    kwargs = dict(body.get("chat_template_kwargs") or {})
    effort = body.get("reasoning_effort")
    if effort is not None:
        kwargs["reasoning_effort"] = effort
        kwargs.setdefault("enable_thinking", effort != "none")
    return kwargs


def test_render_server_sends_the_kwargs_reasoning_effort_as_a_request_field_only_for_harmony(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify sent a set's ``reasoning_effort`` template kwarg also as the request's own field
    (harmony reads only that one), and vLLM turns that field into ``enable_thinking: true``
    for a template when the kwargs name none: a right set built with ``{"reasoning_effort":
    "low"}`` for a template that thinks only when asked (Qwen3.5's ``nothink``, real files,
    against vLLM 0.33: 14 of 14 rows) failed every row ("context differs ... ``<think>``").
    A template is given the kwargs alone; a harmony render still gets the field."""
    from draftset.checks import serving
    from draftset.checks.mask import load_template
    from draftset.output.readback import open_output

    sent: list[dict[str, Any]] = []
    folder = qwen3_tokenizer_dir()
    template = trl_template("qwen3_5_nothink")

    def post(url: str, body: dict[str, Any]) -> Any:
        from transformers import AutoTokenizer

        sent.append(body)
        tok = AutoTokenizer.from_pretrained(str(folder))
        text = tok.apply_chat_template(
            body["messages"],
            tools=body.get("tools"),
            chat_template=template.read_text(),
            add_generation_prompt=body["add_generation_prompt"],
            continue_final_message=body["continue_final_message"],
            tokenize=False,
            **_vllm_template_kwargs(body),
        )
        return {"token_ids": tok(text, add_special_tokens=False)["input_ids"]}

    monkeypatch.setattr(serving, "_post", post)
    conversation = [
        {"role": "user", "content": "What is the capital of Peru?"},
        {"role": "assistant", "content": LONG_ANSWER},
    ]
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps({"id": "peru", "messages": conversation}) + "\n")
    out = tmp_path / "set"
    built = api.build(
        sources=[src],
        tokenizer=str(folder),
        chat_template=str(template),
        template_kwargs={"reasoning_effort": "low"},
        out=out,
        workers=1,
        progress=False,
    )
    assert built.ok
    opened = open_output(out)
    tmpl = load_template(opened.manifest, None)
    assert tmpl.harmony is None
    server = serving.RenderServer("http://stand-in", "m")
    result = serving.check_render_server(opened, tmpl, server, None, 0)
    assert result.status == "pass", result.details.get("messages")
    assert sent and all("reasoning_effort" not in b for b in sent), sent
    assert all(b["chat_template_kwargs"] == {"reasoning_effort": "low"} for b in sent)
    # a harmony render (gpt-oss under vLLM) reads the effort from the field alone
    assert serving.for_template(server, tmpl).effort_field is False
    harmonic = type("T", (), {"harmony": object()})()
    assert serving.for_template(server, harmonic).effort_field is True
    sent.clear()
    monkeypatch.setattr(serving, "_post", lambda url, body: sent.append(body) or {"token_ids": []})
    serving.for_template(server, harmonic).render(
        conversation[:1], None, {"reasoning_effort": "low"}, True
    )
    assert sent[0]["reasoning_effort"] == "low"


def test_runs_that_match_no_turn_are_one_kind_in_the_summary() -> None:
    """A supervised run matched to no assistant turn was reported with its token position in
    the kind, so the summary listed each as its own kind ("supervised run at token 384 belongs
    to no assistant turn: 1; ... at token 453 ...: 1", eight entries on a Mistral set of real
    data against vLLM): they are one kind, counted together, the position in the message."""
    import numpy as np

    from draftset.checks.serving import _kind, check_row
    from draftset.core.records import RawRow
    from draftset.sources.normalize import normalize

    row = {
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
        ]
    }
    conv = normalize(RawRow("s", 0, row))
    tmpl = ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), trl_template("qwen3").read_text()))

    class Server:
        def render(self, msgs, tools, kwargs, generation_prompt, continue_final=False):
            return [0] * 4 if generation_prompt else [0] * 4 + [1, 2]

    kinds = set()
    for start in (10, 20):  # a second run after the row's only turn: it belongs to none
        ids = [0] * 4 + [1, 2] + [0] * 30
        mask = np.zeros(len(ids), dtype=np.int8)
        mask[4:6] = 1
        mask[start : start + 2] = 1
        problems = check_row(Server(), tmpl, conv, "s", ids, mask, "last", {})
        (lost,) = [p for p in problems if "no assistant turn" in p]
        assert str(start) in lost
        kinds.add(_kind(lost))
    assert len(kinds) == 1 and not any(ch.isdigit() for ch in next(iter(kinds))), kinds


def test_render_server_accepts_a_harmony_row_cut_in_a_later_turns_context(tmp_path: Path) -> None:
    """gpt-oss under vLLM (harmony), `--turns all`, `--truncation truncate`: a row cut after a
    tool call's generation ends inside the tool's result, the context of the next turn. The
    harmony rule "the row ends with its last generation" failed every such row of a right set
    (real ToolBench and reasoning-tool-use rows against vLLM, session 29); the row is the first
    tokens of the server's prompt for that later turn. A changed context token still fails."""
    from draftset.checks.mask import load_template
    from draftset.checks.serving import _runs, check_render_server, check_row
    from draftset.core.records import RawRow
    from draftset.output.readback import open_output
    from draftset.sources.normalize import normalize

    lenml = Path(sys.prefix) / "share" / "draftset-test-tokenizers" / "lenml" / "gptoss"
    if not (lenml / "tokenizer.json").is_file():
        pytest.fail(f"{lenml}/tokenizer.json is missing: run `scripts/setup.sh test`")
    model = tmp_path / "gptoss"
    model.mkdir()
    for f in lenml.iterdir():
        (model / f.name).symlink_to(f)
    for f in (REPO / "tests" / "data" / "serving" / "models" / "gpt_oss").glob("*.json"):
        (model / f.name).write_text(f.read_text())
    weather = "Sunny and 21 degrees, light wind from the west, no rain expected. " * 6
    row = {
        "id": "loop",
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": weather},
            {"role": "assistant", "content": "It is sunny in Paris."},
        ],
    }
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps(row) + "\n")

    def built(out: Path, **cut: Any) -> Any:
        api.build(
            sources=[src],
            tokenizer=str(model),
            chat_template=str(trl_template("gptoss")),
            out=out,
            workers=1,
            progress=False,
            **cut,
        )
        return open_output(out)

    whole = built(tmp_path / "whole").row(0)
    first_end = _runs(whole["loss_mask"])[0][1]
    assert first_end + 20 < len(whole["input_ids"]), "the tool result is too short to cut in"
    cut = first_end + 10  # inside the tool result after the call
    folder = built(tmp_path / "cut", max_length=cut, truncation="truncate", min_supervised_tokens=1)
    tmpl = load_template(folder.manifest, None)
    assert tmpl.harmony is not None
    built_row = folder.row(0)
    ids, mask = [int(i) for i in built_row["input_ids"]], built_row["loss_mask"]
    assert len(ids) == cut and _runs(mask)[-1][1] < cut, "the cut is not in a later context"

    class HarmonyServer:  # vLLM's harmony prompt (mask/harmony.py, proven against vLLM)
        url, model = "local", "stand-in"

        def render(self, messages, tools, kwargs, generation_prompt, continue_final=False):
            assert generation_prompt and tmpl.harmony is not None
            return tmpl.harmony.prompt_ids(messages, tools, kwargs)

    result = check_render_server(folder, tmpl, HarmonyServer(), None, 0)
    assert result.status == "pass", result.to_json()
    conv = normalize(RawRow("c", 0, row))
    kwargs = dict(folder.manifest["template"].get("kwargs") or {})
    assert check_row(HarmonyServer(), tmpl, conv, "loop", ids, mask, "all", kwargs, True) == []
    ids[-2] = ids[-3]  # a context token the server's prompt does not have
    problems = check_row(HarmonyServer(), tmpl, conv, "loop", ids, mask, "all", kwargs, True)
    assert any("context after the last generation" in p for p in problems), problems


def test_render_server_says_which_rows_it_could_not_check(tmp_path: Path) -> None:
    """A pre-tokenized row (a built set given as a source) has no messages to send: a set of
    only such rows passed `render_server` as "all 0 rows (0 supervised turns) equal the
    renders", a set holding some as "all N rows" counting only the others. Now it is a skip
    naming them, and a mixed set's summary counts the rows not checked."""
    from draftset.checks.mask import load_template
    from draftset.checks.serving import check_render_server
    from draftset.output.readback import open_output

    common = {"tokenizer": str(qwen3_tokenizer_dir()), "workers": 1, "progress": False}
    first = tmp_path / "first"
    api.build(sources=[str(_write(tmp_path))], out=str(first), **common)
    other = tmp_path / "other.jsonl"
    other.write_text(
        json.dumps(
            {
                "id": "u",
                "messages": [
                    {"role": "user", "content": "And again?"},
                    {"role": "assistant", "content": LONG_ANSWER + " Again."},
                ],
            }
        )
        + "\n"
    )
    again, mixed = tmp_path / "again", tmp_path / "mixed"
    api.build(sources=[str(first)], out=str(again), **common)
    api.build(sources=[str(first), str(other)], out=str(mixed), **common)

    def check(out: Path) -> Any:
        folder = open_output(out)
        tmpl = load_template(folder.manifest, None)
        server = _TransformersRenderServer(qwen3_tokenizer_dir(), {})
        return check_render_server(folder, tmpl, server, None, 0)

    only = check(again)
    assert only.status == "skip", only.to_json()
    assert "none of the 1 rows has messages" in only.summary
    both = check(mixed)
    assert both.status == "pass", both.to_json()
    assert both.summary.startswith("1 rows (1 supervised turns) equal")
    assert "1 pre-tokenized rows not checked" in both.summary
    assert both.details["rows_not_checked"] == 1
