"""Verify: prove a built training set is what its manifest says it is (`draftset verify DIR`).

Every check returns a `CheckResult`; a failure names the check, its count and up to 5 example
row ids (the command prints them: `draftset.commands.verify`). The checks and their thresholds
are documented in docs/verify.md. `fast_checks` is the subset that needs neither sources nor
tokenizer; build runs it before reporting success. A full run (not --fast) records its result,
its time and the sha256 of the set's files in DIR/verify.json, which `draftset report` shows
(or marks stale).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftset.checks.fast import (
    check_accounting,
    check_draft_vocab,
    check_drafter_fitness,
    check_file_hashes,
    check_structure,
    check_token_freq,
    failing,
)
from draftset.checks.mask import (
    check_template,
    check_tokenizer,
    check_truncation,
    load_template,
)
from draftset.checks.records import check_selection_values, check_sources, source_pass
from draftset.checks.serving import RenderServer, check_render_server
from draftset.core import defaults, rules
from draftset.core.errors import UsageError
from draftset.core.files import write_json_atomic
from draftset.core.optional_torch import torch_unavailable
from draftset.core.version import package_version
from draftset.mask.template import TokenizerError, resolve_tokenizer_path
from draftset.output.base import safe_name
from draftset.output.readback import (
    VERIFY_RECORD,
    CheckResult,
    OutputSet,
    SetFacts,
    open_output,
)
from draftset.sources.read import sha256_file

DEFAULT_BLOCK_SIZE = defaults.BLOCK_SIZE

__all__ = [
    "VERIFY_RECORD",
    "CheckResult",
    "RecordStatus",
    "fast_checks",
    "read_record",
    "run_verify",
    "write_record",
]
RECORD_FORMAT = "draftset-verify/1"


class VerifyUsageError(UsageError):
    """Unusable arguments (exit code 2)."""


def _fast(
    out: OutputSet,
    block_size: int,
    load_pt: Callable[[Path], dict[int, int]] | None = None,
    facts: SetFacts | None = None,
) -> list[CheckResult]:
    # one pass over the set's tokens for every check (none when the facts came with the call)
    facts = facts if facts is not None else SetFacts.read(out, block_size)
    stats = facts.row_stats(out.vocab_size)
    ids: Sequence[str | None] | None
    if facts.batches:
        ids = facts.id_column()
    else:
        ids = out.ids() if out.readable and "id" in out.column_names else None
    return [
        check_structure(out, facts),
        check_file_hashes(out),
        check_accounting(out, facts),
        check_token_freq(out, stats, load_pt),
        check_draft_vocab(out, stats),
        check_drafter_fitness(out, stats, block_size, ids),
    ]


def fast_checks(
    out_dir: Path | str | OutputSet,
    block_size: int = DEFAULT_BLOCK_SIZE,
    load_pt: Callable[[Path], dict[int, int]] | None = None,
    facts: SetFacts | None = None,
    digests: dict[str, str] | None = None,
) -> list[CheckResult]:
    """Structure, file hashes, accounting, token_freq recount, d2t/t2d, drafter fitness.

    No sources and no tokenizer needed; vectorized, seconds on a big set. Raises
    NotADraftsetError when ``out_dir`` is not a draftset output. ``load_pt``: see
    `check_token_freq`. Never writes the verify record (only a full run does).

    ``facts`` and ``digests`` (a build's: its workers read back each shard they wrote, its
    `SetFacts` and sha256) stand for reading the shards here; the set is then not read again.
    """
    out = out_dir if isinstance(out_dir, OutputSet) else open_output(Path(out_dir))
    out.sha256.update(digests or {})
    return _fast(out, block_size, load_pt, facts)


def run_verify(
    out_dir: Path | str,
    tokenizer: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    block_size: int = DEFAULT_BLOCK_SIZE,
    placeholders: tuple[str, ...] | None = None,
    speculators: bool = True,
    record: bool = True,
    render_server: RenderServer | None = None,
) -> list[CheckResult]:
    """All checks. ``tokenizer`` overrides the manifest's path (a bad one raises TokenizerError);
    ``sample`` mask-checks that many seeded rows (default: all rows of sets up to 20,000).

    ``record``: write the result beside the set (`verify.json`, see `write_record`) so `report`
    can show it; a folder that cannot be written adds a `verify_record` skip saying so.
    ``render_server``: also compare the rows with that engine's renders (`checks.serving`).
    """
    out = open_output(Path(out_dir))
    check_selection_values(out)  # before any work: the re-run uses them
    if tokenizer:  # a file, a folder without tokenizer files: exit 2 before any check, as build
        resolve_tokenizer_path(tokenizer)  # (a FAIL recorded over the set's verify.json before)
    results = _fast(out, block_size)
    if placeholders is None:
        placeholders = tuple(out.options.get("placeholders") or rules.DEFAULT_PLACEHOLDERS)
    try:
        tmpl = load_template(out.manifest, tokenizer)
    except TokenizerError as exc:
        hint = "" if tokenizer else "; pass --tokenizer"
        msg = f"cannot load the tokenizer with the manifest's template ({exc}){hint}"
        results.append(CheckResult("tokenizer", "fail", msg, 1, ["tokenizer"]))
        for name in (
            "template",
            "sources",
            "row_identity",
            "mask_fidelity",
            "leakage",
            "truncation",
            *(["render_server"] if render_server is not None else []),
        ):
            results.append(
                CheckResult(name, "skip", "skipped: no tokenizer (see the tokenizer check)")
            )
        tmpl = None
    if tmpl is not None:
        results += [check_tokenizer(out, tmpl), check_template(out, tmpl)]
        src = check_sources(out)
        results.append(src)
        structure_ok = results[0].status == "pass"
        if src.failed or not structure_ok:
            why = "sources changed (see the sources check)" if src.failed else "structure is broken"
            for name in ("row_identity", "mask_fidelity", "leakage"):
                results.append(CheckResult(name, "skip", f"skipped: {why}"))
        else:
            sp = source_pass(out, tmpl, sample, seed, placeholders)
            results += [sp.identity, sp.mask, sp.leakage]
        if render_server is not None:
            results.append(
                check_render_server(out, tmpl, render_server, sample, seed)
                if not src.failed and structure_ok
                else CheckResult("render_server", "skip", "skipped: sources or structure failed")
            )
        results.append(
            check_truncation(out, tmpl)
            if structure_ok
            else CheckResult("truncation", "skip", "skipped: structure is broken")
        )
    if speculators:
        results.append(check_speculators_load(out))
    if record:
        options = {
            "tokenizer": tokenizer,
            "sample": sample,
            "seed": seed,
            "block_size": block_size,
            "placeholders": list(placeholders),
        }
        if render_server is not None:
            options["render_server"] = render_server.url
        try:
            write_record(out, results, options)
        except OSError as exc:
            msg = f"result not recorded: cannot write {out.folder / VERIFY_RECORD}: {exc}"
            results.append(CheckResult("verify_record", "skip", msg))
    return results


# --- the record of the last full run -------------------------------------------------------------
def set_digests(out: OutputSet) -> dict[str, str]:
    """sha256 of manifest.json and of every file the manifest lists that exists (the digests
    the file_hashes check computed are reused: a big set is hashed once)."""
    digests = {"manifest.json": sha256_file(out.folder / "manifest.json")}
    for name in sorted(out.manifest.get("files") or {}):
        path = out.folder / name
        if name in out.sha256:
            digests[name] = out.sha256[name]
        elif safe_name(name) and path.is_file():
            digests[name] = out.sha256[name] = sha256_file(path)
    return digests


def write_record(
    out: OutputSet, results: list[CheckResult], options: dict[str, Any] | None = None
) -> Path:
    """Write `verify.json` beside the set: when, which draftset, the options, every check and
    the sha256 of the set's files as verified. Atomic (a reader never sees half a file); not
    one of the set's files, so it never trips verify's own checks."""
    path = out.folder / VERIFY_RECORD
    data = {
        "format": RECORD_FORMAT,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "draftset_version": package_version(),
        "passed": not failing(results),
        "options": options or {},
        "checks": [r.to_json() for r in results],
        "files": set_digests(out),
    }
    # a temporary name per process: two verify runs of one set never write one file
    write_json_atomic(path, data, tmp=out.folder / f".{VERIFY_RECORD}.tmp-{os.getpid()}")
    return path


@dataclass
class RecordStatus:
    """What `report` says about the last full verify: absent, unreadable, stale or current."""

    record: dict[str, Any] | None
    error: str | None = None  # the record exists but cannot be used
    changed: list[str] = field(default_factory=list)  # files whose sha256 differs since then

    @property
    def stale(self) -> bool:
        return bool(self.changed)


def read_record(out: OutputSet) -> RecordStatus:
    """The last full verify of this set and whether the set's files still have the hashes it
    verified (call after the fast checks on the same ``out``, to reuse their digests)."""
    path = out.folder / VERIFY_RECORD
    if not path.is_file():
        return RecordStatus(None)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        return RecordStatus(None, f"{VERIFY_RECORD} unreadable: {exc}")
    if (
        not isinstance(data, dict)
        or data.get("format") != RECORD_FORMAT
        or not isinstance(data.get("files"), dict)
        or not isinstance(data.get("checks"), list)
    ):
        return RecordStatus(None, f"{VERIFY_RECORD} is not a draftset verify record")
    now = set_digests(out)
    then: dict[str, Any] = data["files"]
    changed = sorted(n for n in set(now) | set(then) if now.get(n) != then.get(n))
    return RecordStatus(data, None, changed)


# --- 9. loadable by speculators ------------------------------------------------------------------
def check_speculators_load(out: OutputSet) -> CheckResult:
    """Load the set with speculators' training data loader when installed; never silently skip."""
    if not out.layout.speculators_loadable:
        return CheckResult(
            "speculators_load",
            "skip",
            f"skipped: speculators reads the Arrow layout, this set is {out.output_format}"
            " (read it with datasets.load_dataset; see docs/output.md)",
        )
    if importlib.util.find_spec("speculators") is None:
        return CheckResult(
            "speculators_load",
            "skip",
            "skipped: speculators not installed (pip install speculators to check loading)",
        )
    why = torch_unavailable()  # speculators imports it at once: no cost of its own
    if why is not None:  # speculators cannot run here, whatever the set
        return CheckResult("speculators_load", "skip", f"skipped: speculators needs torch ({why})")
    n = out.num_rows
    if n == 0:  # a set of prompts only: speculators' loader refuses an empty train split
        return CheckResult("speculators_load", "skip", "skipped: the set has no rows")
    how = "speculators.train.data.ArrowDataset"
    try:
        # lazy: an optional extra that needs hs_connectors, openai and torch (seconds to import):
        # only this check loads it, when installed
        from speculators.train.data import ArrowDataset

        ds: Any = ArrowDataset(
            max_len=int(out.options.get("max_length") or defaults.MAX_LENGTH),
            datapath=str(out.folder),
        )
        data = ds.data
        lengths = list(ds.approx_lengths)
        count = len(ds)
    except ImportError as exc:
        # its module imports serving clients; load exactly as ArrowDataset.__init__ does
        how = f"datasets.load_from_disk as ArrowDataset does (ArrowDataset import failed: {exc})"
        try:
            # lazy: datasets is optional; only when speculators is installed
            from datasets import load_from_disk

            data = load_from_disk(str(out.folder))
            lengths = list(data.with_format(None)["seq_len"])
            count = len(data)
        except Exception as exc2:
            return CheckResult(
                "speculators_load", "fail", f"{how}: {type(exc2).__name__}: {exc2}", 1
            )
    except Exception as exc:
        return CheckResult(
            "speculators_load", "fail", f"{how} failed: {type(exc).__name__}: {exc}", 1
        )
    problems: list[str] = []
    if count != n:
        problems.append(f"loaded {count} rows, the set has {n}")
    if out.readable and lengths != out.column("seq_len"):
        problems.append("seq_len read by the loader differs from the data")
    if n:
        try:
            first = data[0]
            ids = first["input_ids"]
            if not hasattr(ids, "dtype") or len(ids) != first["seq_len"]:
                problems.append(
                    "rows are not returned as tensors of seq_len tokens (state.json format)"
                )
        except Exception as exc:
            problems.append(f"reading row 0 failed: {type(exc).__name__}: {exc}")
    if problems:
        return CheckResult(
            "speculators_load", "fail", f"{how}: " + "; ".join(problems), len(problems)
        )
    return CheckResult("speculators_load", "pass", f"{how} reads {count:,} rows back")
