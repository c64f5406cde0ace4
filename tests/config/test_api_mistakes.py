"""Newcomer mistakes on the Python API, each one typed error with one specific line before any
work (they were a traceback, or a bare "not an option")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import built_set

from draftset import api
from draftset.core.errors import UsageError
from draftset.sources.read import Source

ROW = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


def test_a_source_made_with_a_text_path_is_read_as_that_path(tmp_path):
    """`Source("a", "a.jsonl")`: an AttributeError traceback ('str' object has no attribute
    'exists') when built."""
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps(ROW) + "\n")
    opts = api.build_options(sources=[Source("a", str(src))], tokenizer="tok", out=tmp_path / "o")
    assert opts.sources[0].path == src


def test_a_source_whose_path_is_no_path_is_one_line():
    with pytest.raises(UsageError) as exc:
        Source("a", 5)  # type: ignore[arg-type]
    assert str(exc.value) == "source a: path expected a string or a path, got int 5"


def test_a_long_flag_written_as_a_keyword_names_the_option(tmp_path):
    """`show(d, id=...)`: the command line's --id is row_id here; it said only "not an
    option"."""
    out = built_set(tmp_path, [ROW])
    with pytest.raises(UsageError) as exc:
        api.show(out, id="a:0")
    assert str(exc.value) == (
        "'id' is not an option of this job: did you mean 'row_id' (the command line's --id)?"
    )


@pytest.mark.parametrize(
    ("option", "where"),
    [  # as the command line says it (`draftset run r.yaml --out x`)
        ("out", "at its top level"),
        ("overwrite", "at its top level"),
        ("sources", "at its top level"),
        ("max_samples", "at its top level"),
        ("thinking", "under its `generate:`"),
        ("render_server", "under its `verify:`"),
    ],
)
def test_a_build_option_given_to_run_says_where_it_goes(tmp_path, option, where):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("tokenizer: tok\nout: o\nsources: [a.jsonl]\ngenerate: {endpoints: [x]}\n")
    with pytest.raises(UsageError) as exc:
        api.run(recipe, **{option: "x"})
    assert str(exc.value) == (
        f"'{option}' is not an option of this job: run reads {option} from its recipe: set"
        f" `{option}: ...` {where}"
    )
