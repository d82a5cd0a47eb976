// spgemm_rows.cuh: the products of a row of C = A @ B, shared by the hash rows
// (spgemm_hash.cu) and the short rows (spgemm_short.cu).
#pragma once
#include "common.cuh"

// The lanes of this thread's group within its warp.
template <int LANES, bool WHOLE_BLOCK>
__device__ __forceinline__ unsigned group_mask() {
    static_assert(LANES == 8 || LANES == 16 || LANES == 32, "a group is 8, 16 or 32 lanes");
    static_assert(!WHOLE_BLOCK || LANES == 32, "a whole-block group is whole warps");
    if constexpr (LANES == 32) {
        return FULL_WARP;
    } else {
        return ((1u << LANES) - 1u) << ((threadIdx.x & 31) & ~(LANES - 1));
    }
}

// The largest Index: past every column, so a sort's pads sort last.
template <typename Index>
constexpr Index PAST_COLUMNS = static_cast<Index>(~0ull >> (65 - 8 * sizeof(Index)));

// Sorts the group's LANES * K keys (element k * LANES + lane in keys[k] of that lane), with
// their values when VALUES, ascending: a bitonic network, in registers (strides of LANES
// or more) and by shuffles (the others). Equal keys keep their own values.
template <bool VALUES, int LANES, int K, typename Index, typename Value>
__device__ __forceinline__ void short_sort(Index (&keys)[K], Value (&values)[K], unsigned mask,
                                           int lane) {
#pragma unroll
    for (int size = 2; size <= LANES * K; size <<= 1) {
#pragma unroll
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            if (stride >= LANES) {
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    const int partner = k ^ (stride / LANES);
                    if (partner > k) {
                        const bool ascending = ((k * LANES + lane) & size) == 0;
                        if ((keys[partner] < keys[k]) == ascending && keys[partner] != keys[k]) {
                            const Index key = keys[k];
                            keys[k] = keys[partner];
                            keys[partner] = key;
                            if constexpr (VALUES) {
                                const Value value = values[k];
                                values[k] = values[partner];
                                values[partner] = value;
                            }
                        }
                    }
                }
            } else {
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    const Index other = __shfl_xor_sync(mask, keys[k], stride, LANES);
                    Value other_value = values[k];
                    if constexpr (VALUES) {
                        other_value = shuffle_xor(values[k], stride, mask, LANES);
                    }
                    const bool lower = (lane & stride) == 0;
                    const bool ascending = ((k * LANES + lane) & size) == 0;
                    const bool take = lower == ascending ? other < keys[k] : keys[k] < other;
                    if (take) {
                        keys[k] = other;
                        values[k] = other_value;
                    }
                }
            }
        }
    }
}

// A whole-block group's entries whose B row alone holds at least a block of products (a
// hub row of power-law or R-MAT columns) are queued, up to LONG_QUEUE a row, and their
// products shared over the whole block once the warps are done: one warp alone walked the
// 21,905 products of a row's single entry while the block's other 31 waited (1.2 ms of a
// power-law matrix's numeric pass).
constexpr int LONG_QUEUE = 16;

template <typename Index, typename Value>
struct LongEntries {
    int* count;
    Index* start;
    Index* length;
    Value* a;
};

// visit(position in B, a, place) for every product of the row's entries [a_start, a_end):
// each LANES lanes (of each warp of a whole-block group) take LANES entries at a time and
// share their products evenly (a scan of the B rows' lengths, a binary search over it by
// shuffles); a whole block then shares the products of its long entries (LongEntries).
// place: the product's place among the row's products, in the order of A's entries and
// B's (a group within a warp only: a whole block's warps each count their own, and the
// long entries' products are placed after them). Returns the products (this warp's, in a
// whole-block group, with none of the long entries').
template <int LANES, bool WHOLE_BLOCK, typename Index, typename Value, typename Visit>
__device__ __forceinline__ Index warp_products(Index a_start, Index a_end,
                                              const Index* __restrict__ a_indices,
                                              const Value* __restrict__ a_data,
                                              const Index* __restrict__ b_indptr,
                                              unsigned mask, Visit& visit,
                                              LongEntries<Index, Value> queue) {
    const int lane = static_cast<int>(threadIdx.x) & (LANES - 1);
    const int warp = WHOLE_BLOCK ? static_cast<int>(threadIdx.x >> 5) : 0;
    const int warps = WHOLE_BLOCK ? static_cast<int>(blockDim.x >> 5) : 1;
    // entries a warp takes at a time: LANES, or, in a block whose warps would not all get
    // LANES, the entries shared evenly over the warps (a row of 81 entries keeps 27 warps
    // busy, not 3)
    Index chunk = LANES;
    if (WHOLE_BLOCK) {
        const Index even = (a_end - a_start + warps - 1) / warps;
        chunk = even < 1 ? 1 : (even < LANES ? even : LANES);
    }
    Index done = 0;  // the products of the entries before this chunk (one warp's)
    for (Index base = a_start + static_cast<Index>(warp) * chunk; base < a_end;
         base += static_cast<Index>(warps) * chunk) {
        const Index j = base + lane;
        Index start = 0;
        Index length = 0;
        Value a = value_zero<Value>();
        if (lane < chunk && j < a_end) {
            const Index column = __ldg(a_indices + j);
            start = __ldg(b_indptr + column);
            length = __ldg(b_indptr + column + 1) - start;
            if (a_data != nullptr) {
                a = load_readonly(a_data + j);
            }
            if constexpr (WHOLE_BLOCK) {
                if (length >= static_cast<Index>(blockDim.x)) {
                    const int slot = atomicAdd(queue.count, 1);
                    if (slot < LONG_QUEUE) {  // else this warp takes it, as any other
                        queue.start[slot] = start;
                        queue.length[slot] = length;
                        queue.a[slot] = a;
                        length = 0;
                    }
                }
            }
        }
        Index inclusive = length;
#pragma unroll
        for (int offset = 1; offset < LANES; offset <<= 1) {
            const Index up = __shfl_up_sync(mask, inclusive, offset, LANES);
            if (lane >= offset) {
                inclusive += up;
            }
        }
        const Index total = __shfl_sync(mask, inclusive, LANES - 1, LANES);
        const Index exclusive = inclusive - length;
        for (Index first = 0; first < total; first += LANES) {
            const Index p = first + lane;
            // the entry of product p: the number of lanes whose products end at or before p
            int owner = 0;
#pragma unroll
            for (int step = LANES / 2; step > 0; step >>= 1) {
                if (__shfl_sync(mask, inclusive, owner + step - 1, LANES) <= p) {
                    owner += step;
                }
            }
            const Index owner_start = __shfl_sync(mask, start, owner, LANES);
            const Index owner_exclusive = __shfl_sync(mask, exclusive, owner, LANES);
            const Value owner_a = shuffle_from(a, owner, mask, LANES);
            if (p < total) {
                visit(owner_start + (p - owner_exclusive), owner_a, done + p);
            }
        }
        done += total;
    }
    return done;
}

template <int LANES, bool WHOLE_BLOCK, typename Index, typename Value, typename Visit>
__device__ __forceinline__ Index for_each_product(Index a_start, Index a_end,
                                                 const Index* __restrict__ a_indices,
                                                 const Value* __restrict__ a_data,
                                                 const Index* __restrict__ b_indptr,
                                                 unsigned mask, Visit visit) {
    if constexpr (!WHOLE_BLOCK) {
        return warp_products<LANES, false>(a_start, a_end, a_indices, a_data, b_indptr, mask,
                                           visit, LongEntries<Index, Value>{});
    } else {
        __shared__ int count;
        __shared__ Index start[LONG_QUEUE];
        __shared__ Index length[LONG_QUEUE];
        __shared__ __align__(16) unsigned char a_bytes[LONG_QUEUE * sizeof(Value)];
        const LongEntries<Index, Value> queue{&count, start, length,
                                              reinterpret_cast<Value*>(a_bytes)};
        if (threadIdx.x == 0) {
            count = 0;
        }
        __syncthreads();
        const Index done = warp_products<LANES, true>(a_start, a_end, a_indices, a_data,
                                                      b_indptr, mask, visit, queue);
        __syncthreads();
        const int queued = count < LONG_QUEUE ? count : LONG_QUEUE;
        for (int q = 0; q < queued; ++q) {
            const Index first = start[q];
            const Index n = length[q];
            const Value a = queue.a[q];
            for (Index p = static_cast<Index>(threadIdx.x); p < n;
                 p += static_cast<Index>(blockDim.x)) {
                visit(first + p, a, done + p);
            }
        }
        __syncthreads();  // the queue read before the next row's group resets it
        return done;
    }
}
