"""The package's map (CONTRIBUTING.md, "Layout") against its tree and its imports.

Every module is named under its folder in the map, every module named there exists, and
every import runs down the floors of the map's table (or within one folder), never up.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sparsegpu"

# The floors of CONTRIBUTING's table, top first: a module may import its own folder's
# modules and those of any floor below its own.
FLOORS = [
    ("tools", ["", "commands", "tuning"]),
    ("solvers", ["linalg", "distributed"]),
    ("data", ["io", "datasets"]),
    ("scipy classes", ["classes"]),
    ("engine", ["engine"]),
    ("backends", ["backends", "kernels"]),
    ("measure", ["measure"]),
    ("device", ["device"]),
    ("helpers", ["_console", "_files", "_version"]),
]


def _layout_section() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    start = text.index("## Layout\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _named_modules() -> set[str]:
    """Paths relative to the package of every module the map names, by folder heading."""
    named, folder = set(), None
    for line in _layout_section().splitlines():
        heading = re.match(r"### `sparsegpu/([\w/]*)`", line)
        if heading:
            folder = heading.group(1).rstrip("/")
            continue
        if folder is not None and line.startswith("- "):
            for name in re.findall(r"`(\w+\.py)`", line):
                named.add(f"{folder}/{name}" if folder else name)
    return named


def _modules() -> list[Path]:
    return sorted(
        p
        for p in PACKAGE.rglob("*.py")
        if "__pycache__" not in p.parts and not (p.name == "__init__.py" and p.parent != PACKAGE)
    )


def test_every_module_is_on_the_map():
    named = _named_modules()
    missing = [
        str(p.relative_to(PACKAGE)) for p in _modules() if str(p.relative_to(PACKAGE)) not in named
    ]
    assert not missing, f"modules missing from CONTRIBUTING.md's Layout: {missing}"


def test_every_module_on_the_map_exists():
    stale = [name for name in sorted(_named_modules()) if not (PACKAGE / name).exists()]
    assert not stale, f"CONTRIBUTING.md's Layout names modules that do not exist: {stale}"


def _floor(module: str) -> int:
    """The floor of ``sparsegpu.a.b`` (0 is the top)."""
    parts = module.split(".")[1:]
    if not parts:
        return 0
    head = parts[0]
    for index, (_, folders) in enumerate(FLOORS):
        if head in folders:
            return index
    return 0  # a top-level module of its own (cli, bench, testing, __main__)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every sparsegpu import in ``path``, resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("sparsegpu"):
                continue
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                as_module = (ROOT / candidate.replace(".", "/")).with_suffix(".py").exists() or (
                    ROOT / candidate.replace(".", "/") / "__init__.py"
                ).exists()
                found.append((node.lineno, candidate if as_module else source))
        elif isinstance(node, ast.Import):
            found.extend(
                (node.lineno, a.name) for a in node.names if a.name.startswith("sparsegpu")
            )
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_down_the_floors(path):
    own = _module_name(path)
    own_folder = own.split(".")[1] if own.count(".") >= 1 else ""
    up = []
    for line, target in _imports(path):
        target_folder = target.split(".")[1] if target.count(".") >= 1 else ""
        if target_folder == own_folder and target != "sparsegpu":
            continue  # the package's face (sparsegpu/__init__) is the top floor's
        if _floor(target) < _floor(own):
            up.append(f"line {line}: {target} ({FLOORS[_floor(target)][0]})")
    assert not up, f"{own} ({FLOORS[_floor(own)][0]}) imports up a floor: {up}"
