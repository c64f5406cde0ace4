"""`--output-format parquet`: the Arrow set's rows as hub-style Parquet shards, deterministic,
read by `datasets.load_dataset("parquet")`, and verified, shown and reported like the Arrow set."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import REPO, qwen3_tokenizer_dir

from draftset import api
from draftset.checks.verify import fast_checks, run_verify
from draftset.cli import main
from draftset.output.parquet import WRITER_OPTIONS
from draftset.output.readback import open_output
from draftset.pipeline.build import BuildResult

RECIPE = REPO / "examples" / "recipe.yaml"
QWEN3_VOCAB = 151936
SHARD = "data/train-00000-of-00001.parquet"


@dataclass
class Sets:
    arrow: BuildResult
    parquet: BuildResult  # --workers 1
    parquet_2: BuildResult  # --workers 2, a second build


def _build(out: Path, **kw: object) -> BuildResult:
    return api.build(
        RECIPE, tokenizer=qwen3_tokenizer_dir(), out=out, target_vocab_size=QWEN3_VOCAB, **kw
    )


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> Sets:
    tmp = tmp_path_factory.mktemp("formats")
    return Sets(
        _build(tmp / "arrow", workers=1),
        _build(tmp / "parquet", workers=1, output_format="parquet"),
        _build(tmp / "parquet-2", workers=2, output_format="parquet"),
    )


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def test_parquet_layout_and_manifest(sets: Sets) -> None:
    out = sets.parquet.out
    m = json.loads((out / "manifest.json").read_text())
    assert m["output_format"] == "parquet"
    assert json.loads((sets.arrow.out / "manifest.json").read_text())["output_format"] == "arrow"
    vocab = ["token_freq.npy", "token_freq.pt", "d2t-512.npy", "t2d-512.npy"]
    assert sorted(m["files"]) == sorted([SHARD, *vocab, "rejects.jsonl", "prompts.jsonl"])
    assert not (out / "state.json").exists() and not list(out.glob("*.arrow"))
    for name in ("rejects.jsonl", "prompts.jsonl", "token_freq.npy", "d2t-512.npy"):
        assert (out / name).read_bytes() == (sets.arrow.out / name).read_bytes(), name
    assert m["totals"] == json.loads((sets.arrow.out / "manifest.json").read_text())["totals"]


def test_same_columns_and_rows_as_the_arrow_set(sets: Sets) -> None:
    arrow = open_output(sets.arrow.out)
    parquet = open_output(sets.parquet.out)
    assert parquet.output_format == "parquet" and parquet.schema == arrow.schema
    a = pa.Table.from_batches(list(arrow.record_batches()))
    p = pa.Table.from_batches(list(parquet.record_batches()))
    assert p.equals(a)
    assert parquet.row(5)["input_ids"].tolist() == arrow.row(5)["input_ids"].tolist()


def test_datasets_load_dataset_parquet_reads_the_set(sets: Sets) -> None:
    import datasets

    out = sets.parquet.out
    ds = datasets.load_dataset("parquet", data_files=str(out / "data" / "*.parquet"), split="train")
    ref = datasets.load_from_disk(str(sets.arrow.out)).with_format(None)
    assert ds.features == ref.features
    assert ds.to_list() == ref.to_list()
    # the hub's default layout: the folder itself loads as one train split, side files ignored
    assert datasets.load_dataset(str(out), split="train").to_list() == ref.to_list()


def test_two_builds_are_byte_identical_for_any_worker_count(sets: Sets) -> None:
    a, b = sets.parquet.out, sets.parquet_2.out
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
    for name in names:
        if name != "manifest.json":
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert ma["engine"] != mb["engine"]  # the one recorded difference: which engine ran
    del ma["engine"], mb["engine"]
    assert ma == mb
    meta = pq.ParquetFile(a / SHARD).metadata
    assert set(meta.metadata) == {b"ARROW:schema", b"huggingface"}  # no time, no host
    assert meta.row_group(0).column(2).compression == WRITER_OPTIONS["compression"].upper()


def test_verify_passes_on_parquet_as_on_arrow(sets: Sets) -> None:
    fast_a = {c.name: c.status for c in fast_checks(sets.arrow.out)}
    fast_p = {c.name: c.status for c in fast_checks(sets.parquet.out)}
    assert fast_p == fast_a and set(fast_p.values()) <= {"pass", "skip"}
    full = run_verify(sets.parquet.out, record=False)
    status = {c.name: c.status for c in full}
    assert status.pop("speculators_load") == "skip"  # the Arrow layout's loader
    assert set(status.values()) == {"pass"}, [c.to_json() for c in full if c.failed]
    assert status.keys() >= {"structure", "accounting", "row_identity", "mask_fidelity"}


def _rewrite(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path, row_group_size=1000, **WRITER_OPTIONS)


def _failed(out: Path) -> dict[str, str]:
    return {c.name: c.summary for c in fast_checks(out) if c.failed}


def test_flipped_loss_mask_bit_is_caught(sets: Sets, tmp_path: Path) -> None:
    out = _copy(sets.parquet.out, tmp_path)
    t = pq.read_table(out / SHARD)
    rows = t.to_pylist()
    rows[2]["loss_mask"][0] = 1 - rows[2]["loss_mask"][0]
    _rewrite(out / SHARD, pa.Table.from_pylist(rows, schema=t.schema))
    failed = _failed(out)
    assert "sha256 differs from the manifest" in failed["file_hashes"]
    assert "supervised_tokens in the manifest != data" in failed["accounting"]
    assert "token_freq" in failed
    full = {c.name: c for c in run_verify(out, record=False, speculators=False)}
    assert full["mask_fidelity"].failed and full["mask_fidelity"].examples == [rows[2]["id"]]


def test_dropped_row_is_caught(sets: Sets, tmp_path: Path) -> None:
    out = _copy(sets.parquet.out, tmp_path)
    t = pq.read_table(out / SHARD)
    dropped = t.column("id")[4].as_py()
    _rewrite(out / SHARD, t.filter(pc.not_equal(t.column("id"), dropped)))
    failed = _failed(out)
    assert "totals.rows != data" in failed["accounting"]
    assert "sha256 differs" in failed["file_hashes"]
    full = {c.name: c for c in run_verify(out, record=False, speculators=False)}
    assert full["row_identity"].failed


def test_stray_missing_and_corrupt_shards_are_caught(sets: Sets, tmp_path: Path) -> None:
    out = _copy(sets.parquet.out, tmp_path / "stray")
    shutil.copy(out / SHARD, out / "data" / "train-00001-of-00002.parquet")
    res = {c.name: c for c in fast_checks(out)}
    assert res["file_hashes"].failed
    assert res["file_hashes"].examples == ["data/train-00001-of-00002.parquet"]
    assert "a Parquet loader would read it" in res["file_hashes"].summary

    out = _copy(sets.parquet.out, tmp_path / "missing")
    (out / SHARD).unlink()
    res = {c.name: c for c in fast_checks(out)}
    assert res["structure"].failed and "cannot read Parquet data" in res["structure"].summary
    # data/ is the listed shard's folder: the missing shard is named, not its emptied folder
    assert res["file_hashes"].failed and res["file_hashes"].examples == [SHARD]

    out = _copy(sets.parquet.out, tmp_path / "empty")
    (out / "data" / "old").mkdir()  # a folder inside the shards' folder build never writes
    res = {c.name: c for c in fast_checks(out)}
    assert _failed(out).keys() == {"file_hashes"}
    assert res["file_hashes"].examples == ["data/old/"]

    out = _copy(sets.parquet.out, tmp_path / "corrupt")
    data = (out / SHARD).read_bytes()
    (out / SHARD).write_bytes(data[: len(data) // 2])
    assert "cannot read Parquet data" in {c.name: c for c in fast_checks(out)}["structure"].summary


def test_show_and_report_read_parquet(
    sets: Sets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = []
    for out in (sets.arrow.out, sets.parquet.out):
        assert main(["show", str(out), "--row", "4"]) == 0
        shown.append(capsys.readouterr().out)
    assert shown[0] == shown[1] and "chat" in shown[1]
    html = api.report(sets.parquet.out, output=tmp_path / "r.html").read_text()
    assert "no file the set does not account for" in html and ">fail<" not in html
    rows = sets.parquet.manifest["totals"]
    assert f"{rows['rows']} / {rows['tokens']} / {rows['supervised_tokens']}" in html


def test_bad_output_format_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(RECIPE), "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(tmp_path / "o")]
    assert main(["build", *args, "--output-format", "feather"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "invalid choice: 'feather'" in err
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.read_text() + "output_format: csv\n")
    shutil.copytree(RECIPE.parent / "data", tmp_path / "data")
    args = [str(recipe), "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(tmp_path / "o")]
    assert main(["build", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err == 'draftset: error: recipe key output_format: must be arrow or parquet, got "csv"'
    assert not (tmp_path / "o").exists()


def test_draftset_run_writes_parquet_from_the_recipe(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from fault_server import FaultServer

    from draftset.api import run_options
    from draftset.pipeline.run import run

    rows = [
        {"id": "p1", "messages": [{"role": "user", "content": "Name a colour."}]},
        {
            "id": "c1",
            "messages": [
                {"role": "user", "content": "Name a fruit."},
                {"role": "assistant", "content": "Apple.", "reasoning_content": "Pick one."},
            ],
        },
    ]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with FaultServer() as srv:
        recipe = {
            "tokenizer": str(qwen3_tokenizer_dir()),
            "out": str(tmp_path / "out"),
            "workers": 1,
            "output_format": "parquet",
            "sources": [{"path": str(tmp_path / "chat.jsonl")}],
            "generate": {"endpoints": [srv.url], "max_tokens": 32, "thinking": "on"},
        }
        (tmp_path / "run.yaml").write_text(json.dumps(recipe))
        opts = run_options(tmp_path / "run.yaml")
        opts.speculators = False
        result = run(opts, say=lambda _line: None)
    assert result.ok
    out = open_output(tmp_path / "out")
    assert out.output_format == "parquet" and sorted(out.ids()) == ["c1", "p1"]


def test_a_listed_parquet_file_under_a_name_draftset_never_writes_is_caught(
    sets: Sets, tmp_path: Path
) -> None:
    """A second shard, listed in the manifest with its sha256, under a name no build gives a
    shard (`data/*.parquet`: a Parquet loader reads it). It was read as part of the set."""
    out = _copy(sets.parquet.out, tmp_path)
    extra = "data/extra.parquet"
    shutil.copy(out / SHARD, out / extra)
    m = json.loads((out / "manifest.json").read_text())
    m["files"][extra] = m["files"][SHARD]
    (out / "manifest.json").write_text(json.dumps(m))
    res = {c.name: c for c in fast_checks(out)}
    assert res["file_hashes"].failed and extra in res["file_hashes"].examples, res
