"""The registry: every backend by name, whether it can run here, and why not.

Below selection (:mod:`sparsegpu.engine._select`), above the backend families
(:mod:`sparsegpu.backends`). The built-in families are listed in
``sparsegpu.backends.BUILTIN_MODULES`` and loaded on first use; plugins and tests add their
own with :func:`register_backend`.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass

from ..backends import BUILTIN_MODULES, canonical_name
from ..backends.base import Backend
from ..device import _cuda

AUTO = "auto"

_registry: dict[str, Backend] = {}
_registry_lock = threading.Lock()
_loaded = False


# Bumped whenever what ``auto`` or a name resolves to may change (the registry changes, the
# autotuner writes the store), so cached per-matrix choices are re-made.
generation = 0


def invalidate_choices() -> None:
    """Forget every cached backend/plan choice (the next product chooses again)."""
    global generation
    generation += 1


class BackendUnavailableError(RuntimeError):
    """A backend was asked for by name but cannot run on this machine."""


# ---------------------------------------------------------------------- registry
def _load_builtins() -> None:
    global _loaded
    with _registry_lock:
        if _loaded:
            return
        for module in BUILTIN_MODULES:
            mod = importlib.import_module(f"..backends.{module}", __package__)
            for backend in mod.BACKENDS:
                _registry.setdefault(backend.name, backend)
        _loaded = True


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Add a backend to the registry (plugins and tests).

    Raises
    ------
    ValueError
        If the name is taken (and ``replace`` is False) or is ``"auto"``.
    """
    _load_builtins()
    if not backend.name or backend.name == AUTO:
        raise ValueError(f"a backend cannot be named {backend.name!r}")
    global generation
    with _registry_lock:
        if backend.name in _registry and not replace:
            raise ValueError(
                f"a backend named {backend.name!r} is already registered; pass replace=True"
            )
        _registry[backend.name] = backend
        generation += 1


def unregister_backend(name: str) -> None:
    """Remove a backend added with :func:`register_backend`."""
    global generation
    with _registry_lock:
        _registry.pop(name, None)
        generation += 1


def registered() -> dict[str, Backend]:
    """Every registered backend by name, in registry order."""
    _load_builtins()
    return dict(_registry)


@dataclass(frozen=True)
class BackendStatus:
    """One row of :func:`backends`."""

    name: str
    available: bool
    reason: str | None
    description: str


def backends() -> list[BackendStatus]:
    """Every backend with whether it can run here and, if not, why.

    Examples
    --------
    >>> import sparsegpu as sg
    >>> [b.name for b in sg.backends() if b.available][:1]
    ['scipy']
    """
    out = []
    for name, backend in registered().items():
        reason = backend.unavailable_reason()
        out.append(BackendStatus(name, reason is None, reason, backend.description))
    return out


def _availability_summary() -> str:
    """The backends, a line each; those unavailable for the same reason on one line."""
    lines, unavailable = [], {}
    for status in backends():
        if status.available:
            lines.append(f"  {status.name}: available")
        else:
            unavailable.setdefault(status.reason, []).append(status.name)
    lines += [f"  {', '.join(names)}: unavailable ({why})" for why, names in unavailable.items()]
    return "\n".join(lines)


def get_backend(name: str) -> Backend:
    """The backend called ``name``, checked to be usable here.

    Raises
    ------
    ValueError
        For a name no backend has.
    BackendUnavailableError
        For a backend that cannot run here; the message says why and lists the others.
    """
    if not isinstance(name, str):
        raise TypeError(f"a backend name must be a str, got {type(name).__name__}")
    name = canonical_name(name)
    backend = registered().get(name)
    if backend is None:
        raise ValueError(
            f"unknown backend {name!r}; choose 'auto' or one of:\n{_availability_summary()}"
        )
    reason = backend.unavailable_reason()
    if reason is not None:
        if reason == _cuda.backend_reason():  # the GPU's whole story, once
            reason = f"no usable GPU: {_cuda.unavailable_reason()}"
        raise BackendUnavailableError(
            f"backend {name!r} is not available here: {reason}\n{_availability_summary()}"
        )
    return backend


def check_name(name: str) -> str:
    """Validate a name for ``A.backend`` / ``use_backend`` (``"auto"`` is always valid);
    returns the current name of a backend given by a former one."""
    name = canonical_name(name)
    if name != AUTO:
        get_backend(name)
    return name
