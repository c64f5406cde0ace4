"""Output: the temporary-then-renamed folder, the writers, vocab files, manifest, readback.

`FORMATS` is the registry of output formats (``--output-format``): each names the module that
holds its `Writer` (``WRITER``) and its `Layout` (``LAYOUT``), see `output.base`. This module
imports nothing heavy: the command line reads the names at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from draftset.output.base import Layout, Writer

FORMATS: dict[str, str] = {
    "arrow": "draftset.output.arrow",  # HF save_to_disk folder (speculators reads it as-is)
    "parquet": "draftset.output.parquet",  # hub-style Parquet shards (data/train-*.parquet)
}
DEFAULT_FORMAT = "arrow"
"""What sets built before ``output_format`` was recorded are."""


def writer_class(name: str) -> type[Writer]:
    """The `Writer` of output format ``name`` (a key of `FORMATS`)."""
    return importlib.import_module(FORMATS[name]).WRITER


def layout(name: str) -> Layout:
    """The `Layout` that reads output format ``name`` back (a key of `FORMATS`)."""
    return importlib.import_module(FORMATS[name]).LAYOUT
