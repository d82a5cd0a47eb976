// csr_spmm.cu: Y = A @ X for a CSR matrix A (n_rows x n_cols) and a dense X of k columns,
// reading A once for all k columns instead of once per column: the row-split SpMM kernels.
//
// A group of threads works on one row, as in Bell & Garland's CSR vector kernel
// ("Implementing Sparse Matrix-Vector Multiplication on Throughput-Oriented Processors",
// SC'09, figure 22), with k-wide accumulators, after Yang, Buluc & Owens's row-split SpMM
// ("Design Principles for Sparse Matrix Multiplication on the GPU", Euro-Par 2018):
//
// csr_spmm_rows (X and Y row-major, C order): the group's COLUMN_LANES lanes cover
//   consecutive tiles of X's row, TILE values each (16 bytes: four floats, two doubles or
//   complex64, one complex128), loaded as one 16-byte vector where X's rows are aligned;
//   its NONZERO_LANES lanes split the row's nonzeros and meet by warp shuffles. So each
//   nonzero's X row segment is one coalesced load of COLUMN_LANES * 16 bytes and A's value
//   and index one broadcast; columns past COLUMN_LANES * TILE take further passes over the
//   row (its values and indices then come from L1).
// csr_spmm_columns (X and Y column-major, Fortran order): a group of NONZERO_LANES lanes
//   per row and COLUMNS columns a pass in registers; neighbouring rows are neighbouring
//   groups, so a column of X is read and a column of Y written by consecutive threads.
//
// Work O(nnz * k); A's bytes are read from memory once.
// Value: float, double, complex64, complex128 (common.cuh). Index: int, long long.
#include "common.cuh"

// Columns a column-major group keeps in registers per pass.
constexpr int COLUMN_MAJOR_COLUMNS = 4;

// `count` values of a tile from p: one 16-byte read-only load when `whole` (p is 16-byte
// aligned and the tile is full), else one load per value (the rest zero).
template <typename Value, int WIDTH>
__device__ __forceinline__ void load_tile(const Value* p, bool whole, int count,
                                          Value (&out)[WIDTH]) {
    if (whole) {
        const int4 v = __ldg(reinterpret_cast<const int4*>(p));
        memcpy(out, &v, sizeof(v));
    } else {
#pragma unroll
        for (int t = 0; t < WIDTH; ++t) {
            out[t] = t < count ? load_readonly(p + t) : value_zero<Value>();
        }
    }
}

template <typename Value, int WIDTH>
__device__ __forceinline__ void store_tile(Value* p, bool whole, int count,
                                           const Value (&in)[WIDTH]) {
    if (whole) {
        int4 v;
        memcpy(&v, in, sizeof(v));
        *reinterpret_cast<int4*>(p) = v;
    } else {
#pragma unroll
        for (int t = 0; t < WIDTH; ++t) {
            if (t < count) {
                p[t] = in[t];
            }
        }
    }
}

// The mask of the lanes of this thread's group of `group` lanes within its warp.
template <int GROUP>
__device__ __forceinline__ unsigned group_lanes(int lane_in_group) {
    if constexpr (GROUP == 32) {
        return FULL_WARP;
    } else {
        return ((1u << GROUP) - 1u) << ((threadIdx.x % 32) - lane_in_group);
    }
}

// aligned: X and Y start 16-byte aligned and k * sizeof(Value) is a multiple of 16.
template <typename Value, typename Index, int COLUMN_LANES, int NONZERO_LANES>
__global__ void csr_spmm_rows(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                              const Value* __restrict__ data, const Value* __restrict__ X,
                              Value* __restrict__ Y, long long n_rows, int k, int aligned) {
    constexpr int GROUP = COLUMN_LANES * NONZERO_LANES;
    static_assert(GROUP >= 1 && GROUP <= 32 && (GROUP & (GROUP - 1)) == 0,
                  "COLUMN_LANES * NONZERO_LANES must be a power of two up to 32");
    constexpr int WIDTH = tile_width<Value>();
    const long long row = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / GROUP;
    if (row >= n_rows) {
        return;  // the whole group leaves together: shuffles below stay within live groups
    }
    const int lane = threadIdx.x % GROUP;
    const int column_lane = lane % COLUMN_LANES;
    const int nonzero_lane = lane / COLUMN_LANES;
    const unsigned mask = group_lanes<GROUP>(lane);
    const Index start = indptr[row];
    const Index end = indptr[row + 1];
    for (int pass = 0; pass < k; pass += COLUMN_LANES * WIDTH) {
        const int first = pass + column_lane * WIDTH;
        const int count = min(WIDTH, k - first);  // <= 0: a lane past k (it still shuffles)
        const bool whole = aligned != 0 && count == WIDTH;
        Value sum[WIDTH];
#pragma unroll
        for (int t = 0; t < WIDTH; ++t) {
            sum[t] = value_zero<Value>();
        }
        if (count > 0) {
#pragma unroll 4
            for (Index j = start + nonzero_lane; j < end; j += NONZERO_LANES) {
                const Value a = data[j];
                Value x[WIDTH];
                load_tile(X + static_cast<long long>(indices[j]) * k + first, whole, count, x);
#pragma unroll
                for (int t = 0; t < WIDTH; ++t) {
                    sum[t] = multiply_add(sum[t], a, x[t]);
                }
            }
        }
#pragma unroll
        for (int offset = GROUP / 2; offset >= COLUMN_LANES; offset /= 2) {
#pragma unroll
            for (int t = 0; t < WIDTH; ++t) {
                sum[t] = add(sum[t], shuffle_xor(sum[t], offset, mask, GROUP));
            }
        }
        if (nonzero_lane == 0 && count > 0) {
            store_tile(Y + row * k + first, whole, count, sum);
        }
    }
}

template <typename Value, typename Index, int NONZERO_LANES>
__global__ void csr_spmm_columns(const Index* __restrict__ indptr,
                                 const Index* __restrict__ indices,
                                 const Value* __restrict__ data, const Value* __restrict__ X,
                                 Value* __restrict__ Y, long long n_rows, long long n_cols,
                                 int k) {
    static_assert(NONZERO_LANES >= 1 && NONZERO_LANES <= 32 &&
                      (NONZERO_LANES & (NONZERO_LANES - 1)) == 0,
                  "NONZERO_LANES must be a power of two up to 32");
    constexpr int COLUMNS = COLUMN_MAJOR_COLUMNS;
    const long long row =
        (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / NONZERO_LANES;
    if (row >= n_rows) {
        return;
    }
    const int lane = threadIdx.x % NONZERO_LANES;
    const unsigned mask = group_lanes<NONZERO_LANES>(lane);
    const Index start = indptr[row];
    const Index end = indptr[row + 1];
    for (int pass = 0; pass < k; pass += COLUMNS) {
        Value sum[COLUMNS];
#pragma unroll
        for (int t = 0; t < COLUMNS; ++t) {
            sum[t] = value_zero<Value>();
        }
#pragma unroll 2
        for (Index j = start + lane; j < end; j += NONZERO_LANES) {
            const Value a = data[j];
            const Value* x = X + static_cast<long long>(indices[j]) + pass * n_cols;
#pragma unroll
            for (int t = 0; t < COLUMNS; ++t) {
                if (pass + t < k) {
                    sum[t] = multiply_add(sum[t], a, load_readonly(x + t * n_cols));
                }
            }
        }
#pragma unroll
        for (int offset = NONZERO_LANES / 2; offset >= 1; offset /= 2) {
#pragma unroll
            for (int t = 0; t < COLUMNS; ++t) {
                sum[t] = add(sum[t], shuffle_xor(sum[t], offset, mask, NONZERO_LANES));
            }
        }
        if (lane == 0) {
#pragma unroll
            for (int t = 0; t < COLUMNS; ++t) {
                if (pass + t < k) {
                    Y[row + (pass + t) * n_rows] = sum[t];
                }
            }
        }
    }
}
