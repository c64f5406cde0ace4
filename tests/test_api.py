"""The Python API (docs/api.md): the same jobs as the CLI, results instead of printing, errors
that carry the CLI's exit codes, and the CLI built on it (byte-identical sets)."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, qwen3_bundled_dir, qwen3_tokenizer_dir

from draftset import api
from draftset.checks.verify import VerifyUsageError
from draftset.cli import _build_parser, main
from draftset.commands.build import build_arguments
from draftset.config.preflight import PreflightError
from draftset.config.recipe import RecipeError
from draftset.config.schema import BuildArgs, GenerateArgs
from draftset.core import errors
from draftset.generation.options import GenerateUsageError
from draftset.mask.template import TokenizerError
from draftset.output.readback import NotADraftsetError
from draftset.pipeline.run_state import RunUsageError
from draftset.sources.presets import UnknownPresetError
from draftset.sources.read import Source

QWEN3_VOCAB = 151936


def chat(i: int, answer: str = "Fine, thanks.", reasoning: str | None = None) -> dict:
    msg: dict = {"role": "assistant", "content": answer}
    if reasoning:
        msg["reasoning_content"] = reasoning
    return {"id": f"c{i}", "messages": [{"role": "user", "content": f"Question {i}?"}, msg]}


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    rows = [chat(i) for i in range(4)]
    rows += [chat(4, "Because " * 40, "Think first."), chat(5, "OK."), {"messages": "bad"}]
    two = chat(6)
    two["messages"] += [
        {"role": "user", "content": "And?"},
        {"role": "assistant", "content": "No."},
    ]
    rows.append(two)  # two supervised turns: two rows with turns="each"
    path = tmp_path_factory.mktemp("src") / "chats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


# --- the documented example runs as written --------------------------------------------------
def doc_blocks() -> tuple[str, str]:
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    example = text.split("## Example", 1)[1]
    code = re.search(r"```python\n(.*?)```", example, re.S)
    output = re.search(r"Output:\n\n```text\n(.*?)```", example, re.S)
    assert code and output, "docs/api.md lost its example or its output block"
    return code.group(1), output.group(1)


def test_docs_example_prints_what_the_doc_shows(tmp_path, monkeypatch, capsys):
    code, expected = doc_blocks()
    shutil.copytree(REPO / "examples" / "data", tmp_path / "examples" / "data")
    monkeypatch.chdir(tmp_path)
    # the README's bundled folder, as a newcomer has it (no generation_config.json beside it)
    monkeypatch.setenv("QWEN3_TOKENIZER", str(qwen3_bundled_dir()))
    exec(compile(code, "docs/api.md", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out == expected


# --- results, not printing -------------------------------------------------------------------
def test_api_build_equals_cli_build_byte_for_byte_and_prints_nothing(src, tmp_path, capfd):
    tok = str(qwen3_tokenizer_dir())
    argv = [
        "build", str(src), "--tokenizer", tok, "--out", str(tmp_path / "cli"), "--workers", "1",
        "--max-length", "48", "--truncation", "truncate", "--turns", "each", "--seed", "3",
        "--template-kwargs", '{"enable_thinking": true}', "--placeholder", "OK.",
        "--draft-vocab-size", "32", "--target-vocab-size", str(QWEN3_VOCAB), "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0
    capfd.readouterr()
    result = api.build(
        sources=[src],
        tokenizer=tok,
        out=tmp_path / "api",
        workers=1,
        max_length=48,
        truncation="truncate",
        turns="each",
        seed=3,
        template_kwargs={"enable_thinking": True},
        placeholders=["OK."],
        draft_vocab_size=32,
        target_vocab_size=QWEN3_VOCAB,
    )
    assert capfd.readouterr() == ("", "")  # nothing on stdout or stderr
    assert files(tmp_path / "api") == files(tmp_path / "cli")
    manifest = json.loads((result.out / "manifest.json").read_text())
    assert result.ok and result.finalized
    assert result.counts == manifest["counts"]["total"]
    assert result.per_source == manifest["counts"]["per_source"]
    assert result.rows == manifest["totals"]["rows"] > result.counts["written"]  # turns=each
    assert result.counts["read"] == 8 and result.counts["rejected_by_reason"] == {
        "no_supervised_turn": 1,
        "unknown_format": 1,
    }
    assert result.counts["truncated"] >= 1
    row = result.row(0)
    assert row["id"].startswith("c0") and len(row["input_ids"]) == row["seq_len"]
    assert [c.name for c in result.checks][:3] == ["structure", "file_hashes", "accounting"]
    assert all(c.ok for c in result.checks)

    checks = api.verify(result.out, speculators=False)
    assert capfd.readouterr() == ("", "")
    assert checks.ok and not checks.failed
    assert checks["mask_fidelity"].status == "pass"
    assert checks.recorded == result.out / "verify.json" and checks.recorded.is_file()


def test_verify_names_the_failing_check_of_a_corrupted_set(src, tmp_path, capsys):
    tok = str(qwen3_tokenizer_dir())
    out = api.build(sources=[src], tokenizer=tok, out=tmp_path / "o", workers=1).out
    with (out / "rejects.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"source": "chats", "row": 99, "id": "x", "reason": "r", "message": "m"}\n')
    result = api.verify(out, fast=True, json=tmp_path / "checks.json")
    assert not result.ok
    assert {"file_hashes", "accounting"} <= set(result.failed)
    assert not result["file_hashes"].ok and result["file_hashes"].count == 1
    assert result["structure"].ok
    assert json.loads((tmp_path / "checks.json").read_text()) == result.to_json()
    assert capsys.readouterr().out == ""
    assert main(["verify", str(out), "--fast", "--json", str(tmp_path / "cli.json")]) == 1
    assert "verify failed: file_hashes, accounting" in capsys.readouterr().out
    assert (tmp_path / "cli.json").read_text() == (tmp_path / "checks.json").read_text()


def test_progress_callback_sees_every_row(src, tmp_path):
    seen: list[tuple[int, int]] = []
    result = api.build(
        sources=[src],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=tmp_path / "o",
        workers=1,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen and seen[-1][0] == result.counts["read"]


# --- errors: DraftsetError with the CLI's exit code and line ----------------------------------
def error_cases(src: Path, tmp: Path) -> list[tuple[type, object, list[str]]]:
    tok = str(qwen3_tokenizer_dir())
    gen = ["generate", str(src), "--endpoint", "http://x", "--out", str(tmp / "a.jsonl")]
    return [
        (
            errors.UsageError,
            lambda: api.build(sources=[tmp / "missing.jsonl"], tokenizer=tok, out=tmp / "o"),
            ["build", str(tmp / "missing.jsonl"), "--tokenizer", tok, "--out", str(tmp / "o")],
        ),
        (
            PreflightError,
            lambda: api.build(sources=[src], tokenizer=tok, out=src),
            ["build", str(src), "--tokenizer", tok, "--out", str(src)],
        ),
        (
            TokenizerError,
            lambda: api.build(sources=[src], tokenizer=str(tmp / "no-tok"), out=tmp / "o"),
            ["build", str(src), "--tokenizer", str(tmp / "no-tok"), "--out", str(tmp / "o")],
        ),
        (
            NotADraftsetError,
            lambda: api.verify(tmp),
            ["verify", str(tmp)],
        ),
        (
            VerifyUsageError,
            lambda: api.verify(tmp, sample=0),
            ["verify", str(tmp), "--sample", "0"],
        ),
        (
            RunUsageError,
            lambda: api.run(src),
            ["run", str(src)],
        ),
        (
            GenerateUsageError,
            lambda: api.generate(src, endpoints="ftp://x", out=tmp / "a.jsonl"),
            ["generate", str(src), "--endpoint", "ftp://x", "--out", str(tmp / "a.jsonl")],
        ),
        (
            UnknownPresetError,
            lambda: api.build(sources=[src], tokenizer=tok, out=tmp / "o", preset="nope"),
            ["build", str(src), "--tokenizer", tok, "--out", str(tmp / "o"), "--preset", "nope"],
        ),
        (
            UnknownPresetError,
            lambda: api.generate(src, endpoints="http://x", out=tmp / "a.jsonl", preset="nope"),
            [*gen, "--preset", "nope"],
        ),
        (
            RecipeError,
            lambda: api.generate(src, endpoints="http://x", out=tmp / "a.jsonl", fields=["x"]),
            [*gen, "--field", "x"],
        ),
        (
            NotADraftsetError,
            lambda: api.report(tmp),
            ["report", str(tmp)],
        ),
    ]


def test_errors_carry_the_cli_exit_code_and_line(src, tmp_path, capsys):
    for cls, call, argv in error_cases(src, tmp_path):
        with pytest.raises(errors.DraftsetError) as info:
            call()
        assert type(info.value) is cls, (cls, info.value)
        assert capsys.readouterr() == ("", ""), cls
        assert main(argv) == info.value.exit_code == 2
        # the same line, but that the API names an option by its keyword, the command by its flag
        line = info.value.cli_line()
        for keyword, flag in (
            ("sample must", "--sample must"),
            ("endpoints:", "--endpoint"),
            ("out ", "--out "),
            ("bad fields entry", "bad --field"),
        ):
            line = line.replace(f"error: {keyword}", f"error: {flag}")
        assert capsys.readouterr().err.strip() == line, cls
    assert not (tmp_path / "o").exists()


def test_every_run_level_error_is_a_draftset_error():
    from draftset.config.recipe import RecipeError
    from draftset.engine.helper import SidecarError
    from draftset.generation.job import Unreachable
    from draftset.generation.store import StoreError
    from draftset.output.folder import OutputExistsError
    from draftset.pipeline.build import AccountingError, OutputWriteError
    from draftset.pipeline.run_state import RunFailed
    from draftset.review.show import ShowError
    from draftset.select.modes import MixError
    from draftset.sources.read import SourceError

    for cls in (SourceError, RecipeError, StoreError, MixError, ShowError, OutputExistsError):
        assert issubclass(cls, errors.DraftsetError) and cls.exit_code == 2, cls
    for cls in (AccountingError, OutputWriteError, SidecarError, RunFailed, Unreachable):
        assert issubclass(cls, errors.RunError) and cls.exit_code == 1, cls
    assert errors.RunError("disk full").cli_line() == "draftset: disk full"
    assert issubclass(MixError, ValueError)  # still what mix's callers catch


# Exceptions that never reach the user: each is caught inside draftset and becomes a row's
# reject, a check result, an error line of `generate` or a retry (why, per class).
INTERNAL_EXCEPTIONS = {
    "FinalError",  # generate: a request the server refused; an error line for that row
    "TransientError",  # generate: retried, then RetriesExhausted
    "RetriesExhausted",  # generate: an error line for that row
    "NoEndpoint",  # generate: ends the job as `aborted` (exit 1, resumable)
    "EndpointRefused",  # generate: 401/404/407 stop the job (exit 1, resumable), rows left
    "AnswersFromAnotherModel",  # generate: (an EndpointRefused) another model's answers stop it
    "WriteFailed",  # generate: a full disk stops the job (exit 1, resumable), lines cut whole
    "WireError",  # generate: a broken HTTP exchange, retried as TransientError
    "BodyTooLarge",  # generate: a FinalError for that row
    "RowProblem",  # read, normalize, presets: a row's reject
    "DamagedDocument",  # read: a .json document that does not parse: a SourceError (exit 2)
    "RenderLimit",  # a template that runs too long or too deep: a row's reject
    "RenderTimeout",  # (a RenderLimit)
    "RenderTooLarge",  # (a RenderLimit)
    "Terminated",  # SIGTERM as KeyboardInterrupt: exit 143
    "RenderRefused",  # verify --render-server: the server refused a row's render: that row fails
    "ToolRejected",  # build: a tool vLLM would answer with 400: that row's template_error
    "NamedToolUse",  # build: a row with tools under a named 'tool_use' template: template_error
    "TokenFreqPtShape",  # verify: a token_freq.pt of another shape: the token_freq check fails
    "ForeignPickle",  # token_freq.pt naming a global: read as TokenFreqPtShape, the check fails
}


def test_every_exception_class_in_draftset_is_a_draftset_error_or_internal():
    """A new exception class must either carry its exit code or be listed above with why."""
    import importlib
    import pkgutil

    import draftset

    seen = set()
    for info in pkgutil.walk_packages(draftset.__path__, "draftset."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, BaseException):
                if obj.__module__ != info.name:
                    continue  # imported, checked where it is defined
                seen.add(name)
                if name not in INTERNAL_EXCEPTIONS:
                    assert issubclass(obj, errors.DraftsetError), f"{info.name}.{name}"
                    assert obj.exit_code in (errors.EXIT_USAGE, errors.EXIT_FAIL), name
    assert seen >= INTERNAL_EXCEPTIONS  # no stale names


@pytest.mark.parametrize("command", ["build", "verify", "show", "report", "generate", "run"])
def test_every_command_prints_one_line_and_exits_2_on_a_bad_option(command, capsys):
    """Each command parses and maps errors exactly like `draftset` (one dispatcher)."""
    assert main([command, "--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("draftset: error: "), err


# --- the CLI is a layer over the API ---------------------------------------------------------
def test_every_build_option_maps_to_an_api_argument(src):
    args = _build_parser().parse_args(["build", str(src)])
    assert set(build_arguments(args)) == set(BuildArgs.model_fields) - {"mix"} | {"recipe"}


# --- the helper process starts ahead of the driver's own start-up --------------------------------
@pytest.fixture
def sidecars(monkeypatch) -> list[str]:
    """Records each helper started and when the options were parsed, in order."""
    import draftset.engine.helper as helper_module
    import draftset.pipeline.build as build_module

    events: list[str] = []

    class Recorded(helper_module.Sidecar):
        def __init__(self, *args: Any) -> None:
            events.append("helper")
            super().__init__(*args)

    monkeypatch.setattr(helper_module, "Sidecar", Recorded)
    monkeypatch.setattr(build_module, "Sidecar", Recorded)
    parse = api.build_options
    monkeypatch.setattr(api, "build_options", lambda **kw: events.append("options") or parse(**kw))
    return events


def test_a_build_starts_its_helper_before_parsing_and_uses_that_one(src, tmp_path, sidecars):
    tok = str(qwen3_tokenizer_dir())
    direct = api.build(sources=[src], tokenizer=tok, out=tmp_path / "w2", workers=2)
    assert sidecars == ["helper", "options"]  # one helper, started first, used by the build
    assert direct.ok
    inline = api.build(sources=[src], tokenizer=tok, out=tmp_path / "w1", workers=1)
    assert sidecars == ["helper", "options", "options"]  # inline: none at all
    assert files(direct.out).keys() == files(inline.out).keys()
    assert multiprocessing.active_children() == []


def test_a_usage_error_stops_the_helper_started_ahead(src, tmp_path, sidecars):
    with pytest.raises(errors.UsageError):
        api.build(sources=[src], tokenizer="x", out=tmp_path / "o", workers=2, turns="bogus")
    assert sidecars == ["helper", "options"]
    assert multiprocessing.active_children() == []
    assert not (tmp_path / "o").exists()


def test_a_build_parses_the_same_on_the_build_only_parser(src, tmp_path):
    """`main` builds only the build subparser for `draftset build` (the other commands' modules
    load pyarrow and rich first): same arguments, same defaults, same handler."""
    argv = ["build", str(src), "--tokenizer", "t", "--out", str(tmp_path / "o"), "--workers", "2"]
    argv += ["--turns", "each", "--max-length", "512", "--eot-token", "<|x|>", "--no-progress"]
    for args in (["build", str(src)], argv):
        light, full = _build_parser("build"), _build_parser()
        assert vars(light.parse_args(args)) == vars(full.parse_args(args))
    with pytest.raises(errors.UsageError, match="unrecognized arguments: --bogus"):
        _build_parser("build").parse_args(["build", str(src), "--bogus"])
    code = (
        "import sys\n"
        "from draftset.cli import _build_parser\n"
        "_build_parser('build').parse_args(['build', 'x.jsonl'])\n"
        "print(sorted({'pyarrow', 'rich', 'numpy', 'importlib.metadata'} & set(sys.modules)))\n"
    )
    assert fresh_python(code, PYTHONPATH=str(REPO / "src")) == "[]"


def test_version_is_printed_on_stdout(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"draftset \S+\n", out), out


def test_every_generate_option_has_an_api_argument(src):
    """The command's options are the schema's fields, which api.generate validates its
    keyword arguments by: a new option reaches both, or neither."""
    args = _build_parser().parse_args(["generate", str(src), "--endpoint", "e", "--out", "o"])
    cli = set(vars(args)) - {"handler", "command", "no_progress"}
    assert cli == set(GenerateArgs.model_fields)
    with pytest.raises(errors.UsageError, match="no_such_option"):
        api.generate_options(src, endpoints="http://e", out="o.jsonl", no_such_option=1)


def test_cli_build_calls_the_api(src, tmp_path, monkeypatch):
    calls: list[dict] = []

    def fake(**kw):
        calls.append(kw)
        raise errors.UsageError("stop here")

    monkeypatch.setattr(api, "build", fake)
    assert main(["build", str(src), "--out", "o", "--field", "a=b", "--eot-token", "X"]) == 2
    assert calls[0]["sources"] == [str(src)] and calls[0]["fields"] == ["a=b"]
    # progress unless --no-progress: a bar on a terminal, lines in a log (as here)
    assert calls[0]["eot_tokens"] == ["X"] and calls[0]["progress"] is True
    assert main(["build", str(src), "--out", "o", "--eot-token", "X", "--no-progress"]) == 2
    assert calls[1]["progress"] is False


def fresh_python(code: str, **env: str) -> str:
    """What ``code`` prints in a fresh interpreter (imports are the point), stripped."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_spawned_children_do_not_pay_for_the_cli():
    """Workers and the helper are spawn-started: each re-imports the console script's module
    (``draftset.cli``) as ``__mp_main__``. What cli.py imports at its top, every child loads:
    a worker must stay free of pyarrow and rich (~35 MB a process, 3 processes a build)."""
    code = (
        "import runpy, sys\n"
        "runpy.run_module('draftset.cli', run_name='__mp_main__')\n"
        "import draftset.engine.worker\n"
        "print(sorted(m for m in ('pyarrow', 'rich', 'torch', 'datasets') if m in sys.modules))\n"
    )
    assert fresh_python(code) == "[]"


def test_import_draftset_is_lean_and_the_api_is_draftsets_own_names():
    code = (
        "import sys, draftset\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('draftset.'))\n"
        "assert loaded == [], loaded\n"
        "from draftset import build, verify, run, report, generate\n"
        "from draftset import api\n"
        "assert (build, verify, run, report, generate) == (\n"
        "    api.build, api.verify, api.run, api.report, api.generate)\n"
        "import draftset.pipeline.build, draftset.checks.verify, draftset.pipeline.run\n"
        "import draftset.generation.job, draftset.review.report\n"
        "assert draftset.build is api.build and draftset.verify is api.verify\n"  # not shadowed
        "assert draftset.run is api.run and draftset.generate is api.generate\n"
        "assert draftset.report is api.report\n"
        "print(draftset.__version__ != '')\n"
    )
    assert fresh_python(code) == "True"


def test_the_result_types_are_importable_and_typed_for_a_users_type_checker():
    """The docs' `build(...) -> BuildResult` named a type no public module exported (mypy
    --strict on `from draftset.api import BuildResult`: "does not explicitly export"), and
    without a py.typed marker a user's type checker skipped draftset altogether ("module is
    installed, but missing library stubs or py.typed marker"). Still lean on import."""
    code = (
        "import sys, draftset, draftset.api\n"
        "assert not [m for m in sys.modules if m.startswith('draftset.pipeline')]\n"
        "from draftset.api import BuildResult, CheckResult, GenerateResult, RunResult\n"
        "from draftset.api import UsageError, RunError, VerifyResult, DraftsetError\n"
        "import draftset.pipeline.build as b, draftset.output.readback as rb\n"
        "import draftset.generation.outcomes as go, draftset.pipeline.run_state as rs\n"
        "import draftset.core.errors as e\n"
        "assert (BuildResult, CheckResult, GenerateResult, RunResult) == (\n"
        "    b.BuildResult, rb.CheckResult, go.GenerateResult, rs.RunResult)\n"
        "assert (UsageError, RunError) == (e.UsageError, e.RunError)\n"
        "assert DraftsetError is e.DraftsetError\n"
        "assert draftset.BuildResult is BuildResult and draftset.UsageError is UsageError\n"
        "assert set(draftset.__all__) <= set(draftset.api.__all__)\n"
        "print('ok')\n"
    )
    assert fresh_python(code) == "ok"
    assert (REPO / "src" / "draftset" / "py.typed").is_file()
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert (
        "[tool.setuptools.package-data]\n" in pyproject and 'draftset = ["py.typed"]' in pyproject
    )


def test_the_progress_hint_admits_none_as_the_functions_do():
    """`progress=None` is "not given" (docs/api.md), and every job takes it, but the hints said
    `bool | Callable` / `bool`: a user's mypy --strict refused `build(..., progress=None)`."""
    import inspect
    import typing

    assert type(None) in typing.get_args(api.ProgressArg)
    for fn in (api.run, api.run_options, api.generate):
        hint = inspect.signature(fn).parameters["progress"].annotation
        assert hint == "bool | None", (fn.__name__, hint)


JOB_ARGS = {"build": "BuildArgs", "verify": "VerifyArgs", "run": "RunArgs"}
JOB_ARGS |= {"report": "ReportArgs", "show": "ShowArgs", "generate": "GenerateArgs"}


def test_the_signatures_docs_api_shows_are_the_functions_own():
    """docs/api.md showed `report(dir, output=None, ...)` and `show(dir, row=None, ...)`, but
    both take only ``dir`` by position: `report(S, "r.html")` was Python's bare TypeError. Each
    signature the page shows: the names before ``*`` are the function's positional parameters
    in order, every other name is a keyword it takes (its own or its job's option), and a
    function whose options are keyword-only shows the ``*``."""
    import inspect

    from draftset.config import schema

    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    shown = re.findall(r"^(?:## |- )`(\w+)\((.*?)\)(?: -> \w+)?`", text, re.M)
    assert {name for name, _ in shown} == set(JOB_ARGS), shown
    for name, params in shown:
        sig = inspect.signature(getattr(api, name))
        positional = [
            p.name
            for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        names = [p.split("=")[0].strip() for p in re.split(r",\s*(?![^\[]*\])", params)]
        star = names.index("*") if "*" in names else len(names)
        before = [n for n in names[:star] if not n.startswith("**")]
        assert before == positional, f"{name}: the page shows {before} by position"
        fields = set(getattr(schema, JOB_ARGS[name]).model_fields)
        for n in names[star + 1 :]:
            if not n.startswith("**"):
                assert n in sig.parameters or n in fields, f"{name}: no keyword {n!r}"


def test_workers_and_cli_start_import_only_what_they_need():
    """Imports sit at the top of files unless lazy for a reason: these are the reasons."""
    code = (
        "import sys\n"
        "import draftset.engine.worker\n"
        "worker = sorted({'pyarrow', 'torch', 'transformers', 'rich'} & set(sys.modules))\n"
        "import draftset.api\n"
        "api = sorted(m for m in sys.modules if m.startswith('draftset.pipeline'))\n"
        "from draftset.cli import _build_parser\n"
        "_build_parser()\n"
        "heavy = {'torch', 'transformers', 'datasets', 'speculators', 'datasketch', 'tokenizers'}\n"
        "cli = sorted(heavy & set(sys.modules))\n"
        "build = 'draftset.pipeline.build' in sys.modules\n"
        "print(worker, api, cli, build)\n"
    )
    assert fresh_python(code, PYTHONPATH=str(REPO / "src")) == "[] [] [] False"


@pytest.mark.parametrize("caller", ["api", "main"])
def test_a_callers_one_worker_build_leaves_torch_to_transformers(src, tmp_path, caller):
    """The command line keeps torch out of its own process (`cli.TORCH_KEPT_OUT`), which ends
    with its command; a caller's process never: transformers caches its torch verdict, and a
    notebook may load a model next. A one-worker build loads the template in the caller's
    process, through `draftset.build` or `main(argv)` called from a script alike."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed here")
    tok, out = str(qwen3_tokenizer_dir()), str(tmp_path / "o")
    if caller == "api":
        job = (
            f"draftset.build(sources=[{str(src)!r}], tokenizer={tok!r}, out={out!r}, workers=1,"
            " progress=False)"
        )
    else:
        argv = ["build", str(src), "--tokenizer", tok, "--out", out, "--workers", "1"]
        job = f"assert main({[*argv, '--no-progress']!r}) == 0"
    code = (
        "import sys, draftset\n"
        "from draftset.cli import main\n"
        f"{job}\n"
        "from transformers.utils import is_torch_available\n"
        "print(is_torch_available(), sys.modules.get('torch') is not None, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "True True", done.stderr


def test_a_list_of_sources_in_the_recipe_slot_is_a_usage_error(src, tmp_path):
    """`build(["a.jsonl"], ...)`: one line naming `sources=`, not a TypeError from pathlib."""
    with pytest.raises(errors.UsageError, match=r"sources=\[\.\.\.\]"):
        api.build([str(src)], tokenizer="x", out=tmp_path / "o")  # type: ignore[arg-type]
    assert not (tmp_path / "o").exists()


def test_a_script_without_the_main_guard_gets_one_line_not_a_traceback_per_process(src, tmp_path):
    """`build(workers=2)` at a script's top level, without ``if __name__ == "__main__":``: the
    spawned helper imports the script again and calls build once more. It used to end in
    multiprocessing's RuntimeError traceback from the child and a bare BrokenProcessPool in the
    parent; now the child says what to do in one line and the parent's error says it too."""
    script = tmp_path / "unguarded.py"
    out = tmp_path / "o"
    script.write_text(
        "import draftset\n"
        f"draftset.build(sources=[{str(src)!r}], tokenizer={str(qwen3_tokenizer_dir())!r},"
        f" out={str(out)!r}, workers=2)\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=120,
    )
    assert run.returncode != 0
    err = run.stderr
    guard = 'if __name__ == "__main__":'
    assert "An attempt has been made to start a new process" not in err
    assert "BrokenProcessPool" not in err
    child_lines = [line for line in err.splitlines() if line.startswith("draftset: ")]
    assert len(child_lines) == 1 and guard in child_lines[0], err
    last = err.strip().splitlines()[-1]  # the parent's own exception, from the script
    # MainGuardMissing is the SidecarError docs/api.md promises (was a TokenizerError)
    assert last.startswith("draftset.engine.helper.MainGuardMissing: "), last
    assert guard in last, last
    assert not out.exists()


@pytest.mark.parametrize(
    "job",
    [
        lambda tmp: api.build(
            sources=[tmp / "none.jsonl"], tokenizer="t", out=tmp / "o", workers=1
        ),
        lambda tmp: api.run(tmp / "none.yaml"),
        lambda tmp: api.verify(tmp / "none"),
        lambda tmp: api.report(tmp / "none"),
        lambda tmp: api.generate(tmp / "none.jsonl", endpoints="http://127.0.0.1:9", out=tmp / "g"),
    ],
    ids=["build", "run", "verify", "report", "generate"],
)
def test_no_job_runs_inside_a_spawned_childs_import_of_the_script(
    job, tmp_path, monkeypatch, capsys
):
    """A spawned child importing an unguarded script would run the script's job a second time,
    beside the parent, on the same files (`run` would even ask the endpoints again): every job
    stops first, with the one line, exit 2, whatever its arguments."""
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(SystemExit) as stopped:
        job(tmp_path)
    assert stopped.value.code == 2
    assert 'if __name__ == "__main__":' in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("max_length", "4096", "max_length: expected an integer, got '4096'"),
        ("max_length", True, "max_length: expected an integer, got True"),
        ("workers", 2.0, "workers: expected an integer, got 2.0"),
        ("seed", "7", "seed: expected an integer, got '7'"),
    ],
)
def test_the_api_takes_each_value_in_its_own_type(src, tmp_path, option, value, needle):
    """A recipe's values are checked strictly (YAML's types are exact); the API coerced its
    keywords: ``max_length="4096"`` ran with 4096 and ``max_length=True`` with a max length of
    1, rejecting every row as too long. Now one line naming the option, before any work."""
    with pytest.raises(errors.UsageError) as info:
        api.build(src, tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o", **{option: value})
    assert str(info.value) == needle
    assert not (tmp_path / "o").exists()


def test_a_misspelled_keyword_names_the_option_it_is_close_to(src, tmp_path):
    """A recipe's ``max_lenght:`` said "did you mean 'max_length'?"; the API's ``max_len=``
    said only "'max_len' is not an option of this job"."""
    with pytest.raises(errors.UsageError) as info:
        api.build_options(sources=[src], tokenizer="t", out=tmp_path / "o", max_len=5)
    assert str(info.value) == "'max_len' is not an option of this job: did you mean 'max_length'?"
    with pytest.raises(errors.UsageError) as info:
        api.build_options(sources=[src], tokenizer="t", out=tmp_path / "o", zzz=5)
    assert str(info.value) == "'zzz' is not an option of this job"


def test_a_keyword_in_the_command_lines_spelling_is_named_before_what_it_left_missing(
    src, tmp_path
):
    """``generate(src, endpoint=URL, out=...)`` (the flag's spelling, ``--endpoint``) said
    "--endpoint: is required, got None": the keyword it was given never named, a flag and a
    None the caller never wrote."""
    with pytest.raises(errors.UsageError) as info:
        api.generate_options(src, endpoint="http://127.0.0.1:9/v1", out=tmp_path / "a.jsonl")
    assert str(info.value) == (
        "'endpoint' is not an option of this job: did you mean 'endpoints'"
        " (the command line's --endpoint)?"
    )


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (
            lambda d: api.report(d, o="r.html"),
            "'o' is not an option of this job: did you mean 'output' (the command line's -o)?",
        ),
        (
            lambda d: api.build(["a.jsonl"], tokenizer="t", out=d, eot_token=["<|im_end|>"]),
            "'eot_token' is not an option of this job: did you mean 'eot_tokens'"
            " (the command line's --eot-token)?",
        ),
        (
            lambda d: api.build(sources=["a.jsonl"], tokenizer="t", out=d, field=["a=b"]),
            "'field' is not an option of this job: did you mean 'fields'"
            " (the command line's --field)?",
        ),
    ],
)
def test_a_keyword_spelled_as_a_short_flag_names_the_option(tmp_path, call, said):
    """``report(d, o="r.html")`` (the command's ``-o``) said only "'o' is not an option of this
    job"."""
    with pytest.raises(errors.UsageError) as info:
        call(tmp_path / "set")
    assert str(info.value) == said


@pytest.mark.parametrize("shard", [False, True])
@pytest.mark.parametrize("prompts", [2, 0])
def test_generate_given_a_built_set_names_its_prompts_file(tmp_path, capsys, prompts, shard):
    """``draftset generate out/set`` (the set, where its prompts.jsonl was meant: the README's
    ``generate DIR/prompts.jsonl``) read the set's pre-tokenized rows, each an error line,
    exit 1 after writing the answers and errors files."""
    from draftset.cli import main

    folder = tmp_path / "set"
    chat = {
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue, like a clear summer sky over a calm sea."},
        ]
    }
    rows = [chat] + [{"id": f"p{i}", "prompt": f"Question {i}?"} for i in range(prompts)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    api.build(
        sources=[tmp_path / "in.jsonl"],
        tokenizer=qwen3_tokenizer_dir(),
        out=folder,
        eot_tokens=["<|im_end|>"],
        workers=1,
    )
    out = tmp_path / "a.jsonl"
    given = folder / "data-00000-of-00001.arrow" if shard else folder  # or one of its shards
    argv = ["generate", str(given), "--endpoint", "http://127.0.0.1:9/v1", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    what = f"a data file of the set {folder}, which" if shard else "a set"
    head = (
        f"draftset: error: {given} is {what} draftset built (its rows are token ids, no prompts):"
    )
    if prompts:
        want = (
            f"{head} its prompts to answer are {folder / 'prompts.jsonl'} (2 rows): give that file"
        )
    else:
        want = f"{head} it holds no prompts to answer"
    assert err == [want], err
    assert not out.exists() and not (tmp_path / "a.errors.jsonl").exists()


def test_a_missing_required_keyword_is_named_as_the_api_spells_it(src, tmp_path):
    """``generate(src, out=...)`` said "--endpoint: is required, got None"."""
    with pytest.raises(errors.UsageError) as info:
        api.generate_options(src, out=tmp_path / "a.jsonl")
    assert str(info.value) == "'endpoints' is required (--endpoint on the command line)"


def test_a_tuple_is_a_list_to_the_api(src, tmp_path):
    """Strict types, but a Python caller's tuple of sources or stop tokens is the list it is
    (it was accepted before the API became strict, and must stay so)."""
    opts = api.build_options(
        sources=(str(src),),
        tokenizer=qwen3_tokenizer_dir(),
        out=tmp_path / "o",
        eot_tokens=("<|im_end|>", "<|endoftext|>"),
    )
    assert [s.path for s in opts.sources] == [src]
    assert list(opts.eot_tokens) == ["<|im_end|>", "<|endoftext|>"]


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"count": "3"}, "count"),
        ({"count": True}, "count"),
        ({"weight": "2"}, "weight"),
        ({"wieght": 2}, "unknown keys ['wieght']"),
    ],
)
def test_a_source_mapping_is_checked_as_strictly_as_a_recipe_entry(
    src, tmp_path, no_work, entry, needle
):
    """`{"count": "3"}` ran with 3 and `{"count": True}` with 1 (a recipe refuses both), and a
    misspelled key was reported as a missing path."""
    with pytest.raises(RecipeError, match=re.escape(needle)):
        api.build(sources=[{"path": str(src), **entry}], tokenizer="t", out=str(tmp_path / "o"))


def test_a_source_mapping_takes_a_path_object_and_numbers(src, tmp_path, no_work):
    opts = api.build_options(
        sources=[{"path": Path(src), "count": 2, "weight": 1}],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=str(tmp_path / "o"),
    )
    assert (opts.sources[0].count, opts.sources[0].weight) == (2, 1)


def test_callback_keywords_are_checked_before_any_work(tmp_path):
    """`report(S, on_verdict="x")` raised TypeError after writing the page, `show(S,
    console="x")` an AttributeError inside rich, `run(recipe, say="x")` a TypeError."""
    with pytest.raises(errors.UsageError, match="on_verdict: expected a callable or None, got str"):
        api.report(tmp_path / "set", on_verdict="x")
    with pytest.raises(errors.UsageError, match="console: expected a rich Console"):
        api.show(tmp_path / "set", row=0, console="x")
    for name in ("say", "show_checks"):
        with pytest.raises(errors.UsageError, match=f"{name}: expected a callable"):
            api.run(tmp_path / "recipe.yaml", **{name: "x"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", ["chat_template", "tokenizer", "out", "sources", "decontaminate"])
def test_a_path_no_file_system_takes_is_one_line_before_any_work(src, tmp_path, key):
    """`build(chat_template=tok.chat_template)` (the template's text, 4 kB, as a path) and any
    path with a name over 255 bytes ended in pathlib's `OSError: [Errno 36] File name too
    long` traceback from the first stat (the check for template text came after it)."""
    text = "{%- for m in messages %}{{ m.content }}{% endfor %}" * 20
    base = {"sources": [src], "tokenizer": str(qwen3_tokenizer_dir()), "out": tmp_path / "o"}
    for value, needle in [
        (text, "a name in it is 1020 bytes long (at most 255)"),
        ("n" * 300, "a name in it is 300 bytes long (at most 255)"),
        ("n/" * 2100, "it is 4200 bytes long (at most 4096)"),
    ]:
        if key == "chat_template" and value is text:
            needle = "chat_template takes a template file, and this is template text"
        given = [value] if key in ("sources", "decontaminate") else value
        with pytest.raises(errors.UsageError) as info:
            api.build(**{**base, key: given}, workers=1)
        assert needle in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(VerifyUsageError, match="no file system takes this path"):
        api.verify("n" * 300)


@pytest.mark.parametrize("seconds", [1e12, 1e300])
def test_a_render_timeout_beyond_the_timer_is_refused_before_any_work(src, tmp_path, seconds):
    """`render_timeout=1e300` (meaning "no bound"; 0 says that) ended in `OverflowError:
    timestamp out of range for platform time_t` from the render alarm, inside the build."""
    with pytest.raises(errors.UsageError) as info:
        api.build(
            sources=[src],
            tokenizer=qwen3_tokenizer_dir(),
            out=tmp_path / "o",
            workers=1,
            render_timeout=seconds,
        )
    assert str(info.value) == f"render_timeout must be <= 1000000, not {seconds}"
    assert list(tmp_path.iterdir()) == []


def test_a_helper_that_is_no_sidecar_is_a_usage_error(src, tmp_path):
    """`build(helper="x")` (a keyword of the signature) ended in `AttributeError: 'str' object
    has no attribute 'kill'` from the build's cleanup."""
    with pytest.raises(errors.UsageError, match=r"^helper: expected the Sidecar .* got str$"):
        api.build(sources=[src], tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o", helper="x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("progress", ["yes", 1, 0.0])
def test_progress_takes_true_false_or_a_callable(src, tmp_path, progress):
    """`build(progress="yes")` ran (a truthy string drew the bar), as did `progress=1`: the
    API's types are exact, so anything but a bool or a callable is one line, before any work;
    `generate` and `run` take a bool."""
    with pytest.raises(errors.UsageError) as info:
        api.build(
            sources=[src], tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o", progress=progress
        )
    assert str(info.value) == (
        f"progress: expected true/false or a callable f(done, total), got {progress!r}"
    )
    with pytest.raises(GenerateUsageError, match="progress: expected true/false, got"):
        api.generate(
            [src], endpoints=["http://127.0.0.1:9/v1"], out=tmp_path / "a.jsonl", progress=progress
        )
    with pytest.raises(RunUsageError, match="progress: expected true/false, got"):
        api.run(tmp_path / "recipe.yaml", progress=progress)
    assert list(tmp_path.iterdir()) == []


def test_a_callback_that_cannot_take_its_arguments_is_refused_before_any_work(src, tmp_path):
    """`build(progress=lambda: ...)` raised a bare TypeError from inside the build loop after
    the rows were read, `report(on_verdict=lambda: ...)` after writing the page: a callback
    that cannot be called as it will be is one line naming the keyword, before any work."""
    for bad in (lambda: None, lambda done, total, extra: None):
        with pytest.raises(
            errors.UsageError,
            match=r"^progress: expected a callable f\(done, total\), got <lambda>\(",
        ):
            api.build(
                sources=[src], tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o", progress=bad
            )
    with pytest.raises(
        errors.UsageError, match=r"^on_verdict: expected a callable f\(line\), got <lambda>\(\)"
    ):
        api.report(tmp_path / "set", on_verdict=lambda: None)
    for name in ("say", "show_checks"):
        with pytest.raises(errors.UsageError, match=f"^{name}: expected a callable f\\("):
            api.run(tmp_path / "recipe.yaml", **{name: lambda a, b: None})
    assert list(tmp_path.iterdir()) == []
    seen: list[tuple[int, int]] = []
    api.build(  # what can take two positional arguments is fine, however declared
        sources=[src],
        tokenizer=qwen3_tokenizer_dir(),
        out=tmp_path / "o",
        workers=1,
        progress=lambda *args, **kw: seen.append(args),
    )
    assert seen and seen[-1][0] == seen[-1][1]


@pytest.mark.parametrize("bad", [5, 2.5, None, b"a.jsonl"])
def test_a_source_of_another_type_is_refused_as_other_wrong_types_are(src, tmp_path, bad):
    """`sources=[5]` said `source not found: 5` while `out=5` is a wrong type: a source is a
    path, a `Source` or a mapping; anything else is named as the wrong type, by build and by
    generate alike."""
    with pytest.raises(errors.UsageError) as info:
        api.build(sources=[src, bad], tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o")
    want = f"sources: expected a path, a Source or a mapping, got {bad!r}"
    assert str(info.value) == want
    with pytest.raises(GenerateUsageError):
        api.generate_options(
            [src, bad], endpoints=["http://127.0.0.1:9/v1"], out=tmp_path / "a.jsonl"
        )
    assert list(tmp_path.iterdir()) == []


def test_one_source_as_a_string_is_one_source_to_build_and_generate(src, tmp_path):
    """`generate(IN)` took one string as one source and `build(sources=IN)` refused it: one
    rule now, as for the other repeatable options (a list, or one string)."""
    opts = api.build_options(sources=str(src), tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o")
    assert [s.path for s in opts.sources] == [src]
    opts = api.build_options(sources=src, tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o")
    assert [s.path for s in opts.sources] == [src]
    gen = api.generate_options(
        str(src), endpoints=["http://127.0.0.1:9/v1"], out=tmp_path / "a.jsonl"
    )
    assert [s.path for s in gen.sources] == [src]


def test_generate_takes_the_sources_build_takes(src, tmp_path):
    """`generate([Source(...)])` and `generate([{"path": ...}])` were refused ("expected a
    string or a path or a list of paths") while `build(sources=...)` took both: the same
    function reads them now (paths, `Source` objects copied, recipe-style mappings)."""
    mine = Source("mine", src, format="messages")
    opts = api.generate_options(
        [mine, {"path": src, "name": "theirs", "preset": "openorca"}, str(src)],
        endpoints=["http://127.0.0.1:9/v1"],
        out=tmp_path / "a.jsonl",
    )
    got = [(s.name, s.path, s.format, s.preset) for s in opts.sources]
    assert got == [
        ("mine", src, "messages", None),
        ("theirs", src, None, "openorca"),
        ("chats", src, None, None),
    ]
    assert (mine.name, mine.path) == ("mine", src)  # the caller's object, as it was
    with pytest.raises(GenerateUsageError) as info:  # as build: the layout is the paths'
        api.generate_options(
            [mine], endpoints=["http://127.0.0.1:9/v1"], out=tmp_path / "a.jsonl", preset="x"
        )
    assert str(info.value) == (  # the keyword, as the call gave it (it said "--preset x")
        "preset='x' applies to sources given as paths only, and every source is a mapping or a"
        " Source: set it in each one ({path: ..., preset: x})"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (lambda p: Source("s", p, weight=2), "weight=2"),
        (lambda p: {"path": p, "count": 3}, "count=3"),
        (lambda p: f"{p}@count=3", "count=3"),
        (lambda p: f"{p}@weight=0.5,count=3", "weight=0.5"),
    ],
)
def test_generate_refuses_a_source_option_that_selects_rows(src, tmp_path, spec, said):
    """A source's weight or count (a `Source`, a mapping, ``a.jsonl@count=3``) selects rows
    when the set is built; generate answers every row: given to it, the option is one line,
    not ignored (the string's was "source not found: a.jsonl@count=3")."""
    want = (
        f"source {src}: {said} has no meaning for generate, which answers every row"
        f" (weight and count select rows when the set is built): leave it out here"
    )
    with pytest.raises(GenerateUsageError) as info:
        api.generate_options(
            [spec(src)], endpoints=["http://127.0.0.1:9/v1"], out=tmp_path / "a.jsonl"
        )
    assert str(info.value) == want
    if isinstance(spec(src), str):  # the command line: the same line, exit 2
        argv = ["generate", spec(src), "--endpoint", "http://127.0.0.1:9/v1"]
        assert main([*argv, "--out", str(tmp_path / "a.jsonl")]) == 2
    assert list(tmp_path.iterdir()) == []


def test_build_result_row_index_is_checked_and_named(src, tmp_path):
    """`row(100)` raised a bare IndexError from the reader, `row(-1)` pyarrow's "Offset must
    be non-negative": an index is a list's (negative counts from the end), out of range names
    the range, and a non-integer is a TypeError."""
    result = api.build(sources=[src], tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o")
    n = result.rows
    assert result.row(-1)["id"] == result.row(n - 1)["id"]
    assert result.row(-n)["id"] == result.row(0)["id"]
    assert result.row(-1)["index"] == n - 1
    for bad in (n, -n - 1, 100):
        with pytest.raises(IndexError) as info:
            result.row(bad)
        assert str(info.value) == (
            f"row {bad} out of range: the set has {n} rows (0 to {n - 1}, or -{n} to -1)"
        )
    for bad in ("1", 1.0, True):
        with pytest.raises(TypeError, match=f"row index must be an integer, got {bad!r}"):
            result.row(bad)
    # numpy's integers index a list too (np.argmax, np.flatnonzero hand them out)
    import numpy as np

    assert result.row(np.int64(n - 1))["id"] == result.row(-1)["id"]


def test_a_build_result_prints_as_one_short_line(src, tmp_path):
    """A notebook cell ending in `result` printed the dataclass's repr: the whole manifest and
    every check's details (~10,000 characters for a few rows)."""
    result = api.build(
        sources=[src], tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o", workers=1
    )
    text = repr(result)
    c = result.counts
    assert "\n" not in text and len(text) < 400, text
    assert text.startswith(f"BuildResult(out={result.out!r}, ok=True, rows={result.rows}, ")
    assert f"written={c['written']}, rejected={c['rejected']}," in text
    assert "finalized" not in text
    none = api.build(  # no row fits: not ok, though no check failed; the line says why
        sources=[src], tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "n", workers=1, max_length=1
    )
    assert not none.ok and repr(none).endswith(", finalized=False)"), repr(none)


def test_a_check_not_in_a_verify_result_names_the_ones_it_has(src, tmp_path):
    """`result["mask"]` (or a `fast=True` result's `["mask_fidelity"]`) raised a bare
    `KeyError: 'mask'`: which names does it hold? (The fast run is named as the call gave it:
    it said "a --fast verify".)"""
    out = tmp_path / "o"
    api.build(sources=[src], tokenizer=qwen3_tokenizer_dir(), out=out, workers=1)
    fast = api.verify(out, fast=True)
    names = ", ".join(c.name for c in fast.checks)
    for key in ("mask", "mask_fidelity", 0):
        with pytest.raises(KeyError) as info:
            fast[key]  # type: ignore[index]
        assert info.value.args[0] == (
            f"no check {key!r} in this result (a fast=True verify: {names}; the full verify"
            " runs the others)"
        )
    assert fast["structure"].ok


def test_the_callers_source_objects_are_left_as_they_were(src, tmp_path):
    """Two `Source`s named alike: the build renamed the caller's second one in place
    (`b` -> `b-2`), so a later `build(sources=[second])` in the same notebook named its
    source and its rows' ids `b-2`, where a fresh session names them `b`."""
    first, second = Source("b", src), Source("b", src)
    opts = api.build_options(sources=[first, second], tokenizer="t", out=tmp_path / "o")
    assert [s.name for s in opts.sources] == ["b", "b-2"]
    assert (first.name, second.name) == ("b", "b")
    assert [
        s.name for s in api.build_options(sources=[second], tokenizer="t", out="o").sources
    ] == ["b"]


def test_a_result_reads_no_rows_of_a_set_built_over_it_since(src, tmp_path):
    """A notebook builds into one folder again (`overwrite=True`): the first result's `row(i)`
    read the new set's rows, under its own `rows` and counts (another source, another row
    count, no word). It reads its own set only: a rebuild of the same bytes is that set; a
    rebuild of other rows, or a set removed, is one line naming the folder."""
    out = tmp_path / "o"
    first = api.build(sources=[src], tokenizer=qwen3_tokenizer_dir(), out=out, workers=1)
    again = api.build(
        sources=[src], tokenizer=qwen3_tokenizer_dir(), out=out, workers=1, overwrite=True
    )
    assert first.row(0)["id"] == again.row(0)["id"]  # the same set, byte for byte
    other = api.build(
        sources=[src],
        tokenizer=qwen3_tokenizer_dir(),
        out=out,
        workers=1,
        overwrite=True,
        turns="each",
    )
    assert other.rows != first.rows
    with pytest.raises(NotADraftsetError) as info:
        first.row(0)
    assert str(info.value) == (
        f"{out} holds another set than this result's (built over it since, or changed):"
        " read its rows from the result of the build that wrote it"
    )
    assert other.row(-1)["index"] == other.rows - 1
    shutil.rmtree(out)
    with pytest.raises(NotADraftsetError, match=f"folder not found: {re.escape(str(out))}"):
        other.row(0)


def test_a_result_reads_its_set_after_the_working_folder_changed(src, tmp_path, monkeypatch):
    """A notebook's `%cd` after `build(out="o")`: `row(i)` opened `o` in the new working
    folder ("folder not found: o", or another set of that name there)."""
    monkeypatch.chdir(tmp_path)
    result = api.build(sources=[src], tokenizer=qwen3_tokenizer_dir(), out="o", workers=1)
    first = result.row(0)["id"]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert result.out == Path("o")  # as given, as the command line prints it
    assert result.row(0)["id"] == first


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ("max_len=5", "'max_len' is not an option of this job: did you mean 'max_length'?"),
        ("say=print", "'say' is not an option of this job"),
        ("max_length='4096'", "max_length: expected an integer, got '4096'"),
    ],
)
def test_a_usage_error_is_said_before_the_helper_cannot_start(tmp_path, given, needle):
    """``build(max_len=5)`` from a script read from standard input was told the helper
    process cannot start there (`SidecarError`, exit code 1): the helper starts before the
    options are checked, so the mistyped option, exit code 2, was never named."""
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    (tmp_path / "c.jsonl").write_text(json.dumps(chat) + "\n", encoding="utf-8")
    code = (
        "from draftset import build\n"
        "from draftset.core.errors import DraftsetError\n"
        "try:\n"
        f"    build(sources=['c.jsonl'], tokenizer={str(qwen3_tokenizer_dir())!r}, out='o',"
        f" workers=2, {given})\n"
        "except DraftsetError as exc:\n"
        "    print(type(exc).__name__, exc.exit_code, exc)\n"
    )
    p = subprocess.run(
        [sys.executable, "-"], input=code, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("UsageError 2 ") and needle in p.stdout, p.stdout
    assert not (tmp_path / "o").exists()


def _run_recipe(tmp: Path, src: Path, **keys: Any) -> Path:
    data = {
        "sources": [str(src)],
        "tokenizer": str(qwen3_tokenizer_dir()),
        "out": str(tmp / "o"),
        "generate": {"endpoints": ["http://127.0.0.1:9/v1"]},
        **keys,
    }
    path = tmp / "r.yaml"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("job", "keyword"),
    [
        ("build", "sources"),
        ("build", "placeholders"),
        ("build", "fields"),
        ("run", "endpoints"),
        ("generate", "endpoints"),
        ("verify", "placeholders"),
    ],
)
def test_an_explicitly_empty_list_is_an_error_not_the_recipes_value(
    src, tmp_path, no_work, job, keyword
):
    """`run(recipe, endpoints=[])` asked the recipe's servers, `build(..., placeholders=[])`
    kept the default placeholders and `verify(dir, placeholders=[])` the manifest's: an empty
    list fell back to what it was given to replace. None is "not given" (docs/api.md); an
    empty list is one line naming the keyword, exit 2, before any work."""
    error: type[Exception] = errors.UsageError
    if job == "run":
        error = RunUsageError
        call = lambda: api.run_options(_run_recipe(tmp_path, src), **{keyword: []})  # noqa: E731
    elif job == "generate":
        error = GenerateUsageError
        call = lambda: api.generate_options([str(src)], out=str(tmp_path / "a.jsonl"), endpoints=[])  # noqa: E731
    elif job == "verify":
        error = VerifyUsageError
        call = lambda: api.verify(tmp_path, placeholders=())  # noqa: E731
    else:
        call = lambda: api.build_options(_run_recipe(tmp_path, src), **{keyword: []})  # noqa: E731
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(f"{keyword}: an empty list"), info.value
    assert ("None" in str(info.value)) == (job != "generate")  # generate's are required


@pytest.mark.parametrize("key", ["sources", "placeholders"])
def test_an_empty_list_in_a_recipe_is_an_error_naming_its_key(src, tmp_path, no_work, key):
    """``placeholders: []`` built with the default placeholders, as if the key were absent."""
    path = _run_recipe(tmp_path, src, **{key: []})
    with pytest.raises(RecipeError) as info:
        api.build_options(path)
    assert str(info.value).startswith(f"recipe key {key}: an empty list"), info.value


def test_an_empty_endpoints_list_in_a_recipe_is_an_error(src, tmp_path, no_work):
    path = _run_recipe(tmp_path, src, generate={"endpoints": []})
    with pytest.raises(RunUsageError) as info:
        api.run_options(path)
    # a key the section needs: leaving it out is no way either
    assert (
        str(info.value) == "recipe key generate.endpoints: an empty list; give at least one value"
    )


def test_a_run_recipe_without_out_names_the_key_run_reads(src, tmp_path, no_work, capsys):
    """``draftset run r.yaml`` of a recipe without ``out:`` said "--out is required (or `out:`
    in the recipe)": run has no --out (given, it is told "run reads --out from its recipe")."""
    path = _run_recipe(tmp_path, src)
    path.write_text(path.read_text().replace(f', "out": "{tmp_path / "o"}"', ""))
    assert "out" not in json.loads(path.read_text())
    want = (
        f"recipe {path} has no out: (the folder to write the set in; draftset run reads it"
        " from the recipe): set `out: DIR` at its top level"
    )
    with pytest.raises(RunUsageError) as info:
        api.run_options(path)
    assert str(info.value) == want
    assert main(["run", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"draftset: error: {want}"


@pytest.mark.parametrize("key", ["eot_tokens", "decontaminate"])
def test_an_empty_stop_token_or_benchmark_list_means_none_replacing_the_recipes(
    src, tmp_path, no_work, key
):
    """The options whose default is none: ``[]`` is that none, in a recipe (``decontaminate:
    []``) and over one (replacing its list), as docs/api.md says."""
    bench = tmp_path / "bench.txt"
    bench.write_text("a benchmark prompt of its own\n", encoding="utf-8")
    given = {"eot_tokens": ["<|im_end|>"], "decontaminate": [str(bench)]}[key]
    path = _run_recipe(tmp_path, src, **{key: given})
    assert list(getattr(api.build_options(path), key)) == given
    assert list(getattr(api.build_options(path, **{key: []}), key)) == []
    assert list(getattr(api.build_options(_run_recipe(tmp_path, src, **{key: []})), key)) == []


@pytest.mark.parametrize(
    ("keyword", "needle"),
    [
        ("mix", "mix: expected a mapping, got []"),
        ("template_kwargs", "template_kwargs: expected a mapping or a string, got []"),
    ],
)
def test_an_empty_list_for_a_mapping_option_is_a_wrong_type(
    src, tmp_path, no_work, keyword, needle
):
    """`mix=[]` was told "an empty list; give at least one value": no list is a mix."""
    with pytest.raises(errors.UsageError) as info:
        api.build_options(sources=[src], tokenizer="t", out=tmp_path / "o", **{keyword: []})
    assert str(info.value) == needle


def test_an_empty_list_for_a_required_option_offers_no_none(src, tmp_path):
    with pytest.raises(GenerateUsageError) as info:
        api.generate_options([], endpoints=["http://127.0.0.1:9/v1"], out=str(tmp_path / "a.jsonl"))
    assert str(info.value) == "sources: an empty list; give at least one value"


@pytest.mark.parametrize("name", ["a.jsonl", "a.parquet", "data.json.gz"])
def test_a_data_file_in_the_recipe_slot_says_to_give_it_as_a_source(tmp_path, no_work, name):
    """`build("a.jsonl", tokenizer=..., out=...)` read the rows as a recipe: "not valid YAML:
    expected '<document start>'", or for a one-row file "unknown keys ['messages']"."""
    data = tmp_path / name
    data.write_text('{"messages": []}\n', encoding="utf-8")
    with pytest.raises(errors.UsageError) as info:
        api.build(str(data), tokenizer="t", out=str(tmp_path / "o"), workers=1)
    assert str(info.value) == (
        f"recipe {data} is a data file, not a recipe (.yaml): give it as sources=[{str(data)!r}]"
    )


class _FakeTokenizer:
    """Stands in for a loaded transformers tokenizer: a path in `name_or_path` and a repr of
    many lines (a real one's lists every added token, one per line)."""

    name_or_path = "/models/qwen3"

    def __repr__(self) -> str:
        return "Qwen2Tokenizer(\n" + "".join(f"\t{i}: AddedToken(...),\n" for i in range(30)) + ")"


def test_an_object_given_for_a_path_is_named_in_one_short_line(src, tmp_path):
    """A result or a tokenizer object where a path goes (`verify(result)`, `out=result`,
    `tokenizer=AutoTokenizer.from_pretrained(...)`) was quoted by its repr: a BuildResult's
    held the manifest and the chat template (tens of KB), a tokenizer's one line per added
    token. Now one short line naming its type and the path it holds."""
    result = api.build(
        sources=[src], tokenizer=qwen3_tokenizer_dir(), out=tmp_path / "o", workers=1
    )
    calls = {
        "verify": lambda: api.verify(result),
        "report": lambda: api.report(result),
        "show": lambda: api.show(result, row=0),
        "out": lambda: api.build_options(sources=[src], tokenizer="t", out=result),
        "sources": lambda: api.build_options(sources=[result], tokenizer="t", out=tmp_path / "x"),
        "tokenizer": lambda: api.build_options(
            sources=[src], tokenizer=_FakeTokenizer(), out=tmp_path / "x"
        ),
        "verify(verify)": lambda: api.verify(api.verify(result.out, fast=True)),
    }
    for what, call in calls.items():
        with pytest.raises(errors.UsageError) as info:
            call()
        line = str(info.value)
        assert "\n" not in line and len(line) < 160, (what, line[:300])
        if what == "tokenizer":
            assert line.endswith("got a _FakeTokenizer (give its name_or_path, '/models/qwen3')")
        elif what == "verify(verify)":
            assert line.endswith(f"got a VerifyResult (give its .dir, {str(result.out)!r})")
        else:
            assert line.endswith(f"got a BuildResult (give its .out, {str(result.out)!r})"), line
    assert not (tmp_path / "x").exists()
