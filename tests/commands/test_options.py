"""The option schema (`config.schema`) is the one declaration of every option: each command's
``--help`` lists every option its model declares, and a recipe value of the wrong type is one
line naming the key, exit code 2 (before the schema, several ended in Python tracebacks and
``temperature: -1`` / ``max_tokens: true`` were accepted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from draftset.cli import COMMANDS, main, parse_command_line
from draftset.config.fields import cli_fields, cli_of, flag_of
from draftset.config.schema import (
    BuildArgs,
    GenerateArgs,
    ReportArgs,
    RunArgs,
    ShowArgs,
    VerifyArgs,
)

MODELS = {
    "build": BuildArgs,
    "verify": VerifyArgs,
    "show": ShowArgs,
    "report": ReportArgs,
    "generate": GenerateArgs,
    "run": RunArgs,
}


def test_every_command_has_its_schema() -> None:
    assert set(MODELS) == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_every_option_the_schema_declares(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    model = MODELS[command]
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for name in cli_fields(model):
        for flag in cli_of(model, name).flags or (flag_of(model, name),):
            assert flag in text, (command, name, flag)
        help_text = model.model_fields[name].description
        if help_text and "{default}" not in help_text:  # its first words, as argparse wraps
            assert " ".join(help_text.split()[:2]) in " ".join(text.split()), (command, name)


def test_build_help_says_what_each_turn_mode_does(capsys: pytest.CaptureFixture[str]) -> None:
    """``--turns {all,last,each}`` said only "which assistant turns to supervise (default
    all)": a newcomer choosing a mode had to find docs/semantics.md."""
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    turns = text[text.index("--turns {all,last,each} ") :][:400]
    for mode in ("all =", "last =", "each ="):
        assert mode in turns, turns


def test_build_help_says_a_placeholder_replaces_the_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--placeholder N/A`` replaces 'OK.' and 'OK' (an "OK." answer is then supervised); the
    help said only "(default: 'OK.', 'OK'; ...)", read as a list one adds to."""
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    placeholder = text[text.index("--placeholder PLACEHOLDER ") :][:300]
    assert "replaces 'OK.', 'OK'" in placeholder and "repeatable" in placeholder, placeholder


def _sources(tmp_path: Path) -> Path:
    src = tmp_path / "in.jsonl"
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}]}
    src.write_text(json.dumps(row) + "\n")
    return src


def _recipe(tmp_path: Path, generate: dict | None = None, **top: object) -> Path:
    """A run recipe (JSON is YAML: the values keep their exact types)."""
    recipe = {
        "tokenizer": str(tmp_path / "tok"),
        "out": str(tmp_path / "out"),
        "sources": [str(_sources(tmp_path))],
        "generate": {"endpoints": ["http://127.0.0.1:9/v1"], **(generate or {})},
        **top,
    }
    path = tmp_path / "r.yaml"
    path.write_text(json.dumps(recipe))
    return path


RUN_CASES = [
    ({"max_tokens": "64"}, 'recipe key generate.max_tokens: expected an integer, got "64"'),
    ({"concurrency": "8"}, 'recipe key generate.concurrency: expected an integer, got "8"'),
    ({"request_timeout": "x"}, 'recipe key generate.request_timeout: expected a number, got "x"'),
    ({"api_key_env": 5}, "recipe key generate.api_key_env: expected a string, got 5"),
    ({"temperature": "hot"}, 'recipe key generate.temperature: expected a number, got "hot"'),
    ({"temperature": -1}, "recipe key generate.temperature: must be >= 0, got -1"),
    ({"max_tokens": True}, "recipe key generate.max_tokens: expected an integer, got true"),
    ({"regenerate": "some"}, "recipe key generate.regenerate: must be missing,"),
]


@pytest.mark.parametrize(("generate", "line"), RUN_CASES)
def test_a_mistyped_generate_value_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], generate: dict, line: str
) -> None:
    assert main(["run", str(_recipe(tmp_path, generate))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"draftset: error: {line}"), err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.run").exists()


BUILD_CASES = [
    ({"max_length": "64"}, 'recipe key max_length: expected an integer, got "64"'),
    ({"workers": "2"}, 'recipe key workers: expected an integer, got "2"'),
    ({"overwrite": "yes"}, 'recipe key overwrite: expected true or false, got "yes"'),
    ({"render_timeout": "5s"}, 'recipe key render_timeout: expected a number, got "5s"'),
    ({"eot_tokens": 7}, "recipe key eot_tokens: expected a string or a list of strings, got 7"),
]


@pytest.mark.parametrize(("top", "line"), BUILD_CASES)
@pytest.mark.parametrize("command", ["build", "run"])
def test_a_mistyped_build_value_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, top: dict, line: str
) -> None:
    assert main([command, str(_recipe(tmp_path, **top))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"draftset: error: {line}"), err
    assert not (tmp_path / "out").exists()


def test_a_mistyped_source_entry_names_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = _recipe(tmp_path)
    data = json.loads(recipe.read_text())
    data["sources"] = [{"path": data["sources"][0], "weight": "heavy"}]
    recipe.write_text(json.dumps(data))
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert err == 'draftset: error: recipe key sources[0].weight: expected a number, got "heavy"\n'


@pytest.mark.parametrize(
    ("given", "line"),
    [
        (["--workers", "abc"], "argument --workers: invalid int value: 'abc'"),
        (["--workers", "2.5"], "argument --workers: invalid int value: '2.5'"),
        (["--workers"], "argument --workers: expected one argument"),
        (["--engine"], "argument --engine: expected one argument"),
        (["--engine", "bogus"], "argument --engine: invalid choice: 'bogus'"),
    ],
)
def test_a_bad_early_read_value_is_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: list[str], line: str
) -> None:
    """`build` reads --workers and --engine ahead of its parser (to start its helper sooner):
    a value that read refuses is the main parser's one line, not a usage line and the error
    twice."""
    src = _sources(tmp_path)
    assert main(["build", str(src), "--out", str(tmp_path / "o"), *given]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"draftset: error: {line}"), err


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--format", "sharegpt"], "`format: sharegpt` on each entry of its `sources:`"),
        (["--max-length", "4096"], "`max_length: 4096` at the recipe's top level"),
        (["--temperature", "0.6"], "`temperature: 0.6` under its `generate:`"),
        (["--turns=each"], "`turns: each` at the recipe's top level"),
        (["--overwrite"], "`overwrite: true` at the recipe's top level"),
        (["--eot-token", "<|im_end|>"], "`eot_tokens: [<|im_end|>]` at the recipe's top level"),
        (
            ["--seed", "3"],
            "`seed: 3` at the recipe's top level (seed of the sampling), or `seed: 3` under its"
            " `generate:` (sent with each request)",
        ),
    ],
)
def test_run_says_where_in_the_recipe_a_build_or_generate_option_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: list[str], said: str
) -> None:
    """`run` takes its build and generate settings from the recipe; a user passing `build`'s or
    `generate`'s flags got argparse's bare "unrecognized arguments" and no way forward."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("sources: [a.jsonl]\n")
    assert main(["run", *given, str(recipe)]) == 2  # before the recipe: the harder case
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err, err
    assert not (tmp_path / "r.run").exists()


def test_a_flag_no_command_knows_is_still_argparses_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(tmp_path / "r.yaml"), "--frobnicate"]) == 2
    said = capsys.readouterr().err.strip()
    assert said == "draftset: error: unrecognized arguments: --frobnicate"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["build", "a.jsonl", "--template", "Qwen/Qwen3-8B"],
            "--template is not an option of draftset build: did you mean --chat-template or"
            " --template-kwargs?",
        ),
        (
            ["build", "a.jsonl", "--output=o"],
            "--output is not an option of draftset build: did you mean --out or --output-format?",
        ),
        (
            ["generate", "a.jsonl", "--chat-template", "t.jinja"],
            "--chat-template is not an option of draftset generate: did you mean"
            " --chat-template-kwargs?",
        ),
        (
            ["verify", "set", "--render", "http://127.0.0.1:8000"],
            "--render is not an option of draftset verify: did you mean --render-server?",
        ),
    ],
)
def test_an_option_that_is_the_first_words_of_another_is_not_read_as_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    said: str,
) -> None:
    """argparse reads the start of an option as the whole of it: ``build --template
    Qwen/Qwen3-8B`` (a hub template, a newcomer's guess) was read as ``--template-kwargs`` and
    said "--template-kwargs is not valid JSON"; ``--output o`` said "argument --output-format:
    invalid choice: 'o'"; ``generate --chat-template t.jinja`` "--chat-template-kwargs is not
    valid JSON". An option given as whole words that only begin another one is refused, naming
    the options meant; a shortened word (``--max-len``) still reads as before."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"draftset: error: {said} (write options in full)"], err
    args, extra = parse_command_line(["build", "a.jsonl", "--max-len", "9", "--tok", "T"])
    assert not extra and (args.max_length, args.tokenizer) == (9, "T")


@pytest.mark.parametrize(
    ("argv", "dest", "want"),
    [
        (["build", "a.jsonl", "--out", "o", "b.jsonl"], "inputs", ["a.jsonl", "b.jsonl"]),
        (
            ["build", "a.jsonl", "--tokenizer", "T", "b.jsonl", "--out", "o", "c.jsonl"],
            "inputs",
            ["a.jsonl", "b.jsonl", "c.jsonl"],
        ),
        (
            ["generate", "a.jsonl", "--endpoint", "http://x", "b.jsonl", "--out", "o.jsonl"],
            "sources",
            ["a.jsonl", "b.jsonl"],
        ),
        (["verify", "--fast", "set"], "dir", "set"),
    ],
)
def test_sources_may_stand_on_both_sides_of_options(argv: list[str], dest: str, want: Any) -> None:
    """`draftset build a.jsonl --tokenizer T --out o b.jsonl` (a source added at the end of a
    command line) was argparse's `unrecognized arguments: b.jsonl`, exit 2: positionals had to
    stand together."""
    args, extra = parse_command_line(argv)
    assert not extra and getattr(args, dest) == want and args.command == argv[0]


def test_a_source_after_the_options_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text('{"prompt": "hi"}\n')
    missing = tmp_path / "b-missing.jsonl"
    assert main(["build", str(a), "--out", str(tmp_path / "o"), str(missing)]) == 2
    err = capsys.readouterr().err
    assert "b-missing.jsonl" in err and "unrecognized" not in err, err


def test_a_source_named_like_an_option_is_read_after_a_double_dash() -> None:
    """`build --out o -- -x.jsonl`: Python's intermixed parse loses the ``--`` and reads
    ``-x.jsonl`` as an option; the plain parse keeps it a source."""
    args, extra = parse_command_line(["build", "--out", "o", "--", "-x.jsonl"])
    assert not extra and args.inputs == ["-x.jsonl"]


def test_a_pipe_of_draftsets_own_breaking_is_not_taken_for_the_reader_leaving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`main` ends quietly when the reader of its output left (`report | head`: exit 0);
    a `BrokenPipeError` from any other pipe (a worker's connection) while the output is still
    read must not end the command silently."""
    import argparse

    import draftset.cli as cli

    def broken(args: argparse.Namespace) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    parsed = argparse.Namespace(command="report", handler=broken)
    monkeypatch.setattr(cli, "parse_command_line", lambda argv: (parsed, []))
    with pytest.raises(BrokenPipeError):
        main(["report", "x"])


def test_draftset_alone_names_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """``draftset`` with nothing after it said "the following arguments are required:
    command", a word no help page uses, and no command named."""
    assert main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "draftset: error: give a command: build, verify, show, report, generate or run"
        " (draftset COMMAND --help explains one)"
    ], err


@pytest.mark.parametrize(
    ("argv", "shown"),
    [(["help"], "usage: draftset [-h]"), (["help", "build"], "usage: draftset build")],
)
def test_help_as_a_command_prints_the_help(
    capsys: pytest.CaptureFixture[str], argv: list[str], shown: str
) -> None:
    """``draftset help`` / ``draftset help build`` (git's, pip's, cargo's spelling) were
    "invalid choice: 'help'", exit 2."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(shown), out[:200]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["biuld", "a.jsonl"],
            "draftset: error: unknown command 'biuld': did you mean build? (commands: build,"
            " verify, show, report, generate, run)",
        ),
        (
            ["train", "a.jsonl"],
            "draftset: error: unknown command 'train': draftset writes the set a drafter is"
            " trained on, it does not train one (speculators train --data-path OUT reads the"
            " set: README, 'Training the result with speculators')",
        ),
    ],
)
def test_an_unknown_command_names_the_one_meant(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """A typo of a command said only "invalid choice: 'biuld' (choose from ...)"."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [said], err


@pytest.mark.parametrize("command", ["build", "generate"])
def test_dash_o_where_the_output_is_dash_dash_out_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """``draftset build a.jsonl -o out`` (report's spelling) said only "unrecognized arguments:
    -o out"."""
    endpoint = ["--endpoint", "http://127.0.0.1:9/v1"] if command == "generate" else []
    assert main([command, str(tmp_path / "a.jsonl"), *endpoint, "-o", "o"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    said = {  # generate's --out is required: argparse says so first
        "build": "unrecognized arguments: -o o",
        "generate": "the following arguments are required: --out",
    }[command]
    assert err == [
        f"draftset: error: {said} (-o is report's flag; draftset {command} names its output with"
        " --out)"
    ], err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["generate", "p.jsonl", "--endpoint", "127.0.0.1:8000/v1", "--out", "a.jsonl"],
            "--endpoint '127.0.0.1:8000/v1' is not an http(s) URL: did you mean"
            " http://127.0.0.1:8000/v1?",
        ),
        (
            ["generate", "p.jsonl", "--endpoint", "localhost:8000", "--out", "a.jsonl"],
            "--endpoint 'localhost:8000' is not an http(s) URL: did you mean"
            " http://localhost:8000/v1?",
        ),
        (
            ["verify", "set", "--render-server", "localhost:8000"],
            "--render-server must be an http(s) URL, got 'localhost:8000': did you mean"
            " http://localhost:8000?",
        ),
    ],
)
def test_a_server_address_without_its_scheme_names_the_url_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch, argv: list[str], said: str
) -> None:
    """``--endpoint 127.0.0.1:8000/v1`` (vLLM prints its address so) said only "is not an
    http(s) URL"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi"}\n', encoding="utf-8")
    if argv[0] == "verify":
        from conftest import qwen3_tokenizer_dir

        from draftset.config.options import BuildOptions
        from draftset.pipeline.build import run_build
        from draftset.sources.read import Source

        run_build(
            BuildOptions(
                [Source("p", tmp_path / "p.jsonl")],
                str(qwen3_tokenizer_dir()),
                tmp_path / "set",
                workers=1,
                eot_tokens=("<|im_end|>",),
            )
        )
        capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"draftset: error: {said}"], err
