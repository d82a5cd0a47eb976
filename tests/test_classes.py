"""The sparsegpu classes are scipy classes: constructors, isinstance, derived matrices."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg


@pytest.fixture
def scipy_matrix():
    return sp.random(30, 20, density=0.2, format="csr", random_state=7)


CONSTRUCTORS = {
    "scipy_csr": lambda S: S,
    "scipy_coo": lambda S: S.tocoo(),
    "scipy_csc": lambda S: S.tocsc(),
    "dense": lambda S: S.toarray(),
    "arrays": lambda S: (S.data, S.indices, S.indptr),
    "coo_tuple": lambda S: (S.tocoo().data, (S.tocoo().row, S.tocoo().col)),
}


@pytest.mark.parametrize("cls", [sg.csr_matrix, sg.csr_array], ids=["matrix", "array"])
@pytest.mark.parametrize("how", list(CONSTRUCTORS))
def test_constructors_match_scipy(cls, how, scipy_matrix):
    A = cls(CONSTRUCTORS[how](scipy_matrix), shape=scipy_matrix.shape)
    assert isinstance(A, sp.csr_matrix if cls is sg.csr_matrix else sp.csr_array)
    np.testing.assert_array_equal(A.toarray(), scipy_matrix.toarray())


def test_shape_only_and_dtype():
    A = sg.csr_matrix((4, 5), dtype=np.complex64)
    assert A.shape == (4, 5) and A.nnz == 0 and A.dtype == np.complex64
    assert (A @ np.ones(5, dtype=np.complex64)).tolist() == [0, 0, 0, 0]


DERIVED = {
    "add": lambda A: A + A,
    "sub": lambda A: A - A,
    "scalar_mul": lambda A: A * 2.0,
    "copy": lambda A: A.copy(),
    "row_slice": lambda A: A[1:5],
    "fancy_rows": lambda A: A[[0, 3, 4]],
    "tocsr": lambda A: A.tocsr(),
    "astype": lambda A: A.astype(np.float32),
    "transpose_twice": lambda A: A.T.T,
    "conj": lambda A: A.conj(),
    "sparse_product": lambda A: A @ A.T,
}


@pytest.mark.parametrize("op", list(DERIVED))
def test_derived_matrices_keep_the_class(op, scipy_matrix):
    A = sg.csr_matrix(scipy_matrix)
    B = DERIVED[op](A)
    assert isinstance(B, (sg.csr_matrix, sg.csc_matrix)), type(B)
    np.testing.assert_allclose(B.toarray(), DERIVED[op](scipy_matrix).toarray())


def test_transpose_is_a_sparsegpu_csc(scipy_matrix):
    A = sg.csr_matrix(scipy_matrix)
    assert type(A.T) is sg.csc_matrix
    assert type(A.T.tocsr()) is sg.csr_matrix
    assert type(sg.csr_array(scipy_matrix).T) is sg.csc_array
    assert type(A.getH()) is sg.csc_matrix
    assert type(A.conj().T) is sg.csc_matrix


def test_csr_array_star_is_elementwise(scipy_matrix):
    A = sg.csr_array(scipy_matrix)
    x = np.arange(20.0)
    np.testing.assert_allclose((A * x).toarray(), (sp.csr_array(scipy_matrix) * x).toarray())


def test_setting_array_shape_is_refused(scipy_matrix):
    A = sg.csr_array(scipy_matrix)
    # scipy's own tests match its wording: "has no setter" (or "can't set attribute")
    with pytest.raises(AttributeError, match="has no setter"):
        A.shape = (20, 30)


def test_from_cupy_inputs(cupy):
    import cupyx.scipy.sparse as csp

    S = sp.random(30, 20, density=0.2, format="csr", random_state=1)
    A = sg.csr_matrix(csp.csr_matrix(S))
    np.testing.assert_allclose(A.toarray(), S.toarray())
    B = sg.csr_matrix(cupy.asarray(S.toarray()))
    np.testing.assert_allclose(B.toarray(), S.toarray())


def test_help_of_the_package_is_an_overview():
    """help(sparsegpu) was 5,065 lines, four copies of scipy's inherited documentation
    (issue 33); the classes are named in the docstring and documented by their own help."""
    import pydoc

    text = pydoc.plaintext.document(sg)
    assert len(text.splitlines()) < 1000
    assert "help(sparsegpu.csr_matrix)" in text and "inherited from scipy" not in text
    assert all(hasattr(sg, name) for name in sg.__all__)
    assert "inherited from scipy" in pydoc.plaintext.document(sg.csr_matrix)
