"""One `draftset generate` run (``run_generate``, no progress bar) timed from the inside.

Prints one JSON line: requests sent, seconds and CPU seconds (all threads of this process) of
``run_generate`` alone, i.e. without the interpreter start-up and imports.

    .venv/bin/python bench/drivers/client_draftset.py SRC OUT URL CONCURRENCY MAX_TOKENS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from draftset.generation.job import run_generate
from draftset.generation.options import GenerateOptions
from draftset.sources.read import Source


def main() -> None:
    src, out, url, concurrency, max_tokens = sys.argv[1:6]
    opts = GenerateOptions(
        sources=[Source("bench", Path(src))],
        endpoints=[url],
        out=Path(out),
        concurrency=int(concurrency),
        max_tokens=int(max_tokens),
    )
    w0, c0 = time.perf_counter(), time.process_time()
    result = asyncio.run(run_generate(opts))
    w1, c1 = time.perf_counter(), time.process_time()
    with Path(out).open(encoding="utf-8") as f:
        rows_out = sum(1 for _ in f)
    report = {"requests": result.requests, "rows_out": rows_out}
    print(json.dumps({**report, "loop_seconds": w1 - w0, "loop_cpu": c1 - c0}))


if __name__ == "__main__":
    main()
