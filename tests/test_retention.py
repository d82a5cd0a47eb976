"""Results made from a sparsegpu matrix stay sparsegpu classes, with its backend (issue 16).

Each case runs twice on the same seeded matrices: once on a sparsegpu matrix whose backend
is "scipy" (available everywhere), once on plain scipy. The first must be the sparsegpu
class of scipy's format and kind, hold scipy's values, keep ``backend == "scipy"``, and
send its own products through sparsegpu's dispatcher.
"""

from __future__ import annotations

import doctest
import warnings

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
    product = _dispatch.apply

    def counting(matrix, x, **kwargs):
        calls.append(type(matrix))
        return product(matrix, x, **kwargs)

    monkeypatch.setattr(_dispatch, "apply", counting)
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


# ------------------------------------------------- scipy operands of other classes on the left
LEFT_FORMATS = ["csr", "csc", "bsr", "coo"]
OPERATORS = {
    "matmul": lambda L, R: L @ R,
    "add": lambda L, R: L + R,
    "sub": lambda L, R: L - R,
    "star": lambda L, R: L * R,
}


@pytest.fixture
def fresh_warning(monkeypatch):
    """The once-per-process class-loss warning, not yet shown."""
    from sparsegpu.classes import _class_loss

    monkeypatch.setattr(_class_loss, "_warned", False)


@pytest.mark.parametrize("op", list(OPERATORS))
@pytest.mark.parametrize("right", list(SPARSEGPU_CLASSES), ids="-".join)
@pytest.mark.parametrize("left_kind", ["matrix", "array"])
@pytest.mark.parametrize("left_format", LEFT_FORMATS)
def test_scipy_left_operand_keeps_the_class_or_warns_once(
    left_format, left_kind, right, op, fresh_warning
):
    """Where scipy's rules let the right operand answer (its class a subclass of the
    left's), the result is sparsegpu's; elsewhere scipy's, with one warning the first time."""
    S = sp.random(12, 12, density=0.3, format="csr", random_state=45)
    T = sp.random(12, 12, density=0.3, format="csr", random_state=46)
    L = getattr(sp, f"{left_format}_{left_kind}")(S)
    R = SPARSEGPU_CLASSES[right](T)
    R.backend = "scipy"
    plain = getattr(sp, f"{right[0]}_{right[1]}")(T)
    expected = OPERATORS[op](L, plain)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = OPERATORS[op](L, R)
        again = OPERATORS[op](L, R)
    lost = [w for w in caught if w.category is sg.ScipyClassResultWarning]
    np.testing.assert_allclose(result.toarray(), expected.toarray(), rtol=1e-12)
    if isinstance(R, type(L)):
        assert type(result) is SPARSEGPU_CLASSES[(expected.format, right[1])]
        assert result.backend == "scipy" and not lost
    else:
        assert type(result) is type(expected) and type(again) is type(expected)
        assert len(lost) == 1, [str(w.message) for w in caught]
        assert "sg.as_sparsegpu" in str(lost[0].message)


def test_the_reflected_operators_warn_nothing(fresh_warning):
    A = sg.csr_array(sp.random(12, 12, density=0.3, format="csr", random_state=47))
    S = sp.csr_array(sp.random(12, 12, density=0.3, format="csr", random_state=48))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ScipyClassResultWarning)
        for result in (S @ A, S + A, S - A, S * A, A @ S, A + S):
            assert type(result) is sg.csr_array


@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr", "coo", "dia"])
@pytest.mark.parametrize("kind", ["matrix", "array"])
def test_as_sparsegpu_of_a_matrix(fmt, kind):
    S = getattr(sp, f"{fmt}_{kind}")(sp.random(12, 12, density=0.3, random_state=49))
    A = sg.as_sparsegpu(S, backend="scipy")
    want = fmt if fmt in ("csr", "csc", "bsr") else "csr"
    assert type(A) is SPARSEGPU_CLASSES[(want, kind)]
    assert A.backend == "scipy"
    np.testing.assert_array_equal(A.toarray(), S.toarray())
    assert sg.as_sparsegpu(A) is A


def test_as_sparsegpu_refuses_other_objects():
    with pytest.raises(TypeError, match="scipy sparse matrix or a hierarchy.*ndarray"):
        sg.as_sparsegpu(np.eye(3))


@pytest.mark.parametrize("solver", ["smoothed_aggregation_solver", "ruge_stuben_solver"])
@pytest.mark.parametrize("cls", [sg.csr_matrix, sg.csr_array], ids=["matrix", "array"])
def test_pyamg_hierarchy_keeps_sparsegpu_classes(solver, cls, fresh_warning):
    """Built from sparsegpu input, at most one warning; converted, every level's A, P and R
    is a sparsegpu class, and the solve is scipy's."""
    pyamg = pytest.importorskip("pyamg")
    A = pyamg.gallery.poisson((24, 24), format="csr")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ml = getattr(pyamg, solver)(cls(A), max_coarse=10)
    assert len([w for w in caught if w.category is sg.ScipyClassResultWarning]) <= 1
    assert sg.as_sparsegpu(ml, backend="scipy") is ml
    assert len(ml.levels) >= 3
    for level in ml.levels:
        for name in ("A", "P", "R"):
            matrix = getattr(level, name, None)
            if matrix is not None:
                assert type(matrix).__module__.startswith("sparsegpu."), (name, type(matrix))
                assert matrix.backend == "scipy"
    b = np.linspace(-1.0, 1.0, A.shape[0])
    plain = getattr(pyamg, solver)(A, max_coarse=10)
    np.testing.assert_allclose(ml.solve(b, tol=1e-10), plain.solve(b, tol=1e-10), rtol=1e-8)


def test_the_warning_names_the_left_operand_as_written(fresh_warning):
    """``sp.diags(d) @ A``: scipy converts the DIA operand to CSR before A; the warning
    names the DIA matrix the user wrote."""
    A = sg.csr_matrix(sp.random(6, 6, density=0.5, format="csr", random_state=50))
    with pytest.warns(sg.ScipyClassResultWarning, match="scipy's dia_matrix on the left"):
        sp.diags(np.ones(6)) @ A
