"""Answers cut off before the model ended them are never supervised (`answer_truncated`).

An unclosed ``<think>`` (a generation cut mid-thought), `generate --keep-length`'s
``metadata.truncated`` (the last answer hit max_tokens) and a preset's
``metadata.reasoning_unterminated`` (a Sky-T1 trace cut before its end marker): the template
closes such an answer with markup and an end-of-turn token the model never generated, so
supervising its render would teach the drafter an ending that never happened
(docs/semantics.md, "Cut-off answers"). Build and verify share the rule; verify's independent
re-derivation fails a set that supervises such a turn.

Special tokens' text inside a tool call's name or arguments is rejected like in an answer's
text (`special_token_in_answer`): it encodes to the control token, and the turn's supervision
would stop there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template
from rows import build_rows
from rows import supervised_text as decoded_runs

from draftset.checks.fast import failing
from draftset.checks.verify import run_verify
from draftset.config.options import BuildOptions
from draftset.core import rules
from draftset.pipeline.build import run_build
from draftset.sources.read import Source


def U(c):
    return {"role": "user", "content": c}


def A(c, **k):
    return {"role": "assistant", "content": c, **k}


CUT = "<think>\nLet me think about 1+1. One plus one is"
ROWS = [
    {"id": "think_cut", "messages": [U("1+1?"), A(CUT)]},
    {"id": "gen_cut", "messages": [U("Count."), A("One, two,")], "metadata": {"truncated": True}},
    {
        "id": "last_cut",
        "messages": [U("Say hi."), A("Hi there, friend."), U("Count."), A("One, two,")],
        "metadata": {"truncated": True},
    },
    {
        "id": "middle_cut",
        "messages": [U("1+1?"), A(CUT), U("Just answer."), A("Two, of course.")],
    },
    {
        "id": "system_shift",  # a row-level system prompt shifts the message indices by one
        "system": "Be brief.",
        "messages": [U("1+1?"), A(CUT), U("Just answer."), A("Two, of course.")],
    },
    {"id": "whole", "messages": [U("Say hi."), A("Hi there, friend.")]},
]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build(tmp: Path, name: str, rows: list, **kw) -> Path:
    src = write_jsonl(tmp / f"{name}.jsonl", rows)
    opts = BuildOptions(
        [Source("chats", src)],
        str(qwen3_tokenizer_dir()),
        tmp / name,
        chat_template_path=str(trl_template("qwen2_5")),  # history renders as generated
        workers=1,
        **kw,
    )
    return run_build(opts).out


def set_rows(folder: Path) -> dict[str, dict]:
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "rb") as f:
        rows = pa.ipc.open_stream(f).read_all().to_pylist()
    return {r["id"]: r for r in rows}


def rejects(folder: Path) -> dict[str, dict]:
    lines = (folder / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


def supervised_text(row: dict) -> list[str]:
    return decoded_runs(row, qwen3_tokenizer_dir())


def failed(results) -> set[str]:
    """The checks that fail the set (drafter fitness on these tiny answers is advice)."""
    return set(failing(results))


def test_cut_off_answers_are_context_and_verify_agrees(tmp_path):
    out = build(tmp_path, "all", ROWS)
    rows, rej = set_rows(out), rejects(out)
    # a conversation whose only answer was cut off has nothing to supervise
    for rid in ("think_cut", "gen_cut"):
        assert rej[rid]["reason"] == "no_supervised_turn"
        assert "answer_truncated=1" in rej[rid]["message"]
    # the earlier, whole answers still train; the cut one is context, its end never supervised
    assert supervised_text(rows["last_cut"]) == ["Hi there, friend.<|im_end|>"]
    assert supervised_text(rows["middle_cut"]) == ["Two, of course.<|im_end|>"]
    assert supervised_text(rows["system_shift"]) == ["Two, of course.<|im_end|>"]
    assert supervised_text(rows["whole"]) == ["Hi there, friend.<|im_end|>"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert '"answer_truncated": 5' in json.dumps(manifest)  # 5 cut answers, one per row
    results = run_verify(out, speculators=False)
    assert not failed(results), [r.summary for r in results if r.failed]


def test_each_mode_writes_no_row_for_a_cut_off_answer(tmp_path):
    out = build(tmp_path, "each", ROWS, turns="each")
    assert sorted(set_rows(out)) == ["last_cut#0", "middle_cut#1", "system_shift#1", "whole#0"]
    assert not failed(run_verify(out, speculators=False))


def test_verify_fails_a_set_that_supervises_a_cut_off_answer(tmp_path, monkeypatch):
    """A set built without the rule (as draftset built before it) trains the invented end:
    verify's own derivation, not build's, finds it."""
    with monkeypatch.context() as m:
        m.setattr(rules, "cut_off_answers", lambda messages, meta: frozenset())
        out = build(tmp_path, "old", ROWS[:2])
    # what the old build trained: the cut thought, then an end-of-turn never generated
    assert supervised_text(set_rows(out)["think_cut"]) == [CUT + "<|im_end|>"]
    results = run_verify(out, speculators=False)
    assert "mask_fidelity" in failed(results)


SPECIAL = "<|im_start|>user\nhi<|im_end|>"
TOOLS = [{"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}]


def call(arguments, name="echo"):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    ("tool_call", "field"),
    [
        (call({"text": SPECIAL}), "tool_calls[0].function.arguments"),
        (call(json.dumps({"text": SPECIAL})), "tool_calls[0].function.arguments"),
        (call({"nested": [{"deep": "ok <|im_end|>"}]}), "tool_calls[0].function.arguments"),
        (call({"<|im_end|>": 1}), "tool_calls[0].function.arguments"),
    ],
    ids=["object", "json-string", "nested", "key"],
)
def test_special_token_text_in_a_tool_call_is_rejected(tmp_path, tool_call, field):
    row = {
        "id": "leak",
        "messages": [
            U("Echo this."),
            A("", tool_calls=[tool_call]),
            {"role": "tool", "content": "done"},
            A("Done."),
        ],
        "tools": TOOLS,
    }
    out = build(tmp_path, "leak", [row, {"id": "fine", "messages": [U("a"), A("b")]}])
    leak = rejects(out)["leak"]
    assert leak["reason"] == "special_token_in_answer"
    assert f"assistant message 1's {field} holds the text of special token" in leak["message"]
    assert sorted(set_rows(out)) == ["fine"]
    assert not failed(run_verify(out, speculators=False))  # verify judges the reject justified


def test_an_all_reasoning_answer_the_template_drops_is_rejected_in_build_and_verify(tmp_path):
    """Llama's templates drop reasoning: an answer of reasoning alone rendered as `<|eot_id|>`
    and was written with that one token supervised (verify then failed it as a placeholder)."""
    rows = [
        {"id": "silent", "messages": [U("Think silently."), A("", reasoning_content="Hmm.")]},
        {"id": "fine", "messages": [U("Say hi."), A("Hi.", reasoning_content="Greet.")]},
    ]
    out = build_rows(tmp_path / "llama", rows, llama32_tokenizer_dir(), trl_template("llama3_2"))
    assert rejects(out)["silent"]["reason"] == "template_drops_content"
    assert rejects(out)["silent"]["message"] == (  # what is missing (session 29)
        "the template's render of assistant message 1 does not contain its reasoning"
        " (the answer is all reasoning)"
    )
    assert sorted(set_rows(out)) == ["fine"]
    assert not failed(run_verify(out, speculators=False))
