"""Could rows sorted where their products are beat ALG1 on power-law rows (issue 47)?

The design ``spgemm_esc_probe`` pointed to, as a probe before any of it joins the library
(float64 values, int32 indices, the experiment's own CUDA): each entry's products and their
running count (``eo``) give every row its products' place in one work array, so no row
waits for another; then

* ``rows_main``: a warp takes 32 rows; a row of at most ``TINY`` products is inserted by its
  thread into ``TINY`` sorted registers (equal columns summed); a row of at most ``MED`` is
  expanded by the whole warp into its slice of shared memory (a lane a product, its entry
  found by a binary search of ``eo``), sorted there (bitonic, ``__syncwarp`` only) and
  summed; a longer row is listed;
  (``rows_batched``: a warp's medium rows expanded and sorted together, up to ``BATCH``);
* ``rows_long``: a block a listed row, the same in shared memory (up to ``LCAP`` slots);
  longer rows are listed again, their products expanded a thread each, sorted by
  ``cupy.argsort`` and summed (``huge_expand``, ``huge_reduce``);
* ``PACKED``: B's column and value read from one 16-byte record a entry (``pack_b``);
* each row's distinct entries wait at its place in the work array with their row beside
  them; their count's scan gives ``C``'s row offsets, one wait reads ``nnz(C)``, and
  ``move_slots`` (a thread a slot) moves every entry into ``C``.

Each piece timed by CUDA events (medians of ``--repeat``), the whole by wall clock beside
cupyx (cuSPARSE ALG1) on the same operands; answers checked against cupyx's.

Found (``spgemm_rows_probe_h200``, fit power-law 1.5M, cupyx 1.46 ms in that run): 2.00 ms
at best (0.73x; ``TINY`` 8, ``MED`` 256, ``LCAP`` 8192, two long-row blocks an SM), answers
equal. Per piece: ``rows_main`` 0.76 ms (0.57 of it the rows of at most 32 products; the
tiny rows a thread each cost about as much as ALG1's whole expand, 0.49); the long rows
0.34 (a block a row, one after another); the rows past ``LCAP`` 0.54 whatever their
number (host waits and small launches around ``cupy.argsort``); offsets and move 0.3.
Neither batching a warp's medium rows (``BATCH``: 0.83) nor issuing each level's loads
together (``PREFETCH``: 1.03 at 126 registers, half the threads an SM) helps, nor, in
``spgemm_rows_packed_h200``, B's column and value packed into one 16-byte record
(``PACKED``: 0.762 against 0.774, the packing included): the B rows' sectors do not bound
``rows_main``; what does (the divergent loops of a thread's row, the scattered writes,
58 registers a thread) is for a profiler to say. A thread a row does not pay below 8
products (``TINY`` 2, 4, 16: 1.25, 0.94, 1.01). The first version, one block
sorting a huge row in global memory, took 2.7-3.1 ms on the long rows alone.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_rows_probe [--heldout] [--repeat 9]
        [--configs TINY:MED:LCAP,...] [--out FILE.json] [--md FILE.md]
"""

from __future__ import annotations

import numpy as np

from benchmarks.experiments.spgemm_esc_probe import (
    CUDA_HELPERS,
    Timer,
    entry_offsets,
    equals,
    grid,
    median_row,
    power_law_operands,
    probe_arguments,
    result_arrays,
    timed_in_turns,
    wall_columns,
    write_results,
)

MODULE = "benchmarks.experiments.spgemm_rows_probe"
SOURCE = r"""

#ifndef TINY
#define TINY 8          // a row of at most TINY products: a thread, in registers
#endif
#ifndef MED
#define MED 256         // at most MED: a warp, sorted in its slice of shared memory
#endif
#define WARPS 8         // warps a block of rows_main
#define LBLOCK 1024     // threads a block of rows_long
#ifndef LCAP
#define LCAP 16384      // a long row sorted in shared memory up to LCAP slots, else in scratch
#endif
#ifdef PACKED  // B's column and value in one 16-byte record (b_indices, b_data: the records)
#define BCOL(b) (b_indices[4 * (b) + 2])
#define BVAL(b) (b_data[2 * (b)])
#else
#define BCOL(b) (b_indices[b])
#define BVAL(b) (b_data[b])
#endif
#define PAD 0x7fffffff
"""
SOURCE += CUDA_HELPERS
SOURCE += r"""

extern "C" __global__ void entry_products(const int* __restrict__ a_indices, long long nnz,
                                          const int* __restrict__ b_indptr, long long* out) {
    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < nnz) { int c = a_indices[j]; out[j] = b_indptr[c + 1] - b_indptr[c]; }
}

__device__ __forceinline__ int entry_of(const long long* __restrict__ eo, int lo, int hi,
                                        long long at) {
    // the last entry e of [lo, hi) with eo[e] <= at
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (eo[mid] <= at) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
}

__device__ __forceinline__ void tiny_insert(int (&keys)[TINY], double (&vals)[TINY], int key,
                                            double val) {
    bool found = false;
#pragma unroll
    for (int k = 0; k < TINY; ++k) {
        if (keys[k] == key) { vals[k] += val; found = true; }
    }
    if (found) return;
#pragma unroll
    for (int k = TINY - 1; k > 0; --k) {
        if (keys[k - 1] > key) { keys[k] = keys[k - 1]; vals[k] = vals[k - 1]; }
        else if (keys[k] > key) { keys[k] = key; vals[k] = val; }
    }
    if (keys[0] > key) { keys[0] = key; vals[0] = val; }
}

// a row of at most TINY products by its thread: inserted into TINY sorted registers,
// written at its place p0 (its holes marked -1)
__device__ void tiny_row(int row, int a0, int a1, long long p0, int p,
                         const int* __restrict__ a_indices, const double* __restrict__ a_data,
                         const int* __restrict__ b_indptr, const int* __restrict__ b_indices,
                         const double* __restrict__ b_data, int* __restrict__ cnt,
                         int* __restrict__ slot_row, int* __restrict__ t_cols,
                         double* __restrict__ t_vals) {
    int keys[TINY];
    double vals[TINY];
#pragma unroll
    for (int k = 0; k < TINY; ++k) { keys[k] = PAD; vals[k] = 0.0; }
#ifdef PREFETCH
    if (a1 - a0 <= TINY) {  // every load of a level issued before any is used
        const int ne = a1 - a0;
        int col[TINY], start[TINY], len[TINY];
        double av[TINY];
#pragma unroll
        for (int k = 0; k < TINY; ++k) {
            if (k < ne) { col[k] = a_indices[a0 + k]; av[k] = a_data[a0 + k]; }
        }
#pragma unroll
        for (int k = 0; k < TINY; ++k) {
            if (k < ne) { start[k] = b_indptr[col[k]]; len[k] = b_indptr[col[k] + 1] - start[k]; }
            else len[k] = 0;
        }
        int pk[TINY];
        double pv[TINY];
#pragma unroll
        for (int j = 0; j < TINY; ++j) {
            int b = 0, acc = 0;  // product j's place in B and its entry's value
            double a = 0.0;
#pragma unroll
            for (int t = 0; t < TINY; ++t) {
                if (acc <= j && acc + len[t] > j) { b = start[t] + j - acc; a = av[t]; }
                acc += len[t];
            }
            if (j < p) {
                pk[j] = BCOL(b);
                pv[j] = a * BVAL(b);
            }
        }
#pragma unroll
        for (int j = 0; j < TINY; ++j) {
            if (j < p) tiny_insert(keys, vals, pk[j], pv[j]);
        }
    } else
#endif
    for (int e = a0; e < a1; ++e) {
        const int c = a_indices[e];
        const double av = a_data[e];
        const int b1 = b_indptr[c + 1];
        for (int b = b_indptr[c]; b < b1; ++b)
            tiny_insert(keys, vals, BCOL(b), av * BVAL(b));
    }
    int n = 0;
#pragma unroll
    for (int k = 0; k < TINY; ++k) {
        if (k < p) {
            if (keys[k] != PAD) {
                t_cols[p0 + k] = keys[k];
                t_vals[p0 + k] = vals[k];
                slot_row[p0 + k] = row;
                ++n;
            } else {
                slot_row[p0 + k] = -1;
            }
        }
    }
    cnt[row] = n;
}

// a warp's row: its entries and products read (a0, a1, p0, p: none past m), a tiny row
// done by its thread, a long row listed
__device__ __forceinline__ void row_first(
        int row, int m, const int* __restrict__ a_indptr, const int* __restrict__ a_indices,
        const double* __restrict__ a_data, const int* __restrict__ b_indptr,
        const int* __restrict__ b_indices, const double* __restrict__ b_data,
        const long long* __restrict__ eo, int* __restrict__ cnt, int* __restrict__ slot_row,
        int* __restrict__ t_cols, double* __restrict__ t_vals, int* __restrict__ long_rows,
        int* __restrict__ long_count, int& a0, int& a1, long long& p0, long long& p) {
    if (row >= m) return;
    a0 = a_indptr[row];
    a1 = a_indptr[row + 1];
    p0 = eo[a0];
    p = eo[a1] - p0;
    if (p <= TINY) {
        tiny_row(row, a0, a1, p0, (int)p, a_indices, a_data, b_indptr, b_indices, b_data, cnt,
                 slot_row, t_cols, t_vals);
    }
    if (p > MED) long_rows[atomicAdd(long_count, 1)] = row;
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
rows_main(const int* __restrict__ a_indptr, const int* __restrict__ a_indices,
          const double* __restrict__ a_data, const int* __restrict__ b_indptr,
          const int* __restrict__ b_indices, const double* __restrict__ b_data,
          const long long* __restrict__ eo, int m, int* __restrict__ cnt,
          int* __restrict__ slot_row, int* __restrict__ t_cols, double* __restrict__ t_vals,
          int* __restrict__ long_rows, int* __restrict__ long_count) {
    __shared__ int s_keys[WARPS][MED];
    __shared__ double s_vals[WARPS][MED];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int stride = gridDim.x * WARPS * 32;
    for (int base = (blockIdx.x * WARPS + w) * 32; base < m; base += stride) {
        const int row = base + lane;
        int a0 = 0, a1 = 0;
        long long p0 = 0, p = 0;
        row_first(row, m, a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, eo, cnt,
                  slot_row, t_cols, t_vals, long_rows, long_count, a0, a1, p0, p);
        unsigned med = __ballot_sync(FULL, row < m && p > TINY && p <= MED);
        int* keys = s_keys[w];
        double* vals = s_vals[w];
        while (med) {
            const int src = __ffs(med) - 1;
            med &= med - 1;
            const int r = base + src;
            const int ra0 = __shfl_sync(FULL, a0, src), ra1 = __shfl_sync(FULL, a1, src);
            const long long rp0 = __shfl_sync(FULL, p0, src);
            const int rp = (int)__shfl_sync(FULL, p, src);
#ifdef PREFETCH
            // a lane an entry (32 at a time): its B row, then the products spread over lanes
            for (int e0 = ra0, done = 0; e0 < ra1; e0 += 32) {
                spread_batch(e0, ra1, lane, a_indices, a_data, b_indptr, b_indices, b_data,
                             [&](int batch) { const int at = done; done += batch; return at; },
                             [&](int q, int col, double v) { keys[q] = col; vals[q] = v; });
            }
#else
            for (int q = lane; q < rp; q += 32) {
                const int e = entry_of(eo, ra0, ra1, rp0 + q);
                const int b = b_indptr[a_indices[e]] + (int)(rp0 + q - eo[e]);
                keys[q] = BCOL(b);
                vals[q] = a_data[e] * BVAL(b);
            }
#endif
            int n2 = 32;
            while (n2 < rp) n2 <<= 1;
            for (int q = rp + lane; q < n2; q += 32) keys[q] = PAD;
            __syncwarp();
            bitonic<false>(keys, vals, n2, lane, 32);
            int out = 0;
            for (int q0 = 0; q0 < rp; q0 += 32) {
                const int q = q0 + lane;
                const bool head = q < rp && (q == 0 || keys[q] != keys[q - 1]);
                const unsigned heads = __ballot_sync(FULL, head);
                if (head) {
                    double v = vals[q];
                    for (int u = q + 1; u < rp && keys[u] == keys[q]; ++u) v += vals[u];
                    const long long o = rp0 + out + __popc(heads & ((1u << lane) - 1));
                    t_cols[o] = keys[q];
                    t_vals[o] = v;
                    slot_row[o] = r;
                }
                out += __popc(heads);
            }
            for (int q = out + lane; q < rp; q += 32) slot_row[rp0 + q] = -1;
            if (lane == 0) cnt[r] = out;
            __syncwarp();
        }
    }
}

extern "C" __global__ void __launch_bounds__(LBLOCK, 1)
rows_long(const int* __restrict__ a_indptr, const int* __restrict__ a_indices,
          const double* __restrict__ a_data, const int* __restrict__ b_indptr,
          const int* __restrict__ b_indices, const double* __restrict__ b_data,
          const long long* __restrict__ eo, const int* __restrict__ long_rows,
          const int* __restrict__ long_count, int* __restrict__ huge_rows,
          int* __restrict__ huge_count, int* __restrict__ cnt,
          int* __restrict__ slot_row, int* __restrict__ t_cols, double* __restrict__ t_vals) {
    extern __shared__ double smem[];
    double* s_vals = smem;
    int* s_keys = reinterpret_cast<int*>(smem + LCAP);
    __shared__ int warp_sums[32];
    const int count = *long_count;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int li = blockIdx.x; li < count; li += gridDim.x) {
        const int row = long_rows[li];
        const int a0 = a_indptr[row], a1 = a_indptr[row + 1];
        const long long p0 = eo[a0];
        const int p = (int)(eo[a1] - p0);
        int n2 = 1;
        while (n2 < p) n2 <<= 1;
        if (n2 > LCAP) {  // for the huge rows' pass
            if (threadIdx.x == 0) huge_rows[atomicAdd(huge_count, 1)] = row;
            continue;
        }
        int* keys = s_keys;
        double* vals = s_vals;
        for (int q = threadIdx.x; q < p; q += LBLOCK) {
            const int e = entry_of(eo, a0, a1, p0 + q);
            const int b = b_indptr[a_indices[e]] + (int)(p0 + q - eo[e]);
            keys[q] = BCOL(b);
            vals[q] = a_data[e] * BVAL(b);
        }
        for (int q = p + threadIdx.x; q < n2; q += LBLOCK) keys[q] = PAD;
        __syncthreads();
        bitonic<true>(keys, vals, n2, threadIdx.x, LBLOCK);
        int out = 0;
        for (int q0 = 0; q0 < p; q0 += LBLOCK) {
            const int q = q0 + threadIdx.x;
            const bool head = q < p && (q == 0 || keys[q] != keys[q - 1]);
            const unsigned heads = __ballot_sync(FULL, head);
            if (lane == 0) warp_sums[w] = __popc(heads);
            __syncthreads();
            if (w == 0) {
                int s = warp_sums[lane];
                for (int o = 1; o < 32; o <<= 1) {
                    const int v = __shfl_up_sync(FULL, s, o);
                    if (lane >= o) s += v;
                }
                warp_sums[lane] = s;  // inclusive
            }
            __syncthreads();
            if (head) {
                double v = vals[q];
                for (int u = q + 1; u < p && keys[u] == keys[q]; ++u) v += vals[u];
                const long long o = p0 + out + (w ? warp_sums[w - 1] : 0) +
                                    __popc(heads & ((1u << lane) - 1));
                t_cols[o] = keys[q];
                t_vals[o] = v;
                slot_row[o] = row;
            }
            out += warp_sums[31];
            __syncthreads();
        }
        for (int q = out + threadIdx.x; q < p; q += LBLOCK) slot_row[p0 + q] = -1;
        if (threadIdx.x == 0) cnt[row] = out;
        __syncthreads();
    }
}

typedef unsigned long long u64;
#ifndef BATCH
#define BATCH 512       // a warp's medium rows sorted together, up to BATCH products
#endif

// rows_main with a warp's medium rows batched: their products loaded together (a lane a
// product, every row's at once) and sorted together as (lane, column) keys
extern "C" __global__ void __launch_bounds__(WARPS * 32)
rows_batched(const int* __restrict__ a_indptr, const int* __restrict__ a_indices,
             const double* __restrict__ a_data, const int* __restrict__ b_indptr,
             const int* __restrict__ b_indices, const double* __restrict__ b_data,
             const long long* __restrict__ eo, int m, int* __restrict__ cnt,
             int* __restrict__ slot_row, int* __restrict__ t_cols, double* __restrict__ t_vals,
             int* __restrict__ long_rows, int* __restrict__ long_count) {
    extern __shared__ u64 dyn[];
    __shared__ int s_h[WARPS][32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    u64* sk = dyn + w * BATCH;
    double* sv = reinterpret_cast<double*>(dyn + WARPS * BATCH) + w * BATCH;
    int* hs = s_h[w];
    const int stride = gridDim.x * WARPS * 32;
    for (int base = (blockIdx.x * WARPS + w) * 32; base < m; base += stride) {
        const int row = base + lane;
        int a0 = 0, a1 = 0;
        long long p0 = 0, p = 0;
        row_first(row, m, a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, eo, cnt,
                  slot_row, t_cols, t_vals, long_rows, long_count, a0, a1, p0, p);
        const int mp = (row < m && p > TINY && p <= MED) ? (int)p : 0;
        int inc = mp;
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(FULL, inc, o);
            if (lane >= o) inc += v;
        }
        const int total = __shfl_sync(FULL, inc, 31);
        for (int start = 0; start < total;) {
            const unsigned fits =
                __ballot_sync(FULL, mp > 0 && inc - mp >= start && inc <= start + BATCH);
            const int end = __shfl_sync(FULL, inc, 31 - __clz(fits));
            const int n = end - start;
            for (int q0 = 0; q0 < n; q0 += 32) {
                const int q = q0 + lane;
                int src = 0;  // the first lane whose inclusive count passes start + q
                for (int step = 16; step > 0; step >>= 1) {
                    if (__shfl_sync(FULL, inc, src + step - 1) <= start + q) src += step;
                }
                const int s_inc = __shfl_sync(FULL, inc, src), s_mp = __shfl_sync(FULL, mp, src);
                const int s_a0 = __shfl_sync(FULL, a0, src), s_a1 = __shfl_sync(FULL, a1, src);
                const long long s_p0 = __shfl_sync(FULL, p0, src);
                if (q < n) {
                    const long long at = s_p0 + start + q - (s_inc - s_mp);
                    const int e = entry_of(eo, s_a0, s_a1, at);
                    const int b = b_indptr[a_indices[e]] + (int)(at - eo[e]);
                    sk[q] = ((u64)src << 32) | (unsigned)BCOL(b);
                    sv[q] = a_data[e] * BVAL(b);
                }
            }
            int n2 = 32;
            while (n2 < n) n2 <<= 1;
            for (int q = n + lane; q < n2; q += 32) sk[q] = ~0ull;
            __syncwarp();
            bitonic<false>(sk, sv, n2, lane, 32);
            int running = 0;
            for (int q0 = 0; q0 < n; q0 += 32) {
                const int q = q0 + lane;
                const u64 k = q < n ? sk[q] : ~0ull;
                const bool head = q < n && (q == 0 || sk[q - 1] != k);
                const unsigned hb = __ballot_sync(FULL, head);
                const int h = running + __popc(hb & ((1u << lane) - 1));
                const int src = q < n ? (int)(k >> 32) : 0;
                if (head && (q == 0 || (sk[q - 1] >> 32) != (u64)src)) hs[src] = h;
                __syncwarp();
                const long long rp0 = __shfl_sync(FULL, p0, src);
                if (head) {
                    double v = sv[q];
                    for (int u = q + 1; u < n && sk[u] == k; ++u) v += sv[u];
                    const long long o = rp0 + (h - hs[src]);
                    t_cols[o] = (int)(k & 0xffffffffu);
                    t_vals[o] = v;
                    slot_row[o] = base + src;
                }
                running += __popc(hb);
                __syncwarp();
            }
            if ((fits >> lane) & 1u) {
                const unsigned above = lane < 31 ? fits & ~((2u << lane) - 1u) : 0u;
                const int c = (above ? hs[__ffs(above) - 1] : running) - hs[lane];
                cnt[row] = c;
                for (int q = c; q < p; ++q) slot_row[p0 + q] = -1;
            }
            __syncwarp();
            start = end;
        }
    }
}

// the huge rows' products as (huge row, column) keys: a thread a product
extern "C" __global__ void huge_expand(const int* __restrict__ a_indptr,
        const int* __restrict__ a_indices, const double* __restrict__ a_data,
        const int* __restrict__ b_indptr, const int* __restrict__ b_indices,
        const double* __restrict__ b_data, const long long* __restrict__ eo,
        const int* __restrict__ rows, int count, const long long* __restrict__ base,
        long long total, u64* __restrict__ keys, double* __restrict__ vals) {
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= total) return;
    int lo = 0, hi = count;  // the huge row: the last r with base[r] <= q
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (base[mid] <= q) lo = mid + 1; else hi = mid;
    }
    const int r = lo - 1, row = rows[r];
    const long long at = eo[a_indptr[row]] + q - base[r];
    const int e = entry_of(eo, a_indptr[row], a_indptr[row + 1], at);
    const int b = b_indptr[a_indices[e]] + (int)(at - eo[e]);
    keys[q] = ((u64)r << 32) | (unsigned)BCOL(b);
    vals[q] = a_data[e] * BVAL(b);
}

// sorted huge keys: each head sums its run into the row's place (heads: out_at, inclusive)
extern "C" __global__ void huge_reduce(const u64* __restrict__ keys,
        const double* __restrict__ vals, long long total, const long long* __restrict__ out_at,
        const int* __restrict__ rows, const long long* __restrict__ base,
        const int* __restrict__ a_indptr, const long long* __restrict__ eo,
        int* __restrict__ cnt, int* __restrict__ slot_row, int* __restrict__ t_cols,
        double* __restrict__ t_vals) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= total) return;
    const u64 k = keys[t];
    if (t > 0 && keys[t - 1] == k) return;
    double v = vals[t];
    long long u = t + 1;
    for (; u < total && keys[u] == k; ++u) v += vals[u];
    const int r = (int)(k >> 32), row = rows[r];
    const long long p0 = eo[a_indptr[row]], first = base[r];
    const long long within = out_at[t] - out_at[first];
    t_cols[p0 + within] = (int)(k & 0xffffffffu);
    t_vals[p0 + within] = v;
    slot_row[p0 + within] = row;
    if (u == total || (keys[u] >> 32) != (u64)r) {  // the row's last: its count and holes
        cnt[row] = (int)(within + 1);
        for (long long h = within + 1; h < base[r + 1] - first; ++h) slot_row[p0 + h] = -1;
    }
}

// a thread a work slot: its entry into C (holes: row -1)
extern "C" __global__ void move_slots(const int* __restrict__ slot_row,
        const int* __restrict__ t_cols, const double* __restrict__ t_vals, long long n,
        const int* __restrict__ a_indptr, const long long* __restrict__ eo,
        const int* __restrict__ c_indptr, int* __restrict__ c_indices,
        double* __restrict__ c_data) {
    const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n) return;
    const int row = slot_row[o];
    if (row < 0) return;
    const long long at = c_indptr[row] + (o - eo[a_indptr[row]]);
    c_indices[at] = t_cols[o];
    c_data[at] = t_vals[o];
}

// B's entries packed: value at record k's first 8 bytes, column at its next 4
extern "C" __global__ void pack_b(const int* __restrict__ b_indices,
                                  const double* __restrict__ b_data, long long nnz,
                                  double* __restrict__ packed) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= nnz) return;
    packed[2 * k] = b_data[k];
    reinterpret_cast<int*>(packed)[4 * k + 2] = b_indices[k];
}
"""


def run(A, cupy, tiny, med, lcap, batch=0, long_blocks_per_sm=1, prefetch=0, packed=0):
    """The product ``A @ A`` (int32 indices, float64) as a function returning
    ``(timer, (indptr, indices, data))``. ``batch``: a warp's medium rows sorted together
    up to ``batch`` products (``rows_batched``), 0: one at a time (``rows_main``)."""
    options = ["-std=c++17", f"-DTINY={tiny}", f"-DMED={med}", f"-DLCAP={lcap}"]
    if batch:
        options.append(f"-DBATCH={batch}")
    if prefetch:
        options.append("-DPREFETCH")
    if packed:
        options.append("-DPACKED")
    mod = cupy.RawModule(code=SOURCE, options=tuple(options))
    names = ("entry_products", "rows_main", "rows_batched", "rows_long", "huge_expand",
             "huge_reduce", "move_slots", "pack_b")  # fmt: skip
    k = {n: mod.get_function(n) for n in names}
    long_smem = lcap * 12
    k["rows_long"].max_dynamic_shared_size_bytes = long_smem
    main_smem = 8 * batch * 16
    if batch:
        k["rows_batched"].max_dynamic_shared_size_bytes = main_smem
    device = cupy.cuda.Device()
    sms = device.attributes["MultiProcessorCount"]
    m = A.shape[0]
    ip, ix, dv = A.indptr, A.indices, A.data
    i64, i32 = np.int64, np.int32

    def huge(eo, rows, count, cnt, slot_row, t_cols, t_vals, bx, bv):
        rows = rows[:count]
        base = cupy.zeros(count + 1, dtype=i64)
        cupy.cumsum(eo[ip[rows + 1]] - eo[ip[rows]], out=base[1:])
        total = int(base[-1].get())
        keys = cupy.empty(total, dtype=np.uint64)
        vals = cupy.empty(total, dtype=np.float64)
        expand_args = (ip, ix, dv, ip, bx, bv, eo, rows, i32(count), base, i64(total), keys,
                       vals)  # fmt: skip
        k["huge_expand"](grid(total), (256,), expand_args)
        order = cupy.argsort(keys)
        keys, vals = keys[order], vals[order]
        heads = cupy.empty(total, dtype=i64)
        heads[:1] = 1
        heads[1:] = keys[1:] != keys[:-1]
        out_at = cupy.cumsum(heads) - 1
        reduce_args = (keys, vals, i64(total), out_at, rows, base, ip, eo, cnt, slot_row,
                       t_cols, t_vals)  # fmt: skip
        k["huge_reduce"](grid(total), (256,), reduce_args)

    def product():
        t = Timer(cupy)
        eo = entry_offsets(k["entry_products"], A, cupy)
        bx, bv = ix, dv
        if packed:  # B = A's entries as 16-byte records
            bx = bv = cupy.empty(2 * A.nnz, dtype=np.float64)
            k["pack_b"](grid(A.nnz), (256,), (ix, dv, i64(A.nnz), bv))
        products = int(eo[-1].get())
        t.mark("products, wait")
        slots = max(products, 1)
        t_cols = cupy.empty(slots, dtype=i32)
        t_vals = cupy.empty(slots, dtype=np.float64)
        slot_row = cupy.empty(slots, dtype=i32)
        cnt = cupy.empty(m, dtype=i32)
        long_rows = cupy.empty(m, dtype=i32)
        counts = cupy.zeros(2, dtype=i32)  # long rows, huge rows
        rows_grid = (min(-(-m // (8 * 32)), sms * 8),)
        main_args = (ip, ix, dv, ip, bx, bv, eo, i32(m), cnt, slot_row, t_cols, t_vals,
                     long_rows, counts[:1])  # fmt: skip
        if batch:
            k["rows_batched"](rows_grid, (256,), main_args, shared_mem=main_smem)
        else:
            k["rows_main"](rows_grid, (256,), main_args)
        t.mark("rows_main")
        huge_rows = cupy.empty(m, dtype=i32)
        long_args = (ip, ix, dv, ip, bx, bv, eo, long_rows, counts[:1], huge_rows, counts[1:],
                     cnt, slot_row, t_cols, t_vals)  # fmt: skip
        k["rows_long"]((sms * long_blocks_per_sm,), (1024,), long_args, shared_mem=long_smem)
        t.mark("rows_long")
        count = int(counts[1].get())
        if count:
            huge(eo, huge_rows, count, cnt, slot_row, t_cols, t_vals, bx, bv)
        t.mark("huge rows")
        c_indptr, ci, cd = result_arrays(cnt, t, cupy)
        move_args = (slot_row, t_cols, t_vals, i64(products), ip, eo, c_indptr, ci, cd)
        k["move_slots"](grid(products), (256,), move_args)
        t.mark("move")
        return t, (c_indptr, ci, cd)

    return product


def main():
    names = "TINY:MED:LCAP[:BATCH[:LONG_BLOCKS_PER_SM[:PREFETCH[:PACKED]]]]"
    args = probe_arguments(__doc__, "8:256:16384", names)
    import cupy
    import cupyx.scipy.sparse as cxs

    rows = []
    configs = args.configs.split(",")
    for kind, name, A, identity, ref in power_law_operands(args.heldout, cupy, cxs):
        products = [run(A, cupy, *(int(v) for v in c.split(":"))) for c in configs]
        for product, config in zip(products, configs, strict=True):
            if not equals(product()[1], ref, cupy, cxs):
                raise SystemExit(f"{name} {config}: differs from cupyx")
        # (the product is timed on A itself; the fresh operands are cupyx's)
        timed = {c: (lambda B, p=p: p()[0]) for c, p in zip(configs, products, strict=True)}
        walls, spans = timed_in_turns(cupy, A, identity, timed, args.repeat)
        rows += [median_row(kind, name, c, c, A, ref, walls, spans) for c in configs]
    columns = wall_columns("TINY:MED:LCAP")
    note = "Milliseconds: wall clock on fresh operands, and each piece by CUDA events (medians)."
    write_results(args, __doc__, MODULE, rows, columns, note)


if __name__ == "__main__":
    main()
