"""draftset: verified, fully accounted training sets for speculative-decoding drafters.

The Python API is ``draftset.api`` (``from draftset.api import build, verify, run, report,
generate``; docs/api.md). Nothing heavy is imported here: worker processes import this package
too.
"""

from __future__ import annotations


def __getattr__(name: str) -> object:
    if name == "__version__":  # importlib.metadata costs ~70 ms: only when asked
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("draftset")
        except PackageNotFoundError:  # running from a source tree without install
            value = "0.0.0+src"
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
