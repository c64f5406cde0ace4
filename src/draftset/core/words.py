"""Counts in words: "1 row", "2 rows" (every summary line and message says a count), and a
count read back from a name (`ascii_digits`)."""

from __future__ import annotations

_IRREGULAR = {"entry": "entries", "was": "were", "is": "are", "has": "have"}


def fmt_counts(counts: dict[str, int]) -> str:
    """``a=1, b=1,200``: counts by name, sorted (reasons, sources), in one summary clause."""
    return ", ".join(f"{k}={v:,}" for k, v in sorted(counts.items()))


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` with thousands separators and ``noun`` in the number it takes: ``plural(1,
    "row")`` is "1 row", ``plural(1200, "entry")`` "1,200 entries"."""
    if n == 1:
        return f"1 {noun}"
    return f"{n:,} {many or _IRREGULAR.get(noun) or noun + 's'}"


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is a number ``int()`` reads as written, in ASCII digits: `str.isdigit`
    holds for ``²`` too, which ``int()`` refuses (a traceback where a name was parsed)."""
    return text.isascii() and text.isdigit()
