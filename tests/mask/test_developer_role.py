"""`developer` messages as vLLM gives them to the template.

vLLM 0.33 (`renderers/hf.py`): a template that names the role (`'developer'` in its text:
Gemma-4, Cohere-2, trl's gpt-oss) gets the message as `developer`; any other gets it as `system`,
and then every system message merged into one at the start, `\\n\\n` between them, when one is
not first or there are several. draftset normalized `developer` to `system` in place: right for
a lone first developer message under Qwen3, wrong for the rest (a Gemma-4 row rendered a system
turn vLLM renders as developer; a row with a system and a developer message rendered two system
blocks where vLLM renders one). A row the server would merge is rejected (its turns would sit
elsewhere); tests/checks/test_render_server.py holds both kinds against vLLM itself.
"""

from __future__ import annotations

from pathlib import Path

from conftest import qwen3_tokenizer_dir, trl_template
from rows import build_rows, rejects_by_id

from draftset.checks.fast import failing
from draftset.checks.verify import run_verify
from draftset.core import rules
from draftset.core.records import RawRow
from draftset.mask.reads import as_template_reads
from draftset.sources.normalize import normalize


def U(c):
    return {"role": "user", "content": c}


def A(c):
    return {"role": "assistant", "content": c}


def D(c):
    return {"role": "developer", "content": c}


def S(c):
    return {"role": "system", "content": c}


def norm(row):
    return normalize(RawRow("s", 0, row))


def test_the_normalizer_remembers_which_messages_were_developer():
    out = norm({"messages": [D("Be terse."), U("q"), A("a")]})
    assert out.messages[0] == S("Be terse.") and out.meta["developer"] == {0: True}
    shifted = norm({"system": "Top.", "messages": [U("q"), D("Mid."), A("a")]})
    assert shifted.meta["developer"] == {2: True}  # after the inserted system message


def test_a_template_that_names_the_role_gets_it_back():
    out = norm({"messages": [D("Be terse."), U("q"), A("a")]})
    plain = as_template_reads(out.messages, out.meta)
    named = as_template_reads(out.messages, out.meta, developer_role=True)
    assert plain[0]["role"] == "system" and named[0]["role"] == "developer"
    gemma4 = trl_template("gemma4").read_text()
    assert rules.developer_role(gemma4, "vllm", False)
    assert not rules.developer_role(trl_template("qwen3").read_text(), "vllm", False)
    assert rules.developer_role(trl_template("qwen3").read_text(), "transformers", False)


def test_rows_the_server_would_merge_are_rejected_and_verify_agrees(tmp_path: Path):
    rows = [
        {"id": "first", "messages": [D("Be terse."), U("Name a planet."), A("Mars.")]},
        {"id": "both", "messages": [S("Tutor."), D("One word."), U("A metal?"), A("Iron.")]},
        {"id": "middle", "messages": [U("Hi."), A("Hello."), D("Now terse."), U("A?"), A("B.")]},
        {"id": "system_twice", "messages": [S("One."), U("q"), S("Two."), U("r"), A("s")]},
    ]
    out = build_rows(tmp_path / "d", rows, qwen3_tokenizer_dir(), trl_template("qwen3"))
    rejected = rejects_by_id(out)
    assert sorted(rejected) == ["both", "middle"]
    assert {r["reason"] for r in rejected.values()} == {"unsupported_content"}
    assert "merges this row's developer and system messages" in rejected["both"]["message"]
    # a lone first developer message is the system message vLLM makes of it; two system
    # messages without a developer one are left where they are (vLLM merges only then)
    assert not failing(run_verify(out, speculators=False))


def test_sglang_gives_the_developer_role_as_sent(tmp_path: Path):
    """sglang 0.5.23's Jinja path (`serving_chat._apply_jinja_template`) hands a `developer`
    message to the template as `developer`, whatever the template names, and merges nothing
    (read from its source, not run here): under `sglang` Qwen3 gets the role back (its template
    renders no developer message, so neither does the served prompt) and the rows vLLM would
    merge are built, not rejected."""
    assert rules.developer_role(trl_template("qwen3").read_text(), "sglang", False)
    rows = [
        {"id": "both", "messages": [S("Tutor."), D("One word."), U("A metal?"), A("Iron.")]},
        {"id": "middle", "messages": [U("Hi."), A("Hello."), D("Now terse."), U("A?"), A("B.")]},
    ]
    out = build_rows(
        tmp_path / "d",
        rows,
        qwen3_tokenizer_dir(),
        trl_template("qwen3"),
        serving_engine="sglang",
    )
    assert rejects_by_id(out) == {}
    assert not failing(run_verify(out, speculators=False))
