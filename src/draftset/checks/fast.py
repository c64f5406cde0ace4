"""The fast checks of `verify`: structure, accounting, file hashes, vocabulary files, fitness.

They need only the output folder (no sources, no tokenizer), run vectorized over record batches,
and take seconds on a big set, so `build` runs them before it reports success.
"""

from __future__ import annotations

import os
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from draftset.core import reasons
from draftset.core.digests import digest64
from draftset.core.words import ascii_digits, plural
from draftset.output.arrow import state_fingerprint
from draftset.output.base import arrow_schema, rel_name, safe_name
from draftset.output.folder import (
    DRAFTSET_LATER_FILES,
    REPORT_PAGE,
    TMP_MARKER,
    TMP_WHILE_WRITTEN,
)
from draftset.output.readback import (
    REQUIRED_COLUMNS,
    CheckResult,
    OutputSet,
    Problems,
    RowStats,
    SetFacts,
    iter_jsonl,
)
from draftset.output.vocab import TokenFreqPtShape, load_token_freq_pt
from draftset.sources.read import sha256_file

MAX_NO_PAIR_FRACTION = 0.25
"""drafter_fitness fails when more than this fraction of rows has no two consecutive supervised
tokens (such a row gives a multi-step drafter, EAGLE-3 TTT or DFlash, nothing to chain)."""

REJECT_KEYS = {"source", "row", "id", "reason", "message"}
"""The keys of every rejects.jsonl line; a row of a source of several files also has ``file``
(its file, relative to the source folder)."""


# --- 1. structure ---------------------------------------------------------------------------------
def check_structure(out: OutputSet, facts: SetFacts | None = None) -> CheckResult:
    """Columns and dtypes, equal lengths, no empty rows, unique ids, token ids inside the vocab.

    ``facts``: the set's `SetFacts` when already read (or handed back by a build's workers)."""
    p = Problems()
    for problem in out.layout.structure_problems(out.folder, out.state):
        p.add(problem)
    if not out.readable or out.schema is None:
        p.add(out.read_error or "no data")
        return p.result("structure", "")
    schema = out.schema
    for name, dtype in REQUIRED_COLUMNS.items():
        if name not in schema.names:
            p.add(f"missing column {name}")
        elif not schema.field(name).type.equals(dtype):
            p.add(f"column {name} is {schema.field(name).type}, expected {dtype}")
    for name in schema.names:  # e.g. `labels`, which trainers read instead of loss_mask
        if name not in REQUIRED_COLUMNS:
            p.add(f"column {name} is not one draftset writes (a loader may train on it)")
    _check_schema_as_written(p, schema)
    if p.count:
        return p.result("structure", "")
    vocab = out.vocab_size
    max_len = int(out.options.get("max_length") or 0)
    min_sup = int(out.options.get("min_supervised_tokens") or 0)
    facts = facts or SetFacts.read(out)
    # ids one by one (a set of every id) only when the vectorized pass finds one missing or twice
    seen: set[str] | None = None if facts.ids_distinct() else set()
    for b in facts.batches:
        if seen is not None:
            for r, rid in enumerate(b.ids):
                if rid is None or rid == "":
                    p.add("row without id", f"#{b.start_row + r}")
                elif rid in seen:
                    p.add("duplicate id", rid)
                else:
                    seen.add(rid)
        bad_len = (b.lengths != b.mask_lengths) | (b.lengths != b.seq_len)
        for r in np.nonzero(bad_len)[0]:
            p.add("len(input_ids), len(loss_mask), seq_len differ", _rid(b.ids, b.start_row, r))
        for r in np.nonzero(b.lengths == 0)[0]:
            p.add("empty row", _rid(b.ids, b.start_row, r))
        if max_len:
            for r in np.nonzero(b.lengths > max_len)[0]:
                p.add(f"row longer than max_length {max_len}", _rid(b.ids, b.start_row, r))
        bad_tok = (b.token_min < 0) | ((b.token_max >= vocab) if vocab else False)
        for r in np.nonzero(bad_tok)[0]:
            p.add(f"token id outside the vocabulary [0, {vocab})", _rid(b.ids, b.start_row, r))
        for r in b.bad_mask_rows:
            p.add("loss_mask value other than 0/1", _rid(b.ids, b.start_row, r))
        if b.supervised_within is not None:
            for r in np.nonzero(b.supervised_within < max(min_sup, 1))[0]:
                p.add(
                    "fewer supervised tokens than min_supervised_tokens",
                    _rid(b.ids, b.start_row, r),
                )
    n = out.num_rows
    return p.result(
        "structure", f"{plural(n, 'row')}; columns, dtypes, lengths, ids and token ids ok"
    )


def _check_schema_as_written(p: Problems, schema: pa.Schema) -> None:
    """The shards' schema is the one build writes (`arrow_schema`) beyond names and types:
    the column order (what a positional reader sees) and the `huggingface` metadata, from
    which `datasets` takes the features of a Parquet or Arrow file (a loss_mask declared
    float32 there is read as float32; dropped, the types are guessed)."""
    written = arrow_schema()
    if set(schema.names) == set(written.names) and schema.names != written.names:
        p.add(
            f"columns are in the order {', '.join(schema.names)}, not draftset's"
            f" {', '.join(written.names)}"
        )
    if schema.metadata != written.metadata:
        got = "none" if not schema.metadata else ", ".join(k.decode() for k in schema.metadata)
        p.add(
            "schema metadata is not the `huggingface` features draftset writes (datasets reads"
            f" the columns' types from it; the shard has {got}"
            + (", with other features)" if got == "huggingface" else ")")
        )


def _rid(ids: Sequence[str | None], start: int, r: int | np.integer) -> str:
    rid = ids[int(r)]
    return rid if rid else f"#{start + int(r)}"


# --- 2. accounting --------------------------------------------------------------------------------
def check_accounting(out: OutputSet, facts: SetFacts | None = None) -> CheckResult:
    """Counts in the manifest balance and equal the data, rejects.jsonl and prompts.jsonl."""
    p = Problems()
    m = out.manifest
    counts = (m.get("counts") or {}).get("per_source") or {}
    names = [i.get("name") for i in m.get("inputs") or []]
    if sorted(counts) != sorted(n for n in names if n is not None):
        p.add("manifest counts and inputs name different sources")
    _check_balance(p, counts, out.options.get("turns", "all"))
    _check_total(p, (m.get("counts") or {}).get("total"), counts)
    if out.readable:  # else no rows to compare: the structure check names the shard
        facts = facts or SetFacts.read(out)
        _check_counts_match_data(p, out, counts, facts)
        _check_conversations(p, out, counts, facts)
    rejects = _check_rejects_file(p, out, counts)
    prompts = _check_prompts_file(p, out, counts)
    _check_mixture(p, out, counts)
    rows = (
        plural(out.num_rows, "row")
        if out.readable
        else "rows not compared (the shards cannot be read: see the structure check)"
    )
    return p.result(
        "accounting",
        f"{plural(len(counts), 'source')} balance; {rows},"
        f" {plural(rejects, 'reject')}, {plural(prompts, 'prompt')} match the manifest",
    )


def _check_balance(p: Problems, counts: dict[str, Any], mode: str) -> None:
    """Each source's counts add up: every row read is written, rejected or queued."""
    for name, c in counts.items():
        try:
            rejected = int(c["rejected"])
            if int(c["read"]) != int(c["written"]) + rejected + int(c["needs_generation"]):
                p.add("read != written + rejected + needs_generation", name)
            if sum(c["rejected_by_reason"].values()) != rejected:
                p.add("rejected_by_reason does not sum to rejected", name)
            if int(c["available"]) != int(c["read"]) + int(c["sampled_out"]):
                p.add("available != read + sampled_out", name)
            if mode != "each" and int(c["rows_out"]) != int(c["written"]):
                p.add("rows_out != written (one row per conversation outside --turns each)", name)
        except (KeyError, TypeError, ValueError, AttributeError):
            p.add("manifest counts malformed", name)


def _check_total(p: Problems, total: Any, counts: dict[str, Any]) -> None:
    """``counts.total`` is the sum of the sources' counts, field by field (the summary and the
    report show it: a total claiming one more written and one fewer rejected row must fail)."""
    if not isinstance(total, dict):
        if counts:
            p.add("counts.total missing", "counts.total")
        return
    want: dict[str, Any] = {}
    for c in counts.values():
        for key, value in (c if isinstance(c, dict) else {}).items():
            if isinstance(value, dict):
                by_reason = want.setdefault(key, {})
                for reason, k in value.items():
                    by_reason[reason] = by_reason.get(reason, 0) + (k if isinstance(k, int) else 0)
            elif isinstance(value, int):
                want[key] = want.get(key, 0) + value
    for key in sorted(set(want) | set(total)):
        got, expected = total.get(key), want.get(key)
        if isinstance(expected, dict):
            got = {r: k for r, k in (got or {}).items() if k} if isinstance(got, dict) else got
            expected = {r: k for r, k in expected.items() if k}
        if got != expected:
            p.add(
                "counts.total != the sum of the sources",
                f"counts.total.{key}",
                f"counts.total.{key} {got} != sum of the sources {expected}",
            )


def _check_conversations(
    p: Problems, out: OutputSet, counts: dict[str, Any], facts: SetFacts
) -> None:
    """Conversation-level counts against the data: outside ``--turns each`` every rejected
    conversation is one reject line (``rejected_by_reason`` = ``row_rejects_by_reason``, which
    rejects.jsonl proves); with ``each``, ``written`` is the number of distinct conversations
    (ids ``base#k``) among the rows, and no reason rejects more conversations than rows."""
    each = out.options.get("turns") == "each"
    conversations: Counter[str] = Counter()
    if each and out.readable and "id" in out.column_names and "source" in out.column_names:
        if facts.batches:
            columns = ((b.ids, b.sources) for b in facts.batches)
        else:
            columns = iter([(out.ids(), out.sources())])
        conversations = conversations_per_source(columns)
    for name, c in counts.items():
        if not isinstance(c, dict):
            continue
        conv = c.get("rejected_by_reason") or {}
        rows = c.get("row_rejects_by_reason") or {}
        if not each and conv != rows:
            p.add(
                "rejected_by_reason != reject lines (one per rejected conversation)",
                name,
                f"{name}: rejected_by_reason {conv} != row_rejects_by_reason {rows}",
            )
        if each:
            if any(k > rows.get(r, 0) for r, k in conv.items()):
                p.add("rejected_by_reason exceeds the reject lines", name)
            if c.get("written") != conversations[name]:
                p.add(
                    "written != conversations in the data",
                    name,
                    f"{name}: written {c.get('written')} != {conversations[name]}"
                    " distinct conversations among the rows",
                )


def conversation_of(row_id: str | None) -> str:
    """The conversation a ``--turns each`` row belongs to: its id before the last ``#``."""
    return str(row_id).rsplit("#", 1)[0] if row_id else ""


def conversations_per_source(
    columns: Iterable[tuple[Sequence[str | None], Sequence[str | None]]],
) -> Counter[str]:
    """Distinct conversations (`conversation_of`) per source over (ids, sources) batches.

    Counted on 64-bit digests, 8 bytes a row for the moment it takes: a set of the ids'
    strings (and the set's ids as one Python list) cost ~125 bytes a row at the end of a
    ``--turns each`` build's driver. Two conversations with one digest (~3e-6 at 10M rows)
    would count once: a false failure naming the count, not a silent pass.
    """
    digests: dict[str, array[int]] = {}
    for ids, sources in columns:
        for rid, src in zip(ids, sources, strict=True):
            key = str(src)
            kept = digests.get(key)
            if kept is None:
                kept = digests[key] = array("Q")
            kept.append(digest64(conversation_of(rid)))
    return Counter(
        {k: int(np.unique(np.frombuffer(v, dtype=np.uint64)).size) for k, v in digests.items()}
    )


def _data_counts(facts: SetFacts) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Rows, tokens and supervised tokens per source, counted in the data itself."""
    rows_by: Counter[str] = Counter()
    tok_by: Counter[str] = Counter()
    sup_by: Counter[str] = Counter()
    for b in facts.batches:
        sup = b.supervised_common.tolist()
        for src, n, s in zip(b.sources, b.lengths.tolist(), sup, strict=True):
            key = str(src)
            rows_by[key] += 1
            tok_by[key] += n
            sup_by[key] += s
    return rows_by, tok_by, sup_by


def _check_counts_match_data(
    p: Problems, out: OutputSet, counts: dict[str, Any], facts: SetFacts
) -> None:
    """The manifest's per-source and total rows / tokens / supervised tokens equal the data."""
    rows_by, tok_by, sup_by = _data_counts(facts)
    for src in rows_by:
        if src not in counts:
            p.add("rows from a source the manifest does not name", src)
    for name, c in counts.items():
        for field, data in (
            ("rows_out", rows_by),
            ("tokens", tok_by),
            ("supervised_tokens", sup_by),
        ):
            if isinstance(c, dict) and c.get(field) != data.get(name, 0):
                p.add(
                    f"{field} in the manifest != data",
                    name,
                    f"{name}: {field} {c.get(field)} != {data.get(name, 0)}",
                )
    totals = out.manifest.get("totals") or {}
    for field, value in (
        ("rows", out.num_rows),
        ("tokens", sum(tok_by.values())),
        ("supervised_tokens", sum(sup_by.values())),
    ):
        if totals.get(field) != value:
            p.add(
                f"totals.{field} != data",
                f"totals.{field}",
                f"totals.{field} {totals.get(field)} != {value}",
            )


def _check_rejects_file(p: Problems, out: OutputSet, counts: dict[str, Any]) -> int:
    """rejects.jsonl: well-formed lines, counts per source and reason; returns its lines."""
    if not (out.folder / "rejects.jsonl").exists():
        p.add("rejects.jsonl missing")
    bad: list[int] = []
    seen: Counter[tuple[str, str]] = Counter()
    n = 0
    for i, obj in enumerate(iter_jsonl(out.folder / "rejects.jsonl", bad)):  # one at a time
        n += 1
        where = f"rejects.jsonl#{i}"
        if not _reject_ok(obj, counts):
            p.add(
                "rejects.jsonl line malformed",
                (obj.get("id") if isinstance(obj, dict) else None) or where,
            )
            continue
        seen[(obj["source"], obj["reason"])] += 1
    for ln in bad:
        p.add("rejects.jsonl line is not JSON", f"rejects.jsonl:{ln}")
    for name, c in counts.items():
        want = (c.get("row_rejects_by_reason") if isinstance(c, dict) else None) or {}
        got = {reason: k for (src, reason), k in seen.items() if src == name}
        if want != got:
            p.add("rejects.jsonl counts != row_rejects_by_reason", name, f"{name}: {got} != {want}")
    return n


FILTER_REASONS = {"exact": reasons.DUPLICATE, "near": reasons.NEAR_DUPLICATE}
"""The reject reason of each ``mixture.dedup`` kind: its ``removed`` counts are those lines."""


def _check_mixture(p: Problems, out: OutputSet, counts: dict[str, Any]) -> None:
    """``mixture``'s dedup and decontamination numbers (what the report shows) against the
    reject lines of their reasons, per source (``row_rejects_by_reason``, which
    rejects.jsonl proves): ``removed``, ``removed_total``, the pairs, by benchmark."""
    if "mixture" not in out.manifest:  # older manifests: nothing to check
        return
    mixture = out.manifest.get("mixture") or {}

    def lines_of(reason: str) -> dict[str, int]:
        by_source = {
            name: int((c.get("row_rejects_by_reason") or {}).get(reason, 0))
            for name, c in counts.items()
            if isinstance(c, dict)
        }
        return {name: k for name, k in by_source.items() if k}

    for i, d in enumerate(mixture.get("dedup") or []):
        where = f"mixture.dedup[{i}]"
        reason = FILTER_REASONS.get(d.get("kind"))
        if reason is None:
            p.add("mixture.dedup kind unknown", where, f"{where}.kind {d.get('kind')!r}")
            continue
        want = lines_of(reason)
        _check_removed(p, where, d, want, reason)
        paired: Counter[str] = Counter()
        for pair in d.get("pairs") or []:
            paired[str(pair.get("removed_source"))] += int(pair.get("count") or 0)
            if pair.get("kept_source") not in counts or pair.get("removed_source") not in counts:
                p.add("mixture pair names an unknown source", where, f"{where}.pairs: {pair}")
        if {n: k for n, k in paired.items() if k} != want:
            p.add(
                f"mixture pairs != {reason} reject lines",
                where,
                f"{where}.pairs count {dict(paired)} != {reason} reject lines {want}",
            )
    kinds = {d.get("kind") for d in mixture.get("dedup") or []}
    for kind, reason in FILTER_REASONS.items():
        if kind not in kinds and lines_of(reason):
            p.add(
                f"{reason} reject lines without a mixture.dedup {kind} step",
                "mixture.dedup",
                f"{sum(lines_of(reason).values())} {reason} reject lines, no {kind} dedup step",
            )
    dec = mixture.get("decontamination")
    if dec is None and lines_of(reasons.CONTAMINATED):
        p.add(
            "contaminated reject lines without mixture.decontamination",
            "mixture.decontamination",
        )
    if isinstance(dec, dict):
        where = "mixture.decontamination"
        want = lines_of(reasons.CONTAMINATED)
        _check_removed(p, where, dec, want, reasons.CONTAMINATED)
        used = set(dec.get("benchmarks") or {})
        unknown = sorted(set(dec.get("removed_by_benchmark") or {}) - used)
        if unknown:
            p.add(
                "mixture removed_by_benchmark names a benchmark the set was not checked against",
                where,
                f"{where}.removed_by_benchmark names {unknown}, not among its benchmarks"
                f" {sorted(used)}",
            )
        by_bench = sum((dec.get("removed_by_benchmark") or {}).values())
        if by_bench != sum(want.values()):
            p.add(
                "mixture removed_by_benchmark != contaminated reject lines",
                where,
                f"{where}.removed_by_benchmark sums to {by_bench} !="
                f" {sum(want.values())} contaminated reject lines",
            )


def _check_removed(
    p: Problems,
    where: str,
    stats: dict[str, Any],
    want: dict[str, int],
    reason: str,
) -> None:
    """One filter's ``removed`` / ``removed_total`` equal its reason's reject lines, and no
    source removed more rows than it checked (``checked`` counts rows before a mix samples
    them: not bounded by ``read``)."""
    removed = {n: k for n, k in (stats.get("removed") or {}).items() if k}
    if removed != want:
        p.add(
            f"mixture removed != {reason} reject lines",
            where,
            f"{where}.removed {removed} != {reason} reject lines {want}",
        )
    total = stats.get("removed_total")
    if total is not None and total != sum(want.values()):
        p.add(
            f"mixture removed_total != {reason} reject lines",
            where,
            f"{where}.removed_total {total} != {sum(want.values())} {reason} reject lines",
        )
    checked = stats.get("checked") or {}
    for name, k in removed.items():
        if k > checked.get(name, 0):
            p.add(
                "mixture removed more rows than it checked",
                where,
                f"{where}.removed.{name} {k} > checked {checked.get(name, 0)}",
            )


def _check_prompts_file(p: Problems, out: OutputSet, counts: dict[str, Any]) -> int:
    """prompts.jsonl: one well-formed line per needs_generation row; returns its lines."""
    pbad: list[int] = []
    pseen: Counter[str] = Counter()
    n = 0
    for obj in iter_jsonl(out.folder / "prompts.jsonl", pbad):  # one at a time: every prompt
        n += 1
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if (
            not isinstance(obj, dict)
            or not isinstance(obj.get("messages"), list)
            or not isinstance(meta, dict)
        ):
            p.add("prompts.jsonl line malformed", obj.get("id") if isinstance(obj, dict) else None)
            continue
        pseen[str(meta.get("source"))] += 1
    for ln in pbad:
        p.add("prompts.jsonl line is not JSON", f"prompts.jsonl:{ln}")
    for name, c in counts.items():
        if isinstance(c, dict) and c.get("needs_generation") != pseen.get(name, 0):
            p.add("prompts.jsonl lines != needs_generation", name)
    return n


def _reject_ok(obj: Any, counts: dict[str, Any]) -> bool:
    return (
        isinstance(obj, dict)
        and set(obj) - {"file"} == REJECT_KEYS
        and ("file" not in obj or (isinstance(obj["file"], str) and obj["file"] != ""))
        and obj["source"] in counts
        and isinstance(obj["row"], int)
        and not isinstance(obj["row"], bool)
        and obj["row"] >= 0
        and (obj["id"] is None or isinstance(obj["id"], str))
        and obj["reason"] in reasons.ROW_REJECT_REASONS
        and isinstance(obj["message"], str)
    )


# --- file hashes ---------------------------------------------------------------------------------
SIDE_FILES = ("token_freq.npy", "rejects.jsonl", "prompts.jsonl")
"""Files every set has beside its rows, whatever the output format."""
TORCH_FILE = "token_freq.pt"
"""Written by every build since session 34; before, only when torch imported at build time:
the one file a set may lack (its manifest's ``token_freq_pt`` says)."""


def set_files(out: OutputSet) -> set[str]:
    """Every file the set's layout accounts for: its shards under the names the writer gives
    them (as many as it has), the format's metadata, the side files, `TORCH_FILE` and the
    d2t/t2d of the recorded ``draft_vocab_size``. Nothing else is ever one of a set's files,
    listed in the manifest or not."""
    count = len(out.data_files)
    return (
        {out.layout.shard_name(i, count) for i in range(count)} | _listed_beside(out) | {TORCH_FILE}
    )


def pt_record(out: OutputSet) -> tuple[bool | None, str | None]:
    """The manifest's record of token_freq.pt: (written, why not); (None, None) for a set
    built before it was recorded."""
    record = out.manifest.get("token_freq_pt")
    if not isinstance(record, dict):
        return None, None
    return record.get("written"), record.get("reason")


def _listed_beside(out: OutputSet) -> set[str]:
    """The files beside the shards every set of this layout lists in its manifest: the
    format's metadata, the side files, the recorded ``draft_vocab_size``'s d2t/t2d, and
    token_freq.pt when build recorded it written."""
    names = {*out.layout.metadata_files, *SIDE_FILES}
    if pt_record(out)[0]:
        names.add(TORCH_FILE)
    n = out.options.get("draft_vocab_size")
    if n:
        names |= {f"d2t-{n}.npy", f"t2d-{n}.npy"}
    return names


def check_file_hashes(out: OutputSet) -> CheckResult:
    """Every output file the manifest lists exists with its recorded sha256, none is missing,
    and every file in the folder is one the set's layout accounts for (`set_files`)."""
    p = Problems()
    files: dict[str, str] = out.manifest.get("files") or {}
    own = set_files(out)
    expected = {*out.data_names} | _listed_beside(out)
    for name in sorted(expected - set(files)):
        p.add("output file not listed in the manifest", name)
    for name, digest in files.items():
        path = out.folder / name
        if not safe_name(name) or not path.is_file():
            p.add("listed file missing", name)
            continue
        if name not in out.sha256:  # a build's shards were hashed by the workers that wrote them
            out.sha256[name] = sha256_file(path)
        if out.sha256[name] != digest:
            p.add("sha256 differs from the manifest", name)
    # a file listed with its digest (or a shard the format's index names) is still no part
    # of the set unless draftset writes it: a Parquet shard of another build beside an Arrow
    # set is what `load_dataset(DIR)` reads, a README nothing proves
    for name in sorted((set(files) | set(out.data_names)) - own):
        p.add(
            "file that is not one of the set's files (draftset writes no such file: move it out)",
            name,
            f"{name}: draftset writes no such file in a set of"
            f" {plural(len(out.data_files), out.output_format + ' shard')}, though "
            + ("the manifest lists it" if name in files else "the set's index names it"),
        )
    _check_state_fingerprint(p, out)
    # a file that looks like a shard but is not one of the set's (another run's shard, a copy,
    # a `datasets` cache file) is not part of the set, yet looks like it
    strays = set()
    for name, kind, message in out.layout.stray_files(out.folder, out.data_files):
        p.add(kind, name, message)
        strays.add(name)
    # any other file the manifest does not list: a loader of the folder may read it (a
    # `data/train-*.parquet` beside an Arrow set is what `load_dataset(DIR)` reads), and
    # nothing proves its content
    for name in unlisted_files(out.folder, files):
        if name not in strays:
            p.add(
                "file not listed in the manifest (not part of the set: move it out)",
                name,
                f"{name}: not one of the manifest's files",
            )
    # a folder is the set's only as the place of a listed file (a Parquet set's `data/`): an
    # empty one, or a link to one (whose files the walk does not follow), build never writes
    for name, what in unaccounted_folders(out.folder, files):
        p.add(
            "folder draftset does not write (not part of the set: remove it)",
            name,
            f"{name}: {what}, not one of the set's",
        )
    return p.result(
        "file_hashes",
        f"{plural(len(files), 'file')} match their manifest sha256; no file the set does"
        " not account for",
    )


def _check_state_fingerprint(p: Problems, out: OutputSet) -> None:
    """state.json's `_fingerprint` is what build derives from its shards' sha256 (`datasets`
    keys its caches by it: a stale one serves another set's cached results)."""
    recorded = out.state.get("_fingerprint")
    listed = out.state.get("_data_files")
    if recorded is None or not isinstance(listed, list):
        return  # a Parquet set has no state.json; structure judges a malformed one
    names = [str(f.get("filename")) for f in listed if isinstance(f, dict)]
    if not all(n in out.sha256 for n in names):
        return  # a shard missing or unlisted: failed above
    digest = state_fingerprint([out.sha256[n] for n in names])
    if recorded != digest:
        p.add(
            "state.json _fingerprint is not its shards' (sha256 of their sha256)",
            "state.json",
            f"state.json: _fingerprint {recorded!r} != {digest!r}",
        )


ADVISORY_CHECKS = frozenset({"drafter_fitness"})
"""Checks that advise (DFlash fitness: whether the set suits a drafter, not whether it is
right) and fail nothing: not a build, a run, a report's verdict, nor `verify`."""


def failing(results: Sequence[CheckResult]) -> list[str]:
    """Names of the checks that fail a set: failed, and not advice (`ADVISORY_CHECKS`)."""
    return [r.name for r in results if r.failed and r.name not in ADVISORY_CHECKS]


AFTER_BUILD_FILES = frozenset({*DRAFTSET_LATER_FILES, REPORT_PAGE})
"""Files draftset itself writes into a finished set (the manifest, `verify`'s record, `report`'s
default page): never listed in the manifest, never flagged."""


def unlisted_files(folder: Path, listed: dict[str, Any]) -> list[str]:
    """Every file under ``folder`` (relative, ``/``-separated) that is neither listed nor one of
    `AFTER_BUILD_FILES` (a verify record or the default report being written,
    ``.verify.json.tmp-PID``, ``.report.html.tmp-PID``, neither; nor the build's marker, left
    while the set it replaced could not be removed yet)."""
    found: list[str] = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for n in sorted(names):
            name = rel_name(folder, Path(root) / n)
            if name in listed or name in AFTER_BUILD_FILES:
                continue
            if name.startswith(TMP_WHILE_WRITTEN):
                continue  # a record or the default report being written (atomic rename)
            if name == TMP_MARKER:  # the set it replaced is still beside it (never in a
                continue  # set that is not whole: output/folder.py, `remove_stale_tmp`)
            found.append(name)
    return found


def unaccounted_folders(folder: Path, listed: dict[str, Any]) -> list[tuple[str, str]]:
    """Folders under ``folder`` that hold no file and are no listed file's place (named
    ``name/``, at the top of a tree of empty folders), and links to folders (the walk does not
    follow them): (name, what it is). A listed file's folder is the set's even when emptied
    (the missing file is named instead)."""
    places = {name.rsplit("/", k)[0] for name in listed for k in range(1, name.count("/") + 1)}
    found: list[tuple[str, str]] = []

    def walk(here: Path, prefix: str) -> bool:
        """Whether anything but empty folders lies below ``here`` (what it finds added)."""
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            return True  # unreadable: not known to be empty
        anything = False
        for entry in entries:
            rel = prefix + entry.name
            if entry.is_symlink() and entry.is_dir():
                if rel not in places:
                    found.append((rel + "/", "a link to a folder"))
                anything = True
            elif entry.is_dir(follow_symlinks=False):
                before = len(found)
                if walk(Path(entry.path), rel + "/") or rel in places:
                    anything = True
                else:  # nothing but empty folders below: named once, here
                    del found[before:]
                    found.append((rel + "/", "an empty folder"))
            else:
                anything = True
        return anything

    walk(folder, "")
    return found


# --- 7. vocabulary files ------------------------------------------------------------------------
def check_token_freq(
    out: OutputSet, stats: RowStats, load_pt: Callable[[Path], dict[int, int]] | None = None
) -> CheckResult:
    """token_freq.npy and .pt equal a recount of supervised tokens; token_freq.pt is there
    exactly when the manifest records it written (`pt_record`).

    ``load_pt`` reads token_freq.pt (the build's check: draftset's own reader, no torch);
    default: `load_token_freq_pt` (torch.load when torch imports, as speculators reads it).
    """
    if not out.readable:  # no tokens to recount: the structure check names the shard
        return CheckResult(
            "token_freq", "skip", "skipped: the shards cannot be read (see the structure check)"
        )
    p = Problems()
    notes: list[str] = []
    vocab = out.vocab_size
    recount = stats.token_freq
    path = out.folder / "token_freq.npy"
    if not path.is_file():
        p.add("token_freq.npy missing", "token_freq.npy")
    else:
        try:
            freq = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            p.add(f"token_freq.npy unreadable: {exc}", "token_freq.npy")
            freq = None
        if freq is not None:
            if freq.dtype != np.int64 or freq.shape != (vocab,):
                p.add(
                    f"token_freq.npy is {freq.dtype}{list(freq.shape)}, expected int64[{vocab}]",
                    "token_freq.npy",
                )
            else:
                ref = _fit(recount, vocab)
                diff = np.nonzero(freq != ref)[0]
                if diff.size:
                    p.add(
                        f"token_freq.npy differs from the recount at {diff.size} token ids",
                        "token_freq.npy",
                        f"e.g. id {int(diff[0])}: file {int(freq[diff[0]])}"
                        f" != recount {int(ref[diff[0]])}",
                    )
    pt = out.folder / TORCH_FILE
    written, reason = pt_record(out)
    if pt.is_file() and written is False:
        p.add(
            "token_freq.pt present, though build recorded it not written",
            TORCH_FILE,
            f"token_freq.pt: present, though build recorded it not written ({reason})",
        )
    elif pt.is_file():
        try:
            data = (load_pt or load_token_freq_pt)(pt)
        except TokenFreqPtShape as exc:
            p.add(
                "token_freq.pt does not hold {token id: count} as build writes it",
                TORCH_FILE,
                f"token_freq.pt: {exc}",
            )
        except Exception as exc:  # a corrupt pickle is a failed check, not a crash
            p.add(f"token_freq.pt unreadable: {type(exc).__name__}", TORCH_FILE)
        else:
            _check_pt_counts(p, data, recount, vocab)
    elif written:
        p.add(
            "token_freq.pt missing, though build recorded it written",
            TORCH_FILE,
            "token_freq.pt: missing, though build recorded it written (token_freq_pt.written)",
        )
    elif written is False:
        notes.append(f"token_freq.pt not written by build: {reason}")
        # an older build's record: builds now write the file without torch
        notes.append("a rebuild writes token_freq.pt (draftset no longer needs torch for it)")
    else:  # a set from before build recorded it
        notes.append("token_freq.pt absent (written only when torch was installed at build time)")
    total = int(recount.sum())
    res = p.result("token_freq", f"counts equal a recount of {total:,} supervised tokens")
    if notes:
        res.details["notes"] = notes
        if res.status == "pass":
            res.summary += " (" + "; ".join(notes) + ")"
    return res


def _check_pt_counts(p: Problems, data: dict[int, int], recount: np.ndarray, vocab: int) -> None:
    """token_freq.pt's {id: count} is exactly what build writes from the recount: every
    supervised id with its count and no other id (build writes no count of 0)."""
    want = {int(i): int(recount[i]) for i in np.nonzero(recount)[0]}
    inside = [i for i in sorted(data) if 0 <= i < vocab]

    def say(ids: list[int], kind: str, first: Callable[[int], str]) -> None:
        if ids:
            more = f" (and {plural(len(ids) - 1, 'more id')})" if len(ids) > 1 else ""
            p.add(f"token_freq.pt {kind}", TORCH_FILE, f"token_freq.pt: {first(ids[0])}{more}")

    say(
        [i for i in sorted(data) if not 0 <= i < vocab],
        "has ids outside the vocabulary",
        lambda i: f"id {i} outside [0, {vocab})",
    )
    say(
        [i for i in inside if data[i] < 0],
        "has negative counts",
        lambda i: f"a negative count: id {i}: {data[i]}",
    )
    say(
        [i for i in inside if data[i] == 0],
        "lists ids with count 0 (build writes none)",
        lambda i: f"id {i} with count 0",
    )
    say(
        [i for i in inside if data[i] > 0 and i not in want],
        "lists ids no row supervises",
        lambda i: f"lists id {i}, which no row supervises (count {data[i]:,})",
    )
    say(
        [i for i in want if i not in data],
        "lacks supervised ids",
        lambda i: f"lacks id {i}, which rows supervise {want[i]:,} times",
    )
    differ = [i for i in want if data.get(i, 0) > 0 and data[i] != want[i]]
    if differ:
        i = differ[0]
        p.add(
            "token_freq.pt differs from the recount",
            TORCH_FILE,
            f"token_freq.pt: differs from the recount at {plural(len(differ), 'id')}, e.g. id"
            f" {i}: file {data[i]:,} != recount {want[i]:,}",
        )


def _fit(arr: np.ndarray, size: int) -> np.ndarray:
    if arr.size >= size:
        return arr[:size]
    return np.concatenate([arr, np.zeros(size - arr.size, dtype=arr.dtype)])


def expected_draft_ids(freq: np.ndarray, n: int) -> np.ndarray:
    """EAGLE-3 draft vocabulary from counts, written independently of write.draft_vocab:
    a stable sort by descending count keeps ties in id order; pad with the lowest unused ids."""
    seen = np.nonzero(freq)[0]
    order = seen[np.argsort(-freq[seen], kind="stable")][:n]
    if order.size < n:
        used = np.zeros(max(n, int(order.max()) + 1 if order.size else n), dtype=bool)
        used[order] = True
        pad = np.nonzero(~used[:n])[0][: n - order.size]
        order = np.concatenate([order, pad])
    return np.sort(order).astype(np.int64)


def check_draft_vocab(out: OutputSet, stats: RowStats) -> CheckResult:
    """d2t/t2d agree with each other and with the top-N supervised tokens of the recount."""
    p = Problems()
    vocab = out.vocab_size
    sizes = {
        int(n)
        for kind in ("d2t", "t2d")
        for f in out.folder.glob(f"{kind}-*.npy")
        if ascii_digits(n := f.stem.split("-", 1)[1])
    }
    want_n = out.options.get("draft_vocab_size")
    if want_n:
        sizes.add(int(want_n))
    if not sizes:
        return CheckResult(
            "draft_vocab", "skip", "skipped: no d2t/t2d files (built without --draft-vocab-size)"
        )
    # t2d must have the target model's vocabulary size (speculators' train stops otherwise):
    # --target-vocab-size when it was given, else the manifest's (config.json) vocab_size
    target = int(out.options.get("target_vocab_size") or vocab)
    if target != vocab or vocab < 1:
        p.add(f"manifest vocab_size {vocab} is not the target vocabulary size {target}", "manifest")
    for n in sorted(sizes):
        d2t_path, t2d_path = out.folder / f"d2t-{n}.npy", out.folder / f"t2d-{n}.npy"
        if not d2t_path.is_file() or not t2d_path.is_file():
            p.add(f"d2t-{n}.npy / t2d-{n}.npy missing", f"d2t-{n}")
            continue
        try:
            d2t = np.load(d2t_path, allow_pickle=False)
            t2d = np.load(t2d_path, allow_pickle=False)
        except (ValueError, OSError):
            p.add("unreadable", f"d2t-{n}")
            continue
        if d2t.shape != (n,) or d2t.dtype != np.int64:
            p.add(f"d2t-{n} is {d2t.dtype}{list(d2t.shape)}, expected int64[{n}]", f"d2t-{n}")
            continue
        if t2d.dtype != np.bool_ or t2d.shape != (target,):
            p.add(
                f"t2d-{n} is {t2d.dtype}{list(t2d.shape)}, expected bool[{target}]"
                " (the target vocabulary size)",
                f"t2d-{n}",
            )
            continue
        ids = d2t + np.arange(n, dtype=np.int64)
        if not np.array_equal(ids, np.nonzero(t2d)[0]):
            p.add("d2t and t2d name different token ids", f"d2t-{n}")
            continue
        if not np.array_equal(ids, expected_draft_ids(_fit(stats.token_freq, vocab), n)):
            p.add("draft vocabulary is not the top-N of the supervised-token recount", f"d2t-{n}")
    return p.result(
        "draft_vocab",
        "d2t/t2d consistent with each other and with the counts: "
        + ", ".join(str(n) for n in sorted(sizes)),
    )


# --- 8. drafter fitness ---------------------------------------------------------------------------
def check_drafter_fitness(
    out: OutputSet, stats: RowStats, block_size: int, ids: Sequence[str | None] | None = None
) -> CheckResult:
    """Rows without two consecutive supervised tokens and DFlash anchor availability."""
    n = int(stats.seq_len.size)
    if n == 0:
        return CheckResult("drafter_fitness", "skip", "skipped: the set has no rows")
    no_pair = np.nonzero(stats.pairs == 0)[0]
    no_anchor = np.nonzero(stats.anchors == 0)[0]
    frac = no_pair.size / n
    details: dict[str, Any] = {
        "block_size": block_size,
        "rows": n,
        "rows_without_consecutive_supervised_pair": int(no_pair.size),
        "rows_without_dflash_anchor": int(no_anchor.size),
        "dflash_anchors_total": int(stats.anchors.sum()),
        "dflash_anchors_per_row_mean": float(stats.anchors.mean()),
        "dflash_anchors_per_row_median": float(np.median(stats.anchors)),
        "full_supervised_blocks_total": int(stats.full_blocks.sum()),
        "max_no_pair_fraction": MAX_NO_PAIR_FRACTION,
    }
    summary = (
        f"{no_pair.size:,} of {plural(n, 'row')} without two consecutive supervised tokens"
        f" (fail above {MAX_NO_PAIR_FRACTION:.0%}); DFlash block {block_size}:"
        f" {plural(int(stats.anchors.sum()), 'anchor')}, {plural(int(no_anchor.size), 'row')}"
        " without one"
    )
    if frac > MAX_NO_PAIR_FRACTION:
        examples = [str(ids[i]) for i in no_pair[:5]] if ids else [f"#{i}" for i in no_pair[:5]]
        return CheckResult("drafter_fitness", "fail", summary, int(no_pair.size), examples, details)
    if stats.anchors.sum() == 0:
        summary += " — no row has a DFlash anchor: a DFlash trainer has nothing to sample"
        return CheckResult("drafter_fitness", "fail", summary, n, [], details)
    return CheckResult("drafter_fitness", "pass", summary, details=details)
