"""A build's helper process, started ahead of the driver's own start-up.

Its first job imports the tokenizer loader (``AutoTokenizer``, torch: the head of the template
load's critical path), so everything the driver does before the load (parse the options,
import its stage modules) overlaps it. `draftset.api.build` starts it for API callers; the
command line starts it before it even builds its parser (the option schema's imports). Only
light modules here: the command line imports this first.
"""

from __future__ import annotations

from typing import Any

from draftset.core import defaults
from draftset.engine import helper
from draftset.engine.base import tokenizer_threads


def start_helper(recipe: Any, workers: Any, engine: Any) -> helper.Sidecar | None:
    """The helper, when the arguments alone say the build will use one: not for a recipe
    (which may change the engine and workers: then the build starts it later), nor for values
    the schema refuses before any work. The caller stops it on any error."""
    if (
        recipe is not None
        or not isinstance(workers, int | None)
        or not isinstance(engine, str | None)
    ):
        return None
    if not helper.uses_helper(workers, engine or defaults.ENGINE):
        return None
    # through the module: a test may stand in for the class
    side = helper.Sidecar(tokenizer_threads(workers))
    side.submit(helper.import_tokenizer_loader)
    return side
