// CSR vector SpMV: y = A @ x for a CSR matrix A, one group of ThreadsPerRow threads per row.
//
// Bell & Garland, "Implementing Sparse Matrix-Vector Multiplication on Throughput-Oriented
// Processors" (SC'09), figure 22 (the CSR vector kernel), with CUSP's sub-warp groups
// (ThreadsPerRow = 1..32), and the three x-load paths and two reductions of G-DEP's K20
// tuning of that kernel ("Kepler explained, part 2: the new features of the Kepler
// generation", G-DEP high-speed computing notes no. 25): the vector, texture, readonly and
// shuffle backends are the template arguments <LOAD_PLAIN, REDUCE_SHARED>,
// <LOAD_TEXTURE, REDUCE_SHARED>, <LOAD_READONLY, REDUCE_SHARED> and
// <LOAD_READONLY, REDUCE_SHUFFLE>.
//
// The outer loop (grid-stride row groups, the next row's extent loaded early, the reduction
// and the write of y) is for_each_row in row_groups.cuh, and the loads of a row are
// row_partial there, both shared with delta16.cu. Inside a row, each thread keeps UNROLL
// independent (index, value, x) loads in flight, predicated on the row end, so short rows
// need a single trip. y is written once per row, by the group's first lane. Work: O(nnz + n_rows); traffic: values + indices + indptr
// once, x once per nonzero (mostly cached), y once.
#include "row_groups.cuh"

// Value: x, y and the sums; MatrixValue: the stored values (the same, or narrower in mixed
// precision: float values with double vectors)
template <typename Value, typename MatrixValue, typename Index, int ThreadsPerRow, int LoadPath,
          int Reduction>
__device__ __forceinline__ void csr_vector_rows(const Index* __restrict__ indptr,
                                                const Index* __restrict__ indices,
                                                const MatrixValue* __restrict__ data,
                                                const Value* x, cudaTextureObject_t x_texture,
                                                Value* __restrict__ y, long long n_rows) {
  using Offset = typename OffsetOf<Index>::type;
  const auto column = [&](Offset k) { return load_matrix(indices + k); };
  const auto quad = [&](Offset k, Index(&out)[4]) {
    load_quad<SPARSEGPU_STREAM_MATRIX>(indices + k, out);
  };
  const auto x_at = [&](Index c) { return load_x<LoadPath>(x, x_texture, c); };
  for_each_row<ThreadsPerRow, Reduction>(
      indptr, n_rows, y, [&](long long, Offset start, Offset end, int lane) {
        return row_partial<ThreadsPerRow, SPARSEGPU_VECTOR_LOADS != 0, Index>(
            start, end, lane, data, column, quad, x_at);
      });
}

template <typename Value, typename Index, int ThreadsPerRow, int LoadPath, int Reduction>
__global__ void __launch_bounds__(1024)
    csr_vector(const Index* __restrict__ indptr, const Index* __restrict__ indices,
               const Value* __restrict__ data, const Value* x, cudaTextureObject_t x_texture,
               Value* __restrict__ y, long long n_rows) {
  csr_vector_rows<Value, Value, Index, ThreadsPerRow, LoadPath, Reduction>(
      indptr, indices, data, x, x_texture, y, n_rows);
}

// Mixed precision (A.mixed_precision): MatrixValue values, Value vectors and sums
template <typename Value, typename MatrixValue, typename Index, int ThreadsPerRow, int LoadPath,
          int Reduction>
__global__ void __launch_bounds__(1024)
    csr_vector_mixed_precision(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                     const MatrixValue* __restrict__ data, const Value* x,
                     cudaTextureObject_t x_texture, Value* __restrict__ y, long long n_rows) {
  csr_vector_rows<Value, MatrixValue, Index, ThreadsPerRow, LoadPath, Reduction>(
      indptr, indices, data, x, x_texture, y, n_rows);
}
