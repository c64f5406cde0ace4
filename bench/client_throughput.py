"""Requests/s that `draftset generate` itself sustains against a zero-latency local server.

The server (tests/fault_server.py, standard-library asyncio) runs in its own process on
127.0.0.1, so on a 2-core machine client and server each get a core. Every row is one request;
the figure includes reading and normalizing the input, JSON encoding and decoding, routing,
and the crash-safe appends of the output lines.

    .venv/bin/python bench/client_throughput.py [--rows 3000] [--concurrency 8 32 128]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from draftset.generate import GenerateOptions, run_generate
from draftset.read import Source

REPO = Path(__file__).resolve().parents[1]


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "fault_server.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def write_prompts(path: Path, rows: int) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i in range(rows):
            msg = {
                "role": "user",
                "content": f"Question {i}: explain speculative decoding briefly.",
            }
            f.write(json.dumps({"id": f"r{i}", "messages": [msg]}) + "\n")


def run_once(src: Path, out: Path, url: str, concurrency: int) -> tuple[int, float]:
    opts = GenerateOptions(
        sources=[Source("bench", src)],
        endpoints=[url],
        out=out,
        concurrency=concurrency,
        max_tokens=64,
    )
    t0 = time.perf_counter()
    result = asyncio.run(run_generate(opts))
    return result.requests, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 128])
    args = ap.parse_args()
    proc, url = start_server()
    table = Table(title=f"draftset generate client, zero-latency server, {os.cpu_count()} cores")
    for col in ("concurrency", "requests", "seconds", "requests/s"):
        table.add_column(col, justify="right")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "prompts.jsonl"
            write_prompts(src, args.rows)
            run_once(src, Path(tmp) / "warmup.jsonl", url, 8)
            for c in args.concurrency:
                n, secs = run_once(src, Path(tmp) / f"out-{c}.jsonl", url, c)
                table.add_row(str(c), f"{n:,}", f"{secs:.2f}", f"{n / secs:,.0f}")
    finally:
        proc.terminate()
        proc.wait()
    Console().print(table)


if __name__ == "__main__":
    main()
