"""A source of rows in an unknown shape is one exit-2 line, from its first rows, before any work.

Before (issue 25, item 15): ``{"text": ...}`` rows loaded the tokenizer, were read and rejected
one by one, and the build ended with exit 1 ("no rows written") after 8 s (46 s on a loaded
machine), the hint only in the reject notes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.cli import main
from draftset.core.naming import named_by_flags
from draftset.sources.read import Source, SourceError
from draftset.sources.shapes import check_row_shapes

CHAT = {
    "messages": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue, like a clear summer sky over a calm sea."},
    ]
}

OTHER_CHAT = {
    "messages": [
        {"role": "user", "content": "Name a fruit."},
        {"role": "assistant", "content": "A ripe pear, sweet and soft after a week on the shelf."},
    ]
}


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_unknown_rows_are_one_line_exit_2_before_the_tokenizer_loads(tmp_path, capsys):
    """The tokenizer named here cannot be loaded (its tokenizer.json is not one): the shape
    line comes first, so nothing (no tokenizer load, no row pass) ran before it."""
    src = write_jsonl(tmp_path / "t.jsonl", [{"text": "What is the capital of France?"}] * 3)
    bogus = tmp_path / "tok"
    bogus.mkdir()
    (bogus / "tokenizer.json").write_text("not a tokenizer")
    rc = main(["build", str(src), "--tokenizer", str(bogus), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2, err
    line = err.strip()
    assert "\n" not in line, err
    assert f"{src}: no known row shape in its first 3 rows (keys [text])" in line
    assert f"e.g. draftset build {src} --format prompt --field prompt=text" in line
    assert f"{{path: {src}, format: prompt, fields: {{prompt: text}}}}" in line
    assert "tokenizer" not in line.replace("--tokenizer TOK", "")
    assert not (tmp_path / "o").exists()


def test_the_suggested_mapping_reads_the_rows(tmp_path, capsys):
    """The options the line suggests work as written: two text columns as Alpaca."""
    answer = "Blue, like a clear summer sky over a calm sea on a long and quiet afternoon."
    rows = [{"q": f"Name colour number {i}.", "a": answer} for i in range(2)]
    src = write_jsonl(tmp_path / "qa.jsonl", rows)
    tok = str(qwen3_tokenizer_dir())
    assert main(["build", str(src), "--tokenizer", tok, "--out", str(tmp_path / "o")]) == 2
    line = capsys.readouterr().err
    assert "--format alpaca --field instruction=q --field output=a" in line
    options = ["--format", "alpaca", "--field", "instruction=q", "--field", "output=a"]
    args = ["build", str(src), *options, "--tokenizer", tok, "--out", str(tmp_path / "o")]
    assert main([*args, "--no-progress", "--workers", "1"]) == 0
    assert len((tmp_path / "o" / "rejects.jsonl").read_text().splitlines()) == 0


def test_a_file_where_some_rows_are_known_builds_and_rejects_the_others(tmp_path, capsys):
    src = write_jsonl(tmp_path / "mixed.jsonl", [CHAT, {"text": "Hi?"}, OTHER_CHAT])
    out = tmp_path / "o"
    tok = str(qwen3_tokenizer_dir())
    args = ["build", str(src), "--tokenizer", tok, "--out", str(out), "--no-progress"]
    assert main([*args, "--workers", "1"]) == 0, capsys.readouterr().err
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["row"], r["reason"]) for r in rejects] == [(1, "unknown_format")]
    assert "--format prompt --field prompt=text" in rejects[0]["message"]


def test_a_folder_where_some_files_are_known_is_not_refused(tmp_path):
    folder = tmp_path / "data"
    write_jsonl(folder / "a.jsonl", [{"text": "Hi?"}])
    write_jsonl(folder / "b.jsonl", [CHAT])
    check_row_shapes([Source("data", folder)])  # builds; a.jsonl's row is rejected
    (folder / "b.jsonl").unlink()
    with pytest.raises(SourceError, match=r"a\.jsonl \(source .*data\): no known row shape"):
        check_row_shapes([Source("data", folder)])


def test_known_shapes_and_given_mappings_pass(tmp_path):
    src = write_jsonl(tmp_path / "t.jsonl", [{"text": "Hi?"}])
    check_row_shapes([Source("t", src, format="prompt", fields={"prompt": "text"})])
    check_row_shapes([Source("c", write_jsonl(tmp_path / "c.jsonl", [CHAT]))])
    # rows that are not objects have their own rejects (not_an_object): no shape to judge
    check_row_shapes([Source("n", write_jsonl(tmp_path / "n.jsonl", [1, "x"]))])


def test_only_the_first_rows_are_read(tmp_path):
    """From the first rows: a file whose known rows start later is not read that far."""
    src = write_jsonl(tmp_path / "late.jsonl", [{"text": "Hi?"}] * 3 + [CHAT])
    check_row_shapes([Source("late", src)])
    with pytest.raises(SourceError, match="in its first 3 rows"):
        check_row_shapes([Source("late", src)], sample=3)


def test_a_preset_layout_is_named(tmp_path):
    row = {"answer_generation": {"query": "Weather in Paris?", "train_messages": []}}
    src = write_jsonl(tmp_path / "tb.jsonl", [row])
    with pytest.raises(SourceError, match="preset 'toolbench'"):
        check_row_shapes([Source("tb", src)])


def test_a_preset_that_does_not_fit_the_rows_is_named(tmp_path):
    """`--preset skythought` on chat rows said "no known row shape ... map its columns with
    --format messages --field messages=messages", and that command failed the same way: the
    preset was the cause and was never named."""
    src = write_jsonl(tmp_path / "chat.jsonl", [CHAT])
    with pytest.raises(SourceError) as exc:
        check_row_shapes([Source("chat", src, preset="skythought")])
    msg = str(exc.value)
    assert "\n" not in msg and "are not the layout of preset 'skythought'" in msg
    assert "keys [messages]" in msg and "--field" not in msg


def test_no_mapping_is_suggested_from_objects_that_are_not_messages(tmp_path):
    """FastChat answer files (`choices: [{index, turns}]`, `answer_id`, `model_id`): the line
    suggested `--format messages --field messages=choices`, which rejected every row."""
    row = {
        "question_id": 81,
        "answer_id": "abc",
        "model_id": "gpt-4",
        "choices": [{"index": 0, "turns": ["An answer."]}],
        "tstamp": 1.0,
    }
    src = write_jsonl(tmp_path / "answers.jsonl", [row])
    with pytest.raises(SourceError) as exc:
        check_row_shapes([Source("answers", src)])
    msg = str(exc.value)
    assert "messages=choices" not in msg and "--field instruction=answer_id" not in msg
    assert "map its columns with --format and --field (see docs/formats.md)" in msg


HERMES = {
    "conversations": [
        {
            "from": "system",
            "value": "You are a function calling AI model.\n<tools>\n"
            '[{"type": "function", "function": {"name": "get_time", "parameters": {}}}]\n</tools>',
        },
        {"from": "human", "value": "What time is it?"},
        {
            "from": "gpt",
            "value": '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        },
        {"from": "tool", "value": '<tool_response>\n{"time": "12:00"}\n</tool_response>'},
        {"from": "gpt", "value": "It is noon."},
    ]
}


def test_hermes_markup_without_its_preset_is_named(tmp_path):
    """Hermes-format rows read as plain ShareGPT build (their calls and `<tools>` prompt
    supervised as the text they are), so they are no shape error; but the user most likely
    wanted the preset, which gives the target's template real tool calls and tools: the build
    says so (it said nothing, and the calls were trained as Hermes' text)."""
    src = write_jsonl(tmp_path / "h.jsonl", [CHAT, HERMES])
    notes = check_row_shapes([Source("h", src)])
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "preset: hermes-function-calling" in notes[0] and "<tool_call>" in notes[0]
    assert check_row_shapes([Source("h", src, preset="hermes-function-calling")]) == []
    assert check_row_shapes([Source("c", write_jsonl(tmp_path / "c.jsonl", [CHAT]))]) == []
    plain = {"conversations": [{"from": "human", "value": "What is <tool_call>?"}]}
    assert check_row_shapes([Source("p", write_jsonl(tmp_path / "p.jsonl", [plain]))]) == []


def test_the_build_prints_the_hermes_note(tmp_path, capsys):
    src = write_jsonl(tmp_path / "h.jsonl", [HERMES])
    tok = str(qwen3_tokenizer_dir())
    argv = ["build", str(src), "--tokenizer", tok, "--out", str(tmp_path / "out")]
    assert main([*argv, "--eot-token", "<|im_end|>", "--eot-token", "<|endoftext|>"]) == 0
    assert "preset: hermes-function-calling" in capsys.readouterr().out


def test_a_mapped_column_no_row_has_is_exit_2(tmp_path):
    """``--field output=cod`` (a typo for ``code``): every row became a prompt, the build wrote
    an empty set and said "verify passed", exit 0 (`run` would have re-answered them all)."""
    rows = [{"text": f"Write f{i}.", "code": f"def f{i}(): pass"} for i in range(3)]
    src = write_jsonl(tmp_path / "m.jsonl", rows)
    typo = Source("m", src, format="alpaca", fields={"instruction": "text", "output": "cod"})
    with pytest.raises(SourceError) as exc:
        check_row_shapes([typo])
    msg = str(exc.value)
    # named as a Python call gives it (`fields={...}`); a command's `--field output=cod`
    assert "\n" not in msg and "fields {'output': 'cod'}" in msg and "keys [text, code]" in msg
    with named_by_flags(), pytest.raises(SourceError) as exc:
        check_row_shapes([typo])
    assert f"{src}: --field output=cod: no row among its first 3 has" in str(exc.value)
    right = Source("m", src, format="alpaca", fields={"instruction": "text", "output": "code"})
    assert check_row_shapes([right]) == []
    # a column some rows have (optional: an alpaca input) is not an error
    some = write_jsonl(tmp_path / "s.jsonl", [{**rows[0], "extra": "x"}, rows[1]])
    opt = Source("s", some, format="alpaca", fields={"instruction": "text", "input": "extra"})
    assert check_row_shapes([opt]) == []


def test_a_mapped_column_typo_that_leaves_no_row_readable_names_the_column(tmp_path):
    """``fields: {instruction: txt}`` (a typo for ``text``): no row has an instruction, so every
    row was unknown_format and the line said "no known row shape ... map its columns, e.g.
    --format alpaca --field instruction=text ..." (what the user had written, but for the one
    letter) instead of naming the column no row has."""
    rows = [{"text": f"Write f{i}.", "code": f"def f{i}(): pass"} for i in range(3)]
    src = write_jsonl(tmp_path / "m.jsonl", rows)
    typo = Source("m", src, format="alpaca", fields={"instruction": "txt", "output": "code"})
    with pytest.raises(SourceError) as exc:
        check_row_shapes([typo])
    msg = str(exc.value)
    assert "\n" not in msg and "no known row shape" not in msg
    assert "fields {'instruction': 'txt'}" in msg and "column 'txt'" in msg
    assert "did you mean 'text'?" in msg


@pytest.mark.parametrize("text", ["", "\n\n  \n", "[]"])
def test_a_source_without_rows_is_exit_2_before_any_work(tmp_path, text):
    """An empty file loaded the tokenizer, then ended "no rows written ... (rejects above, by
    reason)" with no reject above, exit 1."""
    name = "e.json" if text == "[]" else "e.jsonl"
    src = tmp_path / name
    src.write_text(text)
    with pytest.raises(SourceError, match=r"e\.jsonl?: it holds no rows"):
        check_row_shapes([Source("e", src)])
    folder = tmp_path / "f"
    write_jsonl(folder / "a.jsonl", [])
    write_jsonl(folder / "b.jsonl", [CHAT])
    assert check_row_shapes([Source("f", folder)]) == []  # one file has rows: builds
    # an empty source beside one with rows builds, and the build says so
    (notes,) = [check_row_shapes([Source("e", src), Source("f", folder)])]
    assert notes == [f"source {src}: it holds no rows (empty, or only blank lines)"]


def test_a_file_two_sources_read_is_named(tmp_path):
    """`build a.jsonl ./a.jsonl` (or a folder and a file inside it) read the file once per
    source: its rows trained twice under `--dedup none`, the second copies rejected
    `duplicate` otherwise, and nothing said why (newcomer probe, session 28)."""
    data = write_jsonl(tmp_path / "d" / "a.jsonl", [CHAT, OTHER_CHAT])
    write_jsonl(tmp_path / "d" / "b.jsonl", [CHAT])
    notes = check_row_shapes([Source("a", data), Source("a-2", tmp_path / "d" / "." / "a.jsonl")])
    assert notes == [
        f"sources a and a-2 both read {data}: its rows count once per source (trained twice"
        " under --dedup none; the second copy rejected as a duplicate otherwise)"
    ]
    notes = check_row_shapes([Source("d", tmp_path / "d"), Source("a", data)])
    assert len(notes) == 1 and notes[0].startswith(f"sources d and a both read {data}:")
    assert check_row_shapes([Source("a", data), Source("b", tmp_path / "d" / "b.jsonl")]) == []


@pytest.mark.parametrize("fmt", ["alpaca", "prompt"])
def test_a_format_the_rows_are_not_is_named_when_they_read_without_it(tmp_path, fmt):
    """``{path: chats.jsonl, format: alpaca}`` on OpenAI messages rows (or ``--format alpaca``
    given for every source of a command line) said "no known row shape ... map its columns,
    e.g. --format messages --field messages=messages": the rows' own shape, as if it were
    unknown. The forced format is what is wrong: said so."""
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    src = write_jsonl(tmp_path / "chats.jsonl", [row, row])
    with pytest.raises(SourceError) as info:
        check_row_shapes([Source("chats", src, format=fmt)])
    assert str(info.value) == (
        f"{src}: format {fmt}: its first 2 rows are not that shape (keys [messages]), and read"
        " as they are without it: leave the format out for this source"
    )


def test_a_json_object_of_splits_or_of_rows_beside_metadata_is_named(tmp_path):
    """``{"train": [...], "test": [...]}`` said "no known row shape in its only row (keys
    [train, test])"; ``{"version": "1.0", "data": [...]}`` (SQuAD's layout) suggested
    ``--format prompt --field prompt=version``, one prompt "1.0" for the whole file."""
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"train": [row, row], "test": [row]}), encoding="utf-8")
    with pytest.raises(SourceError) as info:
        check_row_shapes([Source("splits", splits)])
    assert str(info.value) == (
        f"{splits}: one JSON object of several lists of rows (train: 2 rows, test: 1 row), not"
        " rows: give one list's rows as their own file (a JSON array, or JSON Lines)"
    )
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"version": "1.0", "data": [row] * 3}), encoding="utf-8")
    with pytest.raises(SourceError) as info:
        check_row_shapes([Source("wrapped", wrapped)])
    assert str(info.value) == (
        f"{wrapped}: one JSON object holding its rows under 'data' (3 rows) beside other keys"
        " (version): give those rows as their own file (a JSON array, or JSON Lines), or"
        " remove the other keys"
    )


@pytest.mark.parametrize(
    "row",
    [
        {"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1], "labels": [-100, 2, 3]},
        {"input_ids": [1, 2, 3], "labels": [-100, -100, 3]},
    ],
)
def test_a_trainers_tokenized_rows_are_told_what_draftset_reads(tmp_path, row):
    """``input_ids`` + ``labels`` rows (a trainer's tokenized layout: axolotl's, TRL's, -100
    for a token not trained) were told "map its columns with --format and --field", which no
    mapping does: a loss mask is 0/1, and ``--field loss_mask=labels`` rejects every row."""
    src = write_jsonl(tmp_path / "tok.jsonl", [row])
    with pytest.raises(SourceError) as exc:
        check_row_shapes([Source("tok", src)])
    msg = str(exc.value)
    assert "\n" not in msg and "--field" not in msg, msg
    assert msg.endswith(
        "input_ids with labels are a trainer's tokenized rows (-100: not trained), which"
        " draftset does not read: its pre-tokenized rows are input_ids with a 0/1 loss_mask,"
        " in this tokenizer's ids. Give the conversations the rows were tokenized from"
        " (draftset derives the mask from the target's chat template), or add"
        " loss_mask = [0 if label == -100 else 1 for label in labels] to each row"
    ), msg
