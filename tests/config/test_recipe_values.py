"""Recipe values the schema alone cannot judge are one line, exit 2, before any work.

An outside probe found: a share given as text under `mix:` failed deep in the build with a
traceback (`TypeError: must be real number, not str`); a misspelled source name under
`mix.sources` took no row and shrank the set without a word (8 rows became 3); shares not
summing to 1 were refused only after the mix's pre-pass had read every row; an unquoted
date in `template_kwargs` (YAML reads it as a date) failed the build at its last step,
writing the manifest, after every row was rendered; the same in `generate.extra_body`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset import api
from draftset.cli import main
from draftset.core.errors import UsageError


def recipe(tmp: Path, extra: str) -> Path:
    data = tmp / "c.jsonl"
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    data.write_text(json.dumps(row) + "\n", encoding="utf-8")
    path = tmp / "recipe.yaml"
    path.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\neot_tokens: ['<|im_end|>']\nout: {tmp / 'out'}\n"
        f"sources:\n  - path: {data}\n    name: chats\n{extra}",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            "mix: {modes: {thinking: half, no_thinking: 0.5}}",
            "mix.modes.thinking: a share is a number >= 0, got 'half'",
        ),
        ("mix: {modes: x}", "mix.modes must be a mapping of names to shares, got 'x'"),
        ("mix: {sources: x}", "mix.sources must be a mapping of names to shares, got 'x'"),
        (
            "mix: {modes: {thinking: null}}",
            "mix.modes.thinking: a share is a number >= 0, got None",
        ),
        ("mix: {modes: {thinking: -1}}", "got -1"),
        (
            "mix: {sources: {chats: 0.5, nosuch: 0.5}}",
            "mix.sources: no source named 'nosuch' (sources: chats)",
        ),
        ("mix: {modes: {thinkin: 1}}", "mix.modes: no mode named 'thinkin'"),
        (  # read every row (the mix's pre-pass) before it said so
            "mix: {modes: {thinking: 1, no_thinking: 1}}",
            "mix.modes: shares must sum to 1, got 2",
        ),
        ("mix: {sources: {chats: 0.25}}", "mix.sources: shares must sum to 1, got 0.25"),
        (  # a mix of no shares: it ran, weights ignored (mix: {} was refused)
            "mix: {modes: null}",
            "mix gives no shares (modes and sources both null or absent): give one, or leave"
            " mix out",
        ),
        ("mix: {modes: null, sources: null}", "mix gives no shares"),
        (
            "template_kwargs: {cutoff: 2026-01-01}",
            "recipe key template_kwargs: cutoff is of type date, not a JSON value (YAML reads an"
            " unquoted date as a date: quote it)",
        ),
        (
            "template_kwargs: {a: [1, {b: .nan}]}",
            "recipe key template_kwargs: a[1].b is nan, not a JSON value",
        ),
    ],
)
def test_bad_recipe_values_are_one_line_before_any_work(tmp_path, capsys, no_work, extra, needle):
    assert main(["build", str(recipe(tmp_path, extra + "\n"))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "out").exists()


def test_the_api_checks_the_same_values(tmp_path, no_work):
    base = {"tokenizer": str(qwen3_tokenizer_dir()), "out": str(tmp_path / "o")}
    src = recipe(tmp_path, "").parent / "c.jsonl"
    with pytest.raises(UsageError, match=r"mix\.modes must be a mapping"):
        api.build(sources=[str(src)], mix={"modes": "x"}, **base)
    with pytest.raises(
        UsageError, match=r"^template_kwargs: a is of type object, not a JSON value"
    ):
        api.build(sources=[str(src)], template_kwargs={"a": object()}, **base)
    with pytest.raises(UsageError, match=r"^extra_body: a is of type set, not a JSON value"):
        api.generate(
            sources=[str(src)],
            endpoints=["http://127.0.0.1:9/v1"],
            out=str(tmp_path / "g.jsonl"),
            extra_body={"a": {1}},
        )
    assert not (tmp_path / "g.lock").exists()


def test_a_field_no_shape_reads_is_refused(tmp_path, capsys, no_work):
    """`--field ouptut=code` mapped a column nothing reads: every row became prompt-only and
    the set had no training row, exit 0, with a generic note about unread fields."""
    data = tmp_path / "mbpp.jsonl"
    data.write_text(json.dumps({"text": "Add two numbers.", "code": "a + b"}) + "\n")
    argv = ["build", str(data), "--format", "alpaca", "--field", "instruction=text"]
    argv += ["--field", "ouptut=code", "--tokenizer", str(qwen3_tokenizer_dir())]
    argv += ["--eot-token", "<|im_end|>", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--field ouptut=code: no row shape reads a field 'ouptut'" in err[0]
    assert "output" in err[0]  # the names it could have meant are listed


def test_counts_adding_up_to_more_than_max_samples_are_refused(tmp_path, capsys, no_work):
    """`a@count=6 b@count=3 --max-samples 4` took 9 rows, no word said."""
    src = recipe(tmp_path, "").parent / "c.jsonl"
    other = tmp_path / "d.jsonl"
    other.write_text(src.read_text())
    argv = ["build", f"{src}@count=6", f"{other}@count=3", "--max-samples", "4"]
    argv += ["--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the sources' counts add up to 9, more than that" in err[0]


def test_a_nan_threshold_is_named_as_not_finite(tmp_path, capsys, no_work):
    """`--near-dup-threshold nan` said "must be <= 1, not nan"."""
    src = recipe(tmp_path, "").parent / "c.jsonl"
    argv = ["build", str(src), "--near-dup-threshold", "nan", "--tokenizer", "t"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert "--near-dup-threshold must be a finite number, not nan" in capsys.readouterr().err


def test_a_recipe_is_given_alone_and_read_whatever_its_suffix_case(tmp_path, capsys, no_work):
    """`draftset build good.yaml x.jsonl` said "--tokenizer is required" of a recipe that has
    one; `GOOD.YAML` was not read as a recipe at all."""
    path = recipe(tmp_path, "mix: {modes: x}\n")
    src = path.parent / "c.jsonl"
    assert main(["build", str(path), str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path} is a recipe: give it alone" in err[0]
    upper = path.with_name("GOOD.YAML")
    upper.write_text(path.read_text())
    assert main(["build", str(upper)]) == 2  # read as the recipe it is: its mix is refused
    assert "mix.modes must be a mapping" in capsys.readouterr().err


def test_a_string_template_kwargs_in_a_recipe_names_the_recipe_key(tmp_path, capsys, no_work):
    """It named the command line's flag: `--template-kwargs is not valid JSON`."""
    path = recipe(tmp_path, "template_kwargs: 'enable_thinking: false'\n")
    assert main(["build", str(path)]) == 2
    err = capsys.readouterr().err
    assert "recipe key template_kwargs: expected a mapping" in err and "--template" not in err


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--format", "alpaca"], "--format alpaca applies to command-line sources only"),
        (["--field", "prompt=text"], "--field prompt=text applies to command-line sources only"),
        (["--preset", "openorca"], "--preset openorca applies to command-line sources only"),
    ],
)
def test_a_source_layout_flag_with_a_recipe_is_refused(tmp_path, capsys, no_work, flags, needle):
    """`build recipe.yaml --format alpaca` built with the flag ignored, exit 0: the layout
    flags apply to command-line sources; a recipe's sources set theirs per source."""
    path = recipe(tmp_path, "")
    assert main(["build", str(path), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    key = {"--format": "format: alpaca", "--field": "fields: {prompt: text}"}
    assert key.get(flags[0], "preset: openorca") in err[0] and str(path) in err[0], err
    assert not (tmp_path / "out").exists()


def test_the_api_refuses_a_source_layout_that_applies_to_no_source(tmp_path, no_work):
    """The API's ``format`` / ``fields`` / ``preset`` apply to sources given as paths: with a
    recipe's sources, or only `Source` objects and mappings, they did nothing."""
    path = recipe(tmp_path, "")
    # named as the call gave them (it said "--format alpaca applies to command-line sources")
    with pytest.raises(UsageError, match=r"^format='alpaca' applies to sources given as paths"):
        api.build(path, format="alpaca")
    with pytest.raises(
        UsageError, match=r"^fields=\{'prompt': 'text'\} applies to sources given as paths"
    ):
        api.build(path, fields={"prompt": "text"})
    src = str(path.parent / "c.jsonl")
    base = {"tokenizer": str(qwen3_tokenizer_dir()), "out": str(tmp_path / "o")}
    with pytest.raises(UsageError, match=r"^preset='openorca' applies to sources given as paths"):
        api.build(sources=[{"path": src}], preset="openorca", **base)


def test_run_refuses_the_source_layout_flags(tmp_path, capsys):
    """`run` has no --format / --field / --preset (its sources are the recipe's): refused,
    naming the source key that sets it."""
    path = recipe(tmp_path, "generate: {endpoints: ['http://127.0.0.1:9/v1']}\n")
    for flags, key in (
        (["--format", "alpaca"], "format: alpaca"),
        (["--field", "prompt=text"], "fields: {prompt: text}"),
        (["--preset", "openorca"], "preset: openorca"),
    ):
        assert main(["run", str(path), *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"`{key}` on each entry of its `sources:`" in err[0], err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.run").exists()


def test_generate_names_where_a_recipe_sets_the_layout(tmp_path, capsys):
    path = recipe(tmp_path, "")
    argv = ["generate", str(path), "--endpoint", "http://127.0.0.1:9/v1"]
    assert main([*argv, "--out", str(tmp_path / "g.jsonl"), "--field", "prompt=text"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(sources: [{path: ..., fields: {prompt: text}}])" in err[0], err


def test_a_zero_near_dup_threshold_is_one_line_not_a_traceback(tmp_path, capsys, no_work):
    """`--near-dup-threshold 0` (or a recipe's `near_dup_threshold: 0`, read as "off") passed
    the option's bounds (>= 0) and ended in the near deduper's `ValueError: near-dup threshold
    must be in (0, 1]`, a traceback, exit 1."""
    path = recipe(tmp_path, "dedup: near\nnear_dup_threshold: 0\n")
    assert main(["build", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["draftset: error: recipe key near_dup_threshold: must be > 0, got 0"], err
    argv = ["build", str(path.parent / "c.jsonl"), "--near-dup-threshold", "0", "--tokenizer", "t"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert "--near-dup-threshold must be > 0, not 0.0" in capsys.readouterr().err
