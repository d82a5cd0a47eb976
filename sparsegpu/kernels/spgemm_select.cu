// spgemm_select.cu: C = L @ R where every row of R holds at most one entry (an aggregation's
// tentative prolongator, a selection or a permutation matrix). Each entry (j, a) of a row of
// L then makes at most one product, (the column of R's row j, a * its value), so a row of C
// is its row of L with the columns mapped, sorted and equal ones summed: no hash table, no
// bound, no second look at R. A thread per row of L (rows of at most SELECT_MAX entries:
// longer ones run another algorithm) insertion-sorts its mapped entries (stable: equal
// columns keep L's order) and merges them.
//
// spgemm_select_count  each row's entries of C (sizes[row]);
// spgemm_select_fill   the row at c_indptr[row]: sums of equal columns in L's order, so the
//                      result is the same on every run (no atomics).
//
// Work O(nnz(L) * SELECT_MAX) at worst, O(nnz(L)) reads. The result is canonical CSR;
// entries whose products cancel stay stored (as cuSPARSE and the hash rows keep them).
// Value: float, double, complex64, complex128 (common.cuh). Index: int, long long.
#include "common.cuh"

constexpr int SELECT_MAX = 32;

// The row's mapped entries into keys (and values), sorted by column, stably; how many.
template <bool VALUES, typename Value, typename Index>
__device__ __forceinline__ int select_sorted(Index start, Index end,
                                             const Index* __restrict__ l_indices,
                                             const Value* __restrict__ l_data,
                                             const Index* __restrict__ r_indptr,
                                             const Index* __restrict__ r_indices,
                                             const Value* __restrict__ r_data,
                                             Index (&keys)[SELECT_MAX],
                                             Value (&values)[SELECT_MAX]) {
    int n = 0;
    for (Index j = start; j < end && n < SELECT_MAX; ++j) {
        const Index column = __ldg(l_indices + j);
        const Index at = __ldg(r_indptr + column);
        if (__ldg(r_indptr + column + 1) == at) {
            continue;  // an empty row of R: no product
        }
        const Index key = __ldg(r_indices + at);
        Value value{};
        if constexpr (VALUES) {
            value = multiply(load_readonly(l_data + j), load_readonly(r_data + at));
        }
        int k = n++;
        while (k > 0 && keys[k - 1] > key) {
            keys[k] = keys[k - 1];
            if constexpr (VALUES) {
                values[k] = values[k - 1];
            }
            --k;
        }
        keys[k] = key;
        if constexpr (VALUES) {
            values[k] = value;
        }
    }
    return n;
}

template <typename Index>
__global__ void spgemm_select_count(const Index* __restrict__ l_indptr,
                                    const Index* __restrict__ l_indices,
                                    const Index* __restrict__ r_indptr,
                                    const Index* __restrict__ r_indices, long long n_rows,
                                    Index* __restrict__ sizes) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         row < n_rows; row += stride) {
        Index keys[SELECT_MAX];
        float unused[SELECT_MAX];
        const int n = select_sorted<false, float>(
            l_indptr[row], l_indptr[row + 1], l_indices, static_cast<const float*>(nullptr),
            r_indptr, r_indices, static_cast<const float*>(nullptr), keys, unused);
        int distinct = n > 0 ? 1 : 0;
        for (int k = 1; k < n; ++k) {
            distinct += keys[k] != keys[k - 1];
        }
        sizes[row] = static_cast<Index>(distinct);
    }
}

template <typename Value, typename Index>
__global__ void spgemm_select_fill(const Index* __restrict__ l_indptr,
                                   const Index* __restrict__ l_indices,
                                   const Value* __restrict__ l_data,
                                   const Index* __restrict__ r_indptr,
                                   const Index* __restrict__ r_indices,
                                   const Value* __restrict__ r_data, long long n_rows,
                                   const Index* __restrict__ c_indptr,
                                   Index* __restrict__ c_indices, Value* __restrict__ c_data) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         row < n_rows; row += stride) {
        Index keys[SELECT_MAX];
        Value values[SELECT_MAX];
        const int n = select_sorted<true>(l_indptr[row], l_indptr[row + 1], l_indices, l_data,
                                          r_indptr, r_indices, r_data, keys, values);
        Index out = c_indptr[row];
        for (int k = 0; k < n;) {
            Value sum = values[k];
            int next = k + 1;
            while (next < n && keys[next] == keys[k]) {
                sum = add(sum, values[next]);
                ++next;
            }
            c_indices[out] = keys[k];
            c_data[out] = sum;
            ++out;
            k = next;
        }
    }
}
