"""Benchmark data: deterministic synthetic conversations, or rows taken from real files.

Every benchmarked program reads the same JSONL file of ShareGPT rows
(``{"id", "conversations": [{"from", "value"}, ...]}``), the shape all three accept.

The synthetic rows are multi-turn chats (1-4 exchanges, sometimes a system prompt) whose text
mixes prose built from a seeded vocabulary, Python code blocks, lists, numbers and some Chinese,
sized to 800-1000 Qwen3 tokens as rendered by the real template. The generator is seeded and
uses nothing but ``random.Random``, so the same ``--rows`` and seed give the same file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Row = dict[str, Any]

GENERATOR_VERSION = "1"
TOKENS_LOW, TOKENS_HIGH = 800, 1000


def _vocab(words: str) -> tuple[str, ...]:
    return tuple(words.split())


_NOUNS = _vocab(
    "system model cache request server token budget queue worker thread process memory buffer "
    "record schema table column index query result error message value function module package "
    "library dataset sample batch window stream file folder path network packet latency "
    "throughput benchmark profile report chart metric signal pattern rule policy contract user "
    "client session account invoice order payment garden river mountain city village museum "
    "recipe kitchen oven bread flour engine wheel bicycle train station ticket journey weather "
    "forecast season harvest market price budget plan project team meeting deadline document "
    "chapter story character author reader language grammar sentence paragraph argument theory "
    "experiment hypothesis observation measurement equation matrix vector gradient optimizer"
)
_VERBS = _vocab(
    "reads writes checks builds sends returns loads stores parses renders encodes splits merges "
    "sorts filters counts measures compares explains describes improves reduces increases "
    "handles validates updates creates removes schedules retries caches streams maps tracks"
)
_ADJS = _vocab(
    "fast slow simple complex stable fragile large small quiet noisy careful hidden visible "
    "empty full recent ancient local remote shared private expensive cheap reliable flexible "
    "strict loose modern classic useful obvious subtle precise rough typical rare common"
)
_ADVS = _vocab("quickly carefully rarely often usually quietly clearly safely slowly directly")
_CONNECTORS = (
    "However,",
    "In practice,",
    "For example,",
    "As a result,",
    "On the other hand,",
    "In most cases,",
    "First,",
    "Then",
    "Finally,",
    "Note that",
    "Because of this,",
    "In short,",
)
_QUESTIONS = (
    "How does the {n} handle a {a} {n2}?",
    "Can you explain why the {n} {v} the {n2} so {adv}?",
    "What is the best way to make a {a} {n} that {v} every {n2}?",
    "Could you write a short function that {v} a list of {n}s?",
    "Why would a {a} {n} fail when the {n2} is {a2}?",
    "Please compare a {a} {n} with a {a2} {n2}.",
    "I have a {n} that {v} the {n2} {adv}. What should I change?",
    "Summarize how a {n} and a {n2} work together.",
)
_CJK = (
    "这个系统在处理大量数据时需要保持稳定。",
    "我们应该先检查缓存，然后再发送请求。",
    "模型的输出取决于输入的质量和长度。",
    "请注意，每个批次的大小会影响内存的使用。",
    "在实际应用中，这种方法通常更加可靠。",
    "首先读取文件，其次解析内容，最后写入结果。",
    "天气预报说明天会下雨，所以我们改了计划。",
    "这个函数返回一个包含所有记录的列表。",
)
_SYSTEMS = (
    "You are a helpful assistant.",
    "You are a concise technical assistant. Answer with short, correct explanations.",
    "You are an expert Python developer who writes clear, tested code.",
    "你是一个乐于助人的助手，请用简洁的语言回答。",
)


def _words(rng: random.Random) -> dict[str, str]:
    return {
        "n": rng.choice(_NOUNS),
        "n2": rng.choice(_NOUNS),
        "v": rng.choice(_VERBS),
        "a": rng.choice(_ADJS),
        "a2": rng.choice(_ADJS),
        "adv": rng.choice(_ADVS),
    }


def _sentence(rng: random.Random) -> str:
    w = _words(rng)
    shape = rng.randrange(5)
    if shape == 0:
        s = f"The {w['a']} {w['n']} {w['v']} the {w['n2']} {w['adv']}."
    elif shape == 1:
        c = rng.choice(_CONNECTORS)
        s = f"{c} a {w['n']} {w['v']} each {w['n2']} before it becomes {w['a']}."
    elif shape == 2:
        k = rng.randrange(2, 500)
        pct = rng.randrange(1, 99)
        s = f"With {k} {w['n']}s, the {w['n2']} {w['v']} about {pct}% of the load."
    elif shape == 3:
        s = (
            f"A {w['a']} {w['n']} is {w['adv']} better than a {w['a2']} one "
            f"when the {w['n2']} {w['v']} data."
        )
    else:
        s = f"{rng.choice(_CONNECTORS)} the {w['n2']} {w['adv']} {w['v']} what the {w['n']} needs."
    return s[0].upper() + s[1:]


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng) for _ in range(sentences))


def _code(rng: random.Random) -> str:
    w = _words(rng)
    name = f"{w['v'].rstrip('s')}_{w['n']}s"
    arg = f"{w['n2']}s"
    limit = rng.randrange(2, 200)
    lines = [
        "```python",
        f"def {name}({arg}: list[dict], limit: int = {limit}) -> list[dict]:",
        f'    """Return the {w["a"]} {w["n"]}s, at most `limit` of them."""',
        "    out = []",
        f"    for item in {arg}:",
        f"        if item.get({w['a']!r}) and len(out) < limit:",
        f"            score = item.get('score', 0) * {rng.randrange(2, 9)}",
        f"            out.append({{'{w['n']}': item['{w['n']}'], 'score': score}})",
        "    return sorted(out, key=lambda x: x['score'], reverse=True)",
        "",
        f"print({name}([{{'{w['a']}': True, '{w['n']}': {rng.randrange(100)}}}]))",
        "```",
    ]
    return "\n".join(lines)


def _list(rng: random.Random) -> str:
    return "\n".join(
        f"{i + 1}. **{rng.choice(_NOUNS).title()}**: {_sentence(rng)}"
        for i in range(rng.randrange(3, 6))
    )


def _question(rng: random.Random) -> str:
    q = rng.choice(_QUESTIONS).format(**_words(rng))
    r = rng.random()
    if r < 0.3:
        q = _sentence(rng) + " " + q
    elif r < 0.4:
        q += " " + rng.choice(_CJK)
    elif r < 0.5:
        q += "\n\n" + _code(rng)
    return q


class _Pool:
    """Pre-generated text pieces with their exact token counts (one batched encode)."""

    def __init__(self, rng: random.Random, backend: Any, size: int) -> None:
        self.questions = [_question(rng) for _ in range(size // 4)]
        self.pieces = [_piece(rng) for _ in range(size)]
        self.fillers = [_sentence(rng) for _ in range(size // 4)]
        self.systems = list(_SYSTEMS)

        def count(texts: list[str]) -> list[int]:
            return [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]

        self.q_tokens = count(self.questions)
        self.p_tokens = count(self.pieces)
        self.f_tokens = count(self.fillers)
        self.s_tokens = count(self.systems)
        self.short_fillers = sorted(range(len(self.fillers)), key=self.f_tokens.__getitem__)


def _piece(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.55:
        return _paragraph(rng, rng.randrange(2, 6))
    if kind < 0.75:
        return _code(rng)
    if kind < 0.92:
        return _list(rng)
    return "".join(rng.choice(_CJK) for _ in range(rng.randrange(2, 5)))


def _answer(rng: random.Random, pool: _Pool, budget: int) -> str:
    """Pieces joined by blank lines, adding up to about ``budget`` tokens."""
    parts: list[str] = []
    left = budget
    for _ in range(64):
        i = rng.randrange(len(pool.pieces))
        if pool.p_tokens[i] <= left:
            parts.append(pool.pieces[i])
            left -= pool.p_tokens[i]
            continue
        j = rng.randrange(len(pool.fillers))
        if pool.f_tokens[j] > left:
            break
        parts.append(pool.fillers[j])
        left -= pool.f_tokens[j]
    return "\n\n".join(parts) or pool.fillers[pool.short_fillers[0]]


def _conversation(
    rng: random.Random, pool: _Pool, target: int, overhead: dict
) -> list[dict[str, str]]:
    turns: list[dict[str, str]] = []
    has_system = rng.random() < 0.3
    exchanges = rng.choice((1, 1, 2, 2, 3, 4))
    fixed = overhead[(has_system, exchanges)]
    if has_system:
        s = rng.randrange(len(pool.systems))
        turns.append({"from": "system", "value": pool.systems[s]})
        fixed += pool.s_tokens[s]
    questions = [rng.randrange(len(pool.questions)) for _ in range(exchanges)]
    fixed += sum(pool.q_tokens[q] for q in questions)
    weights = [rng.uniform(0.5, 1.5) for _ in range(exchanges)]
    budget = max(40 * exchanges, target - fixed)
    for q, w in zip(questions, weights, strict=True):
        turns.append({"from": "human", "value": pool.questions[q]})
        share = int(budget * w / sum(weights))
        turns.append({"from": "gpt", "value": _answer(rng, pool, share)})
    return turns


def _to_messages(conv: list[dict[str, str]]) -> list[dict[str, str]]:
    roles = {"system": "system", "human": "user", "gpt": "assistant"}
    return [{"role": roles[t["from"]], "content": t["value"]} for t in conv]


def _template_overhead(tok: Any) -> dict[tuple[bool, int], int]:
    """Tokens the template adds around the contents, per conversation shape."""
    out: dict[tuple[bool, int], int] = {}
    for has_system in (False, True):
        for k in range(1, 5):
            conv = [{"from": "system", "value": "x"}] if has_system else []
            conv += [{"from": r, "value": "x"} for _ in range(k) for r in ("human", "gpt")]
            text = tok.apply_chat_template(_to_messages(conv), tokenize=False)
            n = len(tok.backend_tokenizer.encode(text, add_special_tokens=False).ids)
            out[(has_system, k)] = n - len(conv)  # each "x" is one token
    return out


def generate(rows: int, tokenizer_dir: Path, seed: int = 0) -> Iterator[Row]:
    """Conversations of about 800-1000 tokens as rendered by the tokenizer's own template."""
    from transformers import AutoTokenizer  # only the generator needs it

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    rng = random.Random(f"draftset-bench:{seed}")
    pool = _Pool(rng, tok.backend_tokenizer, size=max(4000, min(rows, 40_000)))
    overhead = _template_overhead(tok)
    for i in range(rows):
        target = rng.randrange(TOKENS_LOW + 45, TOKENS_HIGH - 15)
        yield {
            "id": f"bench-{seed}-{i:07d}",
            "conversations": _conversation(rng, pool, target, overhead),
        }


def cached_synthetic(rows: int, tokenizer_dir: Path, cache: Path, seed: int = 0) -> Path:
    """Generate once into the cache; reuse the file when it exists."""
    key = hashlib.sha256(f"{GENERATOR_VERSION}:{rows}:{seed}:{tokenizer_dir}".encode()).hexdigest()[
        :10
    ]
    path = cache / "data" / f"synthetic-{rows}-seed{seed}-{key}.jsonl"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in generate(rows, tokenizer_dir, seed):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.rename(path)
    return path


# --- real rows: supplied files, or the shared samples ---------------------------------------------
_ROLE_MAP = {
    "system": "system",
    "human": "human",
    "user": "human",
    "gpt": "gpt",
    "assistant": "gpt",
}


def _load_rows(path: Path) -> Iterator[Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        yield from json.loads(text)
    elif stripped.startswith("{") and "\n{" not in stripped:
        yield json.loads(text)
    else:
        for line in text.split("\n"):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


def _plain_chat(obj: Any) -> list[dict[str, str]] | None:
    """The row as plain ShareGPT turns, or None when it is not a plain text chat.

    Only rows every benchmarked program reads the same way are kept: string contents, the roles
    system/user/assistant, alternating user/assistant after an optional system turn, ending with
    an answer.
    """
    if not isinstance(obj, dict):
        return None
    turns = obj.get("conversations") if "conversations" in obj else obj.get("messages")
    if not isinstance(turns, list) or not turns:
        return None
    out: list[dict[str, str]] = []
    for t in turns:
        if not isinstance(t, dict):
            return None
        role = _ROLE_MAP.get(str(t.get("from", t.get("role"))))
        value = t.get("value", t.get("content"))
        if role is None or not isinstance(value, str) or not value.strip():
            return None
        out.append({"from": role, "value": value})
    body = out[1:] if out[0]["from"] == "system" else out
    if not body or len(body) % 2:
        return None
    for k, t in enumerate(body):
        if t["from"] != ("human" if k % 2 == 0 else "gpt"):
            return None
    return out


def collect_real(paths: list[Path], rows: int) -> Iterator[Row]:
    """Plain chats from the given files/folders, repeated (with new ids) up to ``rows``."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.suffix in (".json", ".jsonl", ".gz"))
        else:
            files.append(p)
    chats: list[list[dict[str, str]]] = []
    for f in files:
        try:
            chats += [c for c in map(_plain_chat, _load_rows(f)) if c is not None]
        except (OSError, ValueError, UnicodeDecodeError):
            continue
    if not chats:
        raise SystemExit(f"no plain user/assistant chats found in {', '.join(map(str, paths))}")
    for i in range(rows):
        yield {"id": f"real-{i:07d}", "conversations": chats[i % len(chats)]}


def write_rows(rows: Iterator[Row], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


# --- the users' mix: code explanation, chat, agentic tool traces, reasoning --------------------
MIX_VERSION = "1"
MIX_MAX_TOKENS = 4000  # rendered with the run's template; max length is 4096
MIX_KINDS = (("code", 0.30), ("chat", 0.25), ("agent", 0.25), ("reasoning", 0.20))
MIX_SYSTEM_SHARE = 0.20

_MIX_SYSTEMS = (
    "You are a senior software engineer. Explain code precisely and point out bugs.",
    "You are a helpful assistant. Answer concisely and correctly.",
    "You are an autonomous coding agent. Use the tools when they help; report what you found.",
)


def _tool(name: str, doc: str, **params: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": doc,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
                "required": list(params),
            },
        },
    }


# Two fixed tool sets, as in real agent data: every row of a source carries the same schemas.
_TOOLSETS = (
    [
        _tool("read_file", "Read a file of the repository.", path="Path from the repository root"),
        _tool("run_tests", "Run the test suite, or one test file.", target="Test path or 'all'"),
        _tool("search_code", "Search the repository for a pattern.", pattern="A regex"),
        _tool(
            "edit_file", "Replace text in a file.", path="File", old="Exact text", new="New text"
        ),
    ],
    [
        _tool("web_search", "Search the web.", query="What to search for"),
        _tool("get_weather", "Current weather for a city.", city="City name", unit="c or f"),
        _tool("calculator", "Evaluate an arithmetic expression.", expression="The expression"),
    ],
)


def _long_code(rng: random.Random, blocks: int) -> str:
    body = [_code(rng).split("\n")[1:-1] for _ in range(blocks)]
    return "```python\n" + "\n\n".join("\n".join(b) for b in body) + "\n```"


class _MixPool:
    """Pieces with exact token counts, for sizing rows to a token budget."""

    def __init__(self, rng: random.Random, backend: Any, size: int) -> None:
        self.pieces = [_piece(rng) for _ in range(size)]
        self.codes = [_long_code(rng, rng.randrange(2, 8)) for _ in range(size // 8)]
        self.questions = [_question(rng) for _ in range(size // 4)]

        def count(texts: list[str]) -> list[int]:
            return [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]

        self.p_tokens = count(self.pieces)
        self.c_tokens = count(self.codes)

    def text(self, rng: random.Random, budget: int) -> str:
        parts: list[str] = []
        left = budget
        for _ in range(48):
            i = rng.randrange(len(self.pieces))
            if self.p_tokens[i] <= left:
                parts.append(self.pieces[i])
                left -= self.p_tokens[i]
            elif left < 40:
                break
        return "\n\n".join(parts) or self.pieces[0]

    def code(self, rng: random.Random, budget: int) -> str:
        fits = [i for i in rng.sample(range(len(self.codes)), 16) if self.c_tokens[i] <= budget]
        return self.codes[fits[0]] if fits else _code(rng)


def _mix_conversation(
    rng: random.Random, pool: _MixPool, kind: str, budget: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    msgs: list[dict[str, Any]] = []
    tools = None
    if kind == "code":
        k = rng.choice((1, 1, 2, 3))
        share = budget // (2 * k)
        for step in range(k):
            if step == 0:
                q = rng.choice(("Explain what this code does:", "Why is this slow?", "Review:"))
                msgs.append({"role": "user", "content": q + "\n\n" + pool.code(rng, share)})
            else:
                msgs.append({"role": "user", "content": rng.choice(pool.questions)})
            msgs.append({"role": "assistant", "content": pool.text(rng, share)})
    elif kind == "chat":
        k = rng.choice((2, 3, 4, 5))
        for _ in range(k):
            msgs.append({"role": "user", "content": rng.choice(pool.questions)})
            msgs.append({"role": "assistant", "content": pool.text(rng, budget // k)})
    elif kind == "reasoning":
        k = rng.choice((1, 1, 2))
        for _ in range(k):
            msgs.append({"role": "user", "content": rng.choice(pool.questions)})
            msgs.append(
                {
                    "role": "assistant",
                    "content": pool.text(rng, budget // (3 * k)),
                    "reasoning_content": pool.text(rng, 2 * budget // (3 * k)),
                }
            )
    else:  # agent: one user task, then tool calls with their results, then the answer
        tools = _TOOLSETS[rng.randrange(len(_TOOLSETS))]
        steps = rng.choice((1, 2, 3, 4))
        share = budget // (2 * steps + 1)
        msgs.append({"role": "user", "content": rng.choice(pool.questions)})
        for _ in range(steps):
            fn = rng.choice(tools)["function"]
            args = {
                p: rng.choice(_NOUNS) + "_" + str(rng.randrange(99))
                for p in fn["parameters"]["required"]
            }
            call = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
            msgs.append(
                {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": pool.text(rng, share // 3),
                    "tool_calls": [call],
                }
            )
            result = {"ok": True, "output": pool.text(rng, share)}
            msgs.append({"role": "tool", "content": json.dumps(result, ensure_ascii=False)})
        msgs.append(
            {
                "role": "assistant",
                "content": pool.text(rng, share),
                "reasoning_content": pool.text(rng, share // 3),
            }
        )
    if rng.random() < MIX_SYSTEM_SHARE:
        sys_prompt = _MIX_SYSTEMS[2 if kind == "agent" else rng.randrange(2)]
        msgs.insert(0, {"role": "system", "content": sys_prompt})
    return msgs, tools


def generate_mix(rows: int, tokenizer_dir: Path, template: str, seed: int = 0) -> Iterator[Row]:
    """OpenAI-messages rows mirroring users' data, each at most MIX_MAX_TOKENS rendered tokens.

    Lengths are drawn from 300 to 3,900 tokens; a row rendered (with the run's template) longer
    than MIX_MAX_TOKENS is drawn again with a smaller budget, so no row is over --max-length.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    backend = tok.backend_tokenizer
    rng = random.Random(f"draftset-bench-mix:{seed}")
    pool = _MixPool(rng, backend, size=2000)
    names = [k for k, _ in MIX_KINDS]
    weights = [w for _, w in MIX_KINDS]
    for i in range(rows):
        kind = rng.choices(names, weights)[0]
        budget = int(rng.triangular(300, 3900, 2200))
        while True:
            msgs, tools = _mix_conversation(rng, pool, kind, budget)
            text = tok.apply_chat_template(
                msgs, tools=tools, chat_template=template, tokenize=False
            )
            if len(backend.encode(text, add_special_tokens=False).ids) <= MIX_MAX_TOKENS:
                break
            budget = int(budget * 0.8)
        row: Row = {"id": f"mix-{seed}-{i:07d}", "kind": kind, "messages": msgs}
        if tools:
            row["tools"] = tools
        yield row


def cached_mix(rows: int, tokenizer_dir: Path, template: str, cache: Path, seed: int = 0) -> Path:
    """The mix, generated once per (rows, seed, tokenizer, template) into the cache."""
    ident = f"{MIX_VERSION}:{rows}:{seed}:{tokenizer_dir}:{template}"
    key = hashlib.sha256(ident.encode()).hexdigest()[:10]
    path = cache / "data" / f"mix-{rows}-seed{seed}-{key}.jsonl"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    write_rows(generate_mix(rows, tokenizer_dir, template, seed), tmp)
    tmp.rename(path)
    return path
