"""The rules of ``auto``: a matrix's row class, and the backend each class runs on.

What :func:`sparsegpu.engine._select.select` estimates from before anything is measured:
:func:`row_class` from the row-length statistics of the mirror (also the tuning store's
key), :func:`auto_rule` for ``A @ x`` and :func:`matmat_rule` for ``A @ X``. Each
threshold carries the measurement it came from.
"""

from __future__ import annotations

# Irregular rows: the rule follows Ginkgo's CSR strategy choice ("load_balance" when the
# longest row is far above the mean): with max > 8 x mean (and std > mean) a row-per-
# (sub)warp kernel leaves most threads of a warp idle while one row finishes.
IRREGULAR_IMBALANCE = 8.0
# Column spread above which rows of short or medium length count as ``scattered``: their
# x reads are gathers from all over x (a random graph), not neighbours of the diagonal (a
# mesh or stencil): uniform random 16 per row, spread 0.44; 3-D 27-point stencil 150^3, 0.007.
SCATTERED_SPREAD = 0.1
# Mean row lengths that separate short, medium and long rows (the sub-warp sizes that fit:
# under 8 a row is a few lanes' work, from 64 on a whole warp per row).
SHORT_ROWS = 8
LONG_ROWS = 64


def row_class(stats) -> str:
    """The row class of a matrix: the tuning store's key and the rules' first question.

    ``empty`` (no nonzeros), ``irregular`` (max row more than ``IRREGULAR_IMBALANCE`` x the
    mean and std above the mean: power-law-like), ``scattered`` (mean below ``LONG_ROWS``
    and a column spread above ``SCATTERED_SPREAD``: the x reads are random gathers), else by
    mean row length: ``short`` (< ``SHORT_ROWS``), ``medium`` (< ``LONG_ROWS``) or ``long``.

    Parameters
    ----------
    stats : RowLengthStats
    """
    if stats.nnz == 0:
        return "empty"
    if stats.imbalance > IRREGULAR_IMBALANCE and stats.std > stats.mean:
        return "irregular"
    if stats.mean < LONG_ROWS and stats.column_spread > SCATTERED_SPREAD:
        return "scattered"
    if stats.mean < SHORT_ROWS:
        return "short"
    if stats.mean < LONG_ROWS:
        return "medium"
    return "long"


# --------------------------------------------------------------------------- rules
# Order of preference of ``auto`` on regular rows when no tuning entry decides: on the
# H200 the tuned shuffle kernel was within 3% of the best backend on every regular class
# and 1.4-2.1x cuSPARSE (autotune_h200.json: 5-point 3715 vs 2126 GB/s, 27-point 3535 vs
# 2600, 400 per row 3023 vs 1413); the merge-path kernel beat cuSPARSE there too; the
# texture path and the software cache trail, so they come last.
AUTO_PREFERENCE = ("shuffle", "vector", "readonly", "merge_path", "cusparse", "texture", "swcache")
# A single row longer than this is split across blocks by the merge-path kernel even when
# the mean is high enough to hide it (one row-per-block kernel would run it on one SM).
LONG_ROW = 1 << 16
_AUTO_IRREGULAR = ("merge_path",)
# Up to this many merge items (rows + nonzeros) a product is latency-bound: the merge-path
# kernel is then one launch (its last block adds the carries), cheaper on host and device
# than cuSPARSE's SpMV call (H200, bundled SuiteSparse matrices: 11-16 us a product against
# 15-27 us for raw cuSPARSE with descriptors reused; auto_vs_cusparse_h200.json).
SMALL_ITEMS = 1_000_000
_AUTO_SMALL = ("merge_path",)
# Short or medium rows whose columns are scattered over x are bound by one 32-byte L2
# sector per gather whatever the kernel: on the H200 (knob_sweep_h200.jsonl, uniform
# 4M x 16) cuSPARSE and the merge-path kernel run within 1% of each other and 25% above a
# kernel that only gathers, while the tuned row-per-sub-warp kernel trails by 5% in
# float64. Without a tuning entry: merge path.
_AUTO_SCATTERED = ("merge_path", "cusparse")


def auto_rule(stats, usable_names) -> tuple[str, str]:
    """The rules of ``auto``: (backend name, reason) from row-length statistics.

    Parameters
    ----------
    stats : RowLengthStats
        Of the matrix (computed once per mirror, on the device).
    usable_names : list of str
        Backends that take this matrix and dtype, in preference order (not empty).
    """
    if stats.n_rows + stats.nnz <= SMALL_ITEMS:
        for name in _AUTO_SMALL:
            if name in usable_names:
                return name, (
                    f"small ({stats.n_rows + stats.nnz:,} rows + nonzeros <= {SMALL_ITEMS:,}): "
                    "latency-bound, and the merge-path kernel is a single launch"
                )
    cls = row_class(stats)
    if cls == "irregular" or (stats.nnz > 0 and stats.max > LONG_ROW):
        for name in _AUTO_IRREGULAR:
            if name in usable_names:
                return name, (
                    f"irregular rows (max {stats.max} > {IRREGULAR_IMBALANCE:g} x mean "
                    f"{stats.mean:.1f} with std > mean, or a row over {LONG_ROW:,}): "
                    "the load-balanced merge-path kernel keeps every thread busy"
                )
    if cls == "scattered":
        for name in _AUTO_SCATTERED:
            if name in usable_names:
                return name, (
                    f"scattered columns (mean distance from the diagonal "
                    f"{stats.column_spread:.2f} of the columns, over {SCATTERED_SPREAD:g}) on "
                    f"rows of {stats.mean:.1f} on average: x reads are random gathers, and the "
                    "merge-path kernel keeps the most of them in flight"
                )
    return usable_names[0], (
        f"regular rows (max/mean {stats.imbalance:.1f}): first usable of the preference "
        f"order {', '.join(AUTO_PREFERENCE)}"
    )


# A @ X (several right-hand sides): power-law rows go to the merge-path SpMM, whose equal
# runs of merge items keep every team busy where one hub row held a whole group of the
# row-split kernel for 25 times cuSPARSE's time (H100, R-MAT scale 17, k = 2..128; the
# issue-34 fit run); otherwise the vector family's row-split SpMM, its lanes across X's
# columns reading 16 bytes of each X row at a time (1.3-3.1x cuSPARSE's best algorithm on
# the fit stencils). Planning then times both, cuSPARSE's SpMM algorithms and the
# row-split kernel's other shapes.
_MATMAT_IRREGULAR = ("merge_path",)
_MATMAT_REGULAR = ("shuffle", "vector", "readonly")


def matmat_rule(stats, usable_names, operation) -> tuple[str, str]:
    """The rules of ``auto`` for ``A @ X``: (backend name, reason) from row-length
    statistics and the operation (:class:`Operation`: X's column bucket and order).

    Parameters
    ----------
    stats : RowLengthStats
    usable_names : list of str
        Backends that take this matrix and dtype, in preference order (not empty).
    operation : Operation
    """
    irregular = stats.nnz > 0 and (row_class(stats) == "irregular" or stats.max > LONG_ROW)
    if irregular:
        for name in _MATMAT_IRREGULAR:
            if name in usable_names:
                return name, (
                    f"{operation}: irregular rows (max {stats.max}, mean {stats.mean:.1f}): the "
                    "merge-path SpMM gives every team of lanes the same number of merge items"
                )
    for name in _MATMAT_REGULAR:
        if name in usable_names:
            return name, (
                f"{operation}: the row-split SpMM, lanes across X's columns (16 bytes of each "
                "X row at a time) and k-wide sums, reading A once"
            )
    return usable_names[0], f"{operation}: first usable backend ({usable_names[0]})"
