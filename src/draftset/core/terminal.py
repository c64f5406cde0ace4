"""Text from the user's data made safe for a terminal or the HTML report: control, bidi and
separator characters shown as visible escapes. In `core` because every layer prints names
and text from the data (summaries, error lines, `show`, the report)."""

from __future__ import annotations

import re

UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 (but tab, newline), DEL, C1: ESC, BEL, CSI, OSC ...
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides
    "\u2028\u2029]"  # line and paragraph separators
)
"""Characters from the data never written raw to a terminal (nor into the HTML report)."""


def escape_char(ch: str) -> str:
    """`\\x1b`, `\\u202e`, `\\U000e0001`: a character as a visible escape."""
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def visible_parts(text: str, extra: str = "") -> list[tuple[str, bool]]:
    """``text`` as (chunk, escaped) parts: control and bidi characters (and any character of
    ``extra``, e.g. the plain-mode markers) become visible escapes, flagged True."""
    pattern = UNSAFE if not extra else re.compile(f"{UNSAFE.pattern}|[{re.escape(extra)}]")
    parts: list[tuple[str, bool]] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            parts.append((text[pos : m.start()], False))
        parts.append((escape_char(m.group()), True))
        pos = m.end()
    if pos < len(text):
        parts.append((text[pos:], False))
    return parts


def visible(text: str) -> str:
    """``text`` with control and bidi characters escaped (for one-line messages)."""
    return "".join(chunk for chunk, _ in visible_parts(text))
