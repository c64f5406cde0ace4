"""Run ``draftset ARGS...`` in this process, then print one JSON line: the CPU seconds of this
process (the driver, all its threads) and of its reaped children (the workers, the helper).

usage: python cpu_split.py build DATA --tokenizer DIR --out OUT ...

With ``BENCH_DRIVER_READS=1`` the build reads every row in the driver (the path a mix or a
compressed source takes, and every build's before issue 27's workers read): the reference
`driver_share.py --compare` measures beside the default.
"""

from __future__ import annotations

import json
import os
import resource
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")  # as the draftset CLI sets it


def main() -> int:
    from draftset.cli import main as draftset_main

    if os.environ.get("BENCH_DRIVER_READS"):  # the reference: the driver reads every row
        import draftset.pipeline.build as build

        build.why_driver_reads = lambda spec: "the bench asked the driver to read"

    try:
        code = draftset_main(sys.argv[1:])
    except SystemExit as exc:  # the CLI exits with its code
        code = exc.code if isinstance(exc.code, int) else 1
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = {
        "driver_cpu": me.ru_utime + me.ru_stime,
        "children_cpu": kids.ru_utime + kids.ru_stime,
        "exit": code,
    }
    print(json.dumps(line), flush=True)
    return int(code or 0)


if __name__ == "__main__":  # spawned workers import this file again: only the parent runs
    raise SystemExit(main())
