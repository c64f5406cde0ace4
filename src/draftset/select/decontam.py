"""Decontamination: drop training rows that share a long word n-gram with a benchmark prompt.

Benchmark prompts (MT-Bench, GSM8K, HumanEval, ...) are loaded once into an index of word
n-grams (a dict from the n-gram to the first benchmark item holding it), so checking a row
costs one pass over its words, whatever the number of benchmark items.

Words (`words`): the text in Unicode NFKC, case folded, split into ``\\w+`` runs (letters,
digits and underscore of any script; punctuation and whitespace only separate words). A row is
contaminated when one of its texts holds an n-gram (default n = 13, the GPT-3 / Llama-2
decontamination length) of a benchmark prompt. A benchmark prompt shorter than n words cannot
share an n-gram; it matches a row only when one of the row's checked turns has exactly its
words (whole-turn match), so short generic follow-ups ("Rewrite your previous response.") do not
remove rows that merely contain them.

Checked text (``scope``): ``"prompt"`` (default) is every non-assistant turn (system, user,
tool): where benchmark questions land in training data. ``"all"`` adds assistant content and
reasoning. n-grams never span two turns.
"""

from __future__ import annotations

import random
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from draftset.core import reasons
from draftset.core.errors import UsageError
from draftset.core.files import not_utf8
from draftset.core.naming import as_given
from draftset.core.records import Conversation, Normalized, PromptOnly, RawRow, Reject
from draftset.sources.normalize import ID_KEYS, normalize
from draftset.sources.read import Source, iter_raw_rows

DEFAULT_N = 13
_WORD = re.compile(r"\w+")
FALLBACK_TEXT_KEYS = ("text", "problem", "question", "content", "input")
"""Benchmark rows normalize cannot read (e.g. MBPP's ``text``): the first string among these."""

Scope = Literal["prompt", "all"]


_ASCII_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_ASCII_FOLD = bytes(
    (b | 0x20 if 65 <= b <= 90 else b) if b in _ASCII_WORD else 0x20 for b in range(256)
)


def words(text: str) -> list[bytes]:
    r"""The comparison words of a text (see the module docstring), as UTF-8 bytes.

    ASCII text takes a byte-table fast path that gives exactly what the regex does (ASCII
    ``\w`` is ``[A-Za-z0-9_]``, case folding is lowercasing, NFKC changes nothing)."""
    if text.isascii():
        return text.encode().translate(_ASCII_FOLD).split()
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [w.encode("utf-8", "surrogatepass") for w in _WORD.findall(folded)]


@dataclass(frozen=True, slots=True)
class BenchItem:
    """One benchmark prompt: a user turn of a benchmark file (or one line of a .txt file)."""

    file: str  # the benchmark file, as given
    index: int  # 0-based row (or non-blank line) in that file
    id: str  # the row's own id when it has one (``#k`` for its k-th user turn), else file:index
    text: str

    def label(self) -> str:
        return f"{Path(self.file).name} item {self.id}"


# --- loading ------------------------------------------------------------------------------------


def load_benchmark_prompts(paths: Iterable[str | Path]) -> list[BenchItem]:
    """Benchmark prompts from files: ``.txt`` = one prompt per non-blank line; anything `build`
    reads = the user turns of each row (rows normalize cannot read fall back to the first
    string of `FALLBACK_TEXT_KEYS`). A file giving no prompt at all is an error."""
    items: list[BenchItem] = []
    for path in paths:
        path = Path(path)
        found = list(_items(path))
        if not found:
            raise NoBenchmarkPrompts(_no_prompts(path))
        items.extend(found)
    return items


class NoBenchmarkPrompts(UsageError):
    """A ``--decontaminate`` file that gives no prompt (exit 2): it would decontaminate nothing."""


def check_benchmark_file(path: str | Path) -> None:
    """Raise `NoBenchmarkPrompts` unless ``path`` gives a prompt (reads up to its first one):
    `build` checks each ``--decontaminate`` file so before any work."""
    if _is_txt(Path(path)):  # read once, whole: a byte that is not UTF-8 fails the build later
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(_not_utf8(Path(path), exc)) from None
        prompts = bool(text.strip())  # a non-blank line, as `_txt_items` reads one
    else:
        prompts = next(_items(Path(path)), None) is not None
    if not prompts:
        raise NoBenchmarkPrompts(_no_prompts(Path(path)))


def _flag() -> str:
    """``--decontaminate`` on the command line, the API's ``decontaminate``: as the caller gave
    it."""
    return as_given("--decontaminate", "decontaminate")


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    """A ``.txt`` benchmark file that is not UTF-8 (a traceback before)."""
    return f"{_flag()} {path} {not_utf8(exc)}: save it as UTF-8"


def _no_prompts(path: Path) -> str:
    return (
        f"{_flag()} {path}: no benchmark prompts in it (a .txt file gives one per"
        " non-blank line, other files the user turns of their rows)"
    )


def _items(path: Path) -> Iterator[BenchItem]:
    return _txt_items(path) if _is_txt(path) else _data_items(path)


def _is_txt(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".txt"


def _txt_items(path: Path) -> Iterator[BenchItem]:
    index = 0
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                text = line.strip()
                if text:
                    yield BenchItem(str(path), index, f"{path.name}:{index}", text)
                    index += 1
    except UnicodeDecodeError as exc:  # `check_benchmark_file` says so before any work
        raise UsageError(_not_utf8(path, exc)) from None


def _data_items(path: Path) -> Iterator[BenchItem]:
    for raw in iter_raw_rows(Source(path.name, path)):
        item = raw.reject if raw.reject is not None else normalize(raw)
        if isinstance(item, Conversation | PromptOnly):
            users = [m.get("content") or "" for m in item.messages if m.get("role") == "user"]
            rid = item.id if item.id != f"{path.name}:{raw.row}" else None
        else:
            users, rid = _fallback_text(raw), _own_id(raw)
        for k, text in enumerate(t for t in users if t.strip()):
            base = rid if rid is not None else f"{path.name}:{raw.row}"
            yield BenchItem(str(path), raw.row, base if len(users) == 1 else f"{base}#{k}", text)


def _own_id(raw: RawRow) -> str | None:
    for key in ID_KEYS:
        value = (raw.data or {}).get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and value != "":
            return str(value)
    return None


def _fallback_text(raw: RawRow) -> list[str]:
    if raw.data is None:
        return []
    for key in FALLBACK_TEXT_KEYS:
        value = raw.data.get(key)
        if isinstance(value, str) and value.strip():
            return [value]
    return []


# --- the index ----------------------------------------------------------------------------------


def ngram_problem(n: int) -> str | None:
    """What is wrong with an n-gram size (below 1: no n-gram to index), else None."""
    return "must be >= 1" if n < 1 else None


class Decontaminator:
    """An n-gram index of benchmark prompts; ``check(item)`` rejects rows that share one."""

    def __init__(self, items: list[BenchItem], n: int = DEFAULT_N, scope: Scope = "prompt"):
        if problem := ngram_problem(n):
            raise ValueError(f"n-gram size {problem}, got {n}")
        if scope not in ("prompt", "all"):
            raise ValueError(f"scope must be 'prompt' or 'all', got {scope!r}")
        self.items = items
        self.n = n
        self.scope = scope
        # any n-word window holds an m-gram starting at a multiple of m (m = ceil(n/2)): rows
        # probe only those m-grams against every benchmark m-gram, and verify hits with n-grams
        self._m = (n + 1) // 2
        self._grams: dict[tuple[bytes, ...], int] = {}
        self._anchors: set[tuple[bytes, ...]] = set()
        self._whole: dict[tuple[bytes, ...], int] = {}
        for k, item in enumerate(items):
            w = words(item.text)
            if len(w) >= n:
                for gram in zip(*(w[i:] for i in range(n)), strict=False):
                    self._grams.setdefault(gram, k)
                self._anchors.update(zip(*(w[i:] for i in range(self._m)), strict=False))
            elif w:
                self._whole.setdefault(tuple(w), k)
        self.checked: Counter[str] = Counter()
        self.removed: Counter[str] = Counter()
        self.removed_by_benchmark: Counter[str] = Counter()
        self.matched_items: Counter[int] = Counter()

    def _texts(self, item: Conversation | PromptOnly) -> Iterator[str]:
        for m in item.messages:
            if m.get("role") != "assistant":
                yield m.get("content") or ""
            elif self.scope == "all":
                yield m.get("content") or ""
                yield m.get("reasoning_content") or ""

    def match(self, texts: Iterable[str]) -> int | None:
        """Index of the first benchmark item sharing an n-gram with one of ``texts``."""
        n, grams, whole = self.n, self._grams, self._whole
        for text in texts:
            if not text:
                continue
            w = words(text)
            if len(w) < n:  # only a short benchmark prompt can equal a short turn
                k = whole.get(tuple(w)) if whole else None
                if k is not None:
                    return k
                continue
            if not grams:
                continue
            m = self._m
            if self._anchors.isdisjoint(zip(*(w[i::m] for i in range(m)), strict=False)):
                continue  # the fast path: about len(w)/m tuple lookups in C, no hit
            for gram in zip(*(w[i:] for i in range(n)), strict=False):
                k = grams.get(gram)
                if k is not None:
                    return k
        return None

    def check(self, item: Normalized) -> Reject | None:
        """A `reasons.CONTAMINATED` reject naming the benchmark file and item, or None."""
        if not isinstance(item, Conversation | PromptOnly):
            return None
        return self.record(item.source, item.row, item.id, self.find(item))

    def find(self, item: Conversation | PromptOnly) -> int | None:
        """The benchmark item the row shares an n-gram with (pure: a worker can ask)."""
        return self.match(self._texts(item))

    def record(self, source: str, row: int, row_id: str, k: int | None) -> Reject | None:
        """`check` on the row's facts (``k``: what `find` said): counts it, and the reject."""
        self.checked[source] += 1
        if k is None:
            return None
        bench = self.items[k]
        self.removed[source] += 1
        self.removed_by_benchmark[bench.file] += 1
        self.matched_items[k] += 1
        how = f"a {self.n}-word n-gram" if len(words(bench.text)) >= self.n else "a whole turn"
        msg = f"shares {how} with benchmark {bench.label()} ({bench.file}): {_clip(bench.text)}"
        return Reject(source, row, row_id, reasons.CONTAMINATED, msg)

    def stats(self, top: int = 20) -> dict[str, Any]:
        """Counters for the manifest / report (JSON-ready)."""
        files = Counter(item.file for item in self.items)
        return {
            "n": self.n,
            "scope": self.scope,
            "benchmarks": {f: {"items": c} for f, c in sorted(files.items())},
            "index_ngrams": len(self._grams),
            "short_items": len(self._whole),
            "checked": dict(self.checked),
            "removed": dict(self.removed),
            "removed_total": sum(self.removed.values()),
            "removed_by_benchmark": dict(self.removed_by_benchmark),
            "top_items": [
                {"file": self.items[k].file, "id": self.items[k].id, "rows": c}
                for k, c in self.matched_items.most_common(top)
            ],
        }


def _clip(text: str, limit: int = 80) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= limit else one_line[: limit - 3] + "...")


# --- micro benchmark ------------------------------------------------------------------------------


def benchmark(
    rows: int = 100_000,
    items: int = 5_000,
    words_per_row: int = 200,
    n: int = DEFAULT_N,
    seed: int = 0,
) -> dict[str, Any]:
    """Rows/s of `Decontaminator.check` on synthetic data (1% of rows hold a planted prompt).

    Text is random words from a 30k-word vocabulary; benchmark items have 30-150 words; each row
    is a user turn of ``words_per_row // 4`` words and an assistant answer of the rest (checked
    only with scope "all"), so scope "prompt" reads a quarter of the words.
    """
    rng = random.Random(seed)
    vocab = [f"w{i}x" for i in range(30_000)]
    bench = [
        BenchItem("bench.txt", k, str(k), " ".join(rng.choices(vocab, k=rng.randint(30, 150))))
        for k in range(items)
    ]
    t0 = time.perf_counter()
    deco = Decontaminator(bench, n=n)
    build_s = time.perf_counter() - t0
    convs = []
    user_words = max(1, words_per_row // 4)
    for r in range(rows):
        user = " ".join(rng.choices(vocab, k=user_words))
        if r % 100 == 0:
            user += " " + bench[rng.randrange(items)].text
        answer = " ".join(rng.choices(vocab, k=words_per_row - user_words))
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        convs.append(Conversation(str(r), "synthetic", r, messages))
    t0 = time.perf_counter()
    removed = sum(deco.check(c) is not None for c in convs)
    seconds = time.perf_counter() - t0
    return {
        "rows": rows,
        "benchmark_items": items,
        "words_per_row": words_per_row,
        "n": n,
        "index_build_s": round(build_s, 3),
        "check_s": round(seconds, 3),
        "rows_per_s": round(rows / seconds),
        "removed": removed,
    }


if __name__ == "__main__":  # python -m draftset.select.decontam
    print(benchmark())
