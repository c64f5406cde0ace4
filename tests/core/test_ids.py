"""One id registry for build and generate (`core.ids.IdRegistry`)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import qwen3_tokenizer_dir

from draftset import api
from draftset.checks.verify import run_verify
from draftset.core import reasons
from draftset.core.ids import IdRegistry, duplicate_id_message
from draftset.generation.dialog import Job
from draftset.generation.inputs import iter_inputs
from draftset.output.readback import open_output
from draftset.sources.read import Source


def test_registry_keeps_the_id_then_the_source_prefix_then_the_position():
    ids = IdRegistry()
    assert ids.claim_row_id("a", "s") == "a"
    assert ids.claim_row_id("a", "s") == "s:a"
    assert ids.claim_row_id("a", "s") is None  # no position to name it by
    assert ids.claim_row_id("a", "s", None, 7) == "s:7:a"
    assert ids.claim_row_id("a", "s", None, 7) is None  # that position's name is taken
    assert ids.claim_row_id("a", "t") == "t:a"
    assert "a" in ids and "s:a" in ids and "b" not in ids and len(ids) == 4
    assert not ids.claim("t:a") and ids.claim("b")
    assert duplicate_id_message("a") == "id 'a' already used in this run"


def test_claim_key_flags_only_a_duplicate_id():
    """`claim_key`'s flag is False for a `DUPLICATE_ID` alone: a positional name and the
    made-up key of a row without an id are the row's own (Decider rejects on the flag)."""
    ids = IdRegistry()
    assert ids.claim_key("a", "s", 0) == ("a", True)
    assert ids.claim_key("a", "s", 1) == ("s:a", True)
    assert ids.claim_key("a", "s", 2) == ("s:2:a", True)
    assert ids.claim_key(None, "s", 3) == ("s:3", True)  # a line that is not JSON
    assert ids.claim_key("s:4:a", "s", 9) == ("s:4:a", True)
    assert ids.claim_key("a", "s", 4) == ("s:4#duplicate", False)  # every form is taken


def test_registry_holds_many_ids_exactly():
    ids = IdRegistry()
    assert all(ids.claim(f"row-{i}") for i in range(5000))
    assert not any(ids.claim(f"row-{i}") for i in range(5000))
    assert all(f"row-{i}" in ids for i in range(0, 5000, 7)) and "row-5000" not in ids


def _chat(rid: str, i: int) -> dict:
    return {
        "id": rid,
        "messages": [
            {"role": "user", "content": f"Question {i}?"},
            {"role": "assistant", "content": f"Answer {i}."},
        ],
    }


def test_build_and_generate_give_colliding_rows_the_same_ids(tmp_path: Path):
    # the id "a" a third time in the file was a duplicate_id reject: named by its position now
    # (`test_a_file_repeating_an_id_keeps_every_row_by_its_position`); an explicit id spelled
    # like that position's name leaves it no name: a duplicate_id, in build as in generate
    rows = [_chat("a", 0), _chat("a", 1), _chat("b", 2), _chat("s:4:a", 3), _chat("a", 4)]
    rows.append(_chat("s:a", 5))
    src = tmp_path / "s.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o"
    api.build(sources=[src], tokenizer=str(qwen3_tokenizer_dir()), out=out, workers=1)
    built = list(open_output(out).ids())
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert built == ["a", "s:a", "b", "s:4:a", "s:s:a"]
    dup = [(r["row"], r["reason"], r["message"]) for r in rejects]
    assert dup == [(4, reasons.DUPLICATE_ID, duplicate_id_message("a"))]

    items = list(iter_inputs([Source("s", src)]))
    jobs = [item.id for item in items if isinstance(item, Job)]
    errors = [(e["row"], e["reason"], e["message"]) for e in items if isinstance(e, dict)]
    assert jobs == built and errors == dup


def test_an_id_unique_in_its_file_is_never_a_duplicate(tmp_path: Path):
    """v.jsonl has id "0"; w.jsonl's row 0 has no id (made up as "w:0") and its row 1 the id
    "0": taken, then its prefixed form "w:0" taken by the made-up id, so a row whose id is
    unique in its file was rejected `duplicate_id`. It is named by its position now; build and
    generate agree. So are later repeats of an id in one file (they were duplicates)."""
    v, w = tmp_path / "v.jsonl", tmp_path / "w.jsonl"
    v.write_text(json.dumps(_chat("0", 0)) + "\n")
    no_id = {k: x for k, x in _chat("-", 1).items() if k != "id"}
    w.write_text("".join(json.dumps(r) + "\n" for r in [no_id, _chat("0", 2)]))
    out = tmp_path / "o"
    api.build(sources=[v, w], tokenizer=str(qwen3_tokenizer_dir()), out=out, workers=1)
    built = list(open_output(out).ids())
    assert built == ["0", "w:0", "w:1:0"]
    assert not (out / "rejects.jsonl").read_text().strip()
    items = list(iter_inputs([Source("v", v), Source("w", w)]))
    assert [item.id for item in items if isinstance(item, Job)] == built
    ids = IdRegistry()
    assert [ids.claim_row_id("a", "s", None, k) for k in range(3)] == ["a", "s:a", "s:2:a"]
    # a repeat within the file is named by its position whether or not its prefixed form
    # was free
    ids = IdRegistry()
    assert ids.claim("0") and ids.claim("w:0")  # another file's "0", a made-up "w:0"
    got = [ids.claim_row_id("0", "w", None, k) for k in (1, 2, 5)]
    assert got == ["w:1:0", "w:2:0", "w:5:0"]


def test_a_rejected_row_takes_its_id_in_build_as_in_generate(tmp_path: Path):
    """A row rejected while read (`unknown_format` with an id, a line that is not JSON) took
    its id, or its made-up `source:row`, in `generate` but not in `build`: a later row with the
    same id was `z` in the set and `s:z` in generate's answers (the ids that rejoin them), and
    the set had a reject line and a row both named `z`. Both take them now."""
    lines = [
        json.dumps({"foo": 1, "id": "z"}),  # unknown_format, id z
        json.dumps(_chat("z", 1)),
        "{not json",  # invalid_json at row 2: its made-up id is s:2
        json.dumps(_chat("s:2", 3)),
    ]
    src = tmp_path / "s.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o"
    api.build(sources=[src], tokenizer=str(qwen3_tokenizer_dir()), out=out, workers=1)
    built = list(open_output(out).ids())
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["row"], r["id"], r["reason"]) for r in rejects] == [
        (0, "z", "unknown_format"),
        (2, None, "invalid_json"),
    ]
    assert built == ["s:z", "s:s:2"]
    jobs = [item.id for item in iter_inputs([Source("s", src)]) if isinstance(item, Job)]
    assert jobs == built


def test_a_file_repeating_an_id_keeps_every_row_by_its_position(tmp_path: Path):
    """Arena / MT-bench answer dumps repeat `question_id` once per model, preference sets
    `prompt_id` once per response: rows of one prompt with different answers. The third row of
    a file repeating an id was rejected `duplicate_id` (kept, then prefixed, then rejected),
    most of such a file lost; a repeated id says nothing of the content (equal content is
    exact dedup's, under its own reason). It is named by its position now, `source:row:id`,
    in build, generate and verify alike."""
    ask = "Suggest a title for a blog post about learning the cello as an adult."
    titles = ("Never Too Late", "Bow and Arrow", "Four Strings, Second Chances", "Late Bloomer")
    rows = [
        {"prompt_id": "p1", "messages": [{"role": "user", "content": ask}, _answer(t)]}
        for t in titles
    ]
    src = tmp_path / "s.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o"
    tok = str(qwen3_tokenizer_dir())
    api.build(sources=[src], tokenizer=tok, out=out, workers=1, dedup="none")
    built = list(open_output(out).ids())
    assert built == ["p1", "s:p1", "s:2:p1", "s:3:p1"]
    assert not (out / "rejects.jsonl").read_text().strip()
    jobs = [item.id for item in iter_inputs([Source("s", src)]) if isinstance(item, Job)]
    assert jobs == built
    failed = [r.name for r in run_verify(out, speculators=False, record=False) if r.failed]
    assert set(failed) <= {"drafter_fitness"}  # short answers: advice only
    # equal content is still one row, by exact dedup (its reject names the row's own id)
    copy = tmp_path / "t.jsonl"
    copy.write_text(src.read_text())
    api.build(sources=[src, copy], tokenizer=tok, out=tmp_path / "e", workers=1)
    lines = (tmp_path / "e" / "rejects.jsonl").read_text().splitlines()
    assert {json.loads(x)["reason"] for x in lines} == {"duplicate"} and len(lines) == 4


def _answer(text: str) -> dict:
    return {"role": "assistant", "content": text}
