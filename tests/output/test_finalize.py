"""Two builds to one `--out`: the second never replaces the first's set without `--overwrite`.

Both used to exit 0 and print "verify passed", the first build's set silently replaced by the
second's (a folder of the user's appearing meanwhile was refused, a draftset output was not).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir

import draftset.pipeline.build as build_mod
from draftset.config.options import BuildOptions
from draftset.output.folder import OutputExistsError
from draftset.pipeline.build import run_build
from draftset.sources.read import Source


def _source(tmp: Path, name: str, answer: str) -> Source:
    path = tmp / f"{name}.jsonl"
    row = {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": answer}]
    }
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return Source(name, path)


def _build(src: Source, out: Path, overwrite: bool = False) -> Path:
    opts = BuildOptions([src], str(qwen3_tokenizer_dir()), out, workers=1, overwrite=overwrite)
    return run_build(opts).out


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_set_that_appears_during_the_build_is_replaced_only_with_overwrite(
    tmp_path, monkeypatch, overwrite
):
    first = _build(_source(tmp_path, "a", "From A."), tmp_path / "first")
    out = tmp_path / "same"
    if overwrite:  # --overwrite given for a set that was there already
        _build(_source(tmp_path, "c", "From C."), out)
    write_manifest = build_mod.write_manifest

    def racing(folder, manifest):  # another build finishes at `out` meanwhile
        write_manifest(folder, manifest)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(first, out)

    monkeypatch.setattr(build_mod, "write_manifest", racing)
    second = _source(tmp_path, "b", "From B.")
    if not overwrite:
        with pytest.raises(OutputExistsError, match="appeared during the build"):
            _build(second, out)
        names = [i["name"] for i in json.loads((out / "manifest.json").read_text())["inputs"]]
        assert names == ["a"]  # the other build's set, left as it is
        assert not list(tmp_path.glob(".same*"))  # and no half-written folder behind
    else:
        _build(second, out, overwrite=True)  # replacing what is there is what was asked
        names = [i["name"] for i in json.loads((out / "manifest.json").read_text())["inputs"]]
        assert names == ["b"]
