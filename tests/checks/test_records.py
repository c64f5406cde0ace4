"""`draftset verify` and the manifest's records (src/draftset/checks/records.py): every count
and record verify can re-derive from the sources, the tokenizer and its own pass over the rows
is compared (an outside tamper probe, session 26, edited each of them and verify passed); what
it cannot is listed as unproven in docs/verify.md. The same set serves the records checked
elsewhere (the tokenizer's in mask.py, state.json's fingerprint in fast.py).

One set is built per module (Qwen3, thinking on, near dedup, a benchmark, a folder source
with a file it skips); each test edits a copy, reseals the file hashes as a careful forger
would, and names the check that must fail.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template
from tokenizers import Tokenizer

from draftset.checks.fast import failing
from draftset.checks.verify import run_verify
from draftset.cli import main as cli_main
from draftset.config.options import BuildOptions
from draftset.pipeline.build import run_build
from draftset.sources.read import Source

ANSWER = "Glaciers move by internal deformation of the ice and by sliding over meltwater."
BENCH = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips"
    " in May. How many clips did Natalia sell altogether in April and May?"
)
# the generation the Qwen3 template (thinking on) writes for an answer without reasoning
SERVED = "<think>\n\n</think>\n\nGreen is a secondary colour.<|im_end|>"


def chat(rid: str, question: str, answer: str, **extra: object) -> dict:
    return {
        "id": rid,
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ],
        **extra,
    }


def server_ids(tok: Tokenizer, text: str, *more: int) -> dict:
    """A row's `metadata.token_ids` as `generate` records the server's ids for turn 1
    (``more``: ids after the text's)."""
    ids = [*tok.encode(text, add_special_tokens=False).ids, *more]
    return {"metadata": {"token_ids": {"turns": [{"message": 1, "completion": ids}]}}}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("records")
    tok = Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))
    data = root / "data"
    data.mkdir()
    rows = [
        {
            "id": "trail",
            "messages": [
                {"role": "user", "content": "Why do rivers form deltas?"},
                {"role": "assistant", "content": "Rivers drop their sediment where they slow."},
                {"role": "user", "content": "Thanks!"},
            ],
        },
        chat("two", "How do glaciers move across a valley floor?", ANSWER),
        chat("near", "How do glaciers move across a valley floor?", ANSWER + "!"),
        chat("pad", "Say hello please.", "OK."),
        {"id": "bad", "messages": [{"role": "pirate", "content": "Arr"}]},
        chat("cont", BENCH, "She sold 72 clips."),
        # ids outside the vocabulary spell nothing: a mismatch, encoded from the text (ids
        # that spell other text make the turn context: tests/checks/test_verify.py)
        chat("srv", "Name a primary colour.", "Blue.", **server_ids(tok, "Red is one.", 10**9)),
        chat("used", "Name a secondary colour.", "Green is a secondary colour.")
        | server_ids(tok, SERVED),
        {"id": "p1", "prompt": "Write a haiku about rain."},
        {"id": "p2", "prompt": "Write a haiku about snow."},
    ]
    (data / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "README.md").write_text("about this data")
    more = root / "more.jsonl"  # a second source: a pair may name it
    more.write_text(json.dumps(chat("m1", "What is a fjord?", "A valley the sea filled.")) + "\n")
    bench = root / "bench.jsonl"
    bench.write_text(json.dumps({"question": BENCH}) + "\n")
    opts = BuildOptions(
        [Source("chats", data), Source("more", more)],
        str(qwen3_tokenizer_dir()),
        root / "set",
        workers=1,
    )
    opts.dedup = "near"
    opts.decontaminate = [str(bench)]
    opts.template_kwargs = {"enable_thinking": True}
    return run_build(opts).out


def copy_set(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "set"
    shutil.copytree(src, dst)
    return dst


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def save_manifest(folder: Path, m: dict) -> None:
    """The manifest with every listed file's sha256 recomputed (a forger's reseal)."""
    m["files"] = {name: sha256(folder / name) for name in m["files"]}
    (folder / "manifest.json").write_text(json.dumps(m, indent=2, ensure_ascii=False))


def edit_lines(folder: Path, name: str, edit) -> None:
    path = folder / name
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(x) + "\n" for x in edit(lines)))
    save_manifest(folder, manifest(folder))


def verify(folder: Path):
    return run_verify(folder, speculators=False, record=False)


def failures(results) -> dict[str, str]:
    """check name -> its result as JSON text (summary, examples and messages); advice (DFlash
    fitness of these few short rows) fails nothing."""
    return {
        r.name: json.dumps(r.to_json()) for r in results if r.failed and r.name in failing(results)
    }


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_set_has_the_counts_the_tests_edit_and_passes(built):
    c = manifest(built)["counts"]["per_source"]["chats"]
    assert c["trailing_turns_trimmed"] == 1
    assert c["placeholder_rows"] == 1
    assert c["server_ids_used"] == 1 and c["server_ids_mismatch"] == 1
    assert c["empty_think_rows"] >= 1 and c["supervised_turns"] >= 3
    assert failures(verify(built)) == {}


# --- item 1: per-source counts -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("supervised_turns", 99, "mask_fidelity"),
        ("trailing_turns_trimmed", 5, "mask_fidelity"),
        ("placeholder_rows", 0, "mask_fidelity"),
        ("empty_think_rows", 0, "mask_fidelity"),
        ("reasoning_not_rendered", 4, "mask_fidelity"),
        ("server_ids_used", 7, "mask_fidelity"),
        ("server_ids_mismatch", 2, "mask_fidelity"),
        ("unread_fields", {"code": 6}, "row_identity"),
        ("available", 12, "row_identity"),
    ],
)
def test_an_edited_per_source_count_fails_naming_source_key_and_both_values(
    built, tmp_path, key, value, check
):
    """Only counts.total was compared (with the sources' sum): a per-source count the build
    summary and `report` show could say anything. verify re-derives each during its pass."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    c = m["counts"]["per_source"]["chats"]
    recorded = c[key]
    c[key] = value
    if key == "available":
        c["sampled_out"] = value - c["read"]
    for name in (key, "sampled_out"):  # the total stays the sources' sum
        m["counts"]["total"][name] = sum_of(m["counts"]["per_source"], name)
    save_manifest(folder, m)
    got = failures(verify(folder))
    assert set(got) == {check}, got
    assert f"chats: {key}: manifest {value} != re-derived {recorded}" in got[check], got
    if check == "mask_fidelity":  # the row step's: where to look, the first row it counts
        assert FIRST_COUNTED[key] in got[check], got


FIRST_COUNTED = {
    "supervised_turns": "; the first row verify counts: 'trail' (chats row 0)",
    "trailing_turns_trimmed": "; the first row verify counts: 'trail' (chats row 0)",
    "placeholder_rows": "; the first row verify counts: 'pad' (chats row 3)",
    "empty_think_rows": "; the first row verify counts: 'trail' (chats row 0)",
    "reasoning_not_rendered": "; verify counts it in no row",
    "server_ids_used": "; the first row verify counts: 'used' (chats row 7)",
    "server_ids_mismatch": "; the first row verify counts: 'srv' (chats row 6)",
}
"""A per-source count names no row of build's (the manifest holds sums): the first input row
verify counted in it is where a reader starts."""


def sum_of(per_source: dict, key: str) -> int | dict:
    values = [c[key] for c in per_source.values()]
    if isinstance(values[0], dict):
        return {k: sum(v.get(k, 0) for v in values) for k in sorted(set().union(*values))}
    return sum(values)


# --- item 2: a reject line's id and message ------------------------------------------------------
@pytest.mark.parametrize(
    ("rid", "field", "value"),
    [
        ("bad", "id", "bad-999"),
        ("bad", "message", "unknown role 'captain' in turn 7"),
        ("pad", "id", "pad-2"),
    ],
)
def test_an_edited_reject_line_id_or_message_fails_row_identity(built, tmp_path, rid, field, value):
    """Reject lines were matched on source, row and reason only: `show --id bad` then said
    no such row. The id is compared, and the message of a reading or selection reject (verify
    re-runs those stages and gets the same text)."""
    folder = copy_set(built, tmp_path)

    def edit(lines: list[dict]) -> list[dict]:
        for x in lines:
            if x["id"] == rid:
                x[field] = value
        return lines

    edit_lines(folder, "rejects.jsonl", edit)
    got = failures(verify(folder))
    assert set(got) == {"row_identity"}, got
    assert rid in got["row_identity"] and value in got["row_identity"]


# --- item 4: what a dedup or decontamination removal matched -------------------------------------
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("of id 'two' (source chats, row 1)", "of id 'srv' (source chats, row 6)"),
        ("item bench.jsonl:0", "item bench.jsonl:77"),
    ],
)
def test_a_removal_naming_another_match_fails_row_identity(built, tmp_path, old, new):
    """The near_duplicate line names the kept row it matched, the contaminated line the
    benchmark item: both are what verify's re-run of selection says."""
    folder = copy_set(built, tmp_path)
    path = folder / "rejects.jsonl"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    save_manifest(folder, manifest(folder))
    got = failures(verify(folder))
    assert set(got) == {"row_identity"}, got
    assert new in got["row_identity"]


@pytest.mark.parametrize("edit", ["kept_source", "checked", "top_items", "index_ngrams"])
def test_an_edited_mixture_record_fails_row_identity(built, tmp_path, edit):
    """`mixture` is the selection's own report: verify re-runs the selection and compares it
    whole (pairs, checked counts, top benchmark items, index size)."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    near = next(d for d in m["mixture"]["dedup"] if d["kind"] == "near")
    dec = m["mixture"]["decontamination"]
    if edit == "kept_source":
        near["pairs"][0]["kept_source"] = "more"  # a source of the set
    elif edit == "checked":
        near["checked"]["chats"] += 1
    elif edit == "top_items":
        dec["top_items"][0]["id"] = "bench.jsonl:77"
    else:
        dec["index_ngrams"] += 1
    save_manifest(folder, m)
    got = failures(verify(folder))
    assert "row_identity" in got, got
    assert "mixture" in got["row_identity"]


@pytest.mark.parametrize("key", ["mixture", "selection.seed", "selection.max_samples"])
def test_a_removed_selection_record_fails_row_identity(built, tmp_path, key):
    """Build writes `mixture` (what the report shows of dedup, decontamination and the mix)
    and `selection`'s copies of the seed and --max-samples beside every selection record: a
    manifest without one is not one build wrote. Before, deleting the whole `mixture` passed
    (deleting one of its parts failed), and so did deleting a copy the options are compared by."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    if key == "mixture":
        del m["mixture"]
    else:
        del m["selection"][key.split(".")[1]]
    save_manifest(folder, m)
    got = failures(verify(folder))
    assert set(got) == {"row_identity"}, got
    assert key in got["row_identity"]


@pytest.mark.parametrize("how", ["null", "deleted"])
def test_a_benchmark_file_without_its_recorded_sha256_fails_sources(built, tmp_path, how):
    """Build records every --decontaminate file's sha256: without it, the file could be edited
    after the build (an item that matched nothing changed) and `sources` said it unchanged."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    bench = m["selection"]["decontaminate"][0]
    if how == "null":
        bench["sha256"] = None
    else:
        del bench["sha256"]
    save_manifest(folder, m)
    got = failures(verify(folder))
    assert set(got) == {"sources"}, got
    assert "no sha256" in got["sources"]


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (("inputs", 0, "count"), -1, "inputs[0].count is -1: must be >= 0"),
        (("inputs", 0, "weight"), -0.5, "inputs[0].weight is -0.5: must be >= 0"),
        (("inputs", 0, "weight"), float("inf"), "inputs[0].weight is inf: must be a finite"),
        (("selection", "dedup"), "fuzzy", "selection.dedup is 'fuzzy': must be exact, near or"),
        (("selection", "near_dup_threshold"), 2, "selection.near_dup_threshold is 2: must be <= 1"),
        (("selection", "near_dup_threshold"), 0, "selection.near_dup_threshold is 0: must be > 0"),
        (("selection", "decontaminate_ngram"), 0, "decontaminate_ngram is 0: must be >= 1"),
    ],
)
def test_a_selection_value_build_refuses_is_one_line_exit_2(
    built, tmp_path, capsys, path, value, said
):
    """verify re-runs the selection with the manifest's settings: one build refuses (a
    negative count, an unknown dedup mode, a threshold outside (0, 1], an n-gram size of 0)
    ended in a traceback (ValueError) before, a negative weight in row_identity failures of
    every row; now the manifest is malformed, exit 2. The reason is the option schema's own
    (`config.schema`, as `draftset build` words it: ``must be <= 1``), not a copy of its
    bounds that could drift from it."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    node = m
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    save_manifest(folder, m)
    assert cli_main(["verify", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "manifest.json is malformed" in err[0] and said in err[0], err


def test_a_mix_build_refuses_is_a_malformed_manifest(built, tmp_path, capsys):
    """A `selection.mix` whose shares do not sum to 1 stopped verify with `source shares must
    sum to 1, got 1.5` alone, as if its arguments were wrong: it is the manifest's."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    m["selection"]["mix"] = {"sources": {"chats": 0.5, "more": 1.0}}
    save_manifest(folder, m)
    assert cli_main(["verify", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "manifest.json is malformed: selection.mix: source shares must sum to 1" in err[0]


# --- item 3: other manifest records --------------------------------------------------------------
def test_a_fake_skipped_entry_fails_sources(built, tmp_path):
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    m["inputs"][0]["skipped"].append({"path": "secret.jsonl", "why": "hidden"})
    save_manifest(folder, m)
    got = failures(verify(folder))
    assert set(got) == {"sources"}, got
    assert "secret.jsonl" in got["sources"]


@pytest.mark.parametrize("key", ["tokenizer_size", "vocabulary_sample_sha256"])
def test_an_edited_tokenizer_record_fails_tokenizer(built, tmp_path, key):
    """`show` and `report` accept a --tokenizer by these two: an edited one made them refuse
    the right tokenizer while verify passed."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    m["tokenizer"][key] = 1000 if key == "tokenizer_size" else "0" * 64
    save_manifest(folder, m)
    got = failures(verify(folder))
    assert set(got) == {"tokenizer"}, got
    assert key in got["tokenizer"]


# --- item 5: prompts.jsonl order -----------------------------------------------------------------
def test_reordered_prompt_lines_fail_row_identity(built, tmp_path):
    """prompts.jsonl is written in input order, like the rows and the reject lines."""
    folder = copy_set(built, tmp_path)
    edit_lines(folder, "prompts.jsonl", lambda lines: lines[::-1])
    got = failures(verify(folder))
    assert set(got) == {"row_identity"}, got
    assert "prompts.jsonl" in got["row_identity"]


def test_an_edited_state_fingerprint_fails_file_hashes(built, tmp_path):
    """state.json's `_fingerprint` is derived from the shards' sha256 (datasets keys its
    caches by it); an edited one passed."""
    folder = copy_set(built, tmp_path)
    state = json.loads((folder / "state.json").read_text())
    state["_fingerprint"] = "deadbeef"
    (folder / "state.json").write_text(json.dumps(state, indent=2))
    save_manifest(folder, manifest(folder))
    got = failures(verify(folder))
    assert set(got) == {"file_hashes"}, got
    assert "deadbeef" in got["file_hashes"]


# --- item 6: template_too_large is deterministic -------------------------------------------------
def test_a_good_row_rejected_template_too_large_fails_mask_fidelity(built, tmp_path):
    """A render's size cap depends on the row alone (not the machine, unlike a timeout): a
    written row swapped for a `template_too_large` line, every count edited to match, passed.
    verify re-renders such a row under the same cap and fails one that stays within it."""
    folder = copy_set(built, tmp_path)
    for name in manifest(folder)["files"]:  # the shard that holds row "two"
        if name.endswith(".arrow"):
            shard = folder / name
            with pa.OSFile(str(shard), "rb") as f:
                table = pa.ipc.open_stream(f).read_all()
            rows = table.to_pylist()
            if any(r["id"] == "two" for r in rows):
                break
    (gone,) = [r for r in rows if r["id"] == "two"]
    kept = pa.Table.from_pylist([r for r in rows if r["id"] != "two"], schema=table.schema)
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_stream(sink, kept.schema) as w:
        w.write_table(kept)
    freq = np.load(folder / "token_freq.npy")
    mask = np.asarray(gone["loss_mask"], dtype=bool)
    np.subtract.at(freq, np.asarray(gone["input_ids"])[mask], 1)
    np.save(folder / "token_freq.npy", freq)
    import torch

    torch.save({int(i): int(freq[i]) for i in np.nonzero(freq)[0]}, folder / "token_freq.pt")
    state = json.loads((folder / "state.json").read_text())
    digests = [sha256(folder / f["filename"]) for f in state["_data_files"]]
    state["_fingerprint"] = hashlib.sha256("".join(digests).encode()).hexdigest()[:16]
    (folder / "state.json").write_text(json.dumps(state, indent=2))
    line = {"source": "chats", "row": 1, "id": "two", "reason": "template_too_large"}
    line["message"] = "the template wrote more than 16777472 characters for this row"
    path = folder / "rejects.jsonl"  # in input order, where build writes it
    lines = sorted([*map(json.loads, path.read_text().splitlines()), line], key=lambda x: x["row"])
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    m = manifest(folder)
    for c in (m["counts"]["per_source"]["chats"], m["counts"]["total"]):
        c["written"] -= 1
        c["rows_out"] -= 1
        c["rejected"] += 1
        for key in ("rejected_by_reason", "row_rejects_by_reason"):
            c[key]["template_too_large"] = 1
        c["tokens"] -= len(gone["input_ids"])
        c["supervised_tokens"] -= int(mask.sum())
        c["supervised_turns"] -= 1
        c["empty_think_rows"] -= 1
    m["totals"]["rows"] -= 1
    m["totals"]["tokens"] -= len(gone["input_ids"])
    m["totals"]["supervised_tokens"] -= int(mask.sum())
    save_manifest(folder, m)
    results = verify(folder)
    got = failures(results)
    assert set(got) == {"mask_fidelity"}, got
    assert next(r for r in results if r.name == "mask_fidelity").examples == ["two"]


# --- session 27: what verify listed as unproven ---------------------------------------------------
@pytest.fixture(scope="module")
def tagged(tmp_path_factory) -> Path:
    """Llama-3.2 under TRL's training template, whose {% generation %} tags mark exactly the
    generations: every row counts as agreeing."""
    root = tmp_path_factory.mktemp("tagged")
    rows = [
        chat("t1", "How do glaciers move?", ANSWER),
        {
            "id": "t2",
            "messages": [
                {"role": "user", "content": "Name a primary colour."},
                {"role": "assistant", "content": "Blue is one."},
                {"role": "user", "content": "And another?"},
                {"role": "assistant", "content": "Red is another."},
            ],
        },
    ]
    data = root / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    opts = BuildOptions([Source("chats", data)], str(llama32_tokenizer_dir()), root / "set")
    opts.workers = 1
    opts.chat_template_path = str(trl_template("llama3_training"))
    return run_build(opts).out


@pytest.mark.parametrize(("agree", "disagree"), [(1, 1), (2, 1)])
def test_an_edited_generation_tags_count_fails_mask_fidelity(tagged, tmp_path, agree, disagree):
    """`generation_tags_agree` / `_disagree` were never compared (verify did not render the
    tags): a row moved from one to the other, the totals kept, passed. verify now renders the
    template's tags itself and compares them with its own spans."""
    c = manifest(tagged)["counts"]["per_source"]["chats"]
    assert (c["generation_tags_agree"], c["generation_tags_disagree"]) == (2, 0)
    assert failures(verify(tagged)) == {}
    folder = copy_set(tagged, tmp_path)
    m = manifest(folder)
    for c in (m["counts"]["per_source"]["chats"], m["counts"]["total"]):
        c["generation_tags_agree"], c["generation_tags_disagree"] = agree, disagree
    save_manifest(folder, m)
    got = failures(verify(folder))
    assert set(got) == {"mask_fidelity"}, got
    said = f"chats: generation_tags_agree: manifest {agree} != re-derived 2"
    assert (said in got["mask_fidelity"]) == (agree != 2)
    said = f"chats: generation_tags_disagree: manifest {disagree} != re-derived 0"
    assert said in got["mask_fidelity"]


def test_a_set_whose_tags_disagree_passes(tmp_path):
    """Qwen2.5's training tags also cover the newline before an answer and after <|im_end|>:
    build counts every row as disagreeing, and verify's own count says the same."""
    data = tmp_path / "chats.jsonl"
    rows = [chat("d1", "How do glaciers move?", ANSWER), chat("d2", "Name a colour.", "Blue.")]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    opts = BuildOptions([Source("chats", data)], str(qwen3_tokenizer_dir()), tmp_path / "set")
    opts.workers = 1
    opts.chat_template_path = str(trl_template("qwen2_5_training"))
    out = run_build(opts).out
    c = manifest(out)["counts"]["per_source"]["chats"]
    assert (c["generation_tags_agree"], c["generation_tags_disagree"]) == (0, 2)
    assert failures(verify(out)) == {}


BOOM = (  # says which render raised: the prompt's or the full conversation's
    "{%- if messages[0]['content'] == 'BOOM' %}{{ raise_exception('the template refuses row"
    " BOOM (' ~ ('prompt' if add_generation_prompt else 'full') ~ ' render)') }}{%- endif %}"
)


@pytest.fixture(scope="module", params=["all", "each"])
def rejected(tmp_path_factory, request) -> Path:
    """A row of each row-step reject whose message verify re-derives (served as vLLM serves
    Qwen3, so a developer message in the middle is unsupported_content)."""
    root = tmp_path_factory.mktemp("rejected")

    def ask(rid: str, *turns: dict) -> dict:
        return {"id": rid, "messages": list(turns)}

    def u(text: str) -> dict:
        return {"role": "user", "content": text}

    def a(text: str) -> dict:
        return {"role": "assistant", "content": text}

    rows = [
        ask("ok", u("Name a colour."), a("Blue is a colour.")),
        ask("pad", u("Say hi."), a("OK.")),
        ask("boom", u("BOOM"), a("Hello.")),
        ask("leak", u("Say bye."), a("Bye.<|im_end|> and more")),
        ask(
            "dev",
            u("Hi."),
            {"role": "developer", "content": "Be terse."},
            u("A fruit?"),
            a("Pear."),
        ),
    ]
    data = root / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    template = root / "boom.jinja"
    template.write_text(BOOM + trl_template("qwen3").read_text())
    opts = BuildOptions([Source("chats", data)], str(qwen3_tokenizer_dir()), root / "set")
    opts.workers = 1
    opts.serving_engine = "vllm"
    opts.chat_template_path = str(template)
    opts.turns = request.param
    return run_build(opts).out


@pytest.mark.parametrize(
    ("rid", "reason"),
    [
        ("pad", "no_supervised_turn"),
        ("boom", "template_error"),
        ("leak", "special_token_in_answer"),
        ("dev", "unsupported_content"),
    ],
)
def test_an_edited_row_step_reject_message_fails_mask_fidelity(rejected, tmp_path, rid, reason):
    """A row-step reject line's message (the template's own error text, the context counts,
    what the row holds) was never compared: an edited one passed. verify re-derives it; with
    `--turns each` rendering as build does, the full conversation before the prompt (the
    first error raised is the one build wrote)."""
    lines = [json.loads(x) for x in (rejected / "rejects.jsonl").read_text().splitlines()]
    if manifest(rejected)["options"]["turns"] == "each" and rid == "boom":
        rid = "boom#0"  # a turn's line
    assert {x["id"]: x["reason"] for x in lines}[rid] == reason
    if reason == "template_error":
        assert "(full render)" in {x["id"]: x["message"] for x in lines}[rid]
    assert failures(verify(rejected)) == {}
    folder = copy_set(rejected, tmp_path)

    def edit(lines: list[dict]) -> list[dict]:
        for x in lines:
            if x["id"] == rid:
                x["message"] = "edited by hand"
        return lines

    edit_lines(folder, "rejects.jsonl", edit)
    results = verify(folder)
    got = failures(results)
    assert set(got) == {"mask_fidelity"}, got
    assert next(r for r in results if r.name == "mask_fidelity").examples == [rid]
    assert f"{rid}: the {reason} line says 'edited by hand'; re-derived" in got["mask_fidelity"]


@pytest.mark.parametrize("value", [0, 99])
def test_a_sampled_verify_bounds_the_row_step_counts(built, tmp_path, value):
    """On a sample (`--sample`, every set above 20,000 rows) the counts that need every row
    were not compared at all: any value passed. A sample bounds them: at least what the
    conversations it re-derived count, at most one more per answer of the others."""
    assert failures(run_verify(built, sample=2, speculators=False, record=False)) == {}
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    m["counts"]["per_source"]["chats"]["supervised_turns"] = value
    m["counts"]["total"]["supervised_turns"] = sum_of(m["counts"]["per_source"], "supervised_turns")
    save_manifest(folder, m)
    results = run_verify(folder, sample=2, speculators=False, record=False)
    got = failures(results)
    assert set(got) == {"mask_fidelity"}, got
    assert f"chats: supervised_turns: manifest {value} is outside " in got["mask_fidelity"]


def test_a_differing_context_count_names_the_first_row_verify_counts(built, tmp_path):
    """A context-only turn count that differs named the source and both dicts: the first
    input row verify counts under the first differing reason is where to look."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    for c in (m["counts"]["per_source"]["chats"], m["counts"]["total"]):
        c["context_turns_by_reason"]["placeholder_answer"] += 1
    save_manifest(folder, m)
    got = failures(verify(folder))
    assert set(got) == {"mask_fidelity"}, got
    said = "; the first row verify counts a placeholder_answer turn in: 'pad' (chats row 3)"
    assert said in got["mask_fidelity"], got


# --- the file of a reject in a source folder of several files ------------------------------------
def bad_rows(tag: str) -> list[str]:
    """JSONL lines: a good row, each kind of reject (reading, normalizing, the row step, a
    selection's duplicate of the first row of ``a.jsonl``)."""
    return [
        json.dumps(chat(f"{tag}-ok", f"Where is {tag}?", f"{tag} is here, on the map.")),
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"id": f"{tag}-role", "messages": [{"role": "pirate", "content": "Arr"}]}),
        json.dumps(chat(f"{tag}-pad", f"Say hello to {tag}.", "OK.")),
        json.dumps(chat(f"{tag}-dup", "Where is a?", "a is here, on the map.")),
    ]


@pytest.fixture(scope="module", params=["jsonl", "gz"])
def folder_set(request, tmp_path_factory) -> Path:
    """A folder source of two files (``sub/b`` compressed: the driver reads the rows, else the
    workers do) beside a one-file source, both with rows of every kind of reject."""
    import gzip

    root = tmp_path_factory.mktemp("files")
    multi = root / "multi"
    (multi / "sub").mkdir(parents=True)
    (multi / "a.jsonl").write_text("\n".join(bad_rows("a")) + "\n")
    text = "\n".join(bad_rows("b")) + "\n"
    if request.param == "gz":
        (multi / "sub" / "b.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (multi / "sub" / "b.jsonl").write_text(text)
    one = root / "one.jsonl"
    one.write_text("\n".join(bad_rows("c")) + "\n")
    opts = BuildOptions(
        [Source("multi", multi), Source("one", one)], str(qwen3_tokenizer_dir()), root / "set"
    )
    opts.workers = 1
    return run_build(opts).out


def test_a_reject_of_a_source_of_several_files_names_its_file(folder_set):
    """Rejects of a source folder named the source and its row number counted across all its
    files: which file held the bad line was left to counting. Now each names its file,
    relative to the folder; a one-file source's lines stay as they were (no ``file`` key, in
    the same order), and verify re-derives both."""
    lines = [json.loads(x) for x in (folder_set / "rejects.jsonl").read_text().splitlines()]
    multi = [x for x in lines if x["source"] == "multi"]
    b = "sub/b.jsonl.gz" if (folder_set.parent / "multi/sub/b.jsonl.gz").exists() else "sub/b.jsonl"
    assert [(x["file"], x["row"], x["reason"]) for x in multi] == [
        ("a.jsonl", 1, "invalid_json"),
        ("a.jsonl", 2, "not_an_object"),
        ("a.jsonl", 3, "unknown_role"),
        ("a.jsonl", 4, "no_supervised_turn"),
        ("a.jsonl", 5, "duplicate"),
        (b, 7, "invalid_json"),
        (b, 8, "not_an_object"),
        (b, 9, "unknown_role"),
        (b, 10, "no_supervised_turn"),
        (b, 11, "duplicate"),
    ]
    assert all(list(x) == ["source", "row", "file", "id", "reason", "message"] for x in multi)
    one = [x for x in lines if x["source"] == "one"]
    assert len(one) == 5
    assert all(list(x) == ["source", "row", "id", "reason", "message"] for x in one)
    assert failures(verify(folder_set)) == {}


@pytest.mark.parametrize(
    "edit", ["another", "dropped", "added"], ids=["another file", "no file", "a file added"]
)
def test_an_edited_reject_file_fails_row_identity(folder_set, tmp_path, edit):
    folder = copy_set(folder_set, tmp_path)

    def change(lines: list[dict]) -> list[dict]:
        for x in lines:
            if edit == "another" and x.get("file") == "a.jsonl" and x["row"] == 3:
                x["file"] = "sub/b.jsonl"
            elif edit == "dropped" and x.get("file") == "a.jsonl" and x["row"] == 3:
                del x["file"]
            elif edit == "added" and x["source"] == "one" and x["row"] == 3:
                x = {"source": "one", "row": 3, "file": "one.jsonl", **x}
            yield x

    edit_lines(folder, "rejects.jsonl", lambda lines: list(change(lines)))
    got = failures(verify(folder))
    assert set(got) == {"row_identity"}, got
    assert "rejects.jsonl line's file is not its input row's" in got["row_identity"], got


def test_a_missing_source_at_an_absolute_path_is_not_said_relative(built, tmp_path):
    """A source removed after the build (its path recorded in full) was said "not found
    (relative paths are read from the current folder)": the path is no relative one."""
    folder = copy_set(built, tmp_path)
    m = manifest(folder)
    gone = tmp_path / "gone.jsonl"
    m["inputs"][0]["path"] = str(gone)
    save_manifest(folder, m)
    sources = next(r for r in verify(folder) if r.name == "sources")
    assert sources.failed
    text = json.dumps(sources.to_json())
    assert f"{gone} not found" in text and "relative paths" not in text


def _old_prompts_index(path: Path) -> tuple[dict, dict]:
    """The index as verify kept it before: every parsed prompts.jsonl line, by its row."""
    from draftset.output.readback import read_jsonl

    at, line = {}, {}
    for n, o in enumerate(read_jsonl(path)[0]):
        if isinstance(o, dict) and isinstance(o.get("metadata"), dict):
            key = (str(o["metadata"].get("source")), o["metadata"].get("row"))
            at[key], line[key] = o, n
    return at, line


def _prompt(row: int, text: str) -> str:
    obj = {"id": f"p{row}", "messages": [{"role": "user", "content": text}]}
    obj["metadata"] = {"source": "chats", "row": row}
    return json.dumps(obj, ensure_ascii=False)


def test_verify_finds_prompt_lines_as_it_did_without_holding_them(built, tmp_path):
    """verify's source pass held every prompts.jsonl line as Python objects for one lookup a
    row (~1.2 GB for 1 GB of prompt-only rows). It keeps where each line is now, and finds the
    same lines, numbered the same, over odd files: blank and broken lines, JSON null, CR and
    CRLF line ends, bytes that are no UTF-8, a row listed twice."""
    import tracemalloc

    from draftset.checks.records import _index_output
    from draftset.output.readback import open_output

    folder = copy_set(built, tmp_path)
    path = folder / "prompts.jsonl"
    odd = (
        (_prompt(0, "héllo") + "\r\n").encode()
        + b"\n   \n{not json\nnull\n"
        + (_prompt(1, "one") + "\r" + _prompt(2, "two") + "\n").encode()
        + _prompt(3, "bad ").encode()[:-30]
        + b"\xff\xfe"
        + _prompt(3, "x").encode()[-30:]
        + b"\n"
        + (_prompt(1, "again") + "\n" + _prompt(4, "last, no newline")).encode()
    )
    path.write_bytes(odd)
    idx = _index_output(open_output(folder), "all")
    at, line = _old_prompts_index(path)
    assert idx.prompt_line == line and len(line) >= 4
    assert {key: idx.prompts_at.get(key) for key in at} == at
    assert idx.prompts_at.get(("chats", 99)) is None
    # 2,000 prompts of 10 KB: the index holds a few bytes a line, not 20 MB of objects
    path.write_text("".join(_prompt(i, "x" * 10_000) + "\n" for i in range(2_000)))
    tracemalloc.start()
    idx = _index_output(open_output(folder), "all")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4_000_000, peak
    assert idx.prompts_at.get(("chats", 1999))["messages"][0]["content"] == "x" * 10_000
