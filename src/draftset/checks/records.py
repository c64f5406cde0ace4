"""The pass over the sources, and the manifest's records against what it re-derives.

`verify` re-runs reading and selection (shared with build: that is reading, not masking) and
walks every input row once: where each one went (written, rejected, queued as a prompt), and
what the manifest and the side files recorded about it all (the inputs' files, per-source
counts, reject lines, prompts.jsonl, the mixture) against that re-run. It is kept apart from
`mask.py`, which judges one row's tokens and mask against its own re-render: these checks
compare whole-set bookkeeping, one record at a time, and take from `mask.py` only what its
per-row checks found (the rows it re-derived, the runs it matched).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import time
import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from draftset.checks.mask import (
    Expected,
    RowVerdict,
    bounded_expected_rows,
    check_length_rejects,
    check_reject_messages,
    check_rejection,
    check_rows,
    check_server_prompt_rejects,
    check_turn_rejects,
    kept_server_ids,
    served_template,
)
from draftset.config.fields import refused
from draftset.config.schema import BuildArgs, SourceEntry
from draftset.core import defaults, reasons, rules
from draftset.core.records import (
    Conversation,
    Normalized,
    PreTokenized,
    PromptOnly,
    Reject,
)
from draftset.core.words import ascii_digits, plural
from draftset.mask.hygiene import (
    EmptyThinkProbe,
    all_placeholder_answers,
    lacks_reasoning,
    row_kwargs_key,
    run_sends,
)
from draftset.mask.render import server_completion_ids
from draftset.mask.template import ChatTemplate
from draftset.output.readback import (
    CheckResult,
    NotADraftsetError,
    OutputSet,
    Problems,
    read_jsonl,
)
from draftset.select import mix  # reading, ids and filters only; never build's masking code
from draftset.select.decontam import DEFAULT_N, ngram_problem
from draftset.select.modes import MixError
from draftset.sources.overlay import Overlay
from draftset.sources.read import (
    HUB_PREFIX,
    Source,
    SourceError,
    describe_inputs,
    scan_source,
    sha256_file,
)

FULL_CHECK_MAX_ROWS = 20_000
"""Sets up to this many rows get every row mask-checked by default; bigger ones a seeded sample."""

DEFAULT_SAMPLE = 2_000
"""Rows mask-checked by default on sets above FULL_CHECK_MAX_ROWS."""


# --- sources: the inputs' files, and reading and selection re-run ---------------------------------
def manifest_sources(out: OutputSet) -> list[Source]:
    return [
        Source(
            name=str(i["name"]),
            path=Path(i["path"]),
            format=i.get("format_override"),
            fields=i.get("fields"),
            weight=i.get("weight"),
            count=i.get("count"),
            preset=i.get("preset"),
        )
        for i in out.manifest.get("inputs") or []
    ]


def check_sources(out: OutputSet) -> CheckResult:
    """Every input file still exists with the bytes (sha256) and file list the manifest recorded."""
    p = Problems()
    n_files = 0
    for rec, src in zip(out.manifest.get("inputs") or [], manifest_sources(out), strict=True):
        want = [(f["path"], f["sha256"]) for f in rec.get("files") or []]
        n_files += len(want)
        if not src.path.exists():
            p.add(
                "source missing",
                src.name,
                f"{src.name}: {src.path} not found"
                + (
                    ""
                    if src.path.is_absolute()
                    else " (relative paths are read from the current folder)"
                ),
            )
            continue
        try:
            described = describe_inputs(src)
            got = [(f["path"], f["sha256"]) for f in described]
        except SourceError as exc:
            p.add("source unreadable", src.name, str(exc))
            continue
        if [g[0] for g in got] != [w[0] for w in want]:
            p.add(
                "source file list changed", src.name, f"{src.name}: files now {[g[0] for g in got]}"
            )
        elif got != want:
            changed = [g[0] for g, w in zip(got, want, strict=True) if g != w]
            p.add("source sha256 changed", src.name, f"{src.name}: {', '.join(changed)}")
        else:  # same content: the recorded size is the file's (a record edited is not)
            sizes = [(f["path"], f.get("bytes")) for f in rec.get("files") or []]
            now = {f["path"]: f["bytes"] for f in described}
            wrong = [f"{p_} {b} != {now[p_]}" for p_, b in sizes if b != now.get(p_)]
            if wrong:
                p.add("source file size changed", src.name, f"{src.name}: bytes {', '.join(wrong)}")
        _compare_skipped(p, rec, src)
    for bench in (out.manifest.get("selection") or {}).get("decontaminate") or []:
        n_files += 1  # the rows it rejects as contaminated depend on its content
        path = Path(str(bench.get("path")))
        if not path.is_file():
            p.add("benchmark file missing", str(path), f"{path} not found (--decontaminate)")
        elif not isinstance(bench.get("sha256"), str):  # build records every one's hash
            p.add(
                "benchmark file's sha256 not recorded",
                str(path),
                f"{path}: the manifest records no sha256 for it (build does: --decontaminate)",
            )
        elif sha256_file(path) != bench["sha256"]:
            p.add("benchmark file changed", str(path), f"{path}: sha256 differs (--decontaminate)")
    for answers in (out.manifest.get("selection") or {}).get("overlay") or []:  # `draftset run`
        n_files += 1
        path = Path(answers["path"])
        if answers.get("sha256") is None:
            if path.exists():
                p.add("answers file changed", str(path), f"{path}: exists now")
        elif not path.is_file():
            p.add("answers file missing", str(path), f"{path} not found (the run's work folder)")
        elif sha256_file(path) != answers["sha256"]:
            p.add("answers file changed", str(path), f"{path}: sha256 differs")
    return p.result("sources", f"{n_files} input files unchanged (sha256)")


def _compare_skipped(p: Problems, rec: dict[str, Any], src: Source) -> None:
    """The entries of a source folder build skipped on purpose (hidden, unsupported type) are
    the folder's now: the summary and the manifest list them as what the set left out."""
    if "skipped" not in rec or str(src.path).startswith(HUB_PREFIX):
        return
    try:
        skipped = scan_source(src.path)[1]
    except SourceError as exc:
        p.add("source unreadable", src.name, str(exc))
        return
    if rec["skipped"] != skipped:
        p.add(
            "source folder's skipped entries differ from the manifest",
            src.name,
            f"{src.name}: skipped: manifest {rec['skipped']} != now {skipped}",
        )


def iter_source_items(out: OutputSet) -> Iterator[Normalized]:
    """Every input row as build read it: same selection, normalization, ids and filters."""
    yield from source_selection(out).rows()


def source_selection(out: OutputSet) -> mix.Selection:
    """Build's selection step as the manifest recorded it; once its rows are drained, its
    counts and report are what build's manifest must say (`_compare_selection_records`)."""
    check_selection_values(out)
    opts = out.options
    sel = out.manifest.get("selection") or {}
    spec = mix.SelectionSpec(
        sources=manifest_sources(out),
        max_samples=opts.get("max_samples"),
        seed=int(opts.get("seed") or defaults.SEED),
        dedup=sel.get("dedup", defaults.DEDUP),
        near_dup_threshold=float(sel.get("near_dup_threshold", defaults.NEAR_DUP_THRESHOLD)),
        decontaminate=[d["path"] for d in sel.get("decontaminate") or []],
        decontaminate_ngram=int(sel.get("decontaminate_ngram", DEFAULT_N)),
        mix=sel.get("mix"),
        template_kwargs=dict((out.manifest.get("template") or {}).get("kwargs") or {}),
        overlay=[d["path"] for d in sel.get("overlay") or []],
        turns=str(opts.get("turns") or defaults.TURNS),
        placeholders=tuple(opts.get("placeholders") or rules.DEFAULT_PLACEHOLDERS),
        answered=(out.manifest.get("run") or {}).get("regenerate"),
    )
    return mix.Selection(spec)


def check_selection_values(out: OutputSet) -> None:
    """`selection_value_problem` of the set's manifest, raised as a malformed manifest."""
    if problem := selection_value_problem(out.manifest):
        raise NotADraftsetError(
            f"{out.folder / 'manifest.json'} is malformed: {problem} (not a manifest draftset"
            " wrote; rebuild the set)"
        )


def selection_value_problem(manifest: dict[str, Any]) -> str | None:
    """A selection setting of the manifest of a value build refuses before any work, said as
    the option schema says it (`config.schema`: ``SourceEntry``'s count and weight,
    ``BuildArgs``' dedup and near_dup_threshold; the decontaminator's n-gram size), else None:
    verify re-runs the selection with them, which ended in a traceback. The bounds are the
    schema's own, so one changed there holds here (types are checked first, on reading the
    manifest: `output.readback.manifest_problem`)."""
    for i, src in enumerate(manifest.get("inputs") or []):
        given = {k: src[k] for k in ("count", "weight") if isinstance(src, dict) and k in src}
        given = {k: v for k, v in given.items() if v is not None}
        if given and (bad := refused(SourceEntry, {"path": "recorded", **given})):
            name, what, value = bad
            return f"inputs[{i}].{name} is {value!r}: {what}"
    sel = manifest.get("selection") or {}
    given = {k: sel[k] for k in ("dedup", "near_dup_threshold") if k in sel}
    if given and (bad := refused(BuildArgs, given)):
        name, what, value = bad
        return f"selection.{name} is {value!r}: {what}"
    n = sel.get("decontaminate_ngram", DEFAULT_N)
    if what := ngram_problem(n):
        return f"selection.decontaminate_ngram is {n!r}: {what}"
    return None


# --- the pass over every input row ----------------------------------------------------------------
@dataclass
class SourcePass:
    """Results of the pass over sources and output rows."""

    identity: CheckResult
    mask: CheckResult
    leakage: CheckResult


def pick_rows(n: int, sample: int | None, seed: int) -> tuple[list[int], bool]:
    """Row indices to mask-check and whether that is every row."""
    if sample is None:
        sample = n if n <= FULL_CHECK_MAX_ROWS else DEFAULT_SAMPLE
    if sample >= n:
        return list(range(n)), True
    return sorted(random.Random(seed).sample(range(n), sample)), False


def input_chosen(key: tuple[str, int], seed: int, share: float) -> bool:
    """Whether input row ``key`` (source, row) is in a seeded sample of that ``share`` of the
    input rows, decided per row (no count of input rows is known before the pass)."""
    digest = hashlib.blake2b(f"{seed}\0{key[0]}\0{key[1]}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") < share * 2**64


@dataclass
class _OutputIndex:
    """Where each input row went: output rows by id, rejects and queued prompts by position."""

    ids: list[str | None]
    row_of_id: dict[str, int]
    each_rows: dict[str, list[str]]  # --turns each: input id -> its `id#k` output rows
    rejects_at: dict[tuple[str, int], list[dict[str, Any]]]
    prompts_at: _PromptsAt
    prompt_line: dict[tuple[str, Any], int]  # the line number of each prompts_at entry
    reject_line: dict[tuple[str, int], list[int]]  # the line numbers of each rejects_at entry


def _index_output(out: OutputSet, mode: str) -> _OutputIndex:
    ids = out.ids()
    row_of_id = {rid: i for i, rid in enumerate(ids) if rid is not None}
    each_rows: dict[str, list[str]] = {}
    if mode == "each":
        for rid in ids:
            base, sep, k = (rid or "").rpartition("#")
            if sep and ascii_digits(k):
                each_rows.setdefault(base, []).append(rid or "")
    reject_lines, _ = read_jsonl(out.folder / "rejects.jsonl")
    rejects_at: dict[tuple[str, int], list[dict[str, Any]]] = {}
    reject_line: dict[tuple[str, int], list[int]] = {}
    for n, obj in enumerate(reject_lines):
        if isinstance(obj, dict) and "source" in obj and "row" in obj:
            rejects_at.setdefault((str(obj["source"]), obj["row"]), []).append(obj)
            reject_line.setdefault((str(obj["source"]), obj["row"]), []).append(n)
    prompts_at = _PromptsAt(out.folder / "prompts.jsonl")
    return _OutputIndex(
        ids, row_of_id, each_rows, rejects_at, prompts_at, prompts_at.line, reject_line
    )


class _PromptsAt:
    """prompts.jsonl's lines by (source, row) of their input row, parsed when asked for: the
    index keeps where each line is, not the line (a set of a million prompt-only rows held
    every prompt as Python objects, ~1.2 GB for 1 GB of prompts, for one lookup each).

    Lines as `read_jsonl` gives them (split as text is, bytes that are no UTF-8 replaced, blank
    lines and lines that do not parse skipped); ``line``: each key's number among the parsed
    lines, a later line of one key taking its place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.line: dict[tuple[str, Any], int] = {}
        self._at: dict[tuple[str, Any], tuple[int, int]] = {}  # key -> (byte offset, length)
        self._fd: int | None = None
        if not path.exists():
            return
        n = offset = 0
        # newline="": split where text mode splits, nothing translated, so the bytes of each
        # line (surrogateescape gives them back) say where it starts
        with path.open("r", encoding="utf-8", errors="surrogateescape", newline="") as f:
            for raw_line in f:
                raw = raw_line.encode("utf-8", "surrogateescape")
                at, offset = offset, offset + len(raw)
                obj = _parsed(raw)
                if obj is _UNPARSED:
                    continue
                if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
                    key = (str(obj["metadata"].get("source")), obj["metadata"].get("row"))
                    self.line[key], self._at[key] = n, (at, len(raw))
                n += 1

    def get(self, key: tuple[str, Any]) -> dict[str, Any] | None:
        where = self._at.get(key)
        if where is None:
            return None
        if self._fd is None:  # one descriptor for every lookup, closed with the index
            self._fd = os.open(self.path, os.O_RDONLY)
            weakref.finalize(self, os.close, self._fd)
        obj = _parsed(os.pread(self._fd, where[1], where[0]))
        return obj if isinstance(obj, dict) else None


_UNPARSED = object()


def _parsed(raw: bytes) -> Any:
    """One line as `read_jsonl` parses it; `_UNPARSED` for a blank line or one that does not
    parse."""
    text = raw.decode("utf-8", "replace")
    if not text.strip():
        return _UNPARSED
    try:
        return json.loads(text)
    except ValueError:
        return _UNPARSED


def source_pass(
    out: OutputSet,
    tmpl: ChatTemplate,
    sample: int | None,
    seed: int,
    placeholders: tuple[str, ...],
) -> SourcePass:
    """Row identity over every row; mask fidelity and leakage over the chosen rows.

    Expected rows use the manifest's placeholder list (what build skipped); leakage judges
    supervised answers against ``placeholders`` (the verify flag, default the same list)."""
    rows = _RowPass.begin(out, tmpl, sample, seed, placeholders)
    selection = source_selection(out)
    # `draftset run`'s answers replace rows whole: each is judged against the row it replaces
    answers = Overlay(selection.spec.overlay) if selection.spec.overlay else None
    if answers is not None:
        selection = mix.Selection(replace(selection.spec, overlay=[]))
    for position, picked in enumerate(_selection_rows(out, selection)):
        item = picked if answers is None else answers.apply(picked)
        rows.check(position, picked, item)
    if answers is not None:
        answers.close()
    return rows.finish(selection)


@dataclass
class _RowPass:
    """`source_pass`'s state: the set's index, the rows chosen, the problems found, and what
    the input rows claimed so far (their output rows, their reject and prompt lines)."""

    out: OutputSet
    tmpl: ChatTemplate
    seed: int
    placeholders: tuple[str, ...]
    build_placeholders: tuple[str, ...]
    timeout: float | None
    mode: str
    idx: _OutputIndex
    chosen_set: set[int]
    full: bool
    share: float  # of the input rows re-derived besides the chosen rows
    recount: RowStepCounts
    sources: list[str | None]
    ident: Problems = field(default_factory=Problems)
    maskp: Problems = field(default_factory=Problems)
    leak: Problems = field(default_factory=Problems)
    used_rejects: set[tuple[str, int]] = field(default_factory=set)
    # output row -> (input row's position, turn k)
    row_owner: dict[int, tuple[int, int]] = field(default_factory=dict)
    context_by_source: dict[str, Counter[str]] = field(default_factory=dict)
    # reason -> first (id, row)
    first_context: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    checked: int = 0
    # prompts.jsonl line of each prompt-only input row, in order
    prompt_order: list[int] = field(default_factory=list)
    # (rejects.jsonl line, id) of each input row
    reject_order: list[tuple[int, str]] = field(default_factory=list)

    @classmethod
    def begin(
        cls,
        out: OutputSet,
        tmpl: ChatTemplate,
        sample: int | None,
        seed: int,
        placeholders: tuple[str, ...],
    ) -> _RowPass:
        opts = out.options
        build_placeholders = tuple(opts.get("placeholders") or rules.DEFAULT_PLACEHOLDERS)
        timeout = opts.get("render_timeout", defaults.RENDER_TIMEOUT)
        mode = str(opts.get("turns", "all"))
        idx = _index_output(out, mode)
        n = len(idx.ids)
        chosen, full = pick_rows(n, sample, seed)
        return cls(
            out=out,
            tmpl=tmpl,
            seed=seed,
            placeholders=placeholders,
            build_placeholders=build_placeholders,
            timeout=timeout,
            mode=mode,
            idx=idx,
            chosen_set=set(chosen),
            full=full,
            share=len(chosen) / max(n, 1),
            recount=RowStepCounts(tmpl, out.manifest, build_placeholders, timeout),
            sources=out.sources(),
        )

    def check(self, position: int, picked: Normalized, item: Normalized) -> None:
        """One input row (``item``: ``picked`` with its answers from `run`, if any) against
        what the set holds of it."""
        if item is not picked:
            served = served_template(self.tmpl, getattr(picked, "tools", None))
            probe = self.recount.probe_of(served)
            _check_answered(self.ident, (self.tmpl, probe), self.out, picked, item)
        key = (item.source, item.row)
        self.reject_order += [(n, str(item.id)) for n in self.idx.reject_line.get(key, ())]
        _check_reject_files(self.ident, item, self.idx.rejects_at.get(key) or [])
        if isinstance(item, Reject | PromptOnly):
            _check_unwritten(self.ident, item, self.idx, self.used_rejects, self.prompt_order)
            return
        turn_rows = self.mode == "each" and not isinstance(item, PreTokenized)
        own = self._own_rows(item, turn_rows)
        lines = self.idx.rejects_at.get(key) or []
        self._check_reject_lines(item, key, own, lines)
        self._claim(position, item, own, turn_rows)
        # the template a server renders this row's request by (a named set: 'tool_use' for
        # a row with tools), worked out here (`served_template`)
        tmpl = (
            served_template(self.tmpl, item.tools) if isinstance(item, Conversation) else self.tmpl
        )
        needs = self._needs(tmpl, item, key, own, lines)
        expected, error = self._rederive(tmpl, item, own, lines, needs)
        self._check_written(tmpl, item, own, lines, expected, error, needs)
        if isinstance(item, Conversation) and needs and self.mode == "each":
            self._check_each_turn(tmpl, item, own, lines, expected)

    def _own_rows(self, item: Conversation | PreTokenized, turn_rows: bool) -> list[str]:
        """The ids of the output rows ``item`` wrote (one per turn under ``--turns each``)."""
        if not turn_rows:
            return [item.id] if item.id in self.idx.row_of_id else []
        own = self.idx.each_rows.get(item.id, [])
        if isinstance(item, Conversation):
            _check_turn_ids(self.ident, item, own)
        return own

    def _check_reject_lines(
        self,
        item: Conversation | PreTokenized,
        key: tuple[str, int],
        own: list[str],
        lines: list[dict[str, Any]],
    ) -> None:
        """The row is written or rejected, and its reject lines are the row step's, naming it."""
        ident, mode = self.ident, self.mode
        if lines:
            self.used_rejects.add(key)
        if not own and not lines:
            ident.add("input row neither written nor rejected (row dropped?)", item.id)
        if own:  # build meets a render bound planning the whole conversation: one line, no row
            for x in lines:
                if x.get("reason") in _WHOLE_ROW:
                    self.maskp.add(
                        f"rejected as {x.get('reason')} beside its conversation's written rows",
                        str(x.get("id")),
                        f"{x.get('id')}: rejected as {x.get('reason')} beside the conversation's"
                        f" written rows {own[:3]}: build rejects the whole conversation for it",
                    )
        for x in lines:  # reading and selection (re-run above) passed this row
            if x.get("reason") not in reasons.ROW_STEP_REASONS:
                ident.add(
                    f"rejected as {x.get('reason')} but it reads and is selected as a row",
                    item.id,
                )
            elif not _names_its_row(x.get("id"), item.id, mode == "each"):
                ident.add(
                    "rejects.jsonl line's id is not its input row's",
                    item.id,
                    f"{item.id}: the {x.get('reason')} line of {item.source} row {item.row}"
                    f" has id {x.get('id')!r}",
                )

    def _claim(
        self, position: int, item: Conversation | PreTokenized, own: list[str], turn_rows: bool
    ) -> None:
        """The output rows ``item`` owns, marked as its (each output row has one owner)."""
        for rid in own:
            r = self.idx.row_of_id[rid]
            self.row_owner[r] = (position, _turn_row(rid) if turn_rows else 0)
            if self.sources[r] != item.source:
                self.ident.add("row's source column differs from its input row's source", rid)

    def _needs(
        self,
        tmpl: ChatTemplate,
        item: Conversation | PreTokenized,
        key: tuple[str, int],
        own: list[str],
        lines: list[dict[str, Any]],
    ) -> bool:
        """Whether the row is re-rendered: it wrote a chosen row, or a rejected row falls in
        the sample's share of input rows (a timeout is checked on its own, not again here).
        ``tmpl``: the template the row is served by, here and below."""
        row_of_id, seed, share = self.idx.row_of_id, self.seed, self.share
        needs = self.full or any(row_of_id[rid] in self.chosen_set for rid in own)
        # a sample of output rows never meets a rejected row: the same share of input rows
        needs = needs or input_chosen(key, seed, share)
        if not own and any(x.get("reason") == reasons.TEMPLATE_TIMEOUT for x in lines):
            needs = False  # a timeout depends on the machine: not worth that work again here
            if isinstance(item, Conversation) and (self.full or input_chosen(key, seed, share)):
                _check_timeout(
                    self.maskp, tmpl, item, self.mode, self.build_placeholders, self.timeout
                )
        return needs

    def _rederive(
        self,
        tmpl: ChatTemplate,
        item: Conversation | PreTokenized,
        own: list[str],
        lines: list[dict[str, Any]],
        needs: bool,
    ) -> tuple[list[tuple[str, Expected]], str | None]:
        """The rows build should have written of ``item`` (re-rendered when `_needs`), and its
        reject lines judged against them."""
        expected: list[tuple[str, Expected]] = []
        error: str | None = None
        if isinstance(item, Conversation) and needs:
            maskp, opts = self.maskp, self.out.options
            expected, context, error = bounded_expected_rows(
                tmpl, item, self.mode, self.build_placeholders, self.timeout
            )
            _count_context((self.context_by_source, self.first_context), item, context)
            if not own:
                check_rejection(maskp, item, lines, expected, error)
                check_reject_messages(maskp, tmpl, item, lines, (expected, context, error))
                check_length_rejects(maskp, tmpl, item, lines, expected, opts)
            check_server_prompt_rejects(maskp, tmpl, item, lines, expected)
        return expected, error

    def _check_written(
        self,
        tmpl: ChatTemplate,
        item: Conversation | PreTokenized,
        own: list[str],
        lines: list[dict[str, Any]],
        expected: list[tuple[str, Expected]],
        error: str | None,
        needs: bool,
    ) -> None:
        """Mask fidelity and leakage of the chosen rows ``item`` wrote; the row step's counts."""
        row_of_id = self.idx.row_of_id
        mine = [rid for rid in own if row_of_id[rid] in self.chosen_set]
        self.checked += len(mine)
        found = check_rows(
            self.out,
            tmpl,
            item,
            mine,
            row_of_id,
            dict(expected),
            error,
            self.placeholders,
            (self.maskp, self.leak),
        )
        if found.context:  # turns the token rule made context, judged on the rows themselves
            _count_context((self.context_by_source, self.first_context), item, found.context)
        if isinstance(item, Conversation):
            complete = len(mine) == len(own)
            self.recount.add(
                item, own, lines, expected if needs else None, error, found, complete, tmpl
            )

    def _check_each_turn(
        self,
        tmpl: ChatTemplate,
        item: Conversation,
        own: list[str],
        lines: list[dict[str, Any]],
        expected: list[tuple[str, Expected]],
    ) -> None:
        """``--turns each``: every expected turn's row written or rejected, and a turn's
        reject lines beside written rows judged."""
        maskp = self.maskp
        for rid, _ in expected:
            if rid not in self.idx.row_of_id and not any(x.get("id") == rid for x in lines):
                maskp.add("expected row missing and not rejected", rid)
        if own and lines:  # a turn's row rejected beside written ones
            check_length_rejects(maskp, tmpl, item, lines, expected, self.out.options)
            check_turn_rejects(maskp, lines, expected)

    def finish(self, selection: mix.Selection) -> SourcePass:
        """The checks over the whole pass: every output row owned, the lines in input order,
        the selection's records and the row step's counts; the three results."""
        ident = self.ident
        _check_every_output_row(ident, self.idx, self.row_owner, self.used_rejects)
        for (a, first), (b, second) in itertools.pairwise(self.reject_order):
            if b < a:
                ident.add(
                    "rejects.jsonl lines are not in input order (build's order is deterministic)",
                    second,
                    f"rejects.jsonl line {b + 1} ({second}) comes before line {a + 1} ({first}),"
                    " which build writes first (the first pair out of order)",
                )
                break
        if self.prompt_order != sorted(self.prompt_order):
            ident.add("prompts.jsonl lines are not in input order (build's order is deterministic)")
        _compare_selection_records(ident, self.out, selection)
        self.recount.compare(self.maskp, self.out, self.full)
        if self.full:
            _compare_context_counts(
                self.maskp, self.out, self.context_by_source, self.first_context
            )
        problems = (ident, self.maskp, self.leak)
        n = len(self.idx.ids)
        return _source_pass_results(problems, n, self.checked, self.full, self.placeholders)


def _selection_rows(out: OutputSet, selection: mix.Selection) -> Iterator[Normalized]:
    """The re-run selection's rows; a `selection.mix` build refuses before any work (shares
    not summing to 1, negative) is a malformed manifest, said as such: it was one line saying
    only `source shares must sum to 1, got 1.3`, as if verify's arguments were wrong."""
    try:
        yield from selection.rows()
    except MixError as exc:
        raise NotADraftsetError(
            f"{out.folder / 'manifest.json'} is malformed: selection.mix: {exc} (not a manifest"
            " draftset wrote; rebuild the set)"
        ) from None


def _source_pass_results(
    problems: tuple[Problems, Problems, Problems],
    n: int,
    checked: int,
    full: bool,
    placeholders: tuple[str, ...],
) -> SourcePass:
    """The three check results of the pass, saying what they covered."""
    ident, maskp, leak = problems
    scope = (
        f"all {plural(checked, 'row')}"
        if full
        else f"a seeded sample of {checked:,} of {plural(n, 'row')}"
    )
    return SourcePass(
        ident.result(
            "row_identity",
            f"{plural(n, 'row')} map{'s' if n == 1 else ''} to their input rows, in order;"
            " every input row is accounted for",
        ),
        maskp.result(
            "mask_fidelity",
            f"{scope}: every supervised run is exactly one assistant generation",
            {"rows_checked": checked, "full": full},
        ),
        leak.result(
            "leakage",
            f"{scope}: no placeholder or prompt-copy answer supervised",
            {"placeholders": list(placeholders)},
        ),
    )


TIMEOUT_SHARE = 0.01
"""A `template_timeout` row whose re-render here finishes within this share of build's
`--render-timeout` is no timeout: no build machine is 100 times slower at the same render."""


def _check_timeout(
    p: Problems,
    tmpl: ChatTemplate,
    conv: Conversation,
    mode: str,
    placeholders: tuple[str, ...],
    timeout: float | None,
) -> None:
    """A conversation rejected as `template_timeout`: whether a render times out depends on
    the machine, so the reason is not re-derived; but its renders are re-run here bounded by
    `TIMEOUT_SHARE` of build's `--render-timeout` (a timed-out row costs that much, no more),
    and one that finishes within it (or a build without the bound, which never times out)
    was no timeout's: a timer that fired early (a unit mix-up, an alarm left armed) drops rows
    a set needs."""
    if not timeout or timeout <= 0:
        p.add(
            "rejected as template_timeout though build set no --render-timeout",
            conv.id,
            f"{conv.id}: rejected as template_timeout, but --render-timeout is 0 (no bound)",
        )
        return
    started = time.perf_counter()
    error = bounded_expected_rows(tmpl, conv, mode, placeholders, timeout * TIMEOUT_SHARE)[2]
    took = time.perf_counter() - started
    if error is not None and error.startswith(
        (reasons.TEMPLATE_TIMEOUT, reasons.TEMPLATE_TOO_LARGE)
    ):
        return  # as slow here (or too large: judged as such elsewhere): not judged
    p.add(
        "rejected as template_timeout but it renders fast",
        conv.id,
        f"{conv.id}: rejected as template_timeout, but its renders take {took:.3f} s here,"
        f" under {TIMEOUT_SHARE:.0%} of --render-timeout {timeout:g} s",
    )


# --- `draftset run`'s answers against the rows they replace ---------------------------------------
def _check_answered(
    ident: Problems,
    template: tuple[ChatTemplate, EmptyThinkProbe],
    out: OutputSet,
    picked: Normalized,
    item: Normalized,
) -> None:
    """A line of `run`'s answer, error or too-long files replaced ``picked`` by ``item``. The
    files are the pipeline's product, not an input: what in them follows from the source row
    is re-derived here — run sends the row at all (`_run_sends`), the answer asks the row's
    own prompt (`_check_answer_prompt`), a prompt said too long to send is (`_check_too_long`).
    """
    tmpl, probe = template
    name = str(picked.id or f"{picked.source}:{picked.row}")
    regenerate = (out.manifest.get("run") or {}).get("regenerate")
    if not _run_sends(out, picked, regenerate, probe):
        ident.add(
            "the answers file has a line for a row run does not send",
            name,
            f"{name}: the answers file has a line for it, a row run does not send"
            f" ({picked.source} row {picked.row}: answered already; regenerate: {regenerate})",
        )
        return
    if isinstance(item, Reject) and item.reason == reasons.TOO_LONG:
        served = served_template(tmpl, getattr(picked, "tools", None))
        _check_too_long(ident, served, out, picked, name)
    elif isinstance(item, Conversation):
        _check_answer_prompt(ident, picked, item, name)


def _run_sends(out: OutputSet, picked: Normalized, regenerate: Any, probe: EmptyThinkProbe) -> bool:
    """Whether `run` asks the target about this selected row: `hygiene.run_sends`, the one
    rule run queues by, asked of the source row with the manifest's options (placeholders,
    template options, ``regenerate``) and verify's own probe, never of run's files."""
    placeholders = tuple(out.options.get("placeholders") or rules.DEFAULT_PLACEHOLDERS)
    kwargs = (out.manifest.get("template") or {}).get("kwargs") or {}
    why, _ = run_sends(picked, placeholders, kwargs, regenerate, probe.thinks)
    return why is not None


def _asked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns of a conversation the model is given, never writes: every one but the
    assistant's, a tool result without the call id and name `generate` re-keys it by."""
    return [
        {k: v for k, v in m.items() if m["role"] != "tool" or k not in ("tool_call_id", "name")}
        for m in messages
        if m["role"] != "assistant"
    ]


def _check_answer_prompt(
    ident: Problems, picked: Normalized, item: Conversation, name: str
) -> None:
    """The answered row holds its source row's prompt: the same system, user and tool turns
    in order (all of them, or the first ones when the answers stopped early: cut at
    max_tokens, or at a tool call with no recorded result) and the same tools. Only the
    assistant turns are the server's."""
    assert isinstance(picked, Conversation | PromptOnly)
    want, got = _asked(picked.messages), _asked(item.messages)
    meta = item.meta.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    last = item.messages[-1] if item.messages else {}
    # answers stop early only at their last answer: one cut at max_tokens, or one calling a
    # tool the row holds no result for (`generation.dialog`); said of any other, it is not
    stopped = last.get("role") == "assistant" and bool(
        meta.get("truncated") or (meta.get("ends_at_tool_call") and last.get("tool_calls"))
    )
    same = got == (want[: len(got)] if stopped else want)
    if same and (item.tools or None) == (picked.tools or None):
        return
    if same:
        what = "its tools differ from the row's"
    else:
        at = next(
            (k for k, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
            min(len(got), len(want)),
        )
        what = (
            f"turn {at} of those the model is given: {_short(got[at] if at < len(got) else None)}"
            f" vs the row's {_short(want[at] if at < len(want) else None)}"
        )
    ident.add(
        "the answers file's line for a row asks another prompt",
        name,
        f"{name}: the answers file's line for it asks another prompt than its source row"
        f" ({picked.source} row {picked.row}): {what}",
    )


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_too_long(
    ident: Problems, tmpl: ChatTemplate, out: OutputSet, picked: Normalized, name: str
) -> None:
    """A row run never sent because "the prompt alone" leaves no room below --max-length:
    its prompt (the turns before its first answer; a padded row's without the pads) rendered
    with the generation prompt, thinking on or off (run chooses per row; the shorter counts),
    holds at least --max-length tokens. A render that fails here is not judged."""
    assert isinstance(picked, Conversation | PromptOnly)
    max_length = int(out.options.get("max_length") or 0)
    msgs = picked.messages
    placeholders = tuple(out.options.get("placeholders") or rules.DEFAULT_PLACEHOLDERS)
    if rules.all_padded_answers(picked, placeholders):
        msgs = [m for m in msgs if m["role"] != "assistant"]
    first = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), len(msgs))
    counts = []
    for thinking in (True, False):
        try:
            text = tmpl.render(
                msgs[:first],
                picked.tools,
                add_generation_prompt=True,
                row_kwargs={"enable_thinking": thinking},
            )
        except Exception:  # a template that refuses the row: not judged here
            return
        counts.append(len(tmpl.tokenizer(text, add_special_tokens=False)["input_ids"]))
    if max_length > 0 and min(counts) < max_length:
        ident.add(
            "rejected as too_long, but its prompt fits --max-length",
            name,
            f"{name}: rejected as too_long, but its prompt is {min(counts):,} tokens"
            f" < --max-length {max_length:,} (run sends it)",
        )


# --- where each input row went --------------------------------------------------------------------
def _check_unwritten(
    ident: Problems,
    item: Reject | PromptOnly,
    idx: _OutputIndex,
    used_rejects: set[tuple[str, int]],
    prompt_order: list[int],
) -> None:
    """A rejected row has its rejects.jsonl line, with the id and message reading or selection
    gave it (re-run here: the same text, e.g. the row or benchmark item a removal matched); a
    prompt-only row its prompts.jsonl line (``prompt_order`` collects where that line is)."""
    key = (item.source, item.row)
    if isinstance(item, Reject):
        lines = idx.rejects_at.get(key) or []
        used_rejects.add(key)
        same = [x for x in lines if x.get("reason") == item.reason]
        name = item.id or f"{item.source}:{item.row}"
        if not same:
            ident.add("rejected input row has no matching rejects.jsonl line", name)
        elif not any(x.get("id") == item.id and x.get("message") == item.message for x in same):
            ident.add(
                "rejects.jsonl line's id or message differs from the re-derived reject",
                name,
                f"{name}: line id {same[0].get('id')!r}, message {same[0].get('message')!r};"
                f" re-derived id {item.id!r}, message {item.message!r}",
            )
        return
    line = idx.prompts_at.get(key)
    if line is not None:
        prompt_order.append(idx.prompt_line[key])
    if line is None or line.get("id") != item.id:
        ident.add("prompt-only row missing from prompts.jsonl", item.id)
    elif line != json.loads(json.dumps(item.to_json(), ensure_ascii=False)):
        ident.add("prompts.jsonl line differs from its input row (what generate asks)", item.id)


def _check_reject_files(ident: Problems, item: Normalized, lines: list[dict[str, Any]]) -> None:
    """Each reject line of the row names the file it came from, as the row was read: ``file``
    for a source of several files, none for a source of one (docs/formats.md)."""
    for x in lines:
        if x.get("file") != item.file:
            name = item.id or f"{item.source}:{item.row}"
            ident.add(
                "rejects.jsonl line's file is not its input row's",
                name,
                f"{name}: the {x.get('reason')} line of {item.source} row {item.row} names"
                f" file {x.get('file')!r}; the row is in {item.file!r}",
            )


def _check_every_output_row(
    ident: Problems,
    idx: _OutputIndex,
    row_owner: dict[int, int],
    used_rejects: set[tuple[str, int]],
) -> None:
    """Every output row and reject line belongs to an input row, and rows keep input order:
    input rows in order, and one conversation's turn rows (``--turns each``) in turn order."""
    n = len(idx.ids)
    for r in range(n):
        if r not in row_owner:
            ident.add("output row id not found among the input rows", idx.ids[r] or f"#{r}")
    owned = [r for r in range(n) if r in row_owner]
    for a, b in itertools.pairwise(owned):
        if row_owner[b] < row_owner[a]:
            first, second = idx.ids[a] or f"#{a}", idx.ids[b] or f"#{b}"
            ident.add(
                "rows are not in input order (build's order is deterministic)",
                first,
                f"row {a} ({first}) comes before row {b} ({second}), which build writes first"
                " (the first pair out of order)",
            )
            break
    for key in idx.rejects_at:
        if key not in used_rejects:
            ident.add("rejects.jsonl line for a row that is not an input row", f"{key[0]}:{key[1]}")


def _check_turn_ids(ident: Problems, item: Conversation, own: list[str]) -> None:
    """`--turns each`: a row ``id#k`` is assistant turn k of its conversation, k written as
    build writes it (`mask.render`): a row of no turn fails on every run, sampled too."""
    answers = sum(1 for m in item.messages if m.get("role") == "assistant")
    for rid in own:
        k = rid.rpartition("#")[2]
        if str(int(k)) != k or int(k) >= answers:
            ident.add(
                "--turns each row id names no assistant turn of its input row",
                rid,
                f"{rid}: {item.id} has {answers} assistant turns"
                f" (rows {item.id}#0 .. {item.id}#{answers - 1})",
            )


def _turn_row(rid: str) -> int:
    """k of a ``--turns each`` row id ``base#k``: its conversation's rows are in k order."""
    return int(rid.rpartition("#")[2])


_UNPLANNED = frozenset(
    {reasons.TEMPLATE_TIMEOUT, reasons.TEMPLATE_TOO_LARGE, reasons.INTERNAL_ERROR}
)
"""A conversation rejected for one of these never got through build's row step: no counts."""
_WHOLE_ROW = frozenset({reasons.TEMPLATE_TIMEOUT, reasons.TEMPLATE_TOO_LARGE})
"""Render bounds build meets planning a conversation (`mask.step`): it rejects the whole
conversation, so a line of these beside rows written for it is no line of build's."""


def _names_its_row(line_id: Any, row_id: str, each: bool) -> bool:
    """A row-step reject line's id is its input row's (with `--turns each`, or a turn's,
    ``id#k``): `show --id` finds a rejected row by it."""
    if line_id == row_id:
        return True
    base, sep, k = str(line_id).rpartition("#")
    return each and bool(sep) and base == row_id and k.isdigit()


# --- the manifest's records -----------------------------------------------------------------------
def _compare_selection_records(p: Problems, out: OutputSet, selection: mix.Selection) -> None:
    """What reading and selection recorded equals what their re-run here found: per source
    the rows available, sampled out and read and the fields left unread; the `mixture` record
    (dedup and decontamination steps: checked, removed, pairs, top items; the mix table)."""
    per_source = (out.manifest.get("counts") or {}).get("per_source") or {}
    for name, c in per_source.items():
        if name not in selection.counts.sources:
            continue  # a source the manifest's inputs do not name fails accounting
        got = selection.counts[name]
        pairs: list[tuple[str, Any, Any]] = [
            (key, c[key], getattr(got, key))
            for key in ("available", "sampled_out", "read")
            if key in c
        ]
        if "unread_fields" in c:
            want = {k: v for k, v in (c["unread_fields"] or {}).items() if v}
            pairs.append(("unread_fields", want, {k: v for k, v in got.unread_fields.items() if v}))
        for key, want, have in pairs:
            if want != have:
                p.add(
                    "reading and selection counts differ from the manifest",
                    None,
                    f"{name}: {key}: manifest {want} != re-derived {have}",
                )
    sel = out.manifest.get("selection") or {}
    for key in ("max_samples", "seed"):  # re-run with the options' (`source_selection`)
        if "selection" in out.manifest and key not in sel:
            p.add(  # build writes both copies beside every selection record
                "the manifest's selection lacks a record build writes",
                None,
                f"selection.{key}: missing (build records it; options.{key}"
                f" {getattr(selection.spec, key)!r})",
            )
        elif key in sel and sel[key] != getattr(selection.spec, key):
            p.add(
                "the manifest's selection differs from its options",
                None,
                f"selection.{key}: manifest {sel[key]!r} != options.{key}"
                f" {getattr(selection.spec, key)!r}, which the selection re-ran with",
            )
    recorded = out.manifest.get("mixture")
    if recorded is None:
        if "selection" in out.manifest:  # build writes both (a manifest without either: older)
            p.add(
                "the manifest lacks the mixture record build writes beside its selection",
                None,
                "mixture: missing (the re-run selection reports"
                f" {', '.join(sorted(selection.report)) or 'its steps'}: what the report shows of"
                " dedup, decontamination and the mix)",
            )
        return
    redone = json.loads(json.dumps(selection.report))
    for where, want, have in _differences("mixture", recorded, redone):
        p.add(
            "the manifest's mixture differs from the re-run selection",
            None,
            f"{where}: manifest {want!r} != re-derived {have!r}",
        )


def _differences(where: str, a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(path, a's value, b's value) wherever two JSON values differ, innermost first found."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in _differences(f"{where}.{k}", a.get(k), b.get(k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(f"{where}[{i}]", x, y)
        ]
    return [] if a == b else [(where, a, b)]


class RowStepCounts:
    """The row step's per-source counts (`counts.per_source`: the build summary and `report`
    show them), re-derived in verify's pass from its own renders and the rows it checked.

    `trailing_turns_trimmed` and `placeholder_rows` follow from the input rows and their
    reject lines, so they are compared on every run; the others need every row re-derived
    (a full check); a sample bounds them: at least what the conversations it re-derived
    count, at most that plus one per assistant turn of the others (no conversation counts
    more than its answers, `unseen`). A count a conversation leaves out of reach is not compared
    for its source: `supervised_turns` and `empty_think_rows` past a truncated row's cut (build
    made its turns context from tokens the row no longer holds) or of a row that failed the
    mask check (its runs are not build's; the row is already named), `reasoning_not_rendered` of
    a whole-row render that failed part way (build counted the turns before the failure).
    `generation_tags_agree` / `_disagree` (`all` under a template with `{% generation %}`
    tags) compare the tags with verify's own spans (`mask.Expected.tags_agree`).
    """

    ALWAYS = ("trailing_turns_trimmed", "placeholder_rows")
    FULL = (
        "supervised_turns",
        "empty_think_rows",
        "reasoning_not_rendered",
        "server_ids_used",
        "server_ids_mismatch",
        "generation_tags_agree",
        "generation_tags_disagree",
    )

    def __init__(
        self,
        tmpl: ChatTemplate,
        manifest: dict[str, Any],
        placeholders: tuple[str, ...],
        timeout: float | None,
    ) -> None:
        self.tmpl = tmpl
        self.each = str((manifest.get("options") or {}).get("turns", "all")) == "each"
        self.placeholders = placeholders
        self.template_kwargs = dict((manifest.get("template") or {}).get("kwargs") or {})
        self.probe = EmptyThinkProbe(
            tmpl.template_text,
            tmpl.base_kwargs,
            serving_engine=tmpl.serving_engine,
            timeout=timeout,
        )
        self.probes: dict[str, EmptyThinkProbe] = {}  # other templates' (`_probe`)
        self.timeout = timeout
        self.counts: dict[str, Counter[str]] = {}
        self.out_of_reach: dict[str, set[str]] = {}
        self.unseen: dict[str, Counter[str]] = {}  # most a source's uncounted rows may add
        self.first: dict[str, dict[str, tuple[str, int]]] = {}  # key -> first (id, row) counted

    def add(
        self,
        conv: Conversation,
        own: list[str],
        lines: list[dict[str, Any]],
        expected: list[tuple[str, Expected]] | None,
        error: str | None,
        found: RowVerdict,
        complete: bool = True,
        tmpl: ChatTemplate | None = None,
    ) -> None:
        """Count one conversation: ``own`` its written rows, ``lines`` its reject lines,
        ``expected`` its re-derived rows (None: not re-derived), ``found`` its checked rows
        (``complete``: all of ``own``; a sample may leave some unchecked); ``tmpl``: the
        template its request is served by (`served_template`), when not the set's."""
        c = self.counts.setdefault(conv.source, Counter())
        before = dict(c)
        try:
            self._add(c, conv, own, lines, expected, error, found, complete, tmpl or self.tmpl)
        finally:  # the first input row each count met: named when the count differs
            first = self.first.setdefault(conv.source, {})
            for key, n in c.items():
                if n > before.get(key, 0):
                    first.setdefault(key, (conv.id, conv.row))

    def _add(
        self,
        c: Counter[str],
        conv: Conversation,
        own: list[str],
        lines: list[dict[str, Any]],
        expected: list[tuple[str, Expected]] | None,
        error: str | None,
        found: RowVerdict,
        complete: bool,
        tmpl: ChatTemplate,
    ) -> None:
        given = {x.get("reason") for x in lines}
        answers = [i for i, m in enumerate(conv.messages) if m["role"] == "assistant"]
        unseen = self.unseen.setdefault(conv.source, Counter())
        if expected is None:
            unseen.update(dict.fromkeys(self.FULL, len(answers)))
        elif not complete:  # the counts its unchecked rows' runs decide
            unseen.update(dict.fromkeys(("supervised_turns", "empty_think_rows"), len(answers)))
        if answers and (own or not given & _UNPLANNED):
            c["trailing_turns_trimmed"] += len(conv.messages) - answers[-1] - 1
        placeholder_only = all_placeholder_answers(conv, self.placeholders)
        if placeholder_only and not own and reasons.NO_SUPERVISED_TURN in given:
            c["placeholder_rows"] += 1
        if expected is None:
            return
        skip = self.out_of_reach.setdefault(conv.source, set())
        if found.cut_generations or found.mask:  # a failed row's runs are not build's: its
            skip.update(("supervised_turns", "empty_think_rows"))  # failure is reported once
        if found.mask:  # nor are its spans the ones build's tags were compared with
            skip.update(("generation_tags_agree", "generation_tags_disagree"))
        if error is not None and not self.each:
            skip.add("reasoning_not_rendered")
        c["supervised_turns"] += len(found.supervised)
        server = server_completion_ids(conv)
        for _, exp in expected:
            if exp.tags_agree is not None:
                c["generation_tags_agree" if exp.tags_agree else "generation_tags_disagree"] += 1
            for _, gen, j in exp.gens:
                c["reasoning_not_rendered"] += int(
                    rules.reasoning_not_rendered(conv.messages[j], gen)
                )
                if (ids := server.get(j)) is not None:
                    kept = kept_server_ids(tmpl, ids, gen) is not None
                    c["server_ids_used" if kept else "server_ids_mismatch"] += 1
        if own and not placeholder_only and lacks_reasoning(conv, self.template_kwargs):
            wrapper = self.probe_of(tmpl).wrapper(row_kwargs_key(conv))
            if wrapper and any(gen.startswith(wrapper) for gen, _ in found.supervised):
                c["empty_think_rows"] += 1

    def probe_of(self, tmpl: ChatTemplate) -> EmptyThinkProbe:
        """The empty-think probe of the template a row is served by (a named set's two)."""
        if tmpl is self.tmpl:
            return self.probe
        probe = self.probes.get(tmpl.template_text)
        if probe is None:
            probe = self.probes[tmpl.template_text] = EmptyThinkProbe(
                tmpl.template_text,
                tmpl.base_kwargs,
                serving_engine=tmpl.serving_engine,
                timeout=self.timeout,
            )
        return probe

    def compare(self, p: Problems, out: OutputSet, full: bool) -> None:
        """Each count against the manifest's, per source (when every row was re-derived, the
        ones that need that too; on a sample, those within their bounds)."""
        keys = self.ALWAYS + self.FULL
        per_source = (out.manifest.get("counts") or {}).get("per_source") or {}
        for name, c in per_source.items():
            got = self.counts.get(name, Counter())
            unseen = self.unseen.get(name, Counter()) if not full else Counter()
            for key in keys:
                if key not in c or key in self.out_of_reach.get(name, ()):
                    continue
                if key in self.FULL and unseen[key]:
                    if not got[key] <= c[key] <= got[key] + unseen[key]:
                        p.add(
                            "the row step's counts differ from the manifest",
                            None,
                            f"{name}: {key}: manifest {c[key]} is outside"
                            f" {got[key]}..{got[key] + unseen[key]} (re-derived {got[key]} in"
                            " the rows a sampled verify re-derived; the others have at most"
                            f" {unseen[key]} answers){self.first_row(name, key)}",
                        )
                    continue
                if c[key] != got[key]:
                    p.add(  # examples are row ids: the message names the source
                        "the row step's counts differ from the manifest",
                        None,
                        f"{name}: {key}: manifest {c[key]} != re-derived {got[key]}"
                        + self.first_row(name, key),
                    )

    def first_row(self, source: str, key: str) -> str:
        """Where a differing count starts to be looked for: the first input row verify counted
        in it (the manifest holds the sums only, so no row of build's is known)."""
        hit = self.first.get(source, {}).get(key)
        if hit is None:
            return "; verify counts it in no row"
        return f"; the first row verify counts: {hit[0]!r} ({source} row {hit[1]})"


def _count_context(
    into: tuple[dict[str, Counter[str]], dict[str, dict[str, tuple[str, int]]]],
    item: Conversation | PreTokenized,
    context: Counter[str],
) -> None:
    """Add one input row's context-only turns to its source's counts, and note it as the
    first row of each reason it is the first to count."""
    counts, first = into
    counts.setdefault(item.source, Counter()).update(context)
    mine = first.setdefault(item.source, {})
    for reason, n in context.items():
        if n:
            mine.setdefault(reason, (item.id, item.row))


def _compare_context_counts(
    p: Problems,
    out: OutputSet,
    got: dict[str, Counter[str]],
    first: dict[str, dict[str, tuple[str, int]]],
) -> None:
    counts = (out.manifest.get("counts") or {}).get("per_source") or {}
    for name, c in counts.items():
        want = {k: v for k, v in (c.get("context_turns_by_reason") or {}).items() if v}
        have = {k: v for k, v in (got.get(name) or Counter()).items() if v}
        if want != have:
            # the first reason that differs, and the first row verify counts under it
            reason = min(k for k in set(want) | set(have) if want.get(k) != have.get(k))
            hit = (first.get(name) or {}).get(reason)
            where = (
                f"; the first row verify counts a {reason} turn in: {hit[0]!r} ({name} row"
                f" {hit[1]})"
                if hit is not None
                else f"; verify counts no {reason} turn"
            )
            p.add(
                "context-only turn counts differ from the manifest",
                name,
                f"{name}: re-derived {have} != manifest {want}{where}",
            )
