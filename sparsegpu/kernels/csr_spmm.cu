// csr_spmm.cu: Y = A @ X for a CSR matrix A (n_rows x n_cols) and a dense row-major X
// (n_cols x k), reading A once for all k columns instead of once per column.
//
// Bell & Garland's CSR vector kernel ("Implementing Sparse Matrix-Vector Multiplication on
// Throughput-Oriented Processors", SC'09, figure 22) extended to several right-hand
// sides: a group of THREADS_PER_ROW threads works on one row; within the group,
// COLUMN_LANES lanes cover consecutive columns of X (so each nonzero's X row segment is
// one coalesced load and A's value and column index are one broadcast) and
// THREADS_PER_ROW / COLUMN_LANES lanes split the row's nonzeros; partial sums meet by warp
// shuffles. Columns beyond COLUMN_LANES are done in further passes over the row (from L1/L2).
// Work O(nnz * k); A's bytes are read once per COLUMN_LANES columns.
//
// Value: float, double, complex64, complex128 (common.cuh). Index: int, long long.
#include "common.cuh"

template <typename Value, typename Index, int THREADS_PER_ROW, int COLUMN_LANES>
__global__ void csr_spmm(const Value* __restrict__ data, const Index* __restrict__ indices,
                         const Index* __restrict__ indptr, const Value* __restrict__ X,
                         Value* __restrict__ Y, long long n_rows, int k) {
    static_assert(THREADS_PER_ROW >= 1 && THREADS_PER_ROW <= 32 &&
                      (THREADS_PER_ROW & (THREADS_PER_ROW - 1)) == 0,
                  "THREADS_PER_ROW must be a power of two up to 32");
    static_assert(COLUMN_LANES >= 1 && COLUMN_LANES <= THREADS_PER_ROW &&
                      (COLUMN_LANES & (COLUMN_LANES - 1)) == 0,
                  "COLUMN_LANES must be a power of two up to THREADS_PER_ROW");
    constexpr int NONZERO_LANES = THREADS_PER_ROW / COLUMN_LANES;
    const long long thread = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
    const long long row = thread / THREADS_PER_ROW;
    if (row >= n_rows) {
        return;  // the whole group leaves together: shuffles below stay within live groups
    }
    const int lane = threadIdx.x % THREADS_PER_ROW;
    const int column_lane = lane % COLUMN_LANES;
    const int nonzero_lane = lane / COLUMN_LANES;
    const int warp_lane = threadIdx.x % 32;
    const unsigned group_mask =
        THREADS_PER_ROW == 32 ? 0xffffffffu
                              : (((1u << THREADS_PER_ROW) - 1u) << (warp_lane - lane));
    const Index start = indptr[row];
    const Index end = indptr[row + 1];
    for (int first_column = 0; first_column < k; first_column += COLUMN_LANES) {
        const int column = first_column + column_lane;
        Value sum = value_zero<Value>();
        if (column < k) {
            for (Index j = start + nonzero_lane; j < end; j += NONZERO_LANES) {
                sum = multiply_add(sum, data[j],
                                   X[static_cast<long long>(indices[j]) * k + column]);
            }
        }
#pragma unroll
        for (int offset = THREADS_PER_ROW / 2; offset >= COLUMN_LANES; offset /= 2) {
            sum = add(sum, shuffle_xor(sum, offset, group_mask, THREADS_PER_ROW));
        }
        if (nonzero_lane == 0 && column < k) {
            Y[row * k + column] = sum;
        }
    }
}
