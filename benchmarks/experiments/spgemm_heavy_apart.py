"""Could ALG1 run faster on power-law rows with its heaviest rows computed apart (issue 47)?

``spgemm_split_probe`` found that ALG1 on the fit power-law 1.5M without its 1,576 rows of
more than 256 products takes 1.04 ms against 1.48 for the whole (cupyx, H200), but that
those rows cost ALG1 nearly as much again on their own (cuSPARSE's calls do not overlap).
This probe prices the other way: the heavy rows by kernels of their own on a second
stream while ALG1 computes the others, then the two merged (float64 values, int32 indices,
the probe's own CUDA, not the library's):

* ``row_products_sum``, ``classify``: each row's products (a thread a run of 8 entries of
  ``A``, each row's part added by atomics, so no thread walks a long row alone); rows of
  more than ``T`` are *heavy*: listed, given their place in a scratch array of their
  products, and counted; one host wait reads the counts;
* ``heavy_list``: one block sorts the heavy rows (bitonic, at most ``MAX_HEAVY``) and sums
  their entries of ``A`` before each; ``light_indptr``, ``light_entries``: ``A_light``,
  ``A`` with the heavy rows emptied (each row's and entry's shift by a binary search);
* on a second stream (``SIDE`` 1; 0: before ALG1 on the first), ``heavy_sort`` (a block a
  row of at most ``CAP`` products: expanded 32 entries a warp at a time, sorted in shared
  memory, summed) and ``heavy_dense`` (``DENSE_BLOCKS`` blocks for the longer rows: products
  summed into a dense row of values and a bitmap of columns in global memory, zeroed again
  as they are read, the columns written in order);
* ALG1 on ``A_light @ B`` (cupyx) on the first stream;
* ``heavy_prefix``, ``final_indptr``, ``move_light``, ``move_heavy``: the heavy rows'
  entries inserted into ALG1's result, every light entry shifted by the heavy entries
  before it.

Each piece timed by CUDA events on the first stream, the whole by wall clock in
alternation with cupyx's whole product on fresh operands (medians); answers checked
against cupyx's.

Found (``spgemm_heavy_apart_h200``; cupyx 1.65 ms on the fit 1.5M, 2.44 on the held-out
2M in that run): answers equal, but **0.79x and 0.81x at best** (``T`` 1024, the heavy rows
beside ALG1). ALG1 on the light rows took 1.12-1.23 ms (1.5M) and 1.83-2.07 (2M): 0.4-0.6
ms less than the whole. Beside it the heavy rows are hidden at ``T`` 1024 (0.02-0.03 ms
waited for) but not at 256 (0.30 and 0.44; alone they took 1.0-1.8 ms). The rest costs
0.8-0.9 ms: the host's allocations and launches (0.34-0.48), the classification and its
wait (0.16-0.23), the list and ``A_light`` (0.08-0.17), and the merge (0.22-0.32), whose
move of every entry of ``C`` runs at memory speed already (0.07-0.08 ms on the 1.5M,
0.15-0.18 on the 2M). With the host work hidden and each kernel at its floor the rest
would still cost about 0.3 ms: the design's ceiling is about 1.03-1.14x cupyx on the GPU
(the upper end only with heavy rows twice as fast as these, hidden at ``T`` 256), before
the library's own 0.1 ms of host path. The saving is real, but a split pays a pass over
``C`` to merge.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_heavy_apart [--heldout] [--repeat 9]
        [--configs T:CAP:DENSE_BLOCKS:SIDE,...] [--out FILE.json] [--md FILE.md]
"""

from __future__ import annotations

import numpy as np

from benchmarks.experiments.spgemm_esc_probe import (
    CUDA_HELPERS,
    Timer,
    equals,
    grid,
    median_row,
    power_law_operands,
    probe_arguments,
    timed_in_turns,
    wall_columns,
    write_results,
)

MODULE = "benchmarks.experiments.spgemm_heavy_apart"
MAX_HEAVY = 8192  # heavy rows the one-block list sorts (more: the threshold is too low)
SOURCE = f"#define MAX_HEAVY {MAX_HEAVY}\n"
SOURCE += r"""
#define PAD 0x7fffffff
#define BCOL(b) (b_indices[b])
#define BVAL(b) (b_data[b])
typedef unsigned long long u64;
"""
SOURCE += CUDA_HELPERS
SOURCE += r"""
// exclusive scan of v over the block (blockDim a multiple of 32); *total: the sum
__device__ int block_exclusive(int v, int* warp_sums, int* total) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int inc = warp_inclusive(v, lane);
    if (lane == 31) warp_sums[w] = inc;
    __syncthreads();
    if (w == 0) {
        const int s = lane < warps ? warp_sums[lane] : 0;
        const int si = warp_inclusive(s, lane);
        if (lane < warps) warp_sums[lane] = si - s;
        if (lane == warps - 1) warp_sums[32] = si;
    }
    __syncthreads();
    const int out = warp_sums[w] + inc - v;
    *total = warp_sums[32];
    __syncthreads();
    return out;
}

// each row's products: a thread a run of ENTRIES entries of A (its first row found by a
// binary search of A's offsets), each row's part summed and added (atomics: a row of many
// entries is summed by many threads, so none walks it alone); p_row zero before
#define ENTRIES 8
extern "C" __global__ void row_products_sum(const int* __restrict__ a_indptr,
                                            const int* __restrict__ a_indices,
                                            const int* __restrict__ b_indptr, int m,
                                            long long nnz, u64* __restrict__ p_row) {
    long long e = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * ENTRIES;
    if (e >= nnz) return;
    const long long e1 = min(e + ENTRIES, nnz);
    int lo = 0, hi = m - 1;  // the last row starting at or before e
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (a_indptr[mid] <= e) lo = mid; else hi = mid - 1;
    }
    int r = lo;
    long long next = a_indptr[r + 1];
    u64 sum = 0;
    for (; e < e1; ++e) {
        while (e >= next) {
            if (sum) atomicAdd(p_row + r, sum);
            sum = 0;
            next = a_indptr[++r + 1];
        }
        const int c = a_indices[e];
        sum += b_indptr[c + 1] - b_indptr[c];
    }
    if (sum) atomicAdd(p_row + r, sum);
}

// totals: 0 products, 1 heavy rows, 2 heavy products, 3 heavy entries of A, 4 dense rows;
// a row of more than T products is heavy: listed, given its place in the scratch
extern "C" __global__ void classify(const int* __restrict__ a_indptr, int m, long long T,
                                    long long CAP, const u64* __restrict__ p_all,
                                    int* __restrict__ heavy, int max_heavy,
                                    long long* __restrict__ p_row,
                                    long long* __restrict__ h_off, u64* __restrict__ totals) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    u64 p = 0;
    if (r < m) {
        p = p_all[r];
        if (p > (u64)T) {
            const int slot = (int)atomicAdd(totals + 1, 1ull);
            if (slot < max_heavy) heavy[slot] = r;
            h_off[r] = (long long)atomicAdd(totals + 2, p);
            p_row[r] = (long long)p;
            atomicAdd(totals + 3, (u64)(a_indptr[r + 1] - a_indptr[r]));
            if (p > (u64)CAP) atomicAdd(totals + 4, 1ull);
        }
    }
    for (int o = 16; o > 0; o >>= 1) p += __shfl_xor_sync(FULL, p, o);
    if ((threadIdx.x & 31) == 0 && p) atomicAdd(totals, p);
}

// one block: the heavy rows sorted; their A offsets and the entries of A before each
extern "C" __global__ void heavy_list(int* __restrict__ heavy, int H,
                                      const int* __restrict__ a_indptr,
                                      int* __restrict__ h_a0, int* __restrict__ h_before) {
    __shared__ int keys[MAX_HEAVY];
    __shared__ int warp_sums[33];
    int n2 = 1;
    while (n2 < H) n2 <<= 1;
    for (int i = threadIdx.x; i < n2; i += blockDim.x) keys[i] = i < H ? heavy[i] : PAD;
    __syncthreads();
    bitonic<true, false>(keys, (double*)nullptr, n2, threadIdx.x, blockDim.x);
    int carry = 0;
    for (int i0 = 0; i0 < H; i0 += blockDim.x) {
        const int i = i0 + threadIdx.x;
        int len = 0, a0 = 0;
        if (i < H) { a0 = a_indptr[keys[i]]; len = a_indptr[keys[i] + 1] - a0; }
        int total;
        const int before = block_exclusive(len, warp_sums, &total);
        if (i < H) { heavy[i] = keys[i]; h_a0[i] = a0; h_before[i] = carry + before; }
        carry += total;
    }
    if (threadIdx.x == 0) h_before[H] = carry;
}

// how many of the H sorted values are <= x
__device__ __forceinline__ int count_le(const int* __restrict__ sorted, int H, long long x) {
    int lo = 0, hi = H;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (sorted[mid] <= x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// A_light's offsets: a row's entries before it less the heavy rows' entries before it
extern "C" __global__ void light_indptr(const int* __restrict__ a_indptr, int m,
                                        const int* __restrict__ heavy, int H,
                                        const int* __restrict__ h_before,
                                        int* __restrict__ l_indptr) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r > m) return;
    const int k = count_le(heavy, H, (long long)r - 1);  // heavy rows before r
    l_indptr[r] = a_indptr[r] - h_before[k];
}

// A_light's entries: an entry of a light row moves back by the heavy entries before it
extern "C" __global__ void light_entries(const int* __restrict__ a_indices,
                                         const double* __restrict__ a_data, long long nnz,
                                         const int* __restrict__ h_a0,
                                         const int* __restrict__ h_before, int H,
                                         int* __restrict__ l_indices,
                                         double* __restrict__ l_data) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= nnz) return;
    const int k = count_le(h_a0, H, j);  // heavy rows starting at or before entry j
    if (k > 0) {
        const int inside = h_before[k] - h_before[k - 1];  // row k-1's length
        if (j < (long long)h_a0[k - 1] + inside) return;  // an entry of a heavy row
    }
    const long long to = j - h_before[k];
    l_indices[to] = a_indices[j];
    l_data[to] = a_data[j];
}

// a heavy row's products, 32 entries of A a warp at a time spread over its lanes: each
// product (column, value) handed to emit(q, column, value), q its place among the row's
// (from fill's running count, or 0 without it)
template <typename Emit>
__device__ __forceinline__ void row_products(int a0, int a1, const int* __restrict__ a_indices,
                                             const double* __restrict__ a_data,
                                             const int* __restrict__ b_indptr,
                                             const int* __restrict__ b_indices,
                                             const double* __restrict__ b_data, int* fill,
                                             Emit emit) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const auto place = [&](int batch) {
        int base = 0;
        if (fill != nullptr && lane == 0) base = atomicAdd(fill, batch);
        return __shfl_sync(FULL, base, 0);
    };
    for (int e0 = a0 + w * 32; e0 < a1; e0 += warps * 32) {
        spread_batch(e0, a1, lane, a_indices, a_data, b_indptr, b_indices, b_data, place, emit);
    }
}

// a block a heavy row of at most CAP products: sorted in shared memory and summed,
// written at its place in the scratch (h_off), its count into h_cnt
extern "C" __global__ void __launch_bounds__(256)
heavy_sort(const int* __restrict__ heavy, int H, const long long* __restrict__ p_row,
           const long long* __restrict__ h_off, long long CAP,
           const int* __restrict__ a_indptr, const int* __restrict__ a_indices,
           const double* __restrict__ a_data, const int* __restrict__ b_indptr,
           const int* __restrict__ b_indices, const double* __restrict__ b_data,
           int* __restrict__ s_cols, double* __restrict__ s_vals, int* __restrict__ h_cnt) {
    extern __shared__ double smem[];
    double* vals = smem;
    int* keys = (int*)(smem + CAP);
    __shared__ int fill;
    __shared__ int warp_sums[33];
    for (int h = blockIdx.x; h < H; h += gridDim.x) {
        const int r = heavy[h];
        const long long p = p_row[r];
        if (p > CAP) continue;  // the dense rows' (uniform over the block)
        const int n = (int)p;
        const long long off = h_off[r];
        if (threadIdx.x == 0) fill = 0;
        __syncthreads();
        row_products(a_indptr[r], a_indptr[r + 1], a_indices, a_data, b_indptr, b_indices,
                     b_data, &fill, [&](int q, int col, double v) { keys[q] = col; vals[q] = v; });
        int n2 = 32;
        while (n2 < n) n2 <<= 1;
        for (int q = n + threadIdx.x; q < n2; q += blockDim.x) keys[q] = PAD;
        __syncthreads();
        bitonic<true>(keys, vals, n2, threadIdx.x, blockDim.x);
        int written = 0;
        for (int q0 = 0; q0 < n; q0 += blockDim.x) {
            const int q = q0 + threadIdx.x;
            const bool head = q < n && (q == 0 || keys[q] != keys[q - 1]);
            double v = 0.0;
            if (head) {
                v = vals[q];
                for (int u = q + 1; u < n && keys[u] == keys[q]; ++u) v += vals[u];
            }
            int total;
            const int rank = block_exclusive(head ? 1 : 0, warp_sums, &total);
            if (head) { s_cols[off + written + rank] = keys[q]; s_vals[off + written + rank] = v; }
            written += total;
        }
        if (threadIdx.x == 0) h_cnt[r] = written;
        __syncthreads();
    }
}

// a block a heavy row of more than CAP products: summed into a dense row of values and a
// bitmap of columns (global memory, a pair a block, zero between rows), written in order
extern "C" __global__ void __launch_bounds__(1024)
heavy_dense(const int* __restrict__ heavy, int H, const long long* __restrict__ p_row,
            const long long* __restrict__ h_off, long long CAP, int n_cols,
            const int* __restrict__ a_indptr, const int* __restrict__ a_indices,
            const double* __restrict__ a_data, const int* __restrict__ b_indptr,
            const int* __restrict__ b_indices, const double* __restrict__ b_data,
            double* __restrict__ dense_all, unsigned* __restrict__ bits_all,
            int* __restrict__ s_cols, double* __restrict__ s_vals, int* __restrict__ h_cnt) {
    __shared__ int warp_sums[33];
    const int words = (n_cols + 31) >> 5;
    double* dense = dense_all + (size_t)blockIdx.x * n_cols;
    unsigned* bits = bits_all + (size_t)blockIdx.x * words;
    for (int h = blockIdx.x; h < H; h += gridDim.x) {
        const int r = heavy[h];
        if (p_row[r] <= CAP) continue;
        const long long off = h_off[r];
        row_products(a_indptr[r], a_indptr[r + 1], a_indices, a_data, b_indptr, b_indices,
                     b_data, nullptr, [&](int, int col, double v) {
                         atomicAdd(dense + col, v);
                         atomicOr(bits + (col >> 5), 1u << (col & 31));
                     });
        __syncthreads();
        // each thread a contiguous run of words: its columns counted, then written in order
        const int per = (words + blockDim.x - 1) / blockDim.x;
        const int w0 = min(words, (int)threadIdx.x * per), w1 = min(words, w0 + per);
        int mine = 0;
        for (int w = w0; w < w1; ++w) mine += __popc(bits[w]);
        int total;
        int at = block_exclusive(mine, warp_sums, &total);
        for (int w = w0; w < w1; ++w) {
            unsigned word = bits[w];
            if (!word) continue;
            bits[w] = 0u;
            while (word) {
                const int col = (w << 5) + __ffs(word) - 1;
                word &= word - 1;
                s_cols[off + at] = col;
                s_vals[off + at] = dense[col];
                dense[col] = 0.0;
                ++at;
            }
        }
        if (threadIdx.x == 0) h_cnt[r] = total;
        __syncthreads();
    }
}

// one block: each heavy row's entries of C, and those of the heavy rows before it
extern "C" __global__ void heavy_prefix(const int* __restrict__ heavy, int H,
                                        const int* __restrict__ h_cnt,
                                        int* __restrict__ c_before) {
    __shared__ int warp_sums[33];
    int carry = 0;
    for (int i0 = 0; i0 < H; i0 += blockDim.x) {
        const int i = i0 + threadIdx.x;
        const int v = i < H ? h_cnt[heavy[i]] : 0;
        int total;
        const int before = block_exclusive(v, warp_sums, &total);
        if (i < H) c_before[i] = carry + before;
        carry += total;
    }
    if (threadIdx.x == 0) c_before[H] = carry;
}

// C's offsets: ALG1's (the heavy rows empty there) plus the heavy rows' entries before
extern "C" __global__ void final_indptr(const int* __restrict__ l_indptr, int m,
                                        const int* __restrict__ heavy, int H,
                                        const int* __restrict__ c_before,
                                        int* __restrict__ indptr, int* __restrict__ h_start) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r > m) return;
    const int k = count_le(heavy, H, (long long)r - 1);  // heavy rows before r
    indptr[r] = l_indptr[r] + c_before[k];
    if (k < H && heavy[k] == r) h_start[k] = l_indptr[r] + c_before[k];
}

// ALG1's entries shifted by the heavy rows' entries before them (a heavy row is empty in
// ALG1's result: those starting at or before an entry are before it)
extern "C" __global__ void move_light(const int* __restrict__ l_cols,
                                      const double* __restrict__ l_vals, long long nnz,
                                      const int* __restrict__ c_light_start,
                                      const int* __restrict__ c_before, int H,
                                      int* __restrict__ cols, double* __restrict__ vals) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= nnz) return;
    const int k = count_le(c_light_start, H, j);
    cols[j + c_before[k]] = l_cols[j];
    vals[j + c_before[k]] = l_vals[j];
}

// a block a heavy row: its entries from the scratch into C
extern "C" __global__ void move_heavy(const int* __restrict__ heavy, int H,
                                      const long long* __restrict__ h_off,
                                      const int* __restrict__ h_cnt,
                                      const int* __restrict__ h_start,
                                      const int* __restrict__ s_cols,
                                      const double* __restrict__ s_vals,
                                      int* __restrict__ cols, double* __restrict__ vals) {
    const int h = blockIdx.x;
    const int r = heavy[h];
    const long long from = h_off[r];
    const int to = h_start[h], n = h_cnt[r];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        cols[to + i] = s_cols[from + i];
        vals[to + i] = s_vals[from + i];
    }
}

// the heavy rows' starts in ALG1's result
extern "C" __global__ void light_starts(const int* __restrict__ heavy, int H,
                                        const int* __restrict__ l_indptr,
                                        int* __restrict__ starts) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h < H) starts[h] = l_indptr[heavy[h]];
}
"""

_MODULE_CACHE: dict = {}


def kernels(cupy):
    """The probe's kernels, compiled once (C++17: the lambdas)."""
    if "module" not in _MODULE_CACHE:
        _MODULE_CACHE["module"] = cupy.RawModule(
            code=SOURCE, options=("--std=c++17", "-lineinfo"), name_expressions=None
        )
    return _MODULE_CACHE["module"]


class HeavyApart:
    """``A @ B`` with the rows of more than ``T`` products computed apart (module
    docstring): called, ``(timer, (indptr, indices, data), info)``."""

    def __init__(self, cupy, cupyx_sparse, T, cap=8192, dense_blocks=8, side=1):
        self.cupy, self.cx = cupy, cupyx_sparse
        self.T, self.cap, self.dense_blocks, self.on_side = T, cap, dense_blocks, side
        module = kernels(cupy)
        self.k = {name: module.get_function(name) for name in (
            "row_products_sum", "classify", "heavy_list", "light_indptr", "light_entries",
            "heavy_sort", "heavy_dense", "heavy_prefix", "final_indptr", "move_light", "move_heavy",
            "light_starts")}  # fmt: skip
        self.k["heavy_sort"].max_dynamic_shared_size_bytes = cap * 12
        self.side = cupy.cuda.Stream(non_blocking=True)
        self.totals_host = cupy.cuda.alloc_pinned_memory(5 * 8)
        self.totals_view = np.frombuffer(self.totals_host, np.uint64, 5)
        self.sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        self.dense = None

    def __call__(self, A, B):
        cp, k = self.cupy, self.k
        t = Timer(cp)
        m, n = A.shape[0], B.shape[1]
        i32, f64 = np.int32, np.float64
        totals = cp.zeros(5, np.uint64)
        heavy = cp.empty(MAX_HEAVY, i32)
        p_row = cp.empty(m, np.int64)
        h_off = cp.empty(m, np.int64)
        p_all = cp.zeros(m, np.uint64)
        t.mark("allocations")
        T, cap = np.int64(self.T), np.int64(self.cap)
        sum_args = (A.indptr, A.indices, B.indptr, i32(m), np.int64(A.nnz), p_all)
        k["row_products_sum"](grid(-(-A.nnz // 8)), (256,), sum_args)
        classify_args = (A.indptr, i32(m), T, cap, p_all, heavy, i32(MAX_HEAVY), p_row, h_off,
                         totals)  # fmt: skip
        k["classify"](grid(m), (256,), classify_args)
        totals.get(out=self.totals_view)  # the one host wait before ALG1
        products, H, heavy_products, heavy_entries, dense_rows = map(int, self.totals_view)
        info = {"heavy": H, "dense": dense_rows, "heavy_products": heavy_products}
        t.mark("classify, wait")
        if H == 0 or H > MAX_HEAVY:
            C = A @ B
            t.mark("alg1 whole")
            return t, (C.indptr, C.indices, C.data), info
        h_a0 = cp.empty(H, i32)
        h_before = cp.empty(H + 1, i32)
        k["heavy_list"]((1,), (1024,), (heavy, i32(H), A.indptr, h_a0, h_before))
        l_nnz = A.nnz - heavy_entries
        l_indptr = cp.empty(m + 1, i32)
        l_indices = cp.empty(l_nnz, i32)
        l_data = cp.empty(l_nnz, f64)
        k["light_indptr"](
            grid(m + 1), (256,), (A.indptr, i32(m), heavy, i32(H), h_before, l_indptr)
        )
        entries_args = (A.indices, A.data, np.int64(A.nnz), h_a0, h_before, i32(H), l_indices,
                        l_data)  # fmt: skip
        k["light_entries"](grid(A.nnz), (256,), entries_args)
        t.mark("list, A_light")
        listed = cp.cuda.Event()
        listed.record()
        s_cols = cp.empty(heavy_products, i32)
        s_vals = cp.empty(heavy_products, f64)
        h_cnt = cp.empty(m, i32)
        if dense_rows and (self.dense is None or self.dense[0].size < self.dense_blocks * n):
            words = (n + 31) // 32
            self.dense = (
                cp.zeros(self.dense_blocks * n, f64),
                cp.zeros(self.dense_blocks * words, np.uint32),
            )
        operands = (A.indptr, A.indices, A.data, B.indptr, B.indices, B.data)
        side = self.side if self.on_side else cp.cuda.get_current_stream()
        with side:  # the heavy rows beside ALG1 (SIDE 1), or before it
            side.wait_event(listed)
            if H > dense_rows:
                sort_args = (heavy, i32(H), p_row, h_off, np.int64(self.cap), *operands,
                             s_cols, s_vals, h_cnt)  # fmt: skip
                blocks = (min(H - dense_rows, self.sms * 4),)
                k["heavy_sort"](blocks, (256,), sort_args, shared_mem=self.cap * 12)
            if dense_rows:
                dense_args = (heavy, i32(H), p_row, h_off, np.int64(self.cap), i32(n), *operands,
                              self.dense[0], self.dense[1], s_cols, s_vals, h_cnt)  # fmt: skip
                k["heavy_dense"]((min(dense_rows, self.dense_blocks),), (1024,), dense_args)
            done = cp.cuda.Event()
            done.record()
        if not self.on_side:
            t.mark("heavy rows")
        L = self.cx.csr_matrix((l_data, l_indices, l_indptr), shape=(m, A.shape[1]))
        L._has_canonical_format = True
        L.has_sorted_indices = True
        t.mark("A_light made")
        C_light = L @ B
        t.mark("alg1 light")
        cp.cuda.get_current_stream().wait_event(done)
        c_before = cp.empty(H + 1, i32)
        k["heavy_prefix"]((1,), (1024,), (heavy, i32(H), h_cnt, c_before))
        heavy_nnz = int(c_before[H].get())
        t.mark("heavy rows, wait")
        nnz = C_light.nnz + heavy_nnz
        indptr = cp.empty(m + 1, i32)
        cols = cp.empty(nnz, i32)
        vals = cp.empty(nnz, f64)
        starts = cp.empty(H, i32)
        h_start = cp.empty(H, i32)
        t.mark("allocations (merge)")
        k["light_starts"](grid(H), (256,), (heavy, i32(H), C_light.indptr, starts))
        indptr_args = (C_light.indptr, i32(m), heavy, i32(H), c_before, indptr, h_start)
        k["final_indptr"](grid(m + 1), (256,), indptr_args)
        t.mark("final indptr")
        if C_light.nnz:
            move_args = (C_light.indices, C_light.data, np.int64(C_light.nnz), starts, c_before,
                         i32(H), cols, vals)  # fmt: skip
            k["move_light"](grid(C_light.nnz), (256,), move_args)
        t.mark("move light")
        heavy_args = (heavy, i32(H), h_off, h_cnt, h_start, s_cols, s_vals, cols, vals)
        k["move_heavy"]((H,), (256,), heavy_args)
        t.mark("move heavy")
        return t, (indptr, cols, vals), info


def main():
    configs = "256:8192:8:1,1024:8192:8:1,1024:8192:8:0"
    args = probe_arguments(__doc__, configs, "T:CAP:DENSE_BLOCKS:SIDE")
    import cupy
    import cupyx.scipy.sparse as cxs

    rows = []
    configs = args.configs.split(",")
    for kind, name, A, identity, ref in power_law_operands(args.heldout, cupy, cxs):
        probes = {c: HeavyApart(cupy, cxs, *(int(v) for v in c.split(":"))) for c in configs}
        infos = {}
        for config, probe in probes.items():
            _, parts, infos[config] = probe(A, A)
            if not equals(parts, ref, cupy, cxs):
                raise SystemExit(f"{name} {config}: differs from cupyx")
        timed = {c: (lambda B, p=p: p(B, B)[0]) for c, p in probes.items()}
        walls, spans = timed_in_turns(cupy, A, identity, timed, args.repeat, pause=0.002)
        for config in configs:
            info = infos[config]
            label = (
                f"{config} ({info['heavy']:,} rows, {info['heavy_products']:,} products, "
                f"{info['dense']} dense)"
            )
            rows.append(median_row(kind, name, config, label, A, ref, walls, spans))
    columns = wall_columns("T:CAP:DENSE_BLOCKS:SIDE (heavy rows)")
    note = (
        "Milliseconds: wall clock on fresh operands in alternation with cupyx's whole product, "
        "and each piece by CUDA events on the first stream (medians; the heavy rows run on a "
        "second stream beside ALG1, waited for in 'heavy rows, wait')."
    )
    write_results(args, __doc__, MODULE, rows, columns, note)


if __name__ == "__main__":
    main()
