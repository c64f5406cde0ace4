"""Real tokenizer files of many families (tests/real_families.py): build and verify a varied
conversation set, and every written row equals an INDEPENDENT render.

Independent: `apply_chat_template(tokenize=False)` and `tokenizer(text,
add_special_tokens=False)` only, with docs/semantics.md's rule computed here in a few lines: P =
render(turns < j, generation prompt), F = render(turns <= j), G = F after P through the first
stop token of the model's generation_config.json (+ EOS); when F has none after P, G runs on
through the text the template writes after the answer when the conversation goes on (the next
message's header) up to its first stop token (GLM). Each of P, G and the rest is tokenized on
its own. Rows are built in ``--turns each`` mode, where every row is one turn as served.

``python tests/mask/test_families_real.py`` prints the per-family table (rows written, rows
equal to the independent render, verify).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from real_families import REAL_FAMILIES, RealFamily

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALL_ARGUMENTS = '{"city": "Paris"}'

CONVERSATIONS: dict[str, dict[str, Any]] = {
    "single": {
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "2+2 is 4."},
        ]
    },
    "multi": {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"},
            {"role": "assistant", "content": "Green."},
        ]
    },
    "reasoning": {
        "messages": [
            {"role": "user", "content": "What is 3*3?"},
            {
                "role": "assistant",
                "content": "It is 9.",
                "reasoning_content": "Three times three is nine.",
            },
        ],
        "thinking": True,
    },
    "tool": {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": CALL_ARGUMENTS},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
            {"role": "assistant", "content": "It is sunny in Paris."},
        ],
    },
    "unicode": {
        "messages": [
            {"role": "user", "content": "Translate 'cat' to Japanese 🐱"},
            {"role": "assistant", "content": "猫 (ねこ) 🐈 — neko."},
        ]
    },
}


def _kwargs(fam: RealFamily, conv: dict[str, Any]) -> dict[str, Any]:
    return {**dict(fam.kwargs), **(dict(fam.thinking) if conv.get("thinking") else {})}


def _row(cid: str, fam: RealFamily, conv: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"id": cid, "messages": conv["messages"]}
    if conv.get("tools"):
        row["tools"] = conv["tools"]
    kwargs = _kwargs(fam, conv)
    if kwargs != dict(fam.kwargs):  # recorded per row, as `draftset generate` does
        row["metadata"] = {"chat_template_kwargs": kwargs}
    return row


# --- the independent render ----------------------------------------------------------------
def _as_template_reads(tok: Any, template: str | None, messages: list) -> list:
    """Arguments as the JSON text when the template concatenates strings (raises on objects)."""
    call = {"type": "function", "function": {"name": "probe_fn", "arguments": {"k": "PROBEVAL"}}}
    probe = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    try:
        if "PROBEVAL" in tok.apply_chat_template(probe, chat_template=template, tokenize=False):
            objects = True
        else:
            objects = False
    except Exception:
        objects = False
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                args = json.loads(c["function"]["arguments"])
                calls.append(
                    {
                        **c,
                        "function": {
                            **c["function"],
                            "arguments": args if objects else c["function"]["arguments"],
                        },
                    }
                )
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


def expected_rows(
    tok: Any, template: str | None, cid: str, conv: dict[str, Any], kwargs: dict, stops: tuple
) -> dict[str, tuple[list[int], list[int]]]:
    """``--turns each`` rows (id -> ids, mask) from apply_chat_template and the tokenizer."""

    def render(msgs: list, gen: bool = False) -> str:
        return tok.apply_chat_template(
            msgs,
            tools=conv.get("tools"),
            chat_template=template,
            add_generation_prompt=gen,
            tokenize=False,
            **kwargs,
        )

    def encode(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"] if text else []

    def first_stop(text: str, start: int, end: int | None = None) -> int:
        ends = [i + len(s) for s in stops if (i := text.find(s, start, end)) >= 0]
        return min(ends) if ends else -1

    msgs = _as_template_reads(tok, template, conv["messages"])
    rows: dict[str, tuple[list[int], list[int]]] = {}
    asst = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    for k, j in enumerate(asst):
        try:
            prompt, full = render(msgs[:j], True), render(msgs[: j + 1])
        except Exception:
            continue
        if not full.startswith(prompt):
            continue
        end = first_stop(full, len(prompt))
        if end >= 0:
            text, gen = full, full[len(prompt) : end]
        else:  # the stop is the next turn's header: render the conversation going on
            calls = msgs[j].get("tool_calls")
            nxt = (
                {**msgs[j + 1], "content": "NEXTPROBE"}
                if j + 1 < len(msgs)
                else {"role": "tool", "content": "NEXTPROBE", "tool_call_id": calls[0]["id"]}
                if calls
                else {"role": "user", "content": "NEXTPROBE"}
            )
            cont = render([*msgs[: j + 1], nxt])
            cut = cont.find("NEXTPROBE")
            if cut < 0:  # the template does not render that message: no stop to read
                continue
            tail_of_answer = full[-8:]
            at = cont.rfind(tail_of_answer, 0, cut) + len(tail_of_answer)
            stop = first_stop(cont, at, cut)
            if stop < 0:
                continue
            text = full + cont[at:stop]
            gen = text[len(prompt) :]
        answer = str(msgs[j].get("content") or "").strip()
        names = [c["function"]["name"] for c in msgs[j].get("tool_calls") or ()]
        if (answer and answer not in gen) or any(n not in gen for n in names):
            continue  # the template drops the turn: rejected
        rest = text[len(prompt) + len(gen) :]
        ids_p, ids_g, ids_r = encode(prompt), encode(gen), encode(rest)
        rows[f"{cid}#{k}"] = (
            ids_p + ids_g + ids_r,
            [0] * len(ids_p) + [1] * len(ids_g) + [0] * len(ids_r),
        )
    return rows


# --- build, verify, compare ------------------------------------------------------------------
@dataclass
class Outcome:
    family: str
    written: int = 0
    exact: int = 0
    expected: int = 0
    verify: str = ""
    wrong: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    rejects: dict[str, int] = field(default_factory=dict)


def run_family(name: str, work: Path) -> Outcome:
    import pyarrow as pa
    from transformers import AutoTokenizer

    from draftset.checks.verify import run_verify
    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    fam = REAL_FAMILIES[name]
    res = Outcome(name)
    src = work / f"{name}.jsonl"
    src.write_text("".join(json.dumps(_row(c, fam, v)) + "\n" for c, v in CONVERSATIONS.items()))
    out = work / f"{name}-out"
    tfile = fam.template_file()
    try:
        built = run_build(
            BuildOptions(
                sources=[Source("convs", src)],
                tokenizer=str(fam.folder()),
                out=out,
                chat_template_path=str(tfile) if tfile else None,
                template_kwargs=dict(fam.kwargs),
                turns="each",
                workers=1,
                dedup="none",
                **({"serving_engine": fam.serving_engine} if fam.serving_engine else {}),
            )
        )
    except Exception as exc:
        res.verify = f"build error: {type(exc).__name__}: {str(exc)[:200]}"
        return res
    per = built.accounting.to_json()["per_source"]["convs"]
    res.rejects = dict(per.get("rejected_by_reason") or {})
    if built.finalized:
        checks = run_verify(out, speculators=False)
        failed = [
            f"{c.name}: {c.summary}" for c in checks if c.failed and c.name != "drafter_fitness"
        ]
        res.verify = "pass" if not failed else "FAIL " + "; ".join(failed)
    else:
        res.verify = "nothing written"
    tok = AutoTokenizer.from_pretrained(str(fam.folder()))
    template = tfile.read_text(encoding="utf-8") if tfile else None
    want: dict[str, tuple[list[int], list[int]]] = {}
    for cid, conv in CONVERSATIONS.items():
        want.update(expected_rows(tok, template, cid, conv, _kwargs(fam, conv), fam.stops()))
    res.expected = len(want)
    got: dict[str, tuple[list[int], list[int]]] = {}
    for shard in sorted(out.glob("data-*.arrow")):
        with pa.memory_map(str(shard)) as mm:
            table = pa.ipc.open_stream(mm).read_all()
        for rid, ids, mask in zip(
            table["id"].to_pylist(),
            table["input_ids"].to_pylist(),
            table["loss_mask"].to_pylist(),
            strict=True,
        ):
            got[rid] = (ids, mask)
    res.written = len(got)
    for rid, row in got.items():
        if want.get(rid) == row:
            res.exact += 1
        else:
            res.wrong.append(rid)
    res.missing = sorted(set(want) - set(got))
    return res


@pytest.mark.parametrize("name", sorted(REAL_FAMILIES))
def test_real_family_rows_equal_an_independent_render(name, tmp_path):
    res = run_family(name, tmp_path)
    assert res.verify == "pass", res
    assert res.written > 0, res
    assert res.exact == res.written == res.expected, res


if __name__ == "__main__":
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    root = Path(tempfile.mkdtemp(prefix="draftset-real-families-"))
    print("| family | rows written | equal to the independent render | expected | verify |")
    print("|---|---|---|---|---|")
    for fam_name in sys.argv[1:] or sorted(REAL_FAMILIES):
        r = run_family(fam_name, root)
        extra = f" wrong {r.wrong}" if r.wrong else ""
        extra += f" missing {r.missing}" if r.missing else ""
        print(
            f"| {fam_name} | {r.written} | {r.exact} | {r.expected} | {r.verify[:160]}{extra}"
            f" rejects {r.rejects} |"
        )


# --- stop tokens: read, never guessed ---------------------------------------------------------
def _tokenizer_only(fam: RealFamily, dest: Path) -> Path:
    """The family's tokenizer files without generation_config.json (a bare tokenizer folder)."""
    dest.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (dest / name).write_bytes((fam.folder() / name).read_bytes())
    return dest


def test_without_generation_config_the_build_stops_with_one_line_naming_eot_token(tmp_path, capsys):
    """gpt-oss without its generation_config.json: a probe found <|end|> (harmony's message
    separator) and missed <|call|>; now nothing is guessed: exit 2, one line, nothing written."""
    from draftset.cli import main

    fam = REAL_FAMILIES["gptoss"]
    tok = _tokenizer_only(fam, tmp_path / "tok")
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps(_row("single", fam, CONVERSATIONS["single"])) + "\n")
    out = tmp_path / "out"
    argv = ["build", str(src), "--tokenizer", str(tok), "--out", str(out)]
    template = ["--chat-template", str(fam.template_file())]
    assert main([*argv, *template]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--eot-token" in err[0] and "generation_config.json" in err[0]
    assert not out.exists()
    # the stops given by hand: built, and verify derives the same ones from the files + manifest
    stops = ["--eot-token", "<|return|>", "--eot-token", "<|call|>"]
    assert main([*argv, *template, *stops]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["template"]["eot_tokens"] == ["<|return|>", "<|call|>"]
    from draftset.checks.verify import run_verify

    failed = [c.name for c in run_verify(out, speculators=False) if c.failed]
    assert failed in ([], ["drafter_fitness"])  # one short row: too few anchors for a drafter


def test_stop_tokens_are_the_generation_config_ones(tmp_path):
    """Llama-3.x lists <|eom_id|> (ipython turns with builtin_tools end with it), gpt-oss <|call|>
    and not <|end|>, GLM the next-turn headers: what the server stops on, read from the file."""
    from draftset.mask.template import ChatTemplate, TemplateSpec

    def stops(name: str, folder: Path | None = None) -> tuple[str, ...]:
        fam = REAL_FAMILIES[name]
        text = fam.template_file().read_text() if fam.template_file() else None
        return ChatTemplate(TemplateSpec(str(folder or fam.folder()), text)).eot_tokens

    from conftest import llama32_tokenizer_dir

    llama = ChatTemplate(TemplateSpec(str(llama32_tokenizer_dir()), _trl("llama3_1")))
    assert "<|eom_id|>" in llama.eot_tokens
    assert stops("gptoss") == ("<|return|>", "<|endoftext|>", "<|call|>")
    assert stops("glm4_7") == ("<|endoftext|>", "<|user|>", "<|observation|>")
    assert stops("glm4_0414") == ("<|endoftext|>", "<|user|>", "<|observation|>")


def _trl(name: str) -> str:
    from conftest import trl_template

    return trl_template(name).read_text()


# --- golden: GLM's next-header stop, DeepSeek's string arguments, on the real files ----------
def _template(name: str, engine: str | None = None, **kwargs: Any):
    from draftset.mask.template import ChatTemplate, TemplateSpec

    fam = REAL_FAMILIES[name]
    tfile = fam.template_file()
    text = tfile.read_text(encoding="utf-8") if tfile else None
    spec = TemplateSpec(str(fam.folder()), text, {**dict(fam.kwargs), **kwargs})
    if engine is not None:
        spec.serving_engine = engine
    return ChatTemplate(spec)


def _supervised(t: Any, row: dict[str, Any], mode: str = "all") -> tuple[list[str], str, list]:
    """(decoded supervised runs, decoded row, reject reasons) of one row, through build's path."""
    from draftset.core.records import RawRow
    from draftset.mask.encode import encode_plans
    from draftset.mask.render import plan_conversation
    from draftset.sources.normalize import normalize

    plan = plan_conversation(t, normalize(RawRow("s", 0, row)), mode)
    runs, text = [], ""
    for ids, mask in encode_plans(t.backend, plan.rows):
        ids, mask = [int(i) for i in ids], [int(m) for m in mask]
        text += t.decode(ids)
        pos = 0
        while pos < len(ids):
            end = pos
            while end < len(ids) and mask[end] == mask[pos]:
                end += 1
            if mask[pos]:
                runs.append(t.decode(ids[pos:end]))
            pos = end
    return runs, text, [r.reason for r in plan.rejects]


def test_glm4_0414_answers_run_through_the_next_user_header():
    """GLM-4-0414's template writes nothing after an answer; the model emits <|user|>."""
    row = {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello there."},
            {"role": "user", "content": "Again"},
            {"role": "assistant", "content": "Sure thing."},
        ]
    }
    runs, text, rejects = _supervised(_template("glm4_0414"), row)
    assert not rejects
    assert runs == ["\nHello there.<|user|>", "\nSure thing.<|user|>"]
    # the last answer's stop is not in the template's render of the row: the row gains it
    assert text.endswith("<|assistant|>\nSure thing.<|user|>")


def test_glm4_7_tool_call_ends_with_observation_and_the_answer_with_user():
    runs, _, rejects = _supervised(
        _template("glm4_7"), _row("tool", REAL_FAMILIES["glm4_7"], CONVERSATIONS["tool"])
    )
    assert not rejects
    assert runs == [
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
        "<|observation|>",
        "It is sunny in Paris.<|user|>",
    ]
    # thinking on: the prompt pre-fills <think>; reasoning, answer and the header are generated
    runs, _, rejects = _supervised(
        _template("glm4_7", enable_thinking=True), CONVERSATIONS["reasoning"]
    )
    assert not rejects
    assert runs == ["Three times three is nine.</think>It is 9.<|user|>"]


@pytest.mark.parametrize("mode", ["all", "each"])
def test_deepseek_v3_1_tool_calls_keep_their_arguments_as_text(mode):
    """DeepSeek-V3.1 concatenates `arguments`: given the row's JSON text, not an object (which
    made the template raise: every tool-call row was template_error) — where the serving
    engine hands the template arguments as they were sent (transformers)."""
    t = _template("deepseek_v3_1", "transformers")
    runs, _, rejects = _supervised(t, CONVERSATIONS["tool"] | {}, mode)
    assert not rejects
    assert runs == [
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        + CALL_ARGUMENTS
        + "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
        "It is sunny in Paris.<｜end▁of▁sentence｜>",
    ]


@pytest.mark.parametrize("name", ["deepseek_v3_1", "deepseek_r1"])
def test_string_argument_templates_cannot_render_a_call_vllm_serves(name):
    """vLLM (0.33, `_postprocess_messages`) parses every call's `arguments` into an object
    before the template runs; DeepSeek-V3.1's and R1's templates concatenate them and raise,
    so vLLM answers HTTP 400 to any request holding a call (an outside probe against vLLM).
    draftset gave these templates the text and built rows vLLM can never serve; under the
    `vllm` engine the turns whose render holds a call are `template_error` now, as vLLM says,
    and the turns before any call are kept."""
    runs, _, rejects = _supervised(_template(name), CONVERSATIONS["tool"] | {}, "all")
    assert (runs, rejects) == ([], ["template_error"])
    if name == "deepseek_v3_1":
        chat = {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello! How can I help?"},
                *CONVERSATIONS["tool"]["messages"],
            ],
            "tools": CONVERSATIONS["tool"].get("tools"),
        }
        runs, _, rejects = _supervised(_template(name), chat, "each")
        assert runs == ["Hello! How can I help?<｜end▁of▁sentence｜>"]
        assert rejects == ["template_error", "template_error"]


@pytest.mark.parametrize("name", ["deepseek_v3_1", "deepseek_r1"])
def test_string_argument_templates_cannot_render_a_call_sglang_serves(name):
    """sglang 0.5.14+ parses every assistant call's string `arguments` into an object before
    the template (`serving_chat.normalize_assistant_tool_call_arguments`, strict on the Jinja
    path: not a JSON object is HTTP 400), as vLLM does: DeepSeek-V3.1's and R1's templates
    concatenate them and raise, so SGLang 0.5.23 refuses any request holding a call. Read from
    its source, not run here; draftset gave these templates the text under `sglang` too."""
    runs, _, rejects = _supervised(_template(name, "sglang"), CONVERSATIONS["tool"] | {}, "all")
    assert (runs, rejects) == ([], ["template_error"])


def test_a_build_says_why_vllm_refuses_a_string_argument_templates_calls(tmp_path):
    """Rows of DeepSeek-V3.1's tool calls are `template_error` under the `vllm` engine (vLLM
    hands arguments over as objects, the template concatenates them): the build says so once,
    with what to do, rather than leaving a Jinja type error to explain it."""
    from draftset import api

    fam = REAL_FAMILIES["deepseek_v3_1"]
    src = tmp_path / "c.jsonl"
    rows = [
        {"id": "tool", **CONVERSATIONS["tool"]},
        {
            "id": "chat",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello! How can I help you today?"},
            ],
        },
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def build(engine: str | None) -> Any:
        out = tmp_path / (engine or "default")
        kw = {"serving_engine": engine} if engine else {}
        return api.build(sources=[src], tokenizer=str(fam.folder()), out=out, workers=1, **kw)

    res = build(None)
    assert res.counts["row_rejects_by_reason"] == {"template_error": 1}
    (note,) = [n for n in res.notes if "as objects" in n]
    assert "--serving-engine" in note
    res = build("transformers")
    assert not [n for n in res.notes if "as objects" in n]
    res = build("sglang")
    assert res.counts["row_rejects_by_reason"] == {"template_error": 1}
    (note,) = [n for n in res.notes if "as objects" in n]
    assert "SGLang (--serving-engine sglang)" in note


def test_deepseek_r1_renders_the_call_in_context():
    """R1's prompt pre-fills <think>: the call turn is not generable, the answer after the
    tool result is; its context holds the call with the row's arguments (an engine that
    hands the template arguments as sent)."""
    runs, text, rejects = _supervised(
        _template("deepseek_r1", "transformers"), CONVERSATIONS["tool"] | {}
    )
    assert not rejects
    assert runs == ["It is sunny in Paris.<｜end▁of▁sentence｜>"]
    assert f"get_weather\n```json\n{CALL_ARGUMENTS}\n```" in text


def test_argument_shape_is_probed_per_template():
    from draftset.mask.template import probe_string_arguments

    got = {
        n: probe_string_arguments(_template(n).render)
        for n in ("deepseek_v3_1", "deepseek_r1", "qwen3", "glm4_7", "gptoss")
    }
    assert got == {
        "deepseek_v3_1": True,
        "deepseek_r1": True,
        "qwen3": False,
        "glm4_7": False,
        "gptoss": False,
    }


# --- Mistral: mistral-common, the tokenizer vLLM's `--tokenizer-mode mistral` serves with ------
MISTRAL_TOOL = {
    "tools": TOOLS,
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call00001",  # Mistral's tool-call ids are 9 characters
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": CALL_ARGUMENTS},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call00001", "content": "sunny, 21 C"},
        {"role": "assistant", "content": "It is sunny in Paris."},
    ],
}


def test_mistral_nemo_rows_equal_mistral_common(tmp_path):
    """Mistral-NeMo built from its real tekken file (mistral-common's): every `each` row's
    context is, id for id, what mistral-common's own tokenizer encodes for the chat request
    (``encode_chat_completion``, serving mode: what vLLM feeds the model with
    ``--tokenizer-mode mistral``), and its supervised tokens are what it encodes for the
    answer after that prompt, ``</s>`` included (finetuning mode, the request ending with the
    answer). Independent of transformers' template and of draftset."""
    import pyarrow as pa
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.validator import ValidationMode
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from real_families import tekken_file

    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    fam = REAL_FAMILIES["mistral_nemo"]
    # Mistral-NeMo has no reasoning (mistral-common refuses a ThinkChunk for its tokenizer)
    skip = ("tool", "reasoning")
    convs = {c: v for c, v in CONVERSATIONS.items() if c not in skip} | {"tool9": MISTRAL_TOOL}
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(_row(c, fam, v)) + "\n" for c, v in convs.items()))
    out = tmp_path / "set"
    opts = BuildOptions([Source("convs", src)], str(fam.folder()), out, turns="each", workers=1)
    run_build(opts)
    serve = MistralTokenizer.from_file(str(tekken_file("tekken_240718")))
    train = MistralTokenizer.from_file(
        str(tekken_file("tekken_240718")), mode=ValidationMode.finetuning
    )
    with pa.memory_map(str(next(out.glob("data-*.arrow")))) as mm:
        table = pa.ipc.open_stream(mm).read_all()
    checked = 0
    for rid, ids, mask in zip(
        table["id"].to_pylist(),
        table["input_ids"].to_pylist(),
        table["loss_mask"].to_pylist(),
        strict=True,
    ):
        cid, _, k = rid.rpartition("#")
        conv = convs[cid]
        msgs = conv["messages"]
        j = [i for i, m in enumerate(msgs) if m["role"] == "assistant"][int(k)]
        tools = conv.get("tools")
        prompt = serve.encode_chat_completion(
            ChatCompletionRequest.from_openai(messages=msgs[:j], tools=tools)
        ).tokens
        full = train.encode_chat_completion(
            ChatCompletionRequest.from_openai(messages=msgs[: j + 1], tools=tools)
        ).tokens
        assert full[: len(prompt)] == prompt, rid
        start = mask.index(1)
        assert ids[:start] == prompt, rid
        assert ids[start:] == full[len(prompt) :] and all(mask[start:]), rid
        checked += 1
    # single, multi (2 turns), unicode, tool9 (2 turns)
    assert checked == 6


@pytest.mark.parametrize("mode", ["all", "each"])
def test_an_answer_right_after_an_answer_is_not_merged_into_its_run(tmp_path, mode):
    """Two assistant messages in a row under DeepSeek-V3.1, whose template writes no header
    before the second: build supervised both, back to back, as one run, which verify (every
    run one generation) failed (an outside probe). With `--turns all` the second is context
    now (`follows_answer`) in build and verify alike; `each` gives it its own row."""
    from draftset import api

    fam = REAL_FAMILIES["deepseek_v3_1"]
    row = {
        "id": "consec",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello, and welcome to the colour quiz of today."},
            {"role": "assistant", "content": "Name a colour? Blue, as the sky on a fine day."},
        ],
    }
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps(row) + "\n")
    out = tmp_path / "o"
    api.build(sources=[src], tokenizer=str(fam.folder()), out=out, workers=1, turns=mode)
    counts = json.loads((out / "manifest.json").read_text())["counts"]["total"]
    if mode == "all":
        assert counts["context_turns_by_reason"] == {"follows_answer": 1}
        assert counts["supervised_turns"] == 1
    else:
        assert counts["rows_out"] == 2
    results = api.verify(out)
    assert results.ok, [c.to_json() for c in results.checks if c.failed]
