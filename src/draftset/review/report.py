"""`draftset report DIR [-o report.html]`: one self-contained HTML page about a built set.

No script, no network: plots are hand-written inline SVG, styles inline, and a Content Security
Policy forbids scripts and remote loads, so even a hostile row cannot run code. Every piece of
dataset text goes through `html.escape` (a row holding `<script>` renders as text).
"""

from __future__ import annotations

import html
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from draftset.checks.fast import ADVISORY_CHECKS
from draftset.checks.verify import fast_checks, read_record
from draftset.core import defaults, reasons
from draftset.core.counters import SUMMARY_COLUMNS, manifest_sampling_notes, summary_row
from draftset.core.errors import UsageError
from draftset.core.files import write_failure, write_output_file
from draftset.core.terminal import visible, visible_parts
from draftset.output.folder import REPORT_GENERATOR_TAG, REPORT_PAGE
from draftset.output.readback import (
    CheckResult,
    OutputSet,
    RowStats,
    open_output,
    row_stats,
    supervised_runs,
)
from draftset.review.show import load_decoder

COVERAGE_MARKS = (1024, 4096, 8192, 16384, 32000, 65536)
EXAMPLE_ROWS = 4
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;
color:#1d1d1f;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}.pass{color:#127a12}.fail{color:#b00020;font-weight:bold}
.skip{color:#8a6d00}.warn{color:#b36b00;font-weight:bold}pre.row{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:10px;
border:1px solid #ddd;font:12.5px/1.4 ui-monospace,monospace}mark{background:#9be39b;color:#000}
.muted{color:#666}svg{background:#fff;border:1px solid #eee;margin:4px 0}
.ctl{color:#b00020;font-weight:bold}
"""


def _e(value: Any) -> str:
    """HTML-escaped, with control and bidi characters as visible escapes (`\\x1b`, `\\u202e`):
    a bidi override would reorder the page's text, and ESC sequences reach a terminal that
    prints the file."""
    return html.escape(visible(str(value)), quote=True)


def _e_row(text: str) -> str:
    """Dataset text of an example row: like `_e`, escapes highlighted (class ctl)."""
    return "".join(
        f'<span class="ctl">{html.escape(part)}</span>' if escaped else html.escape(part)
        for part, escaped in visible_parts(text)
    )


def histogram_svg(
    values: np.ndarray, title: str, bins: int = 30, width: int = 520, height: int = 200
) -> str:
    """A bar histogram as inline SVG (axis labels escaped)."""
    pad_l, pad_b, pad_t = 48, 28, 22
    if values.size == 0:
        return (
            f'<svg width="{width}" height="{height}" role="img"><text x="10" '
            f'y="20">{_e(title)}: no rows</text></svg>'
        )
    lo, hi = float(values.min()), float(values.max())
    if hi == lo:
        hi = lo + 1
    counts, edges = np.histogram(values, bins=bins, range=(lo, hi))
    top = max(int(counts.max()), 1)
    w = (width - pad_l - 8) / bins
    h = height - pad_b - pad_t
    bars = []
    for i, c in enumerate(counts):
        bh = h * c / top
        x = pad_l + i * w
        y = pad_t + h - bh
        tip = f"{edges[i]:.0f}–{edges[i + 1]:.0f}: {int(c)} rows"
        bars.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w - 1, 1):.1f}" height="{bh:.1f}" '
            f'fill="#4a7fd0"><title>{_e(tip)}</title></rect>'
        )
    axis = (
        f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{width - 8}" y2="{pad_t + h}" stroke="#999"/>'
        f'<text x="{pad_l}" y="{height - 8}" font-size="11">{_e(f"{lo:.0f}")}</text>'
        f'<text x="{width - 8}" y="{height - 8}" font-size="11" text-anchor="end">'
        f"{_e(f'{hi:.0f}')}</text>"
        f'<text x="{pad_l - 4}" y="{pad_t + 4}" font-size="11" text-anchor="end">{top}</text>'
        f'<text x="{pad_l - 4}" y="{pad_t + h}" font-size="11" text-anchor="end">0</text>'
        f'<text x="{pad_l}" y="14" font-size="12" font-weight="bold">{_e(title)}</text>'
    )
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="{_e(title)}">'
        f"{axis}{''.join(bars)}</svg>"
    )


def bars_svg(items: list[tuple[str, int]], title: str, width: int = 520) -> str:
    """Horizontal bars with labels (labels are dataset-controlled source names: escaped)."""
    row_h = 20
    height = 26 + row_h * max(len(items), 1)
    top = max([v for _, v in items] + [1])
    label_w = 200
    parts = [f'<text x="4" y="14" font-size="12" font-weight="bold">{_e(title)}</text>']
    for i, (label, value) in enumerate(items):
        y = 22 + i * row_h
        bw = (width - label_w - 70) * value / top
        short = label if len(label) <= 28 else label[:27] + "…"
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 13}" font-size="11" text-anchor="end">'
            f"{_e(short)}<title>{_e(label)}</title></text>"
        )
        parts.append(
            f'<rect x="{label_w}" y="{y + 2}" width="{bw:.1f}" height="{row_h - 6}" '
            'fill="#4a7fd0"/>'
        )
        parts.append(
            f'<text x="{label_w + bw + 4:.1f}" y="{y + 13}" font-size="11">{value:,}</text>'
        )
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="{_e(title)}">'
        f"{''.join(parts)}</svg>"
    )


def coverage_curve(freq: np.ndarray) -> np.ndarray:
    """cum[k-1] = fraction of supervised tokens covered by the k most frequent token ids."""
    nz = np.sort(freq[freq > 0])[::-1]
    if nz.size == 0:
        return np.zeros(0)
    return np.cumsum(nz) / nz.sum()


def coverage_svg(cum: np.ndarray, width: int = 520, height: int = 220) -> str:
    """Coverage against draft vocabulary size, log-scaled x axis."""
    pad_l, pad_b, pad_t = 48, 30, 22
    title = "supervised-token coverage by the top-N token ids"
    if cum.size == 0:
        return (
            f'<svg width="{width}" height="{height}"><text x="10" y="20">{_e(title)}:'
            f" no supervised tokens</text></svg>"
        )
    n = cum.size
    xmax = np.log10(max(n, 10))
    w, h = width - pad_l - 12, height - pad_b - pad_t
    ks = np.unique(np.clip(np.logspace(0, xmax, 200).astype(int), 1, n))
    pts = " ".join(
        f"{pad_l + w * np.log10(k) / xmax:.1f},{pad_t + h * (1 - cum[k - 1]):.1f}" for k in ks
    )
    ticks = []
    for k in (1, 10, 100, 1000, 10000, 100000):
        if k <= max(n, 10):
            x = pad_l + w * np.log10(k) / xmax
            ticks.append(
                f'<text x="{x:.1f}" y="{height - 10}" font-size="11" text-anchor="middle">'
                f"{k:,}</text>"
            )
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="{_e(title)}">'
        f'<text x="{pad_l}" y="14" font-size="12" font-weight="bold">{_e(title)}</text>'
        f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" stroke="#999"/>'
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + h}" stroke="#999"/>'
        f'<text x="{pad_l - 4}" y="{pad_t + 4}" font-size="11" text-anchor="end">100%</text>'
        f'<text x="{pad_l - 4}" y="{pad_t + h}" font-size="11" text-anchor="end">0%</text>'
        f'{"".join(ticks)}<polyline fill="none" stroke="#d0542a" stroke-width="2" '
        f'points="{pts}"/></svg>'
    )


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _mixture_section(mixture: dict[str, Any]) -> str:
    """Dedup (per pair of sources), decontamination (per benchmark), mix requested vs achieved."""
    html = ["<h2>Mixture</h2>"]
    for d in mixture.get("dedup") or []:
        kind = "near duplicates" if "threshold" in d else "exact duplicates"
        pairs = [
            [p["kept_source"], p["removed_source"], f"{p['count']:,}"] for p in d.get("pairs") or []
        ]
        html.append(f"<h3>{_e(kind)}: {int(d.get('removed_total') or 0):,} removed</h3>")
        if pairs:
            html.append(_table(["kept in source", "removed from source", "rows"], pairs))
    dc = mixture.get("decontamination")
    if dc:
        html.append(
            f"<h3>Decontamination ({_e(dc.get('n'))}-gram, scope {_e(dc.get('scope'))}):"
            f" {int(dc.get('removed_total') or 0):,} removed</h3>"
        )
        by_bench = sorted((dc.get("removed_by_benchmark") or {}).items())
        if by_bench:
            html.append(_table(["benchmark", "rows removed"], [[k, f"{v:,}"] for k, v in by_bench]))
    mix = mixture.get("mix")
    if mix:
        rows = [
            [
                line.get("kind"),
                line.get("key"),
                "" if line.get("requested") is None else f"{line['requested']:.1f}",
                "" if line.get("target") is None else line["target"],
                line.get("achieved"),
                line.get("available"),
            ]
            for line in mix.get("lines") or []
            if line.get("kind") in ("source", "mode")
        ]
        html.append(f"<h3>Mix: {int(mix.get('total') or 0):,} rows</h3>")
        html.append(_table(["kind", "key", "requested", "target", "achieved", "available"], rows))
    return "".join(html)


def _hygiene_html(total: dict[str, Any]) -> str:
    """Rows a training run would learn the wrong thing from, and how to fix them."""
    out = []
    if total.get("placeholder_rows"):
        out.append(
            f"<p>{int(total['placeholder_rows']):,} rows whose every answer is a placeholder"
            " (&quot;OK.&quot;, empty) were rejected <code>no_supervised_turn</code>:"
            " <code>draftset run</code> has the target model answer them.</p>"
        )
    if total.get("empty_think_rows"):
        out.append(
            f"<p><b>{int(total['empty_think_rows']):,} rows are trained as empty think"
            " blocks</b>: their answers have no reasoning and this template thinks, so the"
            " drafter learns that the model skips thinking. Regenerate them with"
            " <code>regenerate: missing_reasoning</code> in the recipe's"
            " <code>generate:</code> section (<code>draftset run</code>).</p>"
        )
    return "".join(out)


def _run_section(run: dict[str, Any]) -> str:
    """`draftset run`: what the target model answered and what became of it."""
    queued = run.get("queued") or {}
    errors = run.get("generation_errors") or {}
    rows: list[list[Any]] = [
        ["model", run.get("model")],
        ["regenerate", run.get("regenerate")],
        ["rows sent for an answer", ", ".join(f"{k}={v:,}" for k, v in queued.items()) or "0"],
        ["answered", f"{int(run.get('answered') or 0):,}"],
        ["generation errors (rejects)", ", ".join(f"{k}={v:,}" for k, v in errors.items()) or "0"],
        ["prompts too long to send (never sent)", f"{int(run.get('too_long_prompts') or 0):,}"],
        ["ends_at_tool_call", f"{int(run.get('ends_at_tool_call') or 0):,}"],
        [
            "leaked stop-token text cut from answers",
            f"{int(run.get('special_tokens_stripped') or 0):,}",
        ],
        ["work folder (answers)", run.get("work")],
    ]
    return (
        "<h2>Answers from the target (draftset run)</h2>"
        + _table(["", ""], rows)
        + _timeline_html(run.get("work"))
    )


def _utc(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(seconds)))


def _timeline_html(work: Any) -> str:
    """Every attempt at every stage of the run, killed ones included (``state.json``'s
    ``attempts``, in the work folder the manifest names; nothing when it is gone)."""
    try:
        state = json.loads((Path(str(work)) / "state.json").read_text(encoding="utf-8"))
        attempts = [a for a in state.get("attempts") or [] if isinstance(a, dict)]
    except (OSError, ValueError, TypeError, AttributeError):
        return ""
    if not attempts:
        return ""
    rows = []
    for a in attempts:
        outcome = str(a.get("outcome"))
        if outcome == "killed":
            took, outcome = "", f"killed (found by the next run at {_utc(a.get('noticed'))})"
        elif outcome == "running":
            took, outcome = "", "running (e.g. writing this report)"
        else:
            took = f"{float(a.get('seconds') or 0):.1f}"
        rows.append([a.get("stage"), _utc(a.get("started")), took, outcome])
    return "<h3>Timeline (every attempt, resumed and killed ones too)</h3>" + _table(
        ["stage", "started", "seconds", "outcome"], rows
    )


def _checks_table(checks: list[dict[str, Any]]) -> str:
    """Check results (as in verify.json) as a table: status, count, summary, example ids. A
    failed advisory check (`ADVISORY_CHECKS`) says `advice`, as `verify` says WARN: not a fail."""
    rows = []
    for c in checks:
        status = str(c.get("status"))
        summary = _e(c.get("summary"))
        if c.get("examples"):
            summary += f" (e.g. {_e(', '.join(str(x) for x in c['examples']))})"
        count = f"{int(c.get('count') or 0):,}" if status == "fail" else ""
        label, css = status, status
        if status == "fail" and c.get("name") in ADVISORY_CHECKS:
            label, css = "advice", "warn"
        rows.append(
            f'<tr><td>{_e(c.get("name"))}</td><td class="{_e(css)}">{_e(label)}</td>'
            f'<td>{count}</td><td style="text-align:left">{summary}</td></tr>'
        )
    return (
        "<table><thead><tr><th>check</th><th>status</th><th>count</th><th>summary</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _verification_section(rec: Any, fast: list[Any]) -> str:
    """The last full `verify` (from verify.json: current, stale or absent) and the fast checks
    run now. A failed, stale or missing full verify is said first, in words."""
    html = ["<h2>Verification</h2>"]
    data = rec.record
    if rec.error:
        html.append(
            f'<p class="fail">The last full verify cannot be read ({_e(rec.error)}): only the'
            " fast checks below ran. Run <code>draftset verify DIR</code>.</p>"
        )
    elif data is None:
        html.append(
            '<p class="skip">Only the fast checks ran: no full <code>draftset verify</code>'
            " result is recorded for this set (sources, tokenizer, template, row identity,"
            " mask fidelity, leakage and truncation are not checked here). Run"
            " <code>draftset verify DIR</code>; this report then shows its result.</p>"
        )
    else:
        checks = data.get("checks") or []
        failed, advice = _full_verify_failures(data)
        skipped = [str(c.get("name")) for c in checks if c.get("status") == "skip"]
        when = f"{_e(data.get('time'))} (draftset {_e(data.get('draftset_version'))})"
        if failed:
            verdict = f'<span class="fail">FAILED</span>: {_e(", ".join(failed))}'
        else:  # advice fails nothing (docs/verify.md): the verify passed, as it said
            sample = recorded_sample(data)
            unproven = " (the masks of the other rows are not proven)"
            verdict = (
                '<span class="pass">passed</span>'
                + (f" on {_e(sample)}{unproven}" if sample else "")
                + (f" (advice: {_e(', '.join(advice))})" if advice else "")
            )
            verdict += f" (skipped: {_e(', '.join(skipped))})" if skipped else ""
        if rec.stale:
            html.append(
                f'<p class="fail">STALE: the last full verify ({when}) checked other files'
                f" than the set holds now — changed since: {_e(', '.join(rec.changed))}."
                " Its result below no longer applies; run <code>draftset verify DIR</code>"
                " again.</p>"
            )
        html.append(f"<p>Last full verify, {when}: {verdict}.</p>")
        html.append(_checks_table(checks))
    html.append("<h3>Fast checks (run now by this report)</h3>")
    html.append(_checks_table([c.to_json() for c in fast]))
    return "".join(html)


def _example_html(out: OutputSet, decode: Any, index: int) -> str:
    r = out.row(index)
    ids = [int(i) for i in r["input_ids"]]
    mask = r["loss_mask"]
    parts: list[str] = []
    pos = 0
    for s, e in supervised_runs(mask):
        parts.append(_e_row(decode(ids[pos:s])))
        parts.append(f"<mark>{_e_row(decode(ids[s:e]))}</mark>")
        pos = e
    parts.append(_e_row(decode(ids[pos:])))
    head = (
        f"{r['id']} — source {r['source']}, {len(ids)} tokens, {int((mask == 1).sum())} supervised"
    )
    return f'<h3>{_e(head)}</h3><pre class="row">{"".join(parts)}</pre>'


def build_report(
    folder: Path | str,
    tokenizer: str | None = None,
    block_size: int = defaults.BLOCK_SIZE,
    examples: int = EXAMPLE_ROWS,
    seed: int = 0,
) -> str:
    """The report page as a string."""
    return render_report(folder, tokenizer, block_size, examples, seed)[0]


def verdict_line(rec: Any, fast: list[CheckResult]) -> str:
    """The page's verification section in one line, for the terminal: the fast checks run now
    and the last full verify (passed, FAILED, STALE, unreadable or none recorded). A set that
    fails still gets its page (the report's job); this line says so where it is run."""
    failed = [c.name for c in fast if c.failed and c.name not in ADVISORY_CHECKS]
    advice = [c.name for c in fast if c.failed and c.name in ADVISORY_CHECKS]
    line = f"fast checks FAILED: {', '.join(failed)}" if failed else "fast checks passed"
    if advice:
        line += f" (advice: {', '.join(advice)})"
    data = rec.record
    if rec.error:
        return f"{line}; the last full verify cannot be read ({rec.error})"
    if data is None:
        return f"{line}; no full verify recorded (draftset verify DIR)"
    full, full_advice = _full_verify_failures(data)
    if rec.stale:
        return f"{line}; the last full verify is STALE (the set changed since: draftset verify DIR)"
    if full:
        return f"{line}; the last full verify FAILED: {', '.join(full)}"
    sample = recorded_sample(data)
    line += "; the last full verify passed" + (f" on {sample}" if sample else "")
    return line + (f" (advice: {', '.join(full_advice)})" if full_advice else "")


def recorded_sample(data: dict[str, Any]) -> str | None:
    """``a seeded sample of 2 of 25 rows`` when the recorded verify re-derived the masks of a
    sample of the rows (`--sample N`, or a set of more than 20,000 rows: its `mask_fidelity`
    says ``"full": false``), else None. Such a pass proves those rows only: the report says
    so, never "passed" as of every row (docs/verify.md)."""
    for c in data.get("checks") or []:
        if not isinstance(c, dict) or c.get("name") != "mask_fidelity":
            continue
        details = c.get("details")
        if not isinstance(details, dict) or details.get("full") is not False:
            return None
        summary = str(c.get("summary") or "")
        if summary.startswith("a seeded sample of "):
            return summary.split(":", 1)[0]
        return f"a seeded sample of {details.get('rows_checked')} rows"
    return None


def _full_verify_failures(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The recorded verify's failed checks, and apart its failed advice (`ADVISORY_CHECKS`:
    fails nothing, as `verify` itself said: `"passed": true`)."""
    failed = [str(c.get("name")) for c in data.get("checks") or [] if c.get("status") == "fail"]
    return (
        [n for n in failed if n not in ADVISORY_CHECKS],
        [n for n in failed if n in ADVISORY_CHECKS],
    )


def render_report(
    folder: Path | str,
    tokenizer: str | None,
    block_size: int,
    examples: int = EXAMPLE_ROWS,
    seed: int = 0,
) -> tuple[str, str]:
    """The page and its `verdict_line` (what `write_report` writes and says)."""
    out = open_output(Path(folder))
    stats: RowStats = row_stats(out, block_size)
    m = out.manifest
    counts = (m.get("counts") or {}).get("per_source") or {}
    total = (m.get("counts") or {}).get("total") or {}
    record, fast = read_record(out), fast_checks(out, block_size)
    sec: list[str] = [
        _header_section(out, stats),
        _verification_section(record, fast),
        _composition_section(counts) + _sampling_html(m),
        _rejects_section(total),
    ]
    if m.get("run"):
        sec.append(_run_section(m["run"]))
    mixture = m.get("mixture") or {}
    if mixture:
        sec.append(_mixture_section(mixture))
    sec.append(_lengths_section(out, stats))
    sec.append(_fitness_section(stats, block_size))
    sec.append(_coverage_section(stats))
    sec += _example_sections(out, tokenizer, examples, seed)
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    page = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"{REPORT_GENERATOR_TAG}"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        f"<title>draftset report — {_e(out.folder.name)}</title><style>{CSS}</style></head><body>"
        + "\n".join(sec)
        + "</body></html>\n"
    )
    return page, verdict_line(record, fast)


def _header_section(out: OutputSet, stats: RowStats) -> str:
    """Title and what the set is: folder, version, tokenizer, template, options, sizes."""
    m = out.manifest
    tok = m.get("tokenizer") or {}
    tmpl = m.get("template") or {}
    return "<h1>draftset report</h1>" + _table(
        ["", ""],
        [
            ["folder", out.folder],
            ["draftset version", m.get("draftset_version")],
            ["tokenizer", tok.get("path")],
            ["tokenizer fingerprint", tok.get("fingerprint")],
            ["template sha256", tmpl.get("sha256")],
            # a named set's 'tool_use' template, the rows with tools rendered by it
            *(
                [["'tool_use' template sha256", tool_use.get("sha256")]]
                if isinstance(tool_use := tmpl.get("tool_use"), dict)
                else []
            ),
            ["template kwargs", tmpl.get("kwargs")],
            ["options", ", ".join(f"{k}={v}" for k, v in out.options.items())],
            [
                "rows / tokens / supervised",
                f"{out.num_rows:,} / {int(stats.seq_len.sum()):,}"
                f" / {int(stats.supervised.sum()):,}",
            ],
        ],
    )


def _composition_section(counts: dict[str, Any]) -> str:
    """The accounting table per source and its rows / supervised tokens as bars."""
    src_rows = [[name, *(f"{n:,}" for n in summary_row(c))] for name, c in counts.items()]
    return (
        "<h2>Composition by source</h2>"
        + _table(
            ["source", *(header for header, _ in SUMMARY_COLUMNS)],
            src_rows,
        )
        + bars_svg([(n, int(c.get("rows_out") or 0)) for n, c in counts.items()], "rows by source")
        + bars_svg(
            [(n, int(c.get("supervised_tokens") or 0)) for n, c in counts.items()],
            "supervised tokens by source",
        )
    )


def _sampling_html(manifest: dict[str, Any]) -> str:
    """What sampling cost, as the build's summary said it (`manifest_sampling_notes`): sampled
    rows rejected and not replaced while rows were left out."""
    return "".join(f'<p class="warn">note: {_e(n)}</p>' for n in manifest_sampling_notes(manifest))


def _rejects_section(total: dict[str, Any]) -> str:
    """Rejected rows and context-only turns by reason, prompts queued, hygiene counts."""
    rej: Counter[str] = Counter(total.get("row_rejects_by_reason") or {})
    ctx: Counter[str] = Counter(total.get("context_turns_by_reason") or {})
    return (
        "<h2>Rejects and context-only turns</h2>"
        + (bars_svg(rej.most_common(), "rejected rows by reason") if rej else "<p>No rejects.</p>")
        + (
            bars_svg(ctx.most_common(), "assistant turns kept as context only, by reason")
            if ctx
            else ""
        )
        + _reason_table(rej, ctx)
        + "<p>Prompt-only rows queued for generation:"
        + f" {int(total.get('needs_generation') or 0):,}</p>"
        + _hygiene_html(total)
    )


def _reason_table(rej: Counter[str], ctx: Counter[str]) -> str:
    """Every reason code shown above, with what it means (core/reasons.EXPLANATIONS)."""
    rows = [
        [code, kind, f"{n:,}", reasons.EXPLANATIONS.get(code, "")]
        for kind, counts in (("row rejected", rej), ("turn kept as context", ctx))
        for code, n in counts.most_common()
    ]
    return _table(["reason", "kind", "count", "meaning"], rows) if rows else ""


def _lengths_section(out: OutputSet, stats: RowStats) -> str:
    """Sequence and supervised lengths, and how over-long rows were treated."""
    return (
        "<h2>Lengths</h2>"
        + histogram_svg(stats.seq_len, "sequence length (tokens per row)")
        + histogram_svg(stats.supervised, "supervised tokens per row")
        + "<p>Truncated rows (last answer cut, no end-of-turn token):"
        + f" {int((out.manifest.get('totals') or {}).get('truncated') or 0):,}"
        + f" — truncation mode: {_e(out.options.get('truncation'))}, max "
        f"length {_e(out.options.get('max_length'))}</p>"
    )


def _fitness_section(stats: RowStats, block_size: int) -> str:
    """What a DFlash drafter can train on: anchors, full blocks, supervised pairs."""
    n = max(int(stats.seq_len.size), 1)
    return (
        f"<h2>Drafter fitness (DFlash block {block_size})</h2>"
        + histogram_svg(stats.anchors, f"DFlash anchor positions per row (block {block_size})")
        + _table(
            ["measure", "value"],
            [
                [
                    "rows without a DFlash anchor",
                    f"{int((stats.anchors == 0).sum()):,} ({(stats.anchors == 0).sum() / n:.1%})",
                ],
                ["anchors in total", f"{int(stats.anchors.sum()):,}"],
                [
                    f"positions starting {block_size} supervised tokens",
                    f"{int(stats.full_blocks.sum()):,}",
                ],
                [
                    "rows without two consecutive supervised tokens",
                    f"{int((stats.pairs == 0).sum()):,}",
                ],
            ],
        )
    )


def _coverage_section(stats: RowStats) -> str:
    """Draft vocabulary coverage: where to pick --draft-vocab-size."""
    cum = coverage_curve(stats.token_freq)
    marks = [[f"{k:,}", f"{cum[min(k, cum.size) - 1]:.2%}"] for k in COVERAGE_MARKS if cum.size]
    return (
        "<h2>Draft vocabulary coverage</h2><p>Fraction of supervised "
        "tokens covered by the N most frequent token ids:"
        " pick <code>--draft-vocab-size</code> where the curve flattens.</p>"
        + coverage_svg(cum)
        + _table(["draft vocab size N", "coverage"], marks)
        + f"<p>{cum.size:,} distinct supervised token ids.</p>"
    )


def _example_sections(out: OutputSet, tokenizer: str | None, examples: int, seed: int) -> list[str]:
    """A seeded sample of rows with their supervised tokens highlighted (or why not)."""
    sec = [
        "<h2>Example rows</h2><p class=muted>Supervised tokens (loss_mask "
        "= 1) are <mark>highlighted</mark>.</p>"
    ]
    try:
        decode, _ = load_decoder(out, tokenizer)
    except Exception as exc:
        decode = None
        sec.append(f"<p>Cannot decode rows: {_e(exc)}</p>")
    if decode is not None and out.num_rows:
        rng = np.random.default_rng(seed)
        pick = sorted(
            rng.choice(out.num_rows, size=min(examples, out.num_rows), replace=False).tolist()
        )
        sec += [_example_html(out, decode, i) for i in pick]
    return sec


def default_report_path(folder: Path | str) -> Path:
    """Where `report` writes without ``-o``: ``DIR/report.html`` (the one file it may write
    inside the set: `checks.fast.AFTER_BUILD_FILES`)."""
    return Path(folder) / REPORT_PAGE


def write_report(
    folder: Path | str,
    output: Path | str | None = None,
    tokenizer: str | None = None,
    block_size: int = defaults.BLOCK_SIZE,
    check: Callable[[], None] | None = None,
    on_verdict: Callable[[str], None] | None = None,
) -> Path:
    """Write the report (default `default_report_path`), atomically: a temporary file beside
    it renamed over it. ``check`` runs just before the rename (the caller's check of the path,
    repeated after the rendering); ``on_verdict`` receives the page's `verdict_line` once it
    is written. An unreadable set or unwritable file is a `UsageError` (exit 2), a full disk a
    `RunError` (exit 1). The path
    itself is the caller's to check (`draftset.api.report`)."""
    path = Path(output) if output else default_report_path(folder)
    try:
        page, verdict = render_report(folder, tokenizer, block_size)
    except OSError as exc:
        raise UsageError(str(exc)) from None
    try:
        write_output_file(path, page, check)
    except OSError as exc:
        raise write_failure(str(path), exc) from None
    if on_verdict is not None:
        on_verdict(verdict)
    return path
