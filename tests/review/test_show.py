"""`draftset show`: one row with its supervised tokens highlighted, facts, token boundaries."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import built_set, qwen3_tokenizer_dir
from rich.console import Console

from draftset.cli import main as cli_main
from draftset.config.options import BuildOptions
from draftset.core.terminal import UNSAFE
from draftset.output.readback import open_output
from draftset.pipeline.build import run_build
from draftset.review.show import (
    SUPERVISED_STYLE,
    ShowError,
    load_decoder,
    render_row,
    show,
    token_pieces,
)
from draftset.sources.read import Source

ROWS = [
    {
        "id": "a",
        "messages": [
            {"role": "user", "content": "Say [bold]hi[/bold] <script>x</script>"},
            {"role": "assistant", "content": "Hello there, friend."},
        ],
    },
    {
        "id": "b",
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    },
]


def main(argv: list[str]) -> int:
    """`draftset show ...` (the command, through the CLI's parser and exit codes)."""
    return cli_main(["show", *argv])


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return built_set(tmp_path_factory.mktemp("show"), ROWS)


def render(folder: Path, **kw) -> Console:
    console = Console(record=True, width=100, color_system="truecolor")
    show(folder, console=console, **kw)
    return console


def test_show_highlights_supervised_text_and_prints_facts(folder):
    console = render(folder, row_id="a")
    text = console.export_text(clear=False)
    assert "Hello there, friend.<|im_end|>" in text
    assert "[bold]hi[/bold] <script>x</script>" in text  # dataset text is never parsed as markup
    for fact in ("source", "tokens", "supervised tokens", "truncated", "False", "DFlash anchors"):
        assert fact in text
    segments = [(s.text, str(s.style)) for s in console._record_buffer]
    supervised = "".join(t for t, style in segments if style == SUPERVISED_STYLE)
    assert supervised.startswith("supervised (loss_mask = 1)")  # the legend
    assert supervised.endswith("Hello there, friend.<|im_end|>") and "Say" not in supervised


def test_show_tokens_marks_boundaries(folder):
    """In colour, `--tokens` alternates backgrounds: no two adjacent tokens share a style, so
    the runs of one style are exactly the row's tokens."""
    out = open_output(folder)
    r = out.row(1)
    decode, eot = load_decoder(out)
    ids = [int(i) for i in r["input_ids"]]
    pieces = token_pieces(ids, decode)
    assert all(pieces) and "<|im_start|>" in pieces  # a special token is one piece
    _, text = render_row(r, decode, eot, tokens=True)
    assert text.plain == "".join(pieces)
    style_at = [""] * len(text.plain)
    for span in text.spans:
        style_at[span.start : span.end] = [str(span.style)] * (span.end - span.start)
    runs, start = [], 0
    for i in range(1, len(style_at) + 1):
        if i == len(style_at) or style_at[i] != style_at[start]:
            runs.append(text.plain[start:i])
            start = i
    assert runs == pieces


def test_show_cli_errors_exit_2(folder, tmp_path, capsys):
    assert main([str(folder), "--row", "5"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main([str(folder), "--id", "nope"]) == 2
    assert main([str(tmp_path)]) == 2  # neither --row nor --id
    assert main([str(tmp_path / "missing"), "--row", "0"]) == 2
    assert main([str(folder), "--row", "0"]) == 0


@pytest.mark.parametrize(
    ("given", "told"), [("3", "--row 3"), ("-1", "--row -1"), ("c:4", "--id c:4")]
)
def test_a_row_given_without_its_flag_is_told_the_flag(folder, capsys, given, told):
    """``draftset show DIR 3`` (the row as a second argument) said only "one of the arguments
    --row --id is required", as if no row were given."""
    assert main([str(folder), given]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "draftset: error: one of the arguments --row --id is required (the row goes after its"
        f" flag: draftset show {folder} {told})"
    ], err


def test_show_row_of_a_set_without_rows_says_so(tmp_path, capsys):
    """A set of prompt-only rows (0 rows, every row queued in prompts.jsonl): ``--row 0`` said
    "the set has 0 rows (--row 0..-1)", a range no index is in."""
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"id": "q", "prompt": "Name a colour."}) + "\n")
    opts = BuildOptions([Source("p", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", workers=1)
    opts = replace(opts, eot_tokens=["<|im_end|>"])
    out = run_build(opts).out
    assert main([str(out), "--row", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "0..-1" not in err
    assert "the set has no rows" in err and "1 prompt-only row in prompts.jsonl" in err
    assert "--id ID" in err


# --- control characters from the data, and a mask readable without colours ------------------------
HOSTILE = (
    "clear\x1b[2J\x1b[H title\x1b]0;pwned\x07 clipboard\x1b]52;c;ZXZpbA==\x07 bell\x07"
    " c1\x9b31m nel\x85 bidi\u202eevil\u202c cr\r\nline\u2028sep markers\u27e6x\u27e7"
)
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colour codes, nothing else may be ESC


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("show-hostile")
    src = root / "h.jsonl"
    row = {
        "id": "evil\x1b]0;id\x07",
        "messages": [
            {"role": "user", "content": f"Repeat: {HOSTILE}"},
            {"role": "assistant", "content": f"Here: {HOSTILE} done."},
        ],
    }
    src.write_text(json.dumps(row) + "\n")
    return run_build(
        BuildOptions([Source("h", src)], str(qwen3_tokenizer_dir()), root / "out", workers=1)
    ).out


def raw_controls(text: str) -> list[str]:
    return sorted({c for c in text if UNSAFE.match(c)})


@pytest.mark.parametrize("tokens", [False, True])
def test_show_never_writes_control_characters_in_colour(hostile, tokens):
    f = io.StringIO()
    console = Console(file=f, force_terminal=True, color_system="truecolor", width=120)
    show(hostile, row=0, tokens=tokens, console=console)
    out = SGR.sub("", f.getvalue())
    assert raw_controls(out) == []
    text = out.replace("\n", "")  # rich wraps lines; escapes come out as text
    if tokens:  # one token at a time: ASCII controls whole, multi-byte ones may be split
        text = text.replace("\u00a6", "")
        assert "\\x1b" in text and "\\x07" in text and "\\x0d" in text
        return
    for shown in ("\\x1b[2J", "\\x1b]0;pwned\\x07", "\\x1b]52;c;", "\\x9b31m", "\\u202e"):
        assert shown in text, shown
    assert "\\x0d" in text and "\\u2028" in text and "\\x85" in text


@pytest.mark.parametrize("tokens", [False, True])
def test_show_without_colours_marks_supervised_runs(hostile, folder, tokens):
    f = io.StringIO()
    show(folder, row_id="a", tokens=tokens, console=Console(file=f, width=400))
    out = f.getvalue()
    assert "\x1b" not in out and "supervised (loss_mask = 1): \u27e6...\u27e7" in out  # legend
    body = out.split("\u27e6...\u27e7", 1)[1]
    runs = re.findall("\u27e6(.*?)\u27e7", body, flags=re.S)
    assert len(runs) == 1  # Qwen3: <think>\n\n</think>\n\nHello there, friend.<|im_end|>
    run = runs[0].replace("\u00a6", "")
    assert run.startswith("<think>") and run.endswith("Hello there, friend.<|im_end|>")
    assert "Say" not in run and "<|im_start|>" not in run
    if tokens:
        assert "Hello\u00a6 there" in runs[0] and "<|im_start|>\u00a6user" in body
    f = io.StringIO()
    show(hostile, row=0, tokens=tokens, console=Console(file=f, width=400))
    out = f.getvalue()
    assert raw_controls(out) == []
    assert "\\u27e6x\\u27e7" in out.replace("\u00a6", "")  # data's own ⟦ ⟧ are escaped
    assert len(re.findall("\u27e6", out)) == 2  # the legend and the one supervised run


def test_show_cli_piped_output_is_plain_and_escaped(hostile, capsys):
    assert main([str(hostile), "--row", "0"]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == [] and "\x1b" not in out
    assert out.index("\u27e6<think>") < out.index("Here: clear\\x1b[2J") < out.rindex("\u27e7")
    assert out.index("Repeat: clear\\x1b[2J") < out.index("\u27e6<think>")
    assert "evil\\x1b]0;id\\x07" in out  # the id too


def test_another_models_tokenizer_is_refused_not_decoded_into_garbage(folder, capsys):
    """`show --tokenizer` of another model (Llama-3.2 on a Qwen3 set) printed its decoding of
    the set's ids, garbage, without a word. A tokenizer whose size is not the manifest's
    ``tokenizer_size`` is not the set's: refused, one line."""
    from conftest import llama32_tokenizer_dir

    assert main([str(folder), "--row", "0", "--tokenizer", str(llama32_tokenizer_dir())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the tokenizer this set was built with" in err[0], err
    assert main([str(folder), "--row", "0", "--tokenizer", str(qwen3_tokenizer_dir())]) == 0


def test_same_size_tokenizer_with_another_vocabulary_is_refused(folder, tmp_path, capsys):
    """A tokenizer of the set's size whose vocabulary differs (here Qwen3's with two tokens'
    ids swapped, as a retrained or re-ordered vocabulary would) decoded the set's ids silently
    into other text. The manifest's sampled-vocabulary digest tells it apart; a copy of the
    set's own tokenizer in another folder is still accepted."""
    import shutil

    src = qwen3_tokenizer_dir()
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    assert main([str(folder), "--row", "0", "--tokenizer", str(copy)]) == 0
    capsys.readouterr()

    other = tmp_path / "other"
    shutil.copytree(src, other)
    spec = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    a, b = by_id[0], by_id[151642]  # ids 0 and the last are both in the sample
    vocab[a], vocab[b] = 151642, 0
    (other / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    assert main([str(folder), "--row", "0", "--tokenizer", str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the tokenizer this set was built with" in err[0], err


@pytest.mark.parametrize("command", ["show", "verify", "report"])
def test_block_size_below_two_is_refused_alike(folder, tmp_path, capsys, command):
    """A DFlash block of B tokens is its anchor and B - 1 targets (docs/verify.md): B = 1 has
    no target. `verify --block-size` and `report --block-size` refused 1, `show --block-size 1`
    counted anchors for it. One bound, one line, exit 2."""
    extra = {"show": ["--row", "0"], "verify": ["--fast"], "report": ["-o", str(tmp_path / "r")]}
    argv = [command, str(folder), *extra[command], "--block-size", "1"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--block-size" in err[0] and ">= 2" in err[0], err
    assert cli_main([command, str(folder), *extra[command], "--block-size", "2"]) == 0


def test_show_row_counts_from_the_end_as_python_does(folder, capsys):
    """``--row -1`` is the last row, as ``api``'s ``row(-1)`` and any Python sequence (the
    command refused it: "-1 is negative: row indices start at 0"; outside newcomer probe)."""
    from draftset.output.readback import open_output

    ids = open_output(folder).ids()
    n = len(ids)

    def text(row: int) -> str:
        return render(folder, row=row).export_text(clear=False)

    assert text(-1) == text(n - 1) and text(-n) == text(0)
    assert main([str(folder), "--row", "-1"]) == 0
    assert ids[-1] in capsys.readouterr().out
    assert main([str(folder), "--row", str(-n - 1)]) == 2
    assert f"--row {-n - 1} out of range" in capsys.readouterr().err


def test_show_id_of_a_rejected_row_of_a_folder_source_names_its_file(tmp_path, capsys):
    """A rejected row of a source of several files was pointed to by its row number across
    the folder's files alone: its reject line names the file, and so does `show --id`."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    bad = {"id": "pirate", "messages": [{"role": "pirate", "content": "Arr"}]}
    (data / "sub" / "b.jsonl").write_text(json.dumps(bad) + "\n", encoding="utf-8")
    out = run_build(
        BuildOptions([Source("data", data)], str(qwen3_tokenizer_dir()), tmp_path / "o", workers=1)
    ).out
    assert main([str(out), "--id", "pirate"]) == 2
    err = capsys.readouterr().err
    assert "source 'data', row 2 of that source (file sub/b.jsonl)" in err, err


def test_show_tokens_spells_characters_split_over_tokens_once(tmp_path):
    """A character whose UTF-8 bytes span several byte-level tokens (Arabic digits, emoji, CJK)
    is shown once, at the token that completes it: decoding each token alone printed one
    replacement character per token (`٢` as `�¦�`), text the row does not hold."""
    text = "الجواب ٤ — 👨\u200d👩\u200d👧 中文 é"
    rows = [
        {
            "id": "u",
            "messages": [
                {"role": "user", "content": "٢+٢؟"},
                {"role": "assistant", "content": text},
            ],
        }
    ]
    folder = built_set(tmp_path, rows)
    views = []
    for tokens in (False, True):
        f = io.StringIO()
        show(folder, row=0, tokens=tokens, console=Console(file=f, width=400))
        body = f.getvalue().split("\u27e6...\u27e7", 1)[1].split("\n", 1)[1]
        views.append("\n".join(line.strip(" \u2502") for line in body.splitlines()))
    plain, with_tokens = views
    assert "\ufffd" not in with_tokens and text in with_tokens.replace("\u00a6", "")
    assert with_tokens.replace("\u00a6", "") == plain  # the same text, token boundaries added


@pytest.mark.parametrize("command", ["show", "verify", "report"])
def test_block_size_too_large_for_the_arithmetic_is_refused_alike(
    folder, tmp_path, capsys, command
):
    """`--block-size 99999999999999999999` ended show, report and `verify --fast` in an
    OverflowError traceback (exit 1) from numpy's int64 anchor arithmetic. A bound, one line,
    exit 2; the largest accepted block still counts (no anchor in a short row)."""
    extra = {"show": ["--row", "0"], "verify": ["--fast"], "report": ["-o", str(tmp_path / "r")]}
    argv = [command, str(folder), *extra[command], "--block-size", "99999999999999999999"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--block-size" in err[0] and "<=" in err[0], err
    assert cli_main([command, str(folder), *extra[command], "--block-size", str(2**31 - 1)]) == 0


def test_show_id_of_a_row_split_per_turn_names_its_rows(tmp_path, capsys):
    """With --turns each an input row `chat` becomes rows `chat#0`, `chat#1`: `show --id chat`
    said "no row with id 'chat' in the set" (ids look like: ...), as for an unknown id, though
    the row is in the set. It names the rows the id became."""
    two_turns = {
        "id": "chat",
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "B2"},
        ],
    }
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [*ROWS, two_turns]), encoding="utf-8")
    opts = BuildOptions([Source("a", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", workers=1)
    out = run_build(replace(opts, turns="each")).out
    for asked in ("chat", "chat#7"):
        assert main([str(out), "--id", asked]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "chat#0, chat#1" in err[0] and "--turns each" in err[0], err
    assert main([str(out), "--id", "chat#1"]) == 0


def test_a_set_built_from_a_hub_id_is_decoded_from_the_hub(folder, tmp_path, monkeypatch):
    """A set built with `--tokenizer Qwen/Qwen3-8B` records the hub id as its tokenizer: show
    looked for `Qwen/Qwen3-8B/tokenizer.json` on disk and said "cannot decode ... (pass
    --tokenizer FOLDER)" where verify reads the hub (online); the report's example rows alike.
    Online, the hub repo's tokenizer.json is read (huggingface_hub's cache and download)."""
    import huggingface_hub

    hub_set = tmp_path / "hubset"
    shutil.copytree(folder, hub_set)
    m = json.loads((hub_set / "manifest.json").read_text())
    m["tokenizer"]["path"] = m["tokenizer"]["path_as_given"] = "Qwen/Qwen3-8B"
    (hub_set / "manifest.json").write_text(json.dumps(m))
    asked = []

    def download(repo_id: str, filename: str, **kw: object) -> str:
        asked.append((repo_id, filename))
        return str(qwen3_tokenizer_dir() / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    console = render(hub_set, row_id="a")
    assert "Hello there, friend.<|im_end|>" in console.export_text()
    assert asked == [("Qwen/Qwen3-8B", "tokenizer.json")]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: the hub is not read, and it says so
    with pytest.raises(ShowError, match="HF_HUB_OFFLINE"):
        render(hub_set, row_id="a")


def _with_reader_gone(*argv: str) -> subprocess.CompletedProcess[bytes]:
    """``draftset ARGV`` whose standard output's reader left before it said a word (as
    ``| head`` does once it has its lines)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "draftset", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, b"", err)


def test_show_read_by_a_reader_that_left_ends_quietly_exit_0(folder):
    """`draftset show DIR --row 0 | head -3`: rich's console ended the command with its own
    exit 1 once head had left. The row was shown as far as the reader wanted it: the command
    ends quietly, exit 0, as `report | head` does."""
    done = _with_reader_gone("show", str(folder), "--row", "0")
    assert (done.returncode, done.stderr) == (0, b"")


def test_a_prompt_line_is_found_without_reading_the_whole_file(tmp_path):
    """`show --id` of a queued row read all of prompts.jsonl into Python objects to find its
    line (a million prompts: gigabytes); it reads up to the line now."""
    import tracemalloc

    from draftset.review.show import _line_with_id

    path = tmp_path / "prompts.jsonl"
    lines = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": "x" * 10_000}]}
        for i in range(2_000)
    ]
    path.write_text("".join(json.dumps(o) + "\n" for o in lines))
    tracemalloc.start()
    found = _line_with_id(path, "p2")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert found is not None and found[0] == 3 and found[1]["id"] == "p2"
    assert peak < 1_000_000, peak
    assert _line_with_id(path, "p1999")[0] == 2_000 and _line_with_id(path, "nope") is None
