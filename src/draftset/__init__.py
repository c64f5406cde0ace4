"""draftset: verified, fully accounted training sets for speculative-decoding drafters.

The Python API: ``from draftset import build, verify, run, report, show, generate`` (docs/api.md;
the same functions as ``draftset.api``). They load on first use: worker processes import this
package too, and must not pay for the API's imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from draftset.api import (
        BuildResult,
        CheckResult,
        DraftsetError,
        GenerateResult,
        RunError,
        RunResult,
        UsageError,
        VerifyResult,
        build,
        generate,
        report,
        run,
        show,
        verify,
    )

__all__ = [
    "BuildResult",
    "CheckResult",
    "DraftsetError",
    "GenerateResult",
    "RunError",
    "RunResult",
    "UsageError",
    "VerifyResult",
    "build",
    "generate",
    "report",
    "run",
    "show",
    "verify",
]


def __getattr__(name: str) -> object:
    if name in __all__:
        from draftset import api  # lazy: see the module docstring

        value = getattr(api, name)
        globals()[name] = value
        return value
    if name == "__version__":
        from draftset.core.version import package_version  # lazy: see the module docstring

        value = package_version()
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
