"""The entry points of a local worker process (`LocalPoolEngine`).

A worker imports only what it runs (no pyarrow, no readers): each is ~35 MB smaller, which
matters with a whole process tree under 1 GiB.
"""

from __future__ import annotations

import os
from typing import Any

from draftset.engine.base import unpack
from draftset.engine.lifeline import die_with_parent
from draftset.mask.step import ItemResult, MaskStep
from draftset.mask.template import import_template_compiler

_STEP: MaskStep | None = None


def init_worker(configs: Any) -> None:
    """Start-up: imports happen while the template loads; then one `MaskConfig` arrives.

    ``None`` instead of a config means the load failed: the worker stays empty and is shut down.
    """
    global _STEP
    die_with_parent()  # a killed build leaves no worker behind
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import_template_compiler()
    config = configs.get()
    if config is not None:
        _STEP = config.build()


def process_batch(batch: Any) -> list[ItemResult]:
    assert _STEP is not None
    return _STEP(unpack(batch))


def worker_ready() -> bool:
    return _STEP is not None
