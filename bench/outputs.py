"""Read what each program wrote and check it: rows, tokens, supervision, and whether the token
ids are the real template's.

All three outputs are Arrow IPC files (draftset's and speculators' ``save_to_disk`` folders,
SpecForge's ``datasets`` cache), read one record batch at a time with pyarrow. SpecForge nests
ids as ``[1, L]`` lists; masks are int8, bool or int64 depending on the program.

"Same tokens as the real template" is checked without relying on row order (SpecForge
shuffles): the ids of the first ``sample`` input conversations, rendered with the tokenizer's
own template and encoded in one piece, are hashed, and the share of those hashes found among
the output rows' id hashes is reported.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
}


@dataclass
class OutputStats:
    rows: int = 0
    tokens: int = 0
    supervised: int = 0
    eot_rows: int = 0  # rows whose mask covers at least one end-of-turn token
    ids_dtype: str = ""
    mask_dtype: str = ""
    hashes: set[bytes] = field(default_factory=set, repr=False)

    @property
    def supervised_fraction(self) -> float:
        return self.supervised / self.tokens if self.tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "tokens": self.tokens,
            "supervised": self.supervised,
            "supervised_fraction": self.supervised_fraction,
            "eot_rows": self.eot_rows,
            "ids_dtype": self.ids_dtype,
            "mask_dtype": self.mask_dtype,
        }


def _digest(ids: np.ndarray) -> bytes:
    return hashlib.blake2b(ids.astype(np.int64).tobytes(), digest_size=12).digest()


def _batches(path: Path) -> Iterator[pa.RecordBatch]:
    with pa.memory_map(str(path)) as source:
        try:
            reader: Any = pa.ipc.open_stream(source)
            yield from reader
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


def _flat(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets per row, flat values) of a list column; [1, L]-nested lists are unwrapped.

    ``offsets`` index straight into the flat values (the child arrays are not sliced).
    """
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    offsets = col.offsets.to_numpy()
    values = col.values
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        # one inner list per row ([1, L]): row i spans the inner lists offsets[i]..offsets[i+1]
        inner = values.offsets.to_numpy()
        offsets = inner[offsets]
        values = values.values
    return offsets, values.to_numpy(zero_copy_only=False)


def read_output(files: list[Path], eot_id: int) -> OutputStats:
    stats = OutputStats()
    for path in files:
        for batch in _batches(path):
            names = batch.schema.names
            if "input_ids" not in names or "loss_mask" not in names:
                continue
            ids_col = batch.column(names.index("input_ids"))
            mask_col = batch.column(names.index("loss_mask"))
            stats.ids_dtype = str(ids_col.type)
            stats.mask_dtype = str(mask_col.type)
            id_off, ids = _flat(ids_col)
            m_off, mask = _flat(mask_col)
            mask = mask.astype(bool)
            for r in range(len(id_off) - 1):
                row_ids = ids[id_off[r] : id_off[r + 1]]
                row_mask = mask[m_off[r] : m_off[r + 1]]
                stats.rows += 1
                stats.tokens += row_ids.size
                sup = row_ids[row_mask[: row_ids.size]]
                stats.supervised += int(sup.size)
                stats.eot_rows += bool((sup == eot_id).any())
                stats.hashes.add(_digest(row_ids))
    return stats


def output_files(kind: str, out: Path, driver_info: dict[str, Any]) -> list[Path]:
    """The Arrow files holding each program's rows."""
    if kind == "draftset":
        return sorted(out.glob("data-*.arrow"))
    if kind == "speculators":
        return sorted(Path(driver_info["output"]).glob("data-*.arrow"))
    if kind == "specforge":
        # map output shards (Arrow despite the .pkl name); cache-*.arrow are filter indices
        return [Path(f) for f in driver_info.get("output_files", []) if "/cache-" not in f]
    return []


def reference_ids(
    data: Path, tokenizer_dir: Path, sample: int, template: str | None = None
) -> list[list[int]]:
    """Token ids of the first ``sample`` conversations rendered with the real template.

    ``template``: the run's chat template text (default: the tokenizer's own).
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    texts = []
    with open(data, encoding="utf-8") as f:
        for line in f:
            if len(texts) >= sample:
                break
            row = json.loads(line)
            if "messages" in row:
                messages = row["messages"]
            else:
                messages = [
                    {"role": ROLES[t["from"]], "content": t["value"]} for t in row["conversations"]
                ]
            texts.append(
                tok.apply_chat_template(
                    messages, tools=row.get("tools"), chat_template=template, tokenize=False
                )
            )
    return [e.ids for e in tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False)]


def reference_hashes(ids: list[list[int]]) -> set[bytes]:
    """Order-free fingerprints of reference id sequences (to find them among output rows)."""
    return {_digest(np.asarray(x, dtype=np.int64)) for x in ids}
