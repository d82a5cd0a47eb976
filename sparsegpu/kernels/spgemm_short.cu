// spgemm_short.cu: the rows of C = A @ B with few products (at most CAP: 32 to 256), which
// the hash rows (spgemm_hash.cu) list by their products and hand over: no table. A group of
// LANES lanes of a warp per row gathers the row's products (column, and a * b in the numeric
// pass) into shared memory, spread evenly over its lanes as the hash rows do
// (spgemm_rows.cuh), then sorts them in registers:
//
// spgemm_short_count   each listed row's entries of C: its products sorted by column (a
//                      bitonic network over the group's registers) and the columns'
//                      first products counted (sizes[row]);
// spgemm_short_fill    the same sort carrying the products' values; each column's first
//                      product, placed by a ballot of the firsts, sums its run (the same
//                      network and order on every run: the same bits, no atomics) and is
//                      written at c_indptr[row] + its place: canonical CSR; or, SLOTTED
//                      (where the work space fits: no count pass), into a slot of CAP
//                      entries a row with the row's entries into sizes[row];
// spgemm_slot_move     slotted rows (this file's kernels') moved to their places once C's
//                      offsets are known;
// spgemm_short_first   every row of A, no listing before it: rows of at most CAP products
//                      into slots indexed by the row, the others' products into over[row]
//                      (for the hash rows' listing of what is left);
// spgemm_short_unlist  sizes[row] = 0 for the listed rows (so that the numeric listing of
//                      the hash rows leaves them out);
// spgemm_short_count_listed, spgemm_short_fill_listed  the count and the (unslotted) fill of
//                      one class of a listing whose class counts they read on the device
//                      (short rows first's rows of more products, where every one is short:
//                      no host wait for the listing).
//
// Work O(CAP log^2 CAP / LANES) a lane a row: no table to clear, no atomics, no shared memory
// in the sort (the threshold is the hash rows' SHORT_SLOTS, fitted). NARROW (32-bit indices,
// C's columns below 2^(32 - log2 CAP) - 1): the numeric sort moves one 32-bit key a product,
// its column above its place among the row's products, and the runs' sums read the values
// where the gather left them (one shuffle a product a step of the network, not a key's and a
// value's: a double's value took two of the three). A row's
// products beyond CAP (only where a caller's bound was wrong) are never stored: no write
// outside the group's shared memory. Entries whose products cancel stay stored, as the
// hash rows and cuSPARSE keep them.
// Value: float, double, complex64, complex128 (common.cuh). Index: int, long long.
#include "spgemm_rows.cuh"

constexpr int SHORT_BLOCK = 128;  // threads a block (hash_spgemm.SHORT_BLOCK)

// The products of A's row [start, end) into keys[0, n) (values too when VALUES), spread
// evenly over the group's lanes (spgemm_rows.cuh); n, the row's products (only the first
// CAP are stored).
template <bool VALUES, int LANES, int CAP, typename Value, typename Index>
__device__ __forceinline__ Index short_gather(Index start, Index end,
                                              const Index* __restrict__ a_indices,
                                              const Value* __restrict__ a_data,
                                              const Index* __restrict__ b_indptr,
                                              const Index* __restrict__ b_indices,
                                              const Value* __restrict__ b_data, Index* keys,
                                              Value* values, unsigned mask) {
    return for_each_product<LANES, false>(
        start, end, a_indices, a_data, b_indptr, mask, [&](Index at, Value a, Index place) {
            if (place < CAP) {
                keys[place] = __ldg(b_indices + at);
                if constexpr (VALUES) {
                    values[place] = multiply(a, load_readonly(b_data + at));
                }
            }
        });
}

// The group's LANES * K sorted keys (element k * LANES + lane in keys[k] of that lane): each
// first of its column's run (column(key): the column a key holds; PAD: no product) marked
// with its place among the row's columns in place[k] (else -1); the row's columns.
template <int LANES, int K, typename Key, typename Column>
__device__ __forceinline__ int mark_firsts(const Key (&keys)[K], int (&place)[K], Key pad,
                                           unsigned mask, int lane, Column column) {
    const int shift = (threadIdx.x & 31) & ~(LANES - 1);
    int distinct = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        Key before = __shfl_up_sync(mask, keys[k], 1, LANES);
        if (k > 0) {
            const Key last = __shfl_sync(mask, keys[k - 1], LANES - 1, LANES);
            if (lane == 0) {
                before = last;
            }
        }
        const bool first =
            keys[k] != pad && ((k == 0 && lane == 0) || column(before) != column(keys[k]));
        const unsigned firsts = (__ballot_sync(mask, first) & mask) >> shift;
        place[k] = first ? distinct + __popc(firsts & ((1u << lane) - 1u)) : -1;
        distinct += __popc(firsts);
    }
    return distinct;
}

// A row's products (n of them in keys_s, values_s) sorted into registers, and each first
// of its column's run marked with its place among the row's columns; the row's columns.
template <bool VALUES, int LANES, int K, typename Index, typename Value>
__device__ __forceinline__ int short_sorted(const Index* keys_s, const Value* values_s, int n,
                                            Index (&keys)[K], Value (&values)[K],
                                            int (&place)[K], unsigned mask, int lane) {
    constexpr Index PAD = PAST_COLUMNS<Index>;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int i = k * LANES + lane;
        keys[k] = i < n ? keys_s[i] : PAD;
        values[k] = value_zero<Value>();
        if constexpr (VALUES) {
            if (i < n) {
                values[k] = values_s[i];
            }
        }
    }
    short_sort<VALUES, LANES, K>(keys, values, mask, lane);
    return mark_firsts<LANES, K>(keys, place, PAD, mask, lane, [](Index key) { return key; });
}

// The listed rows rows[0, n_rows) counted: each one's entries of C into sizes[row].
template <typename Index, int LANES, int CAP>
__device__ __forceinline__ void short_count_rows(const Index* __restrict__ a_indptr,
                                                 const Index* __restrict__ a_indices,
                                                 const Index* __restrict__ b_indptr,
                                                 const Index* __restrict__ b_indices,
                                                 const Index* __restrict__ rows, long long n_rows,
                                                 Index* __restrict__ sizes) {
    constexpr int GROUPS = SHORT_BLOCK / LANES;
    constexpr int K = CAP / LANES;
    __shared__ Index all_keys[GROUPS][CAP + 1];  // + 1: a warp's groups on other banks
    const int lane = threadIdx.x % LANES;
    const int group = threadIdx.x / LANES;
    const unsigned mask = group_mask<LANES, false>();
    Index* keys_s = all_keys[group];
    for (long long r = static_cast<long long>(blockIdx.x) * GROUPS + group; r < n_rows;
         r += static_cast<long long>(gridDim.x) * GROUPS) {
        const Index row = rows[r];
        const Index products = short_gather<false, LANES, CAP, float>(
            a_indptr[row], a_indptr[row + 1], a_indices, static_cast<const float*>(nullptr),
            b_indptr, b_indices, static_cast<const float*>(nullptr), keys_s,
            static_cast<float*>(nullptr), mask);
        const int n = products < CAP ? static_cast<int>(products) : CAP;
        __syncwarp(mask);
        Index keys[K];
        float unused[K];
        int place[K];
        const int distinct = short_sorted<false, LANES, K>(
            keys_s, static_cast<const float*>(nullptr), n, keys, unused, place, mask, lane);
        if (lane == 0) {
            sizes[row] = static_cast<Index>(distinct);
        }
        __syncwarp(mask);  // every lane done reading before the next row's gather
    }
}

template <typename Index, int LANES, int CAP>
__global__ void
    spgemm_short_count(const Index* __restrict__ a_indptr, const Index* __restrict__ a_indices,
                       const Index* __restrict__ b_indptr, const Index* __restrict__ b_indices,
                       const Index* __restrict__ rows, long long n_rows,
                       Index* __restrict__ sizes) {
    short_count_rows<Index, LANES, CAP>(a_indptr, a_indices, b_indptr, b_indices, rows, n_rows,
                                        sizes);
}

// log2 of CAP: the bits of a NARROW key that hold a product's place among its row's.
template <int CAP>
__host__ __device__ constexpr int place_bits() {
    static_assert(CAP > 1 && (CAP & (CAP - 1)) == 0, "CAP is a power of two");
    int bits = 0;
    while ((1 << bits) < CAP) {
        ++bits;
    }
    return bits;
}

// NARROW: short_write's sort on one 32-bit key a product (its column above its place among
// the n products of keys_s); each first of its column's run marked with its place among the
// row's columns; the row's columns. The caller keeps C's columns below 2^(32 - BITS) - 1, so
// no key is PAD and no column equals PAD's.
template <int LANES, int K, int BITS, typename Index>
__device__ __forceinline__ int short_sorted_narrow(const Index* keys_s, int n,
                                                   unsigned (&keys)[K], int (&place)[K],
                                                   unsigned mask, int lane) {
    static_assert(sizeof(Index) == 4, "NARROW keys are 32-bit indices");
    constexpr unsigned PAD = ~0u;
    float unused[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int i = k * LANES + lane;
        keys[k] = i < n ? (static_cast<unsigned>(keys_s[i]) << BITS) | static_cast<unsigned>(i)
                        : PAD;
    }
    short_sort<false, LANES, K>(keys, unused, mask, lane);
    return mark_firsts<LANES, K>(keys, place, PAD, mask, lane,
                                 [](unsigned key) { return key >> BITS; });
}

// The n products of a row gathered in keys_s and values_s (the group's shared memory)
// sorted by column and written as the row's entries to out_indices and out_data (each
// column's first product sums its run, in order); the row's entries. Leaves the group's
// lanes in step (keys_s and values_s free again). NARROW: one 32-bit key a product (see
// the file's comment).
template <int LANES, int CAP, bool NARROW, typename Index, typename Value>
__device__ __forceinline__ int short_write(Index* keys_s, Value* values_s, int n,
                                           Index* __restrict__ out_indices,
                                           Value* __restrict__ out_data, unsigned mask,
                                           int lane) {
    constexpr int K = CAP / LANES;
    if constexpr (NARROW) {
        constexpr int BITS = place_bits<CAP>();
        constexpr unsigned PLACE = (1u << BITS) - 1u;
        unsigned keys[K];
        int place[K];
        const int distinct = short_sorted_narrow<LANES, K, BITS>(keys_s, n, keys, place, mask,
                                                                  lane);
        __syncwarp(mask);  // every lane has read the gathered columns
        unsigned* sorted_s = reinterpret_cast<unsigned*>(keys_s);
#pragma unroll
        for (int k = 0; k < K; ++k) {  // the sorted keys back, for the runs' sums
            const int i = k * LANES + lane;
            if (i < n) {
                sorted_s[i] = keys[k];
            }
        }
        __syncwarp(mask);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (place[k] >= 0) {  // the first of its column's run: the run's sum, in order
                const unsigned column = keys[k] >> BITS;
                Value sum = values_s[keys[k] & PLACE];
                for (int i = k * LANES + lane + 1; i < n && (sorted_s[i] >> BITS) == column;
                     ++i) {
                    sum = add(sum, values_s[sorted_s[i] & PLACE]);
                }
                out_indices[place[k]] = static_cast<Index>(column);
                out_data[place[k]] = sum;
            }
        }
        __syncwarp(mask);
        return distinct;
    }
    Index keys[K];
    Value values[K];
    int place[K];
    const int distinct =
        short_sorted<true, LANES, K>(keys_s, values_s, n, keys, values, place, mask, lane);
    __syncwarp(mask);  // every lane has read the gathered products
#pragma unroll
    for (int k = 0; k < K; ++k) {  // the sorted products back, for the runs' sums
        const int i = k * LANES + lane;
        if (i < n) {
            keys_s[i] = keys[k];
            values_s[i] = values[k];
        }
    }
    __syncwarp(mask);
#pragma unroll
    for (int k = 0; k < K; ++k) {
        if (place[k] >= 0) {  // the first of its column's run: the run's sum, in order
            Value sum = values[k];
            for (int i = k * LANES + lane + 1; i < n && keys_s[i] == keys[k]; ++i) {
                sum = add(sum, values_s[i]);
            }
            out_indices[place[k]] = keys[k];
            out_data[place[k]] = sum;
        }
    }
    __syncwarp(mask);
    return distinct;
}

// SLOTTED: the r-th listed row written at r * CAP of c_indices and c_data (a slot of CAP
// entries a row, before C's offsets are known) and its entries to sizes[row] (c_indptr
// unread); else at c_indptr[row] (sizes unwritten). NARROW: see the file's comment.
template <typename Value, typename Index, int LANES, int CAP, bool SLOTTED, bool NARROW>
__device__ __forceinline__ void short_fill_rows(
    const Index* __restrict__ a_indptr, const Index* __restrict__ a_indices,
    const Value* __restrict__ a_data, const Index* __restrict__ b_indptr,
    const Index* __restrict__ b_indices, const Value* __restrict__ b_data,
    const Index* __restrict__ rows, long long n_rows, const Index* __restrict__ c_indptr,
    Index* __restrict__ c_indices, Value* __restrict__ c_data, Index* __restrict__ sizes) {
    constexpr int GROUPS = SHORT_BLOCK / LANES;
    __shared__ Index all_keys[GROUPS][CAP + 1];
    __shared__ Value all_values[GROUPS][CAP];
    const int lane = threadIdx.x % LANES;
    const int group = threadIdx.x / LANES;
    const unsigned mask = group_mask<LANES, false>();
    Index* keys_s = all_keys[group];
    Value* values_s = all_values[group];
    for (long long r = static_cast<long long>(blockIdx.x) * GROUPS + group; r < n_rows;
         r += static_cast<long long>(gridDim.x) * GROUPS) {
        const Index row = rows[r];
        const Index products =
            short_gather<true, LANES, CAP>(a_indptr[row], a_indptr[row + 1], a_indices, a_data,
                                           b_indptr, b_indices, b_data, keys_s, values_s, mask);
        const int n = products < CAP ? static_cast<int>(products) : CAP;
        __syncwarp(mask);
        const long long out = SLOTTED ? r * CAP : static_cast<long long>(c_indptr[row]);
        const int distinct =
            short_write<LANES, CAP, NARROW>(keys_s, values_s, n, c_indices + out, c_data + out,
                                            mask, lane);
        if (SLOTTED && lane == 0) {
            sizes[row] = static_cast<Index>(distinct);
        }
    }
}

template <typename Value, typename Index, int LANES, int CAP, bool SLOTTED, bool NARROW>
__global__ void
    spgemm_short_fill(const Index* __restrict__ a_indptr, const Index* __restrict__ a_indices,
                      const Value* __restrict__ a_data, const Index* __restrict__ b_indptr,
                      const Index* __restrict__ b_indices, const Value* __restrict__ b_data,
                      const Index* __restrict__ rows, long long n_rows,
                      const Index* __restrict__ c_indptr, Index* __restrict__ c_indices,
                      Value* __restrict__ c_data, Index* __restrict__ sizes) {
    short_fill_rows<Value, Index, LANES, CAP, SLOTTED, NARROW>(
        a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, rows, n_rows, c_indptr,
        c_indices, c_data, sizes);
}

// LISTED ON THE DEVICE: the rows of one class `cls` of a listing (spgemm_hash_bin's `rows`,
// whose class counts are `counts`: class cls's rows start after those of classes
// 1 .. cls-1), their range read here rather than by the host, so that short rows first need
// no host wait for the listing (every listed row of at most the largest CAP products).
__device__ __forceinline__ long long listed_first(const unsigned long long* __restrict__ counts,
                                                  int cls) {
    unsigned long long first = 0;
    for (int c = 1; c < cls; ++c) {
        first += counts[c];
    }
    return static_cast<long long>(first);
}

template <typename Index, int LANES, int CAP>
__global__ void spgemm_short_count_listed(
    const Index* __restrict__ a_indptr, const Index* __restrict__ a_indices,
    const Index* __restrict__ b_indptr, const Index* __restrict__ b_indices,
    const Index* __restrict__ rows, const unsigned long long* __restrict__ counts, int cls,
    Index* __restrict__ sizes) {
    short_count_rows<Index, LANES, CAP>(a_indptr, a_indices, b_indptr, b_indices,
                                        rows + listed_first(counts, cls),
                                        static_cast<long long>(counts[cls]), sizes);
}

template <typename Value, typename Index, int LANES, int CAP, bool NARROW>
__global__ void spgemm_short_fill_listed(
    const Index* __restrict__ a_indptr, const Index* __restrict__ a_indices,
    const Value* __restrict__ a_data, const Index* __restrict__ b_indptr,
    const Index* __restrict__ b_indices, const Value* __restrict__ b_data,
    const Index* __restrict__ rows, const unsigned long long* __restrict__ counts, int cls,
    const Index* __restrict__ c_indptr, Index* __restrict__ c_indices,
    Value* __restrict__ c_data) {
    short_fill_rows<Value, Index, LANES, CAP, false, NARROW>(
        a_indptr, a_indices, a_data, b_indptr, b_indices, b_data,
        rows + listed_first(counts, cls), static_cast<long long>(counts[cls]), c_indptr,
        c_indices, c_data, static_cast<Index*>(nullptr));
}

// SHORT FIRST: every row of A (no listing before it): a row of at most CAP products is
// computed into its slot (row * CAP of slot_indices and slot_data) with its entries in
// sizes[row] and over[row] = 0; a row of more (its products summed by the group's lanes
// first, so a long row costs one pass over its entries) is left for the listed kernels,
// with its products in over[row] and sizes[row] (their tables' bound, as
// spgemm_hash_bounds gives it). NARROW: see the file's comment.
template <typename Value, typename Index, int LANES, int CAP, bool NARROW>
__global__ void
    spgemm_short_first(const Index* __restrict__ a_indptr, const Index* __restrict__ a_indices,
                       const Value* __restrict__ a_data, const Index* __restrict__ b_indptr,
                       const Index* __restrict__ b_indices, const Value* __restrict__ b_data,
                       long long n_rows, Index* __restrict__ slot_indices,
                       Value* __restrict__ slot_data, Index* __restrict__ sizes,
                       Index* __restrict__ over) {
    constexpr int GROUPS = SHORT_BLOCK / LANES;
    __shared__ Index all_keys[GROUPS][CAP + 1];
    __shared__ Value all_values[GROUPS][CAP];
    const int lane = threadIdx.x % LANES;
    const int group = threadIdx.x / LANES;
    const unsigned mask = group_mask<LANES, false>();
    Index* keys_s = all_keys[group];
    Value* values_s = all_values[group];
    for (long long r = static_cast<long long>(blockIdx.x) * GROUPS + group; r < n_rows;
         r += static_cast<long long>(gridDim.x) * GROUPS) {
        const Index start = a_indptr[r];
        const Index end = a_indptr[r + 1];
        Index products = 0;
        for (Index j = start + lane; j < end; j += LANES) {
            const Index column = __ldg(a_indices + j);
            products += __ldg(b_indptr + column + 1) - __ldg(b_indptr + column);
        }
#pragma unroll
        for (int offset = LANES / 2; offset > 0; offset >>= 1) {
            products += __shfl_xor_sync(mask, products, offset, LANES);
        }
        if (products > CAP) {  // the same on every lane of the group
            if (lane == 0) {
                over[r] = products;
                sizes[r] = products;  // the bound the listed kernels size its table by
            }
            continue;
        }
        short_gather<true, LANES, CAP>(start, end, a_indices, a_data, b_indptr, b_indices,
                                       b_data, keys_s, values_s, mask);
        __syncwarp(mask);
        const int distinct = short_write<LANES, CAP, NARROW>(
            keys_s, values_s, static_cast<int>(products), slot_indices + r * CAP,
            slot_data + r * CAP, mask, lane);
        if (lane == 0) {
            over[r] = 0;
            sizes[r] = static_cast<Index>(distinct);
        }
    }
}

// Slotted rows moved to their places in C once its row offsets are known, LANES lanes a
// row (a warp; a thread for tiny first's rows of at most CAP = 8 products). LISTED: the rows
// rows[0, n_rows), slot r holding rows[r] (spgemm_short_fill's slots; over unread); else
// every row r < n_rows in slot r, those with over[r] set left to the listed kernels
// (spgemm_short_first's and spgemm_tiny_first's slots; rows unread).
template <typename Value, typename Index, int CAP, int LANES, bool LISTED>
__global__ void spgemm_slot_move(const Index* __restrict__ rows, long long n_rows,
                                 const Index* __restrict__ over,
                                 const Index* __restrict__ slot_indices,
                                 const Value* __restrict__ slot_data,
                                 const Index* __restrict__ c_indptr,
                                 Index* __restrict__ c_indices, Value* __restrict__ c_data) {
    const int lane = threadIdx.x % LANES;
    const long long groups = static_cast<long long>(gridDim.x) * blockDim.x / LANES;
#pragma unroll 1
    for (long long r = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / LANES;
         r < n_rows; r += groups) {
        if (!LISTED && over[r] != 0) {
            continue;
        }
        const Index row = LISTED ? rows[r] : static_cast<Index>(r);
        const Index out = c_indptr[row];
        const int size = static_cast<int>(c_indptr[row + 1] - out);
        if (LANES == 1) {  // a thread a row of at most CAP: unrolled
#pragma unroll
            for (int i = 0; i < CAP; ++i) {
                if (i < size) {
                    c_indices[out + i] = slot_indices[r * CAP + i];
                    c_data[out + i] = slot_data[r * CAP + i];
                }
            }
        } else {
            for (int i = lane; i < size; i += LANES) {
                c_indices[out + i] = slot_indices[r * CAP + i];
                c_data[out + i] = slot_data[r * CAP + i];
            }
        }
    }
}

template <typename Index>
__global__ void spgemm_short_unlist(const Index* __restrict__ rows, long long n_rows,
                                    Index* __restrict__ sizes) {
    const long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < n_rows) {
        sizes[rows[r]] = 0;
    }
}

// ---------------------------------------------------------------- tiny rows
// TINY FIRST (skewed rows, power-law: most rows of a few products, a few of thousands): a
// thread a row, no group and no shared memory. Each row's products come from the running
// count of A's entries' products (`entry_offsets`, nnz(A) + 1 of them: the products of the
// entries before each, spgemm_entry_products then a scan), so that no thread walks a long
// row to learn it is long. A row of at most CAP products is inserted product by product
// into CAP registers kept in column order (a column met again adds its value in place, in
// the order of A's entries and B's: the same bits on every run), written into its slot
// (row * CAP) with its entries in sizes[row] and over[row] = 0; a row of more products is
// left for the listing with its products in over[row] and sizes[row] (as short first's).
// Work O(products x CAP) a row, all in registers.

// The products of each entry of A (the length of the B row it selects) into products[j]
// (a thread per entry, grid-stride).
template <typename Index>
__global__ void spgemm_entry_products(const Index* __restrict__ a_indices, long long nnz,
                                      const Index* __restrict__ b_indptr,
                                      Index* __restrict__ products) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; j < nnz;
         j += stride) {
        const Index column = __ldg(a_indices + j);
        products[j] = __ldg(b_indptr + column + 1) - __ldg(b_indptr + column);
    }
}

// (key, value) into the CAP sorted registers (PAD past the row's columns): added to its
// column's value where the column is there, else placed before the first larger key (the
// others move up one; a row's columns never pass CAP, so only a PAD falls off the end).
template <int CAP, typename Index, typename Value>
__device__ __forceinline__ void tiny_insert(Index (&keys)[CAP], Value (&values)[CAP], Index key,
                                            Value value) {
    bool found = false;
#pragma unroll
    for (int k = 0; k < CAP; ++k) {
        if (keys[k] == key) {
            values[k] = add(values[k], value);
            found = true;
        }
    }
    if (found) {
        return;
    }
#pragma unroll
    for (int k = CAP - 1; k > 0; --k) {  // from the top: keys[k - 1] is still the old one
        if (keys[k - 1] > key) {
            keys[k] = keys[k - 1];
            values[k] = values[k - 1];
        } else if (keys[k] > key) {
            keys[k] = key;
            values[k] = value;
        }
    }
    if (keys[0] > key) {
        keys[0] = key;
        values[0] = value;
    }
}

template <typename Value, typename Index, int CAP>
__global__ void spgemm_tiny_first(
    const Index* __restrict__ a_indptr, const Index* __restrict__ a_indices,
    const Value* __restrict__ a_data, const Index* __restrict__ b_indptr,
    const Index* __restrict__ b_indices, const Value* __restrict__ b_data,
    const long long* __restrict__ entry_offsets, long long n_rows,
    Index* __restrict__ slot_indices, Value* __restrict__ slot_data, Index* __restrict__ sizes,
    Index* __restrict__ over) {
    constexpr Index PAD = PAST_COLUMNS<Index>;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         r < n_rows; r += stride) {
        const Index start = a_indptr[r];
        const Index end = a_indptr[r + 1];
        const long long products = entry_offsets[end] - entry_offsets[start];
        if (products > CAP) {
            over[r] = static_cast<Index>(products);
            sizes[r] = static_cast<Index>(products);  // the bound the listing classes it by
            continue;
        }
        Index keys[CAP];
        Value values[CAP];
#pragma unroll
        for (int k = 0; k < CAP; ++k) {
            keys[k] = PAD;
            values[k] = value_zero<Value>();
        }
        for (Index j = start; j < end; ++j) {
            const Index column = __ldg(a_indices + j);
            const Value a = load_readonly(a_data + j);
            const Index b_end = __ldg(b_indptr + column + 1);
            for (Index p = __ldg(b_indptr + column); p < b_end; ++p) {
                tiny_insert<CAP>(keys, values, __ldg(b_indices + p),
                                 multiply(a, load_readonly(b_data + p)));
            }
        }
        Index* out_indices = slot_indices + r * CAP;
        Value* out_data = slot_data + r * CAP;
        int entries = 0;
#pragma unroll
        for (int k = 0; k < CAP; ++k) {
            if (keys[k] != PAD) {
                out_indices[k] = keys[k];
                out_data[k] = values[k];
                ++entries;
            }
        }
        sizes[r] = static_cast<Index>(entries);
        over[r] = 0;
    }
}
