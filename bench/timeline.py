"""Per-phase timeline of one ``draftset build``: which process burns CPU when.

    python bench/timeline.py --data mix --template qwen3_6 --rows 2000 --workers 2

Runs the build on the benchmark data (as bench/run.py makes it) and samples every process of its
tree from /proc every 0.1 s: start, end and CPU seconds of the main process, the helper (the
first child: template load, token_freq.pt), each worker and multiprocessing's resource tracker,
then a per-second table of the cores each role keeps busy. From it: start-up (spawn to the
workers' first full second), steady state, and the tail (the workers' exit to the build's end).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
from measure import load_average, tree
from run import build_args, draftset_cli, prepare_data, qwen3_tokenizer, resolve_template

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--data", action="append", help="'mix', or files (as bench/run.py)")
    p.add_argument("--template", help="trl template name or file")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-length", type=int, default=4096, help="as bench/run.py's")
    p.add_argument(
        "--resolution", type=float, default=1.0, help="seconds a row of the table covers"
    )
    args = p.parse_args()
    tok = qwen3_tokenizer()
    peers.CACHE.mkdir(parents=True, exist_ok=True)
    template = resolve_template(args.template) if args.template else None
    ns = SimpleNamespace(data=args.data, shared=None, seed=args.seed, template_path=template)
    data, desc = prepare_data(ns, tok, args.rows)  # type: ignore[arg-type]
    print(f"data: {data} ({desc}); load average {load_average()}")
    with tempfile.TemporaryDirectory(dir=peers.CACHE) as tmp:
        out = Path(tmp) / "out"
        cmd = [str(draftset_cli())]
        cmd += build_args(data, tok, out, args.workers, args.max_length, template)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(Path(tmp) / "hf")}
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        seen: dict[int, dict] = {}  # pid -> role, first, last, cpu
        order: list[int] = []
        per_second: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        while proc.poll() is None:
            now = time.perf_counter() - t0
            for pid in tree(proc.pid):
                cpu = _cpu(pid)
                if cpu is None:
                    continue
                if pid not in seen:
                    cmdline = _cmdline(pid)
                    if pid == proc.pid:
                        role = "main"
                    elif "resource_tracker" in cmdline:
                        role = "resource tracker"
                    else:
                        kids = [
                            q for q in order if seen[q]["role"].startswith(("helper", "worker"))
                        ]
                        role = "helper" if not kids else f"worker {len(kids)}"
                    seen[pid] = {"role": role, "first": now, "last": now, "cpu": cpu, "cpu0": cpu}
                    order.append(pid)
                s = seen[pid]
                per_second[int(now / args.resolution)][s["role"]] += cpu - s["cpu"]
                s["last"], s["cpu"] = now, cpu
            time.sleep(0.1)
        total = time.perf_counter() - t0
        err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({proc.returncode}): {err[-2000:]}")
    print(f"\ndraftset build --workers {args.workers}: {total:.1f} s wall\n")
    print("| process | seen from s | to s | CPU s |\n|---|---|---|---|")
    for pid in order:
        s = seen[pid]
        print(f"| {s['role']} | {s['first']:.1f} | {s['last']:.1f} | {s['cpu'] - s['cpu0']:.1f} |")
    roles = [seen[pid]["role"] for pid in order]
    res = args.resolution
    per = "second" if res == 1 else f"{res:g} s"
    print(f"\ncores busy per {per}, by process:\n")
    print("| s | " + " | ".join(roles) + " |\n|---|" + "---|" * len(roles))
    for tick in sorted(per_second):
        row = per_second[tick]
        busy = " | ".join(f"{row.get(r, 0) / res:.2f}" for r in roles)
        print(f"| {tick * res:g} | {busy} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
