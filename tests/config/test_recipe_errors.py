"""A recipe that is not valid YAML is one line (exit 2): what PyYAML found and where.

PyYAML's own message spans several lines (the offending line quoted, a caret under it); it
used to be printed as it was, eight lines where every other usage error is one.
"""

from __future__ import annotations

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.cli import main
from draftset.config.recipe import RecipeError, load_recipe


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("sources:\n  - path: a.jsonl\n   bad: [1,\nmax_length: 3\n", "line 3"),
        ("max_length: [1, 2\n", "line 2"),
        ("sources: {path: 'a.jsonl'\n", "line 2"),
        ("\tmax_length: 3\n", "line 1"),
    ],
)
def test_invalid_yaml_is_one_line_naming_where(tmp_path, capsys, text, where):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text, encoding="utf-8")
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"draftset: error: recipe {recipe} is not valid YAML: ")
    assert where in err[0] and "Traceback" not in err[0]


def _recipe(tmp_path, text: str):
    (tmp_path / "c.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"tokenizer: {tmp_path / 'tok'}\nout: out\nsources: [c.jsonl]\n{text}", encoding="utf-8"
    )
    return recipe


def _refused_in_one_line(tmp_path, capsys, text: str, needle: str) -> str:
    """``text`` added to a recipe (replacing its source list when it gives one) is refused by
    `build`: exit 2, one line holding ``needle``, which is returned."""
    recipe = _recipe(tmp_path, text)
    if text.startswith("sources"):  # replaces the recipe's list
        recipe.write_text(recipe.read_text().replace("sources: [c.jsonl]\n", ""))
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    return err[0]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("max_lenght: 3\n", "unknown keys ['max_lenght']: did you mean 'max_length'?"),
        (
            "max_lenght: 3\nsed: 1\n",
            "unknown keys ['max_lenght', 'sed']: did you mean 'max_length' for 'max_lenght',"
            " 'seed' for 'sed'?",
        ),
        ("zzz: 1\n", "unknown keys ['zzz']"),
        ("format: alpaca\n", "unknown keys ['format']: format is a key of each source"),
        (  # both said: the misplaced key's place and the misspelt key's meaning
            "format: alpaca\nmax_lenght: 3\n",
            "format is a key of each source (sources: [{path: ..., format: ...}]);"
            " did you mean 'max_length' for 'max_lenght'?",
        ),
        ("generat: {endpoints: [x]}\n", "unknown keys ['generat']: did you mean 'generate'?"),
        (
            "sources: [{path: c.jsonl, wieght: 2}]\n",
            "sources[0] unknown keys ['wieght']: did you mean 'weight'?",
        ),
        (
            "sources: [{path: c.jsonl, field: {prompt: text}}]\n",
            "sources[0] unknown keys ['field']: did you mean 'fields'?",
        ),
        ("mix: {mode: {thinking: 1}}\n", "did you mean 'modes'?"),
    ],
)
def test_an_unknown_key_suggests_the_one_meant(tmp_path, capsys, text, needle):
    line = _refused_in_one_line(tmp_path, capsys, text, needle)
    if needle == "unknown keys ['zzz']":
        assert "did you mean" not in line


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ("generate: {endpoints: [x], max_token: 5}", "did you mean 'max_tokens'?"),
        ("generate: {endpoints: [x]}\nverify: {render_sever: x}", "did you mean 'render_server'?"),
    ],
)
def test_an_unknown_section_key_suggests_the_one_meant(tmp_path, capsys, section, needle):
    recipe = _recipe(tmp_path, section + "\n")
    assert main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_the_api_suggests_a_source_key(tmp_path):
    from draftset import api
    from draftset.core.errors import UsageError

    src = str(_recipe(tmp_path, "").parent / "c.jsonl")
    with pytest.raises(UsageError, match=r"unknown keys \['cout'\]: did you mean 'count'\?"):
        api.build(sources=[{"path": src, "cout": 2}], tokenizer="tok", out=str(tmp_path / "o"))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "max_length: 10\nseed: 1\nmax_length: 4096\n",
            "key 'max_length' given twice (lines 4 and 6)",
        ),
        (  # in a nested mapping: a source's fields, the recipe form of --field given twice
            "sources: [{path: c.jsonl, fields: {output: a, output: b}}]\n",
            "key 'output' given twice (line 3)",
        ),
        ("generate:\n  model: a\n  model: b\n", "key 'model' given twice (lines 5 and 6)"),
    ],
)
def test_a_key_given_twice_is_refused_naming_it_and_its_line(tmp_path, capsys, text, needle):
    """YAML's last value won silently: ``max_length: 10 ... max_length: 4096`` built 4096."""
    _refused_in_one_line(tmp_path, capsys, text, needle)


def test_merged_keys_may_be_overridden():
    """A ``<<:`` merge's keys are meant to be replaced: no duplicate."""
    from draftset.config.recipe import load_yaml

    assert load_yaml("a: &b {k: 1, j: 2}\nc: {<<: *b, k: 3}\n") == {
        "a": {"k": 1, "j": 2},
        "c": {"k": 3, "j": 2},
    }


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "dedup: off\n",
            "recipe key dedup: YAML read the unquoted value as the boolean false (it reads"
            " yes/no/on/off so); must be exact, near or none",
        ),
        ("dedup: no\n", "recipe key dedup: YAML read the unquoted value as the boolean false"),
        ("truncation: no\n", "must be drop or truncate"),
        ("template_kwargs: [x]\n", "recipe key template_kwargs: expected a mapping (e.g."),
        ("template_kwargs: 'x'\n", "recipe key template_kwargs: expected a mapping (e.g."),
        (
            "template_kwargs: {enable_thinking: 'false'}\n",
            "recipe key template_kwargs: enable_thinking is the string 'false'",
        ),
        (
            "template_kwargs: {messages: []}\n",
            "recipe key template_kwargs: 'messages' is a variable draftset sets itself",
        ),
        ("endpoints: [http://x/v1]\n", "endpoints is a key of the generate: section"),
        ("render_server: http://x\n", "render_server is a key of the verify: section"),
    ],
)
def test_recipe_value_messages_say_what_is_accepted(tmp_path, capsys, text, needle):
    recipe = _recipe(tmp_path, text)
    (tmp_path / "tok").mkdir()
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert "--template-kwargs" not in err[0]
    if "[x]" in text:  # a list: what is accepted is a mapping only, not "a mapping or a string"
        assert "or a string" not in err[0] and 'got ["x"]' in err[0], err


def test_the_hint_names_where_a_section_key_goes(tmp_path, capsys):
    recipe = _recipe(tmp_path, "endpoints: [http://x/v1]\n")
    assert main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip()
    assert "endpoints is a key of the generate: section (generate: {endpoints: ...})" in err, err


@pytest.mark.parametrize("suffix", [".toml", ".TOML", ".ini", ".cfg"])
def test_a_recipe_in_another_config_format_is_told_recipes_are_yaml(tmp_path, capsys, suffix):
    recipe = tmp_path / f"recipe{suffix}"
    recipe.write_text('max_length = 4096\n[[sources]]\npath = "a.jsonl"\n', encoding="utf-8")
    assert main(["build", str(recipe), "--tokenizer", "tok", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recipes are YAML (.yaml/.yml)" in err[0], err
    assert "unsupported file type" not in err[0]
    # run's recipe: it said "draftset run takes a recipe (.yaml), not recipe.toml", no hint
    assert main(["run", str(recipe)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"draftset: error: {recipe}: recipes are YAML (.yaml/.yml), not {suffix}: write it as"
        " YAML with the same keys (examples/run.yaml)"
    ]
    # a set's commands: it said "not a folder: recipe.toml"
    for command in (["verify"], ["report"], ["show", "--row", "0"]):
        assert main([command[0], str(recipe), *command[1:]]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"draftset: error: {recipe} is a recipe, not a set: give the folder its build wrote"
            " (the recipe's out:)"
        ], command


@pytest.mark.parametrize("with_tokenizer", [False, True])
def test_a_recipe_written_as_json_is_told_to_be_named_yaml(tmp_path, capsys, with_tokenizer):
    """`draftset build recipe.json` read the recipe as a data file of one row: without
    --tokenizer "--tokenizer is required (or `tokenizer:` in the recipe)" of a recipe that has
    one, with it "no known row shape ... --field instruction=tokenizer --field output=out"."""
    (tmp_path / "c.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    recipe = tmp_path / "recipe.json"
    recipe.write_text(
        '{"tokenizer": "tok", "out": "o", "sources": ["c.jsonl"], "max_length": 100}\n',
        encoding="utf-8",
    )
    extra = ["--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(tmp_path / "o")]
    assert main(["build", str(recipe), *(extra if with_tokenizer else [])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: {recipe} is a recipe written as JSON (keys max_length, out, sources,"
        " tokenizer):"
        " recipes are read from .yaml/.yml files, and JSON is YAML: rename it recipe.yaml"
    ]
    assert not (tmp_path / "o").exists()
    if not with_tokenizer:  # generate reads it as its rows: the same line, before any request
        gen = ["generate", str(recipe), "--endpoint", "http://127.0.0.1:9/v1"]
        assert main([*gen, "--out", str(tmp_path / "g.jsonl")]) == 2
        assert capsys.readouterr().err.strip().splitlines() == err
        assert not (tmp_path / "g.jsonl").exists()
        # run said "draftset run takes a recipe (.yaml), not recipe.json", without the hint
        assert main(["run", str(recipe)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == err


def test_a_wrong_value_inside_a_mapping_is_named_by_its_key(tmp_path, capsys):
    """`fields: {output: 3}` said "expected a mapping, got {"output": 3}" of a mapping; the
    API's `template_kwargs={1: 2}` "expected a mapping or a string": the key or the value
    that is wrong is named."""
    err = _refused_in_one_line(
        tmp_path, capsys, "sources: [{path: c.jsonl, fields: {output: 3}}]\n", "fields"
    )
    assert err.endswith("recipe key sources[0].fields: expected a string for 'output', got 3")
    from draftset import api
    from draftset.core.errors import UsageError

    cases = {
        "fields": ({"output": 3}, "fields: expected a string for 'output', got 3"),
        "template_kwargs": ({1: 2}, "template_kwargs: expected string keys, got 1"),
    }
    for option, (value, want) in cases.items():
        with pytest.raises(UsageError) as info:
            api.build_options(sources=["c.jsonl"], tokenizer="t", out="o", **{option: value})
        assert str(info.value) == want


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        # "sources[0] needs a path (or a preset)": the key written was not named
        ("sources: [{Path: c.jsonl}]\n", "sources[0] unknown keys ['Path']: did you mean 'path'?"),
        # "unknown keys ['MAX_LENGTH']" with no key close enough to difflib
        ("MAX_LENGTH: 100\n", "unknown keys ['MAX_LENGTH']: did you mean 'max_length'?"),
    ],
)
def test_a_key_in_other_capitals_is_named_with_the_one_meant(tmp_path, capsys, text, needle):
    _refused_in_one_line(tmp_path, capsys, text, needle)


def test_a_boolean_where_a_number_goes_is_no_quoting_matter(tmp_path, capsys):
    """Only a key taking a name gets the YAML-boolean hint: quoting ``true`` is no integer."""
    recipe = _recipe(tmp_path, "max_length: true\n")
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "draftset: error: recipe key max_length: expected an integer, got true", err


@pytest.mark.parametrize(
    ("text", "needle"),
    [  # a top-level key written inside a source: only "unknown" before
        (
            "sources: [{path: c.jsonl, max_length: 100}]\n",
            "sources[0] unknown keys ['max_length']: max_length is a top-level key of the recipe"
            " (max_length: ... beside sources:)",
        ),
        (
            "sources: [{path: c.jsonl, template_kwargs: {enable_thinking: false}}]\n",
            "template_kwargs is a top-level key of the recipe",
        ),
        (
            "sources: [{path: c.jsonl, temperature: 0.6}]\n",
            "temperature is a key of the generate: section (generate: {temperature: ...})",
        ),
        ("modes: {thinking: 1}\n", "modes is a key of the mix: section (mix: {modes: ...})"),
        (
            "enable_thinking: false\n",
            "enable_thinking is a key of template_kwargs (template_kwargs: {enable_thinking: ...})",
        ),
        (
            "mix: {thinking: 0.5, no_thinking: 0.5}\n",
            "no_thinking is a mode (mix: {modes: {no_thinking: ...}});"
            " thinking is a mode (mix: {modes: {thinking: ...}})",
        ),
    ],
)
def test_a_key_of_another_place_is_told_where_it_goes(tmp_path, capsys, text, needle):
    line = _refused_in_one_line(tmp_path, capsys, text, needle)
    assert "did you mean" not in line, line


@pytest.mark.parametrize(
    ("section", "needle"),
    [  # generate: {max_length: 100} was told "did you mean 'max_tokens'?": another option
        (
            "generate: {endpoints: [x], max_length: 100}",
            "generate: unknown keys ['max_length']: max_length is a top-level key of the recipe",
        ),
        (
            "generate: {endpoints: [x], weight: 2}",
            "weight is a key of each source (sources: [{path: ..., weight: ...}])",
        ),
        (
            "generate: {endpoints: [x], render_server: x}",
            "render_server is a key of the verify: section",
        ),
        (
            "generate: {endpoints: [x]}\nverify: {sample: 5, endpoints: [x]}",
            "endpoints is a key of the generate: section",
        ),
    ],
)
def test_a_section_key_of_another_place_is_told_where_it_goes(tmp_path, capsys, section, needle):
    recipe = _recipe(tmp_path, section + "\n")
    assert main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert "max_tokens" not in err[0], err


@pytest.mark.parametrize(
    ("text", "needle"),
    [  # `max_samples: 1e5` unquoted was told `expected an integer, got "1e5"`: quotes never written
        (
            "max_samples: 1e5\n",
            "recipe key max_samples: expected an integer, got 1e5, which YAML reads as text"
            " (it reads an exponent as a number only with a dot and a sign, 1.0e+5): write 100000",
        ),
        ("render_timeout: 1e1\n", "recipe key render_timeout: expected a number, got 1e1, which"),
        ("render_timeout: 1e1\n", "write 10.0"),
        ("near_dup_threshold: 8e-1\n", "write 0.8"),
        ("sources: [{path: c.jsonl, count: 2e3}]\n", "recipe key sources[0].count: expected an"),
        ("sources: [{path: c.jsonl, count: 2e3}]\n", "write 2000"),
        ("sources: [{path: c.jsonl, weight: 1e-7}]\n", "write 1.0e-07"),
    ],
)
def test_a_number_yaml_reads_as_text_is_told_so(tmp_path, capsys, text, needle):
    _refused_in_one_line(tmp_path, capsys, text, needle)


@pytest.mark.parametrize(
    ("text", "needle"),
    [  # `max_length: 4,096` was told `expected an integer, got "4,096"`: quotes never written
        (
            "max_length: 4,096\n",
            "recipe key max_length: expected an integer, got 4,096, which YAML reads as text (a"
            " comma separates no digits to it): write 4096 (or 4_096)",
        ),
        (
            "max_samples: 100,000\n",
            "got 100,000, which YAML reads as text (a comma separates no digits to it): write"
            " 100000 (or 100_000)",
        ),
        (
            "max_length: 4k\n",
            "recipe key max_length: expected an integer, got 4k, which YAML reads as text (it"
            " knows no k or M suffix): write the number in full",
        ),
        ("sources: [{path: c.jsonl, count: 10K}]\n", "got 10K, which YAML reads as text"),
    ],
)
def test_a_number_with_commas_or_a_suffix_is_told_how_to_write_it(tmp_path, capsys, text, needle):
    _refused_in_one_line(tmp_path, capsys, text, needle)


def test_a_number_quoted_on_purpose_keeps_its_quotes(tmp_path, capsys):
    """``max_length: "4096"``: YAML reads 4096 unquoted as a number, so the quotes were written."""
    line = _refused_in_one_line(tmp_path, capsys, 'max_length: "4096"\n', 'got "4096"')
    assert "YAML" not in line, line


@pytest.mark.parametrize(
    ("data", "needle"),
    [  # PowerShell's `>` and Notepad save UTF-16: a UnicodeDecodeError traceback, exit 1
        (
            "max_length: 3\n".encode("utf-16"),
            "is UTF-16 text (its byte-order mark): save it as UTF-8",
        ),
        (b"max_length: 3\n# caf\xe9\n", "is not UTF-8 (byte 19): save it as UTF-8"),
    ],
)
@pytest.mark.parametrize("command", ["build", "run"])
def test_a_recipe_that_is_not_utf8_is_one_line(tmp_path, capsys, data, needle, command):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(data)
    assert main([command, str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == f"draftset: error: recipe {recipe} {needle}", err


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("123", "sources[0]: expected a path or a mapping, got 123"),
        ("null", "sources[0]: expected a path or a mapping, got null"),
        ("[a.jsonl]", 'sources[0]: expected a path or a mapping, got ["a.jsonl"]'),
        ("{}", "sources[0] needs a path (or a preset)"),
        ("{weight: 2}", "sources[0] needs a path (or a preset)"),
    ],
)
def test_a_source_entry_of_another_type_is_named_as_such(tmp_path, entry, needle):
    """``sources: [123]`` or a nested list was told "needs a path (or a preset)"."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"sources: [{entry}]\n", encoding="utf-8")
    with pytest.raises(RecipeError) as info:
        load_recipe(recipe)
    assert str(info.value) == f"recipe {recipe}: {needle}"


@pytest.mark.parametrize("name", ["other.yaml", "r.yml"])
def test_a_recipe_listed_among_a_recipes_sources_is_named_a_recipe(tmp_path, capsys, name):
    """A recipe naming another (or itself) as a source was told "unsupported file type
    (expected .jsonl, ...)"; the command line says a recipe is given alone."""
    (tmp_path / "other.yaml").write_text("max_length: 5\n", encoding="utf-8")
    recipe = tmp_path / "r.yml"
    tok = qwen3_tokenizer_dir()
    recipe.write_text(f"sources: [{name}]\ntokenizer: {tok}\nout: o\n", encoding="utf-8")
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: source {tmp_path / name} is a recipe, not data: sources are"
        " data files (.jsonl, .json, .parquet, .arrow) or folders of them"
    ], err


@pytest.mark.parametrize(
    ("text", "needle"),
    [  # other tools' words: `output_dir` was told "did you mean 'output_format'?", `file`
        # "did you mean 'fields'?", `filename` "'name'?", `column` "'count'?", others nothing
        (
            "output_dir: o\n",
            "unknown keys ['output_dir']: output_dir is spelled out here (out: DIR)",
        ),
        ("data_files: [c.jsonl]\n", "data_files is spelled sources here (sources: [a.jsonl, ...])"),
        ("datasets: [c.jsonl]\n", "datasets is spelled sources here (sources: [a.jsonl, ...])"),
        (
            "model_name_or_path: tok\n",
            "model_name_or_path is spelled tokenizer here (tokenizer: MODEL_DIR, the folder"
            " holding tokenizer.json and its chat template)",
        ),
        (
            "sources: [{file: c.jsonl}]\n",
            "sources[0] unknown keys ['file']: file is spelled path here ({path: a.jsonl})",
        ),
        ("sources: [{filename: c.jsonl}]\n", "filename is spelled path here ({path: a.jsonl})"),
        ("sources: [{data_files: c.jsonl}]\n", "data_files is spelled path here"),
        (
            "sources: [{path: c.jsonl, column: {prompt: text}}]\n",
            "column is spelled fields here ({path: ..., fields: {prompt: COLUMN}})",
        ),
        (
            "sources: [{path: c.jsonl, type: sharegpt}]\n",
            "type is spelled format here ({path: ..., format: sharegpt})",
        ),
        (
            "sources: [{path: c.jsonl, split: train}]\n",
            "split is written in a hub source's path ({path: hf:ORG/NAME@train})",
        ),
    ],
)
def test_another_tools_word_for_a_key_names_draftsets(tmp_path, capsys, text, needle):
    line = _refused_in_one_line(tmp_path, capsys, text, needle)
    assert "did you mean" not in line, line


def test_the_api_names_draftsets_word_for_a_source_key(tmp_path):
    from draftset import api
    from draftset.core.errors import UsageError

    src = str(_recipe(tmp_path, "").parent / "c.jsonl")
    with pytest.raises(UsageError, match=r"unknown keys \['file'\]: file is spelled path here"):
        api.build(sources=[{"file": src}], tokenizer="tok", out=str(tmp_path / "o"))


@pytest.mark.parametrize(
    ("section", "needle"),
    [  # `generate: {api_key: ...}` was told "did you mean 'api_key_env'?", which then named the
        # key itself as a variable; `url` nothing, a top-level `endpoint` nothing
        (
            "generate: {endpoints: [x], api_key: sk-abc}",
            "generate: unknown keys ['api_key']: api_key is never written in a recipe (it would be"
            " kept with it): export the key as DRAFTSET_API_KEY or OPENAI_API_KEY, or name the"
            " variable holding it (generate: {api_key_env: NAME})",
        ),
        (
            "api_key: sk-abc\ngenerate: {endpoints: [x]}",
            "unknown keys ['api_key']: api_key is never written in a recipe",
        ),
        (
            "generate: {endpoints: [x], url: x}",
            "url is spelled endpoints here (generate: {endpoints: [URL, ...]})",
        ),
        (
            "endpoint: x\ngenerate: {endpoints: [x]}",
            "endpoint is spelled endpoints here (generate: {endpoints: [URL, ...]})",
        ),
        (
            "work: w\ngenerate: {endpoints: [x]}",
            "work is run's command-line option --work DIR (default: OUT.run beside out), not a"
            " recipe key",
        ),
        (
            "restart: true\ngenerate: {endpoints: [x]}",
            "restart is run's command-line option --restart, not a recipe key",
        ),
    ],
)
def test_a_run_recipe_key_of_another_tool_names_draftsets(tmp_path, capsys, section, needle):
    recipe = _recipe(tmp_path, section + "\n")
    assert main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert "did you mean" not in err[0] and "sk-abc" not in err[0], err


@pytest.mark.parametrize("value", ["sk-proj-SECRET123", "'abc def'", "'9KEY'"])
def test_an_api_key_env_that_is_no_variable_name_is_refused_without_showing_it(
    tmp_path, capsys, value
):
    """``api_key_env: sk-proj-...`` (the key where its variable's name goes) said "names
    $sk-proj-..., which is not set", the key on the terminal and in the run's state."""
    recipe = _recipe(tmp_path, f"generate: {{endpoints: [x], api_key_env: {value}}}\n")
    assert main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "draftset: error: recipe key generate.api_key_env: takes the name of an environment"
        " variable (letters, digits and _, e.g. MY_KEY), and this is none (not shown: a key"
        " itself?): export the key as a variable and name that"
    ], err
    assert not (tmp_path / "out.run").exists()


def test_an_api_key_env_written_with_a_dollar_is_told_to_drop_it(tmp_path, capsys):
    recipe = _recipe(tmp_path, "generate: {endpoints: [x], api_key_env: '$MY_KEY'}\n")
    assert main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "draftset: error: recipe key generate.api_key_env: takes the variable's name without"
        " the $: api_key_env: MY_KEY"
    ], err


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("", "it is empty"),
        ("# tokenizer: tok\n", "it is empty"),
        ("- a.jsonl\n- b.jsonl\n", "it is a list (its sources go under sources: [...])"),
        ("a.jsonl\n", "it is the text 'a.jsonl'"),
    ],
)
def test_a_recipe_that_is_no_mapping_says_what_it_is(tmp_path, capsys, text, what):
    """An empty recipe, a list of files or a lone word were all "recipe r.yaml must be a
    mapping"."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text, encoding="utf-8")
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: recipe {recipe} must be a mapping of keys (tokenizer:, out:,"
        f" sources:, ...; examples/recipe.yaml), and {what}"
    ], err


def test_sources_written_as_a_mapping_of_names_is_told_the_list_it_means(tmp_path, capsys):
    """``sources: {chat: a.jsonl, code: b.jsonl}`` (names to paths) was told only "expected a
    list of values"."""
    recipe = _recipe(tmp_path, "")
    recipe.write_text(
        recipe.read_text().replace(
            "sources: [c.jsonl]\n", "sources: {chat: c.jsonl, code: {path: d.jsonl, weight: 2}}\n"
        ),
        encoding="utf-8",
    )
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "draftset: error: recipe key sources: a list of entries, not a mapping of names: write"
        " sources: [{name: chat, path: c.jsonl}, {name: code, path: d.jsonl, weight: 2}]"
    ], err


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "out: 2024\n",
            "recipe key out: YAML read the unquoted value as the number 2024; expected a string"
            " or a path: quote it ('2024')",
        ),
        (
            "out: 2024-01-01\n",
            "recipe key out: YAML read the unquoted value as the date 2024-01-01; expected a"
            " string or a path: quote it ('2024-01-01')",
        ),
        (
            "sources: [{path: c.jsonl, name: 007}]\n",
            # YAML 1.1 reads 007 as octal: the user's spelling is gone, the value shown is 7
            "recipe key sources[0].name: YAML read the unquoted value as the number 7;"
            " expected a string: quote it",
        ),
        (
            "sources: [{path: c.jsonl, name: 1.10}]\n",
            "recipe key sources[0].name: YAML read the unquoted value as the number 1.1;"
            " expected a string: quote it",
        ),
        (
            "sources: [{path: c.jsonl, name: 2024-01-01}]\n",
            "recipe key sources[0].name: YAML read the unquoted value as the date 2024-01-01;",
        ),
    ],
)
def test_a_number_or_date_yaml_read_where_a_name_goes_says_to_quote_it(
    tmp_path, capsys, text, needle
):
    """``out: 2024`` said "expected a string or a path, got 2024" (what was wrong with it?),
    ``out: 2024-01-01`` "got datetime.date(2024, 1, 1)" (Python's repr), and ``name: 007``
    "got 7", a value the user never wrote: YAML read each as a number or a date."""
    recipe = _recipe(tmp_path, "")
    body = recipe.read_text()
    key = text.split(":", 1)[0]
    lines = [line for line in body.splitlines() if not line.startswith(f"{key}:")]
    recipe.write_text("\n".join(lines) + "\n" + text, encoding="utf-8")
    (tmp_path / "tok").mkdir()
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert "datetime" not in err[0]


def test_a_date_where_a_number_goes_is_shown_as_written(tmp_path, capsys):
    """``max_length: 2024-01-01`` quoted Python's ``datetime.date(2024, 1, 1)``."""
    recipe = _recipe(tmp_path, "max_length: 2024-01-01\n")
    (tmp_path / "tok").mkdir()
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["draftset: error: recipe key max_length: expected an integer, got 2024-01-01"]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (
            "- messages:\n  - {role: user, content: hi}\n  - {role: assistant, content: yo}\n",
            "a list of 1 data row (keys messages), not a recipe",
        ),
        (
            "- {instruction: a, output: b}\n- {instruction: c, output: d}\n",
            "a list of 2 data rows (keys instruction, output), not a recipe",
        ),
        (
            "conversations:\n  - {from: human, value: hi}\n  - {from: gpt, value: yo}\n",
            "one data row (keys conversations), not a recipe",
        ),
    ],
)
def test_a_yaml_file_of_data_rows_is_told_it_is_data(tmp_path, capsys, text, what):
    """A YAML file holding chat rows given as the recipe: a list of rows was told "its sources
    go under sources: [...]" (they are rows, not sources), one row "unknown keys ['messages']"."""
    recipe = tmp_path / "rows.yaml"
    recipe.write_text(text, encoding="utf-8")
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: recipe {recipe} is {what}: draftset reads rows from .jsonl, .json,"
        " .parquet or .arrow files, never YAML: save them as JSON Lines (one row a line) and"
        " give that file as the source"
    ], err


def test_run_given_a_data_file_says_how_to_name_it_in_a_recipe(tmp_path, capsys):
    """``draftset run chats.jsonl`` said "draftset run takes a recipe (.yaml), not chats.jsonl"
    and nothing of what such a recipe holds."""
    data = tmp_path / "chats.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n', encoding="utf-8")
    assert main(["run", str(data)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: draftset run takes a recipe (.yaml), not {data}: write one naming"
        f" it (sources: [{data}], out:, tokenizer: and generate: {{endpoints: [URL]}}, as"
        " examples/run.yaml does); draftset build builds a set from the file as it is"
    ], err


@pytest.mark.parametrize("section", ["", "generate: http://127.0.0.1:8000/v1\n"])
def test_run_of_a_recipe_without_generate_says_what_goes_there(tmp_path, capsys, section):
    """A build recipe given to ``run`` said "needs a `generate:` mapping for `draftset run`",
    not what the mapping holds."""
    recipe = _recipe(tmp_path, section)
    assert main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"draftset: error: recipe {recipe} needs a `generate:` mapping for `draftset run`: the"
        " server that answers, e.g. generate: {endpoints: [http://127.0.0.1:8000/v1]}"
        " (examples/run.yaml; docs/run.md)"
    ], err


@pytest.mark.parametrize(
    ("text", "needle"),
    [  # generate's command-line word for the template options: only "unknown keys" before
        (
            "generate: {endpoints: [x], chat_template_kwargs: {enable_thinking: false}}\n",
            "generate: unknown keys ['chat_template_kwargs']: chat_template_kwargs is spelled"
            " template_kwargs, a top-level key of the recipe (template_kwargs: {...} beside"
            " sources:), which run sends to the server as chat_template_kwargs",
        ),
        # a build key written only inside generate: was "--tokenizer is required", no word of
        # where the recipe did write it
        (
            "generate: {endpoints: [x], tokenizer: tok}\n",
            "generate: unknown keys ['tokenizer']: tokenizer is a top-level key of the recipe",
        ),
    ],
)
def test_a_run_recipes_generate_key_is_told_where_it_goes(tmp_path, capsys, text, needle):
    recipe = _recipe(tmp_path, text)
    if "tokenizer:" in text:  # written only there
        recipe.write_text(recipe.read_text().replace(f"tokenizer: {tmp_path / 'tok'}\n", ""))
    assert main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
