"""Could row chunks sorted in shared memory beat ALG1 on power-law rows (issue 47)?

A probe of an expand-sort-compress by chunks, before any of it joins the library: the
rows of at most ``LONG`` products are cut into chunks of consecutive rows (a row belongs
to the chunk its first product falls in, ``CHUNK`` products a chunk), a block a chunk
expands its rows' products into shared memory as ``(row in the chunk, column)`` keys,
sorts them (bitonic), sums equal keys and writes the distinct entries and each row's
span; the longer rows are expanded and sorted whole by ``cupy.argsort``; one copy kernel
moves every row into ``C``. Each piece timed by CUDA events (median of ``--repeat``),
beside cuSPARSE ALG1 (cupyx) on the same operands; the answer checked against cupyx's.
``-DNO_SORT`` in a configuration leaves the sort out (a wrong answer, timed to price it).

Found (``spgemm_esc_probe_h200``, fit power-law 1.5M): 2.2-2.6 ms against cupyx's 1.47; a
chunk's bitonic sort costs 0.67-0.93 ms, and without it the path still takes 1.56-1.70:
the chunks' staged loads, the offsets' scans and waits and the long rows each cost about
as much as ALG1's whole expand. The next probe, ``spgemm_rows_probe``, sorts each row where
its products are instead (a thread, a warp or a block a row).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_esc_probe [--heldout] [--repeat 9]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.sparse as sp

from sparsegpu.datasets import synthetic

# CUDA the rows and heavy-rows probes share, placed after their macros (BCOL(b), BVAL(b):
# B's entry b, read from parameters named b_indices and b_data)
CUDA_HELPERS = r"""
#define FULL 0xffffffffu

// v summed over this lane and those below it (a warp's inclusive scan)
__device__ __forceinline__ int warp_inclusive(int v, int lane) {
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(FULL, v, o);
        if (lane >= o) v += u;
    }
    return v;
}

// keys[0, n2) (n2 a power of 2) sorted, with their values where VALUES, by ``threads``
// threads from ``first``: a warp's (BLOCK false: __syncwarp between steps) or a block's
template <bool BLOCK, bool VALUES = true, typename Key>
__device__ void bitonic(Key* keys, double* vals, int n2, int first, int threads) {
    for (int size = 2; size <= n2; size <<= 1) {
        for (int half = size >> 1; half > 0; half >>= 1) {
            for (int t = first; t < (n2 >> 1); t += threads) {
                const int i = 2 * t - (t & (half - 1)), j = i + half;
                const bool up = (i & size) == 0;
                const Key ki = keys[i], kj = keys[j];
                if ((ki > kj) == up) {
                    keys[i] = kj; keys[j] = ki;
                    if (VALUES) { const double v = vals[i]; vals[i] = vals[j]; vals[j] = v; }
                }
            }
            if (BLOCK) __syncthreads(); else __syncwarp();
        }
    }
}

// The products of A's entries [e0, e0 + 32) below a1, spread over the warp's lanes (a
// lane an entry reads its B row; then a lane a product, its entry found among the lanes by
// a search over shuffles): base = place(batch) (the same on every lane), then
// emit(base + q, column, value) for the batch's q-th product; the batch's size returned.
template <typename Place, typename Emit>
__device__ __forceinline__ int spread_batch(int e0, int a1, int lane,
                                            const int* __restrict__ a_indices,
                                            const double* __restrict__ a_data,
                                            const int* __restrict__ b_indptr,
                                            const int* __restrict__ b_indices,
                                            const double* __restrict__ b_data, Place place,
                                            Emit emit) {
    const int e = e0 + lane;
    int bs = 0, len = 0;
    double av = 0.0;
    if (e < a1) {
        const int c = a_indices[e];
        av = a_data[e];
        bs = b_indptr[c];
        len = b_indptr[c + 1] - bs;
    }
    const int inc = warp_inclusive(len, lane);
    const int batch = __shfl_sync(FULL, inc, 31);
    const int base = place(batch);
    for (int q0 = 0; q0 < batch; q0 += 32) {
        const int q = q0 + lane;
        int src = 0;  // the first lane whose inclusive count passes q
        for (int step = 16; step > 0; step >>= 1) {
            if (__shfl_sync(FULL, inc, src + step - 1) <= q) src += step;
        }
        const int s_inc = __shfl_sync(FULL, inc, src);
        const int s_len = __shfl_sync(FULL, len, src);
        const int s_bs = __shfl_sync(FULL, bs, src);
        const double s_av = __shfl_sync(FULL, av, src);
        if (q < batch) {
            const int b = s_bs + q - (s_inc - s_len);
            emit(base + q, BCOL(b), s_av * BVAL(b));
        }
    }
    return batch;
}
"""

SOURCE = r"""
typedef unsigned long long u64;
#ifndef THREADS
#define THREADS 512
#endif
#ifndef K_ROWS
#define K_ROWS 1024      // the key space of a chunk (rows + short entries + short products)
#endif
#ifndef LONG_P
#define LONG_P 512       // a row of more products (or entries) is long
#endif
#define SPAN (K_ROWS + 2 * LONG_P)  // most items (and entries) a chunk holds

// per entry: its B row's length
extern "C" __global__ void entry_products(const int* __restrict__ a_indices, long long nnz,
                                          const int* __restrict__ b_indptr, long long* out) {
    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < nnz) { int c = a_indices[j]; out[j] = b_indptr[c + 1] - b_indptr[c]; }
}

// per row: short products, chunk weight, long products (three arrays of m, for one scan)
extern "C" __global__ void row_weights(const int* __restrict__ a_indptr,
                                       const long long* __restrict__ eo, int m,
                                       long long* __restrict__ w) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const int a0 = a_indptr[i], a1 = a_indptr[i + 1];
    const long long p = eo[a1] - eo[a0];
    const bool is_long = p > LONG_P || (a1 - a0) > LONG_P;
    w[i] = is_long ? 0 : p;                              // short products
    w[m + i] = is_long ? 1 : p + (a1 - a0) + 1;          // chunk key weight
    w[2 * (long long)m + i] = is_long ? p : 0;           // long products
}

// chunk c's first row: the row whose key range crosses c * K_ROWS (ks exclusive offsets)
// chunk c's first row: the first row i (of 0..m) with ks[i] >= c * K_ROWS
extern "C" __global__ void chunk_rows(const long long* __restrict__ ks, int m, int chunks,
                                      int* __restrict__ first) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > m) return;
    const long long lo = i == 0 ? 0 : ks[i - 1] / K_ROWS + 1, hi = ks[i] / K_ROWS;
    for (long long c = lo; c <= hi && c < chunks; ++c) first[c] = i;
    if (i == m) first[chunks] = m;
}

__device__ int block_scan(int* a, int n, int* warp_sums) {
    // exclusive scan of a[0, n) in place; returns the total
    const int per = (n + THREADS - 1) / THREADS;
    const int t0 = threadIdx.x * per;
    int mine = 0;
    for (int t = t0; t < t0 + per && t < n; ++t) mine += a[t];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int scan = mine;
    for (int o = 1; o < 32; o <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, scan, o);
        if (lane >= o) scan += v;
    }
    if (lane == 31) warp_sums[warp] = scan;
    __syncthreads();
    if (warp == 0) {
        int s = lane < THREADS / 32 ? warp_sums[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += v;
        }
        warp_sums[lane] = s;
    }
    __syncthreads();
    int run = scan - mine + (warp ? warp_sums[warp - 1] : 0);
    for (int t = t0; t < t0 + per && t < n; ++t) { int v = a[t]; a[t] = run; run += v; }
    const int total = warp_sums[THREADS / 32 - 1];
    __syncthreads();
    return total;
}

__device__ __forceinline__ int upper_bound_s(const int* a, int n, int x) {
    int lo = 0, hi = n;
    while (lo < hi) { int mid = (lo + hi) >> 1; if (a[mid] <= x) lo = mid + 1; else hi = mid; }
    return lo;
}

struct Smem {
    u64 keys[SPAN];
    double vals[SPAN];
    double e_val[SPAN];
    int e_b0[SPAN];
    int e_item[SPAN + 1];
    int e_row[SPAN];
    int r_a0[K_ROWS + 1];
    int r_ent[K_ROWS + 1];
    int r_item[K_ROWS + 1];
    long long r_eo0[K_ROWS + 1];
    int warp_sums[32];
};

extern "C" __global__ void __launch_bounds__(THREADS)
esc_chunk(const int* __restrict__ a_indptr, const int* __restrict__ a_indices,
          const double* __restrict__ a_data, const int* __restrict__ b_indptr,
          const int* __restrict__ b_indices, const double* __restrict__ b_data,
          const long long* __restrict__ eo, const long long* __restrict__ rs,
          const int* __restrict__ first_rows,
          long long* __restrict__ row_begin, int* __restrict__ row_nnz,
          int* __restrict__ out_cols, double* __restrict__ out_vals, int* __restrict__ out_row) {
    extern __shared__ u64 raw[];
    Smem& s = *reinterpret_cast<Smem*>(raw);
    const int first = first_rows[blockIdx.x], last = first_rows[blockIdx.x + 1];
    const int rows = last - first;
    const long long base = rs[first];
    // rows: entries and products (long rows: none)
    for (int r = threadIdx.x; r < rows; r += THREADS) {
        const int a0 = a_indptr[first + r], a1 = a_indptr[first + r + 1];
        const long long e0 = eo[a0];
        const long long p = eo[a1] - e0;
        const bool is_long = p > LONG_P || (a1 - a0) > LONG_P;
        s.r_a0[r] = a0;
        s.r_ent[r] = is_long ? 0 : a1 - a0;
        s.r_eo0[r] = e0;
    }
    __syncthreads();
    const int entries = block_scan(s.r_ent, rows, s.warp_sums);
    if (threadIdx.x == 0) s.r_ent[rows] = entries;
    __syncthreads();
    // entries: their B rows, values, items
    for (int j = threadIdx.x; j < entries; j += THREADS) {
        const int r = upper_bound_s(s.r_ent, rows, j) - 1;
        const int e = s.r_a0[r] + j - s.r_ent[r];
        const int c = a_indices[e];
        s.e_b0[j] = b_indptr[c];
        s.e_val[j] = a_data[e];
        s.e_row[j] = r;
        s.e_item[j] = (int)(rs[first + r] - base + eo[e] - s.r_eo0[r]);
    }
    __syncthreads();
    const int n = (int)(rs[last] - base);
    if (threadIdx.x == 0) s.e_item[entries] = n;
    __syncthreads();
    for (int q = threadIdx.x; q < n; q += THREADS) {
        const int j = upper_bound_s(s.e_item, entries, q) - 1;
        const int b = s.e_b0[j] + q - s.e_item[j];
        s.keys[q] = ((u64)s.e_row[j] << 32) | (unsigned)b_indices[b];
        s.vals[q] = s.e_val[j] * b_data[b];
    }
    int n2 = 1;
    while (n2 < n) n2 <<= 1;
    for (int t = n + threadIdx.x; t < n2; t += THREADS) s.keys[t] = ~0ull;
    __syncthreads();
#ifndef NO_SORT
    for (int size = 2; size <= n2; size <<= 1) {
#else
    for (int size = n2 + 1; size <= n2; size <<= 1) {
#endif
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < (n2 >> 1); t += THREADS) {
                const int i = 2 * t - (t & (stride - 1));
                const int j = i + stride;
                const bool up = (i & size) == 0;
                const u64 ki = s.keys[i], kj = s.keys[j];
                if ((ki > kj) == up) {
                    s.keys[i] = kj; s.keys[j] = ki;
                    const double v = s.vals[i]; s.vals[i] = s.vals[j]; s.vals[j] = v;
                }
            }
            __syncthreads();
        }
    }
    // heads: 1 where a key starts (into e_b0, free now), scanned
    for (int t = threadIdx.x; t < n; t += THREADS)
        s.e_b0[t] = (t == 0 || s.keys[t] != s.keys[t - 1]);
    __syncthreads();
    block_scan(s.e_b0, n, s.warp_sums);
    for (int t = threadIdx.x; t < n; t += THREADS) {
        const u64 k = s.keys[t];
        if (t > 0 && s.keys[t - 1] == k) continue;
        double v = s.vals[t];
        int u = t + 1;
        for (; u < n && s.keys[u] == k; ++u) v += s.vals[u];
        const long long o = base + s.e_b0[t];
        const int r = (int)(k >> 32);
        out_cols[o] = (int)(k & 0xffffffffu);
        out_vals[o] = v;
        out_row[o] = first + r;
        if (t == 0 || (s.keys[t - 1] >> 32) != (u64)r) {
            row_begin[first + r] = o;
            s.r_item[r] = s.e_b0[t];
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < n; t += THREADS) {
        const u64 k = s.keys[t];
        if (t + 1 < n && (s.keys[t + 1] >> 32) == (k >> 32)) continue;
        const int r = (int)(k >> 32);
        row_nnz[first + r] = s.e_b0[t] + (t == 0 || s.keys[t - 1] != k) - s.r_item[r];
    }
}

// long rows' products: a thread a product, its long row and entry by binary searches
extern "C" __global__ void long_expand(const int* __restrict__ a_indptr,
        const int* __restrict__ a_indices, const double* __restrict__ a_data,
        const int* __restrict__ b_indptr, const int* __restrict__ b_indices,
        const double* __restrict__ b_data, const int* __restrict__ long_rows, int n_long,
        const long long* __restrict__ eo, const long long* __restrict__ long_base,
        long long total, u64* keys, double* vals) {
    long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= total) return;
    int lo = 0, hi = n_long;  // the long row: last long_base[r] <= q
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (long_base[mid] <= q) lo = mid + 1; else hi = mid;
    }
    const int r = lo - 1;
    const int row = long_rows[r];
    const long long within = q - long_base[r] + eo[a_indptr[row]];
    int elo = a_indptr[row], ehi = a_indptr[row + 1];  // the entry: last eo[e] <= within
    while (elo < ehi) {
        int mid = (elo + ehi) >> 1;
        if (eo[mid] <= within) elo = mid + 1; else ehi = mid;
    }
    const int e = elo - 1;
    const int b = b_indptr[a_indices[e]] + (int)(within - eo[e]);
    keys[q] = ((u64)r << 32) | (unsigned)b_indices[b];
    vals[q] = a_data[e] * b_data[b];
}

extern "C" __global__ void long_reduce(const u64* keys, const double* vals, long long n,
        const long long* __restrict__ out_at, long long offset, const int* __restrict__ long_rows,
        long long* row_begin, int* row_nnz, int* out_cols, double* out_vals, int* out_row) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const u64 k = keys[t];
    if (t > 0 && keys[t - 1] == k) return;
    double v = vals[t];
    long long u = t + 1;
    for (; u < n && keys[u] == k; ++u) v += vals[u];
    const long long o = offset + out_at[t];
    const int row = long_rows[k >> 32];
    out_cols[o] = (int)(k & 0xffffffffu);
    out_vals[o] = v;
    out_row[o] = row;
    if (t == 0 || (keys[t - 1] >> 32) != (k >> 32)) row_begin[row] = o;
    if (u == n || (keys[u] >> 32) != (k >> 32)) row_nnz[row] = (int)(o + 1);  // its end, for now
}

// a thread a work slot: its entry into C (holes: row -1)
extern "C" __global__ void move_entries(const int* __restrict__ out_row,
        const int* __restrict__ cols, const double* __restrict__ vs, long long n,
        const long long* __restrict__ row_begin, const int* __restrict__ c_indptr,
        int* __restrict__ c_indices, double* __restrict__ c_data) {
    long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n) return;
    const int row = out_row[o];
    if (row < 0) return;
    const long long at = c_indptr[row] + (o - row_begin[row]);
    c_indices[at] = cols[o];
    c_data[at] = vs[o];
}
"""


def run(A, cupy, k_rows, long_p, threads, extra=()):
    """The chunked product of ``A @ A`` (int32 indices, float64) as a function returning
    ``(timer, (indptr, indices, data))``."""
    span = k_rows + 2 * long_p
    mod = cupy.RawModule(
        code=SOURCE,
        options=(
            "-std=c++17",
            f"-DK_ROWS={k_rows}",
            f"-DLONG_P={long_p}",
            f"-DTHREADS={threads}",
            *extra,
        ),
    )
    k = {n: mod.get_function(n) for n in
         ("entry_products", "row_weights", "chunk_rows", "esc_chunk", "long_expand",
          "long_reduce", "move_entries")}  # fmt: skip
    smem = span * 36 + 4 + (k_rows + 1) * 20 + 128 + 64
    k["esc_chunk"].max_dynamic_shared_size_bytes = smem
    m = A.shape[0]
    ip, ix, dv = A.indptr, A.indices, A.data
    i64, i32 = np.int64, np.int32

    def product():
        t = Timer(cupy)
        eo = entry_offsets(k["entry_products"], A, cupy)
        w = cupy.empty(3 * m, dtype=i64)
        k["row_weights"](grid(m), (256,), (ip, eo, i32(m), w))
        sums = cupy.empty((3, m + 1), dtype=i64)
        sums[:, :1] = 0
        sums[:, 1:] = cupy.cumsum(w.reshape(3, m), axis=1)
        totals = sums[:, m].get()
        t.mark("offsets, wait")
        short_total, key_total, long_total = (int(v) for v in totals)
        rs, ks, ls = sums[0], sums[1], sums[2]
        chunks = max(1, -(-key_total // k_rows))
        first = cupy.empty(chunks + 1, dtype=i32)
        k["chunk_rows"](grid(m + 1), (256,), (ks, i32(m), i32(chunks), first))
        slots = short_total + long_total
        out_cols = cupy.empty(max(slots, 1), dtype=i32)
        out_vals = cupy.empty(max(slots, 1), dtype=np.float64)
        out_row = cupy.full(max(slots, 1), -1, dtype=i32)
        row_begin = cupy.empty(m, dtype=i64)
        row_nnz = cupy.zeros(m, dtype=i32)
        chunk_args = (ip, ix, dv, ip, ix, dv, eo, rs, first, row_begin, row_nnz, out_cols,
                      out_vals, out_row)  # fmt: skip
        k["esc_chunk"]((chunks,), (threads,), chunk_args, shared_mem=smem)
        t.mark("chunks")
        if long_total:
            longs = cupy.nonzero(w[2 * m :] > 0)[0].astype(i32)
            long_base = ls[longs]
            keys = cupy.empty(long_total, dtype=np.uint64)
            vals = cupy.empty(long_total, dtype=np.float64)
            expand_args = (ip, ix, dv, ip, ix, dv, longs, i32(longs.size), eo, long_base,
                           i64(long_total), keys, vals)  # fmt: skip
            k["long_expand"](grid(long_total), (256,), expand_args)
            t.mark("long expand")
            order = cupy.argsort(keys)
            keys, vals = keys[order], vals[order]
            t.mark("long sort")
            heads = cupy.empty(long_total, dtype=i64)
            heads[:1] = 1
            heads[1:] = keys[1:] != keys[:-1]
            out_at = cupy.cumsum(heads) - 1
            k["long_reduce"](grid(long_total), (256,), (keys, vals, i64(long_total), out_at,
                             i64(short_total), longs, row_begin, row_nnz, out_cols, out_vals,
                             out_row))  # fmt: skip
            row_nnz[longs] -= row_begin[longs].astype(i32)
            t.mark("long reduce")
        c_indptr, ci, cd = result_arrays(row_nnz, t, cupy)
        k["move_entries"](grid(slots), (256,), (out_row, out_cols, out_vals, i64(slots),
                          row_begin, c_indptr, ci, cd))  # fmt: skip
        t.mark("move")
        return t, (c_indptr, ci, cd)

    return product


def grid(n: int, block: int = 256) -> tuple:
    """The blocks of ``block`` threads that ``n`` threads take (at least one)."""
    return (max(1, -(-n // block)),)


def result_arrays(row_nnz, timer, cupy):
    """``C``'s row offsets (the scan of ``row_nnz``, int32) and its empty indices and
    values, once one wait has read ``nnz(C)`` (marked on ``timer``)."""
    indptr = cupy.empty(row_nnz.size + 1, dtype=np.int32)
    indptr[:1] = 0
    cupy.cumsum(row_nnz, out=indptr[1:])
    nnz = int(indptr[-1].get())
    timer.mark("C offsets, wait")
    return indptr, cupy.empty(nnz, dtype=np.int32), cupy.empty(nnz, dtype=np.float64)


def entry_offsets(kernel, A, cupy):
    """The running count of ``A @ A``'s products by entry of ``A`` (``nnz + 1``, int64):
    ``kernel`` (``entry_products``) gives each entry's, a scan the rest."""
    nnz = A.nnz
    eo = cupy.empty(nnz + 1, dtype=np.int64)
    eo[:1] = 0
    products = cupy.empty(nnz, dtype=np.int64)
    kernel(grid(nnz), (256,), (A.indices, np.int64(nnz), A.indptr, products))
    cupy.cumsum(products, out=eo[1:])
    return eo


def power_law_operands(heldout: bool, cupy, cxs):
    """``(set, name, A, identity, cupyx's A @ A sorted)`` of the calls mode's power-law
    matrices (the fit 1.5M; ``heldout``: the 2M too), ``A`` made by a cupyx product."""
    matrices = [("fit", "powerlaw_1500k", dict(n_rows=1_500_000, mean=3.0, seed=1))]
    if heldout:
        matrices.append(("heldout", "powerlaw_2m", dict(n_rows=2_000_000, mean=3.75, seed=2)))
    for kind, name, kw in matrices:
        S = sp.csr_matrix(synthetic.power_law(**kw))
        S.sum_duplicates()
        identity = cxs.identity(S.shape[0], format="csr")
        A = cxs.csr_matrix(S) @ identity
        ref = A @ A
        ref.sort_indices()
        yield kind, name, A, identity, ref


def equals(parts, ref, cupy, cxs) -> bool:
    """Whether ``(indptr, indices, data)`` is cupyx's ``ref`` (values to rounding)."""
    indptr, indices, data = parts
    C = cxs.csr_matrix((data, indices, indptr), shape=ref.shape)
    return (
        C.nnz == ref.nnz
        and bool(cupy.array_equal(C.indptr, ref.indptr))
        and bool(cupy.array_equal(C.indices, ref.indices))
        and bool(cupy.allclose(C.data, ref.data))
    )


class Timer:
    def __init__(self, cupy):
        self.cupy = cupy
        self.events = [("start", self._record())]

    def _record(self):
        e = self.cupy.cuda.Event()
        e.record()
        return e

    def mark(self, name):
        self.events.append((name, self._record()))

    def spans(self):
        self.events[-1][1].synchronize()
        out = {}
        for (_, a), (name, b) in zip(self.events[:-1], self.events[1:], strict=True):
            out[name] = self.cupy.cuda.get_elapsed_time(a, b)
        out["total"] = self.cupy.cuda.get_elapsed_time(self.events[0][1], self.events[-1][1])
        return out


def timed_in_turns(cupy, A, identity, products: dict, repeat: int, pause: float = 0.0):
    """``(walls, spans)``: wall clock (ms) of cupyx's ``B @ B`` and of each
    ``products[label](B)`` (which returns its :class:`Timer`) on fresh operands
    ``B = A @ identity``, the order turning each sample and the first sample dropped;
    ``spans``: each product's :meth:`Timer.spans`. ``pause``: seconds idle before each."""
    walls = {label: [] for label in ["cupyx", *products]}
    spans = {label: [] for label in products}
    order = list(walls)
    for r in range(repeat + 1):
        turn = r % len(order)
        for label in order[turn:] + order[:turn]:
            B = A @ identity  # fresh operands each sample
            cupy.cuda.Device().synchronize()
            if pause:
                time.sleep(pause)
            t0 = time.perf_counter()
            timer = B @ B if label == "cupyx" else products[label](B)
            cupy.cuda.Device().synchronize()
            if r:
                walls[label].append((time.perf_counter() - t0) * 1e3)
                if label != "cupyx":
                    spans[label].append(timer.spans())
    return walls, spans


def median_row(kind, name, config, label, A, ref, walls, spans) -> dict:
    """A probe's result row for ``config`` (shown as ``label``): medians of its wall clock,
    of cupyx's and of each piece; printed as JSON."""
    row = {"set": kind, "matrix": name, "config": label, "nnz": int(A.nnz),
           "nnz_out": int(ref.nnz), "wall_ms": float(np.median(walls[config])),
           "cupyx_ms": float(np.median(walls["cupyx"]))}  # fmt: skip
    for key in spans[config][0]:
        row[key] = float(np.median([s[key] for s in spans[config]]))
    print(json.dumps(row), flush=True)
    return row


def wall_columns(title: str) -> list:
    """The columns a probe's table starts with: its configuration (titled ``title``), its
    wall clock, cupyx's and their ratio."""
    return [
        (title, "---", lambda r: r["config"]),
        ("wall", "---:", lambda r: f"{r['wall_ms']:.3f}"),
        ("cupyx", "---:", lambda r: f"{r['cupyx_ms']:.3f}"),
        ("x cupyx", "---:", lambda r: f"{r['cupyx_ms'] / r['wall_ms']:.2f}x"),
    ]


def probe_arguments(doc: str, configs: str, names: str):
    """A probe's arguments: ``--heldout``, ``--repeat``, ``--configs`` (``configs`` by
    default, each ``names``), ``--out`` and ``--md``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--heldout", action="store_true")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--configs", default=configs, help=f"{names},...")
    parser.add_argument("--out")
    parser.add_argument("--md")
    return parser.parse_args()


def main():
    args = probe_arguments(__doc__, "1024:512:512", "K_ROWS:LONG_P:THREADS")
    import time

    import cupy
    import cupyx.scipy.sparse as cxs

    rows = []
    for kind, name, A, identity, ref in power_law_operands(args.heldout, cupy, cxs):
        cupyx_ms = []
        for _ in range(args.repeat):
            B = A @ identity
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            B @ B
            cupy.cuda.Device().synchronize()
            cupyx_ms.append((time.perf_counter() - t0) * 1e3)
        for config in args.configs.split(","):
            k_rows, long_p, threads, *extra = config.split(":")
            product = run(A, cupy, int(k_rows), int(long_p), int(threads), extra)
            same = equals(product()[1], ref, cupy, cxs)
            spans, walls = [], []
            for _ in range(args.repeat):
                cupy.cuda.Device().synchronize()
                t0 = time.perf_counter()
                t, _ = product()
                cupy.cuda.Device().synchronize()
                walls.append((time.perf_counter() - t0) * 1e3)
                spans.append(t.spans())
            row = {"set": kind, "matrix": name, "config": config, "same": same,
                   "wall_ms": float(np.median(walls)),
                   "cupyx_ms": float(np.median(cupyx_ms))}  # fmt: skip
            for key in spans[0]:
                row[key] = float(np.median([s[key] for s in spans]))
            rows.append(row)
            print(json.dumps(row), flush=True)
    columns = [
        ("K_ROWS:LONG_P:THREADS", "---", lambda r: r["config"]),
        ("equal", "---", lambda r: str(r["same"])),
        ("wall", "---:", lambda r: f"{r['wall_ms']:.3f}"),
        ("cupyx", "---:", lambda r: f"{r['cupyx_ms']:.3f}"),
    ]
    note = "Milliseconds: wall clock, and each piece by CUDA events (medians)."
    write_results(args, __doc__, "benchmarks.experiments.spgemm_esc_probe", rows, columns, note)


# a row's fields that are not one of its timed pieces
NOT_PIECES = ("set", "matrix", "config", "same", "nnz", "nnz_out", "wall_ms", "cupyx_ms")


def write_results(
    args, doc: str, module: str, rows: list, columns: list, note: str, header=None
) -> None:
    """A probe's rows into ``--out`` (JSON, under the experiment's header, or ``header``
    where the rows come from an earlier run's file) and its table (printed, and into
    ``--md``): set, matrix, ``columns`` (``(title, Markdown alignment, cell of a row)``),
    then each timed piece in milliseconds (every row's, blank where a row has none)."""
    from benchmarks import common

    if header is None:
        header = common.experiment_header(module)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**header, "rows": rows}, f, indent=1)
    pieces = list(dict.fromkeys(k for r in rows for k in r if k not in NOT_PIECES))
    titles = [title for title, _, _ in columns] + pieces
    lines = [
        "| set | matrix | " + " | ".join(titles) + " |",
        "|---|---|" + "".join(f"{align}|" for _, align, _ in columns) + "---:|" * len(pieces),
    ]
    for r in rows:
        cells = [cell(r) for _, _, cell in columns]
        cells += [f"{r[k]:.3f}" if k in r else "" for k in pieces]
        lines.append(f"| {r['set']} | {r['matrix']} | " + " | ".join(cells) + " |")
    common.table_md(args.md, doc, header, note, lines)


if __name__ == "__main__":
    main()
