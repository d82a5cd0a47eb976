"""Names of a package imported on first use (PEP 562), so that ``import sparsegpu`` stays light."""

from __future__ import annotations

import importlib


def lazy_names(package: str, namespace: dict, where: dict[str, str | None]):
    """A module ``__getattr__`` for ``package`` that imports ``where[name]`` (a module
    relative to the package; None: the submodule ``name`` itself) when ``name`` is first
    asked for, and keeps it in ``namespace`` (the package's globals) from then on."""

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if where[name] is None:
            value = importlib.import_module(f".{name}", package)
        else:
            value = getattr(importlib.import_module(where[name], package), name)
        namespace[name] = value
        return value

    return __getattr__
