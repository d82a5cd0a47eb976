"""The hash rows' modules (``hash_spgemm`` and its passes ``_hash_kernels``, ``_hash_rows``,
``_hash_first``) on the CPU: every name has one home, the modules read each other's names
through the module (so an assignment to a home reaches every pass), and every patch that the
tests and the experiments make lands on a name's home."""

from __future__ import annotations

import ast
import pathlib

import pytest

from sparsegpu.backends import _hash_first, _hash_kernels, _hash_rows, hash_spgemm

MODULES = {
    m.__name__.rsplit(".", 1)[1]: m for m in (hash_spgemm, _hash_kernels, _hash_rows, _hash_first)
}
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _defined(module) -> set[str]:
    """The names ``module`` assigns or defines at its top level (not those it imports)."""
    names = set()
    for node in ast.parse(pathlib.Path(module.__file__).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update(e.id for e in elements if isinstance(e, ast.Name))
    return names


def test_every_name_has_one_home():
    homes: dict[str, list[str]] = {}
    for label, module in MODULES.items():
        for name in _defined(module):
            homes.setdefault(name, []).append(label)
            assert hash_spgemm.module_of(name) is module, name
    assert {n: h for n, h in homes.items() if len(h) > 1} == {}
    assert len(homes) > 100


def test_module_of_finds_each_pass_and_refuses_a_stranger():
    assert hash_spgemm.module_of("SHORT_GROUPS") is _hash_kernels
    assert hash_spgemm.module_of("MERGE_SLOTS") is _hash_rows
    assert hash_spgemm.module_of("SHORT_FIRST_LISTED_SLOTS") is _hash_first
    assert hash_spgemm.module_of("HASH_MIN_PRODUCTS") is hash_spgemm
    with pytest.raises(AttributeError, match="NO_SUCH_NAME"):
        hash_spgemm.module_of("NO_SUCH_NAME")


def _patches():
    """``(file, line, module label, name)`` of every ``setattr(<hash module>, "NAME", ...)``
    and ``(<hash module>, "NAME")`` pair in the tests and the experiments."""
    found = []
    for path in [*ROOT.glob("tests/*.py"), *ROOT.glob("benchmarks/**/*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            pair = None
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "setattr":
                pair = node.args[:2]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
                pair = node.args[:2]
            elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
                pair = node.elts
            if not pair or len(pair) < 2:
                continue
            target, name = pair
            if (
                isinstance(target, ast.Name)
                and target.id in MODULES
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
            ):
                found.append((path.name, node.lineno, target.id, name.value))
    return found


def _homes() -> dict[str, str]:
    return {name: label for label, module in MODULES.items() for name in _defined(module)}


def test_every_patch_lands_on_the_names_home():
    patches = _patches()
    assert len(patches) >= 20  # the tests' and the experiments' patches were found
    # a name a module imports from outside the hash rows (cupy's launch, a dtype) is patched
    # where it is read; every name of the hash rows where it lives
    wrong = [
        p
        for p in patches
        if p[3] not in vars(MODULES[p[2]]) or (p[3] in _homes() and _homes()[p[3]] != p[2])
    ]
    assert not wrong, f"patched away from the name's home (so not read there): {wrong}"


def test_the_passes_read_each_others_names_through_the_module():
    # a name one module takes from another by ``from ... import`` would be a second binding,
    # which an assignment to its home does not reach
    for module in (hash_spgemm, _hash_rows, _hash_first):
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and "_hash_" in node.module:
                pytest.fail(f"{module.__name__} imports names from {node.module}")
