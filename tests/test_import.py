"""``import sparsegpu`` stays light: what only some calls need is imported by those calls.

`import sparsegpu` took 0.45 s against scipy.sparse's 0.25 s; these modules were a third
of the difference (``python -X importtime -c "import sparsegpu"``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# module: what needs it
LAZY = {
    "scipy.sparse.linalg": "a preconditioner operator, reverse Cuthill-McKee, multigrid",
    "scipy.linalg": "the same",
    "http.client": "a SuiteSparse download",
    "ssl": "a SuiteSparse download",
    "sparsegpu.tuning.autotune": "sparsegpu.autotune",
    "sparsegpu.linalg.multigrid": "sparsegpu.linalg.amg",
    "rich": "the command line's tables",
    "cupy": "a GPU product",
}


@pytest.fixture(scope="module")
def imported() -> list[str]:
    code = "import json, sys, sparsegpu; print(json.dumps(sorted(sys.modules)))"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("module", sorted(LAZY))
def test_import_sparsegpu_leaves_out(imported, module):
    assert module not in imported, (
        f"import sparsegpu imports {module} (only {LAZY[module]} needs it)"
    )


def test_the_lazy_names_still_resolve():
    import sparsegpu as sg
    from sparsegpu.tuning.autotune import AutotuneReport, autotune

    assert sg.autotune is autotune and sg.AutotuneReport is AutotuneReport
    from sparsegpu.linalg import multigrid

    assert sg.linalg.amg is multigrid.amg and sg.linalg.AMGHierarchy is multigrid.AMGHierarchy
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        sg.nothing  # noqa: B018


def test_every_submodule_the_docstring_names_is_an_attribute_in_a_fresh_process():
    # sg.tuning raised AttributeError unless another import had loaded it (test_block's
    # test_policy_validates failed when run alone); it loads on first use now
    code = (
        "import sparsegpu as sg, sys; assert 'sparsegpu.tuning' not in sys.modules; "
        "print(sorted(sg.tuning.__all__)[:1], sg.io.__name__, sg.datasets.__name__, "
        "sg.linalg.__name__, sg.suitesparse.__name__)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
    )
    assert out.stdout.split() == ["['BlockPolicy']", "sparsegpu.io", "sparsegpu.datasets",
                                  "sparsegpu.linalg", "sparsegpu.io.suitesparse"]  # fmt: skip
