"""A Unicode torture set: text that tokenizers normalize, and text they must leave alone.

Each row puts the hard characters in the user turn and at the start, middle and end of the
assistant's answer (and in its reasoning), where a mask check is most easily fooled. Written as
escapes so the source file itself stays plain ASCII.
"""

from __future__ import annotations

import unicodedata

NFD_VIET = unicodedata.normalize("NFD", "Tiếng Việt có dấu: người, được, những")
NFD_HANGUL = unicodedata.normalize("NFD", "한국어 문장입니다")
NFD_GREEK = unicodedata.normalize("NFD", "ΐ ΰ ἄλφα ᾖ")

PIECES: dict[str, str] = {
    # NFC changes these (singleton decompositions, composition, reordering, exclusions)
    "singletons": "\u2126 ohm, \u212b angstrom, \u212a kelvin, \u2000quad\u2001em, \uf900 compat",
    "decomposed_vietnamese": NFD_VIET,
    "combining_accents": "e\u0301 a\u0308 o\u0302\u0301 n\u0303 c\u0327 q\u0301 x\u0323\u0302",
    "reordered_marks": "a\u0302\u0323 vs a\u0323\u0302, \u1e9b\u0323, \u0344 and \u0340",
    "composition_exclusion": "\u0958 \u0959 \u095a (Devanagari with nukta), \u2adc fork",
    "hangul_jamo": "\u1100\u1161\u11a8 \u1112\u1161\u11ab " + NFD_HANGUL,
    "greek_decomposed": NFD_GREEK,
    "hebrew_points": "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd \u05e9\u05b8\u05c1",
    "negated_ops": "a >\u0338 b, a <\u0338 b, a =\u0338 b",
    # NFKC-only changes (NFC keeps them): full-width, ligatures, math letters, circled
    "full_width": "\uff21\uff22\uff23\uff11\uff12\uff13\uff01 \u3000ideographic space",
    "compatibility": "\ufb01 ligature, \u2460\u2461, \u338f, \u210c, x\u00b2, \U0001d400\U0001d401",
    # nothing to normalize, but easy to split wrongly
    "emoji_zwj": "family \U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466, "
    "flag \U0001f1eb\U0001f1f7, thumb \U0001f44d\U0001f3fd, keycap 1\ufe0f\u20e3",
    "rtl": "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645"
    " \u200fRLM\u200e LRM \u202bembedding\u202c \u202eoverride\u202c \u2067isolate\u2069",
    "separators": "line\u2028separator, para\u2029graph, nel\u0085, vt\x0b ff\x0c, cr\r\nlf",
    "zero_width": "zero\u200bwidth\u200cnon\u200djoiner \ufeffbom \u00adsoft \u2060wj",
    "astral_cjk": "\U00020000\U0002a6d6 \U0001f600 \u4e2d\u6587 \u65e5\u672c\u8a9e",
    "controls": "bell\x07 esc\x1b[2J osc\x1b]0;title\x07 c1\x9b31m del\x7f",
}

LONE_MARK = "\u0301\u0308 a lone combining mark opens this answer"
MARKS_ONLY = "\u0301\u0302\u0303"


def torture_rows() -> list[dict]:
    """Conversations (OpenAI messages) exercising every piece, in several positions."""
    rows: list[dict] = []
    for name, text in PIECES.items():
        rows.append(
            {
                "id": f"u-{name}",
                "messages": [
                    {"role": "system", "content": f"Keep {text} as is."},
                    {"role": "user", "content": f"{text} \u2014 repeat it"},
                    {"role": "assistant", "content": f"{text} (first answer) {text}"},
                    {"role": "user", "content": f"again: {text}"},
                    {
                        "role": "assistant",
                        "content": f"{text}, again, and once more: {text}",
                        "reasoning_content": f"They want {text} again.",
                    },
                ],
            }
        )
    rows += [
        {
            "id": "u-lone-mark",
            "messages": [
                {"role": "user", "content": "\u0301 starts with a mark"},
                {"role": "assistant", "content": LONE_MARK},
            ],
        },
        {
            "id": "u-marks-only",
            "messages": [
                {"role": "user", "content": "Only marks, please."},
                {"role": "assistant", "content": MARKS_ONLY},
            ],
        },
        {
            "id": "u-mark-at-end",
            "messages": [
                {"role": "user", "content": "End with a mark."},
                {"role": "assistant", "content": "This answer ends with e\u0301 and q\u0301"},
            ],
        },
        {
            "id": "u-everything",
            "messages": [
                {"role": "user", "content": " ".join(PIECES.values())},
                {"role": "assistant", "content": "\n".join(PIECES.values())},
            ],
        },
    ]
    return rows
