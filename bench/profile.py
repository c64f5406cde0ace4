"""Where a draftset build spends its time, per stage, from py-spy samples.

    python bench/profile.py --rows 2000 --workers 1     # needs py-spy (pip install py-spy)
    python bench/profile.py --rows 1000 --workers 2 --cpu --data mix --template qwen3_6

Runs ``draftset build`` under ``py-spy record --idle --subprocesses --format raw`` on the
benchmark data and attributes every sample of each process's main thread to the deepest stage
found on its stack (read+normalize, render (Jinja), span derivation, encode, Arrow write,
accounting, ...). With ``--idle`` a thread waiting (on the Rust tokenizer's pool, on a worker's
result) is still sampled, so the shares are shares of wall time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data as bench_data
import peers
from run import build_args, draftset_cli, qwen3_tokenizer, resolve_template

# (substring of a frame "function (file:line)", stage); the deepest match on a stack wins (on
# one frame, the later entry). Each names a draftset function as py-spy prints it (checked
# by tests/test_bench.py, so a rename cannot silently move its time elsewhere) or, in
# STDLIB_NEEDLES, the standard library's.
STAGES: list[tuple[str, str]] = [
    ("_find_and_load", "imports"),
    ("_process_worker", "worker: wait for work / pickle"),
    ("import_tokenizer_loader", "imports"),  # the helper's first job: transformers, torch
    ("ChatTemplate.__init__", "tokenizer + template load"),
    ("Renderer.from_kit", "tokenizer + template load"),
    ("init_worker", "worker start-up (imports, tokenizer)"),
    ("plan_read", "plan the read ranges (pre-pass)"),
    ("count_rows", "count rows (pre-pass)"),
    ("Readers.scan", "read + facts (first pass)"),
    ("Readers.selected_rows", "read + normalize (second pass)"),
    ("cut_blocks", "read + normalize + select (driver reads)"),
    ("RangedSelection.decide", "selection decisions (driver)"),
    ("MaskStep.process", "row step (other)"),
    ("plan_conversation", "span derivation"),
    ("Renderer.render", "render (Jinja)"),
    ("ChatTemplate.render_reference", "render (Jinja)"),
    ("encode_plans", "encode (Rust encode_batch + ids/mask assembly)"),
    ("apply_length_rules", "length rules"),
    ("count_results", "accounting"),
    ("write_results", "Arrow write"),
    ("shard_facts", "read the shard back (check facts)"),
    ("sha256_file", "file hashes"),
    ("write_token_freq", "token_freq (torch import + save)"),
    ("build_manifest", "manifest"),
    ("_drive", "driver: gather block results"),
    ("fast_checks", "post-build fast checks (verify)"),
]
STDLIB_NEEDLES = {"_find_and_load", "_process_worker"}


# stages an import below them does not belong to: a worker's loop, the helper's first job
IMPORTS_OWN = {"startup / other", "worker: wait for work / pickle"}


def classify(frames: list[str]) -> str:
    """The stage of one sampled stack: its deepest match, but an import (a lazy one) counts
    to the stage that asked for it, unless that is only a process's main loop."""
    stage = "startup / other"
    for frame in frames:
        for needle, name in STAGES:
            if needle in frame and not (name == "imports" and stage not in IMPORTS_OWN):
                stage = name
    return stage


def parse(raw: Path, rate: int) -> dict[str, Counter[str]]:
    """Seconds per stage, per process role (main / worker), main threads only."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        procs = [f for f in frames if f.startswith("process ")]
        body = [f for f in frames if not f.startswith(("process ", "thread "))]
        role = "worker" if len(procs) > 1 else "main"
        is_main_thread = any(
            f.startswith("<module> (draftset") or f.startswith("_process_worker") for f in body
        ) or (role == "worker" and any("spawn_main" in f for f in body))
        if not is_main_thread:
            continue
        out[role][classify(body)] += int(count) / rate
    return out


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument(
        "--data", help="JSONL to build, or 'mix' (as bench/run.py; default: the synthetic rows)"
    )
    p.add_argument("--template", help="trl template name or file (as bench/run.py)")
    p.add_argument("--rate", type=int, default=200, help="samples per second")
    p.add_argument("--raw", type=Path, help="keep py-spy's raw samples here")
    p.add_argument(
        "--cpu",
        action="store_true",
        help="on-CPU samples only (no --idle): where each process burns CPU, not where it waits",
    )
    args = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("py-spy not found: pip install py-spy")
    tok = qwen3_tokenizer()
    peers.CACHE.mkdir(parents=True, exist_ok=True)  # a fresh machine has no cache folder yet
    template = resolve_template(args.template) if args.template else None
    if args.data == "mix":
        text = template.read_text() if template else None
        if text is None:
            from run import _own_template

            text = _own_template(tok)
        data = bench_data.cached_mix(args.rows, tok, text, peers.CACHE)
    else:
        data = Path(args.data) if args.data else None
        data = data or bench_data.cached_synthetic(args.rows, tok, peers.CACHE)
    with tempfile.TemporaryDirectory(dir=peers.CACHE) as tmp:
        raw = args.raw or Path(tmp) / "raw.txt"
        cmd = [spy, "record", "--threads", "--subprocesses", "--format", "raw"]
        cmd += [] if args.cpu else ["--idle"]
        cmd += ["--rate", str(args.rate), "-o", str(raw), "--"]
        cmd += [str(draftset_cli())]
        # draftset's own default --max-length, as run.py's
        cmd += build_args(data, tok, Path(tmp) / "out", args.workers, 4096, template)
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stages = parse(raw, args.rate)
    what = "on-CPU seconds" if args.cpu else "seconds of wall time"
    print(f"draftset build --workers {args.workers}, {data.name}: main threads, {what}")
    for role, counter in sorted(stages.items()):
        total = sum(counter.values())
        print(f"\n{role} process{'es (summed)' if role == 'worker' else ''}: {total:.1f} s")
        print("| stage | seconds | share |\n|---|---|---|")
        for stage, sec in counter.most_common():
            print(f"| {stage} | {sec:.2f} | {sec / total:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
