"""Whether the Hugging Face hub may be used: the one offline check of draftset.

The same rule as huggingface_hub's (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to 1, ON,
YES or TRUE, any case), read at call time rather than once at import, so a tokenizer name or a
``hf:`` source that would need the network is refused with one line before any work instead of
failing deep inside a download. No imports beyond the standard library.
"""

from __future__ import annotations

import os

_TRUE = frozenset({"1", "ON", "YES", "TRUE"})


def hub_offline() -> str | None:
    """The variable that puts the hub offline (huggingface_hub's offline mode), or None."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(var)
        if value:  # the first one set decides, as in huggingface_hub (HF_HUB_OFFLINE=0 wins)
            return var if value.upper() in _TRUE else None
    return None
