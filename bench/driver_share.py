"""How many worker cores one driver feeds: driver and worker CPU per row, as slopes.

    python bench/driver_share.py                      # 10K and 30K rows of the mix, Qwen3.6
    python bench/driver_share.py --small 10000 --large 30000 --workers 2 --compare

Builds the same data at two sizes (the small one is the head of the large one) with
``draftset build --workers W`` run in-process by ``drivers/cpu_split.py``, which reports the
driver's own CPU (every thread of the main process) and its children's (the workers and the
helper). The sizes are above the rows the driver scans itself while the template loads
(8,192: a start-up cost the slope must not count). The slopes between the sizes are the
steady-state costs per row, start-up excluded:

- ``d``, driver CPU per row; ``w``, worker CPU per row; ``w / d``, the worker cores one driver
  keeps busy (issue 27's target: >= 32);
- the modelled ceiling: ``1 / d`` rows per second per driver, whatever the cluster;
- with ``--compare``, the same builds with the driver reading every row (what a mix, `run`'s
  overlay or a compressed source still take, and every build before the workers read), side
  by side under the same load;
- read + normalize + select per row in one process (run here, no build): what a driver that
  reads spends a row;
- at the large size, the build's wall time against the limit's (``drivers/limit.py``: render
  and batch-encode, nothing else; target >= 0.95x as rows/s) and its CPU against
  ``limit-fast``'s (target <= 1.2x); and, with ``limit-fast`` run at both sizes beside the
  builds, both CPU costs per row as slopes (start-up excluded on both sides) and their ratio
  (the large size's limit-fast run is also the one the build is compared with).

The load average before each run is printed with it: on a shared machine, read the CPU figures
(steady) before the wall times (not).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import busy_cores, load_average, run_measured
from run import (
    DRIVERS,
    REPO,
    build_args,
    head_file,
    make_plans,
    peers,
    prepare_data,
    qwen3_tokenizer,
    resolve_template,
)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in load_average())


def build_once(
    data: Path, tok: Path, out: Path, args: argparse.Namespace, driver_reads: bool = False
) -> dict[str, Any]:
    cmd = [sys.executable, str(DRIVERS / "cpu_split.py")]
    cmd += build_args(data, tok, out, args.workers, args.max_length, args.template_path)
    cmd += ["--overwrite", "--engine", args.engine]
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(out.parent / "hf"), "TQDM_DISABLE": "1"}
    if driver_reads:
        env["BENCH_DRIVER_READS"] = "1"
    before = {"load": _load(), "busy": busy_cores(0.5)}
    m = run_measured(cmd, env=env, cwd=REPO, timeout=args.timeout)
    if m.returncode != 0:
        raise SystemExit(f"build failed (exit {m.returncode}): {m.stderr[-2000:]}")
    split = json.loads(m.stdout.strip().splitlines()[-1])
    return {
        "wall": m.seconds,
        "tree_cpu": m.cpu_seconds,
        "driver_cpu": split["driver_cpu"],
        "worker_cpu": m.cpu_seconds - split["driver_cpu"],
        "peak_rss": m.peak_rss,
        "others": m.other_busy_cores,
        **before,
    }


def selection_cpu(data: Path, tok: Path) -> float:
    """The driver's read + normalize + select alone, CPU seconds per row (in this process): the
    floor of its cost while it still reads; the rest of ``d`` is handing rows over."""
    import resource

    from draftset.config.options import BuildOptions
    from draftset.select.mix import Selection, plan_selection
    from draftset.sources.read import Source

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    opts = BuildOptions(sources=[Source("bench", data)], tokenizer=str(tok), out=Path("unused"))
    c0 = cpu()
    plan = plan_selection(opts.sources, None, 0)
    rows = sum(1 for _ in Selection(opts.selection_spec(), plan).rows())
    return (cpu() - c0) / rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--small", type=int, default=10000)
    p.add_argument("--large", type=int, default=30000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--engine",
        default="local",
        help="local or ray (a private Ray: its actors are not the driver's reaped children, so"
        " only the driver's figure counts; the workers' reads as 0)",
    )
    p.add_argument("--data", action="append", default=None, help="'mix' (default) or files")
    p.add_argument("--template", default="qwen3_6", help="trl template name or file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-length", type=int, default=4096)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--no-limit", action="store_true", help="skip the limit runs")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    p.add_argument(
        "--compare",
        action="store_true",
        help="also build with the driver reading every row (the path before the workers read)",
    )
    args = p.parse_args(argv)
    args.data = args.data or ["mix"]
    args.shared = None
    args.template_path = resolve_template(args.template) if args.template else None
    tok = qwen3_tokenizer()
    peers.CACHE.mkdir(parents=True, exist_ok=True)
    large, desc = prepare_data(args, tok, args.large)
    small = head_file(large, args.small)
    print(f"load average at start: {_load()}")
    print(f"data: {large} ({desc}); small: the first {args.small} rows")
    report: dict[str, Any] = {"argv": sys.argv, "small": args.small, "large": args.large}
    with tempfile.TemporaryDirectory(prefix="share-", dir=peers.CACHE) as tmp:
        work = Path(tmp)
        modes = ["workers read", "driver reads"] if args.compare else ["workers read"]
        runs: dict[str, dict[int, dict[str, Any]]] = {m: {} for m in modes}
        # limit-fast at each size beside the builds (its slope); the large one is also the
        # build's limit-fast comparison below, not measured a second time
        fast: dict[int, tuple[Any, str]] = {}

        def limit_run(name: str, data: Path) -> tuple[Any, str] | None:
            (plan,) = make_plans([name], data, tok, work, 2, args.max_length, args.template_path)
            load = _load()
            m = run_measured(plan.cmd, env=plan.env, cwd=REPO, timeout=args.timeout)
            if m.returncode != 0:
                print(f"{name} failed: {m.stderr[-500:]}")
                return None
            return m, load

        for n, data in ((args.small, small), (args.large, large)):
            for mode in modes:  # side by side, alternating, under the same load
                r = build_once(
                    data, tok, work / f"w{args.workers}-{n}" / "out", args, mode == "driver reads"
                )
                runs[mode][n] = r
                print(
                    f"build --workers {args.workers}, {n} rows, {mode} (load {r['load']}, busy "
                    f"{r['busy']:.1f}): wall {r['wall']:.1f} s, driver {r['driver_cpu']:.1f}"
                    f" CPU-s, workers {r['worker_cpu']:.1f} CPU-s, peak RSS sum"
                    f" {r['peak_rss'] / 2**30:.2f} GiB, others {r['others']:.1f} cores"
                )
            if not args.no_limit and args.engine == "local":  # its slope, beside the build's
                got = limit_run("limit-fast", data)
                if got is not None:
                    fast[n] = got
                    print(f"limit-fast, {n} rows (load {got[1]}): CPU {got[0].cpu_seconds:.1f} s")
        rows = args.large - args.small
        report["runs"] = runs
        if len(fast) == 2:  # CPU per row in the steady state, start-up excluded on both sides
            mine = runs["workers read"]
            build_slope = (mine[args.large]["tree_cpu"] - mine[args.small]["tree_cpu"]) / rows
            fast_slope = (fast[args.large][0].cpu_seconds - fast[args.small][0].cpu_seconds) / rows
            report["cpu_per_row_slope"] = {
                "build_ms": build_slope * 1e3,
                "limit_fast_ms": fast_slope * 1e3,
                "ratio": build_slope / fast_slope,
            }
            print(
                f"CPU per row (slope, start-up excluded): build {build_slope * 1e3:.3f} ms,"
                f" limit-fast {fast_slope * 1e3:.3f} ms: {build_slope / fast_slope:.2f}x"
                " (target <= 1.2x)"
            )
        for mode in modes:
            big, little = runs[mode][args.large], runs[mode][args.small]
            d = (big["driver_cpu"] - little["driver_cpu"]) / rows
            w = (big["worker_cpu"] - little["worker_cpu"]) / rows
            report[mode] = {"driver_ms_per_row": d * 1e3, "worker_ms_per_row": w * 1e3}
            print(f"{mode}: driver CPU per row (slope) {d * 1e3:.4f} ms, workers {w * 1e3:.4f} ms")
            if d > 0:
                print(
                    f"{mode}: worker / driver {w / d:.1f} (target >= 32): cores one driver feeds;"
                    f" modelled ceiling {1 / d:,.0f} rows/s per driver"
                )
                report[mode].update(cores_fed=w / d, ceiling_rows_per_s=1 / d)
        sel = selection_cpu(large, tok)
        report["selection_ms_per_row"] = sel * 1e3
        print(
            f"read + normalize + select in one process: {sel * 1e3:.4f} ms a row (load"
            f" {_load()}): what a driver that reads spends; the workers now read twice"
        )
        if not args.no_limit:
            mine = runs["workers read"][args.large]
            for name in ("limit", "limit-fast"):
                got = fast.get(args.large) if name == "limit-fast" else None
                got = got or limit_run(name, large)
                if got is None:
                    continue
                m, load = got
                report[name] = {"wall": m.seconds, "cpu": m.cpu_seconds, "load": load}
                print(
                    f"{name} (load {load}): wall {m.seconds:.1f} s, CPU {m.cpu_seconds:.1f}"
                    f" s; build / {name}: rows/s {m.seconds / mine['wall']:.2f}x,"
                    f" CPU {mine['tree_cpu'] / m.cpu_seconds:.2f}x"
                )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
