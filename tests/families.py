"""Every chat template trl ships, over the conversations that broke families (issue 11).

Test data, not a product registry: each family's stop tokens are what its checkpoints'
``generation_config.json`` lists as ``eos_token_id`` (what vLLM and SGLang stop on). The values
were recalled from the hub files named in ``source`` (tests run offline, nothing is fetched).
Tokenizers are stand-ins: the Qwen3 tokenizer (Llama-3.2's for Llama templates) plus the
family's special tokens, found in the template text, with a ``generation_config.json`` holding
the family's stop ids. The contract is about text and special tokens, so that is fair.

``python tests/families.py`` prints the per-template table (templates, rows written, exact,
verify) the issue asks for.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import REPO, _package_dir, llama32_tokenizer_dir, qwen3_tokenizer_dir

SERVING_DATA = REPO / "tests" / "data" / "serving"


@dataclass(frozen=True)
class Family:
    name: str
    base: str  # "qwen3" or "llama"
    bos: str | None
    eos: str
    stop: tuple[str, ...]  # generation_config.json eos_token_id, as token strings
    source: str
    extra: tuple[str, ...] = ()  # special tokens the template regex does not catch


_Q = "(recalled; tests are offline)"
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "qwen",
            "qwen3",
            None,
            "<|im_end|>",
            ("<|im_end|>", "<|endoftext|>"),
            f"Qwen/Qwen3-8B generation_config.json eos_token_id [151645, 151643] {_Q}",
        ),
        Family(
            "llama3",
            "llama",
            "<|begin_of_text|>",
            "<|eot_id|>",
            ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
            "meta-llama/Llama-3.1-8B-Instruct generation_config.json eos_token_id"
            f" [128001, 128008, 128009] {_Q}",
        ),
        Family(
            "gptoss",
            "qwen3",
            "<|startoftext|>",
            "<|return|>",
            ("<|return|>", "<|endoftext|>", "<|call|>"),
            f"openai/gpt-oss-20b generation_config.json eos_token_id [200002, 199999, 200012] {_Q}",
        ),
        Family(
            "cohere",
            "qwen3",
            "<BOS_TOKEN>",
            "<|END_OF_TURN_TOKEN|>",
            ("<|END_OF_TURN_TOKEN|>",),
            f"CohereLabs/aya-expanse-8b generation_config.json eos_token_id 255001 {_Q}",
            ("<BOS_TOKEN>",),
        ),
        Family(
            "cohere2",
            "qwen3",
            "<BOS_TOKEN>",
            "<|END_OF_TURN_TOKEN|>",
            ("<|END_OF_TURN_TOKEN|>",),
            "CohereLabs/c4ai-command-r7b-12-2024 (Cohere2) generation_config.json eos_token_id"
            f" 255001 {_Q}",
            ("<BOS_TOKEN>",),
        ),
        Family(
            "deepseek",
            "qwen3",
            "<｜begin▁of▁sentence｜>",
            "<｜end▁of▁sentence｜>",
            ("<｜end▁of▁sentence｜>",),
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B generation_config.json eos_token_id 151643;"
            f" DeepSeek-V3: 1 (both <｜end▁of▁sentence｜>) {_Q}",
        ),
        Family(
            "gemma",
            "qwen3",
            "<bos>",
            "<eos>",
            ("<eos>", "<end_of_turn>"),
            f"google/gemma-2-9b-it generation_config.json eos_token_id [1, 107] {_Q}",
            ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"),
        ),
        Family(
            "gemma3",
            "qwen3",
            "<bos>",
            "<eos>",
            ("<eos>", "<end_of_turn>"),
            f"google/gemma-3-4b-it generation_config.json eos_token_id [1, 106] {_Q}",
            ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>"),
        ),
        Family(
            "gemma4",
            "qwen3",
            "<bos>",
            "<eos>",
            ("<eos>", "<turn|>", "<|tool_response>"),
            f"google/gemma-4-E2B-it generation_config.json eos_token_id [1, 106, 50] {_Q}",
            ("<bos>", "<eos>"),
        ),
        Family(
            "glm4moe",
            "qwen3",
            None,
            "<|endoftext|>",
            ("<|endoftext|>", "<|user|>", "<|observation|>"),
            f"zai-org/GLM-4.5 generation_config.json eos_token_id [151329, 151336, 151338] {_Q}",
            ("[gMASK]", "<sop>"),
        ),
        Family(
            "phi3",
            "qwen3",
            "<s>",
            "<|endoftext|>",
            ("<|endoftext|>", "<|assistant|>", "<|end|>"),
            "microsoft/Phi-3-mini-4k-instruct generation_config.json eos_token_id"
            f" [32000, 32001, 32007]; Phi-3.5-mini-instruct the same ids {_Q}",
            ("<s>",),
        ),
        Family(
            "lfm2",
            "qwen3",
            "<|startoftext|>",
            "<|im_end|>",
            ("<|im_end|>",),
            f"LiquidAI/LFM2-1.2B generation_config.json eos_token_id 7 {_Q}",
        ),
        Family(
            "nemotron3",
            "qwen3",
            None,
            "<|im_end|>",
            ("<|im_end|>", "</s>"),
            "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B generation_config.json eos_token_id [2, 11]"
            f" {_Q}",
            ("</s>",),
        ),
        Family(
            "smolvlm",
            "qwen3",
            "<|im_start|>",
            "<end_of_utterance>",
            ("<end_of_utterance>",),
            f"HuggingFaceTB/SmolVLM-Instruct generation_config.json eos_token_id 49279 {_Q}",
            ("<end_of_utterance>", "<image>"),
        ),
        Family(
            "idefics3",
            "qwen3",
            "<|begin_of_text|>",
            "<end_of_utterance>",
            ("<|end_of_text|>", "<end_of_utterance>"),
            "HuggingFaceM4/Idefics3-8B-Llama3 generation_config.json eos_token_id"
            f" [128001, 128256] {_Q}",
            ("<end_of_utterance>", "<image>"),
        ),
        Family(
            "llava_next",
            "qwen3",
            "<s>",
            "</s>",
            ("</s>",),
            f"llava-hf/llava-v1.6-mistral-7b-hf generation_config.json eos_token_id 2 {_Q}",
            ("<s>", "</s>", "<image>"),
        ),
        Family(
            "muse_glimmer",
            "qwen3",
            "<|begin_of_text|>",
            "<|eot|>",
            ("<|eot|>",),
            "meta-models/Muse-Glimmer-30B: no generation_config.json known; taken from the"
            " template: <|eot|> ends a turn, <|eom|> only separates the messages (reasoning,"
            " answer) of one turn (muse_glimmer.jinja line 132), like harmony's <|end|>",
        ),
    )
}

_PREFIXES = (
    ("qwen", "qwen"),
    ("llama3", "llama3"),
    ("gptoss", "gptoss"),
    ("cohere2", "cohere2"),
    ("cohere", "cohere"),
    ("deepseek", "deepseek"),
    ("gemma3", "gemma3"),
    ("gemma4", "gemma4"),
    ("diffusion_gemma", "gemma4"),
    ("gemma", "gemma"),
    ("glm4moe", "glm4moe"),
    ("phi3", "phi3"),
    ("lfm2", "lfm2"),
    ("nemotron_3", "nemotron3"),
    ("smolvlm", "smolvlm"),
    ("idefics3", "idefics3"),
    ("llava_next", "llava_next"),
    ("muse_glimmer", "muse_glimmer"),
)

_SPECIAL = re.compile(r"<\|[^|<>\s{}]+\|>|<｜[^｜]+｜>|<\|[\w\"]+>|<\w+\|>")


def templates_dir() -> Path:
    return _package_dir("trl") / "chat_templates"


def template_names() -> list[str]:
    """Every template in the installed trl wheel (new ones are covered without edits)."""
    return sorted(p.stem for p in templates_dir().glob("*.jinja"))


def family_of(template: str) -> Family:
    for prefix, fam in _PREFIXES:
        if template.startswith(prefix):
            return FAMILIES[fam]
    raise KeyError(f"no family for template {template!r}: add it to tests/families.py")


def family_templates(fam: Family) -> list[str]:
    return [t for t in template_names() if family_of(t) is fam]


def special_tokens(fam: Family) -> list[str]:
    """The family's special tokens: found in its templates' text, plus BOS/EOS/stop tokens."""
    found: list[str] = []
    for name in family_templates(fam):
        for tok in _SPECIAL.findall((templates_dir() / f"{name}.jinja").read_text()):
            if tok not in found:
                found.append(tok)
    for tok in (*fam.extra, *fam.stop, fam.eos, fam.bos):
        if tok and tok not in found:
            found.append(tok)
    return found


def make_tokenizer(fam: Family, root: Path) -> Path:
    """A tokenizer folder for the family: base tokenizer + its special tokens + stop ids."""
    from tokenizers import AddedToken, Tokenizer

    base = qwen3_tokenizer_dir() if fam.base == "qwen3" else llama32_tokenizer_dir()
    out = root / fam.name
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(base / "tokenizer.json"))
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in special_tokens(fam)]
    )
    tok.save(str(out / "tokenizer.json"))
    cfg = json.loads((base / "tokenizer_config.json").read_text())
    cfg.pop("added_tokens_decoder", None)
    cfg.pop("chat_template", None)
    cfg.pop("additional_special_tokens", None)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["bos_token"] = fam.bos
    cfg["eos_token"] = fam.eos
    cfg["add_bos_token"] = False
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    stop_ids = [tok.token_to_id(t) for t in fam.stop]
    assert None not in stop_ids, fam
    gen = {"eos_token_id": stop_ids if len(stop_ids) > 1 else stop_ids[0]}
    (out / "generation_config.json").write_text(json.dumps(gen))
    return out


# --- the conversations --------------------------------------------------------------------------
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def _u(c: str) -> dict[str, Any]:
    return {"role": "user", "content": c}


def _a(c: str, **k: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": c, **k}


CONVERSATIONS: dict[str, dict[str, Any]] = {
    "assistant_first": {
        "messages": [_a("Hello! How can I help?"), _u("Name a color."), _a("Blue.")]
    },
    "reasoning": {"messages": [_u("What is 2+2?"), _a("4", reasoning_content="Add two and two.")]},
    "inline_think": {
        "messages": [_u("What is 3+3?"), _a("<think>\nAdd three and three.\n</think>\n\n6")]
    },
    "multi_turn": {"messages": [_u("Hi"), _a("Hello!"), _u("Name a fruit."), _a("Apple.")]},
    "reasoning_multi": {
        "messages": [
            _u("5+5?"),
            _a("10", reasoning_content="Add five."),
            _u("6+6?"),
            _a("12", reasoning_content="Add six."),
        ]
    },
    "tool_call": {
        "messages": [
            _u("Weather in Paris?"),
            _a("", tool_calls=[CALL]),
            {"role": "tool", "name": "get_weather", "content": '{"temp": 21}'},
            _a("It is 21C."),
        ],
        "tools": TOOLS,
    },
    "system": {
        "messages": [{"role": "system", "content": "You are terse."}, _u("Hey"), _a("Hey there.")]
    },
    "whitespace_reasoning": {
        "messages": [
            _u("7+7?"),
            _a("14", reasoning_content=" "),
            _u("8+8?"),
            _a("16", reasoning_content="\n"),
        ]
    },
}


# --- the independent expectation ------------------------------------------------------------------
_TOKENIZERS: dict[str, Any] = {}
_ORIGINAL_LOAD: dict[str, Any] = {}


def hf_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    key = str(path)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = _ORIGINAL_LOAD.get("f", AutoTokenizer.from_pretrained)(key)
    return _TOKENIZERS[key]


def rows_text(out: Path, tokenizer: Path) -> dict[str, str]:
    """A built set's rows decoded (special tokens kept), by id."""
    from draftset.output.readback import open_output

    tok = hf_tokenizer(tokenizer)
    folder = open_output(out)
    return {
        rid: tok.decode(folder.row(i)["input_ids"], skip_special_tokens=False)
        for i, rid in enumerate(folder.ids())
    }


def served_text(
    template: Path, tokenizer: Path, messages: list, tools: list | None = None, **kwargs: Any
) -> str:
    """The independent expectation of a serving-engine test: transformers' own render of the
    messages as the engine hands them over (written out by hand in each test)."""
    return hf_tokenizer(tokenizer).apply_chat_template(
        messages, tools=tools, chat_template=template.read_text(), tokenize=False, **kwargs
    )


def _render(tok: Any, template: str, messages: list, tools: Any, gen: bool = False) -> str:
    """`apply_chat_template` as vLLM 0.33 runs it: it pins transformers < 5.21, which aliases
    no reasoning field, and gives an answer's reasoning as ``reasoning`` and
    ``reasoning_content``, never as ``thinking`` (transformers 5.21+ adds that one: a template
    reading ``message.thinking`` alone, gpt-oss's and LFM2.5's, renders no reasoning there)."""
    if not any("reasoning_content" in m for m in messages):
        return tok.apply_chat_template(
            messages, tools=tools, chat_template=template, add_generation_prompt=gen, tokenize=False
        )
    from transformers.utils import chat_template_utils as ctu

    served = [
        {**m, "reasoning": m["reasoning_content"]} if "reasoning_content" in m else m
        for m in messages
    ]
    return ctu._compile_jinja_template(template).render(
        messages=ctu._plain_template_data(served),
        tools=ctu._plain_template_data(tools),
        documents=None,
        add_generation_prompt=gen,
        **tok.special_tokens_map,
    )


@functools.cache
def _vllm_formats() -> dict[str, str]:
    """template text -> vLLM's content format for it, as vLLM 0.33 itself detected it
    (tests/data/serving/content_formats.json; tests/checks/test_render_server.py re-checks)."""
    recorded = json.loads((SERVING_DATA / "content_formats.json").read_text())["formats"]
    return {(templates_dir() / f"{n}.jinja").read_text(): f for n, f in recorded.items()}


def _as_served(template: str, messages: list) -> list:
    """The messages as vLLM hands them to the template: each call given an id and each
    result paired with the next call not answered yet, as a client must send them; then, for
    a template vLLM reads as "openai" content, every non-tool content as a list of parts
    (an empty string as one empty part)."""
    out, pending = [], []
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [
                {**c, "id": c.get("id") or f"call_{i}_{k}"} for k, c in enumerate(m["tool_calls"])
            ]
            m = {**m, "tool_calls": calls}
            pending = [c["id"] for c in calls]
        elif m["role"] == "tool" and "tool_call_id" not in m and pending:
            m = {**m, "tool_call_id": pending.pop(0)}
        out.append(m)
    if _vllm_formats()[template] != "openai":
        return out
    return [
        {**m, "content": [{"type": "text", "text": m["content"]}]}
        if m["role"] != "tool" and isinstance(m.get("content"), str)
        else m
        for m in out
    ]


def _inline_moved(tok: Any, template: str, messages: list) -> list:
    """The documented inline-reasoning rule, re-implemented: a leading ``<think>…</think>`` of
    an answer becomes ``reasoning_content`` only when the template renders reasoning_content
    before the answer."""
    probe = [_u("Hi"), _a("ANSWERPROBE", reasoning_content="REASONPROBE")]
    try:
        text = _render(tok, template, probe, None)
    except Exception:
        return messages
    if not 0 <= text.find("REASONPROBE") < text.find("ANSWERPROBE"):
        return messages
    out = []
    for m in messages:
        c = m.get("content")
        if m["role"] == "assistant" and isinstance(c, str) and c.startswith("<think>"):
            inner, _, rest = c[len("<think>") :].partition("</think>")
            m = {**m, "reasoning_content": inner.strip("\n"), "content": rest.lstrip("\n")}
        out.append(m)
    return out


def expected_row(
    tok: Any, template: str, conv: dict[str, Any], stops: tuple[str, ...]
) -> tuple[str, list[tuple[int, str]]] | None:
    """(full render, [(offset, generation)]) for `--turns all`, from `apply_chat_template` only.

    A turn is supervised when something comes before it, its answer is not a placeholder,
    render(0..j) starts with render(0..j-1, generation prompt) P, a stop token follows, and the
    full render holds that generation right after P. None when nothing is supervised or the
    template raises.
    """
    messages = _as_served(template, _inline_moved(tok, template, conv["messages"]))
    # tool-call arguments stay objects: vLLM (the default engine, 0.33 `_postprocess_messages`)
    # parses them before any template runs, so a template that concatenates them raises (the
    # string-arguments rule of other engines: tests/mask/test_families_real.py, DeepSeek-V3.1)
    tools = conv.get("tools")
    asst = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    try:
        whole = _render(tok, template, messages, tools)
    except Exception:
        return None
    gens: list[tuple[int, str]] = []
    for j in asst:
        m = _inline_moved(tok, template, conv["messages"])[j]
        if j == 0:
            continue
        answer = (str(m.get("reasoning_content") or "") + str(m.get("content") or "")).strip()
        if not m.get("tool_calls") and answer in ("", "OK", "OK."):
            continue
        try:
            prompt = _render(tok, template, messages[:j], tools, True)
            full = _render(tok, template, messages[: j + 1], tools)
        except Exception:
            return None
        if not full.startswith(prompt):
            continue
        ends = [i + len(s) for s in stops if (i := full.find(s, len(prompt))) >= 0]
        if ends:
            gen = full[len(prompt) : min(ends)]
        else:  # no stop after the answer: the next turn's header is it (GLM), if any
            after = _stop_written_later(tok, template, messages, tools, j, full, stops)
            if after is None:
                continue
            gen = full[len(prompt) :] + after
            if j == asst[-1]:
                whole = whole + after
        if whole.startswith(prompt) and whole.startswith(gen, len(prompt)):
            text = str(conv["messages"][j].get("content") or "")
            text = text.rpartition("</think>")[2].strip()  # the answer after any inline reasoning
            names = [c["function"]["name"] for c in m.get("tool_calls") or ()]
            if (text and text not in gen) or any(n not in gen for n in names):
                return None  # the template drops the turn's text: the row is rejected
            gens.append((len(prompt), gen))
    gens = _served_tokens_rule(tok, whole, gens)
    return (whole, gens) if gens else None


def _stop_written_later(
    tok: Any, template: str, messages: list, tools: Any, j: int, full: str, stops: tuple
) -> str | None:
    """What follows answer j up to the first stop token when the conversation goes on (the
    real next message, else a user turn or a tool result after tool calls): the template
    writes the stop the model emits only with the next turn (docs/semantics.md)."""
    if j + 1 < len(messages):
        nxt = {**messages[j + 1], "content": "NEXTPROBE"}
    elif messages[j].get("tool_calls"):
        nxt = {"role": "tool", "content": "NEXTPROBE", "tool_call_id": "call_1"}
    else:
        nxt = {"role": "user", "content": "NEXTPROBE"}
    try:
        cont = _render(tok, template, [*messages[: j + 1], nxt], tools)
    except Exception:
        return None
    cut = cont.find("NEXTPROBE")
    at = cont.rfind(full[-8:], 0, cut) + len(full[-8:]) if cut >= 0 else -1
    ends = [i + len(s) for s in stops if at >= 0 and (i := cont.find(s, at, cut)) >= 0]
    return cont[at : min(ends)] if ends else None


def _served_tokens_rule(tok: Any, whole: str, gens: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """docs/semantics.md, "Tokens before a turn": a later turn stays supervised only when the
    row's tokens before it (context and kept generations each tokenized alone) equal its
    served prompt, the text before it tokenized in one piece."""

    def enc(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    kept: list[tuple[int, str]] = []
    row: list[int] = []
    end = 0
    for start, gen in gens:
        before = row + enc(whole[end:start])
        if kept and before != enc(whole[:start]):
            continue  # history_tokens_differ
        kept.append((start, gen))
        row = before + enc(gen)
        end = start + len(gen)
    return kept


def decoded_runs(tok: Any, ids: list[int], mask: list[int]) -> tuple[str, list[tuple[int, str]]]:
    """The row's text and its supervised runs (offset, text), decoding run by run."""
    text, runs, pos = "", [], 0
    while pos < len(ids):
        end = pos
        while end < len(ids) and mask[end] == mask[pos]:
            end += 1
        piece = tok.decode(
            ids[pos:end], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        if mask[pos]:
            runs.append((len(text), piece))
        text += piece
        pos = end
    return text, runs


@dataclass
class Outcome:
    template: str
    family: str
    written: int = 0
    exact: int = 0
    expected: int = 0
    missing: list[str] = field(default_factory=list)  # expected rows build did not write
    wrong: list[str] = field(default_factory=list)  # written rows that differ from expectation
    verify_failed: list[str] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return self.error is None and not self.verify_failed


def run_template(name: str, tokdir: Path, work: Path) -> Outcome:
    """Build the conversations with one template (Python API, one worker), verify, compare."""
    from draftset.checks.verify import run_verify
    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    fam = family_of(name)
    res = Outcome(name, fam.name)
    src = work / f"{name}.jsonl"
    with src.open("w") as f:
        for cid, conv in CONVERSATIONS.items():
            f.write(json.dumps({"id": cid, **conv}) + "\n")
    out = work / f"{name}-out"
    template_path = templates_dir() / f"{name}.jinja"
    try:
        built = run_build(
            BuildOptions(
                sources=[Source("convs", src)],
                tokenizer=str(tokdir),
                out=out,
                chat_template_path=str(template_path),
                workers=1,
                dedup="none",
            )
        )
        res.notes = list(built.notes)
        # nothing to write (every row rejected) leaves no folder, so there is nothing to verify
        checks = run_verify(out, speculators=False) if built.finalized else []
        if not built.finalized and out.exists():
            res.error = f"build wrote nothing but left {out} behind"
            return res
    except Exception as exc:  # the table records it; the test fails on it
        res.error = f"{type(exc).__name__}: {exc}"
        return res
    res.verify_failed = [
        f"{c.name}: {c.summary}" for c in checks if c.failed and c.name != "drafter_fitness"
    ]
    tok = hf_tokenizer(tokdir)
    template = template_path.read_text()
    want = {
        cid: e
        for cid, conv in CONVERSATIONS.items()
        if (e := expected_row(tok, template, conv, fam.stop)) is not None
    }
    res.expected = len(want)
    import pyarrow as pa

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
    for rid, (ids, mask) in got.items():
        if rid in want and decoded_runs(tok, ids, mask) == want[rid]:
            res.exact += 1
        else:
            res.wrong.append(rid)
    res.missing = sorted(set(want) - set(got))
    return res


@contextlib.contextmanager
def tokenizers_loaded_once() -> Iterator[None]:
    """Load each stand-in tokenizer folder once (build and verify load it per template).

    Speed only: `ChatTemplate` never mutates the tokenizer object it loads.
    Re-entrant: inside another (test_families.py's session-wide fixture stays on for every later
    test file), it changes nothing; the loader it keeps is always transformers' own (a nested one
    kept the outer cache as "the original", which then called itself: RecursionError).
    """
    from transformers import AutoTokenizer

    if "f" in _ORIGINAL_LOAD:  # already on
        yield
        return
    original = AutoTokenizer.from_pretrained
    _ORIGINAL_LOAD["f"] = original

    def cached(path: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return original(path, *args, **kwargs)
        return hf_tokenizer(Path(path))

    AutoTokenizer.from_pretrained = cached  # type: ignore[method-assign]
    try:
        yield
    finally:
        AutoTokenizer.from_pretrained = original  # type: ignore[method-assign]
        del _ORIGINAL_LOAD["f"]


def run_all(names: list[str] | None = None, root: Path | None = None) -> list[Outcome]:
    root = root or Path(tempfile.mkdtemp(prefix="draftset-families-"))
    tokdirs: dict[str, Path] = {}
    results = []
    with tokenizers_loaded_once():
        for name in names or template_names():
            fam = family_of(name)
            if fam.name not in tokdirs:
                tokdirs[fam.name] = make_tokenizer(fam, root / "tok")
            results.append(run_template(name, tokdirs[fam.name], root))
    return results


def table(results: list[Outcome]) -> str:
    lines = [
        "| template | family | rows written | exact | expected | verify |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        verify = "pass" if r.agree else ("ERROR " + str(r.error) if r.error else "FAIL")
        extra = []
        if r.wrong:
            extra.append("wrong " + ",".join(r.wrong))
        if r.missing:
            extra.append("missing " + ",".join(r.missing))
        if r.verify_failed:
            extra.append("; ".join(v[:90] for v in r.verify_failed))
        note = (" — " + " / ".join(extra)) if extra else ""
        cells = [r.template, r.family, r.written, r.exact, r.expected, verify + note]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    n = len(results)
    lines.append(
        f"\n{n} templates; verify passes on {sum(r.agree for r in results)}; rows written"
        f" {sum(r.written for r in results)}, exact {sum(r.exact for r in results)}, expected"
        f" {sum(r.expected for r in results)}; templates with every row exact and none missing:"
        f" {sum(1 for r in results if r.exact == r.written == r.expected)}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    print(table(run_all(sys.argv[1:] or None)))
