"""draftset: verified, fully accounted training sets for speculative-decoding drafters.

The Python API: ``from draftset import build, verify, run, report, generate`` (see
docs/api.md). Each of these names is also the stage's module (``draftset.build`` holds
``run_build``, ...), so the module is made callable and calling it calls ``draftset.api``'s
function of that name: ``import draftset.build as m`` keeps working as before. Nothing heavy is
imported here: worker processes import this package too, and ``import draftset`` stays ~1 ms.
"""

from __future__ import annotations

import sys
import types

# no `typing` import: it alone costs ~30 ms (annotations are strings here)

API = ("build", "run", "verify", "report", "generate")


class _ApiModule(types.ModuleType):
    """A stage module that is also its API function: ``draftset.verify(DIR)`` is
    ``draftset.api.verify(DIR)``."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        return getattr(_api(), self.__name__.rpartition(".")[2])(*args, **kwargs)

    @property
    def __signature__(self) -> object:  # inspect.signature / IDEs show the function's arguments
        import inspect

        return inspect.signature(getattr(_api(), self.__name__.rpartition(".")[2]))


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        # the import system binds each imported submodule here: make the API ones callable
        if name in API and type(value) is types.ModuleType:
            value.__class__ = _ApiModule
        super().__setattr__(name, value)


def _api() -> object:
    from draftset import api

    return api


def __getattr__(name: str) -> object:
    if name in API:  # `draftset.build(...)` after a plain `import draftset`
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name == "__version__":  # importlib.metadata costs ~70 ms: only when asked
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("draftset")
        except PackageNotFoundError:  # running from a source tree without install
            value = "0.0.0+src"
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


sys.modules[__name__].__class__ = _Package
for _name in API:  # stage modules imported before this package finished (never, today)
    _mod = sys.modules.get(f"{__name__}.{_name}")
    if _mod is not None:
        setattr(sys.modules[__name__], _name, _mod)
