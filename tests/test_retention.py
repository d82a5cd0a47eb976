"""Results made from a sparsegpu matrix stay sparsegpu classes, with its backend (issue 16).

Each case runs twice on the same seeded matrices: once on a sparsegpu matrix whose backend
is "scipy" (available everywhere), once on plain scipy. The first must be the sparsegpu
class of scipy's format and kind, hold scipy's values, keep ``backend == "scipy"``, and
send its own products through sparsegpu's dispatcher.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.classes import _construct
from sparsegpu.engine import _dispatch
from sparsegpu.tuning import CsrVectorPolicy

KINDS = {"matrix": (sg.csr_matrix, sp.csr_matrix), "array": (sg.csr_array, sp.csr_array)}
SPARSEGPU_CLASSES = {
    ("csr", "matrix"): sg.csr_matrix,
    ("csr", "array"): sg.csr_array,
    ("csc", "matrix"): sg.csc_matrix,
    ("csc", "array"): sg.csc_array,
    ("bsr", "matrix"): sg.bsr_matrix,
    ("bsr", "array"): sg.bsr_array,
}


@pytest.fixture(params=list(KINDS))
def kind(request):
    return request.param


@pytest.fixture
def operands(kind):
    """(A, B, S, T): A sparsegpu with backend "scipy", B a scipy operand; S, T their scipy twins."""
    rng = np.random.default_rng(16)
    sparsegpu_cls, scipy_cls = KINDS[kind]
    S = scipy_cls(sp.random(12, 12, density=0.3, format="csr", random_state=rng))
    T = scipy_cls(sp.random(12, 12, density=0.3, format="csr", random_state=rng))
    A = sparsegpu_cls(S.copy())
    A.backend = "scipy"
    return A, T.copy(), S, T


@pytest.fixture
def dispatched(monkeypatch):
    """Counts the products that reach sparsegpu's dispatcher."""
    calls = []
    product = _dispatch.product

    def counting(matrix, x, **kwargs):
        calls.append(type(matrix))
        return product(matrix, x, **kwargs)

    monkeypatch.setattr(_dispatch, "product", counting)
    return calls


def check_retained(result, expected, kind, dispatched):
    """``result`` is scipy's ``expected`` as a sparsegpu class with backend "scipy", and
    its product goes through the dispatcher."""
    assert type(result) is SPARSEGPU_CLASSES[(expected.format, kind)], type(result)
    assert result.backend == "scipy"
    np.testing.assert_allclose(result.toarray(), expected.toarray(), rtol=1e-12)
    x = np.linspace(-1.0, 1.0, result.shape[1])
    before = len(dispatched)
    np.testing.assert_allclose(result @ x, expected @ x, rtol=1e-12)
    assert len(dispatched) == before + 1


# f(A, B) -> derived matrix; A the sparsegpu (or scipy) matrix, B a scipy operand
DERIVED = {
    "row_slice": lambda A, B: A[1:5],
    "fancy_rows": lambda A, B: A[[0, 3, 4]],
    "column_slice": lambda A, B: A[:, 2:7],
    "tocsc": lambda A, B: A.tocsc(),
    "tocsr_copy": lambda A, B: A.tocsr(copy=True),
    "tobsr": lambda A, B: A.tobsr(blocksize=(3, 2)),
    "transpose_tocsr": lambda A, B: A.T.tocsr(),
    "transpose_slice": lambda A, B: A.T[1:4],
    "A_matmul_AT": lambda A, B: A @ A.T,
    "AT_matmul_A": lambda A, B: A.T @ A,
    "copy": lambda A, B: A.copy(),
    "astype": lambda A, B: A.astype(np.float32),
    "abs": lambda A, B: abs(A),
    "negate": lambda A, B: -A,
    "times_scalar": lambda A, B: A * 2,
    "A_plus_A": lambda A, B: A + A,
    "multiply": lambda A, B: A.multiply(B),
    "A_matmul_B": lambda A, B: A @ B,
}

# scipy operand on the left: Python asks the sparsegpu operand's reflected method first
REFLECTED = {
    "B_plus_A": lambda A, B: B + A,
    "B_minus_A": lambda A, B: B - A,
    "B_matmul_A": lambda A, B: B @ A,
    "B_star_A": lambda A, B: B * A,
}


@pytest.mark.parametrize("op", list(DERIVED) + list(REFLECTED))
def test_result_keeps_class_and_backend(op, kind, operands, dispatched):
    A, B, S, T = operands
    case = DERIVED.get(op) or REFLECTED[op]
    check_retained(case(A, B), case(S, T), kind, dispatched)


# f(module, A, B, format) with module sparsegpu or scipy.sparse
BUILT = {
    "vstack": lambda m, A, B, f: m.vstack([A, B], format=f),
    "hstack": lambda m, A, B, f: m.hstack([B, A], format=f),
    "bmat": lambda m, A, B, f: m.bmat([[A, None], [B, A]], format=f),
    "block_diag": lambda m, A, B, f: m.block_diag([A, B], format=f),
    "kron": lambda m, A, B, f: m.kron(A, B[:3, :2], format=f),
}


@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr"])
@pytest.mark.parametrize("how", list(BUILT))
def test_construct_from_blocks(how, fmt, kind, operands, dispatched):
    A, B, S, T = operands
    result = BUILT[how](sg, A, B, fmt)
    expected = BUILT[how](sp, S, T, fmt)
    # scipy 1.11 stacks arrays into a matrix; sparsegpu follows the inputs, as scipy >= 1.12
    expected = sp.csr_array(expected) if kind == "array" else sp.csr_matrix(expected)
    check_retained(result, expected.asformat(fmt), kind, dispatched)


def test_construct_defaults_to_csr(operands):
    A, B, _, _ = operands
    assert sg.vstack([A, B]).format == "csr"


NO_INPUT = {
    "eye": lambda m, f: m.eye(6, 8, k=1, format=f),
    "identity": lambda m, f: m.identity(5, format=f),
    "diags": lambda m, f: m.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(6, 6), format=f),
    "random": lambda m, f: m.random(9, 7, density=0.3, format=f, random_state=16),
}


@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr"])
@pytest.mark.parametrize("how", list(NO_INPUT))
def test_construct_without_inputs(how, fmt):
    result = NO_INPUT[how](sg, fmt)
    expected = NO_INPUT[how](sp, fmt)
    assert type(result) is SPARSEGPU_CLASSES[(fmt, "matrix")], type(result)
    assert result.backend is None
    np.testing.assert_array_equal(result.toarray(), expected.toarray())


REFUSED = {
    "vstack": lambda: sg.vstack([sg.eye(2)], format="coo"),
    "eye": lambda: sg.eye(2, format="coo"),
}


@pytest.mark.parametrize("how", list(REFUSED))
def test_construct_refuses_other_formats(how):
    with pytest.raises(ValueError, match=rf"sparsegpu.{how} builds 'csr', 'csc' or 'bsr' .*'coo'"):
        REFUSED[how]()


def test_construct_examples_run():
    failures, tried = doctest.testmod(_construct)
    assert tried and not failures


@pytest.mark.parametrize("op", ["row_slice", "tocsc", "A_matmul_AT", "B_minus_A", "vstack"])
def test_policy_is_inherited(op, operands):
    A, B, _, _ = operands
    A.policy = CsrVectorPolicy(block_size=64, threads_per_row=4)
    case = {**DERIVED, **REFLECTED, "vstack": lambda A, B: sg.vstack([A, B])}[op]
    assert case(A, B).policy == A.policy
