"""Source specs: ``PATH@weight=W`` / ``PATH@count=N`` on the command line, mappings and `Source`
objects in the API, and ``sources:`` in a recipe go through the same checks.

Before: ``a.jsonl@count=-1`` ended in ``ValueError: Sample larger than population``,
``a.jsonl@weight=-1`` built and recorded weight -1.0 (the recipe refused both), a lone
``@weight=0`` with ``--max-samples`` ended in ``KeyError``, and a path holding ``@``
(``data@v2/a.jsonl``, ``x@y.jsonl``) was refused as a "bad source option". Now a bad value is
one line naming the source, exit 2, before any work; an existing path is the path; only a
trailing ``@key=value`` suffix is parsed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset import api
from draftset.cli import main
from draftset.config.recipe import RecipeError, parse_source_arg
from draftset.core.errors import EXIT_USAGE, DraftsetError
from draftset.sources.read import Source

EOT = ("--eot-token", "<|im_end|>", "--eot-token", "<|endoftext|>")


def chat(i: int) -> dict:
    return {
        "id": f"c{i}",
        "messages": [
            {"role": "user", "content": f"Question {i}?"},
            {"role": "assistant", "content": f"Answer {i}."},
        ],
    }


def write_jsonl(path: Path, n: int, first: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(chat(first + i)) + "\n" for i in range(n)))
    return path


def build(*args: str) -> int:
    argv = ["build", *args, "--tokenizer", str(qwen3_tokenizer_dir()), *EOT]
    return main([*argv, "--workers", "1", "--no-progress"])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("draftset: error: "), err
    return err[0]


# --- where the path ends and the options begin ------------------------------------------------
def test_an_existing_path_holding_at_signs_is_the_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "x@y.jsonl", 1)
    write_jsonl(tmp_path / "data@v2" / "a.jsonl", 1)
    write_jsonl(tmp_path / "w@weight=2.jsonl", 1)
    for arg in ("x@y.jsonl", "data@v2/a.jsonl", "data@v2", "w@weight=2.jsonl"):
        s = parse_source_arg(arg, None, None)
        assert (str(s.path), s.weight, s.count) == (arg, None, None), arg
    assert parse_source_arg("x@y.jsonl", None, None).name == "x@y"


def test_a_trailing_option_suffix_is_parsed_after_a_path_holding_at_signs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "data@v2" / "a.jsonl", 1)
    s = parse_source_arg("data@v2/a.jsonl@count=1", None, None)
    assert (str(s.path), s.weight, s.count) == ("data@v2/a.jsonl", None, 1)
    s = parse_source_arg("a.jsonl@weight=2,count=3", None, None)
    assert (str(s.path), s.weight, s.count) == ("a.jsonl", 2.0, 3)
    s = parse_source_arg("a.jsonl@weight=0.5", None, None)
    assert (s.weight, s.count) == (0.5, None)


def test_a_missing_path_with_an_at_sign_but_no_option_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = parse_source_arg("x@y.jsonl", None, None)
    assert (str(s.path), s.weight, s.count) == ("x@y.jsonl", None, None)


def test_hub_sources_keep_their_split(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = parse_source_arg("hf:org/set@train", None, None, preset="openorca")
    assert (str(s.path), s.weight, s.count) == ("hf:org/set@train", None, None)
    s = parse_source_arg("hf:org/set:cfg@train@count=5", None, None, preset="openorca")
    assert (str(s.path), s.weight, s.count) == ("hf:org/set:cfg@train", None, 5)
    s = parse_source_arg("hf:org/set@weight=2", None, None, preset="openorca")
    assert (str(s.path), s.weight, s.count) == ("hf:org/set", 2.0, None)


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("a.jsonl@count=-1", "source a.jsonl@count=-1: count must be >= 0, got -1"),
        ("a.jsonl@weight=-1", "source a.jsonl@weight=-1: weight must be >= 0, got -1"),
        ("a.jsonl@weight=inf", "source a.jsonl@weight=inf: weight must be a finite number"),
        ("a.jsonl@weight=nan", "source a.jsonl@weight=nan: weight must be a finite number"),
        ("a.jsonl@count=1.5", "source a.jsonl@count=1.5: count expected an integer, got 1.5"),
        ("a.jsonl@weight=abc", 'source a.jsonl@weight=abc: weight expected a number, got "abc"'),
        ("a.jsonl@count=", "source a.jsonl@count=: count expected an integer"),
        ("a.jsonl@wieght=2", "bad source option 'wieght=2' in 'a.jsonl@wieght=2'"),
    ],
)
def test_a_bad_option_value_is_one_line_naming_the_source(tmp_path, monkeypatch, arg, message):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    with pytest.raises(RecipeError) as info:
        parse_source_arg(arg, None, None)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.exit_code == EXIT_USAGE


# --- the command line, a recipe and the API refuse the same values ------------------------------
@pytest.mark.parametrize(
    ("option", "needle"),
    [
        ("count=-1", "count must be >= 0"),
        ("weight=-1", "weight must be >= 0"),
        ("weight=inf", "weight must be a finite number"),
    ],
)
def test_cli_refuses_a_bad_source_value_before_any_work(
    tmp_path, monkeypatch, capsys, no_work, option, needle
):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    assert build(f"a.jsonl@{option}", "--out", "o") == 2
    line = one_error_line(capsys)
    assert f"source a.jsonl@{option}: {needle}" in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("{path: a.jsonl, count: -1}", "recipe key sources[0].count: must be >= 0, got -1"),
        ("{path: a.jsonl, weight: -1}", "recipe key sources[0].weight: must be >= 0, got -1"),
        ("{path: a.jsonl, weight: .inf}", "recipe key sources[0].weight: must be a finite number"),
    ],
)
def test_recipe_refuses_the_same_values(tmp_path, monkeypatch, capsys, no_work, entry, needle):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    (tmp_path / "r.yaml").write_text(f"out: o\nsources: [{entry}]\n")
    assert build("r.yaml") == 2
    assert needle in one_error_line(capsys)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("a.jsonl@count=-1", "source a.jsonl@count=-1: count must be >= 0, got -1"),
        ("a.jsonl@weight=-1", "source a.jsonl@weight=-1: weight must be >= 0, got -1"),
        # a mapping is checked by api._source itself (named by its key only, for now)
        ({"path": "a.jsonl", "count": -1}, "count must be >= 0"),
        ({"path": "a.jsonl", "weight": float("inf")}, "weight must be a finite number"),
        (Source("a", Path("a.jsonl"), count=-1), "source a: count must be >= 0, got -1"),
        (Source("a", Path("a.jsonl"), weight=-2.0), "source a: weight must be >= 0, got -2"),
    ],
)
def test_api_refuses_the_same_values(tmp_path, monkeypatch, no_work, spec, needle):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    with pytest.raises(DraftsetError) as info:
        api.build(sources=[spec], tokenizer=str(qwen3_tokenizer_dir()), out="o", workers=1)
    assert info.value.exit_code == EXIT_USAGE
    assert needle in str(info.value), str(info.value)


# --- weight 0 -------------------------------------------------------------------------------
ALL_ZERO = "--max-samples 2: every source has weight 0, so no row would be taken"


def test_cli_refuses_max_samples_when_every_source_has_weight_zero(
    tmp_path, monkeypatch, capsys, no_work
):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    write_jsonl(tmp_path / "b.jsonl", 3, first=10)
    assert build("a.jsonl@weight=0", "b.jsonl@weight=0", "--max-samples", "2", "--out", "o") == 2
    assert ALL_ZERO in one_error_line(capsys)
    assert build("a.jsonl@weight=0", "--max-samples", "2", "--out", "o") == 2
    assert ALL_ZERO in one_error_line(capsys)
    assert not (tmp_path / "o").exists()


def test_recipe_and_api_refuse_max_samples_when_every_source_has_weight_zero(
    tmp_path, monkeypatch, capsys, no_work
):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    (tmp_path / "r.yaml").write_text(
        "out: o\nmax_samples: 2\nsources: [{path: a.jsonl, weight: 0}]\n"
    )
    assert build("r.yaml") == 2
    assert ALL_ZERO in one_error_line(capsys)
    for spec in ("a.jsonl@weight=0", {"path": "a.jsonl", "weight": 0}):
        with pytest.raises(DraftsetError) as info:
            api.build(
                sources=[spec],
                tokenizer=str(qwen3_tokenizer_dir()),
                out="o",
                max_samples=2,
                workers=1,
            )
        assert info.value.exit_code == EXIT_USAGE
        assert ALL_ZERO.replace("--max-samples", "max_samples") in str(info.value)  # as given


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["a.jsonl", "--max-samples", "0"], "--max-samples 0: no row would be taken"),
        (["a.jsonl@count=0"], "the source a has count 0, so no row would be taken"),
        (
            ["a.jsonl@count=0", "b.jsonl@count=0", "--max-samples", "5"],
            "every source has count 0 (a, b), so no row would be taken",
        ),
        (
            ["a.jsonl@count=0", "b.jsonl@weight=0", "--max-samples", "2"],
            "--max-samples 2: every source has count 0 or weight 0, so no row would be taken",
        ),
    ],
)
def test_a_selection_that_takes_no_row_is_refused_before_any_work(
    tmp_path, monkeypatch, capsys, no_work, args, needle
):
    """`build ... --max-samples 0` (or every source `@count=0`) read every row, then ended
    "no rows written", exit 1, with 0 rejects: every row sampled out. Said before any work,
    exit 2, as the every-weight-0 case is."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    write_jsonl(tmp_path / "b.jsonl", 3, first=10)
    assert build(*args, "--out", "o") == 2
    assert needle in one_error_line(capsys)
    assert not (tmp_path / "o").exists()


def test_the_api_and_a_recipe_refuse_a_selection_that_takes_no_row(
    tmp_path, monkeypatch, capsys, no_work
):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    (tmp_path / "r.yaml").write_text("out: o\nsources: [{path: a.jsonl, count: 0}]\n")
    assert build("r.yaml") == 2
    assert "the source a has count 0" in one_error_line(capsys)
    with pytest.raises(DraftsetError) as info:
        api.build(sources=["a.jsonl"], tokenizer=str(qwen3_tokenizer_dir()), out="o", max_samples=0)
    assert info.value.exit_code == EXIT_USAGE
    assert str(info.value) == (  # named as the call gave it: max_samples=, not --max-samples
        "max_samples 0: no row would be taken (give a number above 0, or leave max_samples out"
        " to take every row)"
    )


def test_a_weight_zero_source_beside_another_builds_and_is_accounted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    write_jsonl(tmp_path / "b.jsonl", 4, first=10)
    assert build("a.jsonl@weight=0", "b.jsonl", "--max-samples", "2", "--out", "o") == 0
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    per = manifest["counts"]["per_source"]
    assert (per["a"]["available"], per["a"]["read"], per["a"]["sampled_out"]) == (3, 0, 3)
    assert (per["b"]["read"], per["b"]["written"]) == (2, 2)
    assert [i["weight"] for i in manifest["inputs"]] == [0.0, None]


def test_paths_holding_at_signs_build(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "x@y.jsonl", 1)
    write_jsonl(tmp_path / "data@v2" / "a.jsonl", 2, first=10)
    write_jsonl(tmp_path / "w@weight=2.jsonl", 1, first=20)
    code = build("x@y.jsonl", "data@v2/a.jsonl@count=1", "w@weight=2.jsonl", "--out", "o")
    assert code == 0
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    got = [(i["path_as_given"], i["weight"], i["count"]) for i in manifest["inputs"]]
    assert got == [
        ("x@y.jsonl", None, None),
        ("data@v2/a.jsonl", None, 1),
        ("w@weight=2.jsonl", None, None),
    ]
    assert manifest["counts"]["total"]["written"] == 3


def test_options_after_two_at_signs_say_how_options_are_written(tmp_path, capsys):
    """``a.jsonl@count=2@weight=3`` said "source not found: a.jsonl@count=2": the path looked
    wrong, where the options were."""
    src = write_jsonl(tmp_path / "a.jsonl", 3)
    assert build(f"{src}@count=2@weight=3", "--out", str(tmp_path / "out")) == EXIT_USAGE
    line = one_error_line(capsys)
    assert "source not found" in line and "PATH@count=2,weight=3" in line


@pytest.mark.parametrize("pattern", ["*.jsonl", "a?.jsonl", "[ab].jsonl"])
def test_a_quoted_glob_says_draftset_does_not_expand_it(tmp_path, capsys, pattern):
    """``'x/*.jsonl'`` said "source not found: x/*.jsonl", as if no file matched."""
    write_jsonl(tmp_path / "x" / "a.jsonl", 3)
    assert build(str(tmp_path / "x" / pattern), "--out", str(tmp_path / "out")) == EXIT_USAGE
    line = one_error_line(capsys)
    assert line.endswith(
        f"source not found: {tmp_path / 'x' / pattern} (draftset does not expand wildcards:"
        f" leave the pattern unquoted for the shell to expand, or give the folder"
        f" {tmp_path / 'x'})"
    ), line


@pytest.mark.parametrize("written", ["$DATA/a.jsonl", "${DATA}/a.jsonl"])
def test_a_quoted_environment_variable_says_draftset_does_not_expand_it(
    tmp_path, capsys, monkeypatch, written
):
    """``draftset build '$DATA/a.jsonl'`` (single quotes: the shell left it) said only "source
    not found: $DATA/a.jsonl", as if $DATA/a.jsonl were missing."""
    write_jsonl(tmp_path / "x" / "a.jsonl", 3)
    monkeypatch.setenv("DATA", str(tmp_path / "x"))
    monkeypatch.chdir(tmp_path)
    assert build(written, "--out", str(tmp_path / "out")) == EXIT_USAGE
    line = one_error_line(capsys)
    var = written.split("/")[0]
    assert line.endswith(
        f"source not found: {written} (draftset does not expand environment variables such as"
        f" {var}: leave it unquoted, or in double quotes, for the shell to expand)"
    ), line


@pytest.mark.parametrize("flag", ["--field", "--field="])
def test_a_field_mapped_twice_is_refused_as_a_repeated_option_is(tmp_path, capsys, flag):
    """``--field output=a --field output=b`` built from column b, exit 0: the first was lost."""
    src = tmp_path / "qa.jsonl"
    src.write_text(json.dumps({"q": "hi", "a": "A", "b": "B"}) + "\n", encoding="utf-8")
    pairs = ["instruction=q", "output=a", "output=b"]
    fields = [a for p in pairs for a in ((flag + p,) if flag.endswith("=") else (flag, p))]
    argv = ["build", str(src), "--format", "alpaca", *fields, "--out", str(tmp_path / "o")]
    assert main([*argv, "--tokenizer", str(qwen3_tokenizer_dir()), *EOT]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["draftset: error: --field output given twice (output=a, output=b)"], err
    assert not (tmp_path / "o").exists()
    # the API's `fields` named as the call gave it (it said "--field output given twice")
    with pytest.raises(RecipeError, match=r"^fields maps output twice \(output=a, output=b\)$"):
        api.build(sources=[str(src)], fields=pairs, tokenizer="tok", out=str(tmp_path / "o"))


def test_standard_input_as_a_source_says_to_give_a_file(tmp_path, capsys):
    """``-`` (the Unix way to say standard input) said "source not found: -": draftset reads
    files (the workers read ranges of them, a rerun reads them again), so it says so."""
    assert build("-", "--out", str(tmp_path / "out")) == EXIT_USAGE
    line = one_error_line(capsys)
    assert "standard input" in line and "save the rows to a file" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("entry", ["'a.jsonl@count=2'", "{path: 'a.jsonl@weight=2,count=1'}"])
def test_a_recipe_source_written_with_command_line_options_is_told_the_recipe_keys(
    tmp_path, monkeypatch, capsys, no_work, entry
):
    """A recipe's ``a.jsonl@count=2`` was told "source options follow one @, comma-separated:
    PATH@count=2,weight=3": the command line's spelling, which a recipe does not read."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", 3)
    (tmp_path / "r.yaml").write_text(f"out: o\nsources: [{entry}]\n")
    assert build("r.yaml") == 2
    line = one_error_line(capsys)
    assert "(in a recipe, a source's options are keys of its entry:" in line, line
    assert "{path: a.jsonl, count: 2}" in line
    assert "PATH@count" not in line


@pytest.mark.parametrize(("pattern", "folder"), [("x/*.jsonl", True), ("nomatch/*.jsonl", False)])
def test_a_recipe_glob_is_told_to_list_the_files_not_to_unquote_it(
    tmp_path, monkeypatch, capsys, no_work, pattern, folder
):
    """A recipe's ``sources: ['x/*.jsonl']`` was told to "leave the pattern unquoted for the
    shell to expand": no shell reads a recipe."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "x" / "a.jsonl", 3)
    (tmp_path / "r.yaml").write_text(f"out: o\nsources: ['{pattern}']\n")
    assert build("r.yaml") == 2
    line = one_error_line(capsys)
    where = ", or give the folder x" if folder else ""  # beside the recipe, as it names it
    assert line.endswith(
        f"source not found: {pattern} (draftset does not expand wildcards: list"
        f" each file in the recipe's sources{where})"
    ), line


@pytest.mark.parametrize(
    ("pairs", "said"),
    [
        (  # a comma-separated list in one flag: read as a column named "text,output=code"
            ["instruction=text,output=code"],
            "bad --field 'instruction=text,output=code': one mapping a flag: give --field once"
            " for each (--field instruction=text --field output=code)",
        ),
        (  # spaces around =: a field named "instruction " that no shape reads
            ["instruction = text"],
            "bad --field 'instruction = text': the spaces around = would be part of the names:"
            " write instruction=text",
        ),
        (  # the two sides swapped: "no row shape reads a field 'code'"
            ["text=instruction", "code=output"],
            "source mbpp: --field code=output: no row shape reads a field 'code'; CANONICAL=COLUMN"
            " puts draftset's field first: did you mean output=code?",
        ),
    ],
)
def test_a_field_written_otherwise_names_how_to_write_it(tmp_path, capsys, pairs, said):
    src = tmp_path / "mbpp.jsonl"
    src.write_text(json.dumps({"text": "hi", "code": "x = 1"}) + "\n", encoding="utf-8")
    fields = [a for p in pairs for a in ("--field", p)]
    argv = ["build", str(src), "--format", "alpaca", *fields, "--out", str(tmp_path / "o")]
    assert main([*argv, "--tokenizer", str(qwen3_tokenizer_dir()), *EOT]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"draftset: error: {said}"], err
    assert not (tmp_path / "o").exists()
