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
