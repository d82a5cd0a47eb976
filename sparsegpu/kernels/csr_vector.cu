// CSR vector SpMV: y = A @ x for a CSR matrix A, one group of ThreadsPerRow threads per row.
//
// Bell & Garland, "Implementing Sparse Matrix-Vector Multiplication on Throughput-Oriented
// Processors" (SC'09), figure 22 (the CSR vector kernel), with CUSP's sub-warp groups
// (ThreadsPerRow = 1..32), and the three x-load paths and two reductions of the K20 tuning
// article in seeds/003: the vector, texture, readonly and shuffle backends are the template
// arguments <LOAD_PLAIN, REDUCE_SHARED>, <LOAD_TEXTURE, REDUCE_SHARED>,
// <LOAD_READONLY, REDUCE_SHARED> and <LOAD_READONLY, REDUCE_SHUFFLE>.
//
// Each group strides over the rows (grid-stride, 64-bit row ids, so any n fits any grid);
// a warp steps through its rows together so that __syncwarp / __shfl_xor_sync always see the
// whole warp, and loads the extent (indptr) of its next row while it works on this one. Inside a row, each thread keeps UNROLL independent (index, value, x) loads in
// flight, predicated on the row end, so short rows need a single trip. y is written once per
// row, by the group's first lane. Work: O(nnz + n_rows); traffic: values + indices + indptr
// once, x once per nonzero (mostly cached), y once.
#include "common.cuh"

// Offsets into indices/data: 32-bit arithmetic for int32 matrices (fewer registers, so more
// loads stay in flight), unsigned so that j + UNROLL * ThreadsPerRow cannot overflow it
// (nnz < 2^31 there); 64-bit matrices keep signed 64-bit offsets.
template <typename Index>
struct OffsetOf;
template <>
struct OffsetOf<int> {
  using type = unsigned int;
};
template <>
struct OffsetOf<long long> {
  using type = long long;
};

constexpr int REDUCE_SHARED = 0;   // partial sums reduced in shared memory (figure 22)
constexpr int REDUCE_SHUFFLE = 1;  // __shfl_xor_sync butterfly, no shared memory

template <typename Value, typename Index, int ThreadsPerRow, int LoadPath, int Reduction>
__global__ void __launch_bounds__(1024)
    csr_vector(const Index* __restrict__ indptr, const Index* __restrict__ indices,
               const Value* __restrict__ data, const Value* x, cudaTextureObject_t x_texture,
               Value* __restrict__ y, long long n_rows) {
  static_assert(ThreadsPerRow >= 1 && ThreadsPerRow <= 32 &&
                    (ThreadsPerRow & (ThreadsPerRow - 1)) == 0,
                "ThreadsPerRow must be a power of two in 1..32");
  constexpr int ROWS_PER_WARP = 32 / ThreadsPerRow;
  // loads in flight per thread: enough to cover latency, few enough to keep registers low
  constexpr int UNROLL = 4;

  // dynamic shared memory: one partial sum per thread (REDUCE_SHARED only)
  extern __shared__ unsigned char shared_bytes[];
  Value* partial = reinterpret_cast<Value*>(shared_bytes);

  const int lane = threadIdx.x & (ThreadsPerRow - 1);
  const int group_in_warp = (threadIdx.x & 31) / ThreadsPerRow;
  const long long warp_id = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;

  using Offset = typename OffsetOf<Index>::type;
  const long long row_stride = n_warps * ROWS_PER_WARP;
  long long row = warp_id * ROWS_PER_WARP + group_in_warp;
  Offset start = 0, end = 0;
  if (row < n_rows) {
    start = indptr[row];
    end = indptr[row + 1];
  }
  for (long long first_row = warp_id * ROWS_PER_WARP; first_row < n_rows;
       first_row += row_stride, row += row_stride) {
    // the next row's extent is loaded now, so its latency hides behind this row's loads
    const long long next_row = row + row_stride;
    Offset next_start = 0, next_end = 0;
    if (next_row < n_rows) {
      next_start = indptr[next_row];
      next_end = indptr[next_row + 1];
    }
    Value sum = value_zero<Value>();
    for (Offset j = start + lane; j < end; j += UNROLL * ThreadsPerRow) {
      Index column[UNROLL];
      Value value[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = j + u * ThreadsPerRow;
        column[u] = k < end ? indices[k] : Index(0);
        value[u] = k < end ? data[k] : value_zero<Value>();
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        if (j + u * ThreadsPerRow < end) {
          sum = multiply_add(sum, value[u], load_x<LoadPath>(x, x_texture, column[u]));
        }
      }
    }
    if constexpr (ThreadsPerRow > 1) {
      if constexpr (Reduction == REDUCE_SHUFFLE) {
#pragma unroll
        for (int offset = ThreadsPerRow / 2; offset > 0; offset /= 2) {
          sum = add(sum, shuffle_xor(sum, offset));
        }
      } else {
        partial[threadIdx.x] = sum;
        __syncwarp();
#pragma unroll
        for (int offset = ThreadsPerRow / 2; offset > 0; offset /= 2) {
          if (lane < offset) {
            partial[threadIdx.x] = add(partial[threadIdx.x], partial[threadIdx.x + offset]);
          }
          __syncwarp();
        }
        sum = partial[threadIdx.x];
        // every lane has read its slot before the next row overwrites the slots
        __syncwarp();
      }
    }
    if (lane == 0 && row < n_rows) {
      y[row] = sum;
    }
    start = next_start;
    end = next_end;
  }
}
