"""What a row costs in render & mask against the limit's single render, in one process.

    python bench/render_cost.py --data mix --template qwen3_6 --rows 1000
    python bench/render_cost.py --rows 1000 --profile      # + cProfile of render & mask

Reads the benchmark rows (the same files ``run.py`` builds), normalizes them as ``draftset
build`` does, and times, row by row on one core: the limit's ``apply_chat_template`` (one render
per row), one render of the whole conversation on draftset's compiled path, and draftset's
render & mask (``plan_conversation``), counting its renders. Then encode: draftset's segment
encode against one ``encode_batch_fast`` of the whole rows. ``--profile`` prints where render &
mask spends its time (cProfile, top functions by own time). Figures are CPU-bound and
single-threaded: compare them with each other, in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCH = Path(__file__).resolve().parent
# bench/profile.py would shadow the standard library's `profile`, which cProfile imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
import cProfile  # noqa: E402
import pstats  # noqa: E402

sys.path.insert(0, str(BENCH))

import peers
from run import prepare_data, qwen3_tokenizer, resolve_template

from draftset.encode import encode_plans
from draftset.normalize import normalize
from draftset.records import Conversation, RawRow
from draftset.render import plan_conversation
from draftset.template import ChatTemplate, TemplateSpec

ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant"}


class CountingRenderer:
    """The renderer with its ``render`` counted and timed (everything else passed through)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls = 0
        self.seconds = 0.0

    def render(self, *args: Any, **kwargs: Any) -> str:
        t = time.perf_counter()
        try:
            return self._inner.render(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t
            self.calls += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _raw_messages(data: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    if "messages" in data:
        return data["messages"], data.get("tools")
    return [{"role": ROLES[t["from"]], "content": t["value"]} for t in data["conversations"]], None


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--data", action="append", help="'mix', or files (as bench/run.py)")
    p.add_argument("--template", help="trl template name or file (default: the tokenizer's)")
    p.add_argument("--turns", default="all", choices=("all", "last", "each"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="cProfile render & mask")
    args = p.parse_args()
    tok = qwen3_tokenizer()
    peers.CACHE.mkdir(parents=True, exist_ok=True)
    template = resolve_template(args.template) if args.template else None
    ns = SimpleNamespace(data=args.data, shared=None, seed=args.seed, template_path=template)
    path, desc = prepare_data(ns, tok, args.rows)  # type: ignore[arg-type]
    text = template.read_text() if template else None
    tmpl = ChatTemplate(TemplateSpec(str(tok), text))
    raws, convs = [], []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            data = json.loads(line)
            item = normalize(RawRow("bench", i, data))
            if isinstance(item, Conversation):
                raws.append(_raw_messages(data))
                convs.append(item)
    print(f"data: {path} ({desc}); {len(convs)} conversations; template: {template or 'own'}")
    answers = statistics.mean(sum(m["role"] == "assistant" for m in c.messages) for c in convs)
    print(f"mean assistant turns per row: {answers:.2f}")

    t = time.perf_counter()
    limit_texts = [
        tmpl.tokenizer.apply_chat_template(m, tools=tools, chat_template=text, tokenize=False)
        for m, tools in raws
    ]
    limit_s = time.perf_counter() - t
    t = time.perf_counter()
    for c in convs:
        tmpl.render(c.messages, c.tools)
    one_s = time.perf_counter() - t

    counting = CountingRenderer(tmpl)
    t = time.perf_counter()
    plans = [plan_conversation(counting, c, args.turns) for c in convs]  # type: ignore[arg-type]
    plan_s = time.perf_counter() - t
    row_plans = [rp for cp in plans for rp in cp.rows]

    t = time.perf_counter()
    encode_plans(tmpl.backend, row_plans)
    enc_s = time.perf_counter() - t
    t = time.perf_counter()
    tmpl.backend.encode_batch_fast(limit_texts, add_special_tokens=False)
    limit_enc_s = time.perf_counter() - t

    n = len(convs)
    ms = 1000 / n
    print()
    print("| per row (one core) | ms | vs the limit's render |")
    print("|---|---|---|")
    print(f"| limit: apply_chat_template, 1 render | {limit_s * ms:.2f} | 1.00x |")
    print(
        f"| draftset compiled path, 1 render of the whole row | {one_s * ms:.2f} "
        f"| {one_s / limit_s:.2f}x |"
    )
    print(
        f"| draftset render & mask (--turns {args.turns}): {counting.calls / n:.2f} renders "
        f"| {plan_s * ms:.2f} | {plan_s / limit_s:.2f}x |"
    )
    print(
        f"|   of which the renders ({counting.seconds / counting.calls * 1000:.3f} ms each) "
        f"| {counting.seconds * ms:.2f} | |"
    )
    print(f"|   of which span derivation around them | {(plan_s - counting.seconds) * ms:.2f} | |")
    print(
        f"| encode: draftset segments (encode_batch_fast, 1 thread) | {enc_s * ms:.2f} "
        f"| {enc_s / limit_enc_s:.2f}x the limit's encode |"
    )
    print(f"| encode: the limit, whole rows (encode_batch_fast) | {limit_enc_s * ms:.2f} | |")
    print(f"\nrenders per row: {counting.calls / n:.2f}; output rows: {len(row_plans)}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for c in convs:
            plan_conversation(tmpl, c, args.turns)
        prof.disable()
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
