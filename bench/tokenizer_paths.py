"""The Rust tokenizer's two batch paths on one thread: CPU per row, side by side.

    python bench/tokenizer_paths.py --rows 2000 --rounds 6     # the mix, Qwen3.6 renders

`encode_batch_fast` runs on the tokenizer's thread pool when ``TOKENIZERS_PARALLELISM`` is
true and on a plain loop when it is false. With the pool held to one thread
(``RAYON_NUM_THREADS=1``) both use one core, and give the same ids (checked here), but they do
not cost the same. This measures both in one process, on the rendered rows of the benchmark's
mix, alternating which goes first each round (the variable is read on every call, the pool's
size once, so it is fixed at 1 for the whole run), and prints the CPU seconds per 1,000 rows of
each path, the median of the rounds and their ratio. A Ray actor (one CPU) took the plain
loop until session 13; it now takes the pool path with one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ["RAYON_NUM_THREADS"] = "1"  # before the tokenizer's pool exists: one thread
sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
from run import QWEN3_STOPS, prepare_data, qwen3_tokenizer, resolve_template

from draftset.mask.template import ChatTemplate, TemplateSpec


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--batch", type=int, default=256, help="texts per encode_batch_fast call")
    p.add_argument("--template", default="qwen3_6", help="trl template name or file")
    args = p.parse_args()
    tok = qwen3_tokenizer()
    peers.CACHE.mkdir(parents=True, exist_ok=True)
    template = resolve_template(args.template)
    ns = SimpleNamespace(data=["mix"], shared=None, seed=0, template_path=template)
    path, desc = prepare_data(ns, tok, args.rows)  # type: ignore[arg-type]
    tmpl = ChatTemplate(TemplateSpec(str(tok), template.read_text(), eot_tokens=QWEN3_STOPS))
    texts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts.append(tmpl.render(row["messages"], row.get("tools")))
    backend = tmpl.backend

    def encode(parallelism: str) -> tuple[float, list[list[int]]]:
        os.environ["TOKENIZERS_PARALLELISM"] = parallelism
        ids: list[list[int]] = []
        t = time.process_time()
        for i in range(0, len(texts), args.batch):
            batch = texts[i : i + args.batch]
            ids += [e.ids for e in backend.encode_batch_fast(batch, add_special_tokens=False)]
        return time.process_time() - t, ids

    print(f"data: {path} ({desc}); {len(texts)} rows; {sum(map(len, texts)):,} characters")
    seconds: dict[str, list[float]] = {"true": [], "false": []}
    reference: list[list[int]] | None = None
    for r in range(args.rounds):
        for mode in ("true", "false") if r % 2 == 0 else ("false", "true"):
            s, ids = encode(mode)
            if reference is None:
                reference = ids
            assert ids == reference, "the two paths gave different ids"
            seconds[mode].append(s)
        print(
            f"round {r + 1}: pool path {seconds['true'][-1]:.2f} s, "
            f"one-thread path {seconds['false'][-1]:.2f} s"
        )
    per_k = 1000 / len(texts)
    pool, plain = (statistics.median(seconds[m]) for m in ("true", "false"))
    print(
        f"median CPU per 1,000 rows: pool path (TOKENIZERS_PARALLELISM=true, 1 thread) "
        f"{pool * per_k:.2f} s, one-thread path (false) {plain * per_k:.2f} s: "
        f"{plain / pool:.2f}x; same ids"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
