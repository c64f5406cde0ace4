"""Newcomer mistakes on the Python API, each one typed error with one specific line before any
work (they were a traceback, or a bare "not an option")."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import built_set, qwen3_tokenizer_dir

from draftset import api
from draftset.cli import main
from draftset.config.fields import flag_of
from draftset.config.schema import GenerateArgs
from draftset.core.errors import UsageError
from draftset.generation.options import GenerateUsageError
from draftset.sources.read import Source

ROW = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


def test_a_source_made_with_a_text_path_is_read_as_that_path(tmp_path):
    """`Source("a", "a.jsonl")`: an AttributeError traceback ('str' object has no attribute
    'exists') when built."""
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps(ROW) + "\n")
    opts = api.build_options(sources=[Source("a", str(src))], tokenizer="tok", out=tmp_path / "o")
    assert opts.sources[0].path == src


def test_a_source_whose_path_is_no_path_is_one_line():
    with pytest.raises(UsageError) as exc:
        Source("a", 5)  # type: ignore[arg-type]
    assert str(exc.value) == "source a: path expected a string or a path, got int 5"


def test_a_long_flag_written_as_a_keyword_names_the_option(tmp_path):
    """`show(d, id=...)`: the command line's --id is row_id here; it said only "not an
    option"."""
    out = built_set(tmp_path, [ROW])
    with pytest.raises(UsageError) as exc:
        api.show(out, id="a:0")
    assert str(exc.value) == (
        "'id' is not an option of this job: did you mean 'row_id' (the command line's --id)?"
    )


@pytest.mark.parametrize(
    ("option", "where"),
    [  # as the command line says it (`draftset run r.yaml --out x`)
        ("out", "at its top level"),
        ("overwrite", "at its top level"),
        ("sources", "at its top level"),
        ("max_samples", "at its top level"),
        ("thinking", "under its `generate:`"),
        ("render_server", "under its `verify:`"),
    ],
)
def test_a_build_option_given_to_run_says_where_it_goes(tmp_path, option, where):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("tokenizer: tok\nout: o\nsources: [a.jsonl]\ngenerate: {endpoints: [x]}\n")
    with pytest.raises(UsageError) as exc:
        api.run(recipe, **{option: "x"})
    assert str(exc.value) == (
        f"'{option}' is not an option of this job: run reads {option} from its recipe: set"
        f" `{option}: ...` {where}"
    )


def _source_file(folder: Path) -> Path:
    path = folder / "in.jsonl"
    path.write_text(json.dumps(ROW) + "\n")
    return path


@pytest.mark.parametrize(
    ("made", "said"),
    [
        (
            dict(format="nope"),
            "source s: format must be messages, sharegpt, alpaca, prompt or pretokenized,"
            ' got "nope"',
        ),
        (dict(fields="x"), 'source s: fields expected a mapping, got "x"'),
        (dict(preset=5), "source s: preset expected a string, got 5"),
        (dict(name=""), 'source {src}: name is empty, got ""'),
    ],
)
def test_a_source_made_by_hand_is_checked_as_a_recipe_entry(tmp_path, made, said):
    """`Source(..., format="nope")` ran into a bare ValueError from the normalizer (generate)
    or passed the pre-flight (build), `fields="x"` a TypeError, `preset=5` an AttributeError,
    and generate took a blank name: each is one line naming the source and its field, before
    any work, from both jobs."""
    src = _source_file(tmp_path)
    spec = Source(made.pop("name", "s"), src, **made)
    with pytest.raises(UsageError) as info:
        api.build_options(sources=[spec], tokenizer="t", out=tmp_path / "o")
    assert str(info.value) == said.format(src=src)
    with pytest.raises(UsageError) as info:
        api.generate_options([spec], endpoints=["http://127.0.0.1:9/v1"], out=tmp_path / "a.jsonl")
    assert str(info.value) == said.format(src=src)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_a_recipe_among_other_sources_is_given_alone(tmp_path):
    """`generate([recipe, "more.jsonl"])` said "recipe.yaml: unsupported file type (expected
    .jsonl, ...)", as if a recipe were no source at all; build's command says to give it
    alone."""
    src = _source_file(tmp_path)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"sources: [{src}]\n")
    with pytest.raises(GenerateUsageError) as info:
        api.generate_options(
            [src, recipe], endpoints=["http://127.0.0.1:9/v1"], out=tmp_path / "a.jsonl"
        )
    assert str(info.value) == (
        f"{recipe} is a recipe: give it alone (its sources are listed in it), or give source"
        " files without it"
    )


def test_one_source_object_or_mapping_is_one_source(tmp_path):
    """`generate(Source(...))` said "SOURCE: expected a string or a path or a list of values,
    got a Source" while `generate("a.jsonl")` is one source: one source of any kind the list
    takes is that list of one, for build and generate alike."""
    src = _source_file(tmp_path)
    for one in (Source("s", src), {"path": src, "name": "s"}):
        gen = api.generate_options(
            one, endpoints=["http://127.0.0.1:9/v1"], out=tmp_path / "a.jsonl"
        )
        assert [(s.name, s.path) for s in gen.sources] == [("s", src)]
        opts = api.build_options(sources=one, tokenizer="tok", out=tmp_path / "o")
        assert [(s.name, s.path) for s in opts.sources] == [("s", src)]


ENDPOINT = ["http://127.0.0.1:9/v1"]


def _wrong_types(folder: Path) -> list[tuple[Any, str]]:
    """(a call with an argument of the wrong type, the message naming its Python parameter)."""
    src = _source_file(folder)
    base = {"sources": [src], "tokenizer": "tok", "out": folder / "o"}
    gen = {"endpoints": ENDPOINT, "out": folder / "a.jsonl"}
    return [
        (lambda: api.verify(5), "dir: expected a string or a path, got 5"),
        (lambda: api.verify([folder]), f"dir: expected a string or a path, got {[folder]!r}"),
        (lambda: api.report({"a": 1}), "dir: expected a string or a path, got {'a': 1}"),
        (lambda: api.show(b"x", row=0), "dir: expected a string or a path, got b'x'"),
        (lambda: api.run(2.0), "recipe: expected a string or a path, got 2.0"),
        (lambda: api.verify(folder, json=5), "json: expected a string or a path, got 5"),
        (lambda: api.report(folder, output=True), "output: expected a string or a path, got True"),
        (lambda: api.run(folder / "r.yaml", work=5), "work: expected a string or a path, got 5"),
        (lambda: api.verify(folder, block_size=1), "block_size must be >= 2, not 1"),
        (lambda: api.show(folder, row="3"), "row: expected an integer, got '3'"),
        (
            lambda: api.build_options(**{**base, "out": 5}),
            "out: expected a string or a path, got 5",
        ),
        (
            lambda: api.build_options(**{**base, "tokenizer": None, "out": None}, max_length=-1),
            "max_length must be >= 1, not -1",
        ),
        (
            lambda: api.build_options(**base, workers="2"),
            "workers: expected an integer, got '2'",
        ),
        (
            lambda: api.build_options(**base, eot_tokens=5),
            "eot_tokens: expected a string or a list of strings, got 5",
        ),
        (
            lambda: api.build_options(**{**base, "sources": [src, 5]}),
            "sources: expected a path, a Source or a mapping, got 5",
        ),
        (
            lambda: api.generate_options([src], **{**gen, "endpoints": 5}),
            "endpoints: expected a string or a list of strings, got 5",
        ),
        (
            lambda: api.generate_options([src], **{**gen, "out": 5}),
            "out: expected a string or a path, got 5",
        ),
        (
            lambda: api.generate_options([src], **gen, concurrency=0),
            "concurrency must be >= 1, not 0",
        ),
    ]


def test_a_wrong_type_names_the_python_parameter_not_the_flag(tmp_path):
    """`verify(5)` said "DIR: expected a string or a path", `build(out=5)` "--out: ...",
    `build(max_length=-1)` "--max-length must be >= 1": names a notebook never wrote. The API
    names its keyword; the command line keeps its flags (below)."""
    for call, said in _wrong_types(tmp_path):
        with pytest.raises(UsageError) as info:
            call()
        assert str(info.value) == said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["verify", "{d}", "--block-size", "1"], "--block-size must be >= 2, not 1"),
        (
            [
                "generate",
                "{src}",
                "--endpoint",
                ENDPOINT[0],
                "--out",
                "a.jsonl",
                "--concurrency",
                "0",
            ],
            "--concurrency must be >= 1, not 0",
        ),
        (
            ["build", "{src}", "--tokenizer", "t", "--out", " "],
            "--out: is only whitespace, got ' '",
        ),
    ],
)
def test_the_command_line_names_its_flags(tmp_path, capsys, argv, said):
    src = _source_file(tmp_path)
    argv = [a.format(d=tmp_path, src=src) for a in argv]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"draftset: error: {said}\n"


@pytest.mark.parametrize(
    ("name", "meant"),
    [("answers", "answers.jsonl"), ("answers.txt", "answers.jsonl"), ("run.log", "run.jsonl")],
)
def test_an_answers_name_build_cannot_read_is_refused_before_any_work(
    tmp_path, capsys, name, meant
):
    """`generate(..., out="answers")` (or ``answers.txt``) wrote the answers, exit 0, and
    `build` then refused the file: "unsupported file type (expected .jsonl, .json, ...)", with
    its .errors.jsonl, .run.json and .lock to rename by hand for a rerun to resume."""
    src = _source_file(tmp_path)
    out = tmp_path / name
    with pytest.raises(GenerateUsageError) as info:
        api.generate_options([src], endpoints=ENDPOINT, out=out)
    said = (
        f"{out}: generate writes JSON Lines, which build reads only from a .jsonl file"
        f" (a {name} source is an unsupported file type): name it {meant}"
    )
    assert str(info.value) == f"out {said}"  # the keyword, as the call gave it
    argv = ["generate", str(src), "--endpoint", ENDPOINT[0], "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"draftset: error: --out {said}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize("name", ["a.jsonl", "a.ndjson", "a.JSONL", "answers.json"])
def test_an_answers_name_build_reads_is_taken(tmp_path, name):
    """``.json`` too: build reads a .json file of more than one line, or of one whole row, as
    JSON Lines (`sources.read._json_is_lines`), so generate's answers round-trip."""
    src = _source_file(tmp_path)
    gen = api.generate_options([src], endpoints=ENDPOINT, out=tmp_path / name)
    assert gen.out == tmp_path / name


def _glob_of(folder: Path) -> Any:
    return folder.glob("*.jsonl")


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            _glob_of,
            "sources: expected a path, a Source or a mapping, or a list of them, got a generator:"
            " make it a list (sorted(...) for a glob, whose order is the file system's)",
        ),
        (
            lambda folder: {str(folder / "in.jsonl")},
            "sources: expected a path, a Source or a mapping, or a list of them, got a set, which"
            " has no order (the sources' order names them and orders the set's rows): give a"
            " sorted list",
        ),
        (
            lambda folder: 5,
            "sources: expected a path, a Source or a mapping, or a list of them, got 5",
        ),
        (
            lambda folder: b"in.jsonl",
            "sources: expected a path, a Source or a mapping, or a list of them, got b'in.jsonl'",
        ),
    ],
)
def test_sources_of_another_kind_say_what_a_source_list_is(tmp_path, given, said):
    """`build(sources=Path("data").glob("*.jsonl"))` said "--sources: expected a list of
    values, got <generator object Path.glob at 0x7f...>" and `generate` "SOURCE: expected a
    string or a path or a list of values": neither says that one source is taken too, nor
    how to make the list."""
    _source_file(tmp_path)
    with pytest.raises(UsageError) as info:
        api.build_options(sources=given(tmp_path), tokenizer="tok", out=tmp_path / "o")
    assert str(info.value) == said
    with pytest.raises(GenerateUsageError) as info:
        api.generate_options(given(tmp_path), endpoints=ENDPOINT, out=tmp_path / "a.jsonl")
    assert str(info.value) == said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def _json_mistakes(folder: Path) -> list[tuple[Any, str, list[str], str]]:
    """(an API call, its line, the command line's arguments, its line) of a JSON-object option,
    ``thinking`` or an endpoint given a value of the wrong kind."""
    src = _source_file(folder)
    out = folder / "a.jsonl"
    gen = ["generate", str(src), "--endpoint", ENDPOINT[0], "--out", str(out)]
    build = ["build", str(src), "--tokenizer", "tok", "--out", str(folder / "o")]

    def generate(**options: Any) -> Any:
        return lambda: api.generate_options([src], endpoints=ENDPOINT, out=out, **options)

    not_json = "is not valid JSON: Expecting property name enclosed in double quotes:"
    return [
        (
            lambda: api.build_options(
                sources=[src], tokenizer="tok", out=folder / "o", template_kwargs="{bad"
            ),
            f"template_kwargs {not_json}",
            [*build, "--template-kwargs", "{bad"],
            f"--template-kwargs {not_json}",
        ),
        (
            generate(extra_body="{bad"),
            f"extra_body {not_json}",
            [*gen, "--extra-body", "{bad"],
            f"--extra-body {not_json}",
        ),
        (
            generate(chat_template_kwargs="[1]"),
            "chat_template_kwargs must be a JSON object",
            [*gen, "--chat-template-kwargs", "[1]"],
            "--chat-template-kwargs must be a JSON object",
        ),
        (
            generate(thinking="yes"),
            "thinking must be on, off or mix:F with 0 <= F <= 1, not 'yes'",
            [*gen, "--thinking", "yes"],
            "--thinking must be on, off or mix:F with 0 <= F <= 1, not 'yes'",
        ),
        (
            generate(chat_template_kwargs={"enable_thinking": "no"}),
            "chat_template_kwargs: enable_thinking is the string 'no', which a template reads as"
            " true; give the JSON boolean (enable_thinking: true or false)",
            [*gen, "--chat-template-kwargs", '{"enable_thinking": "no"}'],
            "--chat-template-kwargs: enable_thinking is the string 'no', which a template reads"
            " as true; give the JSON boolean (enable_thinking: true or false)",
        ),
        (
            generate(chat_template_kwargs={"a": {1}}),
            "chat_template_kwargs: a is of type set, not a JSON value",
            [],
            "",
        ),
        (generate(extra_body={"a": {1}}), "extra_body: a is of type set, not a JSON value", [], ""),
        (
            lambda: api.generate_options([src], endpoints="ftp://x", out=out),
            "endpoints: 'ftp://x' is not an http(s) URL",
            ["generate", str(src), "--endpoint", "ftp://x", "--out", str(out)],
            "--endpoint 'ftp://x' is not an http(s) URL",
        ),
    ]


def test_a_json_option_is_named_as_the_call_wrote_it(tmp_path, capsys):
    """`generate(..., extra_body="{bad")` said "--extra-body is not valid JSON", `thinking="yes"`
    "--thinking must be on, off or mix:F", `endpoints="ftp://x"` "--endpoint 'ftp://x' ...":
    the API names its keyword, the command its flag."""
    for call, said, argv, cli_said in _json_mistakes(tmp_path):
        with pytest.raises(UsageError) as info:
            call()
        assert str(info.value).startswith(said), said
        if argv:
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"draftset: error: {cli_said}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize("joined", ["a.jsonl,b.jsonl", "a.jsonl, b.jsonl", "a.jsonl b.jsonl"])
def test_sources_joined_in_one_string_say_how_to_give_several(
    tmp_path, monkeypatch, capsys, joined
):
    """`build(sources="a.jsonl,b.jsonl")` said only "source not found: a.jsonl,b.jsonl", of two
    files that are there; the command line's `build a.jsonl,b.jsonl` (or quoted with a space)
    likewise."""
    monkeypatch.chdir(tmp_path)
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(json.dumps(ROW) + "\n")
    with pytest.raises(UsageError) as info:
        api.build_options(sources=joined, tokenizer="tok", out="o")
    assert str(info.value) == (
        f"source not found: {joined} (one path per source: give a list,"
        " sources=['a.jsonl', 'b.jsonl'])"
    )
    with pytest.raises(GenerateUsageError) as info:
        api.generate_options(joined, endpoints=ENDPOINT, out="x.jsonl")
    assert str(info.value).endswith("give a list, sources=['a.jsonl', 'b.jsonl'])")
    assert main(["build", joined, "--tokenizer", "tok", "--out", "o"]) == 2
    assert capsys.readouterr().err == (
        f"draftset: error: source not found: {joined} (one path per source: give each as its"
        " own argument, a.jsonl b.jsonl)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl"]


def test_generate_says_what_build_says_of_a_source_not_found(tmp_path, monkeypatch):
    """generate said only "source not found: data/*.jsonl" where build says that wildcards are
    not expanded (and of `a.jsonl@count=2@weight=3`, how options are written)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for given in ("data/*.jsonl", "$DATA/a.jsonl"):
        with pytest.raises(UsageError) as built:
            api.build_options(sources=[given], tokenizer="tok", out="o")
        with pytest.raises(GenerateUsageError) as generated:
            api.generate_options([given], endpoints=ENDPOINT, out="x.jsonl")
        assert str(generated.value) == str(built.value)
        assert "(draftset does not expand" in str(built.value)


def _run_recipe(folder: Path) -> Path:
    _source_file(folder)
    recipe = folder / "r.yaml"
    recipe.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\nout: o\nsources: [in.jsonl]\n"
        "generate: {endpoints: ['http://127.0.0.1:9/v1']}\n"
    )
    return recipe


@pytest.mark.parametrize("given", ["", " ", "ftp://x", ["http://127.0.0.1:9/v1", "x:1/v1"]])
def test_run_checks_the_endpoints_given_to_replace_the_recipes(tmp_path, capsys, given):
    """`run(recipe, endpoints="")` asked the recipe's servers, silently; `endpoints="ftp://x"`
    (and `draftset run r.yaml --endpoint ftp://x`) was refused as the recipe's key
    (`generate.endpoints: 'ftp://x' ...`), a value the recipe does not hold."""
    from draftset.pipeline.run_state import RunUsageError

    recipe = _run_recipe(tmp_path)
    bad = given[-1] if isinstance(given, list) else given
    with pytest.raises(RunUsageError) as info:
        api.run_options(recipe, endpoints=given)
    assert str(info.value).startswith(f"endpoints: {bad!r} is not an http(s) URL")
    if isinstance(given, str):
        assert main(["run", str(recipe), "--endpoint", given]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"draftset: error: --endpoint {bad!r} is not an http(s) URL"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "r.yaml"]


@pytest.mark.parametrize(
    ("blank", "what"), [("", 'is empty, got ""'), (" ", 'is only whitespace, got " "')]
)
def test_a_blank_source_or_recipe_says_it_is_blank(tmp_path, monkeypatch, capsys, blank, what):
    """`build(sources=[""])`, `generate("")` and `draftset build ""` said "source '' names no
    path before its @ options" (there is no @); `build(recipe="")` "cannot read recipe .: Is a
    directory"."""
    monkeypatch.chdir(tmp_path)
    said = f"source {blank!r}: path {what}"
    with pytest.raises(UsageError) as info:
        api.build_options(sources=[blank], tokenizer="tok", out="o")
    assert str(info.value) == said
    with pytest.raises(UsageError) as info:
        api.generate_options(blank, endpoints=ENDPOINT, out="a.jsonl")
    assert str(info.value) == said
    assert main(["build", blank, "--tokenizer", "tok", "--out", "o"]) == 2
    assert capsys.readouterr().err == f"draftset: error: {said}\n"
    with pytest.raises(UsageError) as info:
        api.build_options(blank, tokenizer="tok", out="o")
    assert str(info.value) == f"recipe: {what.split(',')[0]}, got {blank!r}"  # as dir: says it
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("option", "value", "flag"),
    [
        ("sample", 5, ["--sample", "5"]),
        ("seed", 3, ["--seed", "3"]),
        ("placeholders", ["x"], ["--placeholder", "x"]),
        ("speculators", True, []),
        ("render_server", "http://127.0.0.1:9", ["--render-server", "http://127.0.0.1:9"]),
    ],
)
def test_an_option_of_the_full_verify_with_fast_is_refused(tmp_path, capsys, option, value, flag):
    """`verify(d, fast=True, sample=5)` (and `--fast --sample 5`) ran the fast checks and passed,
    the sample, seed, placeholders or speculators check asked for never run; only
    `--render-server` was refused so."""
    out = built_set(tmp_path, [ROW])
    with pytest.raises(UsageError) as info:
        api.verify(out, fast=True, **{option: value})
    assert str(info.value) == f"{option} needs the full verify (not fast=True)"
    if flag:
        assert main(["verify", str(out), "--fast", *flag]) == 2
        assert capsys.readouterr().err == (
            f"draftset: error: {flag[0]} needs the full verify (not --fast)\n"
        )


@pytest.mark.parametrize(
    ("options", "said", "argv", "cli_said"),
    [
        (
            {"out": "o"},
            "'tokenizer' is required (or `tokenizer:` in the recipe)",
            ["--out", "o"],
            "--tokenizer is required (or `tokenizer:` in the recipe)",
        ),
        (
            {"tokenizer": "tok"},
            "'out' is required (or `out:` in the recipe)",
            ["--tokenizer", "tok"],
            "--out is required (or `out:` in the recipe)",
        ),
        (
            {"tokenizer": "tok", "out": "o", "ray_address": "127.0.0.1:1"},
            "ray_address needs engine='ray'",
            ["--tokenizer", "tok", "--out", "o", "--ray-address", "127.0.0.1:1"],
            "--ray-address needs --engine ray",
        ),
    ],
)
def test_a_build_option_missing_or_alone_is_named_as_given(
    tmp_path, monkeypatch, capsys, options, said, argv, cli_said
):
    """`build(sources=[...], out="o")` was told "--tokenizer is required", `ray_address=...`
    "--ray-address needs --engine ray": flags, in a call that wrote keywords."""
    monkeypatch.chdir(tmp_path)
    _source_file(tmp_path)
    with pytest.raises(UsageError) as info:
        api.build_options(sources=["in.jsonl"], **options)
    assert str(info.value) == said
    assert main(["build", "in.jsonl", *argv, "--workers", "1"]) == 2
    assert capsys.readouterr().err == f"draftset: error: {cli_said}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_a_set_there_already_names_overwrite_as_the_call_gives_it(tmp_path, capsys):
    """A notebook cell run twice, `build(..., out="o")`, was told "pass --overwrite to replace
    it": a flag, where the call takes `overwrite=True`."""
    from draftset.config.preflight import PreflightError

    out = built_set(tmp_path, [ROW])
    src, tok = tmp_path / "a.jsonl", str(qwen3_tokenizer_dir())
    with pytest.raises(PreflightError) as info:
        api.build(sources=[src], tokenizer=tok, out=out, workers=1)
    assert str(info.value) == f"output folder exists: {out} (pass overwrite=True to replace it)"
    assert main(["build", str(src), "--tokenizer", tok, "--out", str(out), "--workers", "1"]) == 2
    assert capsys.readouterr().err == (
        f"draftset: error: output folder exists: {out} (pass --overwrite to replace it)\n"
    )
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"tokenizer: {tok}\nout: out\nsources: [a.jsonl]\n")
    with pytest.raises(PreflightError) as info:
        api.build(recipe, workers=1)
    assert "exists (pass overwrite=True, or set overwrite: true in the recipe," in str(info.value)


def test_a_near_dup_threshold_without_near_dedup_is_refused(tmp_path, monkeypatch, capsys):
    """`build(..., near_dup_threshold=0.5)` (`--near-dup-threshold 0.5`, a recipe's
    `near_dup_threshold: 0.5`) without near dedup built with exact dedup only, the threshold
    recorded in the manifest as if it had applied."""
    monkeypatch.chdir(tmp_path)
    _source_file(tmp_path)
    base = {"sources": ["in.jsonl"], "tokenizer": "tok", "out": "o"}
    with pytest.raises(UsageError) as info:
        api.build_options(**base, near_dup_threshold=0.5)
    assert str(info.value) == (
        "near_dup_threshold applies only to dedup='near' (dedup is 'exact'): set dedup='near',"
        " or leave near_dup_threshold out"
    )
    argv = ["build", "in.jsonl", "--tokenizer", "tok", "--out", "o", "--dedup", "none"]
    assert main([*argv, "--near-dup-threshold", "0.5"]) == 2
    assert capsys.readouterr().err == (
        "draftset: error: --near-dup-threshold applies only to --dedup near (dedup is 'none'):"
        " add --dedup near, or leave --near-dup-threshold out\n"
    )
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\nout: o\nsources: [in.jsonl]\n"
        "near_dup_threshold: 0.5\n"
    )
    with pytest.raises(UsageError) as info:
        api.build_options(recipe)
    assert str(info.value) == (
        f"recipe {recipe}: near_dup_threshold applies only to dedup: near (dedup is 'exact'):"
        " set dedup: near, or remove near_dup_threshold"
    )
    # the recipe's near dedup replaced by the caller's: its threshold goes with it, no mistake
    recipe.write_text(recipe.read_text() + "dedup: near\n")
    assert api.build_options(recipe, dedup="exact").dedup == "exact"
    assert api.build_options(**base, dedup="near", near_dup_threshold=0.5).near_dup_threshold == 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "r.yaml"]


def test_a_folder_given_as_the_recipe_says_where_a_source_folder_goes(tmp_path, monkeypatch):
    """`build("data", tokenizer=..., out=...)` (a folder of data files, in the recipe's place)
    said "cannot read recipe data: Is a directory"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    _source_file(tmp_path / "data")
    for given in ("data", "data/", tmp_path / "data"):
        with pytest.raises(UsageError) as info:
            api.build_options(given, tokenizer="tok", out="o")
        assert str(info.value) == (
            f"recipe {given} is a folder, not a recipe (.yaml): give a folder of data files as"
            f" sources=[{str(given)!r}]"
        )


@pytest.mark.parametrize("rows", [1, 3])
def test_answers_written_as_json_build_the_same_rows_as_jsonl(tmp_path, rows):
    """`generate(..., out="answers.json")` is taken (not refused as `.txt` is): build reads a
    `.json` of JSON Lines as JSON Lines (one line: one whole row), so the answers build the
    same set rows under either name."""
    from fault_server import FaultServer

    prompts = tmp_path / "p.jsonl"
    lines = [json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]}) for i in range(rows)]
    prompts.write_text("\n".join(lines) + "\n")
    with FaultServer() as srv:
        api.generate(prompts, endpoints=[srv.url], out=tmp_path / "answers.json")
    (tmp_path / "answers.jsonl").write_bytes((tmp_path / "answers.json").read_bytes())
    built = {}
    for name in ("answers.json", "answers.jsonl"):
        result = api.build(
            sources=[tmp_path / name],
            tokenizer=str(qwen3_tokenizer_dir()),
            eot_tokens=["<|im_end|>"],
            out=tmp_path / f"set-{Path(name).suffix[1:]}",
            workers=1,
        )
        assert result.ok and result.counts["written"] == rows
        built[name] = [(r["id"], list(r["input_ids"])) for r in map(result.row, range(rows))]
    assert built["answers.json"] == built["answers.jsonl"]


def test_an_answers_out_that_is_no_file_names_out_as_the_call_gave_it(tmp_path):
    """`generate(..., out=folder)` said "--out X is a folder; give a .jsonl file path" to a
    call that wrote `out=`."""
    src = _source_file(tmp_path)
    for out, said in [
        (tmp_path, f"out {tmp_path} is a folder; give a .jsonl file path"),
        ("-", "out -: draftset does not read '-' as standard output; name the .jsonl file"),
    ]:
        with pytest.raises(GenerateUsageError) as info:
            api.generate_options([src], endpoints=ENDPOINT, out=out)
        assert str(info.value).startswith(said)


def test_a_file_a_job_writes_is_named_as_the_call_gave_it(tmp_path):
    """`report(d, output="r.pdf")` said "-o r.pdf: report writes one HTML page",
    `verify(d, json="-")` "--json -: ...", `run(r, work="-")` "--work -: ...": the command's
    flags, to a call that wrote `output=`, `json=`, `work=`."""
    out = built_set(tmp_path, [ROW])
    cases = [
        (lambda: api.report(out, output=tmp_path / "r.pdf"), f"output {tmp_path / 'r.pdf'}: "),
        (lambda: api.report(out, output="-"), "output -: draftset does not read '-'"),
        (lambda: api.verify(out, json="-"), "json -: draftset does not read '-'"),
        (lambda: api.verify(out, fast=True, json=out), f"json {out} is the set folder"),
        (lambda: api.run(_run_recipe(tmp_path), work="-"), "work -: draftset does not read '-'"),
    ]
    for call, said in cases:
        with pytest.raises(UsageError) as info:
            call()
        assert str(info.value).startswith(said), str(info.value)


def test_another_models_tokenizer_is_named_as_the_call_gave_it(tmp_path):
    """`verify(d, tokenizer=other)` (report's, show's) said "--tokenizer X is not the tokenizer
    this set was built with" to a call that wrote `tokenizer=`."""
    from conftest import llama32_tokenizer_dir

    out = built_set(tmp_path, [ROW])
    llama = llama32_tokenizer_dir()
    said = f"tokenizer {llama} is not the tokenizer this set was built with: "
    for call in (
        lambda: api.verify(out, fast=True, tokenizer=llama),
        lambda: api.report(out, output=tmp_path / "r.html", tokenizer=llama),
        lambda: api.show(out, row=0, tokenizer=llama),
    ):
        with pytest.raises(UsageError) as info:
            call()
        assert str(info.value).startswith(said), str(info.value)


def test_a_decontaminate_file_not_there_is_named_as_the_call_gave_it(tmp_path, capsys):
    """`build(..., decontaminate="bench.jsonl")` said "--decontaminate file not found"."""
    src = _source_file(tmp_path)
    bench = tmp_path / "bench.jsonl"
    with pytest.raises(UsageError) as info:
        api.build_options(sources=[src], tokenizer="tok", out=tmp_path / "o", decontaminate=bench)
    assert str(info.value) == f"decontaminate file not found: {bench}"
    with pytest.raises(UsageError) as info:
        api.build_options(
            sources=[src], tokenizer="tok", out=tmp_path / "o", decontaminate=tmp_path
        )
    assert str(info.value) == (
        f"decontaminate {tmp_path} is a folder: give its benchmark files (a list of them:"
        " decontaminate=[...])"
    )
    argv = ["build", str(src), "--tokenizer", "tok", "--out", str(tmp_path / "o")]
    assert main([*argv, "--decontaminate", str(bench)]) == 2
    assert capsys.readouterr().err == f"draftset: error: --decontaminate file not found: {bench}\n"


def _prompt_only_set(folder: Path) -> Path:
    """A set of 0 rows: its one input row, a prompt without an answer, queued in prompts.jsonl."""
    src = folder / "p.jsonl"
    src.write_text(json.dumps({"id": "q", "prompt": "Name a colour."}) + "\n")
    result = api.build(
        sources=[src],
        tokenizer=str(qwen3_tokenizer_dir()),
        eot_tokens=["<|im_end|>"],
        out=folder / "empty",
        workers=1,
    )
    return result.out


@pytest.mark.parametrize("case", range(2))
def test_a_row_out_of_range_is_named_as_the_call_gave_it(tmp_path, capsys, case):
    """`show(d, row=5)` said "--row 5 out of range: ... (--row 0..0, ...); --id ID finds a row
    by its id", and of a set without rows "--row 0: ...; --id ID says ...": flags, to a call
    that wrote `row=` (and whose way to a row by id is `row_id`)."""
    from draftset.review.show import ShowError

    cases = [
        (
            lambda: built_set(tmp_path, [ROW]),
            5,
            "{row} 5 out of range: the set has 1 row ({row} 0..0, or -1..-1 from the end);"
            " {by_id} finds a row by its id",
        ),
        (
            lambda: _prompt_only_set(tmp_path),
            0,
            "{row} 0: the set has no rows (1 prompt-only row in prompts.jsonl); {by_id} says"
            " what became of a row",
        ),
    ]
    made, row, said = cases[case]
    folder = made()
    with pytest.raises(ShowError) as info:
        api.show(folder, row=row)
    assert str(info.value) == said.format(row="row", by_id="row_id")
    assert main(["show", str(folder), "--row", str(row)]) == 2
    assert capsys.readouterr().err == (
        f"draftset: error: {said.format(row='--row', by_id='--id ID')}\n"
    )


def test_generate_takes_its_sources_alone_by_position(tmp_path):
    """`generate(src, url, out)`, the command line's order, was Python's "generate() takes 1
    positional argument but 3 were given": nothing of which keywords the call takes. A
    TypeError still (as Python's), and a usage error (exit code 2), before any work."""
    src = _source_file(tmp_path)
    for job in (api.generate, api.generate_options):
        with pytest.raises(GenerateUsageError) as info:
            job(src, ENDPOINT[0], tmp_path / "a.jsonl")
        assert isinstance(info.value, TypeError) and info.value.exit_code == 2
        assert str(info.value) == (
            f"{job.__name__}() takes only its sources by position (3 arguments were given):"
            f" give the other options by keyword, as {job.__name__}(sources,"
            " endpoints=[URL], out='answers.jsonl')"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
    gen = api.generate_options(src, endpoints=ENDPOINT, out=tmp_path / "a.jsonl")
    assert gen.out == tmp_path / "a.jsonl"


def _generate_cli(src: Path, out: Path, url: str, *extra: str) -> list[str]:
    return ["generate", str(src), "--endpoint", url, "--out", str(out), "--no-progress", *extra]


def test_a_resume_refused_names_restart_as_the_call_gives_it(tmp_path, capsys):
    """`generate(...)` rerun with other settings, or after a row was edited, was told to "add
    --restart" / "--restart answers every row again", and `restart=True` was announced as
    "draftset: --restart: removed ...": the command's flag, where the call takes
    `restart=True`."""
    from fault_server import FaultServer

    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "a", "prompt": "p"}) + "\n")
    out = tmp_path / "a.jsonl"
    with FaultServer() as srv:
        assert api.generate(src, endpoints=[srv.url], out=out).ok
        capsys.readouterr()
        settings = (
            f"{out} holds answers generated with other settings: temperature None -> 0.7."
            " Rerun with the same settings to resume, or add {restart} to discard them"
        )
        with pytest.raises(GenerateUsageError) as info:
            api.generate(src, endpoints=[srv.url], out=out, temperature=0.7)
        assert str(info.value) == settings.format(restart="restart=True")
        assert main(_generate_cli(src, out, srv.url, "--temperature", "0.7")) == 2
        assert capsys.readouterr().err == (
            f"draftset: error: {settings.format(restart='--restart')}\n"
        )
        src.write_text(json.dumps({"id": "a", "prompt": "another question"}) + "\n")
        edited = (
            f"row 'a' changed since its answer was written to {out} (its messages or tools"
            " differ): {restart} answers every row again, or give changed rows new ids"
        )
        with pytest.raises(GenerateUsageError) as info:
            api.generate(src, endpoints=[srv.url], out=out)
        assert str(info.value) == edited.format(restart="restart=True")
        assert main(_generate_cli(src, out, srv.url)) == 2
        assert capsys.readouterr().err == (
            f"draftset: error: {edited.format(restart='--restart')}\n"
        )
        src.write_text(json.dumps({"id": "a", "messages": [{"role": "wizard"}]}) + "\n")
        with pytest.raises(GenerateUsageError) as info:
            api.generate(src, endpoints=[srv.url], out=out)
        said = str(info.value)
        assert said.startswith("row 'a' was answered but no longer reads (") and said.endswith(
            "): fix the row, or restart=True to answer every row again"
        ), said
        assert main(_generate_cli(src, out, srv.url)) == 2
        err = capsys.readouterr().err
        assert err == f"draftset: error: {said.replace('restart=True', '--restart')}\n", err
        src.write_text(json.dumps({"id": "a", "prompt": "p"}) + "\n")
        api.generate(src, endpoints=[srv.url], out=out, temperature=0.7, restart=True)
        removed = f"{out}, {tmp_path / 'a.errors.jsonl'}, {tmp_path / 'a.run.json'}"
        assert capsys.readouterr().err == (
            f"draftset: restart=True: removed the previous run's {removed}\n"
        )
        assert main(_generate_cli(src, out, srv.url, "--temperature", "0.6", "--restart")) == 0
        assert capsys.readouterr().err.startswith(
            f"draftset: --restart: removed the previous run's {removed}\n"
        )


def test_a_model_not_served_names_model_as_the_call_gave_it(tmp_path, capsys):
    """`generate(..., model="x")` against servers of another model was told "not --model 'x'",
    and servers of two models "pass --model": the command's flag."""
    from fault_server import FaultServer

    src = _source_file(tmp_path)
    out = tmp_path / "a.jsonl"
    with FaultServer() as one, FaultServer(model="another-model") as two:
        with pytest.raises(GenerateUsageError) as info:
            api.generate(src, endpoints=[one.url], out=out, model="nope")
        said = f"{one.url} serves ['fault-model'], not {{model}} 'nope'"
        assert str(info.value) == said.format(model="model")
        assert main(_generate_cli(src, out, one.url, "--model", "nope")) == 2
        assert capsys.readouterr().err == f"draftset: error: {said.format(model='--model')}\n"
        with pytest.raises(GenerateUsageError) as info:
            api.generate(src, endpoints=[one.url, two.url], out=out)
        said = (
            "endpoints do not serve exactly one common model ({one}: ['fault-model'], {two}:"
            " ['another-model']); {give}"
        )
        urls = {"one": one.url, "two": two.url}
        assert str(info.value) == said.format(**urls, give="pass model=...")
        assert main([*_generate_cli(src, out, one.url), "--endpoint", two.url]) == 2
        assert capsys.readouterr().err == (
            f"draftset: error: {said.format(**urls, give='pass --model')}\n"
        )
        assert not one.requests and not two.requests  # no completion asked for
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.lock", "in.jsonl"]  # the lock stays


@pytest.mark.parametrize("case", range(3))
def test_an_answers_file_refused_names_out_as_the_call_gave_it(tmp_path, capsys, case):
    """`generate(src, ..., out=src)` said "--out X is the source X", a file of the user's "...;
    choose another --out", a lock file of theirs "--out X: X.lock exists ...": the command's
    flag, to a call that wrote `out=`."""
    src = _source_file(tmp_path)
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"id": "a", "text": "my own data"}) + "\n")
    taken = tmp_path / "k.jsonl"
    (tmp_path / "k.lock").write_text("my notes\n")
    cases = [
        (src, "{out} {src} is the source {src}"),
        (
            mine,
            "{mine} exists and was not written by draftset generate (no mine.run.json); choose"
            " another {out}",
        ),
        (
            taken,
            "{out} {taken}: {lock} exists and is not a lock draftset wrote (a process id); move"
            " it away or choose another {out}",
        ),
    ]
    paths = {"src": src, "mine": mine, "taken": taken, "lock": tmp_path / "k.lock"}
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    out, said = cases[case]
    with pytest.raises(UsageError) as info:
        api.generate(src, endpoints=ENDPOINT, out=out)
    assert str(info.value) == said.format(out="out", **paths)
    assert main(_generate_cli(src, out, ENDPOINT[0])) == 2
    assert capsys.readouterr().err == f"draftset: error: {said.format(out='--out', **paths)}\n"
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            {"temperature": 0.6, "extra_body": {"temperature": 1.5}},
            "{extra_body} sets temperature 1.5, and {temperature} 0.6: one request field, two"
            " values; set it in one place",
        ),
        (
            {"max_tokens": 32, "extra_body": {"max_completion_tokens": 9999}},
            "{extra_body} sets max_completion_tokens 9999, and {max_tokens} 32: the server reads"
            " both as the answer's token limit (the first wins); set it in one place",
        ),
        (
            {"return_token_ids": True, "extra_body": {"return_token_ids": False}},
            "{extra_body} sets return_token_ids false, and {return_token_ids} true: one request"
            " field, two values; set it in one place",
        ),
        (
            {"extra_body": {"reasoning_effort": "high"}},
            '{extra_body} sets reasoning_effort "high", which the server renders into the'
            " prompt, and {chat_template_kwargs} does not: build would render the rows without"
            " it; give it in {chat_template_kwargs} instead (it is sent as the request's field"
            " too)",
        ),
        (
            {
                "chat_template_kwargs": {"reasoning_effort": "low"},
                "extra_body": {"reasoning_effort": "high"},
            },
            '{extra_body} sets reasoning_effort "high", and {chat_template_kwargs}'
            ' reasoning_effort "low": one request field, two values; set it in one place',
        ),
    ],
)
def test_a_request_field_set_twice_names_both_as_the_call_gave_them(
    tmp_path, capsys, options, said
):
    """`generate(..., temperature=0.6, extra_body={"temperature": 1.5})` said "--extra-body
    sets temperature 1.5, and --temperature 0.6": both the command's flags."""
    src = _source_file(tmp_path)
    with pytest.raises(GenerateUsageError) as info:
        api.generate_options(src, endpoints=ENDPOINT, out=tmp_path / "a.jsonl", **options)
    names = {k: k for k in GenerateArgs.model_fields}
    assert str(info.value) == said.format(**names)
    argv = _generate_cli(src, tmp_path / "a.jsonl", ENDPOINT[0])
    for name, value in options.items():
        flag = flag_of(GenerateArgs, name)
        if value is True:
            argv.append(flag)
        else:
            argv += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    assert main(argv) == 2
    flags = {k: flag_of(GenerateArgs, k) for k in GenerateArgs.model_fields}
    assert capsys.readouterr().err == f"draftset: error: {said.format(**flags)}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def _preflight_mistakes(folder: Path) -> list[tuple[dict[str, Any], str, dict[str, str]]]:
    """(build's options, its line with {names} to fill, the names as the API gives them; the
    command line's are their flags) of a build refused before any work."""
    from draftset.config.preflight import MANIFEST_FORMAT
    from draftset.engine.base import available_cpus

    data = folder / "data"
    data.mkdir()
    _source_file(data)
    mine = folder / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    empty = folder / "empty.jinja"
    empty.write_text("")
    cpus = available_cpus()
    return [
        (
            {"sources": [data], "out": data / "o"},
            f"{{out}} {data / 'o'} is inside the source folder {data} (a rerun would read it as"
            " input)",
            {},
        ),
        (
            {"out": mine},
            f"{{out}} {mine} exists, is not empty and is not a draftset output (no manifest.json"
            f' with "format": "{MANIFEST_FORMAT}"): {{overwrite}} would not replace it either'
            " (it replaces only draftset outputs and empty folders); name a new folder",
            {"overwrite": "overwrite=True"},
        ),
        ({"chat_template": empty}, f"{{chat_template}} {empty} is empty", {}),
        (
            {"chat_template": folder},
            f"{{chat_template}} {folder} is a folder, not a template file (give the .jinja"
            " file; without {chat_template} the tokenizer folder's own template is used)",
            {},
        ),
        (
            {"chat_template": "Qwen/Qwen3-8B"},
            "chat template file not found: Qwen/Qwen3-8B ({chat_template} takes a .jinja file,"
            " never a hub id: a model's own template comes with its tokenizer, so {tokenizer}"
            " reads it)",
            {"tokenizer": "tokenizer='Qwen/Qwen3-8B'"},
        ),
        (
            {"workers": cpus + 1},
            f"{{workers}} {cpus + 1}: this machine has {cpus} CPUs (the row step uses at most"
            " that many; leave {workers} out to use them all)",
            {},
        ),
        (
            {"draft_vocab_size": 200, "target_vocab_size": 100},
            "{draft_vocab_size} 200 exceeds the target vocabulary size 100",
            {},
        ),
        (
            {"engine": "ray", "ray_address": "http://127.0.0.1:8265"},
            "{ray_address} http://127.0.0.1:8265: that is a web URL (the Ray dashboard's, port"
            " 8265), not the cluster's address: give HOST:PORT (the head's GCS, 6379 by"
            " default) or ray://HOST:PORT (Ray Client, 10001 by default)",
            {},
        ),
    ]


@pytest.mark.parametrize("case", range(8))
def test_a_build_refused_before_any_work_names_its_options_as_given(tmp_path, capsys, case):
    """`build(..., out=X)` of an output inside a source folder said "--out X is inside the
    source folder", `chat_template=` "--chat-template X is empty" ("... without
    --chat-template ..."), `workers=` "--workers N: ... leave --workers out",
    `draft_vocab_size=` "--draft-vocab-size 200 exceeds ...": the command's flags, to a call
    that wrote keywords."""
    from draftset.config.schema import BuildArgs

    src = _source_file(tmp_path)
    tok = str(qwen3_tokenizer_dir())
    options, said, api_names = _preflight_mistakes(tmp_path)[case]
    given = {"sources": [src], "tokenizer": tok, "out": tmp_path / "o", "workers": 1}
    given.update(options)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(UsageError) as info:
        api.build(**given)
    names = {k: k for k in BuildArgs.model_fields} | api_names
    assert str(info.value) == said.format(**names)
    argv = ["build", *map(str, given.pop("sources"))]
    for name, value in given.items():
        argv += [flag_of(BuildArgs, name), str(value)]
    assert main(argv) == 2
    flags = {k: flag_of(BuildArgs, k) for k in BuildArgs.model_fields}
    flags["tokenizer"] = "--tokenizer Qwen/Qwen3-8B"
    assert capsys.readouterr().err == f"draftset: error: {said.format(**flags)}\n"
    assert sorted(tmp_path.rglob("*")) == before


def test_a_work_folder_that_is_a_file_names_work_as_the_call_gave_it(tmp_path, capsys):
    """`run(recipe, work="notes.txt")` said "--work notes.txt is a file, not a folder"."""
    from draftset.pipeline.run_state import RunUsageError

    recipe = _run_recipe(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    with pytest.raises(RunUsageError) as info:
        api.run(recipe, work=notes)
    assert str(info.value) == f"work {notes} is a file, not a folder"
    assert main(["run", str(recipe), "--work", str(notes)]) == 2
    assert capsys.readouterr().err == f"draftset: error: --work {notes} is a file, not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "notes.txt", "r.yaml"]


def test_a_benchmark_or_render_server_refused_is_named_as_the_call_gave_it(tmp_path, capsys):
    """`build(..., decontaminate="empty.txt")` said "--decontaminate empty.txt: no benchmark
    prompts in it", `verify(d, render_server="localhost:8000")` "--render-server must be an
    http(s) URL": the command's flags, to calls that wrote keywords."""
    from draftset.config.fields import scheme_hint

    out = built_set(tmp_path, [ROW])
    src = tmp_path / "a.jsonl"
    bench = tmp_path / "empty.txt"
    bench.write_text("\n")
    no_prompts = (
        f"{{}} {bench}: no benchmark prompts in it (a .txt file gives one per non-blank line,"
        " other files the user turns of their rows)"
    )
    with pytest.raises(UsageError) as info:
        api.build_options(sources=[src], tokenizer="tok", out=tmp_path / "o", decontaminate=bench)
    assert str(info.value) == no_prompts.format("decontaminate")
    argv = ["build", str(src), "--tokenizer", "tok", "--out", str(tmp_path / "o")]
    assert main([*argv, "--decontaminate", str(bench)]) == 2
    assert capsys.readouterr().err == f"draftset: error: {no_prompts.format('--decontaminate')}\n"
    url = "localhost:8000"
    not_http = f"{{}} must be an http(s) URL, got {url!r}{scheme_hint(url)}"
    with pytest.raises(UsageError) as info:
        api.verify(out, render_server=url)
    assert str(info.value) == not_http.format("render_server")
    assert main(["verify", str(out), "--render-server", url]) == 2
    assert capsys.readouterr().err == f"draftset: error: {not_http.format('--render-server')}\n"


def test_a_command_that_generates_in_a_running_event_loop_names_its_flags(tmp_path):
    """`run_sync` runs generate in a thread of its own where an event loop already runs; a
    thread starts in an empty context, so a command's messages from there (`named_by_flags`)
    named the API's keywords: "not model 'nope'" to a command line that gave `--model`."""
    import asyncio

    from fault_server import FaultServer

    from draftset.core.naming import named_by_flags

    src = _source_file(tmp_path)

    async def in_a_loop(url: str) -> None:
        with named_by_flags():
            api.generate(src, endpoints=[url], out=tmp_path / "a.jsonl", model="nope")

    with FaultServer() as srv:
        with pytest.raises(GenerateUsageError) as info:
            asyncio.run(in_a_loop(srv.url))
        assert str(info.value) == f"{srv.url} serves ['fault-model'], not --model 'nope'"


def test_a_source_layout_option_that_would_do_nothing_is_named_as_given(tmp_path, capsys):
    """`build(recipe, format="alpaca")` said "--format alpaca applies to command-line sources
    only": a flag, and sources the call has none of."""
    recipe = _run_recipe(tmp_path)
    with pytest.raises(UsageError) as info:
        api.build_options(recipe, format="alpaca", fields={"instruction": "text"})
    assert str(info.value) == (
        "format='alpaca' fields={'instruction': 'text'} apply to sources given as paths only,"
        f" not to the sources of recipe {recipe}: set it per source there (sources: [{{path:"
        " ..., format: alpaca, fields: {instruction: text}}])"
    )
    argv = ["build", str(recipe), "--format", "alpaca", "--field", "instruction=text"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "draftset: error: --format alpaca --field instruction=text apply to command-line"
        f" sources only, not to the sources of recipe {recipe}: set it per source there"
        " (sources: [{path: ..., format: alpaca, fields: {instruction: text}}])\n"
    )


@pytest.mark.parametrize(
    ("fields", "said", "cli_said"),
    [
        (
            ["instruction"],
            "bad fields entry 'instruction' (use CANONICAL=COLUMN, e.g. instruction=text)",
            "bad --field 'instruction' (use CANONICAL=COLUMN, e.g. instruction=text)",
        ),
        (
            ["instruction=text,output=code"],
            "bad fields entry 'instruction=text,output=code': one mapping an entry: give each"
            " its own (fields=['instruction=text', 'output=code'])",
            "bad --field 'instruction=text,output=code': one mapping a flag: give --field once"
            " for each (--field instruction=text --field output=code)",
        ),
        (
            ["instruction=text", "instruction=q"],
            "fields maps instruction twice (instruction=text, instruction=q)",
            "--field instruction given twice (instruction=text, instruction=q)",
        ),
        (
            ["code=output"],
            "source in: fields {'code': 'output'}: no row shape reads a field 'code';"
            " CANONICAL=COLUMN puts draftset's field first: did you mean output=code?",
            "source in: --field code=output: no row shape reads a field 'code';"
            " CANONICAL=COLUMN puts draftset's field first: did you mean output=code?",
        ),
    ],
)
def test_a_field_mapping_refused_is_named_as_given(tmp_path, capsys, fields, said, cli_said):
    """`build(sources=[...], fields=["instruction"])` said "bad --field 'instruction'"."""
    src = _source_file(tmp_path)
    with pytest.raises(UsageError) as info:
        api.build_options(sources=[src], tokenizer="tok", out=tmp_path / "o", fields=fields)
    assert str(info.value) == said
    argv = ["build", str(src), "--tokenizer", "tok", "--out", str(tmp_path / "o")]
    for f in fields:
        argv += ["--field", f]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"draftset: error: {cli_said}\n"


def test_a_builds_late_refusals_name_its_options_as_the_call_gave_them(tmp_path):
    """What a build finds only at its end (another build's set at `out`, a benchmark file
    edited meanwhile) said "rerun with --overwrite ..., or choose another --out",
    "--decontaminate X: the file changed ...": flags, to a call that wrote keywords."""
    from draftset.core.naming import named_by_flags
    from draftset.output.folder import OutputExistsError, finalize_output, prepare_output
    from draftset.pipeline.build import _benchmarks_changed

    out = tmp_path / "o"
    (out / "theirs").mkdir(parents=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    bench = tmp_path / "bench.txt"
    bench.write_text("a prompt\n")
    said = [
        "output folder exists: {out} (pass {overwrite} to replace it)",
        "{out} appeared during the build (another build writing there?) and was left as it is;"
        " rerun with {overwrite} to replace it, or choose another {flag}",
        "{flag_bench} {bench}: the file changed during the build (1 bytes, now 9), after its"
        " prompts were read (the manifest would describe other bytes than the ones the rows were"
        " checked against); is something writing it? Copy it, or wait for the writer to finish",
    ]
    for names in (
        {"overwrite": "overwrite=True", "flag": "out", "flag_bench": "decontaminate"},
        {"overwrite": "--overwrite", "flag": "--out", "flag_bench": "--decontaminate"},
    ):
        with contextlib.ExitStack() as stack:
            if names["flag"] == "--out":
                stack.enter_context(named_by_flags())
            found = []
            for call in (
                lambda: prepare_output(out, overwrite=False),
                lambda: finalize_output(tmp, out, overwrite=False),
            ):
                with pytest.raises(OutputExistsError) as info:
                    call()
                found.append(str(info.value))
            found.append(str(_benchmarks_changed({bench: (1, 0)})))
        assert found == [s.format(out=out, bench=bench, **names) for s in said]


def test_generates_tokenizer_and_field_mapping_are_named_as_the_call_gave_them(tmp_path, capsys):
    """`generate(..., tokenizer=folder)` of a folder without tokenizer.json said "--tokenizer:
    cannot read ...", `fields={"instruction": "questoin"}` "--field instruction=questoin: no
    row among its first ... has a column": flags, to a call that wrote keywords."""
    src = tmp_path / "qa.jsonl"
    src.write_text(json.dumps({"question": "hi", "answer": "yo"}) + "\n")
    out = tmp_path / "a.jsonl"
    folder = tmp_path / "tok"
    folder.mkdir()
    cases = [
        (
            {"tokenizer": folder},
            ["--tokenizer", str(folder)],
            f"{{}}: cannot read {folder / 'tokenizer.json'}: [Errno 2] No such file or"
            f" directory: '{folder / 'tokenizer.json'}'",
            ("tokenizer", "--tokenizer"),
        ),
        (
            {"format": "alpaca", "fields": {"instruction": "questoin"}},
            ["--format", "alpaca", "--field", "instruction=questoin"],
            f"{src}: {{}}: no row among its first 1 has a column 'questoin' (keys [question,"
            " answer]); did you mean 'question'?",
            ("fields {'instruction': 'questoin'}", "--field instruction=questoin"),
        ),
    ]
    for options, flags, said, (keyword, flag) in cases:
        with pytest.raises(UsageError) as info:
            api.generate(src, endpoints=ENDPOINT, out=out, **options)
        assert str(info.value) == said.format(keyword)
        assert main([*_generate_cli(src, out, ENDPOINT[0]), *flags]) == 2
        assert capsys.readouterr().err == f"draftset: error: {said.format(flag)}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qa.jsonl", "tok"]
