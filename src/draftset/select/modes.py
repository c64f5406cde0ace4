"""Mode balance: each row's thinking mode, and a seeded selection meeting per-mode and
per-source targets.

A drafter trained only on thinking answers collapses when served with thinking off (and the
reverse), so a mixture records each row's mode and can ask for a share of each.

Each row's mode is `draftset.core.modes.row_mode` (the rules are there).

`select_mix` is the selection: given each candidate row's source and mode (arrays) and the
targets, it returns a boolean mask whose per-mode and per-source counts equal integer targets
that are each within one row of the requested share x total (largest-remainder rounding), or
raises `MixError` naming the target that cannot be met (``on_infeasible="shrink"`` instead
takes the largest total that can be met, and says so in the report).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from draftset.core.errors import UsageError
from draftset.core.modes import MODES

# --- targets and report --------------------------------------------------------------------------


class MixError(UsageError, ValueError):
    """Targets that are malformed or cannot be met with the candidate rows."""


@dataclass
class MixTargets:
    """What the recipe asks for. Shares are fractions summing to 1; a mode left out of
    ``mode_shares`` gets 0 rows; with source targets, every source holding rows must be named
    (count or share; 0 leaves it out). ``source_counts`` are taken first and
    ``source_shares`` split the rest of the total. ``total`` None means: every row when there
    are no shares, the sum of ``source_counts`` when there are only counts, else the largest
    total the shares can be met with."""

    total: int | None = None
    mode_shares: dict[str, float] | None = None
    source_shares: dict[str, float] | None = None
    source_counts: dict[str, int] | None = None


@dataclass
class MixLine:
    """Requested vs achieved for one source, one mode, or one (source, mode) cell."""

    kind: Literal["source", "mode", "cell"]
    key: str
    requested: float | None  # share x total (None: no target)
    target: int | None
    achieved: int
    available: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "requested": self.requested,
            "target": self.target,
            "achieved": self.achieved,
            "available": self.available,
        }


@dataclass
class MixResult:
    selected: np.ndarray  # bool, one per candidate row
    total: int
    requested_total: int | None
    lines: list[MixLine]
    notes: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        """JSON-ready requested-vs-achieved table for the manifest / report."""
        return {
            "total": self.total,
            "requested_total": self.requested_total,
            "lines": [line.to_json() for line in self.lines],
            "notes": list(self.notes),
        }

    def format_table(self) -> str:
        """A plain-text table: kind, key, requested, target, achieved, available."""
        rows = [("kind", "key", "requested", "target", "achieved", "available")]
        for ln in self.lines:
            req = "-" if ln.requested is None else f"{ln.requested:.2f}"
            tgt = "-" if ln.target is None else str(ln.target)
            rows.append((ln.kind, ln.key, req, tgt, str(ln.achieved), str(ln.available)))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        return "\n".join(out + self.notes)


# --- integer targets ---------------------------------------------------------------------------


def largest_remainder(shares: Sequence[float], total: int) -> list[int]:
    """Integers summing to ``total``, each within one of ``share * total`` (shares sum to 1)."""
    raw = [s * total for s in shares]
    out = [math.floor(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - out[i]), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


SHARES_TOLERANCE = 1e-6
"""How far from 1 a mix's shares may sum (preflight refuses the same before any work)."""


def _check_shares(shares: Mapping[str, float], what: str) -> None:
    if any(not math.isfinite(v) or v < 0 for v in shares.values()):
        raise MixError(f"{what} shares must be non-negative numbers: {dict(shares)}")
    if shares and abs(sum(shares.values()) - 1.0) > SHARES_TOLERANCE:
        raise MixError(f"{what} shares must sum to 1, got {sum(shares.values()):.6g}")


@dataclass
class _Plan:
    """Integer marginal targets (None = free) and the real-valued requests they round."""

    row_t: np.ndarray | None
    col_t: np.ndarray | None
    row_req: list[float | None]
    col_req: list[float | None]


def _plan(targets: MixTargets, names: list[str], total: int) -> _Plan:
    row_t = row_req = None
    counts = targets.source_counts or {}
    shares = targets.source_shares or {}
    if counts or shares:
        fixed = sum(counts.values())
        if fixed > total:
            raise MixError(f"source counts add up to {fixed}, more than the total {total}")
        if fixed < total and not shares:
            raise MixError(
                f"source counts add up to {fixed} but the total is {total}: give the other "
                "sources shares, or leave the total out"
            )
        rest = largest_remainder([shares.get(n, 0.0) for n in names], total - fixed)
        row_t = np.array([counts.get(n, 0) + rest[i] for i, n in enumerate(names)], np.int64)
        row_req = [
            float(counts[n]) if n in counts else shares.get(n, 0.0) * (total - fixed) for n in names
        ]
    col_t = col_req = None
    if targets.mode_shares is not None:
        ms = targets.mode_shares
        col_t = np.array(largest_remainder([ms.get(m, 0.0) for m in MODES], total), np.int64)
        col_req = [ms.get(m, 0.0) * total for m in MODES]
    return _Plan(
        row_t,
        col_t,
        row_req or [None] * len(names),
        col_req or [None] * len(MODES),
    )


# --- allocation: a flow problem over (source, mode) cells -------------------------------------


def _fractional(avail: np.ndarray, plan: _Plan, total: int) -> np.ndarray:
    """A real-valued allocation near the targets that spreads rows in proportion to what is
    available (iterative proportional fitting when both marginals are fixed)."""
    x = avail.astype(np.float64)
    if plan.row_t is None and plan.col_t is None:
        return x * (total / max(1, avail.sum()))
    for _ in range(200):
        if plan.row_t is not None:
            x *= (plan.row_t / np.maximum(x.sum(axis=1), 1e-12))[:, None]
            np.minimum(x, avail, out=x)
        if plan.col_t is not None:
            x *= (plan.col_t / np.maximum(x.sum(axis=0), 1e-12))[None, :]
            np.minimum(x, avail, out=x)
        if plan.row_t is None or plan.col_t is None:
            break
        if np.abs(x.sum(axis=1) - plan.row_t).max() < 1e-6:
            break
    return x


def _max_flow(cap: np.ndarray, flow: np.ndarray, s: int, t: int) -> None:
    """Edmonds-Karp augmentation of ``flow`` in place (tiny graphs: sources + modes + 2)."""
    n = cap.shape[0]
    while True:
        parent = [-1] * n
        parent[s] = s
        queue = deque([s])
        while queue and parent[t] == -1:
            u = queue.popleft()
            for v in range(n):
                if parent[v] == -1 and cap[u, v] - flow[u, v] > 0:
                    parent[v] = u
                    queue.append(v)
        if parent[t] == -1:
            return
        push, v = None, t
        while v != s:
            u = parent[v]
            room = cap[u, v] - flow[u, v]
            push = room if push is None else min(push, room)
            v = u
        v = t
        while v != s:
            u = parent[v]
            flow[u, v] += push
            flow[v, u] -= push
            v = u


def _allocate(avail: np.ndarray, plan: _Plan, total: int) -> np.ndarray | None:
    """Integer cell counts meeting the targets exactly, or None when no allocation exists."""
    n_src, n_mode = avail.shape
    x = np.floor(_fractional(avail, plan, total)).astype(np.int64)
    x = np.minimum(x, avail)
    row_cap = plan.row_t if plan.row_t is not None else avail.sum(axis=1)
    col_cap = plan.col_t if plan.col_t is not None else avail.sum(axis=0)
    _trim(x, row_cap, axis=1)
    _trim(x, col_cap, axis=0)
    while x.sum() > total:  # free marginals: keep the seed under the total
        i, j = np.unravel_index(np.argmax(x), x.shape)
        x[i, j] -= 1
    s, t = 0, 1 + n_src + n_mode
    cap = np.zeros((t + 1, t + 1), np.int64)
    flow = np.zeros_like(cap)
    cap[s, 1 : 1 + n_src] = row_cap
    cap[1 : 1 + n_src, 1 + n_src : t] = avail
    cap[1 + n_src : t, t] = col_cap
    flow[1 : 1 + n_src, 1 + n_src : t] = x
    flow[1 + n_src : t, 1 : 1 + n_src] = -x.T
    flow[s, 1 : 1 + n_src] = x.sum(axis=1)
    flow[1 : 1 + n_src, s] = -x.sum(axis=1)
    flow[1 + n_src : t, t] = x.sum(axis=0)
    flow[t, 1 + n_src : t] = -x.sum(axis=0)
    # the total caps the flow: route it through an extra edge in front of the source
    big = np.zeros((t + 2, t + 2), np.int64)
    big[: t + 1, : t + 1] = cap
    big[t + 1, s] = total
    bflow = np.zeros_like(big)
    bflow[: t + 1, : t + 1] = flow
    bflow[t + 1, s] = x.sum()
    bflow[s, t + 1] = -x.sum()
    _max_flow(big, bflow, t + 1, t)
    if bflow[t + 1, s] != total:
        return None
    return bflow[1 : 1 + n_src, 1 + n_src : t].copy()


def _trim(x: np.ndarray, caps: np.ndarray, axis: int) -> None:
    """Lower the largest cells of each row (axis=1) / column (axis=0) down to its cap."""
    sums = x.sum(axis=axis)
    for k in np.flatnonzero(sums > caps):
        line = x[k] if axis == 1 else x[:, k]
        for _ in range(int(sums[k] - caps[k])):
            line[np.argmax(line)] -= 1


# --- the selection -------------------------------------------------------------------------------


def select_mix(
    sources: Sequence[str] | np.ndarray,
    modes: Sequence[str] | np.ndarray,
    targets: MixTargets,
    seed: int = 0,
    on_infeasible: Literal["error", "shrink"] = "error",
) -> MixResult:
    """A seeded, reproducible selection of candidate rows meeting the targets (see module doc).

    ``sources`` / ``modes``: one entry per candidate row (e.g. rows surviving dedup and
    decontamination). Within each (source, mode) cell the rows are a uniform random sample.
    """
    src = np.asarray(sources).astype(str)
    mode = np.asarray(modes).astype(str)
    if src.shape != mode.shape or src.ndim != 1:
        raise MixError(f"sources and modes must be 1-D and equal length: {src.shape} {mode.shape}")
    bad = sorted(set(np.unique(mode).tolist()) - set(MODES))
    if bad:
        raise MixError(f"unknown mode(s) {bad}; modes are {', '.join(MODES)}")
    names = _source_names(src, targets)
    src_code = _codes(src, names)
    mode_code = _codes(mode, list(MODES))
    avail = np.zeros((len(names), len(MODES)), np.int64)
    np.add.at(avail, (src_code, mode_code), 1)

    requested = targets.total
    total = _resolve_total(targets, avail, names)
    notes: list[str] = []
    if on_infeasible == "shrink" and not _feasible(targets, avail, names, total):
        best = _largest_feasible(targets, avail, names, total)
        if best > 0:
            notes.append(f"targets cannot be met with {total} rows: shrunk to {best}")
            total = best
    if total > (n := int(avail.sum())):  # before the plan, whose arithmetic overflows past int64
        raise MixError(f"asked for {total} rows but only {n} candidate rows exist")
    plan = _plan(targets, names, total)
    _check_marginals(plan, avail, names)
    alloc = _allocate(avail, plan, total)
    if alloc is None:
        best = _largest_feasible(targets, avail, names, total)
        raise MixError(
            f"no selection of {total} rows meets both the source and the mode targets "
            f"(at most {best} can); available rows per (source, mode): " + _cells_text(avail, names)
        )

    # numpy seeds with non-negative integers alone; `--seed` takes any (the weight sampling a
    # negative one too): a negative seed is its magnitude with a marker, its own stream
    rng = np.random.default_rng(seed if seed >= 0 else [-seed, 1])
    selected = np.zeros(len(src), dtype=bool)
    for i in range(len(names)):
        for j in range(len(MODES)):
            if alloc[i, j]:
                idx = np.flatnonzero((src_code == i) & (mode_code == j))
                selected[rng.choice(idx, size=int(alloc[i, j]), replace=False)] = True
    lines = _lines(names, avail, alloc, plan)
    return MixResult(selected, total, requested, lines, notes)


def _codes(values: np.ndarray, names: list[str]) -> np.ndarray:
    """Index of each value in ``names`` (vectorized through the unique values)."""
    uniq, inverse = np.unique(values, return_inverse=True)
    where = {n: i for i, n in enumerate(names)}
    return np.array([where[u] for u in uniq.tolist()], np.int64)[inverse].reshape(-1)


def _source_names(src: np.ndarray, targets: MixTargets) -> list[str]:
    present = sorted(set(src.tolist()))
    counts = targets.source_counts or {}
    shares = targets.source_shares or {}
    _check_shares(shares, "source")
    if targets.mode_shares is not None:
        _check_shares(targets.mode_shares, "mode")
        unknown = sorted(set(targets.mode_shares) - set(MODES))
        if unknown:
            raise MixError(f"unknown mode(s) {unknown} in mode shares; modes are {MODES}")
    if any(c < 0 for c in counts.values()):
        raise MixError(f"source counts must be >= 0: {counts}")
    both = sorted(set(counts) & set(shares))
    if both:
        raise MixError(f"source(s) {both} have both a count and a share; give one")
    if counts or shares:
        missing = [s for s in present if s not in counts and s not in shares]
        if missing:
            raise MixError(
                f"source(s) {missing} have rows but no target; give each a share or a count "
                "(0 leaves it out)"
            )
    return sorted(set(present) | set(counts) | set(shares))


def _resolve_total(targets: MixTargets, avail: np.ndarray, names: list[str]) -> int:
    n = int(avail.sum())
    if targets.total is not None:
        if targets.total < 0:
            raise MixError(f"total must be >= 0, got {targets.total}")
        return targets.total
    has_shares = bool(targets.source_shares) or targets.mode_shares is not None
    if not has_shares:
        return sum((targets.source_counts or {}).values()) if targets.source_counts else n
    best = _largest_feasible(targets, avail, names, n)
    if best == 0 and n > 0:
        raise MixError(_no_row_meets(targets, avail, names))
    return best


def _no_row_meets(targets: MixTargets, avail: np.ndarray, names: list[str]) -> str:
    """Why shares given without a total can be met with no row at all (every row would be
    sampled out), naming a target that has a share and no row, when one does."""
    empty = [
        f"mode {m!r} has a share of {share} but no row of that mode"
        for j, m in enumerate(MODES)
        if (share := (targets.mode_shares or {}).get(m, 0)) > 0 and avail[:, j].sum() == 0
    ] + [
        f"source {s!r} has a share of {share} but no row"
        for i, s in enumerate(names)
        if (share := (targets.source_shares or {}).get(s, 0)) > 0 and avail[i].sum() == 0
    ]
    why = f": {empty[0]}" if empty else ""
    return (
        f"no selection meets the mix targets with even one row{why}; available rows per "
        "(source, mode): " + _cells_text(avail, names)
    )


def _feasible(targets: MixTargets, avail: np.ndarray, names: list[str], total: int) -> bool:
    if total > int(avail.sum()):  # never met, and past int64 the plan's arithmetic overflows
        return False
    try:
        plan = _plan(targets, names, total)
    except MixError:
        return False
    if plan.row_t is not None and (plan.row_t > avail.sum(axis=1)).any():
        return False
    if plan.col_t is not None and (plan.col_t > avail.sum(axis=0)).any():
        return False
    return _allocate(avail, plan, total) is not None


def _largest_feasible(targets: MixTargets, avail: np.ndarray, names: list[str], hi: int) -> int:
    """The largest total <= ``hi`` the targets can be met with (bisection, then a local scan,
    since rounding makes feasibility only nearly monotone in the total)."""
    lo, top = 0, min(hi, int(avail.sum()))
    while lo < top:
        mid = (lo + top + 1) // 2
        if _feasible(targets, avail, names, mid):
            lo = mid
        else:
            top = mid - 1
    for t in range(min(hi, int(avail.sum()), lo + 64), lo, -1):
        if _feasible(targets, avail, names, t):
            return t
    return lo


def _check_marginals(plan: _Plan, avail: np.ndarray, names: list[str]) -> None:
    """Clear errors for a single target that exceeds what is available."""
    if plan.row_t is not None:
        for i, name in enumerate(names):
            have = int(avail[i].sum())
            if plan.row_t[i] > have:
                raise MixError(f"source {name!r} needs {plan.row_t[i]} rows but has only {have}")
    if plan.col_t is not None:
        for j, m in enumerate(MODES):
            have = int(avail[:, j].sum())
            if plan.col_t[j] > have:
                per = ", ".join(f"{names[i]}: {avail[i, j]}" for i in range(len(names)))
                raise MixError(
                    f"mode {m!r} needs {plan.col_t[j]} rows but only {have} exist ({per})"
                )


def _cells_text(avail: np.ndarray, names: list[str]) -> str:
    return "; ".join(
        f"{names[i]}: " + ", ".join(f"{m} {avail[i, j]}" for j, m in enumerate(MODES))
        for i in range(len(names))
    )


def _lines(names: list[str], avail: np.ndarray, alloc: np.ndarray, plan: _Plan) -> list[MixLine]:
    lines = [
        MixLine(
            "source",
            name,
            plan.row_req[i],
            None if plan.row_t is None else int(plan.row_t[i]),
            int(alloc[i].sum()),
            int(avail[i].sum()),
        )
        for i, name in enumerate(names)
    ]
    lines += [
        MixLine(
            "mode",
            m,
            plan.col_req[j],
            None if plan.col_t is None else int(plan.col_t[j]),
            int(alloc[:, j].sum()),
            int(avail[:, j].sum()),
        )
        for j, m in enumerate(MODES)
    ]
    lines += [
        MixLine("cell", f"{name}/{m}", None, None, int(alloc[i, j]), int(avail[i, j]))
        for i, name in enumerate(names)
        for j, m in enumerate(MODES)
        if avail[i, j]
    ]
    return lines
