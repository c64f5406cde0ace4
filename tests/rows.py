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


def user(content: str) -> dict:
    return {"role": "user", "content": content}


def assistant(content: str, **keys: object) -> dict:
    return {"role": "assistant", "content": content, **keys}


def build_rows(
    folder: Path, rows: list[dict], tokenizer: Path, template: Path | None = None, **options: object
) -> Path:
    """``rows`` written as ``folder``.jsonl and built (inline, one worker) into ``folder``."""
    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    src = write_jsonl(folder.with_suffix(".jsonl"), rows)
    opts = BuildOptions(
        [Source(folder.name, src)],
        str(tokenizer),
        folder,
        chat_template_path=str(template) if template else None,
        workers=1,
        **options,  # type: ignore[arg-type]
    )
    return run_build(opts).out


def rejects_by_id(folder: Path) -> dict[str, dict]:
    lines = (folder / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


def supervised_text(row: dict, tokenizer: Path) -> list[str]:
    """Each supervised run of a set's row, decoded with the tokenizer in folder ``tokenizer``
    (special tokens kept)."""
    import numpy as np
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    ids, mask = np.array(row["input_ids"]), np.array(row["loss_mask"])
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
    return [
        tok.decode(ids[a:b].tolist(), skip_special_tokens=False) for a, b in edges.reshape(-1, 2)
    ]


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
"""The one tool of the serving tests' tool-calling rows."""
