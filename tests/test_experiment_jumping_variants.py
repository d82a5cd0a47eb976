"""The jumping-coefficient variants (benchmarks/experiments/jumping_variants.py) on the
CPU: the benchmark's own problem is one of them, every variant is symmetric with a
positive diagonal, and the table reports iterations against the issue's."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import amg
from benchmarks.experiments import jumping_variants as variants


def test_the_benchmarks_problem_is_the_first_variant():
    A = variants.build("fv-harmonic", 12, 2)
    assert abs(A - amg.jumping3d(12, 2)[0]).max() == 0
    assert abs(A - variants.build("fv-harmonic-high=0.5", 12, 2)).max() == 0


@pytest.mark.parametrize("variant", variants.VARIANTS)
def test_every_variant_is_symmetric_with_a_positive_diagonal(variant):
    A = variants.build(variant, 10, 3)
    assert A.shape == (1000, 1000)
    assert abs(A - A.T).max() <= 1e-12 * abs(A).max()
    assert (A.diagonal() > 0).all()
    # diagonally dominant, strictly on some row (a Dirichlet wall): positive definite
    off = np.asarray(abs(A).sum(axis=1)).ravel() - A.diagonal()
    assert (A.diagonal() >= off - 1e-9).all() and (A.diagonal() > off + 1e-9).any()


def test_an_unknown_variant_is_named():
    with pytest.raises(ValueError, match="unknown variant 'fv-cubic'; choose one of fv-harmonic"):
        variants.build("fv-cubic", 8, 1)


def test_the_table_counts_against_the_issue():
    row = {"variant": "v", "unknowns": 8, "iterations": 4234, "converged": True}
    text = variants.markdown({"size": 96, "seed": 2, "rows": [row]})
    assert "| v | 8 | 4,234 | 0.50 |" in text
    row["converged"] = False
    assert "4,234 (not converged)" in variants.markdown({"size": 96, "seed": 2, "rows": [row]})
