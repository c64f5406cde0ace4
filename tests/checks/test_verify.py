"""`draftset verify`: good sets pass; every kind of corruption fails naming exactly its check.

Sets are built once per module with the real Qwen3 tokenizer. Each corruption works on a copy.
A corrupted Arrow file always trips `file_hashes`; to prove the content check fires on its own,
the copy is then "resealed" (token_freq, d2t/t2d, manifest counts and hashes recomputed, as a
careful forger would) and verify must still fail, naming exactly the expected checks.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO, llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer
from unicode_torture import PIECES, torture_rows

from draftset.checks.verify import fast_checks, run_verify
from draftset.cli import main as cli_main
from draftset.config.options import BuildOptions
from draftset.config.recipe import load_recipe
from draftset.core import reasons
from draftset.output.base import arrow_schema
from draftset.output.vocab import draft_vocab
from draftset.pipeline.build import run_build
from draftset.sources.read import Source

LONG = (
    "Rivers carry sediment from mountains to the sea, slowly building deltas where the water "
    "slows down and drops the sand, silt and clay it has carried for hundreds of kilometres."
)
ROWS = [
    {
        "id": "sys",
        "messages": [
            {"role": "system", "content": "You are a careful geography tutor."},
            {"role": "user", "content": "How are river deltas formed?"},
            {"role": "assistant", "content": LONG},
        ],
    },
    {
        "id": "ph",
        "messages": [
            {"role": "user", "content": "Ready?"},
            {"role": "assistant", "content": "OK."},
            {"role": "user", "content": "Explain deltas."},
            {"role": "assistant", "content": LONG},
        ],
    },
    {
        "id": "tool",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "content": '{"temp": 21}'},
            {
                "role": "assistant",
                "content": "It is 21 degrees Celsius and sunny in Paris right now,"
                " a pleasant spring day for a walk.",
            },
        ],
    },
    {
        "id": "think",
        "messages": [
            {"role": "user", "content": "What is 17 * 3?"},
            {
                "role": "assistant",
                "content": "17 * 3 = 51.",
                "reasoning_content": "17 * 3 is 10 * 3 + 7 * 3 = 30 + 21 = 51.",
            },
        ],
    },
    {
        "id": "xss",
        "messages": [
            {"role": "user", "content": "Print <script>alert(1)</script> please"},
            {
                "role": "assistant",
                "content": "Here it is, as plain text: <script>alert(1)</script>"
                " — it will not run here.",
            },
        ],
    },
    {"id": "p1", "messages": [{"role": "user", "content": "Write a poem."}]},
    {
        "id": "bad",
        "messages": [{"role": "wizard", "content": "?"}, {"role": "assistant", "content": "!"}],
    },
    {
        "id": "multi",
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {
                "role": "assistant",
                "content": "Blue, like a clear summer sky over the ocean on a calm day.",
            },
            {"role": "user", "content": "Another?"},
            {
                "role": "assistant",
                "content": "Green, like fresh grass after the rain in early spring.",
            },
        ],
    },
]


def main(argv: list[str]) -> int:
    """`draftset verify ...` (the command, through the CLI's parser and exit codes)."""
    return cli_main(["verify", *argv])


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def chat(rid: str, question: str, answer: str) -> dict:
    """One question and its answer."""
    return {
        "id": rid,
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ],
    }


def build_rows(tmp_path: Path, rows: list, name: str = "o", **options) -> Path:
    """A Qwen3 set of ``rows`` (source `chats`), one worker, with ``options`` set."""
    src = write_jsonl(tmp_path / f"{name}.jsonl", rows)
    opts = BuildOptions(
        [Source("chats", src)], str(qwen3_tokenizer_dir()), tmp_path / name, workers=1
    )
    for key, value in options.items():
        setattr(opts, key, value)
    return run_build(opts).out


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Good sets: inline data in three turn modes (one truncating) and the bundled sample."""
    root = tmp_path_factory.mktemp("verify")
    src = write_jsonl(root / "chats.jsonl", ROWS)
    tokdir = str(qwen3_tokenizer_dir())

    def build(name: str, **kw) -> Path:
        opts = BuildOptions([Source("chats", src)], tokdir, root / name, workers=1, **kw)
        return run_build(opts).out

    recipe = load_recipe(REPO / "examples" / "recipe.yaml")
    sample = run_build(
        BuildOptions(
            recipe["sources"],
            tokdir,
            root / "sample",
            workers=1,
            draft_vocab_size=64,
            target_vocab_size=151936,  # Qwen3's config.json (the tokenizer folder has none)
        )
    ).out
    return {
        "all": build("all", draft_vocab_size=32, target_vocab_size=151936),
        "each": build("each", turns="each"),
        "last_truncate": build("last", turns="last", truncation="truncate", max_length=40),
        "sample": sample,
    }


def failed(results) -> set[str]:
    return {r.name for r in results if r.status == "fail"}


def by_name(results) -> dict:
    return {r.name: r for r in results}


def verify(folder: Path, **kw):
    kw.setdefault("speculators", False)  # its import costs seconds; covered once below
    return run_verify(folder, **kw)


# --- helpers that corrupt a copy -----------------------------------------------------------------
def copy_set(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "set"
    shutil.copytree(src, dst)
    return dst


def read_rows(folder: Path) -> list[dict]:
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "rb") as f:
        return pa.ipc.open_stream(f).read_all().to_pylist()


def write_rows(folder: Path, rows: list[dict]) -> None:
    for r in rows:
        r["seq_len"] = len(r["input_ids"])
    table = pa.Table.from_pylist(rows, schema=arrow_schema())
    with (
        pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as w,
    ):
        w.write_table(table)


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def save_manifest(folder: Path, m: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(m, indent=2, ensure_ascii=False))


def reseal(folder: Path) -> None:
    """Recompute vocabulary files, manifest row/token counts and file hashes from the data."""
    m = manifest(folder)
    rows = read_rows(folder)
    vocab = m["tokenizer"]["vocab_size"]
    freq = np.zeros(vocab, dtype=np.int64)
    per: dict[str, dict[str, int]] = {}
    for r in rows:
        ids, mask = np.asarray(r["input_ids"]), np.asarray(r["loss_mask"], dtype=bool)
        np.add.at(freq, ids[mask], 1)
        c = per.setdefault(r["source"], {"rows_out": 0, "tokens": 0, "supervised_tokens": 0})
        c["rows_out"] += 1
        c["tokens"] += len(ids)
        c["supervised_tokens"] += int(mask.sum())
    np.save(folder / "token_freq.npy", freq)
    if (folder / "token_freq.pt").exists():
        import torch

        torch.save({int(i): int(freq[i]) for i in np.nonzero(freq)[0]}, folder / "token_freq.pt")
    n = m["options"]["draft_vocab_size"]
    if n:
        d2t, t2d = draft_vocab(freq, n, vocab)
        np.save(folder / f"d2t-{n}.npy", d2t)
        np.save(folder / f"t2d-{n}.npy", t2d)
    for name, c in m["counts"]["per_source"].items():
        c.update(per.get(name, {"rows_out": 0, "tokens": 0, "supervised_tokens": 0}))
    for key in ("rows_out", "tokens", "supervised_tokens"):  # counts.total is their sum
        m["counts"]["total"][key] = sum(c[key] for c in m["counts"]["per_source"].values())
    m["totals"].update(
        rows=len(rows),
        tokens=sum(c["tokens"] for c in per.values()),
        supervised_tokens=sum(c["supervised_tokens"] for c in per.values()),
    )
    state_path = folder / "state.json"  # its _fingerprint is derived from the shards' sha256
    if state_path.exists():
        state = json.loads(state_path.read_text())
        shards = "".join(
            hashlib.sha256((folder / f["filename"]).read_bytes()).hexdigest()
            for f in state["_data_files"]
        )
        state["_fingerprint"] = hashlib.sha256(shards.encode()).hexdigest()[:16]
        state_path.write_text(json.dumps(state, indent=2))
    m["files"] = {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in m["files"]
    }
    save_manifest(folder, m)


def find_row(rows: list[dict], rid: str) -> dict:
    return next(r for r in rows if r["id"] == rid)


def find_subsequence(ids: list[int], sub: list[int]) -> int:
    for i in range(len(ids) - len(sub) + 1):
        if ids[i : i + len(sub)] == sub:
            return i
    raise AssertionError(f"{sub} not in row")


# --- good sets -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["all", "each", "last_truncate", "sample"])
def test_good_sets_pass_every_check(built, name):
    results = verify(built[name])
    assert failed(results) == set(), [r.to_json() for r in results if r.failed]
    names = {r.name for r in results}
    assert names >= {
        "structure",
        "file_hashes",
        "accounting",
        "token_freq",
        "draft_vocab",
        "drafter_fitness",
        "tokenizer",
        "template",
        "sources",
        "row_identity",
        "mask_fidelity",
        "leakage",
        "truncation",
    }
    mf = by_name(results)["mask_fidelity"]
    assert (
        mf.details["full"] and mf.details["rows_checked"] == manifest(built[name])["totals"]["rows"]
    )


def test_truncating_build_is_counted(built):
    m = manifest(built["last_truncate"])
    assert m["totals"]["truncated"] > 0
    assert (
        "rows end inside an answer" in by_name(verify(built["last_truncate"]))["truncation"].summary
    )


def test_fast_checks_pass_and_need_no_sources(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    m["inputs"][0]["path"] = str(tmp_path / "gone.jsonl")
    m["tokenizer"]["path"] = str(tmp_path / "no-tokenizer")
    save_manifest(folder, m)
    results = fast_checks(folder)
    assert [r.name for r in results] == [
        "structure",
        "file_hashes",
        "accounting",
        "token_freq",
        "draft_vocab",
        "drafter_fitness",
    ]
    assert failed(results) == set()


def test_sampled_mask_check_is_seeded(built):
    a = by_name(verify(built["sample"], sample=5, seed=3))["mask_fidelity"]
    assert a.status == "pass" and a.details == {"rows_checked": 5, "full": False}
    assert "a seeded sample of 5 of 14 rows" in a.summary


def test_speculators_loader_is_run_or_skipped_with_a_reason(built):
    r = by_name(run_verify(built["sample"]))["speculators_load"]
    assert r.status in ("pass", "skip")
    if r.status == "skip":
        assert "speculators not installed" in r.summary
    else:
        assert "14 rows" in r.summary


# --- corruptions ---------------------------------------------------------------------------------
def test_flipped_mask_bits_fail_mask_fidelity(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    row = find_row(rows, "sys")
    first = row["loss_mask"].index(1)
    row["loss_mask"][first] = 0  # the answer's first token is no longer supervised
    write_rows(folder, rows)
    assert {"file_hashes", "mask_fidelity"} <= failed(verify(folder))
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}
    assert by_name(results)["mask_fidelity"].examples == ["sys"]


def test_out_of_range_ids_and_mask_values_fail_structure_by_row(built, tmp_path):
    """A token id outside the vocabulary, a mask value other than 0/1 and a row left with no
    supervised token are each found, in the row that holds them and only there."""
    folder = copy_set(built["all"], tmp_path)
    vocab = manifest(folder)["tokenizer"]["vocab_size"]
    rows = read_rows(folder)
    find_row(rows, "sys")["input_ids"][3] = vocab  # one past the last id
    find_row(rows, "think")["loss_mask"][0] = 2
    tool = find_row(rows, "tool")
    tool["loss_mask"] = [0] * len(tool["loss_mask"])
    write_rows(folder, rows)
    reseal(folder)
    structure = by_name(fast_checks(folder))["structure"]
    assert structure.details["problems_by_kind"] == {
        f"token id outside the vocabulary [0, {vocab})": 1,
        "loss_mask value other than 0/1": 1,
        "fewer supervised tokens than min_supervised_tokens": 1,
    }
    assert set(structure.examples) == {"sys", "think", "tool"}


@pytest.mark.parametrize("collide", [False, True])
def test_ids_twice_or_missing_fail_structure_and_colliding_digests_do_not(
    built, tmp_path, monkeypatch, collide
):
    """Unique ids are decided on 64-bit digests first; equal digests send the check to the ids
    themselves, so a collision (every digest made equal here) reports nothing that is not there,
    and a real duplicate or a missing id is named either way."""
    import draftset.output.readback as readback

    if collide:
        monkeypatch.setattr(readback, "digest64", lambda text: 7)
    folder = copy_set(built["all"], tmp_path)
    assert by_name(fast_checks(folder))["structure"].status == "pass"
    rows = read_rows(folder)
    find_row(rows, "think")["id"] = "sys"
    find_row(rows, "tool")["id"] = ""
    write_rows(folder, rows)
    reseal(folder)
    structure = by_name(fast_checks(folder))["structure"]
    assert structure.details["problems_by_kind"] == {"duplicate id": 1, "row without id": 1}


def test_supervised_user_text_is_named(built, tmp_path, tok):
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    row = find_row(rows, "sys")
    at = find_subsequence(
        row["input_ids"], tok.encode(" river deltas", add_special_tokens=False).ids
    )
    row["loss_mask"][at] = 1
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}
    assert any(
        f"user text is supervised: tokens {at}..{at} of the row" in m
        for m in by_name(results)["mask_fidelity"].details["messages"]
    )


def test_dropped_row_fails_accounting_and_identity(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    write_rows(folder, [r for r in rows if r["id"] != "tool"])
    assert "file_hashes" in failed(verify(folder))
    reseal(folder)
    results = verify(folder)
    # and the manifest's supervised_turns still count the row's turns (mask_fidelity recounts)
    assert failed(results) == {"accounting", "row_identity", "mask_fidelity"}
    assert by_name(results)["row_identity"].examples == ["tool"]


def test_swapped_row_contents_fail_mask_fidelity(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    a, b = find_row(rows, "sys"), find_row(rows, "think")
    for key in ("input_ids", "loss_mask"):
        a[key], b[key] = b[key], a[key]
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}
    assert set(by_name(results)["mask_fidelity"].examples) == {"sys", "think"}


def test_swapped_row_order_fails_row_identity(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    rows[0], rows[1] = rows[1], rows[0]
    write_rows(folder, rows)
    assert failed(verify(folder)) == {"file_hashes", "row_identity"}
    reseal(folder)
    assert failed(verify(folder)) == {"row_identity"}


def test_supervised_placeholder_fails_leakage(built, tmp_path, tok):
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    row = find_row(rows, "ph")
    eot = tok.token_to_id("<|im_end|>")
    ok = tok.encode("OK.", add_special_tokens=False).ids
    at = find_subsequence(row["input_ids"], [*ok, eot])
    for i in range(at, at + len(ok) + 1):
        row["loss_mask"][i] = 1
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity", "leakage"}
    leak = by_name(results)["leakage"]
    assert leak.examples == ["ph"] and "placeholder" in leak.summary


def test_placeholder_list_is_configurable(built):
    # a real, supervised answer: declaring it a placeholder makes the set leak
    text = "Green, like fresh grass after the rain in early spring."
    results = verify(built["all"], placeholders=("OK.", "OK", text))
    assert failed(results) == {"leakage"}
    assert by_name(results)["leakage"].examples == ["multi"]


def test_truncated_answer_fails_truncation_and_mask(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    row = find_row(rows, "sys")
    cut = len(row["input_ids"]) - 5  # inside the answer, before its end-of-turn token
    row["input_ids"], row["loss_mask"] = row["input_ids"][:cut], row["loss_mask"][:cut]
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity", "truncation"}
    assert by_name(results)["truncation"].examples == ["sys"]


def test_edited_token_freq_fails_token_freq(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    freq = np.load(folder / "token_freq.npy")
    freq[int(np.argmax(freq))] += 1
    np.save(folder / "token_freq.npy", freq)
    assert failed(verify(folder)) == {"file_hashes", "token_freq"}
    m = manifest(folder)
    m["files"]["token_freq.npy"] = hashlib.sha256(
        (folder / "token_freq.npy").read_bytes()
    ).hexdigest()
    save_manifest(folder, m)
    assert failed(verify(folder)) == {"token_freq"}


def _listed_pt_fails_token_freq(folder: Path, m: dict) -> list:
    """token_freq.pt listed in the manifest ``m`` with its new hash: only token_freq fails."""
    m["files"]["token_freq.pt"] = hashlib.sha256(
        (folder / "token_freq.pt").read_bytes()
    ).hexdigest()
    save_manifest(folder, m)
    results = fast_checks(folder)
    assert failed(results) == {"token_freq"}
    return results


def _pt_edits(vocab: int) -> dict:
    """Forged token_freq.pt contents: (the dict build wrote, a free id, torch) -> content."""
    return {
        "zero": (lambda d, k, free, t: {**d, free: 0}, "id FREE with count 0"),
        "negative": (lambda d, k, free, t: {**d, k: -d[k]}, "a negative count: id K: -"),
        "zero and negative elsewhere": (
            lambda d, k, free, t: {**d, free: 0, free + 1: -1},
            "a negative count: id FREE+1: -1",
        ),
        "missing": (lambda d, k, free, t: {i: c for i, c in d.items() if i != k}, "lacks id K"),
        "extra": (lambda d, k, free, t: {**d, free: 1}, "lists id FREE, which no row supervises"),
        "outside": (lambda d, k, free, t: {**d, vocab: 1}, f"id {vocab} outside [0, {vocab})"),
        "changed": (lambda d, k, free, t: {**d, k: d[k] + 1}, "differs from the recount at 1 id"),
        "str key": (
            lambda d, k, free, t: {**d, str(k): d[k]},
            "key 'K' is a str, expected an int token id (beside the int key K)",
        ),
        "tensor key": (
            lambda d, k, free, t: {**d, t.tensor(k): d[k]},
            "key tensor(K) is a Tensor, expected an int token id (beside the int key K)",
        ),
        "float count": (
            lambda d, k, free, t: {**d, k: float(d[k])},
            "count of id K is a float (",
        ),
        "tensor count": (
            lambda d, k, free, t: {**d, k: t.tensor(d[k])},
            "count of id K is a Tensor (tensor(",
        ),
        "bool count": (lambda d, k, free, t: {**d, k: True}, "count of id K is a bool (True)"),
        "a tensor": (
            lambda d, k, free, t: t.zeros(vocab, dtype=t.int64),
            "holds a Tensor, expected a dict {token id: count}",
        ),
        "a list": (lambda d, k, free, t: list(d.items()), "holds a list, expected a dict"),
    }


@pytest.mark.parametrize("edit", list(_pt_edits(151936)))
def test_a_forged_token_freq_pt_fails_token_freq_with_its_reason(built, tmp_path, edit):
    """token_freq.pt is exactly what build writes: {int id: int count > 0} for every
    supervised id and no other, equal to the recount; anything else is named, never a
    traceback (before, a count of 0, a "5" key or a float count passed: they were cast)."""
    torch = pytest.importorskip("torch")
    folder = copy_set(built["all"], tmp_path)
    vocab = manifest(folder)["tokenizer"]["vocab_size"]
    change, said = _pt_edits(vocab)[edit]
    data = torch.load(folder / "token_freq.pt", weights_only=True)
    k = max(data, key=lambda i: (data[i], i))
    free = next(i for i in range(vocab) if i not in data and i + 1 not in data)
    said = said.replace("FREE+1", str(free + 1)).replace("FREE", str(free))
    said = said.replace("K", str(k))
    torch.save(change(dict(data), k, free, torch), folder / "token_freq.pt")
    results = _listed_pt_fails_token_freq(folder, manifest(folder))
    said_all = [
        by_name(results)["token_freq"].summary,
        *by_name(results)["token_freq"].details.get("messages", []),
    ]
    assert any(said in line for line in said_all), (said, said_all)
    assert by_name(results)["token_freq"].examples == ["token_freq.pt"]


def test_token_freq_pt_deleted_and_unlisted_fails_when_build_recorded_it_written(built, tmp_path):
    """token_freq.pt was optional (torch) in sets built before it was always written, so its
    absence alone proves nothing; but build records whether it wrote it, and a set whose file
    was deleted and unlisted contradicts that record (before, it passed: absent and unlisted
    looked like a build without torch)."""
    pytest.importorskip("torch")
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    assert m["token_freq_pt"] == {"written": True, "reason": None}
    (folder / "token_freq.pt").unlink()
    del m["files"]["token_freq.pt"]
    save_manifest(folder, m)
    results = fast_checks(folder)
    assert failed(results) == {"file_hashes", "token_freq"}
    assert by_name(results)["file_hashes"].examples == ["token_freq.pt"]
    tf = by_name(results)["token_freq"]
    assert tf.examples == ["token_freq.pt"]
    assert tf.details["messages"] == [
        "token_freq.pt: missing, though build recorded it written (token_freq_pt.written)"
    ]


def test_a_build_writes_token_freq_pt_without_torch(tmp_path, monkeypatch):
    """token_freq.pt needs no torch at build time (`output.pt_file`): a build where torch does
    not import writes it all the same, records it written, and its own check compares it
    (before: skipped, "torch is not installed")."""
    import draftset.output.vocab as vocab

    monkeypatch.setattr(vocab, "torch_unavailable", lambda: "torch is not installed")
    folder = build_rows(tmp_path, [chat("a", "Why is the sky blue?", LONG)])
    assert manifest(folder)["token_freq_pt"] == {"written": True, "reason": None}
    tf = by_name(fast_checks(folder))["token_freq"]  # read with draftset's own reader here
    assert tf.status == "pass" and "notes" not in tf.details, tf.summary
    monkeypatch.undo()
    npy = np.load(folder / "token_freq.npy")
    expected = {int(i): int(npy[i]) for i in np.nonzero(npy)[0]}
    assert vocab.read_token_freq_pt(folder / "token_freq.pt") == expected
    if importlib.util.find_spec("torch") is not None:  # and with torch's, as speculators reads
        assert vocab.load_token_freq_pt(folder / "token_freq.pt") == expected


def test_a_set_built_when_torch_was_missing_says_why_and_holds_to_its_record(tmp_path):
    """Sets built before token_freq.pt was always written recorded it not written and why
    (torch missing): verify says that reason (a note, not a failure) and fails a token_freq.pt
    that build recorded it never wrote."""
    folder = build_rows(tmp_path, [chat("a", "Why is the sky blue?", LONG)])
    m = manifest(folder)
    m["token_freq_pt"] = {"written": False, "reason": "torch is not installed"}
    del m["files"]["token_freq.pt"]
    (folder / "token_freq.pt").rename(tmp_path / "kept.pt")
    save_manifest(folder, m)
    tf = by_name(fast_checks(folder))["token_freq"]
    assert tf.status == "pass"
    assert tf.details["notes"] == [
        "token_freq.pt not written by build: torch is not installed",
        "a rebuild writes token_freq.pt (draftset no longer needs torch for it)",
    ]
    (tmp_path / "kept.pt").rename(folder / "token_freq.pt")
    results = _listed_pt_fails_token_freq(folder, m)
    assert by_name(results)["token_freq"].details["messages"] == [
        "token_freq.pt: present, though build recorded it not written (torch is not installed)"
    ]


def test_inconsistent_draft_vocab_fails(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    t2d = np.load(folder / "t2d-32.npy")
    t2d[np.nonzero(t2d)[0][0]] = False
    np.save(folder / "t2d-32.npy", t2d)
    m = manifest(folder)
    m["files"]["t2d-32.npy"] = hashlib.sha256((folder / "t2d-32.npy").read_bytes()).hexdigest()
    save_manifest(folder, m)
    assert failed(verify(folder)) == {"draft_vocab"}


def test_t2d_of_the_tokenizer_length_fails_draft_vocab(built, tmp_path):
    # a set whose vocabulary files use len(tokenizer) (151,669) instead of the target model's
    # 151,936 (recorded as --target-vocab-size): speculators' train would stop on t2d's shape
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    assert m["options"]["target_vocab_size"] == 151936
    m["tokenizer"]["vocab_size"] = m["tokenizer"]["tokenizer_size"]
    save_manifest(folder, m)
    reseal(folder)  # token_freq, d2t/t2d and hashes consistent with the wrong size
    assert np.load(folder / "t2d-32.npy").shape == (151669,)
    checks = {c.name: c for c in fast_checks(folder)}
    assert checks["draft_vocab"].failed
    assert "expected bool[151936]" in checks["draft_vocab"].summary


def test_tampered_hash_fails_file_hashes(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    m["files"]["rejects.jsonl"] = "0" * 64
    save_manifest(folder, m)
    results = verify(folder)
    assert failed(results) == {"file_hashes"}
    assert by_name(results)["file_hashes"].examples == ["rejects.jsonl"]


def test_malformed_reject_line_fails_accounting(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    with (folder / "rejects.jsonl").open("a") as f:
        f.write('{"source": "chats", "row": 99}\n')
    m = manifest(folder)
    m["files"]["rejects.jsonl"] = hashlib.sha256(
        (folder / "rejects.jsonl").read_bytes()
    ).hexdigest()
    save_manifest(folder, m)
    assert failed(verify(folder)) == {"accounting", "row_identity"}


def test_changed_or_missing_source_fails_sources(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    src = tmp_path / "chats.jsonl"
    shutil.copy(manifest(folder)["inputs"][0]["path"], src)
    m = manifest(folder)
    m["inputs"][0]["path"] = m["inputs"][0]["files"][0]["path"] = str(src)
    save_manifest(folder, m)
    assert failed(verify(folder)) == set()  # the same bytes elsewhere are fine
    src.write_text(src.read_text().replace("Paris", "Lyon"))
    results = verify(folder)
    assert failed(results) == {"sources"}
    assert by_name(results)["mask_fidelity"].status == "skip"
    src.unlink()
    assert failed(verify(folder)) == {"sources"}
    assert main([str(folder)]) == 1


def test_wrong_tokenizer_fingerprint_fails_tokenizer(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    m["tokenizer"]["fingerprint"] = "f" * 64
    save_manifest(folder, m)
    assert failed(verify(folder)) == {"tokenizer"}


def test_other_tokenizer_fails_tokenizer(built):
    results = verify(built["all"], tokenizer=str(llama32_tokenizer_dir()))
    assert "tokenizer" in failed(results)


def test_tampered_template_fails_template(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    m["template"]["sha256"] = "0" * 64
    save_manifest(folder, m)
    assert failed(verify(folder)) == {"template"}


# --- command line --------------------------------------------------------------------------------
def test_cli_failure_names_check_count_and_ids(built, tmp_path, capsys):
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    m["files"]["prompts.jsonl"] = "0" * 64
    save_manifest(folder, m)
    out_json = tmp_path / "v.json"
    assert main([str(folder), "--json", str(out_json), "--sample", "2"]) == 1
    text = capsys.readouterr().out
    assert "FAIL file_hashes" in text and "count 1" in text and "prompts.jsonl" in text
    data = json.loads(out_json.read_text())
    assert data["passed"] is False
    assert {c["name"] for c in data["checks"] if c["status"] == "fail"} == {"file_hashes"}


def test_cli_passes_with_exit_0(built, capsys):
    assert main([str(built["each"]), "--fast"]) == 0
    assert "verify passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["/nonexistent/dir"], "not found"),
        (["EMPTY"], "not a draftset output"),
        (["GOOD", "--sample", "0"], "--sample"),
        (["GOOD", "--block-size", "1"], "--block-size"),
        (["GOOD", "--tokenizer", "/nonexistent/tok"], "tokenizer"),
        (["GOOD", "--bogus"], "unrecognized"),
    ],
)
def test_cli_usage_errors_exit_2(built, tmp_path, capsys, args, needle):
    argv = [
        str(built["all"]) if a == "GOOD" else str(tmp_path) if a == "EMPTY" else a for a in args
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


# --- text the tokenizer normalizes (issue 10) ----------------------------------------------------
@pytest.fixture(scope="module")
def torture(tmp_path_factory) -> dict[str, Path]:
    """The Unicode torture set built with Qwen3 (NFC normalizer) and Llama-3.2 (none)."""
    root = tmp_path_factory.mktemp("torture")
    src = write_jsonl(root / "unicode.jsonl", torture_rows())

    def build(name: str, tokdir: Path, **kw) -> Path:
        return run_build(BuildOptions([Source("u", src)], str(tokdir), root / name, **kw)).out

    return {
        "qwen": build("qwen", qwen3_tokenizer_dir(), workers=1),
        "qwen_each_cut": build(
            "qwen_each_cut",
            qwen3_tokenizer_dir(),
            workers=1,
            turns="each",
            truncation="truncate",
            max_length=120,
        ),
        "llama": build(
            "llama",
            llama32_tokenizer_dir(),
            workers=1,
            chat_template_path=str(trl_template("llama3_2")),
        ),
    }


@pytest.mark.parametrize("name", ["qwen", "qwen_each_cut", "llama"])
def test_unicode_torture_set_passes(torture, name):
    folder = torture[name]
    results = verify(folder)
    assert failed(results) == set(), [r.to_json() for r in results if r.failed]
    mf = by_name(results)["mask_fidelity"]
    rows = manifest(folder)["totals"]["rows"]
    assert mf.details["full"] and mf.details["rows_checked"] == rows
    ids = read_ids(folder)
    base = {i.split("#")[0] for i in ids}
    wanted = {f"u-{k}" for k in PIECES} | {"u-lone-mark", "u-marks-only", "u-mark-at-end"}
    if name != "qwen_each_cut":  # the cut build drops rows too long to hold an answer
        assert wanted <= base, wanted - base


def test_torture_set_really_is_normalized_by_qwen(torture, tok):
    """The Qwen rows decode to NFC text that differs from the source: the test has teeth."""
    row = find_row(read_rows(torture["qwen"]), "u-singletons")
    text = tok.decode(row["input_ids"], skip_special_tokens=False)
    assert "\u03a9 ohm" in text and "\u2126" not in text  # OHM SIGN came back as OMEGA
    row = find_row(read_rows(torture["llama"]), "u-singletons")
    llama = Tokenizer.from_file(str(llama32_tokenizer_dir() / "tokenizer.json"))
    assert "\u2126 ohm" in llama.decode(row["input_ids"], skip_special_tokens=False)


def test_replaced_token_in_normalized_row_still_fails(torture, tmp_path, tok):
    folder = copy_set(torture["qwen"], tmp_path)
    rows = read_rows(folder)
    row = find_row(rows, "u-singletons")
    replace_supervised_token(row, tok, " more", " less")
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}
    assert by_name(results)["mask_fidelity"].examples == ["u-singletons"]


# --- content, not lengths: same-length corruptions -----------------------------------------------
def read_ids(folder: Path) -> list[str]:
    return [r["id"] for r in read_rows(folder)]


def replace_supervised_token(
    row: dict, tok: Tokenizer, old: str, new: str, supervised: bool = True
) -> int:
    """Swap one (supervised, or context) token for another of the same length in characters."""
    (a,) = tok.encode(old, add_special_tokens=False).ids
    (b,) = tok.encode(new, add_special_tokens=False).ids
    assert len(old) == len(new) and a != b
    mask = row["loss_mask"]
    at = next(i for i, t in enumerate(row["input_ids"]) if t == a and mask[i] == int(supervised))
    row["input_ids"][at] = b
    return at


@pytest.mark.parametrize(
    ("old", "new", "supervised"), [(" sand", " clay", True), (" formed", " shaped", False)]
)
def test_same_length_token_swap_fails_mask_fidelity(built, tmp_path, tok, old, new, supervised):
    """One token replaced by another of the same length — in the answer, or in the user's
    question (context): same token count, same character count, hashes resealed. Only a content
    comparison can catch it."""
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    at = replace_supervised_token(find_row(rows, "sys"), tok, old, new, supervised)
    write_rows(folder, rows)
    assert {"file_hashes", "mask_fidelity"} <= failed(verify(folder))
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}
    mf = by_name(results)["mask_fidelity"]
    assert mf.examples == ["sys"] and mf.count >= 1
    # the message says where: the token, and the row's text there beside the expected text;
    # and only it (the row's counts, recounted from its own runs, are not reported again)
    (msg,) = mf.details["messages"]
    assert f"at token {at} " in msg, msg
    row_side, expected_side = msg.split(" vs expected ")
    assert new.strip() in row_side and old.strip() in expected_side, msg
    assert new.strip() not in expected_side, msg


@pytest.mark.parametrize("shift", [1, -1])
def test_mask_shifted_by_one_position_fails_mask_fidelity(built, tmp_path, shift):
    """The answer's supervised run moved one token right or left: as many supervised tokens,
    every one of them a real token of the row, but not the tokens the model generates."""
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    row = find_row(rows, "sys")
    mask = row["loss_mask"]
    ones = [i for i, m in enumerate(mask) if m == 1]
    assert ones == list(range(ones[0], ones[-1] + 1))  # one run
    row["loss_mask"] = [0] * len(mask)
    for i in ones:
        row["loss_mask"][i + shift] = 1
    assert sum(row["loss_mask"]) == len(ones)
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    # the run no longer ends with <|im_end|>, so it also reads as a truncated answer
    assert failed(results) == {"mask_fidelity", "truncation"}
    assert by_name(results)["mask_fidelity"].examples == ["sys"]
    assert by_name(results)["truncation"].examples == ["sys"]
    # where: the run's tokens in the row, the truncated count's first row (its index)
    messages = by_name(results)["mask_fidelity"].details["messages"]
    where = f"tokens {ones[0] + shift}..{ones[-1] + shift} of the row"
    assert any("overlaps turn 2 but is not its generation: " + where in m for m in messages)
    (said,) = by_name(results)["truncation"].details["messages"]
    assert f"; the first: 'sys' (row {rows.index(row)})" in said, said


# --- stray files ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["data-00001-of-00002.arrow", "cache-0123abcd.arrow"])
def test_stray_arrow_file_fails_file_hashes(built, tmp_path, name):
    """A shard state.json does not list is not loaded, yet looks like part of the set."""
    folder = copy_set(built["all"], tmp_path)
    shutil.copy(folder / "data-00000-of-00001.arrow", folder / name)
    results = verify(folder)
    assert failed(results) == {"file_hashes"}
    fh = by_name(results)["file_hashes"]
    assert fh.examples == [name] and "not listed in state.json" in fh.summary
    assert failed(fast_checks(folder)) == {"file_hashes"}  # build's own check sees it too


# --- the record of the last full run (verify.json) -----------------------------------------------
def test_full_verify_records_its_result_and_the_record_never_trips_verify(
    built, tmp_path, capsys, monkeypatch
):
    import draftset.checks.verify as v

    skip = v.CheckResult("speculators_load", "skip", "skipped: not under test here")
    monkeypatch.setattr(v, "check_speculators_load", lambda out: skip)  # seconds of imports
    folder = copy_set(built["each"], tmp_path)
    (folder / "verify.json").unlink(missing_ok=True)
    assert main([str(folder), "--fast"]) == 0
    assert not (folder / "verify.json").exists()  # fast checks are not a full verify
    assert main([str(folder), "--sample", "2"]) == 0
    assert "recorded in" in capsys.readouterr().out
    record = json.loads((folder / "verify.json").read_text())
    assert record["format"] == "draftset-verify/1" and record["passed"] is True
    assert record["options"]["sample"] == 2
    m = manifest(folder)
    assert record["files"] == {
        "manifest.json": hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest(),
        **m["files"],
    }
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no temp left
    # a second run with the record present still passes, and fast checks ignore it
    assert failed(verify(folder)) == set()
    assert failed(fast_checks(folder)) == set()


def test_unwritable_folder_is_a_visible_skip(built, tmp_path, monkeypatch):
    import draftset.checks.verify as v

    def refuse(*a, **k):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(v, "write_record", refuse)
    results = verify(copy_set(built["each"], tmp_path), sample=1)
    rec = by_name(results)["verify_record"]
    assert rec.status == "skip" and "read-only file system" in rec.summary
    assert failed(results) == set()


def test_overwrite_replaces_a_verified_set_and_its_record(built, tmp_path):
    folder = copy_set(built["all"], tmp_path)
    verify(folder, sample=1)
    assert (folder / "verify.json").is_file()
    opts = BuildOptions(
        [Source("chats", Path(manifest(folder)["inputs"][0]["path"]))],
        str(qwen3_tokenizer_dir()),
        folder,
        workers=1,
        overwrite=True,
    )
    run_build(opts)
    assert not (folder / "verify.json").exists()  # the old set's record went with it
    assert failed(fast_checks(folder)) == set()


def test_printed_results_escape_control_characters_from_ids():
    """Row ids and messages come from the data: printed as escapes, never raw."""
    import io

    from rich.console import Console

    from draftset.checks.verify import CheckResult
    from draftset.commands.verify import print_results

    bad = "row\x1b]0;title\x07\u202e"
    res = CheckResult("mask_fidelity", "fail", "x", 1, [bad], {"messages": [f"{bad}: run"]})
    f = io.StringIO()
    print_results([res], Console(file=f, width=200))
    out = f.getvalue()
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert out.count("row\\x1b]0;title\\x07\\u202e") == 2


# --- every count the manifest states, every file in the folder (issue 25, item 12) ---------------
def test_total_claiming_one_more_written_one_fewer_rejected_fails_accounting(built, tmp_path):
    """counts.total is what the summary and the report show: it must be the sources' sum."""
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    total = m["counts"]["total"]
    reason = next(iter(total["rejected_by_reason"]))
    total["written"] += 1
    total["rejected"] -= 1
    total["rejected_by_reason"][reason] -= 1
    save_manifest(folder, m)
    results = verify(folder)
    assert failed(results) == {"accounting"}
    acc = by_name(results)["accounting"]
    assert "counts.total != the sum of the sources" in acc.summary
    assert "counts.total.written" in acc.examples


@pytest.fixture(scope="module")
def dup_set(tmp_path_factory) -> Path:
    """Two copies of each of two conversations: two `duplicate` rejects."""
    root = tmp_path_factory.mktemp("dups")
    rows = [*ROWS[:2], *({**r, "id": f"{r['id']}-again"} for r in ROWS[:2])]
    src = write_jsonl(root / "chats.jsonl", rows)
    opts = BuildOptions([Source("chats", src)], str(qwen3_tokenizer_dir()), root / "set", workers=1)
    return run_build(opts).out


@pytest.mark.parametrize("field", ["removed", "removed_total", "pairs", "no step"])
def test_edited_dedup_counts_fail_accounting(dup_set, tmp_path, field):
    """The manifest's `mixture.dedup` numbers were shown by the report and never checked
    (`removed_total 4` with 5 `duplicate` reject lines passed): each is the reject lines'
    count of its reason, per source."""
    folder = copy_set(dup_set, tmp_path)
    m = manifest(folder)
    (exact,) = [d for d in m["mixture"]["dedup"] if d["kind"] == "exact"]
    lines = [json.loads(x) for x in (folder / "rejects.jsonl").read_text().splitlines()]
    assert (
        exact["removed"]
        == {"chats": sum(r["reason"] == "duplicate" for r in lines)}
        == {"chats": 2}
    )
    if field == "removed":
        exact["removed"]["chats"] -= 1
        exact["removed_total"] -= 1
    elif field == "removed_total":
        exact["removed_total"] -= 1
    elif field == "pairs":
        exact["pairs"][0]["count"] += 1
    else:  # the reject lines say dedup removed rows; the manifest, that no dedup ran
        m["mixture"]["dedup"] = []
    save_manifest(folder, m)
    results = fast_checks(folder)
    assert failed(results) == {"accounting"}
    acc = by_name(results)["accounting"]
    assert any("mixture.dedup" in example for example in acc.examples), acc.examples


def test_edited_input_file_bytes_fail_sources(built, tmp_path):
    """`inputs[].files[].bytes` is checked against the input file, as its sha256 is."""
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    m["inputs"][0]["files"][0]["bytes"] += 1
    save_manifest(folder, m)
    results = verify(folder, sample=1)
    assert failed(results) == {"sources"}
    assert "source file size changed" in by_name(results)["sources"].summary


@pytest.mark.parametrize("name", ["all", "each"])
def test_source_claiming_a_rejected_conversation_written_fails_accounting(built, tmp_path, name):
    """A source whose written/rejected are moved by one (balance, rows_out kept) fails: outside
    `each` the reject lines prove rejected, with `each` the distinct conversations prove
    written."""
    folder = copy_set(built[name], tmp_path)
    m = manifest(folder)
    for c in (m["counts"]["per_source"]["chats"], m["counts"]["total"]):
        reason = next(iter(c["rejected_by_reason"]))
        c["written"] += 1
        c["rejected"] -= 1
        c["rejected_by_reason"][reason] -= 1
        if not c["rejected_by_reason"][reason]:
            del c["rejected_by_reason"][reason]
    save_manifest(folder, m)
    assert "accounting" in failed(fast_checks(folder))


def test_each_counts_conversations_without_a_list_of_the_sets_ids(built, tmp_path, monkeypatch):
    """Issue 27: the `each` accounting counts distinct conversations per source on digests,
    batch by batch: the set's ids as one Python list and a set of their strings were ~125 bytes
    a row at the end of a build's driver. A sound set passes; a moved count still fails."""
    from draftset.output.readback import SetFacts

    def listed(self):
        raise AssertionError("the whole set's ids listed")

    monkeypatch.setattr(SetFacts, "ids", listed)
    monkeypatch.setattr(SetFacts, "sources", listed)
    folder = copy_set(built["each"], tmp_path)
    assert failed(fast_checks(folder)) == set()
    m = manifest(folder)
    n = m["counts"]["per_source"]["chats"]["written"]
    for c in (m["counts"]["per_source"]["chats"], m["counts"]["total"]):
        c["written"] += 1
        c["rejected"] -= 1
    save_manifest(folder, m)
    accounting = by_name(fast_checks(folder))["accounting"]
    assert accounting.status == "fail"
    assert (
        f"chats: written {n + 1} != {n} distinct conversations among the rows"
        in (accounting.details["messages"])
    )


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.text(alphabet="ab#1", max_size=6)),
            st.one_of(st.none(), st.sampled_from(["s", "t", ""])),
        ),
        max_size=40,
    ),
    st.integers(1, 7),
)
def test_conversations_per_source_equals_a_set_of_the_ids(rows, size):
    """The digest count equals the plain definition (a set of each row's id before its last
    `#`, per source) whatever the batches' cut."""
    from draftset.checks.fast import conversation_of, conversations_per_source

    plain: dict[str, set[str]] = {}
    for rid, src in rows:
        plain.setdefault(str(src), set()).add(str(rid).rsplit("#", 1)[0] if rid else "")
    batches = [
        ([r for r, _ in rows[i : i + size]], [s for _, s in rows[i : i + size]])
        for i in range(0, len(rows), size)
    ]
    got = conversations_per_source(batches)
    assert dict(got) == {k: len(v) for k, v in plain.items()}
    assert conversation_of("a#b#3") == "a#b" and conversation_of(None) == ""


@pytest.mark.parametrize(
    "name", ["data/train-00000-of-00001.parquet", "NOTES.md", "sub/x.jsonl", ".hidden"]
)
def test_file_the_manifest_does_not_list_fails_file_hashes(built, tmp_path, name):
    """`load_dataset(DIR)` reads a data/*.parquet beside an Arrow set; nothing proves any
    unlisted file. verify.json and report.html (draftset's own, after the build) are fine."""
    folder = copy_set(built["all"], tmp_path)
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"PAR1 not yours")
    results = fast_checks(folder)
    assert failed(results) == {"file_hashes"}
    fh = by_name(results)["file_hashes"]
    assert fh.examples == [name] and "not listed in the manifest" in fh.summary
    (folder / name).unlink()
    if "/" in name:  # the folder it was in is no part of the set either, empty or not
        assert by_name(fast_checks(folder))["file_hashes"].examples == [name.split("/")[0] + "/"]
        (folder / name).parent.rmdir()
    (folder / "report.html").write_text("<html></html>")
    (folder / "verify.json").write_text("{}")
    assert failed(fast_checks(folder)) == set()


@pytest.mark.parametrize(
    ("made", "named"), [("empty", "empty/"), ("a/b/c", "a/"), (".cache", ".cache/")]
)
def test_an_empty_folder_in_a_set_fails_file_hashes(built, tmp_path, made, named):
    """A set holds only what build wrote, and an Arrow set's build writes no folder: an empty
    one (nothing below it but other empty folders) is named once, at its top."""
    folder = copy_set(built["all"], tmp_path)
    (folder / made).mkdir(parents=True)
    results = fast_checks(folder)
    assert failed(results) == {"file_hashes"}
    fh = by_name(results)["file_hashes"]
    assert fh.examples == [named] and "folder draftset does not write" in fh.summary
    assert fh.details["messages"] == [f"{named}: an empty folder, not one of the set's"]


def test_a_link_to_a_folder_in_a_set_fails_file_hashes(built, tmp_path):
    """A link to a folder is an entry of the set that nothing lists (its files are not walked:
    before, it passed unseen)."""
    folder = copy_set(built["all"], tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.parquet").write_bytes(b"PAR1")
    (folder / "more").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    fh = by_name(fast_checks(folder))["file_hashes"]
    assert fh.failed and fh.examples == ["more/"]
    assert fh.details["messages"] == ["more/: a link to a folder, not one of the set's"]


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (("counts",), [], "counts is a list, expected an object"),
        (("counts", "per_source", "chats", "written"), "7", "is a string, expected an integer"),
        (("totals", "rows"), None, "totals.rows is null"),
        (("options",), "all", "options is a string"),
        (("options", "max_length"), "4096", "options.max_length is a string"),
        (("tokenizer", "vocab_size"), "151936", "tokenizer.vocab_size is a string"),
        (("files",), ["a"], "files is a list"),
        (("inputs", 0, "files"), {"a": 1}, "inputs[0].files is an object"),
        (("template", "eot_tokens"), [1], "template.eot_tokens[0] is an integer"),
        (("counts", "total", "rejected_by_reason"), {"x": "1"}, "rejected_by_reason.x"),
    ],
)
def test_manifest_field_of_the_wrong_type_is_one_line_exit_2(
    built, tmp_path, capsys, path, value, said
):
    """verify and report stopped with a traceback (TypeError, AttributeError) before."""

    def report_main(argv: list[str]) -> int:
        return cli_main(["report", *argv])

    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    node = m
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    save_manifest(folder, m)
    for run in (lambda: main([str(folder)]), lambda: report_main([str(folder)])):
        assert run() == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "manifest.json is malformed" in err[0] and said in err[0], err


@pytest.fixture(scope="module")
def tool_loop_set(tmp_path_factory) -> Path:
    """Qwen3.6, thinking on: a tool loop whose call has empty reasoning (issue 24, item 2)."""
    root = tmp_path_factory.mktemp("tokens")
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    row = {
        "id": "loop",
        "tools": next(r["tools"] for r in ROWS if "tools" in r),
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": '{"temp": 21}'},
            {"role": "assistant", "content": "It is 21C.", "reasoning_content": "It said 21."},
        ],
    }
    src = write_jsonl(root / "loop.jsonl", [row])
    opts = BuildOptions(
        [Source("loop", src)],
        str(qwen3_tokenizer_dir()),
        root / "set",
        workers=1,
        chat_template_path=str(trl_template("qwen3_6")),
    )
    return run_build(opts).out


def test_turn_after_retokenized_history_is_context_and_verify_agrees(tool_loop_set, tmp_path):
    """Build keeps the final turn as context (its served prompt tokenizes the empty think block
    of the call as one ``\\n\\n``); verify re-derives that on its own, counts it, and fails the
    row the old rule wrote (that turn supervised on tokens the model never saw)."""
    m = manifest(tool_loop_set)
    ctx = m["counts"]["per_source"]["loop"]["context_turns_by_reason"]
    assert ctx.get("history_tokens_differ") == 1
    assert not failed(verify(tool_loop_set))
    folder = copy_set(tool_loop_set, tmp_path)
    rows = read_rows(folder)
    (row,) = rows
    ids = row["input_ids"]
    # supervise the final turn as the text-prefix rule did: after its last <think>\n
    start = len(ids) - 1 - ids[::-1].index(151667) + 2
    row["loss_mask"][start:-1] = [1] * (len(ids) - 1 - start)
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert "mask_fidelity" in failed(results)
    msgs = by_name(results)["mask_fidelity"].details["messages"]
    assert any("served prompt's tokens" in m for m in msgs), msgs


@pytest.mark.parametrize(
    ("section", "value"),
    [({"dedup": "x"}, "mixture.dedup is a string"), ({"dedup": [{"removed_total": "x"}]}, "")],
)
def test_malformed_mixture_section_is_one_line_for_report(built, tmp_path, capsys, section, value):
    """report read `mixture.dedup` unchecked (TypeError / ValueError tracebacks)."""

    def report_main(argv: list[str]) -> int:
        return cli_main(["report", *argv])

    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    m["mixture"] = section
    save_manifest(folder, m)
    assert report_main([str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "manifest.json is malformed: mixture.dedup" in err[0] and value in err[0]
    )


@pytest.mark.parametrize("fmt", ["draftset/2", "draftset/1.5", "draftset/"])
def test_a_manifest_of_another_format_version_is_refused_not_guessed(built, tmp_path, capsys, fmt):
    """A manifest saying another `format` (a later draftset's layout) used to be read as this
    version's and could pass; it is one line, exit 2, naming the format."""
    out = copy_set(built["all"], tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["format"] = fmt
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert cli_main(["verify", str(out), "--fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("draftset: error: ")
    assert f"manifest format '{fmt}' is not the one this draftset reads ('draftset/1')" in err[0]


# --- the same text in other tokens ---------------------------------------------------------------
def respell(ids: list[int], at: int, tok: Tokenizer) -> list[int]:
    """``ids`` with the token at ``at`` replaced by its text spelled as ordinary tokens (a
    special token's text encoded as text, or a word split into pieces): the decoded row is
    the same, the tokens are not the model's."""
    text = tok.decode([ids[at]], skip_special_tokens=False)
    pieces = [tok.token_to_id(c) for c in text] if len(text) > 1 else []
    if not pieces or None in pieces:  # byte-level pieces of a word: its first byte, the rest
        head = tok.encode(text[:1], add_special_tokens=False).ids
        pieces = head + tok.encode(text[1:], add_special_tokens=False).ids
    assert tok.decode(pieces, skip_special_tokens=False) == text and pieces != [ids[at]]
    return pieces


@pytest.mark.parametrize("name", ["all", "each"])
@pytest.mark.parametrize("where", ["context", "supervised"])
def test_the_same_text_in_other_tokens_fails_mask_fidelity(built, tmp_path, tok, name, where):
    """A row whose decoded text is right but whose tokens are not the model's: the context
    before the (only) supervised run with `<|im_start|>` spelled as six ordinary tokens, or the
    supervised reasoning with `</think>` spelled as `</`, `think`, `>` (a pipeline that encoded
    the prompt or the answer with special tokens off, or across a different split). verify
    compared the first run's context and every run only as decoded text, and passed both."""
    folder = copy_set(built[name], tmp_path)
    rows = read_rows(folder)
    rid = "think" if name == "all" else "think#0"
    row = find_row(rows, rid)
    ids, mask = row["input_ids"], row["loss_mask"]
    if where == "context":
        special = tok.token_to_id("<|im_start|>")
        at = max(i for i in range(len(ids)) if ids[i] == special and not mask[i])
    else:
        at = ids.index(tok.token_to_id("</think>"))
        assert mask[at] == 1
    pieces = respell(ids, at, tok)
    row["input_ids"] = ids[:at] + pieces + ids[at + 1 :]
    row["loss_mask"] = mask[:at] + [mask[at]] * len(pieces) + mask[at + 1 :]
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}, [r.to_json() for r in results if r.failed]
    assert by_name(results)["mask_fidelity"].examples == [rid]


def test_a_column_draftset_does_not_write_fails_structure(built, tmp_path):
    """A `labels` column beside `loss_mask` (here every token, as `input_ids`): trainers that
    read `labels` by convention learn a mask that contradicts the set's. verify checked only
    that its own columns were there and passed it (with the column also in the features)."""
    folder = copy_set(built["all"], tmp_path)
    rows = read_rows(folder)
    for r in rows:
        r["seq_len"] = len(r["input_ids"])
        r["labels"] = list(r["input_ids"])
    schema = arrow_schema().append(pa.field("labels", pa.list_(pa.int32())))
    table = pa.Table.from_pylist(rows, schema=schema)
    with (
        pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as w,
    ):
        w.write_table(table)
    info = json.loads((folder / "dataset_info.json").read_text())
    info["features"]["labels"] = {"feature": {"dtype": "int32", "_type": "Value"}, "_type": "List"}
    (folder / "dataset_info.json").write_text(json.dumps(info))
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"structure"}, [r.to_json() for r in results if r.failed]
    assert "column labels" in by_name(results)["structure"].summary


@pytest.mark.parametrize(
    ("key", "value"),
    [("_format_columns", ["input_ids", "seq_len"]), ("_output_all_columns", True)],
)
def test_a_loader_setting_draftset_does_not_write_fails_structure(built, tmp_path, key, value):
    """state.json's `_format_columns` naming only some columns hides `loss_mask` from
    `load_from_disk`; verify passed it."""
    folder = copy_set(built["all"], tmp_path)
    state = json.loads((folder / "state.json").read_text())
    state[key] = value
    (folder / "state.json").write_text(json.dumps(state))
    reseal(folder)
    assert failed(verify(folder)) == {"structure"}


@pytest.mark.parametrize(
    ("name", "key", "value", "needle"),
    [
        ("dataset_info.json", "description", "a hand-made set", "dataset_info.json is not"),
        ("dataset_info.json", "splits", {"train": {"num_examples": 1}}, "dataset_info.json is not"),
        ("state.json", "_indexes", {}, "state.json has keys draftset does not write: ['_indexes']"),
    ],
)
def test_metadata_draftset_does_not_write_fails_structure(
    built, tmp_path, name, key, value, needle
):
    """Build writes dataset_info.json and state.json whole, the same for every set; verify
    compared only the features and the loader settings, so an edited description, a `splits`
    record of another size (what `info.splits` then says) or a key of another writer passed."""
    folder = copy_set(built["all"], tmp_path)
    obj = json.loads((folder / name).read_text())
    obj[key] = value
    (folder / name).write_text(json.dumps(obj))
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"structure"}, [r.to_json() for r in results if r.failed]
    assert needle in json.dumps(by_name(results)["structure"].to_json())


@pytest.mark.parametrize(("key", "value"), [("max_samples", 3), ("seed", 7)])
def test_selection_record_other_than_the_options_fails_row_identity(built, tmp_path, key, value):
    """The manifest records the sampling twice, `options` and `selection`; verify re-ran the
    selection with the options' and never read the other: `selection.max_samples: 3` on a set
    of every row (what `report` and a reader of the manifest take for the sampling) passed."""
    folder = copy_set(built["all"], tmp_path)
    m = manifest(folder)
    m["selection"][key] = value
    save_manifest(folder, m)
    results = verify(folder)
    assert failed(results) == {"row_identity"}, [r.to_json() for r in results if r.failed]
    messages = by_name(results)["row_identity"].details["messages"]
    assert any(f"selection.{key}: manifest {value}" in x for x in messages), messages


def test_an_unreadable_shard_is_named_by_structure(built, tmp_path):
    """A shard rewritten in Arrow's file format (not the stream `datasets` writes and reads):
    structure failed with pyarrow's words alone (`cannot read Arrow data: Expected to read
    1330795073 metadata bytes, ...`), not saying which of the set's shards it was."""
    folder = copy_set(built["all"], tmp_path)
    table = pa.Table.from_pylist(read_rows(folder), schema=arrow_schema())
    shard = folder / "data-00000-of-00001.arrow"
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    structure = by_name(verify(folder))["structure"]
    assert structure.failed
    assert "cannot read Arrow data: data-00000-of-00001.arrow: " in structure.summary


@pytest.mark.parametrize("new", ["multi#01", "multi#7"])
@pytest.mark.parametrize("sample", [None, 1])
def test_each_row_id_naming_no_assistant_turn_fails_row_identity(built, tmp_path, new, sample):
    """`--turns each` rows are `id#k`, k the assistant turn (0 .. answers - 1). A row renamed
    `multi#01` or `multi#7` (multi has 2 answers) passed a sampled verify that did not pick it:
    row_identity took any digits after `#` for a turn of its conversation."""
    folder = copy_set(built["each"], tmp_path)
    rows = read_rows(folder)
    find_row(rows, "multi#1")["id"] = new
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder, sample=sample, seed=3)
    assert "row_identity" in failed(results), [r.to_json() for r in results if r.failed]
    ident = by_name(results)["row_identity"]
    assert ident.examples == [new]
    assert (
        f"{new}: multi has 2 assistant turns (rows multi#0 .. multi#1)" in ident.details["messages"]
    )


def reject_instead(folder: Path, rid: str, reason: str, row: int) -> None:
    """Drop written row ``rid`` (input row ``row`` of source chats) and write a reject line for
    it instead, every count edited to match and the set resealed: a careful forger's (or a
    buggy stage's) silent loss of a good row under a plausible reason."""
    rows = read_rows(folder)
    write_rows(folder, [r for r in rows if r["id"] != rid])
    line = {"source": "chats", "row": row, "id": rid, "reason": reason, "message": "x"}
    path = folder / "rejects.jsonl"  # in input order, where build writes it
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    lines = sorted([*lines, line], key=lambda x: x["row"])
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    m = manifest(folder)
    # the row step's counts of the row too (verify recounts them): its supervised turns,
    # and whether it trained an empty think block
    mask = find_row(rows, rid)["loss_mask"]
    turns = sum(1 for i, k in enumerate(mask) if k and (i == 0 or not mask[i - 1]))
    tok = Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))
    ids = find_row(rows, rid)["input_ids"]
    supervised = tok.decode([t for t, k in zip(ids, mask, strict=True) if k], False)
    empty_think = supervised.startswith("<think>\n\n</think>")
    for c in (m["counts"]["per_source"]["chats"], m["counts"]["total"]):
        c["supervised_turns"] -= turns
        c["empty_think_rows"] -= empty_think
        c["written"] -= 1
        c["rejected"] += 1
        for key in ("rejected_by_reason", "row_rejects_by_reason"):
            c[key][reason] = c[key].get(reason, 0) + 1
    _forge_mixture(m, reason)
    save_manifest(folder, m)
    reseal(folder)


def _forge_mixture(m: dict, reason: str) -> None:
    """The `mixture` numbers of a dedup or decontamination reject, as the forger's own."""
    kind = {"duplicate": "exact", "near_duplicate": "near"}.get(reason)
    if kind is not None:
        steps = m["mixture"]["dedup"]
        if not any(d["kind"] == kind for d in steps):
            steps.append({"kind": kind, "checked": {"chats": 9}, "removed": {}, "pairs": []})
        step = next(d for d in steps if d["kind"] == kind)
    elif reason == "contaminated":
        step = m["mixture"].setdefault("decontamination", {"checked": {"chats": 9}})
        step["removed_by_benchmark"] = {"bench.jsonl": step.get("removed_total", 0) + 1}
        step.setdefault("benchmarks", {"bench.jsonl": {"items": 1}})
    else:
        return
    step["removed"]["chats"] = step.setdefault("removed", {}).get("chats", 0) + 1
    step["removed_total"] = step.get("removed_total", 0) + 1
    if "pairs" in step:
        step["pairs"] = [{"kept_source": "chats", "removed_source": "chats", "count": 1}]


@pytest.mark.parametrize(
    "reason", ["duplicate", "near_duplicate", "contaminated", "undesirable_example", "length"]
)
def test_a_good_row_rejected_for_what_reading_and_selection_decide_fails(built, tmp_path, reason):
    """A good conversation dropped as a duplicate (none was), contaminated (no benchmark
    given), ... passed: verify justified only the reasons of the row step. It re-reads and
    re-selects every row, so a reject those stages would have made and did not is wrong."""
    folder = copy_set(built["all"], tmp_path)
    reject_instead(folder, "sys", reason, 0)
    results = verify(folder)
    assert failed(results) == {"row_identity"}, [r.to_json() for r in results if r.failed]
    assert by_name(results)["row_identity"].examples == ["sys"]


def test_sampled_verify_also_justifies_a_share_of_the_rejections(built, tmp_path):
    """`--sample N` (the default above 20,000 rows) chose output rows only: a good row
    rejected `no_supervised_turn` has none, so no sample ever looked at it. The same share of
    input rows is now re-derived too, seeded: over seeds, about that share catches it."""
    folder = copy_set(built["all"], tmp_path)
    reject_instead(folder, "sys", "no_supervised_turn", 0)
    n = manifest(folder)["totals"]["rows"]
    caught = 0
    for seed in range(12):
        results = verify(folder, sample=n // 2, seed=seed)
        assert failed(results) <= {"mask_fidelity"}
        caught += "mask_fidelity" in failed(results)
    assert 2 <= caught <= 10, caught


def test_an_answer_that_copies_its_prompt_is_context_in_build_and_verify(tmp_path):
    """An answer that is its user turn verbatim (an echoing server, a pipeline that padded
    answers with the prompt): build supervised it and verify failed it as leakage, so
    `draftset run` on such a genuine server answer could never finish. Both now agree: a
    context turn, reason `prompt_copy`, like a placeholder."""
    rows = [
        {
            "id": "echo",
            "messages": [
                {"role": "user", "content": "Say something nice."},
                {"role": "assistant", "content": " Say something nice. "},
                {"role": "user", "content": "Now for real."},
                {"role": "assistant", "content": LONG},
            ],
        },
        {
            "id": "only",
            "messages": [
                {"role": "user", "content": "Hello there."},
                {"role": "assistant", "content": "Hello there."},
            ],
        },
    ]
    src = write_jsonl(tmp_path / "echo.jsonl", rows)
    out = run_build(
        BuildOptions([Source("e", src)], str(qwen3_tokenizer_dir()), tmp_path / "out", workers=1)
    ).out
    m = manifest(out)
    counts = m["counts"]["per_source"]["e"]
    assert counts["context_turns_by_reason"].get("prompt_copy") == 2
    assert counts["row_rejects_by_reason"] == {"no_supervised_turn": 1}
    results = verify(out)
    assert failed(results) == set(), [r.to_json() for r in results if r.failed]
    (row,) = read_rows(out)
    supervised = [t for t, k in zip(row["input_ids"], row["loss_mask"], strict=True) if k]
    tok = Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))
    assert "Say something nice" not in tok.decode(supervised)


def _decontaminated_set(tmp_path: Path) -> tuple[Path, Path]:
    """(the benchmark file, a set built with it: ROWS' "sys" row is contaminated)."""
    bench = write_jsonl(tmp_path / "bench.jsonl", [{"prompt": "How are river deltas formed?"}])
    src = write_jsonl(tmp_path / "chats.jsonl", ROWS[:2])
    opts = BuildOptions(
        [Source("chats", src)], str(qwen3_tokenizer_dir()), tmp_path / "out", workers=1
    )
    opts.decontaminate = [str(bench)]
    return bench, run_build(opts).out


def test_a_changed_benchmark_file_fails_sources(tmp_path):
    """verify re-selects with the `--decontaminate` files, whose sha256 the manifest records;
    an edited one changes which rows are contaminated, yet `sources` said "input files
    unchanged" and passed."""
    bench, out = _decontaminated_set(tmp_path)
    assert failed(verify(out)) == set()
    write_jsonl(bench, [{"prompt": "Explain deltas in detail to a child."}])
    results = verify(out)
    assert "sources" in failed(results)
    assert by_name(results)["sources"].examples == [str(bench)]


def test_a_prompt_line_whose_messages_changed_fails_row_identity(built, tmp_path):
    """prompts.jsonl is what `generate` answers: its line for p1 asked another question (the
    messages replaced, hashes resealed) and verify, comparing only the id, passed it."""
    folder = copy_set(built["all"], tmp_path)
    path = folder / "prompts.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    (p1,) = [x for x in lines if x["id"] == "p1"]
    p1["messages"] = [{"role": "user", "content": "Write a limerick instead."}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"row_identity"}, [r.to_json() for r in results if r.failed]
    assert by_name(results)["row_identity"].examples == ["p1"]


def test_a_row_rejected_too_long_that_fits_fails_mask_fidelity(built, tmp_path):
    """build rejects an over-long row from a byte bound without tokenizing it (docs/semantics.md
    "Length"): a wrong bound would lose rows silently, and verify passed a good 67-token row
    rejected `too_long` under --max-length 4096. It now counts the row's tokens as the contract
    writes them (context and generations each tokenized in one piece) and fails one that fits."""
    folder = copy_set(built["all"], tmp_path)
    reject_instead(folder, "sys", "too_long", 0)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}, [r.to_json() for r in results if r.failed]
    assert by_name(results)["mask_fidelity"].examples == ["sys"]


def test_a_row_rightly_rejected_too_long_passes(tmp_path):
    """The other side: a row truly over --max-length (beside a short one that is written)."""
    short = chat("short", "Hi", "Hello to you, my friend, on this fine day.")
    out = build_rows(tmp_path, [ROWS[0], short], max_length=40)
    assert manifest(out)["counts"]["total"]["rejected_by_reason"] == {"too_long": 1}
    assert "mask_fidelity" not in failed(verify(out))


def test_an_ok_answer_whose_reasoning_the_template_drops_is_context_in_build_and_verify(
    tmp_path,
):
    """ "OK" with recorded reasoning under Llama-3.2 (which renders no reasoning): build
    supervised it (answer + reasoning is no placeholder), verify failed the supervised "OK" as
    a placeholder. As rendered it is one: both make it context (`placeholder_answer`)."""
    from conftest import llama32_tokenizer_dir

    rows = [
        {
            "id": "ok",
            "messages": [
                {"role": "user", "content": "Ready?"},
                {"role": "assistant", "content": " OK. ", "reasoning_content": "Yes, ready."},
                {"role": "user", "content": "How are river deltas formed?"},
                {"role": "assistant", "content": LONG},
            ],
        }
    ]
    src = write_jsonl(tmp_path / "ok.jsonl", rows)
    opts = BuildOptions([Source("o", src)], str(llama32_tokenizer_dir()), tmp_path / "o", workers=1)
    opts.chat_template_path = str(trl_template("llama3_2"))
    out = run_build(opts).out
    assert manifest(out)["counts"]["total"]["context_turns_by_reason"] == {"placeholder_answer": 1}
    results = verify(out)
    assert failed(results) == set(), [r.to_json() for r in results if r.failed]


def drop_turn_under(folder: Path, reason: str, turns: int = 0) -> None:
    """Drop the `--turns each` row `multi#1` for a reject line of ``reason`` at the end of
    rejects.jsonl, the reject count (and ``turns`` supervised turns) edited, the set resealed."""
    write_rows(folder, [r for r in read_rows(folder) if r["id"] != "multi#1"])
    line = {"source": "chats", "row": 7, "id": "multi#1", "reason": reason, "message": "x"}
    with (folder / "rejects.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    m = manifest(folder)
    for c in (m["counts"]["per_source"]["chats"], m["counts"]["total"]):
        c["row_rejects_by_reason"][reason] = c["row_rejects_by_reason"].get(reason, 0) + 1
        c["supervised_turns"] -= turns
    save_manifest(folder, m)
    reseal(folder)


@pytest.mark.parametrize(
    "reason",
    ["no_supervised_turn", "template_drops_content", "template_error", "unsupported_content"],
)
def test_a_turn_row_of_each_dropped_under_a_reason_verify_derives_fails(built, tmp_path, reason):
    """`--turns each`: a good turn row (`multi#1`, its sibling `multi#0` written) dropped
    under a reason verify re-derives passed: turn-level reject lines beside written rows were
    never justified (a whole conversation's were)."""
    folder = copy_set(built["each"], tmp_path)
    drop_turn_under(folder, reason)
    results = verify(folder)
    assert "mask_fidelity" in failed(results), [r.to_json() for r in results if r.failed]
    assert "multi#1" in by_name(results)["mask_fidelity"].examples


@pytest.mark.parametrize("reason", ["template_timeout", "template_too_large"])
@pytest.mark.parametrize("sample", [None, 1])
def test_a_turn_row_of_each_dropped_as_a_render_bound_fails(built, tmp_path, reason, sample):
    """`--turns each`: a good turn row (`multi#1`) dropped with a `template_timeout` or
    `template_too_large` line, every count edited, passed: verify re-derives neither for a
    turn. Build meets a render bound planning the whole conversation and rejects it whole
    (one line, its id), never one turn beside rows it wrote; so such a line beside its
    conversation's rows is wrong, found without rendering (a sampled run too)."""
    folder = copy_set(built["each"], tmp_path)
    drop_turn_under(folder, reason, turns=1)
    results = verify(folder, sample=sample)
    assert failed(results) == {"mask_fidelity"}, [r.to_json() for r in results if r.failed]
    mask = by_name(results)["mask_fidelity"]
    assert mask.examples == ["multi#1"]
    assert any("beside the conversation's written rows" in x for x in mask.details["messages"])


@pytest.mark.parametrize("turns", ["all", "each"])
def test_reject_lines_out_of_input_order_fail_row_identity(tmp_path, turns):
    """Build writes rejects.jsonl in input order (deterministic for any --workers, as the
    rows and prompts.jsonl, whose order verify checked); two lines swapped passed."""
    rows = [
        {"id": "odd", "messages": [{"role": "wizard", "content": "hi"}]},  # reading
        chat("good", "How are river deltas formed?", LONG),
        chat("echo", "Say it back.", "Say it back."),  # the row step: no_supervised_turn
        {"id": "shape", "text": "no known shape"},  # reading
    ]
    folder = build_rows(tmp_path, rows, turns=turns)
    path = folder / "rejects.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert [json.loads(x)["id"] for x in lines] == ["odd", "echo", "shape"]
    assert failed(verify(folder)) == set()
    lines[0], lines[1] = lines[1], lines[0]
    path.write_text("".join(lines), encoding="utf-8")
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"row_identity"}, [r.to_json() for r in results if r.failed]
    ident = by_name(results)["row_identity"]
    assert ident.examples == ["echo"]
    assert "rejects.jsonl line 1 (echo) comes before line 2 (odd)" in ident.details["messages"][0]


def test_a_too_long_reject_under_truncate_fails(tmp_path):
    """`--truncation truncate` cuts a long row, never rejects it `too_long`: such a line was
    never checked there."""
    folder = build_rows(tmp_path, ROWS[:2], "t", truncation="truncate")
    reject_instead(folder, "sys", "too_long", 0)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}, [r.to_json() for r in results if r.failed]
    assert by_name(results)["mask_fidelity"].examples == ["sys"]


@pytest.mark.parametrize("reason", ["too_few_supervised_tokens", "internal_error"])
def test_a_good_row_rejected_too_few_supervised_or_internal_error_fails(built, tmp_path, reason):
    """A good 40-token answer dropped as `too_few_supervised_tokens` (under the default
    --min-supervised-tokens 1) or as `internal_error` (a draftset bug met on the row) passed:
    verify justified neither. It now counts the supervised tokens the contract writes, and a
    row it derives cleanly was no bug's to lose."""
    folder = copy_set(built["all"], tmp_path)
    reject_instead(folder, "sys", reason, 0)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}, [r.to_json() for r in results if r.failed]
    assert by_name(results)["mask_fidelity"].examples == ["sys"]


def test_rows_rightly_rejected_too_few_supervised_tokens_pass(tmp_path):
    """The other side: a short answer under --min-supervised-tokens 20, and (truncating) a
    row whose first --max-length tokens are all context, are rightly rejected."""
    out = build_rows(tmp_path, [ROWS[0], chat("short", "Hi", "Hello!")], min_supervised_tokens=20)
    assert manifest(out)["counts"]["total"]["rejected_by_reason"] == {
        "too_few_supervised_tokens": 1
    }
    assert failed(verify(out)) == set()

    long_prompt = chat("lp", "Summarise: " + LONG * 3, LONG)
    friend = chat("friend", "Hi", "Hello to you, my friend, on this fine day.")
    out = build_rows(tmp_path, [long_prompt, friend], "t", truncation="truncate", max_length=40)
    assert manifest(out)["counts"]["total"]["rejected_by_reason"] == {
        "too_few_supervised_tokens": 1
    }
    assert failed(verify(out)) == set()


def test_a_truncated_row_rejected_too_few_supervised_tokens_that_has_them_fails(tmp_path):
    """Truncating: a row whose first --max-length tokens hold a whole answer, rejected as
    `too_few_supervised_tokens`, is a good row lost."""
    folder = build_rows(tmp_path, ROWS[:2], "t", truncation="truncate", max_length=80)
    reject_instead(folder, "sys", "too_few_supervised_tokens", 0)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}, [r.to_json() for r in results if r.failed]
    assert by_name(results)["mask_fidelity"].examples == ["sys"]


@pytest.mark.parametrize("mode", ["all", "each"])
def test_an_answer_weighted_zero_is_context_in_build_and_verify(tmp_path, mode):
    """OpenAI fine-tuning's `weight: 0` (LLaMA-Factory's `loss_weight: 0.0`) on an answer
    says "do not train on it": build trained it. Now it is context (`weight_zero`) in build
    and verify alike, and a row whose every answer is weighted 0 is `no_supervised_turn`."""
    rows = [
        {
            "id": "w",
            "messages": [
                {"role": "user", "content": "Capital of France?"},
                {"role": "assistant", "content": "Paris, as if you did not know.", "weight": 0},
                {"role": "user", "content": "How are river deltas formed?"},
                {"role": "assistant", "content": LONG, "weight": 1},
            ],
        },
        {
            "id": "none",
            "messages": [
                {"role": "user", "content": "Say A"},
                {"role": "assistant", "content": "BAD ANSWER", "loss_weight": 0.0},
            ],
        },
    ]
    src = write_jsonl(tmp_path / "w.jsonl", rows)
    opts = BuildOptions([Source("w", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", workers=1)
    opts.turns = mode
    out = run_build(opts).out
    counts = manifest(out)["counts"]["total"]
    assert counts["context_turns_by_reason"] == {"weight_zero": 2}
    assert counts["row_rejects_by_reason"] == {"no_supervised_turn": 1}
    tok = Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))
    for row in read_rows(out):
        supervised = [t for t, k in zip(row["input_ids"], row["loss_mask"], strict=True) if k]
        assert "Paris" not in tok.decode(supervised)
        assert "Rivers carry sediment" in tok.decode(supervised)
    results = verify(out)
    assert failed(results) == set(), [r.to_json() for r in results if r.failed]


@pytest.mark.parametrize("given", ["file", "empty-folder", "missing"])
def test_a_tokenizer_that_is_no_tokenizer_folder_is_exit_2_before_any_check(
    built, tmp_path, capsys, monkeypatch, given
):
    """`verify --tokenizer FILE` (or a folder without tokenizer files) ran every check, failed
    the tokenizer check, exited 1 and overwrote the set's recorded verify result with a FAIL;
    `build` and `show` refuse the same mistake up front. One line, exit 2, before any check,
    verify.json as it was."""
    import draftset.checks.verify as checks

    folder = copy_set(built["all"], tmp_path)
    assert main([str(folder), "--sample", "1"]) == 0
    capsys.readouterr()
    record = (folder / "verify.json").read_bytes()
    tok = tmp_path / "tok"
    if given == "file":
        tok.write_text("not a tokenizer")
    elif given == "empty-folder":
        tok.mkdir()

    def forbidden(*_a, **_k):
        raise AssertionError("a check ran before the tokenizer was checked")

    monkeypatch.setattr(checks, "_fast", forbidden)
    assert main([str(folder), "--tokenizer", str(tok)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("draftset: error: "), err
    needle = {
        "file": "tokenizer path is not a folder",
        "empty-folder": "holds no tokenizer files",
        "missing": "tokenizer folder not found",
    }[given]
    assert needle in err and str(tok) in err, err
    assert (folder / "verify.json").read_bytes() == record


def test_removed_by_benchmark_naming_a_benchmark_the_set_never_used_fails(tmp_path):
    """`removed_by_benchmark` re-keyed to a file the build never decontaminated with still
    summed right, and passed `accounting` (docs-vs-code probe, session 25): its keys must be
    the decontamination's benchmark files."""
    _, out = _decontaminated_set(tmp_path)
    dec = manifest(out)["mixture"]["decontamination"]
    assert sum(dec["removed_by_benchmark"].values()) == 1, dec
    assert failed(verify(out)) == set()
    m = manifest(out)
    m["mixture"]["decontamination"]["removed_by_benchmark"] = {"/tmp/x.jsonl": 1}
    save_manifest(out, m)
    results = verify(out)
    assert "accounting" in failed(results), [r.to_json() for r in results if r.failed]
    assert "/tmp/x.jsonl" in json.dumps(by_name(results)["accounting"].to_json())


# --- files the set's layout does not account for -------------------------------------------------
@pytest.mark.parametrize(
    "name", ["data/train-00000-of-00001.parquet", "README.md", "extra.parquet", "sub/notes.txt"]
)
def test_a_listed_file_that_is_not_one_of_the_sets_fails_file_hashes(built, tmp_path, name):
    """A file listed in the manifest with its sha256 is still no part of the set unless the
    set's layout accounts for it: a Parquet shard of another build beside an Arrow set is what
    `load_dataset(DIR)` reads. verify passed it once the forger added its digest."""
    folder = copy_set(built["all"], tmp_path)
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"PAR1 a shard of another build")
    m = manifest(folder)
    m["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    save_manifest(folder, m)
    results = fast_checks(folder)
    assert failed(results) == {"file_hashes"}, [r.to_json() for r in results if r.failed]
    fh = by_name(results)["file_hashes"]
    assert fh.examples == [name] and "not one of the set's files" in fh.summary


def test_a_shard_state_json_lists_under_another_name_fails_file_hashes(built, tmp_path):
    """state.json and the manifest both naming a shard draftset never names (a copy under
    a name of the user's): the loader reads it, build never writes it."""
    folder = copy_set(built["all"], tmp_path)
    (folder / "data-00000-of-00001.arrow").rename(folder / "train.arrow")
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"] = [{"filename": "train.arrow"}]
    (folder / "state.json").write_text(json.dumps(state))
    m = manifest(folder)
    m["files"]["train.arrow"] = m["files"].pop("data-00000-of-00001.arrow")
    m["files"]["state.json"] = hashlib.sha256((folder / "state.json").read_bytes()).hexdigest()
    save_manifest(folder, m)
    fh = by_name(fast_checks(folder))["file_hashes"]
    assert fh.failed and fh.examples == ["train.arrow"], fh.to_json()


# --- row order -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "first", "second"), [("each", "multi#0", "multi#1"), ("all", "sys", "ph")]
)
def test_rows_out_of_input_order_fail_row_identity_naming_the_pair(
    built, tmp_path, name, first, second
):
    """Two turn rows of one conversation swapped (`--turns each`) passed: both belong to the
    same input row, and the order was only checked between input rows. Rows are in input
    order (caches are keyed by row index); the failure names the first pair out of order."""
    folder = copy_set(built[name], tmp_path)
    rows = read_rows(folder)
    i, j = read_ids(folder).index(first), read_ids(folder).index(second)
    assert j == i + 1
    rows[i], rows[j] = rows[j], rows[i]
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"row_identity"}, [r.to_json() for r in results if r.failed]
    ident = by_name(results)["row_identity"]
    assert ident.examples == [second]
    (msg,) = ident.details["messages"]
    assert f"row {i} ({second}) comes before row {j} ({first})" in msg, msg


def test_context_after_the_last_supervised_run_in_other_tokens_fails_mask_fidelity(
    tool_loop_set, tmp_path, tok
):
    """The context after the row's last supervised run (here the final turn, context:
    `history_tokens_differ`) with `user` spelled `u`, `s`, `e`, `r`: the same text, a split
    the tokenizer never makes. The token rule covered only the tokens before each run."""
    folder = copy_set(tool_loop_set, tmp_path)
    rows = read_rows(folder)
    (row,) = rows
    ids, mask = row["input_ids"], row["loss_mask"]
    last_run_end = max(i for i, m in enumerate(mask) if m) + 1
    at = next(i for i in range(last_run_end, len(ids)) if tok.decode([ids[i]]) == "user")
    pieces = respell(ids, at, tok)
    row["input_ids"] = ids[:at] + pieces + ids[at + 1 :]
    row["loss_mask"] = mask[:at] + [0] * len(pieces) + mask[at + 1 :]
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert failed(results) == {"mask_fidelity"}, [r.to_json() for r in results if r.failed]
    (msg,) = by_name(results)["mask_fidelity"].details["messages"]
    assert f"at token {at}" in msg and "after the last supervised run" in msg, msg


def _float_mask_features(schema: pa.Schema) -> pa.Schema:
    meta = json.loads(schema.metadata[b"huggingface"])
    meta["info"]["features"]["loss_mask"]["feature"]["dtype"] = "float32"
    return schema.with_metadata({b"huggingface": json.dumps(meta).encode()})


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        (_float_mask_features, "schema metadata"),
        (lambda s: s.remove_metadata(), "schema metadata"),
        (
            lambda s: pa.schema([s.field(n) for n in reversed(s.names)], metadata=s.metadata),
            "columns are in the order",
        ),
    ],
    ids=["loss_mask_float32_in_the_features", "no_metadata", "columns_reordered"],
)
def test_a_shard_schema_draftset_does_not_write_fails_structure(built, tmp_path, tamper, said):
    """The shard's own `huggingface` metadata is what `datasets` reads the features from (a
    loss_mask declared float32 is cast so); the column order is what positional readers see.
    verify compared only the columns' names and types and passed all three."""
    folder = copy_set(built["all"], tmp_path)
    table = pa.Table.from_pylist(read_rows(folder), schema=arrow_schema())
    schema = tamper(table.schema)
    table = table.select(schema.names).replace_schema_metadata(schema.metadata)
    with (
        pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as w,
    ):
        w.write_table(table)
    reseal(folder)
    results = fast_checks(folder)
    assert failed(results) == {"structure"}, [r.to_json() for r in results if r.failed]
    assert said in by_name(results)["structure"].summary


def test_a_set_of_prompts_only_passes_verify(tmp_path):
    """A source of prompts only builds a set with no rows (its prompts in prompts.jsonl, for
    generate): build says "verify passed", and a full verify must agree — speculators' loader
    refuses an empty train split, so its check is a skip there, as drafter_fitness's is (it
    failed: "train split is empty", exit 1; outside newcomer probe, session 27)."""
    from rows import build_rows

    from draftset.checks.verify import run_verify

    prompts = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"Q{i}?"}]} for i in range(3)
    ]
    out = build_rows(tmp_path / "p", prompts, qwen3_tokenizer_dir(), dedup="none")
    assert (out / "prompts.jsonl").read_text().count("\n") == 3
    checks = {c.name: c for c in run_verify(out, speculators=True, record=False)}
    assert [n for n, c in checks.items() if c.failed] == []
    assert checks["speculators_load"].status == "skip"  # (speculators: the test setup's)
    assert "no rows" in checks["speculators_load"].summary


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_unreadable_shards_fail_structure_alone(built, tmp_path, damage):
    """A shard deleted or overwritten: structure fails, naming it; the checks that compare the
    manifest with the data have no data to compare and say so (skip), instead of failing as a
    cascade behind structure (accounting listed 18 problems and token_freq a recount of nothing;
    outside newcomer probe, session 27). The manifest's own balance is still checked."""
    folder = copy_set(built["all"], tmp_path)
    shard = folder / "data-00000-of-00001.arrow"
    if damage == "missing":
        shard.unlink()
    else:
        shard.write_bytes(b"not arrow")
    res = by_name(verify(folder))
    assert res["structure"].status == "fail"
    assert res["token_freq"].status == "skip" and "structure" in res["token_freq"].summary
    assert res["accounting"].status == "pass", res["accounting"].summary
    assert "not compared" in res["accounting"].summary
    # a manifest out of balance still fails accounting
    m = manifest(folder)
    m["counts"]["per_source"]["chats"]["written"] += 1
    save_manifest(folder, m)
    assert by_name(verify(folder))["accounting"].status == "fail"


def test_pretokenized_rows_whose_mask_runs_past_the_end_of_turn_pass_verify(tmp_path, tok):
    """Pre-tokenized rows from a `{% generation %}` mask such as trl's qwen3_training (it tags
    `<|im_end|>\\n`: the newline after the end-of-turn token is supervised) were built, exit 0,
    and then failed verify's truncation check on every row: build counted as truncated only
    rows its length rule cut, verify every row whose last supervised token is no stop token.
    One definition now (the row's own tokens): such a row ends inside an answer and is counted
    so; under --truncation drop it is no cut, so no complaint (outside scale probe)."""
    ids = tok.encode(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello there.<|im_end|>\n"
    ).ids
    start = ids.index(tok.token_to_id("<|im_start|>"), 1) + 1  # from "assistant" on, as tagged
    rows = [
        {"id": f"t{i}", "input_ids": ids, "loss_mask": [0] * start + [1] * (len(ids) - start)}
        for i in range(2)
    ]
    src = write_jsonl(tmp_path / "pre.jsonl", rows)
    opts = BuildOptions(
        [Source("pre", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", workers=1, dedup="none"
    )
    out = run_build(opts).out
    res = by_name(verify(out))
    assert res["truncation"].status == "pass", res["truncation"].summary
    assert manifest(out)["counts"]["per_source"]["pre"]["truncated"] == 2
    assert failed(verify(out)) <= {"drafter_fitness"}


@pytest.mark.parametrize("new", ["multi#\u00b2", "multi#\u0663"])
def test_each_row_id_with_a_non_ascii_digit_fails_row_identity_without_a_crash(
    built, tmp_path, new
):
    """`str.isdigit` holds for `²` and `٣`: a forged `multi#²` reached `int()` (ValueError:
    a traceback instead of verify's verdict), `multi#٣` passed as turn 3. Build writes ASCII."""
    folder = copy_set(built["each"], tmp_path)
    rows = read_rows(folder)
    find_row(rows, "multi#1")["id"] = new
    write_rows(folder, rows)
    reseal(folder)
    results = verify(folder)
    assert "row_identity" in failed(results), [r.to_json() for r in results if r.failed]


def test_a_draft_vocabulary_file_named_with_a_non_ascii_digit_fails_without_a_crash(
    built, tmp_path
):
    """`d2t-².npy` beside the set: `str.isdigit` let `²` reach `int()` (a ValueError
    traceback from the draft_vocab check instead of verify's verdict)."""
    folder = copy_set(built["all"], tmp_path)
    np.save(folder / "d2t-\u00b2.npy", np.zeros(2, dtype=np.int64))
    results = verify(folder)
    assert "file_hashes" in failed(results)


# --- the server's own ids, kept by build, are the only tokens the run may hold -----------------
def test_a_run_re_encoded_where_build_keeps_the_servers_ids_fails(tmp_path: Path) -> None:
    """A generation whose server ids (`metadata.token_ids`) spell it is written with those ids
    (docs/semantics.md: the model may sample a tokenization other than the canonical one), so
    that is the only spelling build writes. verify accepted either `tokenizer(G)` or the
    server's ids: a set whose run held the canonical tokens where the server's were kept, its
    `server_ids_used` count left as it was, passed. The run must now be the ids build keeps."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    odd = tok.convert_tokens_to_ids(["F", "ine", "."])  # the server left the end-of-turn off
    canonical = tok("Fine.<|im_end|>", add_special_tokens=False).input_ids
    assert tok.decode(odd) == "Fine." and odd + canonical[-1:] != canonical
    kept = chat("kept", "How are you?", "Fine.")
    kept["metadata"] = {
        "chat_template_kwargs": {"enable_thinking": False},
        "token_ids": {"turns": [{"message": 1, "completion": odd}]},
    }
    plain = chat("plain", "And you?", "Fine.")  # no server ids: tokenizer(G)
    plain["metadata"] = {"chat_template_kwargs": {"enable_thinking": False}}
    built = build_rows(tmp_path, [kept, plain])
    assert failed(verify(built)) <= {"drafter_fitness"}  # rows this short: advice
    rows = read_rows(built)
    sup = [[i for i, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m] for r in rows]
    assert sup == [[*odd, canonical[-1]], canonical]  # build kept the server's ids
    assert manifest(built)["counts"]["per_source"]["chats"]["server_ids_used"] == 1

    folder = copy_set(built, tmp_path)
    r = find_row(rows, "kept")
    at = find_subsequence(r["input_ids"], [*odd, canonical[-1]])
    end = at + len(odd) + 1
    r["input_ids"] = r["input_ids"][:at] + canonical + r["input_ids"][end:]
    r["loss_mask"] = r["loss_mask"][:at] + [1] * len(canonical) + r["loss_mask"][end:]
    write_rows(folder, rows)
    reseal(folder)
    assert failed(fast_checks(folder)) <= {"drafter_fitness"}
    results = by_name(verify(folder))
    assert results["mask_fidelity"].status == "fail", results["mask_fidelity"].summary
    assert results["mask_fidelity"].examples == ["kept"]
    assert "server" in results["mask_fidelity"].summary


def _lax_build(monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    """Make build's planners skip the rule that makes an answer context for ``reason``, as a
    build that ignores it would, by patching the one function they call for it. Verify bound
    `turn_context_reason` at import, so its own derivation keeps every rule even while the
    patch is on (patching `other_stop` itself would reach verify's rule too)."""
    import draftset.mask.render as render_mod

    strict = render_mod.turn_context_reason

    def lax(*args: Any, **kwargs: Any) -> str | None:
        why = strict(*args, **kwargs)
        return None if why == reason else why

    monkeypatch.setattr(render_mod, "turn_context_reason", lax)


@pytest.mark.parametrize("turns", ["all", "each"])
def test_an_answer_ended_on_the_eos_where_the_template_writes_another_stop_is_context(
    tmp_path, monkeypatch, turns
):
    """vLLM says `stop_reason: null` for an answer its tokenizer's EOS ended, and `generate`
    records that (`{"eos": true}`). This Llama-3.2 tokenizer's EOS is `<|end_of_text|>` while the
    template writes `<|eot_id|>` after an answer: the row trained `<|eot_id|>`, never generated
    there. Context now (`other_stop_token`) in build and verify alike; under Qwen3, whose EOS is
    the template's `<|im_end|>`, the same record changes nothing."""

    def at_eos(rid: str) -> dict:
        row = chat(rid, f"Name a colour ({rid}).", f"Blue, like a clear summer sky ({rid}).")
        row["metadata"] = {"stop_tokens": [{"message": 1, "eos": True}]}
        return row

    rows = [at_eos("eos"), _stopped("eot", 128009), _stopped("none", None)]
    src = write_jsonl(tmp_path / "l.jsonl", rows)

    def build(name: str) -> Path:
        opts = BuildOptions([Source("o", src)], str(llama32_tokenizer_dir()), tmp_path / name)
        opts.chat_template_path = str(trl_template("llama3_2"))
        opts.workers, opts.turns = 1, turns
        return run_build(opts).out

    out = build("llama")
    assert manifest(out)["counts"]["total"]["context_turns_by_reason"] == {"other_stop_token": 1}
    assert sorted(r["id"].split("#")[0] for r in read_rows(out)) == ["eot", "none"]
    assert failed(verify(out)) <= {"drafter_fitness"}  # rows this short: advice
    _lax_build(monkeypatch, reasons.TURN_OTHER_STOP)
    lax = build("lax")
    monkeypatch.undo()
    assert len(read_rows(lax)) == 3
    assert "mask_fidelity" in failed(verify(lax))
    qwen = build_rows(tmp_path, [at_eos("q")], name="qwen", turns=turns)
    assert len(read_rows(qwen)) == 1
    assert "other_stop_token" not in manifest(qwen)["counts"]["total"]["context_turns_by_reason"]


def _stopped(rid: str, stop_id: int | None) -> dict:
    """A generated row whose answer ``generate`` recorded as ended by the stop token ``stop_id``
    (vLLM's ``stop_reason``; None: nothing recorded)."""
    row = chat(rid, f"Name a colour ({rid}).", f"Blue, like a clear summer sky ({rid}).")
    if stop_id is not None:
        row["metadata"] = {"stop_tokens": [{"message": 1, "id": stop_id}]}
    return row


@pytest.mark.parametrize("turns", ["all", "each"])
def test_an_answer_ended_on_another_stop_token_is_context_in_build_and_verify(
    tmp_path, monkeypatch, turns
):
    """Qwen3 may end an answer on `<|endoftext|>` (vLLM: `stop_reason: 151643`), where the template
    writes `<|im_end|>`: the row trained `<|im_end|>`, a token the model never generated there.
    That answer is context now (`other_stop_token`); one that ended on `<|im_end|>` (151645) or
    recorded no stop stays supervised; verify holds a set to the rule on its own."""
    rows = [
        _stopped("other", 151643),
        _stopped("same", 151645),
        _stopped("unknown", 10**9),
        _stopped("none", None),
    ]
    out = build_rows(tmp_path, rows, turns=turns)
    total = manifest(out)["counts"]["total"]
    assert total["context_turns_by_reason"] == {"other_stop_token": 2}, total
    assert sorted(r["id"].split("#")[0] for r in read_rows(out)) == ["none", "same"]
    assert not failed(verify(out))
    # a build that ignores the rule: verify, deriving on its own, fails the set
    _lax_build(monkeypatch, reasons.TURN_OTHER_STOP)
    lax = build_rows(tmp_path, rows, name="lax", turns=turns)
    monkeypatch.undo()
    assert len(read_rows(lax)) == 4
    assert failed(verify(lax))


def _called(rid: str, content: str | None, model_said: str, tok: Any) -> dict:
    """A Qwen3 tool loop as `generate` records it from vLLM: the call's message as the server's
    parsers returned it (``content``), and the completion ids of what the model generated
    (``model_said``, then `<|im_end|>`)."""
    call = {"id": "c1", "type": "function"}
    call["function"] = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather."}}
    tool["function"]["parameters"] = {"type": "object", "properties": {"city": {"type": "string"}}}
    ids = tok(model_said, add_special_tokens=False).input_ids
    ids.append(tok.convert_tokens_to_ids("<|im_end|>"))
    return {
        "id": rid,
        "tools": [tool],
        "messages": [
            {"role": "user", "content": f"Weather in Paris ({rid})?"},
            {
                "role": "assistant",
                "content": content,
                "reasoning_content": "\nLook it up.\n",
                "tool_calls": [call],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "21C"},
            {"role": "assistant", "content": f"It is 21C in Paris ({rid})."},
        ],
        "metadata": {"token_ids": {"turns": [{"message": 1, "completion": ids}]}},
    }


@pytest.mark.parametrize("turns", ["all", "each"])
def test_an_answer_whose_server_ids_spell_other_text_is_context_in_build_and_verify(
    tmp_path, monkeypatch, turns
):
    """vLLM 0.33's hermes parser returns a Qwen3 call written `</think>\\n\\nChecking.\\n
    <tool_call>` with the text before the call as content, `"\\n\\nChecking.\\n"`; Qwen3's
    template renders that message `Checking.\\n\\n<tool_call>`, a newline the model never
    wrote, and the server's completion ids (`generate --return-token-ids`) say so. The row
    supervised the template's text and verify passed it (both derive from the template; the ids
    were only counted `server_ids_mismatch`). Such an answer is context now
    (`server_completion_differs`); the same call recorded with its content stripped (vLLM's
    engine parsers) renders as generated and stays supervised on the server's ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    said = (
        '<think>\nLook it up.\n</think>\n\nChecking.\n<tool_call>\n{"name": "get_weather",'
        ' "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    rows = [
        _called("differs", "\n\nChecking.\n", said, tok),
        _called("same", "Checking.", said, tok),
    ]
    out = build_rows(tmp_path, rows, turns=turns)
    total = manifest(out)["counts"]["total"]
    assert total["context_turns_by_reason"].get("server_completion_differs") == 1, total
    assert total["server_ids_used"] == 1
    sup = {
        r["id"]: tok.decode([i for i, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m])
        for r in read_rows(out)
    }
    assert not any("Checking.\n\n<tool_call>" in s for s in sup.values()), sup
    assert any(s.startswith(said) for s in sup.values()), sup  # "same"'s call: as generated
    assert not failed(verify(out))
    # a build that ignores the rule: verify, deriving on its own, fails the set
    _lax_build(monkeypatch, reasons.TURN_SERVER_TEXT_DIFFERS)
    lax = build_rows(tmp_path, rows, name="lax", turns=turns)
    monkeypatch.undo()
    assert any("Checking.\n\n<tool_call>" in tok.decode(r["input_ids"]) for r in read_rows(lax))
    assert "mask_fidelity" in failed(verify(lax))
