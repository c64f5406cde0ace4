"""The mixture stage inside build (and verify): presets, dedup, decontamination, mode mix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, qwen3_tokenizer_dir
from rows import read_rows, write_jsonl

from draftset.checks.verify import run_verify
from draftset.cli import main
from draftset.config.options import BuildOptions
from draftset.pipeline.build import run_build
from draftset.sources.read import Source


def chat(i: int, q: str, a: str, reasoning: str | None = None, **meta) -> dict:
    answer = {"role": "assistant", "content": a}
    if reasoning:
        answer["reasoning_content"] = reasoning
    row = {"id": f"r{i}", "messages": [{"role": "user", "content": q}, answer]}
    if meta:
        row["metadata"] = meta
    return row


def build(tmp_path: Path, sources: list[Source], **kw):
    return run_build(
        BuildOptions(sources, str(qwen3_tokenizer_dir()), tmp_path / "out", workers=1, **kw)
    )


def assert_verifies(out: Path):
    # rows this short leave DFlash no anchor: drafter fitness is about size, not correctness
    results = run_verify(out, speculators=False)
    failed = [r for r in results if r.failed and r.name != "drafter_fitness"]
    assert failed == [], [(r.name, r.summary, r.details.get("messages")) for r in failed]


def test_exact_dedup_within_and_across_sources_is_the_default(tmp_path):
    a = write_jsonl(
        tmp_path / "a.jsonl", [chat(1, "Hi there", "Hello!"), chat(2, "hi   THERE", "hello!")]
    )
    b = write_jsonl(tmp_path / "b.jsonl", [chat(3, "Hi there", "Hello!"), chat(4, "Other", "Yes.")])
    res = build(tmp_path, [Source("a", a), Source("b", b)])
    assert [r["id"] for r in read_rows(res.out)] == ["r1", "r4"]
    rejects = [json.loads(x) for x in (res.out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["id"], r["reason"]) for r in rejects] == [("r2", "duplicate"), ("r3", "duplicate")]
    assert all("r1" in r["message"] for r in rejects)  # names the row it duplicates
    manifest = json.loads((res.out / "manifest.json").read_text())
    (exact,) = manifest["mixture"]["dedup"]
    assert {(p["kept_source"], p["removed_source"]): p["count"] for p in exact["pairs"]} == {
        ("a", "a"): 1,
        ("a", "b"): 1,
    }
    assert manifest["selection"]["dedup"] == "exact"
    assert_verifies(res.out)
    res2 = run_build(
        BuildOptions(
            [Source("a", a), Source("b", b)],
            str(qwen3_tokenizer_dir()),
            tmp_path / "o2",
            workers=1,
            dedup="none",
        )
    )
    assert res2.accounting.total().written == 4


def test_near_dedup_removes_paraphrased_prompts(tmp_path):
    pytest.importorskip(
        "datasketch", reason="datasketch is the near-dedup extra, installed by scripts/test.sh"
    )
    base = (
        "Write a short story about a lighthouse keeper who finds a message in a bottle on the shore"
    )
    rows = [
        chat(1, base, "Once upon a time..."),
        chat(2, base + " tonight", "It was a stormy night..."),  # nearly the same prompt
        chat(3, "Explain how photosynthesis works in plants step by step", "Light energy..."),
    ]
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    res = build(tmp_path, [Source("a", src)], dedup="near", near_dup_threshold=0.7)
    assert [r["id"] for r in read_rows(res.out)] == ["r1", "r3"]
    assert res.accounting["a"].rejected == {"near_duplicate": 1}
    assert_verifies(res.out)


def test_decontamination_removes_verbatim_benchmark_prompts_only(tmp_path):
    gsm = (
        "Natalia sold clips to 48 of her friends in April"
        " and then she sold half as many clips in May"
    )
    bench = tmp_path / "bench.txt"
    bench.write_text(gsm + "\n")
    rows = [
        chat(1, gsm + ". How many clips did she sell?", "72."),  # verbatim: contaminated
        chat(
            2, "Natalia sold some clips to friends in spring; how many in total?", "Unknown."
        ),  # paraphrase
    ]
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    res = build(tmp_path, [Source("a", src)], decontaminate=[str(bench)])
    assert [r["id"] for r in read_rows(res.out)] == ["r2"]
    assert res.accounting["a"].rejected == {"contaminated": 1}
    manifest = json.loads((res.out / "manifest.json").read_text())
    assert manifest["selection"]["decontaminate"][0]["path"] == str(bench)
    assert manifest["mixture"]["decontamination"]["removed_total"] == 1
    assert_verifies(res.out)


def test_mode_mix_meets_targets_and_verifies(tmp_path):
    rows = [
        chat(i, f"Question number {i}?", f"Answer {i}.", reasoning=f"Think {i}.") for i in range(10)
    ]
    rows += [
        chat(
            i,
            f"Question number {i}?",
            f"Answer {i}.",
            chat_template_kwargs={"enable_thinking": False},
        )
        for i in range(10, 20)
    ]
    rows += [chat(i, f"Question number {i}?", f"Answer {i}.") for i in range(20, 30)]
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    mix = {"modes": {"thinking": 0.5, "no_thinking": 0.25, "no_reasoning": 0.25}}
    res = build(tmp_path, [Source("a", src)], max_samples=12, mix=mix, seed=3)
    ids = [int(r["id"][1:]) for r in read_rows(res.out)]
    assert len(ids) == 12
    assert (
        sum(i < 10 for i in ids),
        sum(10 <= i < 20 for i in ids),
        sum(i >= 20 for i in ids),
    ) == (6, 3, 3)
    c = res.accounting["a"]
    assert (c.available, c.read, c.sampled_out, c.written) == (30, 12, 18, 12)
    manifest = json.loads((res.out / "manifest.json").read_text())
    assert manifest["mixture"]["mix"]["total"] == 12
    assert_verifies(res.out)
    from draftset.review.report import build_report

    html = build_report(res.out)
    assert "<h2>Mixture</h2>" in html and "Mix: 12 rows" in html
    assert "<td>thinking</td><td>6.0</td><td>6</td><td>6</td><td>10</td>" in html
    again = run_build(
        BuildOptions(
            [Source("a", src)],
            str(qwen3_tokenizer_dir()),
            tmp_path / "o2",
            workers=1,
            max_samples=12,
            mix=mix,
            seed=3,
        )
    )
    assert [r["id"] for r in read_rows(again.out)] == [r["id"] for r in read_rows(res.out)]


def test_preset_source_in_a_recipe(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    orca = REPO / "tests" / "data" / "presets" / "openorca.jsonl"
    recipe.write_text(
        f"out: {tmp_path / 'out'}\nsources:\n  - {{path: {orca}, preset: openorca}}\n"
        f"decontaminate: []\ndedup: exact\n"
    )
    code = main(
        [
            "build",
            str(recipe),
            "--tokenizer",
            str(qwen3_tokenizer_dir()),
            "--workers",
            "1",
            "--no-progress",
        ]
    )
    assert code == 0
    rows = read_rows(tmp_path / "out")
    assert rows and rows[0]["id"] == "niv.242684"
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["inputs"][0]["preset"] == "openorca"
    assert_verifies(tmp_path / "out")


def test_unknown_preset_and_infeasible_mix_are_usage_errors(tmp_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1, "q", "a")])
    argv = [
        "build",
        str(src),
        "--tokenizer",
        str(qwen3_tokenizer_dir()),
        "--out",
        str(tmp_path / "o"),
        "--workers",
        "1",
    ]
    assert main([*argv, "--preset", "no-such-set"]) == 2
    assert "no-such-set" in capsys.readouterr().err
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"out: {tmp_path / 'o2'}\nmax_samples: 5\n"
        f"mix: {{modes: {{thinking: 1.0}}}}\nsources: [{src}]\n"
    )
    assert (
        main(["build", str(recipe), "--tokenizer", str(qwen3_tokenizer_dir()), "--workers", "1"])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "5 rows" in err[0]


class _FakeHubSplit(list):
    _fingerprint = "fake-fingerprint"


def test_preset_without_a_path_reads_its_hub_id_when_online(tmp_path, monkeypatch):
    """No network in tests: datasets.load_dataset is replaced, the plumbing is real."""
    datasets = pytest.importorskip("datasets")
    calls = []
    rows = [
        json.loads(x) for x in (REPO / "tests/data/presets/openorca.jsonl").read_text().splitlines()
    ]

    def fake_load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        return _FakeHubSplit(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"out: {tmp_path / 'out'}\nsources:\n  - {{preset: openorca}}\n")
    argv = ["build", str(recipe), "--tokenizer", str(qwen3_tokenizer_dir()), "--workers", "1"]
    assert main([*argv, "--no-progress"]) == 0
    assert calls and all(c == ("Open-Orca/OpenOrca", None, "train") for c in calls)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["inputs"][0]["path"] == "hf:Open-Orca/OpenOrca@train"
    assert manifest["inputs"][0]["files"][0]["format"] == "hub"
    assert len(read_rows(tmp_path / "out")) == manifest["counts"]["total"]["rows_out"] > 0


def test_hub_source_offline_is_one_clear_line(tmp_path, capsys):
    argv = ["build", "hf:Open-Orca/OpenOrca", "--preset", "openorca", "--out", str(tmp_path / "o")]
    assert main([*argv, "--tokenizer", str(qwen3_tokenizer_dir()), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HF_HUB_OFFLINE" in err[0]


def test_the_mix_never_chooses_a_row_that_cannot_train(tmp_path):
    """Half of source a's rows are padded with "OK.": the mix chose among all its rows, the row
    step rejected the pads it chose, and the set held fewer rows of a than its share while
    trainable rows of a were left (a probe: shares a 0.5 / b 0.5 of 8, written a=2, b=4, the
    manifest saying 4 and 4). The pads are no candidates: rejected by the row step, not
    chosen in place of a row that trains."""
    a = [
        chat(i, f"Source A question {i}: name a prime above {10 * i}.", f"{i}3 works.")
        for i in range(6)
    ]
    a += [chat(10 + i, f"Source A pad {i}: tell me about the moon {i}.", "OK.") for i in range(6)]
    b = [
        chat(20 + i, f"Source B task {i}: reverse the word draft{i}.", f"{i}tfard")
        for i in range(12)
    ]
    srcs = [
        Source("a", write_jsonl(tmp_path / "a.jsonl", a)),
        Source("b", write_jsonl(tmp_path / "b.jsonl", b)),
    ]
    res = build(tmp_path, srcs, max_samples=8, mix={"sources": {"a": 0.5, "b": 0.5}}, seed=0)
    written = [r["source"] for r in read_rows(res.out)]
    assert (written.count("a"), written.count("b")) == (4, 4)
    assert res.accounting["a"].rejected == {"no_supervised_turn": 6}  # every pad, never chosen
    manifest = json.loads((res.out / "manifest.json").read_text())
    achieved = {x["key"]: x["achieved"] for x in manifest["mixture"]["mix"]["lines"]}
    assert (achieved["a"], achieved["b"]) == (4, 4)
    assert_verifies(res.out)


def test_under_turns_last_a_rows_mode_is_its_last_answers(tmp_path):
    """`--turns last` trains the last answer alone: a row whose earlier answer holds reasoning
    and whose last does not trains no reasoning, so it is no `thinking` row for the mode mix
    (a probe: thinking 50% reported, 0% of the rows trained any reasoning)."""
    rows = []
    for i in range(4):
        first = chat(
            i, f"Compute {i} times 7 step by step.", f"{7 * i}", reasoning=f"Add 7 {i} times."
        )
        first["messages"] += [
            {"role": "user", "content": "Thanks. Now just say done."},
            {"role": "assistant", "content": "Done."},
        ]
        rows.append(first)
    rows += [
        chat(
            10 + i,
            f"Question {i}: why is the sky blue?",
            "Light scatters.",
            reasoning=f"Rayleigh {i}.",
        )
        for i in range(4)
    ]
    rows += [chat(20 + i, f"Plain question {i}: spell cat backwards.", "tac") for i in range(4)]
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    mix = {"modes": {"thinking": 0.5, "no_reasoning": 0.5}}
    res = build(tmp_path, [Source("a", src)], max_samples=4, mix=mix, seed=0, turns="last")
    ids = sorted(int(r["id"][1:]) for r in read_rows(res.out))
    assert sum(10 <= i < 20 for i in ids) == 2  # the thinking rows: reasoning in the last answer
    assert sum(i < 10 or i >= 20 for i in ids) == 2
    manifest = json.loads((res.out / "manifest.json").read_text())
    available = {x["key"]: x["available"] for x in manifest["mixture"]["mix"]["lines"]}
    assert (available["thinking"], available["no_reasoning"]) == (4, 8)
    assert_verifies(res.out)
