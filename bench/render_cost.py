"""What a row costs in render & mask against the limit's single render, in one process.

    python bench/render_cost.py --data mix --template qwen3_6 --rows 1000
    python bench/render_cost.py --rows 1000 --profile      # + cProfile of render & mask
    python bench/render_cost.py --data mix --template qwen3_6 --stock-sandbox
                                        # + render & mask on transformers' stock sandbox against
                                        # draftset's memoizing copy, every plan checked equal

Reads the benchmark rows (the same files ``run.py`` builds), normalizes them as ``draftset
build`` does, and times, row by row on one core: the limit's ``apply_chat_template`` (one render
per row), one render of the whole conversation on draftset's compiled path, and draftset's
render & mask (``plan_conversation``), counting its renders. Then encode: draftset's segment
encode against one ``encode_batch_fast`` of the whole rows. ``--profile`` prints where render &
mask spends its time (cProfile, top functions by own time). Times are this process's CPU
seconds (``time.process_time``, one tokenizer thread), so other load on the machine inflates
them less than wall time; still, compare them with each other, in the same run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
from run import QWEN3_STOPS, prepare_data, qwen3_tokenizer, resolve_template
from tokenizers import Tokenizer

from draftset.core.records import Conversation, RawRow
from draftset.mask.encode import encode_plans
from draftset.mask.render import plan_conversation
from draftset.mask.template import ChatTemplate, TemplateSpec
from draftset.sources.normalize import normalize

BENCH = Path(__file__).resolve().parent
ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant"}


class CountingRenderer:
    """The renderer with its ``render`` counted and timed (everything else passed through)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls = 0
        self.seconds = 0.0
        self.keys: list[tuple] = []  # what a render cache would be keyed by (hashed afterwards)

    def render(
        self,
        messages: list,
        tools: Any = None,
        add_generation_prompt: bool = False,
        row_kwargs: Any = None,
    ) -> str:
        t = time.process_time()
        try:
            return self._inner.render(messages, tools, add_generation_prompt, row_kwargs)
        finally:
            self.seconds += time.process_time() - t
            self.calls += 1
            self.keys.append((messages, tools, add_generation_prompt, row_kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def distinct(self) -> int:
        """Distinct (exact message prefix, tools, generation prompt, options) among the renders."""
        return len({json.dumps(k, sort_keys=True, ensure_ascii=False) for k in self.keys})


def stock_sandbox(tmpl: ChatTemplate) -> ChatTemplate:
    """The same renderer on transformers' own compiled template (its stock
    ImmutableSandboxedEnvironment), instead of draftset.mask.sandbox's memoizing copy of it."""
    import copy

    from transformers.utils.chat_template_utils import _compile_jinja_template

    stock = copy.copy(tmpl)
    stock._compiled = _compile_jinja_template(tmpl.template_text)
    assert type(stock._compiled.environment) is not type(tmpl._compiled.environment)
    return stock


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
    p.add_argument(
        "--stock-sandbox",
        action="store_true",
        help="also time render & mask on transformers' stock sandbox against draftset's "
        "memoizing copy (draftset.mask.sandbox), 3 rounds, every plan checked equal",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds of --stock-sandbox")
    args = p.parse_args()
    # CPU time of one thread on the tokenizer's pool path, as a Ray actor encodes (its
    # one-thread path, TOKENIZERS_PARALLELISM=false, costs more: bench/tokenizer_paths.py)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    os.environ["RAYON_NUM_THREADS"] = "1"
    tok = qwen3_tokenizer()
    peers.CACHE.mkdir(parents=True, exist_ok=True)
    template = resolve_template(args.template) if args.template else None
    ns = SimpleNamespace(data=args.data, shared=None, seed=args.seed, template_path=template)
    path, desc = prepare_data(ns, tok, args.rows)  # type: ignore[arg-type]
    text = template.read_text() if template else None
    tmpl = ChatTemplate(TemplateSpec(str(tok), text, eot_tokens=QWEN3_STOPS))
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

    t = time.process_time()
    limit_texts = [
        tmpl.tokenizer.apply_chat_template(m, tools=tools, chat_template=text, tokenize=False)
        for m, tools in raws
    ]
    limit_s = time.process_time() - t
    t = time.process_time()
    for c in convs:
        tmpl.render(c.messages, c.tools)
    one_s = time.process_time() - t

    counting = CountingRenderer(tmpl)
    t = time.process_time()
    plans = [plan_conversation(counting, c, args.turns) for c in convs]  # type: ignore[arg-type]
    plan_s = time.process_time() - t
    row_plans = [rp for cp in plans for rp in cp.rows]

    # each encode on a fresh tokenizer (a warm BPE cache would favour whichever runs second),
    # alternating, the fastest of 3 rounds each (other load only ever adds CPU time)
    fresh = tmpl.backend.to_str()
    enc_s = limit_enc_s = float("inf")
    for _ in range(3):
        backend = Tokenizer.from_str(fresh)
        t = time.process_time()
        backend.encode_batch_fast(limit_texts, add_special_tokens=False)
        limit_enc_s = min(limit_enc_s, time.process_time() - t)
        backend = Tokenizer.from_str(fresh)
        plans_copy = copy.deepcopy(row_plans)  # encode_plans may demote turns in place
        t = time.process_time()
        encode_plans(backend, plans_copy)
        enc_s = min(enc_s, time.process_time() - t)
    t = time.process_time()
    with open(path, encoding="utf-8") as f:
        for line in f:
            json.loads(line)
    parse_s = time.process_time() - t

    n = len(convs)
    ms = 1000 / n
    print()
    print("| per row (CPU ms, one thread) | ms | vs the limit's render |")
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
    print(f"| JSON parse of the row (each, once) | {parse_s * ms:.2f} | |")
    # the contract's floor: what any build that keeps docs/semantics.md must do per row (parse,
    # the prompt and full renders, segments encoded apart, the served-prompt tails), with no
    # pipeline at all (no second read, dedup digest, writing, hashing, checks, processes)
    floor = parse_s + plan_s + enc_s
    limit_row = parse_s + limit_s + limit_enc_s
    print(
        f"| the contract's floor per row: parse + render & mask + segment encode | "
        f"{floor * ms:.2f} | {floor / limit_row:.2f}x limit-fast's parse + render + encode "
        f"({limit_row * ms:.2f}) |"
    )
    print(f"\nrenders per row: {counting.calls / n:.2f}; output rows: {len(row_plans)}")
    distinct = counting.distinct()
    print(
        f"a render cache keyed by the exact message prefix, tools, generation prompt and options "
        f"would answer {counting.calls - distinct} of {counting.calls} renders "
        f"({1 - distinct / counting.calls:.1%}) on these rows"
    )
    if args.stock_sandbox:
        stock = stock_sandbox(tmpl)
        ratios, best_ref, best_memo = [], float("inf"), float("inf")
        for r in range(args.rounds):
            t = time.process_time()
            ref = [plan_conversation(stock, c, args.turns) for c in convs]
            ref_s = time.process_time() - t
            t = time.process_time()
            got = [plan_conversation(tmpl, c, args.turns) for c in convs]
            memo_s = time.process_time() - t
            assert [[(r.segments, r.id) for r in p.rows] for p in got] == [
                [(r.segments, r.id) for r in p.rows] for p in ref
            ]
            assert [(p.context_turns, p.rejects) for p in got] == [
                (p.context_turns, p.rejects) for p in ref
            ]
            ratios.append(memo_s / ref_s)
            best_ref, best_memo = min(best_ref, ref_s), min(best_memo, memo_s)
            row_ref, row_memo = (ref_s + enc_s) * ms, (memo_s + enc_s) * ms
            print(
                f"stock sandbox -> draftset.mask.sandbox, round {r + 1}: render & mask "
                f"{ref_s * ms:.2f} -> {memo_s * ms:.2f} ms/row ({memo_s / ref_s:.2f}x); "
                f"with the segment encode {row_ref:.2f} -> {row_memo:.2f} ms/row "
                f"({row_memo / row_ref:.2f}x); every plan equal"
            )
        # other load only ever adds CPU time: the fastest round is the least disturbed one
        print(
            f"render & mask, median of {args.rounds} rounds: {statistics.median(ratios):.2f}x; "
            f"fastest rounds: {best_ref * ms:.2f} -> {best_memo * ms:.2f} ms/row "
            f"({best_memo / best_ref:.2f}x); with the segment encode "
            f"{(best_ref + enc_s) * ms:.2f} -> {(best_memo + enc_s) * ms:.2f} ms/row "
            f"({(best_memo + enc_s) / (best_ref + enc_s):.2f}x)"
        )
    if args.profile:
        # bench/profile.py would shadow the standard library's `profile`, which cProfile imports
        saved = sys.path[:]
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
        import cProfile
        import pstats

        sys.path[:] = saved
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
