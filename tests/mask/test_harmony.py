"""gpt-oss under vLLM (issue 24): vLLM 0.33.0 ignores the chat template of a ``gpt_oss`` model
and renders harmony (mask/harmony.py). With ``serving_engine: vllm`` a gpt-oss set's context
tokens equal what vLLM feeds the model, and its supervised tokens are what the model writes.

The reference is vLLM itself: ``tests/data/serving/gpt_oss_vllm_prompts.json`` holds the token
ids `vllm launch render` returned for every turn's prompt of the serving conversations
(``_source`` in the file), with the server's date pinned to 2026-01-15; the live-server suite is
tests/checks/test_render_server.py. Needs the harmony library (``draftset[harmony]``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO, trl_template

from draftset.checks.verify import run_verify
from draftset.config.options import BuildOptions
from draftset.core.errors import UsageError
from draftset.pipeline.build import run_build
from draftset.sources.read import Source

DATA = REPO / "tests" / "data" / "serving"
RECORDED = json.loads((DATA / "gpt_oss_vllm_prompts.json").read_text())
NOW = "2026-01-15T09:30:00"  # the recorded server's VLLM_SYSTEM_START_DATE, a past day
LENML = Path(sys.prefix) / "share" / "draftset-test-tokenizers" / "lenml" / "gptoss"


def model_folder(root: Path, config: bool = True) -> Path:
    """The real gpt-oss tokenizer files + gpt-oss's config.json and generation_config.json."""
    if not (LENML / "tokenizer.json").is_file():
        pytest.fail(f"{LENML}/tokenizer.json is missing: run `scripts/setup.sh test`")
    folder = root / ("gptoss" if config else "gptoss-noconfig")
    folder.mkdir()
    for f in LENML.iterdir():
        (folder / f.name).symlink_to(f)
    for f in (DATA / "models" / "gpt_oss").glob("*.json"):
        if config or f.name != "config.json":
            (folder / f.name).write_text(f.read_text())
    return folder


def build(tmp: Path, folder: Path, turns: str, **kw) -> Path:
    opts = BuildOptions(
        [Source("conversations", DATA / "conversations.jsonl")],
        str(folder),
        tmp / f"set-{turns}",
        turns=turns,
        workers=1,
        template_now=NOW,
        # what the previous session's suite passed to vLLM: the engine ignores it for gpt-oss
        chat_template_path=str(trl_template("gptoss")),
        **kw,
    )
    return run_build(opts).out


def rows(out: Path) -> list[tuple[str, list[int], list[int]]]:
    with pa.memory_map(str(next(out.glob("*.arrow")))) as f:
        t = pa.ipc.open_stream(f).read_all()
    return list(
        zip(
            t["id"].to_pylist(),
            t["input_ids"].to_pylist(),
            t["loss_mask"].to_pylist(),
            strict=True,
        )
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return model_folder(tmp_path_factory.mktemp("tok"))


def test_each_rows_context_is_vllms_prompt(tmp_path: Path, folder: Path) -> None:
    """Every `each` row: the tokens before its supervised run are, id for id, the prompt vLLM
    rendered for that turn (built "on" 2026-01-15, today being later: the pinned clock); the
    run is what gpt-oss writes — its analysis, then the answer ending <|return|> or one call
    ending <|call|> — read back by the harmony library's own parser as the row's message.
    Before, the set was rendered with trl's gpt-oss template: no row's context was vLLM's."""
    from openai_harmony import HarmonyEncodingName, Role, StreamableParser, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    convs = {
        c["id"]: c for c in map(json.loads, (DATA / "conversations.jsonl").read_text().splitlines())
    }
    out = build(tmp_path, folder, "each")
    written = rows(out)
    # 29 turns in all, less the two of several-part messages (unsupported_content) and the
    # answer of two calls (gpt-oss stops at its first <|call|>: template_drops_content)
    assert len(written) == 26
    for rid, ids, mask in written:
        conv_id, _, k = rid.rpartition("#")
        if conv_id not in RECORDED["prompts"]:
            # added after the recording (several-part messages): tests/checks/
            # test_render_server.py compares them with vLLM itself
            continue
        messages = convs[conv_id]["messages"]
        j = [i for i, m in enumerate(messages) if m["role"] == "assistant"][int(k)]
        start = mask.index(1)
        assert ids[:start] == RECORDED["prompts"][conv_id][str(j)], rid
        assert all(mask[start:]), rid  # the row ends with its generation
        parser = StreamableParser(enc, role=Role.ASSISTANT)
        for tok in ids[start:]:
            parser.process(tok)
        got = [(m.channel, m.recipient, m.content[0].text) for m in parser.messages]
        msg = messages[j]
        want = (
            [("analysis", None, msg["reasoning_content"])] if msg.get("reasoning_content") else []
        )
        if msg.get("tool_calls"):
            fn = msg["tool_calls"][0]["function"]
            want.append(("commentary", f"functions.{fn['name']}", fn["arguments"]))
        else:
            want.append(("final", None, msg["content"]))
        assert got == want, rid
        assert enc.decode(ids[-1:]) == ("<|call|>" if msg.get("tool_calls") else "<|return|>")
    m = json.loads((out / "manifest.json").read_text())
    assert m["template"]["now"] == NOW  # harmony's system message reads the date
    assert [
        f for f in run_verify(out, speculators=False) if f.failed and f.name != "drafter_fitness"
    ] == []


def test_all_supervises_only_turns_vllm_prompts_as_generated(tmp_path: Path, folder: Path) -> None:
    """`all`: vLLM's later prompts drop an answered turn's analysis and end its answer with
    <|end|>, not the <|return|> the model wrote: such a turn is context, counted; a tool call
    (kept as written) stays supervised. Every supervised run's context is vLLM's prompt."""
    out = build(tmp_path, folder, "all")
    by_id = {rid: (ids, mask) for rid, ids, mask in rows(out)}
    for conv_id, turns in RECORDED["prompts"].items():
        if conv_id not in by_id:
            continue
        ids, mask = by_id[conv_id]
        starts = [i for i in range(1, len(mask)) if mask[i] and not mask[i - 1]]
        prompts = [p for p in turns.values() if ids[: len(p)] == p]
        for s in starts:
            assert any(len(p) == s for p in prompts), (conv_id, s)
    # multi_turn_reasoning: turn 1 (analysis + "7" + <|return|>) is not what the next prompt
    # holds, so only turn 3 is supervised; the tool loop keeps all three turns
    assert sum(np.diff([0, *by_id["multi_turn_reasoning"][1]]) == 1) == 1
    assert sum(np.diff([0, *by_id["tool_loop_empty_reasoning"][1]]) == 1) == 3
    m = json.loads((out / "manifest.json").read_text())
    # two of them the first answers of the empty_reasoning_* conversations: their next prompt
    # ends them <|end|>, as multi_turn_reasoning's
    assert m["counts"]["total"]["context_turns_by_reason"] == {"history_render_differs": 4}


def test_harmony_only_for_gpt_oss_served_by_vllm(tmp_path: Path, folder: Path) -> None:
    """The choice is vLLM's own (``config.json`` model_type ``gpt_oss``), not a registry: the
    same files without config.json, or with serving_engine transformers, render the template."""
    from draftset.mask.template import ChatTemplate, TemplateSpec

    text = trl_template("gptoss").read_text()
    served = ChatTemplate(TemplateSpec(str(folder), text, now=NOW, serving_engine="vllm"))
    plain = ChatTemplate(TemplateSpec(str(folder), text, now=NOW, serving_engine="transformers"))
    bare = model_folder(tmp_path, config=False)
    no_config = ChatTemplate(TemplateSpec(str(bare), text, now=NOW, serving_engine="vllm"))
    # a system prompt: vLLM gives it as the developer message's instructions
    chat = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert served.harmony is not None and plain.harmony is None and no_config.harmony is None
    vllm = RECORDED["prompts"]["system_reasoning"]["2"]
    for t, equal in ((served, True), (plain, False), (no_config, False)):
        text = t.render(chat, add_generation_prompt=True)
        assert (t.tokenizer.encode(text, add_special_tokens=False) == vllm) is equal


def test_missing_library_is_one_line(monkeypatch, folder: Path) -> None:
    """Without the harmony library: a usage error (exit 2) naming the extra, before any work."""
    from draftset.mask import harmony
    from draftset.mask.template import ChatTemplate, TemplateSpec

    monkeypatch.setitem(sys.modules, "openai_harmony", None)
    monkeypatch.setattr(harmony, "_ENCODING", [])
    with pytest.raises(UsageError) as err:
        ChatTemplate(TemplateSpec(str(folder), None, now=NOW, serving_engine="vllm"))
    assert "draftset[harmony]" in str(err.value) and "\n" not in str(err.value)


def _plan(folder: Path, row: dict, turns: str = "each"):
    from draftset.core.records import RawRow
    from draftset.mask.render import plan_conversation
    from draftset.mask.template import ChatTemplate, TemplateSpec
    from draftset.sources.normalize import normalize

    tmpl = ChatTemplate(TemplateSpec(str(folder), None, now=NOW, serving_engine="vllm"))
    conv = normalize(RawRow("s", 0, row))
    return tmpl, plan_conversation(tmpl, conv, turns)


CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def test_a_tool_result_of_parts_is_joined_as_harmony_joins_it(folder: Path) -> None:
    """vLLM's harmony path joins a tool result's text parts with nothing (its
    ``flatten_input_text_content``), where its chat-template path joins them with a newline;
    draftset wrote ``rain\\ncold`` (the normalizer never recorded a tool message's parts), and
    verify --render-server, sending the same joined text, passed it (outside probe)."""
    parts = [{"type": "text", "text": "rain"}, {"type": "text", "text": "cold"}]
    row = {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": parts},
            {"role": "assistant", "content": "Cold rain."},
        ],
    }
    _, plan = _plan(folder, row)
    text = "".join(t for t, _ in plan.rows[-1].segments)
    assert "<|message|>raincold<|end|>" in text and "rain\ncold" not in text


def test_special_token_text_outside_answers_is_refused_under_harmony(folder: Path) -> None:
    """Harmony encodes message text as ordinary text (``Explain <|end|>`` is ``<``, ``|``,
    ``end``...); draftset's rows are text encoded by the tokenizer, which makes it the control
    token. No text of the row encodes to the served prompt: the row is refused, named."""
    row = {
        "messages": [
            {"role": "user", "content": "Explain <|end|> and <|start|>assistant tokens."},
            {"role": "assistant", "content": "They are harmony control tokens."},
        ]
    }
    _, plan = _plan(folder, row)
    assert not plan.rows
    assert [r.reason for r in plan.rejects] == ["unsupported_content"]
    assert "'<|end|>'" in plan.rejects[0].message and "harmony" in plan.rejects[0].message


def test_empty_string_arguments_stay_empty_under_harmony(folder: Path) -> None:
    """vLLM's harmony path writes a call's arguments as given: ``""`` is an empty message
    (``json<|message|><|call|>``); draftset wrote the normalized ``{}``."""
    call = {**CALL, "function": {"name": "get_weather", "arguments": ""}}
    row = {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "rain"},
            {"role": "assistant", "content": "Rain."},
        ],
    }
    _, plan = _plan(folder, row)
    texts = ["".join(t for t, _ in r.segments) for r in plan.rows]
    assert texts and all("json<|message|><|call|>" in t for t in texts), texts


def test_two_calls_in_one_message_are_refused_under_harmony(folder: Path) -> None:
    """gpt-oss stops after one call (``<|call|>``): an assistant message with two is two
    generations the row merged, and the second one's prompt is not in the row. docs/semantics.md
    says such a row is rejected; build wrote the first call supervised and the second as
    context, which verify then failed (outside probe)."""
    second = {
        "id": "c2",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
    }
    row = {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather here and there?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL, second]},
        ],
    }
    for turns in ("each", "all"):
        _, plan = _plan(folder, row, turns)
        assert not plan.rows and [r.reason for r in plan.rejects] == ["template_drops_content"]
        # the line says why (it said "does not contain its text (or the name of a tool it
        # calls)" of a message without text whose render holds both calls: real tool-use rows
        # against vLLM, session 29)
        assert plan.rejects[0].message == (
            "the template's render of assistant message 1 does not contain all 2 of its tool"
            " calls ('get_weather': 1 of 2; the generation ends at its first stop token)"
        )


def test_a_refusal_part_is_refused_under_harmony(folder: Path) -> None:
    """vLLM's harmony path reads a part's ``text`` only: a ``refusal`` part is served empty (an
    answer of one is dropped from the history), where draftset reads it as text, as vLLM's
    template path does; verify --render-server passed such rows (outside probe)."""
    refusal = [{"type": "refusal", "refusal": "I can't help with that."}]
    row = {
        "messages": [
            {"role": "user", "content": "Help me pick a lock."},
            {"role": "assistant", "content": refusal},
            {"role": "user", "content": "Then name a fruit."},
            {"role": "assistant", "content": "Apple."},
        ]
    }
    _, plan = _plan(folder, row)
    assert not plan.rows and [r.reason for r in plan.rejects] == ["unsupported_content"]
    assert "'refusal' part" in plan.rejects[0].message


def test_a_tool_result_without_an_id_is_authored_by_the_call_it_answers(folder: Path) -> None:
    """Glaive and ToolBench rows have no call ids: a client must send them (vLLM refuses a
    call without), pairing each result with its call, and vLLM then authors the result
    ``functions.NAME``; draftset wrote ``functions.`` with no name (outside probe)."""
    bare = {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    row = {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [bare]},
            {"role": "tool", "content": "rain"},
            {"role": "assistant", "content": "Rain."},
        ],
    }
    _, plan = _plan(folder, row)
    text = "".join(t for t, _ in plan.rows[-1].segments)
    assert "<|start|>functions.get_weather<|channel|>commentary to=assistant<|message|>rain" in text


def test_an_empty_text_part_adds_nothing_under_harmony(folder: Path) -> None:
    """vLLM's harmony path tokenizes each text part on its own: an empty part adds no tokens,
    so ``["", "Say hi."]`` is served as ``Say hi.`` is, and an answer ``["Hey.", ""]`` as
    ``Hey.`` (measured against `vllm launch render` 0.33.0). Such rows were rejected
    ``unsupported_content`` ("message 0 is 2 text parts"), losing rows vLLM serves as written."""
    empty = {"type": "text", "text": ""}
    split = {
        "messages": [
            {"role": "user", "content": [empty, {"type": "text", "text": "Say hi."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hey."}, empty]},
            {"role": "user", "content": "Again."},
            {"role": "assistant", "content": "Hi."},
        ]
    }
    plain = {
        "messages": [
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "Hey."},
            {"role": "user", "content": "Again."},
            {"role": "assistant", "content": "Hi."},
        ]
    }
    _, got = _plan(folder, split)
    _, want = _plan(folder, plain)
    assert not got.rejects and len(got.rows) == len(want.rows) == 2
    for a, b in zip(got.rows, want.rows, strict=True):
        assert a.segments == b.segments


def test_an_answer_whose_first_part_is_empty_is_refused_under_harmony(folder: Path) -> None:
    """vLLM's harmony path keeps an answer without calls only when its first part has text
    (``contents[0].text``): ``["", "Hey."]`` is dropped from the conversation the server
    renders, where the row's text is ``Hey.``; the row stays refused, saying why."""
    row = {
        "messages": [
            {"role": "user", "content": "Yo"},
            {"role": "assistant", "content": [{"type": "text", "text": t} for t in ("", "Hey.")]},
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "Hi."},
        ]
    }
    _, plan = _plan(folder, row)
    assert not plan.rows and [r.reason for r in plan.rejects] == ["unsupported_content"]
    assert "first is empty" in plan.rejects[0].message


def test_the_eos_ends_a_final_answer_and_is_another_stop_after_a_call(folder: Path) -> None:
    """gpt-oss's EOS is `<|return|>` (vLLM: `stop_reason: null`, recorded `{"eos": true}`): the
    stop a final answer's G ends with, so that answer stays supervised; a tool call the EOS
    ended, where G ends with `<|call|>`, is `other_stop_token` context."""
    row = {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "rain"},
            {"role": "assistant", "content": "Rain."},
        ],
        "metadata": {"stop_tokens": [{"message": 1, "eos": True}, {"message": 3, "eos": True}]},
    }
    tmpl, plan = _plan(folder, row)
    assert tmpl.eos_token == "<|return|>"
    assert plan.context_turns == {"other_stop_token": 1}
    assert [r.id.rpartition("#")[2] for r in plan.rows] == ["1"]  # the final answer's row
    assert "".join(t for t, sup in plan.rows[0].segments if sup).endswith("Rain.<|return|>")
