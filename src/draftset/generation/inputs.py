"""The rows `generate` answers, in input order: build's reading and normalization, build's id
rule, and an error line (never a request) for a row that cannot be answered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from draftset.core import reasons
from draftset.core.ids import IdRegistry, duplicate_id_message
from draftset.core.records import PreTokenized, PromptOnly, Reject
from draftset.generation.dialog import Job
from draftset.generation.outcomes import PRETOKENIZED
from draftset.sources.presets import source_normalizer
from draftset.sources.read import Source, iter_raw_rows


# --- input ---------------------------------------------------------------------------------
def _unique(
    candidate: str | None, source: str, row: int, ids: IdRegistry, file: str | None = None
) -> tuple[str, bool]:
    """(resume key, True when it is the row's own id or its source-prefixed form): build's
    rule (`IdRegistry.claim_key`, which build's `select.facts.Decider` calls too)."""
    return ids.claim_key(candidate, source, row, file)


def iter_inputs(sources: list[Source]) -> Iterator[Job | dict[str, Any]]:
    """Jobs to answer, or error lines for rows that cannot be answered, in input order."""
    ids = IdRegistry()
    for src in sources:
        norm = source_normalizer(src)  # build's normalization of this source
        for raw in iter_raw_rows(src):
            item = raw.reject if raw.reject is not None else norm(raw)
            key, own = _unique(item.id, item.source, item.row, ids, raw.file)
            if isinstance(item, Reject):
                yield error_line(key, item.source, item.row, item.reason, item.message)
            elif not own:
                msg = duplicate_id_message(item.id)
                yield error_line(key, item.source, item.row, reasons.DUPLICATE_ID, msg)
            elif isinstance(item, PreTokenized):
                msg = "a pre-tokenized row has no messages to send"
                yield error_line(key, item.source, item.row, PRETOKENIZED, msg)
            else:
                meta = item.meta.get("metadata")
                origin = (
                    meta if isinstance(meta, dict) else {"source": item.source, "row": item.row}
                )
                prompt_only = isinstance(item, PromptOnly)
                yield Job(
                    key, item.source, item.row, item.messages, item.tools, prompt_only, origin
                )


def error_line(
    row_id: str, source: str, row: int, reason: str, message: str, **extra: Any
) -> dict[str, Any]:
    return {
        "id": row_id,
        "reason": reason,
        "message": message,
        "source": source,
        "row": row,
        **extra,
    }
