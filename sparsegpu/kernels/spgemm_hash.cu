// spgemm_hash.cu: C = A @ B for CSR A (n_rows x n_inner) and B (n_inner x n_cols), each row
// of C accumulated in a hash table, as nsparse does (Nagasaka, Nukada & Matsuoka, "High-
// performance and memory-saving sparse general matrix-matrix multiplication for NVIDIA
// Pascal GPU", ICPP 2017; OpSparse and spECK refine the same scheme):
//
// spgemm_hash_bounds   each row's upper bound of C's entries: the sum of the lengths of
//                      the rows of B that the row's entries select (its products);
// spgemm_products_total all the rows' products summed (a thread per entry of A);
// spgemm_hash_classes  rows counted by the table their size needs (class c: 2^c slots,
//                      at least 2^MIN_CLASS; class 0: rows with nothing to compute);
// spgemm_hash_bin      rows listed class by class (order within a class arbitrary);
// spgemm_hash_count    symbolic phase: a group of threads per row inserts the row's
//                      column indices into a table and counts the distinct ones;
// spgemm_hash_sample   the same count on rows of A spread evenly, summed with their
//                      products (what the first product's rule reads);
// spgemm_hash_fill     numeric phase: the same insertions summing a * b into the table's
//                      values, then a bitonic sort of the table by column (the empty
//                      slots, -1 as unsigned, sort last) and the row written in order;
// spgemm_dense_count   symbolic phase of rows whose table would be a large share of C's
//                      columns (R-MAT's hubs): a block per row sets a bit per column in a
//                      bitmap of all the columns in shared memory and counts the bits;
// spgemm_dense_fill    their numeric phase: products summed into a dense row of all the
//                      columns in global memory (a row per block, zero between rows) and
//                      the bitmap; a warp per word of the bitmap writes its columns in
//                      order (no sort), as spECK's dense accumulators do.
//
// A group is LANES lanes of a warp (8, 16 or 32; WHOLE_BLOCK false: several rows a warp
// and a block, each with its own table in shared memory, so that short rows keep several
// rows' loads in flight a warp) or the whole block (WHOLE_BLOCK true, LANES 32: one row at a
// time; its table in shared memory, or, for rows whose table does not fit there, a block's
// slice of a table in global memory passed as global_keys / global_values, the block
// looping over rows). Within a group each warp takes LANES of the row's entries at a time
// (a whole block's warps fewer, shared evenly, where the row has fewer than LANES a warp)
// and spreads their products evenly over its lanes (a scan of the B row lengths, then each
// lane finds its product's entry by a binary search over the scan), so rows of short and of
// long B rows keep every lane busy. Tables probe linearly from the top bits of
// column * HASH_SCALE (Fibonacci hashing: every bit of the column moves them, where the low
// bits of a product depend on the column's low bits only, and a stencil's columns i, i + 64,
// i + 4096 would all start at one slot of a table of 64).
//
// Work O(products) for each phase, plus O(t log^2 t) per row for a table of t slots.
// The result is canonical CSR (sorted, no duplicates); entries whose products cancel stay
// stored, as cuSPARSE keeps them. Sums are formed by atomics: equal to rounding, not bitwise.
// Value: float, double, complex64, complex128 (common.cuh). Index: int, long long.
#include "spgemm_rows.cuh"

constexpr int MIN_CLASS = 5;   // the smallest table: 32 slots (one per lane of a warp)
constexpr int CLASSES = 64;    // classes counted (2^63 slots: never reached)
constexpr unsigned HASH_SCALE = 2654435769u;  // 2^32 / golden ratio (Knuth)
constexpr long long HALF_MORE_UP_TO = 128;

template <typename Index>
struct unsigned_of;
template <>
struct unsigned_of<int> {
    using type = unsigned int;
};
template <>
struct unsigned_of<long long> {
    using type = unsigned long long;
};

__device__ __forceinline__ int atomic_cas_index(int* p, int expected, int desired) {
    return atomicCAS(p, expected, desired);
}
__device__ __forceinline__ long long atomic_cas_index(long long* p, long long expected,
                                                      long long desired) {
    return static_cast<long long>(atomicCAS(reinterpret_cast<unsigned long long*>(p),
                                            static_cast<unsigned long long>(expected),
                                            static_cast<unsigned long long>(desired)));
}

// The class of a row of `size` (its bound or its entries): the table of at least `need`
// slots, need = min(size, cap), and half as much again when `half` (a lower load factor;
// a quarter as much again past HALF_MORE_UP_TO entries, where a table of 1.5 times the
// entries would often double to the next power of two and the sort that writes the row
// costs more than the longer probes of a fuller table).
__device__ __forceinline__ int table_class(long long size, long long cap, int half) {
    long long need = size < cap ? size : cap;
    if (half) {
        need += need > HALF_MORE_UP_TO ? need >> 2 : need >> 1;
    }
    if (need <= 0) {
        return 0;
    }
    int c = MIN_CLASS;
    while ((1LL << c) < need) {
        ++c;
    }
    return c;
}

template <bool WHOLE_BLOCK>
__device__ __forceinline__ void group_sync(unsigned mask) {
    if constexpr (WHOLE_BLOCK) {
        __syncthreads();
    } else {
        __syncwarp(mask);
    }
}

// ---------------------------------------------------------------- row bounds and classes
// A group of BOUND_LANES lanes per row sums the lengths of the B rows its entries select.
constexpr int BOUND_LANES = 8;

template <typename Index>
__global__ void spgemm_hash_bounds(const Index* __restrict__ a_indptr,
                                   const Index* __restrict__ a_indices,
                                   const Index* __restrict__ b_indptr, long long n_rows,
                                   Index* __restrict__ bounds) {
    const long long thread = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    const long long row = thread / BOUND_LANES;
    const int lane = threadIdx.x % BOUND_LANES;
    Index sum = 0;
    if (row < n_rows) {
        for (Index j = a_indptr[row] + lane; j < a_indptr[row + 1]; j += BOUND_LANES) {
            const Index column = __ldg(a_indices + j);
            sum += __ldg(b_indptr + column + 1) - __ldg(b_indptr + column);
        }
    }
#pragma unroll
    for (int offset = BOUND_LANES / 2; offset > 0; offset >>= 1) {
        sum += __shfl_xor_sync(FULL_WARP, sum, offset, BOUND_LANES);
    }
    if (row < n_rows && lane == 0) {
        bounds[row] = sum;
    }
}

// The products of L @ R summed into counter[0]: a thread per entry of L (grid-stride), so
// that a row of many entries (R-MAT's hubs) does not hold up one group of lanes the whole
// time. Each thread keeps COUNT_LOADS entries' gathers of R's offsets in flight at once (the
// kernel waits on those gathers, not on bandwidth), and a block adds its sum into the
// counter once (one atomic a block: a warp's each, 8 a block, queued on one address at the
// kernel's end). The last block to finish (counter[1] counts the blocks done) writes the
// total to *host_total (pinned host memory, which the device reaches through unified
// addressing: no copy launched after the count) and zeroes both counters for the next count
// (no memset launched before it). Blocks of at most 1024 threads.
constexpr int COUNT_LOADS = 4;

template <typename Index>
__device__ __forceinline__ unsigned long long row_length(const Index* __restrict__ indptr,
                                                         Index row) {
    return static_cast<unsigned long long>(__ldg(indptr + row + 1) - __ldg(indptr + row));
}

template <typename Index>
__global__ void spgemm_products_total(const Index* __restrict__ a_indices, long long nnz,
                                      const Index* __restrict__ b_indptr,
                                      unsigned long long* __restrict__ counter,
                                      unsigned long long* __restrict__ host_total) {
    __shared__ unsigned long long warp_sums[32];
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    unsigned long long sum = 0;
    for (; j + (COUNT_LOADS - 1) * stride < nnz; j += COUNT_LOADS * stride) {
        Index columns[COUNT_LOADS];
#pragma unroll
        for (int k = 0; k < COUNT_LOADS; ++k) {
            columns[k] = __ldg(a_indices + j + k * stride);
        }
#pragma unroll
        for (int k = 0; k < COUNT_LOADS; ++k) {
            sum += row_length(b_indptr, columns[k]);
        }
    }
    for (; j < nnz; j += stride) {
        sum += row_length(b_indptr, __ldg(a_indices + j));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        sum += __shfl_xor_sync(FULL_WARP, sum, offset);
    }
    const int warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    if ((threadIdx.x & 31) == 0) {
        warp_sums[warp] = sum;
    }
    __syncthreads();
    if (warp == 0) {
        sum = threadIdx.x < warps ? warp_sums[threadIdx.x] : 0ull;
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            sum += __shfl_xor_sync(FULL_WARP, sum, offset);
        }
        if (threadIdx.x == 0) {
            if (sum) {
                atomicAdd(counter, sum);
            }
            __threadfence();  // the block's sum before its count of done (CUDA's sample)
            const unsigned long long done = atomicAdd(counter + 1, 1ull);
            if (done == gridDim.x - 1ull) {  // every other block's sums are in
                __threadfence();
                const unsigned long long total = atomicExch(counter, 0ull);
                atomicExch(counter + 1, 0ull);
                *reinterpret_cast<volatile unsigned long long*>(host_total) = total;
                __threadfence_system();
            }
        }
    }
}

template <typename Index>
__global__ void spgemm_hash_classes(const Index* __restrict__ sizes, long long n_rows,
                                    long long cap, int half,
                                    unsigned long long* __restrict__ counts) {
    __shared__ unsigned int local[CLASSES];
    for (int c = threadIdx.x; c < CLASSES; c += blockDim.x) {
        local[c] = 0;
    }
    __syncthreads();
    const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (row < n_rows) {
        atomicAdd(&local[table_class(sizes[row], cap, half)], 1u);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < CLASSES; c += blockDim.x) {
        if (local[c]) {
            atomicAdd(&counts[c], static_cast<unsigned long long>(local[c]));
        }
    }
}

// Rows listed class by class: class c's rows start after those of classes 1 .. c-1 (from
// `counts`, as spgemm_hash_classes made them); cursors[c] (zero at first) counts the places
// blocks have claimed: one global atomic per class and block.
template <typename Index>
__global__ void spgemm_hash_bin(const Index* __restrict__ sizes, long long n_rows,
                                long long cap, int half,
                                const unsigned long long* __restrict__ counts,
                                unsigned long long* __restrict__ cursors,
                                Index* __restrict__ rows) {
    __shared__ unsigned int local[CLASSES];
    __shared__ unsigned long long base[CLASSES];
    for (int c = threadIdx.x; c < CLASSES; c += blockDim.x) {
        local[c] = 0;
    }
    __syncthreads();
    const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    int c = 0;
    unsigned int rank = 0;
    if (row < n_rows) {
        c = table_class(sizes[row], cap, half);
        if (c) {
            rank = atomicAdd(&local[c], 1u);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long first = 0;
        for (int k = 1; k < CLASSES; ++k) {
            base[k] = first;
            first += counts[k];
        }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < CLASSES; k += blockDim.x) {
        if (local[k]) {
            base[k] += atomicAdd(&cursors[k], static_cast<unsigned long long>(local[k]));
        }
    }
    __syncthreads();
    if (c) {
        rows[base[c] + rank] = static_cast<Index>(row);
    }
}

// The slot of `column` in a table of `slots` (a power of two) slots, claimed if it is new.
template <typename Index>
__device__ __forceinline__ int find_or_insert(Index* keys, int slots, Index column,
                                              bool& inserted) {
    const unsigned mixed = static_cast<unsigned>(column) ^
                           static_cast<unsigned>(static_cast<unsigned long long>(column) >> 32);
    int h = static_cast<int>((mixed * HASH_SCALE) >> (33 - __ffs(slots)));
    while (true) {
        Index seen = reinterpret_cast<volatile Index*>(keys)[h];
        if (seen == Index(-1)) {
            seen = atomic_cas_index(keys + h, Index(-1), column);
            if (seen == Index(-1)) {
                inserted = true;
                return h;
            }
        }
        if (seen == column) {
            inserted = false;
            return h;
        }
        h = (h + 1) & (slots - 1);
    }
}

// The table's slots, a power of two a row of `need` entries uses (as table_class).
__device__ __forceinline__ int table_slots(long long size, long long cap, int half) {
    return 1 << table_class(size > 0 ? size : 1, cap, half);
}

// ---------------------------------------------------------------- symbolic phase
// One row's distinct columns and products counted by its group in `keys` (s slots):
// counted[0] and counted[1], in every thread of the group. `totals`: the block's shared
// counters of a whole-block group.
template <int LANES, bool WHOLE_BLOCK, typename Index>
__device__ __forceinline__ void count_row(const Index* __restrict__ a_indptr,
                                          const Index* __restrict__ a_indices,
                                          const Index* __restrict__ b_indptr,
                                          const Index* __restrict__ b_indices, Index row, int s,
                                          Index* keys, int t, int group_threads, unsigned mask,
                                          unsigned long long* totals,
                                          unsigned long long* counted) {
    for (int i = t; i < s; i += group_threads) {
        keys[i] = Index(-1);
    }
    if (WHOLE_BLOCK && t == 0) {
        totals[0] = 0;
        totals[1] = 0;
    }
    group_sync<WHOLE_BLOCK>(mask);
    unsigned int mine = 0;
    unsigned int products = 0;
    for_each_product<LANES, WHOLE_BLOCK>(
        a_indptr[row], a_indptr[row + 1], a_indices, static_cast<const float*>(nullptr),
        b_indptr, mask, [&](Index position, float, Index) {
            bool inserted;
            find_or_insert(keys, s, __ldg(b_indices + position), inserted);
            mine += inserted;
            ++products;
        });
    mine = __reduce_add_sync(mask, mine);
    products = __reduce_add_sync(mask, products);
    if constexpr (WHOLE_BLOCK) {
        if ((threadIdx.x & 31) == 0 && products) {
            atomicAdd(&totals[0], static_cast<unsigned long long>(mine));
            atomicAdd(&totals[1], static_cast<unsigned long long>(products));
        }
        __syncthreads();
        counted[0] = totals[0];
        counted[1] = totals[1];
        __syncthreads();  // read before the next row's group resets them
    } else {
        counted[0] = mine;
        counted[1] = products;
    }
}

// The group, lane and table of the calling thread (dynamic shared memory, groups x slots
// keys, or a block's slice of global_keys).
template <int LANES, bool WHOLE_BLOCK, typename Index>
struct Groups {
    int group_threads, groups, group, t;
    unsigned mask;
    Index* keys;

    __device__ __forceinline__ Groups(unsigned char* shared, int slots, Index* global_keys) {
        group_threads = WHOLE_BLOCK ? static_cast<int>(blockDim.x) : LANES;
        groups = static_cast<int>(blockDim.x) / group_threads;
        group = static_cast<int>(threadIdx.x) / group_threads;
        t = static_cast<int>(threadIdx.x) % group_threads;
        mask = group_mask<LANES, WHOLE_BLOCK>();
        keys = global_keys != nullptr
                   ? global_keys + static_cast<long long>(blockIdx.x) * slots
                   : reinterpret_cast<Index*>(shared) + static_cast<long long>(group) * slots;
    }
};

// sizes[row]: the row's bound on entry, its number of entries on exit. `slots`: the table
// of a group (shared memory: dynamic, groups x slots keys) or of a block (global_keys); a
// row's table has 2^shift times the slots its bound's class gives (shift 1: at most half
// full where a row's products are all distinct, as power-law rows' nearly are; a full
// table's last insertions probe most of it).
template <typename Index, int LANES, bool WHOLE_BLOCK>
__global__ void spgemm_hash_count(const Index* __restrict__ a_indptr,
                                  const Index* __restrict__ a_indices,
                                  const Index* __restrict__ b_indptr,
                                  const Index* __restrict__ b_indices,
                                  const Index* __restrict__ rows, long long n_rows,
                                  long long n_cols, Index* __restrict__ sizes, int slots,
                                  Index* __restrict__ global_keys, int shift) {
    extern __shared__ __align__(16) unsigned char shared[];
    __shared__ unsigned long long totals[2];  // a whole-block group's counts
    const Groups<LANES, WHOLE_BLOCK, Index> g(shared, slots, global_keys);
    for (long long r = static_cast<long long>(blockIdx.x) * g.groups + g.group; r < n_rows;
         r += static_cast<long long>(gridDim.x) * g.groups) {
        const Index row = rows[r];
        unsigned long long counted[2];
        const int s = table_slots(sizes[row], n_cols, 0) << shift;
        count_row<LANES, WHOLE_BLOCK>(a_indptr, a_indices, b_indptr, b_indices, row, s, g.keys,
                                      g.t, g.group_threads, g.mask, totals, counted);
        if (g.t == 0) {
            sizes[row] = static_cast<Index>(counted[0]);
        }
        if constexpr (!WHOLE_BLOCK) {
            __syncwarp(g.mask);
        }
    }
}

// The first product's rule: rows r (a_rows - 1) / (count - 1) of A (r < count: spread
// evenly), their distinct columns and their products summed into totals[0] and totals[1].
// Every table has `slots` slots in shared memory (at least each sampled row's products).
template <typename Index, int LANES, bool WHOLE_BLOCK>
__global__ void spgemm_hash_sample(const Index* __restrict__ a_indptr,
                                   const Index* __restrict__ a_indices,
                                   const Index* __restrict__ b_indptr,
                                   const Index* __restrict__ b_indices, long long count,
                                   long long a_rows, int slots,
                                   unsigned long long* __restrict__ totals) {
    extern __shared__ __align__(16) unsigned char shared[];
    __shared__ unsigned long long block_totals[2];
    const Groups<LANES, WHOLE_BLOCK, Index> g(shared, slots, static_cast<Index*>(nullptr));
    for (long long r = static_cast<long long>(blockIdx.x) * g.groups + g.group; r < count;
         r += static_cast<long long>(gridDim.x) * g.groups) {
        const Index row = static_cast<Index>(count > 1 ? r * (a_rows - 1) / (count - 1) : 0);
        unsigned long long counted[2];
        count_row<LANES, WHOLE_BLOCK>(a_indptr, a_indices, b_indptr, b_indices, row, slots,
                                      g.keys, g.t, g.group_threads, g.mask, block_totals,
                                      counted);
        if (g.t == 0 && counted[1]) {
            atomicAdd(&totals[0], counted[0]);
            atomicAdd(&totals[1], counted[1]);
        }
        if constexpr (!WHOLE_BLOCK) {
            __syncwarp(g.mask);
        }
    }
}

// ---------------------------------------------------------------- numeric phase
// The first `slots` keys and values sorted by key as unsigned (bitonic; every thread of
// the group takes pairs in turn).
template <bool WHOLE_BLOCK, typename Index, typename Value>
__device__ __forceinline__ void sort_table(Index* keys, Value* values, int slots, int t,
                                           int group_threads, unsigned mask) {
    using Key = typename unsigned_of<Index>::type;
    for (int size = 2; size <= slots; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = t; i < (slots >> 1); i += group_threads) {
                const int low = 2 * i - (i & (stride - 1));
                const int high = low + stride;
                const Index key_low = keys[low];
                const Index key_high = keys[high];
                const bool ascending = (low & size) == 0;
                if ((static_cast<Key>(key_low) > static_cast<Key>(key_high)) == ascending) {
                    keys[low] = key_high;
                    keys[high] = key_low;
                    const Value value_low = values[low];
                    values[low] = values[high];
                    values[high] = value_low;
                }
            }
            group_sync<WHOLE_BLOCK>(mask);
        }
    }
}

// Tables of up to this many slots (groups of up to 16 lanes) are written by ranks, larger
// ones sorted first: ranking costs a lane (entries / lanes) x entries comparisons over the
// occupied slots (found by ballots; the reads are broadcasts) and no synchronisation, the
// bitonic sort log^2(slots) / 2 synchronised steps.
constexpr int RANK_SLOTS = 64;

// Each entry of a group's table of `slots` <= RANK_SLOTS written at its rank among the
// row's columns.
template <int LANES, typename Index, typename Value>
__device__ __forceinline__ void write_ranked(const Index* keys, const Value* values, int slots,
                                             int t, unsigned mask, Index* c_indices,
                                             Value* c_data) {
    using Key = typename unsigned_of<Index>::type;
    const int first_lane = (threadIdx.x & 31) & ~(LANES - 1);
    unsigned long long occupied = 0;  // bit i: slot i holds a column
    for (int k = 0; k < slots; k += LANES) {
        const bool taken = keys[k + t] != Index(-1);
        const unsigned lanes = (__ballot_sync(mask, taken) >> first_lane) &
                               static_cast<unsigned>((1ull << LANES) - 1);
        occupied |= static_cast<unsigned long long>(lanes) << k;
    }
    for (int i = t; i < slots; i += LANES) {
        if ((occupied >> i) & 1) {
            const Key key = static_cast<Key>(keys[i]);
            int rank = 0;
            for (unsigned long long rest = occupied; rest; rest &= rest - 1) {
                rank += static_cast<Key>(keys[__ffsll(static_cast<long long>(rest)) - 1]) < key;
            }
            c_indices[rank] = keys[i];
            c_data[rank] = values[i];
        }
    }
}

// ---------------------------------------------------------------- merged rows
// A whole block's table of many slots sorted by its bitonic network costs O(s log^2 s)
// reads and writes of its one SM's shared memory (a table of 16,384 slots about 0.2 ms,
// in global memory ten times that), for a row of at most 0.8 s entries. Instead the
// entries are gathered (in any order) into the row's place in C, sorted in runs of
// MERGE_RUN by each warp in registers (the short rows' network), then merged pair
// by pair (merge path: each thread MERGE_ITEMS outputs, its start found by a binary
// search), between the row's place in C and the table's first `entries` slots, ending in C:
// O(n log(n / run)) reads and writes. A row's columns are distinct, so no order of equal
// keys matters.
// A lane's keys in a run: blocks of 1,024 threads leave a thread 64 registers, and with 4
// (runs of 128) the shuffles of the network took the whole-block fills past them (66-80).
constexpr int MERGE_K = 2;
constexpr int MERGE_RUN = 32 * MERGE_K;
constexpr int MERGE_ITEMS = 8;  // divides every pair of runs (2 * MERGE_RUN)

// The `entries` keys and values of `keys` and `values` (any order) written into out_keys
// and out_values from the block's threads, in any order.
template <typename Index, typename Value>
__device__ __forceinline__ void gather_entries(const Index* keys, const Value* values, int s,
                                               Index* __restrict__ out_keys,
                                               Value* __restrict__ out_values,
                                               unsigned* cursor) {
    const int lane = static_cast<int>(threadIdx.x & 31);
    if (threadIdx.x == 0) {
        *cursor = 0;
    }
    __syncthreads();
    // s is a multiple of the block (both powers of two): every lane takes each round
    for (int i = threadIdx.x; i < s; i += blockDim.x) {
        const bool taken = keys[i] != Index(-1);
        const unsigned held = __ballot_sync(FULL_WARP, taken);
        unsigned first = 0;
        if (lane == 0 && held) {
            first = atomicAdd(cursor, static_cast<unsigned>(__popc(held)));
        }
        first = __shfl_sync(FULL_WARP, first, 0);
        if (taken) {
            const unsigned at = first + __popc(held & ((1u << lane) - 1u));
            out_keys[at] = keys[i];
            out_values[at] = values[i];
        }
    }
    __syncthreads();
}

// Pairs of sorted runs of `width` of src (n keys and values) merged into dst (the block).
template <typename Index, typename Value>
__device__ __forceinline__ void merge_pairs(const Index* src_keys, const Value* src_values,
                                            Index* dst_keys, Value* dst_values, int n,
                                            int width) {
    for (int base = threadIdx.x * MERGE_ITEMS; base < n; base += blockDim.x * MERGE_ITEMS) {
        const int pair = base - base % (2 * width);
        const int a_end = pair + width < n ? pair + width : n;
        const int b_end = pair + 2 * width < n ? pair + 2 * width : n;
        const int diagonal = base - pair;
        const int b_count = b_end - a_end;
        int low = diagonal > b_count ? diagonal - b_count : 0;
        int high = diagonal < a_end - pair ? diagonal : a_end - pair;
        while (low < high) {  // the keys of A on this diagonal's left
            const int middle = (low + high) >> 1;
            if (src_keys[pair + middle] < src_keys[a_end + diagonal - 1 - middle]) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        int i = pair + low;
        int j = a_end + diagonal - low;
        for (int t = 0; t < MERGE_ITEMS && base + t < n; ++t) {
            const bool from_a = j >= b_end || (i < a_end && src_keys[i] < src_keys[j]);
            const int at = from_a ? i++ : j++;
            dst_keys[base + t] = src_keys[at];
            dst_values[base + t] = src_values[at];
        }
    }
    __syncthreads();
}

// The row's table (keys, values; s slots, `entries` taken) written into out_keys and
// out_values (its place in C) sorted by column, the table used as the other buffer.
template <typename Index, typename Value>
__device__ __forceinline__ void merge_row(Index* keys, Value* values, int s, int entries,
                                          Index* __restrict__ out_keys,
                                          Value* __restrict__ out_values) {
    __shared__ unsigned cursor;
    constexpr int K = MERGE_K;
    constexpr int RUN = MERGE_RUN;
    constexpr Index PAD = PAST_COLUMNS<Index>;
    int rounds = 0;
    for (int width = RUN; width < entries; width <<= 1) {
        ++rounds;
    }
    gather_entries(keys, values, s, out_keys, out_values, &cursor);
    // runs sorted into C where an even number of merges follows, else into the table
    Index* run_keys = rounds % 2 == 0 ? out_keys : keys;
    Value* run_values = rounds % 2 == 0 ? out_values : values;
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int warps = static_cast<int>(blockDim.x >> 5);
    for (int run = static_cast<int>(threadIdx.x >> 5) * RUN; run < entries; run += warps * RUN) {
        Index k[K];
        Value v[K];
#pragma unroll
        for (int e = 0; e < K; ++e) {
            const int at = run + e * 32 + lane;
            k[e] = at < entries ? out_keys[at] : PAD;
            v[e] = at < entries ? out_values[at] : value_zero<Value>();
        }
        short_sort<true, 32, K>(k, v, FULL_WARP, lane);
#pragma unroll
        for (int e = 0; e < K; ++e) {
            const int at = run + e * 32 + lane;
            if (at < entries) {
                run_keys[at] = k[e];
                run_values[at] = v[e];
            }
        }
    }
    __syncthreads();
    Index* src_keys = run_keys;
    Value* src_values = run_values;
    for (int width = RUN; width < entries; width <<= 1) {
        Index* dst_keys = src_keys == out_keys ? keys : out_keys;
        Value* dst_values = src_keys == out_keys ? values : out_values;
        merge_pairs(src_keys, src_values, dst_keys, dst_values, entries, width);
        src_keys = dst_keys;
        src_values = dst_values;
    }
}

// c_indptr: the result's row offsets (from the symbolic phase); the row's table has slots
// for 1.5 times its entries. Shared memory: groups x slots values, then as many keys.
// A whole block's table of at least merge_slots slots (0: none) is merged, not sorted.
// Launch bounds: a whole block of at most 1,024 threads (64 registers a thread), a warp's
// groups at most 256 (table_launch).
template <typename Value, typename Index, int LANES, bool WHOLE_BLOCK>
__global__ void __launch_bounds__(WHOLE_BLOCK ? 1024 : 256, 1)
    spgemm_hash_fill(const Index* __restrict__ a_indptr,
                                 const Index* __restrict__ a_indices,
                                 const Value* __restrict__ a_data,
                                 const Index* __restrict__ b_indptr,
                                 const Index* __restrict__ b_indices,
                                 const Value* __restrict__ b_data,
                                 const Index* __restrict__ rows, long long n_rows, int slots,
                                 const Index* __restrict__ c_indptr,
                                 Index* __restrict__ c_indices, Value* __restrict__ c_data,
                                 Index* __restrict__ global_keys,
                                 Value* __restrict__ global_values, int merge_slots) {
    extern __shared__ __align__(16) unsigned char shared[];
    const int group_threads = WHOLE_BLOCK ? static_cast<int>(blockDim.x) : LANES;
    const int groups = static_cast<int>(blockDim.x) / group_threads;
    const int group = static_cast<int>(threadIdx.x) / group_threads;
    const int t = static_cast<int>(threadIdx.x) % group_threads;
    const unsigned mask = group_mask<LANES, WHOLE_BLOCK>();
    Index* keys;
    Value* values;
    if (global_keys != nullptr) {
        keys = global_keys + static_cast<long long>(blockIdx.x) * slots;
        values = global_values + static_cast<long long>(blockIdx.x) * slots;
    } else {
        Value* all_values = reinterpret_cast<Value*>(shared);
        values = all_values + static_cast<long long>(group) * slots;
        keys = reinterpret_cast<Index*>(all_values + static_cast<long long>(groups) * slots) +
               static_cast<long long>(group) * slots;
    }
    for (long long r = static_cast<long long>(blockIdx.x) * groups + group; r < n_rows;
         r += static_cast<long long>(gridDim.x) * groups) {
        const Index row = rows[r];
        const Index c_start = c_indptr[row];
        const Index entries = c_indptr[row + 1] - c_start;
        const int s = table_slots(entries, entries, 1);
        for (int i = t; i < s; i += group_threads) {
            keys[i] = Index(-1);
            values[i] = value_zero<Value>();
        }
        group_sync<WHOLE_BLOCK>(mask);
        for_each_product<LANES, WHOLE_BLOCK>(
            a_indptr[row], a_indptr[row + 1], a_indices, a_data, b_indptr, mask,
            [&](Index position, Value a, Index) {
                bool inserted;
                const int h = find_or_insert(keys, s, __ldg(b_indices + position), inserted);
                atomic_add_value(values + h, multiply(a, load_readonly(b_data + position)));
            });
        group_sync<WHOLE_BLOCK>(mask);
        if (LANES < 32 && s <= RANK_SLOTS) {
            write_ranked<LANES>(keys, values, s, t, mask, c_indices + c_start, c_data + c_start);
        } else if (WHOLE_BLOCK && merge_slots > 0 && s >= merge_slots) {
            merge_row(keys, values, s, static_cast<int>(entries), c_indices + c_start,
                      c_data + c_start);
        } else {
            sort_table<WHOLE_BLOCK>(keys, values, s, t, group_threads, mask);
            for (Index i = t; i < entries; i += group_threads) {
                c_indices[c_start + i] = keys[i];
                c_data[c_start + i] = values[i];
            }
        }
        group_sync<WHOLE_BLOCK>(mask);
    }
}

// ---------------------------------------------------------------- dense rows
// Rows whose tables would hold a large share of C's n_cols columns: a block per row (the
// block looping over the rows of its class), a bitmap of ceil(n_cols / 32) words in dynamic
// shared memory.
__device__ __forceinline__ void set_column_bit(unsigned* bitmap, unsigned long long column) {
    unsigned* word = bitmap + (column >> 5);
    const unsigned bit = 1u << (column & 31);
    if (!(*reinterpret_cast<volatile unsigned*>(word) & bit)) {
        atomicOr(word, bit);
    }
}

__device__ __forceinline__ void clear_bitmap(unsigned* bitmap, long long words) {
    for (long long w = threadIdx.x; w < words; w += blockDim.x) {
        bitmap[w] = 0u;
    }
}

// sizes[row]: the row's bound on entry (unused), its number of entries on exit.
template <typename Index>
__global__ void spgemm_dense_count(const Index* __restrict__ a_indptr,
                                   const Index* __restrict__ a_indices,
                                   const Index* __restrict__ b_indptr,
                                   const Index* __restrict__ b_indices,
                                   const Index* __restrict__ rows, long long n_rows,
                                   long long n_cols, Index* __restrict__ sizes) {
    extern __shared__ __align__(16) unsigned char shared[];
    __shared__ unsigned long long total;
    unsigned* bitmap = reinterpret_cast<unsigned*>(shared);
    const long long words = (n_cols + 31) >> 5;
    for (long long r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const Index row = rows[r];
        clear_bitmap(bitmap, words);
        if (threadIdx.x == 0) {
            total = 0;
        }
        __syncthreads();
        for_each_product<32, true>(
            a_indptr[row], a_indptr[row + 1], a_indices, static_cast<const float*>(nullptr),
            b_indptr, FULL_WARP, [&](Index position, float, Index) {
                set_column_bit(bitmap, static_cast<unsigned long long>(__ldg(b_indices + position)));
            });
        __syncthreads();
        unsigned mine = 0;
        for (long long w = threadIdx.x; w < words; w += blockDim.x) {
            mine += __popc(bitmap[w]);
        }
        mine = __reduce_add_sync(FULL_WARP, mine);
        if ((threadIdx.x & 31) == 0 && mine) {
            atomicAdd(&total, static_cast<unsigned long long>(mine));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            sizes[row] = static_cast<Index>(total);
        }
        __syncthreads();  // total read before the next row resets it
    }
}

// c_indptr: the result's row offsets (from the symbolic phase). dense: n_cols values a
// block, zero on entry, zero again on exit (each row's entries reset as they are written).
// Each warp takes an even share of the bitmap's words; the warps' counts scanned give where
// each share starts in the row; a warp writes a word's columns together (lane l, bit l).
template <typename Value, typename Index>
__global__ void spgemm_dense_fill(const Index* __restrict__ a_indptr,
                                  const Index* __restrict__ a_indices,
                                  const Value* __restrict__ a_data,
                                  const Index* __restrict__ b_indptr,
                                  const Index* __restrict__ b_indices,
                                  const Value* __restrict__ b_data,
                                  const Index* __restrict__ rows, long long n_rows,
                                  long long n_cols, const Index* __restrict__ c_indptr,
                                  Index* __restrict__ c_indices, Value* __restrict__ c_data,
                                  Value* __restrict__ dense_all) {
    extern __shared__ __align__(16) unsigned char shared[];
    __shared__ unsigned long long warp_first[32];
    unsigned* bitmap = reinterpret_cast<unsigned*>(shared);
    const long long words = (n_cols + 31) >> 5;
    Value* dense = dense_all + static_cast<long long>(blockIdx.x) * n_cols;
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int warp = static_cast<int>(threadIdx.x >> 5);
    const int warps = static_cast<int>(blockDim.x >> 5);
    const long long share = (words + warps - 1) / warps;
    const long long w_begin = static_cast<long long>(warp) * share;
    const long long w_end = w_begin + share < words ? w_begin + share : words;
    for (long long r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const Index row = rows[r];
        clear_bitmap(bitmap, words);
        __syncthreads();
        for_each_product<32, true>(
            a_indptr[row], a_indptr[row + 1], a_indices, a_data, b_indptr, FULL_WARP,
            [&](Index position, Value a, Index) {
                const Index column = __ldg(b_indices + position);
                atomic_add_value(dense + column, multiply(a, load_readonly(b_data + position)));
                set_column_bit(bitmap, static_cast<unsigned long long>(column));
            });
        __syncthreads();
        unsigned mine = 0;
        for (long long w = w_begin + lane; w < w_end; w += 32) {
            mine += __popc(bitmap[w]);
        }
        mine = __reduce_add_sync(FULL_WARP, mine);
        if (lane == 0) {
            warp_first[warp] = mine;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long first = 0;
            for (int k = 0; k < warps; ++k) {
                const unsigned long long count = warp_first[k];
                warp_first[k] = first;
                first += count;
            }
        }
        __syncthreads();
        unsigned long long out = static_cast<unsigned long long>(c_indptr[row]) + warp_first[warp];
        for (long long base = w_begin; base < w_end; base += 32) {
            const unsigned held = base + lane < w_end ? bitmap[base + lane] : 0u;
            const int span = w_end - base < 32 ? static_cast<int>(w_end - base) : 32;
            for (int k = 0; k < span; ++k) {
                const unsigned bits = __shfl_sync(FULL_WARP, held, k);
                if (bits) {
                    if ((bits >> lane) & 1u) {
                        const long long column = ((base + k) << 5) + lane;
                        const unsigned long long at = out + __popc(bits & ((1u << lane) - 1u));
                        c_indices[at] = static_cast<Index>(column);
                        c_data[at] = dense[column];
                        dense[column] = value_zero<Value>();
                    }
                    out += __popc(bits);
                }
            }
        }
        __syncthreads();  // the bitmap read before the next row clears it
    }
}
