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
// and the write of y) is for_each_row in row_groups.cuh, shared with delta16.cu. Inside a row, each thread keeps UNROLL independent (index, value, x) loads in
// flight, predicated on the row end, so short rows need a single trip. y is written once per
// row, by the group's first lane. Work: O(nnz + n_rows); traffic: values + indices + indptr
// once, x once per nonzero (mostly cached), y once.
#include "row_groups.cuh"

template <typename Value, typename Index, int ThreadsPerRow, int LoadPath, int Reduction>
__global__ void __launch_bounds__(1024)
    csr_vector(const Index* __restrict__ indptr, const Index* __restrict__ indices,
               const Value* __restrict__ data, const Value* x, cudaTextureObject_t x_texture,
               Value* __restrict__ y, long long n_rows) {
  // loads in flight per thread: enough to cover latency, few enough to keep registers low
  constexpr int UNROLL = SPARSEGPU_UNROLL;
  using Offset = typename OffsetOf<Index>::type;
  for_each_row<ThreadsPerRow, Reduction>(indptr, n_rows, y, [&](long long, Offset start,
                                                                 Offset end, int lane) {
    Value sum = value_zero<Value>();
#if SPARSEGPU_VECTOR_LOADS
    // Each lane takes quads of 4 consecutive entries, aligned to 4 entries, with 16-byte
    // loads; entries of a quad outside [start, end) belong to the neighbouring rows and are
    // skipped. A quad read at the array's end stays inside the 16-byte block holding its
    // first entry (the arrays start 16-byte aligned: checked on the host), so it can never
    // leave the allocation.
    for (Offset q = (start & ~Offset(3)) + 4 * lane; q < end;
         q += 4 * UNROLL * ThreadsPerRow) {
      Index column[UNROLL][4];
      Value value[UNROLL][4];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = q + 4 * u * ThreadsPerRow;
        if (k < end) {
          load_quad<SPARSEGPU_STREAM_MATRIX>(indices + k, column[u]);
          load_quad<SPARSEGPU_STREAM_MATRIX>(data + k, value[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = q + 4 * u * ThreadsPerRow;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (k + e >= start && k + e < end) {
            sum = multiply_add(sum, value[u][e], load_x<LoadPath>(x, x_texture, column[u][e]));
          }
        }
      }
    }
#else
    for (Offset j = start + lane; j < end; j += UNROLL * ThreadsPerRow) {
      Index column[UNROLL];
      Value value[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = j + u * ThreadsPerRow;
        column[u] = k < end ? load_matrix(indices + k) : Index(0);
        value[u] = k < end ? load_matrix(data + k) : value_zero<Value>();
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        if (j + u * ThreadsPerRow < end) {
          sum = multiply_add(sum, value[u], load_x<LoadPath>(x, x_texture, column[u]));
        }
      }
    }
#endif
    return sum;
  });
}
