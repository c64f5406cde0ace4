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


def chats(
    n: int, prefix: str = "c", question: str = "Question {i}?", answer: str = "Answer {i}."
) -> list[dict]:
    """``n`` one-exchange conversations with ids ``{prefix}0``... (the texts' ``{i}`` filled)."""
    return [
        {
            "id": f"{prefix}{i}",
            "messages": [
                {"role": "user", "content": question.format(i=i)},
                {"role": "assistant", "content": answer.format(i=i)},
            ],
        }
        for i in range(n)
    ]


def read_rows(folder: Path) -> list[dict]:
    state = json.loads((folder / "state.json").read_text())
    rows: list[dict] = []
    for f in state["_data_files"]:
        with pa.OSFile(str(folder / f["filename"]), "rb") as src:
            rows += pa.ipc.open_stream(src).read_all().to_pylist()
    return rows
