"""Loading a repository script (a benchmark, a tool, the docs extension) as a module, for
tests that exercise its functions without running it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path) -> ModuleType:
    """The file at ``path`` (absolute, or relative to the repository root) as a module named
    after it; executing it may raise what its imports raise. The module is in
    ``sys.modules`` while it runs, as an import would put it (dataclasses look it up)."""
    path = ROOT / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    before = sys.modules.get(spec.name)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if before is None:
            del sys.modules[spec.name]
        else:
            sys.modules[spec.name] = before
    return module
