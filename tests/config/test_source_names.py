"""Source names are unique without taking a name another source has (no rows lost to naming).

Two files called ``data`` become ``data`` and ``data-2``; a third source already named
``data-2`` (its file's stem, or its recipe ``name:``) used to be given the same name, and the
build then mistook its rows for the other's ("did it change?", or accounting that does not
balance). Each source now gets a name no other source has.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.cli import main
from draftset.config.recipe import RecipeError, load_recipe, source_name, unique_names
from draftset.sources.read import Source


def names(given: list[str]) -> list[str]:
    return [s.name for s in unique_names([Source(n, Path(f"/x/{i}")) for i, n in enumerate(given)])]


def test_a_renamed_duplicate_never_takes_a_name_another_source_has():
    assert names(["data", "data", "data-2"]) == ["data", "data-3", "data-2"]
    assert names(["data-2", "data", "data"]) == ["data-2", "data", "data-3"]
    assert names(["a", "a", "a", "a-3"]) == ["a", "a-2", "a-4", "a-3"]
    assert names(["a", "b", "c"]) == ["a", "b", "c"]
    got = names(["data", "data", "data-2", "data-2", "data-3"])
    assert len(set(got)) == len(got) and got[0] == "data" and got[4] == "data-3"


def chat(i: int) -> dict:
    return {
        "messages": [
            {"role": "user", "content": f"Question {i} from somewhere?"},
            {"role": "assistant", "content": f"Answer {i}."},
        ]
    }


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_three_files_whose_names_collide_build_with_every_row(tmp_path, suffix):
    paths = []
    for k, (folder, stem) in enumerate([("d1", "data"), ("d2", "data"), ("d4", "data-2")]):
        path = tmp_path / folder / f"{stem}{suffix}"
        path.parent.mkdir()
        rows = [chat(10 * k + i) for i in range(k + 2)]  # 2, 3 and 4 rows
        if suffix == ".json":
            path.write_text(json.dumps(rows), encoding="utf-8")
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        paths.append(str(path))
    out = tmp_path / "out"
    code = main(
        [
            "build",
            *paths,
            "--tokenizer",
            str(qwen3_tokenizer_dir()),
            "--eot-token",
            "<|im_end|>",
            "--out",
            str(out),
            "--workers",
            "1",
            "--no-progress",
        ]
    )
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    per_source = manifest["counts"]["per_source"]
    assert sorted(per_source) == ["data", "data-2", "data-3"]
    assert {n: c["written"] for n, c in per_source.items()} == {
        "data": 2,
        "data-3": 3,
        "data-2": 4,
    }


def test_an_explicit_name_keeps_its_name_and_the_derived_one_gets_the_suffix():
    """A recipe's ``name: z2`` on one source renamed *another* source (derived name z2) to
    z2-2 before, so a mix weight keyed ``z2`` went to the wrong source."""
    named = Source("z2", Path("/x/z1.jsonl"), named=True)
    derived = Source("z2", Path("/x/z2.jsonl"))
    assert [s.name for s in unique_names([derived, named])] == ["z2-2", "z2"]
    assert [s.name for s in unique_names([named, Source("z2", Path("/x/2"))])] == ["z2", "z2-2"]


def test_two_sources_given_the_same_explicit_name_are_refused(tmp_path):
    (tmp_path / "z1.jsonl").write_text(json.dumps(chat(1)) + "\n", encoding="utf-8")
    (tmp_path / "z2.jsonl").write_text(json.dumps(chat(2)) + "\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\nout: out\nsources:\n"
        " - {path: z1.jsonl, name: chat}\n - {path: z2.jsonl, name: chat}\n",
        encoding="utf-8",
    )
    with pytest.raises(RecipeError, match=r"two sources are named 'chat' \(.*z1.jsonl.*z2.jsonl"):
        unique_names(load_recipe(recipe)["sources"])
    assert main(["build", str(recipe), "--no-progress"]) == 2
    assert not (tmp_path / "out").exists()


def test_a_recipe_name_wins_over_a_file_stem_in_a_build(tmp_path):
    for stem in ("z1", "z2"):
        rows = [chat(i) for i in (range(10, 13) if stem == "z1" else range(2))]
        (tmp_path / f"{stem}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
        )
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\neot_tokens: ['<|im_end|>']\nout: out\n"
        "workers: 1\nsources:\n - {path: z2.jsonl}\n - {path: z1.jsonl, name: z2}\n",
        encoding="utf-8",
    )
    assert main(["build", str(recipe), "--no-progress"]) == 0
    per_source = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    assert {n: c["written"] for n, c in per_source["per_source"].items()} == {"z2-2": 2, "z2": 3}


def test_a_source_named_by_dots_or_the_root_is_named_after_its_folder(tmp_path, monkeypatch):
    """``draftset build .`` named its source "" (a `Path('.')` has no name): the summary said
    ``source :``, every row's ``source`` was "" and its id ``:0``; ``..`` was named ``..``."""
    data = tmp_path / "chats"
    (data / "sub").mkdir(parents=True)
    monkeypatch.chdir(data / "sub")
    assert source_name(Path(".")) == "sub"
    assert source_name(Path("./")) == "sub"
    assert source_name(Path("..")) == "chats"
    assert source_name(Path("../sub/..")) == "chats"
    assert source_name(Path("/")) == "source"
    assert source_name(Path("a/b.jsonl.gz")) == "b"


def test_building_the_current_folder_names_the_source_after_it(tmp_path, monkeypatch):
    data = tmp_path / "chats"
    data.mkdir()
    (data / "a.jsonl").write_text(
        "".join(json.dumps(chat(i)) + "\n" for i in range(2)), encoding="utf-8"
    )
    monkeypatch.chdir(data)
    out = tmp_path / "out"
    args = ["build", ".", "--tokenizer", str(qwen3_tokenizer_dir()), "--eot-token"]
    args += ["<|im_end|>", "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(args) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["counts"]["per_source"]) == ["chats"]
    from datasets import load_from_disk  # the rows' own source and ids

    rows = load_from_disk(str(out))
    assert rows["source"] == ["chats", "chats"]
    assert rows["id"] == ["chats:0", "chats:1"]


@pytest.mark.parametrize("name", ["", " ", "\t"])
def test_a_blank_source_name_is_refused(tmp_path, name):
    """A recipe's ``name: ''`` took the file's stem silently, ``name: ' '`` built rows of
    source " " with ids " :2"; as the API's mapping and a `Source` made by hand."""
    from draftset import api
    from draftset.core.errors import UsageError

    (tmp_path / "a.jsonl").write_text("{}\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(json.dumps({"sources": [{"path": "a.jsonl", "name": name}]}))
    what = "is empty" if not name else "is only whitespace"
    with pytest.raises(RecipeError, match=f"^recipe key sources\\[0\\].name: {what}"):
        load_recipe(recipe)
    with pytest.raises(UsageError, match=f"name {what}"):
        api.build_options(sources=[{"path": str(tmp_path / "a.jsonl"), "name": name}])
    with pytest.raises(UsageError, match=f"name {what}"):
        api.build_options(sources=[Source(name, tmp_path / "a.jsonl")], tokenizer="t", out="o")
