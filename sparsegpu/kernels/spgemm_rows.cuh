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

// visit(position in B, a, place) for every product of the row's entries [a_start, a_end):
// each LANES lanes (of each warp of a whole-block group) take LANES entries at a time and
// share their products evenly (a scan of the B rows' lengths, a binary search over it by
// shuffles). place: the product's place among the row's products, in the order of A's
// entries and B's (a group within a warp only: a whole block's warps each count their own).
// Returns the products (this warp's, in a whole-block group).
template <int LANES, bool WHOLE_BLOCK, typename Index, typename Value, typename Visit>
__device__ __forceinline__ Index for_each_product(Index a_start, Index a_end,
                                                 const Index* __restrict__ a_indices,
                                                 const Value* __restrict__ a_data,
                                                 const Index* __restrict__ b_indptr,
                                                 unsigned mask, Visit visit) {
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
