"""Writing input rows and reading a built set's rows back, for tests in any folder."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def read_rows(folder: Path) -> list[dict]:
    state = json.loads((folder / "state.json").read_text())
    rows: list[dict] = []
    for f in state["_data_files"]:
        with pa.OSFile(str(folder / f["filename"]), "rb") as src:
            rows += pa.ipc.open_stream(src).read_all().to_pylist()
    return rows
