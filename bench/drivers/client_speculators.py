"""speculators 0.9.0 `regenerate-responses`, the installed command's own function, timed.

Calls ``speculators.cli.regenerate_responses.regenerate_responses`` (what
``speculators regenerate-responses`` runs) with its defaults except endpoint, dataset,
concurrency, max tokens and output file. It auto-detects the served model name from
``/v1/models`` and loads that name with ``AutoTokenizer`` (for the review-only ``text``
field it decodes into every row), so run it from a folder holding a tokenizer folder of that
name. The timer starts when that tokenizer is loaded (the function is wrapped, not changed),
i.e. just before it opens the dataset and starts its workers; the start-up before (imports
of torch and transformers, model detection, tokenizer load) is left out, as for draftset.

    python bench/drivers/client_speculators.py DATA OUT ENDPOINT CONCURRENCY MAX_TOKENS
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

# speculators.cli re-exports the function under the module's name: fetch the module itself
regen = importlib.import_module("speculators.cli.regenerate_responses")

marks: dict[str, float] = {}


def main() -> None:
    data, out, endpoint, concurrency, max_tokens = sys.argv[1:6]
    load = regen.build_detokenizer

    def build_detokenizer(model: str):  # the original, then the start mark
        detokenize = load(model)
        marks["w0"], marks["c0"] = time.perf_counter(), time.process_time()
        return detokenize

    regen.build_detokenizer = build_detokenizer
    regen.regenerate_responses(
        endpoint=endpoint,
        dataset=data,
        concurrency=int(concurrency),
        max_tokens=int(max_tokens),
        outfile=out,
    )
    w1, c1 = time.perf_counter(), time.process_time()
    with Path(out).open(encoding="utf-8") as f:
        rows_out = sum(1 for _ in f)
    errors = Path(out).with_name(Path(out).stem + ".errors.jsonl")
    n_err = sum(1 for _ in errors.open()) if errors.exists() else 0
    report = {"requests": rows_out + n_err, "rows_out": rows_out, "errors": n_err}
    loop = {"loop_seconds": w1 - marks["w0"], "loop_cpu": c1 - marks["c0"]}
    print(json.dumps({**report, **loop}), flush=True)


if __name__ == "__main__":
    main()
