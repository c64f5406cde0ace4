"""The writer interface: every format writes the same rows and counts, in fixed batches, and a
new format is one module plus a registry entry (build, verify and show then work on it)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, qwen3_tokenizer_dir

from draftset import api
from draftset.cli import main
from draftset.mask.encode import EncodedRow
from draftset.output import FORMATS, layout, writer_class
from draftset.output.base import BatchWriter, Layout, RowAccess, rel_name
from draftset.output.readback import open_output

VOCAB = 500


def synthetic_rows(n: int, seed: int = 0) -> list[EncodedRow]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        length = int(rng.integers(1, 40))
        rows.append(
            EncodedRow(
                id=f"r{i}",
                source=f"s{i % 3}",
                row=i,
                input_ids=rng.integers(0, VOCAB, length).astype(np.int32),
                loss_mask=rng.integers(0, 2, length).astype(np.int8),
                truncated=bool(i % 7 == 0),
            )
        )
    return rows


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_every_format_writes_the_rows_and_counts_them(tmp_path: Path, fmt: str) -> None:
    rows = synthetic_rows(2500)
    writer = writer_class(fmt)(tmp_path, VOCAB)
    assert writer.format == fmt
    for k in range(0, len(rows), 64):  # the build hands rows over in its own batches
        writer.write(rows[k : k + 64])
    files = writer.close()
    assert all(p.is_file() and p.is_relative_to(tmp_path) for p in files)
    lay = layout(fmt)
    data = lay.data_files(tmp_path, {"files": {rel_name(tmp_path, p): "" for p in files}})
    assert data and set(data) <= set(files)
    got = [r for p in data for rb in lay.batches(p) for r in rb.to_pylist()]
    assert [r["id"] for r in got] == [r.id for r in rows]
    for r, g in zip(rows, got, strict=True):
        assert g["input_ids"] == r.input_ids.tolist() and g["loss_mask"] == r.loss_mask.tolist()
        assert g["seq_len"] == len(r.input_ids) and g["source"] == r.source
    sup = np.concatenate([r.input_ids[r.loss_mask == 1] for r in rows])
    assert writer.rows == 2500
    assert writer.tokens == sum(len(r.input_ids) for r in rows)
    assert writer.supervised_tokens == sup.size
    assert writer.truncated == sum(r.truncated for r in rows)
    assert np.array_equal(writer.token_freq, np.bincount(sup, minlength=VOCAB))
    access = lay.rows(data)
    for i in (0, 999, 1000, 2499, 3):  # across batch boundaries, and back
        assert access.row(i).to_pylist()[0]["id"] == f"r{i}"


def test_parquet_row_groups_are_fixed_batches_and_shards_are_hub_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import draftset.output.base as base
    import draftset.output.parquet as parquet

    monkeypatch.setattr(base, "SHARD_BYTES", 1)  # a new shard after every batch
    writer = parquet.ParquetWriter(tmp_path, VOCAB)
    writer.write(synthetic_rows(2500))
    files = writer.close()
    assert [rel_name(tmp_path, p) for p in files] == [
        "data/train-00000-of-00003.parquet",
        "data/train-00001-of-00003.parquet",
        "data/train-00002-of-00003.parquet",
    ]
    groups = [pq.ParquetFile(p).metadata.row_group(0).num_rows for p in files]
    assert groups == [1000, 1000, 500]
    assert not list(tmp_path.rglob("*.part"))


def test_an_empty_set_is_a_readable_shard(tmp_path: Path) -> None:
    for fmt in FORMATS:
        folder = tmp_path / fmt
        folder.mkdir()
        files = writer_class(fmt)(folder, VOCAB).close()
        lay = layout(fmt)
        data = lay.data_files(folder, {"files": {rel_name(folder, p): "" for p in files}})
        assert [lay.scan(p)[1] for p in data] == [0]


# --- a third format, written the way a contributor would add one ---------------------------------
class _IpcFileWriter(BatchWriter):
    """Arrow IPC *file* format (random access) in ``rows/part-0.arrows``."""

    format = "ipc-file"

    def __init__(self, folder: Path, vocab_size: int) -> None:
        super().__init__(folder, vocab_size)
        (folder / "rows").mkdir()
        self.path = folder / "rows" / "part-0.arrows"
        self.sink = pa.OSFile(str(self.path), "wb")
        self.writer = pa.ipc.new_file(self.sink, self.schema)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)

    def finish(self) -> list[Path]:
        self.writer.close()
        self.sink.close()
        return [self.path]


class _IpcRows(RowAccess):
    def __init__(self, path: Path) -> None:
        self.table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()

    def row(self, index: int) -> pa.Table:
        return self.table.slice(index, 1)


class _IpcFileLayout(Layout):
    format = "ipc-file"
    shard_glob = "rows/*.arrows"

    def shard_name(self, index: int, count: int) -> str:
        return f"rows/part-{index}.arrows"

    def data_files(self, folder: Path, manifest: dict) -> list[Path]:
        return [folder / "rows" / "part-0.arrows"]

    def scan(self, path: Path) -> tuple[pa.Schema, int]:
        reader = pa.ipc.open_file(pa.memory_map(str(path)))
        return reader.schema, sum(
            reader.get_batch(i).num_rows for i in range(reader.num_record_batches)
        )

    def batches(self, path: Path) -> Iterator[pa.RecordBatch]:
        reader = pa.ipc.open_file(pa.memory_map(str(path)))
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)

    def rows(self, paths: list[Path]) -> RowAccess:
        return _IpcRows(paths[0])


def test_a_new_format_is_one_module_and_a_registry_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = types.ModuleType("draftset_test_ipc_format")
    module.WRITER = _IpcFileWriter  # type: ignore[attr-defined]
    module.LAYOUT = _IpcFileLayout()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(FORMATS, "ipc-file", module.__name__)
    out = tmp_path / "set"
    result = api.build(
        REPO / "examples" / "recipe.yaml",
        tokenizer=qwen3_tokenizer_dir(),
        out=out,
        workers=1,
        target_vocab_size=151936,  # the recipe asks for d2t/t2d; this folder has no config.json
        output_format="ipc-file",
    )
    assert result.ok, [c.to_json() for c in result.checks if c.failed]
    assert result.manifest["output_format"] == "ipc-file"
    assert "rows/part-0.arrows" in result.manifest["files"]
    assert {c.name: c.status for c in result.checks}["file_hashes"] == "pass"
    assert open_output(out).num_rows == result.rows == 14
    assert result.row(3)["id"] == open_output(out).ids()[3]
    # verify reads it through its layout: a stray part is not part of the set
    (out / "rows" / "part-1.arrows").write_bytes((out / "rows" / "part-0.arrows").read_bytes())
    assert main(["verify", str(out), "--fast"]) == 1
    assert "rows/*.arrows file not listed in the manifest" in capsys.readouterr().out
