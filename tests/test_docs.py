"""What the README and docs tell a newcomer is true, and their snippets run as written.

Issue 25, item 18: docs/run.md's snippet saved as a script died with a `TokenizerError`
traceback about the ``__main__`` guard (docs/api.md promises `SidecarError`); docs/api.md's
example, run with the README's bundled tokenizer, died on the missing stop tokens; the
README did not say where `draftset` and the bundled tokenizer are.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, qwen3_bundled_dir


def python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)


def test_readme_says_where_draftset_and_the_bundled_tokenizer_are():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for said in (
        "installed in `.venv/bin`",
        "source .venv/bin/activate",
        "`pipx install .`",
        "`uv tool install .`",
    ):
        assert said in readme, said
    # the folder itself, as the setup installs it, not only the command printing it
    stated = re.search(r"`(\.venv/lib/python3\.\*/site-packages/[\w/]+)`", readme)
    assert stated, "README does not state the bundled tokenizer's folder"
    bundled = qwen3_bundled_dir()
    assert bundled.as_posix().endswith(stated.group(1).split("python3.*/", 1)[1])
    assert (bundled / "tokenizer.json").is_file()


def without_main_guard(code: str) -> str:
    """The snippet as a newcomer may first write it: the guarded body at top level."""
    head, guarded = code.split('if __name__ == "__main__":', 1)
    body = guarded.split("\n", 1)[1]
    return head + textwrap.dedent(body)


@pytest.fixture(scope="module")
def standin():
    """The demo's stand-in server (examples/standin_server.py, not installed), in a thread."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "standin", REPO / "examples" / "standin_server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with module.StandinServer() as srv:
        yield srv


@pytest.mark.parametrize("guarded", [True, False], ids=["as-written", "guard-removed"])
def test_run_md_snippet_runs_as_a_script(tmp_path, standin, guarded):
    """docs/run.md's snippet, taken from the markdown (so the doc cannot drift), saved as a
    script beside a ``recipe.yaml`` for the README's bundled tokenizer and the stand-in
    server, run with ``python script.py``; run's build starts spawned workers (2 of them)."""
    (code,) = python_blocks(REPO / "docs" / "run.md")
    assert 'run("recipe.yaml"' in code
    data = tmp_path / "data"
    data.mkdir()
    for name in ("chat_messages.jsonl", "prompts.jsonl"):
        shutil.copyfile(REPO / "examples" / "data" / name, data / name)
    recipe = {
        "tokenizer": str(qwen3_bundled_dir()),
        "out": "out/set",
        "max_length": 1024,
        "eot_tokens": ["<|im_end|>", "<|endoftext|>"],
        "workers": 2,
        "sources": [{"path": "data/chat_messages.jsonl"}, {"path": "data/prompts.jsonl"}],
        "generate": {"endpoints": [standin.url], "max_tokens": 32},
    }
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe), encoding="utf-8")  # JSON is YAML
    script = tmp_path / "make_set.py"
    script.write_text(code if guarded else without_main_guard(code), encoding="utf-8")
    p = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    if guarded:
        assert p.returncode == 0, p.stderr[-3000:]
        assert "verify: passed" in p.stdout, p.stdout[-3000:]
        assert (tmp_path / "out" / "set" / "manifest.json").is_file()
    else:
        # the promise of docs/run.md and docs/api.md: SidecarError saying what to do
        assert p.returncode == 1
        last = p.stderr.strip().splitlines()[-1]
        assert last.startswith("draftset.engine.helper.MainGuardMissing:"), p.stderr[-3000:]
        assert 'must do so under `if __name__ == "__main__":`' in last
        assert "TokenizerError" not in p.stderr, p.stderr[-3000:]
        from draftset.engine.helper import MainGuardMissing, SidecarError

        assert issubclass(MainGuardMissing, SidecarError)


def test_readme_python_api_snippet_runs_with_the_readmes_tokenizer(tmp_path):
    """The README's API snippet, with ``TOK`` the bundled tokenizer the README's quick start
    sets it to, run as a script from a copy of the repo's examples: it died on the missing
    stop tokens (the folder has no generation_config.json) with a CLI flag as the advice."""
    readme = REPO / "README.md"
    (code,) = [b for b in python_blocks(readme) if "from draftset import build" in b]
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    script = tmp_path / "snippet.py"
    script.write_text(f"TOK = {str(qwen3_bundled_dir())!r}\n" + code, encoding="utf-8")
    p = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, p.stderr[-3000:]
    first, second = p.stdout.strip().splitlines()[-2:]
    assert first.startswith("True ") and second == "True", p.stdout


# --- every option and recipe key a page names exists ---------------------------------------

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _doc_text(doc: Path) -> str:
    """The page without link targets (`(verify.md#...---render-server-url)` is an anchor)."""
    return re.sub(r"\]\([^)]*\)", "]", doc.read_text(encoding="utf-8"))


def command_options() -> dict[str, dict[str, str]]:
    """Per command, its options as `draftset <command> --help` lists them (option → dest)."""
    import argparse

    from draftset.cli import COMMANDS, _build_parser

    (sub,) = (a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {
        c: {o: a.dest for a in sub.choices[c]._actions for o in a.option_strings} for c in COMMANDS
    }


# a message quoted in docs/errors.md that starts with a command's name, not a command line
NOT_A_COMMAND_LINE = {("run", "--max-length")}


def named_options(text: str, commands: list[str]) -> list[tuple[str, str, str]]:
    """(command, option, the command line) for every `draftset CMD ...` line of a code block
    and every inline `CMD ...` span (continued lines included; a `#` comment ends it)."""
    names = "|".join(commands)
    lines = re.compile(rf"(?:draftset |(?<=`))({names}) ((?:\\\n|[^`\n])*)")
    found = []
    for m in lines.finditer(text):
        command, rest = m.group(1), m.group(2).split(" #")[0]
        for option in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", rest):
            found.append((command, option, m.group(0)[:160]))
    return found


def test_named_options_finds_command_lines_and_spans():
    """The scanner the check below relies on (so the check cannot pass by finding nothing)."""
    text = (
        "```\ndraftset generate p.jsonl --endpoint URL --out a.jsonl \\\n    --thinking on\n```\n"
        "as `verify --fast` does; `run reads --max-length ...`; draftset show D --row 3  # --x\n"
    )
    got = [(c, o) for c, o, _ in named_options(text, ["generate", "verify", "run", "show"])]
    assert got == [
        ("generate", "--endpoint"),
        ("generate", "--out"),
        ("generate", "--thinking"),
        ("verify", "--fast"),
        ("run", "--max-length"),
        ("show", "--row"),
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_option_a_command_line_in_the_docs_names_exists(doc):
    """`draftset verify DIR --workers 2` in a page would be exit 2 for whoever copies it: each
    option shown with a command is one that command's parser has (its `--help`)."""
    options = command_options()
    wrong = [
        f"{command} {option}: {line!r}"
        for command, option, line in named_options(_doc_text(doc), list(options))
        if option not in options[command] and (command, option) not in NOT_A_COMMAND_LINE
    ]
    assert not wrong, "\n".join(wrong)


def option_table(doc: Path, heading: str) -> list[list[str]]:
    """The rows (cells) of the tables under ``heading``, up to the next heading."""
    text = doc.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ", 1)[0]
    end = min(
        (i for h in ("\n# ", "\n## ", f"\n{level} ") if (i := text.find(h, start + 1)) != -1),
        default=len(text),
    )
    rows = []
    for line in text[start:end].splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


@pytest.mark.parametrize(
    ("doc", "heading", "command"),
    [
        ("README.md", "### `draftset build`", "build"),
        ("docs/run.md", "## Options", "run"),
    ],
)
def test_option_tables_name_the_commands_options_and_defaults(doc, heading, command):
    """The option tables: each option named in a row's first cell is the command's, and a
    plain default given in the second cell (`4096`, `drop`) is the schema's default."""
    from draftset.config import schema

    model = {"build": schema.BuildArgs, "run": schema.RunArgs}[command]
    options = command_options()[command]
    rows = option_table(REPO / doc, heading)
    named = [(o, row) for row in rows for o in re.findall(r"`(--[a-z][a-z0-9-]*)", row[0])]
    assert len(named) >= 8, rows  # the tables are there
    wrong, compared = [], 0
    for option, row in named:
        if option not in options:
            wrong.append(f"{option} is no option of `draftset {command}`")
            continue
        field = model.model_fields.get(options[option])
        default = field.default if field is not None else None
        stated = re.fullmatch(r"`?([\w.]+)`?", row[1]) if len(row) > 2 else None
        if stated is None or default is None or len(named_in(row[0])) > 1:
            continue
        compared += 1
        value = stated.group(1)
        same = (
            float(value) == float(default)
            if isinstance(default, int | float) and not isinstance(default, bool)
            else value == str(default)
        )
        if not same:
            wrong.append(f"{option}: the table says {value}, the schema's default is {default}")
    assert not wrong, "\n".join(wrong)
    if command == "build":
        assert compared >= 8, named  # max-length, truncation, dedup, ... were compared


def named_in(cell: str) -> list[str]:
    return re.findall(r"`(--[a-z][a-z0-9-]*)", cell)


def yaml_blocks(doc: Path) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("doc", ["README.md", "docs/run.md"])
def test_recipes_in_the_docs_have_only_keys_and_types_a_recipe_takes(doc, tmp_path):
    """A recipe shown in a page, saved as a file, passes the recipe's own validation (keys,
    types, the `generate:` and `verify:` sections), so a key renamed in the schema cannot
    live on in the docs."""
    import yaml

    from draftset.config.recipe import load_recipe
    from draftset.config.schema import GenerateSection, VerifySection

    blocks = yaml_blocks(REPO / doc)
    assert blocks, f"{doc} lost its recipe"
    for i, block in enumerate(blocks):
        path = tmp_path / f"r{i}.yaml"
        path.write_text(block, encoding="utf-8")
        load_recipe(path)  # raises RecipeError naming an unknown key or a wrong type
        data = yaml.safe_load(block)
        if "generate" in data:
            GenerateSection.model_validate(data["generate"], strict=True)
        if "verify" in data:
            VerifySection.model_validate(data["verify"], strict=True)


@pytest.mark.parametrize(
    ("doc", "passage"),
    [
        ("docs/generate.md", r"`--retry-errors` removes the (.*?) lines"),
        ("docs/run.md", r"asks again the rows that failed for a reason that may pass —(.*?)— and"),
        ("docs/run.md", r"\| ask again the rows whose generation failed (.*?), then build"),
    ],
)
def test_the_reasons_retry_errors_asks_again_are_the_codes(doc, passage):
    """`--retry-errors`' list of reasons in the docs is `RETRYABLE_REASONS` (docs/run.md's
    prose lacked `generate_internal_error`, which the run asks again)."""
    from draftset.generation.outcomes import RETRYABLE_REASONS

    text = " ".join((REPO / doc).read_text(encoding="utf-8").split())
    m = re.search(passage, text)
    assert m, f"{doc}: the passage is gone: {passage}"
    assert set(re.findall(r"`(\w+)`", m.group(1))) == set(RETRYABLE_REASONS), m.group(1)


def test_output_md_names_every_section_of_the_manifest(tmp_path):
    """docs/output.md's "manifest.json" list names each top-level key a build writes, and no
    other (`run` is `draftset run`'s); it lacked `draftset_version`."""
    from conftest import built_set

    text = (REPO / "docs" / "output.md").read_text(encoding="utf-8")
    section = text.split("\n## manifest.json\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^- `(\w+)`", section, re.M))
    out = built_set(
        tmp_path,
        [
            {
                "id": "a",
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello."},
                ],
            }
        ],
    )
    written = set(json.loads((out / "manifest.json").read_text(encoding="utf-8")))
    assert documented - {"run"} == written, (documented, written)


def tree_modules(text: str) -> set[str]:
    """The modules docs/architecture.md's tree names (``folder/file.py``)."""
    tree = text.split("```\nsrc/draftset/\n", 1)[1].split("```", 1)[0]
    folder, named = "", set()
    for line in tree.splitlines():
        head = re.match(r"  (\S+/|\S+\.py)\s", line)
        if head:
            folder = head.group(1) if head.group(1).endswith("/") else ""
            if not folder:
                named.add(head.group(1))
        body = line[head.end() :] if head else line
        named |= {folder + f for f in re.findall(r"(?<![\w/.<])([a-z_]+\.py)\b", body)}
    return named


def test_the_architecture_tree_names_every_module_and_no_other():
    """docs/architecture.md "draws the tree": each module it names exists, and each module of
    the package is named (core/ids.py, output/arrow.py, ... were not)."""
    named = tree_modules((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    package = REPO / "src" / "draftset"
    files = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    modules = {f for f in files if f.rsplit("/", 1)[-1] not in ("__init__.py", "__main__.py")}
    assert not named - files, f"named, not there: {sorted(named - files)}"
    assert not modules - named, f"not in the tree: {sorted(modules - named)}"


def test_formats_md_lists_every_reject_reason_and_no_other():
    """docs/formats.md's "Outcomes and reason codes" names every code a reject line can carry
    (`core.reasons.ROW_REJECT_REASONS`; it lacked selection's `near_duplicate` and
    `contaminated`), and every code it names is one."""
    from draftset.core.reasons import ROW_REJECT_REASONS

    text = (REPO / "docs" / "formats.md").read_text(encoding="utf-8")
    section = text.split("\n## Outcomes and reason codes\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z][a-z0-9_]*)`", section))
    missing = set(ROW_REJECT_REASONS) - named
    assert not missing, f"reject reasons the page does not name: {sorted(missing)}"
    first_cells = {
        code
        for line in section.splitlines()
        if line.startswith("| `")
        for code in re.findall(r"`([a-z][a-z0-9_]*)`", line.split("|")[1])
    }
    assert first_cells, "the tables are gone"
    assert not first_cells - set(ROW_REJECT_REASONS), sorted(first_cells - set(ROW_REJECT_REASONS))


def draftset_errors() -> dict[str, type]:
    """Every `DraftsetError` subclass of the package, by name (each module imported)."""
    import contextlib
    import importlib
    import pkgutil

    import draftset
    from draftset.core.errors import DraftsetError

    for info in pkgutil.walk_packages(draftset.__path__, "draftset."):
        # an optional dependency (ray) absent: that module's errors are not named
        with contextlib.suppress(ImportError):
            if info.name != "draftset.__main__":
                importlib.import_module(info.name)
    found, todo = {}, [DraftsetError]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize(
    ("doc", "usage", "run"),
    [
        (
            "docs/errors.md",
            r"Exit 2 errors derive from `UsageError` \((.*?)\), exit 1",
            r"exit 1 errors from `RunError`\s*\((.*?)\)\.",
        ),
        (
            "docs/api.md",
            r"\(`UsageError` and its subclasses(.*?)\), 1 for",
            r"\(`RunError`:(.*?)\)\. The message",
        ),
    ],
)
def test_the_error_classes_the_docs_name_exist_with_their_exit_codes(doc, usage, run):
    """The exception classes a page lists under exit 2 and exit 1 are the package's
    `UsageError` and `RunError` subclasses of those names."""
    from draftset.core.errors import RunError, UsageError

    classes = draftset_errors()
    text = " ".join((REPO / doc).read_text(encoding="utf-8").split())
    wrong = []
    for pattern, base in ((usage, UsageError), (run, RunError)):
        m = re.search(pattern, text)
        assert m, f"{doc}: the list is gone: {pattern}"
        names = re.findall(r"`([A-Z]\w+)`", m.group(1))
        assert len(names) >= 4, m.group(1)
        for name in names:
            if name in ("KeyError", "ValueError"):  # `also a KeyError`
                continue
            cls = classes.get(name)
            if cls is None or not issubclass(cls, base):
                wrong.append(f"{name}: {'no such error' if cls is None else cls.__mro__}")
    assert not wrong, wrong


def test_api_md_names_every_key_of_a_built_row(tmp_path):
    """docs/api.md's `row(i)`: the keys it lists are the row's (it lacked `index`)."""
    from conftest import qwen3_tokenizer_dir

    from draftset import build

    text = " ".join((REPO / "docs" / "api.md").read_text(encoding="utf-8").split())
    listed = re.search(r"`row\(i\)` \((.*?); `i` as a list's index", text)
    assert listed, "docs/api.md lost its `row(i)` description"
    documented = set(re.findall(r"`(\w+)`", listed.group(1)))
    src = tmp_path / "a.jsonl"
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo."}]}
    src.write_text(json.dumps(row) + "\n", encoding="utf-8")
    result = build(
        sources=[str(src)], tokenizer=str(qwen3_tokenizer_dir()), out=tmp_path / "o", workers=1
    )
    assert documented == set(result.row(0)), (documented, set(result.row(0)))


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def without_code_blocks(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_link_between_pages_reaches_its_file_and_heading(doc):
    """A link to a page that moved, or to a heading that was renamed, sends the reader
    nowhere: each relative link names a file that exists and, with `#anchor`, one of its
    headings."""
    wrong = []
    for target in re.findall(r"\]\(([^)\s]+)\)", without_code_blocks(doc.read_text("utf-8"))):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            wrong.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md":
            text = without_code_blocks(linked.read_text("utf-8"))
            headings = {heading_anchor(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}
            if anchor not in headings:
                wrong.append(f"{target}: no heading with that anchor in {linked.name}")
    assert not wrong, wrong


def test_heading_anchor_is_githubs():
    assert heading_anchor("The serving engine as referee: `--render-server URL`") == (
        "the-serving-engine-as-referee---render-server-url"
    )
    assert heading_anchor("Turn modes (`--turns`)") == "turn-modes---turns"


def test_the_readmes_index_lists_every_page():
    """README's "Formats and semantics" list is where a newcomer finds the pages: it names
    each docs/*.md (docs/errors.md and docs/scaling.md were missing)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    index = readme.split("\n## Formats and semantics\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- \[docs/([\w.]+)\]", index, re.M))
    assert listed == {p.name for p in (REPO / "docs").glob("*.md")}


def test_the_readme_names_the_recipe_keys_that_are_not_the_options_names():
    """ "A recipe uses the same names (underscores)": a build option whose recipe key is not
    its name with underscores (`--eot-token` is `eot_tokens:`) is named beside that rule;
    `eot_token:` is an unknown key."""
    options = command_options()["build"]
    renamed = {
        dest
        for option, dest in options.items()
        if option.startswith("--") and dest != option[2:].replace("-", "_")
    }
    renamed -= {"fields", "no_progress"}  # per source in a recipe (said there); no recipe key
    assert renamed, "no option is renamed: the check checks nothing"
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    rule = re.search(r"A recipe uses the same names \((.*?)\) plus `sources`", readme)
    assert rule, "README lost its recipe rule"
    assert renamed <= set(re.findall(r"`(\w+)`", rule.group(1))), (renamed, rule.group(1))
