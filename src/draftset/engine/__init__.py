"""Engines: what runs the row step over ordered batches (inline, local process pool, Ray).

`ENGINES` is the registry of engines by name: each names the module whose ``ENGINE`` is the
`engine.base.Engine` subclass; `engine.factory` opens them. This module imports nothing: the
API decides whether to start the helper process from it before any stage module is loaded.
"""

from __future__ import annotations

import os

ENGINES: dict[str, str] = {
    "inline": "draftset.engine.inline",  # the driver itself (`local` with one worker)
    "local": "draftset.engine.pool",  # this machine's processes
    "ray": "draftset.engine.ray",  # Ray actors, on this machine or a cluster
}
"""Every engine by name: the module holding its ``ENGINE`` class (imported when chosen, so
only ``--engine ray`` loads Ray's)."""

IN_DRIVER = "inline"
"""The one engine that runs the row step in the driver (its class says ``in_driver``)."""

CHOICES: tuple[str, ...] = tuple(name for name in ENGINES if name != IN_DRIVER)
"""The engines a user can name (``--engine``): every registered one but the driver itself, which
``local`` with one worker becomes."""


def engine_name(engine: str, workers: int | None) -> str:
    """The engine that runs: ``engine`` as asked, except ``local`` with one worker, which runs
    inline. ``workers`` as given (None or 0: one per core)."""
    if engine == "local" and (workers or os.cpu_count() or 1) == 1:
        return IN_DRIVER
    return engine
