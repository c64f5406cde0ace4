"""A recipe that is not valid YAML is one line (exit 2): what PyYAML found and where.

PyYAML's own message spans several lines (the offending line quoted, a caret under it); it
used to be printed as it was, eight lines where every other usage error is one.
"""

from __future__ import annotations

import pytest

from draftset.cli import main


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
    recipe = _recipe(tmp_path, text)
    if text.startswith("sources"):  # replaces the recipe's list
        recipe.write_text(recipe.read_text().replace("sources: [c.jsonl]\n", ""))
    assert main(["build", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    if needle == "unknown keys ['zzz']":
        assert "did you mean" not in err[0]


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
