"""One far-too-long row (default 50 MB of text): time and peak memory of `build --workers 1`.

    python bench/long_row.py --mb 50            # with the token lower bound (too_long unencoded)
    python bench/long_row.py --mb 50 --no-bound # tokenizing everything, as before

Each run is its own process; peak RSS is that process's (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--no-bound", action="store_true")
    ap.add_argument("--truncation", default="drop")
    ap.add_argument("--dedup", default="exact")
    args = ap.parse_args()
    from conftest import qwen3_tokenizer_dir

    import draftset.mask.step
    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    if args.no_bound:
        draftset.mask.step.token_bytes_bound = lambda backend: None  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "long.jsonl"
        words = "the quick brown fox jumps over the lazy dog. "
        text = words * int(args.mb * 1e6 / len(words))
        rows = [
            {
                "messages": [
                    {"role": "user", "content": text},
                    {"role": "assistant", "content": "OK!"},
                ]
            },
            {
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"},
                ]
            },
        ]
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        del text, rows
        t0 = time.monotonic()
        res = run_build(
            BuildOptions(
                [Source("s", src)],
                str(qwen3_tokenizer_dir()),
                Path(d) / "out",
                workers=1,
                truncation=args.truncation,
                dedup=args.dedup,
            )
        )
        took = time.monotonic() - t0
        per = res.accounting.to_json()["per_source"]["s"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"{args.mb:g} MB row, bound={'off' if args.no_bound else 'on'}, {args.truncation}, "
        f"dedup {args.dedup}: "
        f"{took:.1f} s, peak {peak:.2f} GiB, written {per['written']}, "
        f"rejected {per['rejected_by_reason']}, truncated {per['truncated']}"
    )


if __name__ == "__main__":
    main()
