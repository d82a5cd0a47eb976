// The outer loop and knobs shared by the row-group kernels (csr_vector.cu, delta16.cu):
// Bell & Garland's CSR vector kernel (SC'09, figure 22) with CUSP's sub-warp groups.
//
// Each group of ThreadsPerRow threads strides over the rows (grid-stride, 64-bit row ids, so
// any n fits any grid); a warp steps through its rows together so that __syncwarp /
// __shfl_xor_sync always see the whole warp, and loads the extent (indptr) of its next row
// while it works on this one. y is written once per row, by the group's first lane.
#pragma once
#include "common.cuh"
#include "half.cuh"

// Launch knobs that are compile-time macros rather than template arguments, so that they
// multiply compiled variants only when a policy asks for them (UnrolledRowPolicy.unroll,
// .stream_matrix and .vector_loads add -D options to the NVRTC compile): SPARSEGPU_UNROLL
// independent (index, value, x) loads per thread per trip, SPARSEGPU_STREAM_MATRIX = 1 to
// read the values and indices with evict-first loads (load_streaming) so that x stays
// cached, and SPARSEGPU_VECTOR_LOADS = 1 for quads of 4 entries per load.
#ifndef SPARSEGPU_UNROLL
#define SPARSEGPU_UNROLL 4
#endif
#ifndef SPARSEGPU_STREAM_MATRIX
#define SPARSEGPU_STREAM_MATRIX 0
#endif
#ifndef SPARSEGPU_VECTOR_LOADS
#define SPARSEGPU_VECTOR_LOADS 0
#endif
static_assert(SPARSEGPU_UNROLL >= 1 && SPARSEGPU_UNROLL <= 16, "SPARSEGPU_UNROLL: 1..16");

template <typename T>
__device__ __forceinline__ T load_matrix(const T* p) {
#if SPARSEGPU_STREAM_MATRIX
  return load_streaming(p);
#else
  return *p;
#endif
}

constexpr int REDUCE_SHARED = 0;   // partial sums reduced in shared memory (figure 22)
constexpr int REDUCE_SHUFFLE = 1;  // __shfl_xor_sync butterfly, no shared memory

// y[row] = the sum over the group of row_sum(first_row, start, end, lane), for every row:
// row_sum returns one lane's partial sum (an Accumulate<Value>::type) of the row whose
// nonzeros are [start, end); the warp calls it together for its rows first_row .. first_row
// + 32 / ThreadsPerRow - 1 (a row past n_rows has start == end). REDUCE_SHARED needs
// blockDim.x accumulators of dynamic shared memory.
template <int ThreadsPerRow, int Reduction, typename Value, typename Index, typename RowSum>
__device__ __forceinline__ void for_each_row(const Index* __restrict__ indptr, long long n_rows,
                                             Value* __restrict__ y, RowSum row_sum) {
  static_assert(ThreadsPerRow >= 1 && ThreadsPerRow <= 32 &&
                    (ThreadsPerRow & (ThreadsPerRow - 1)) == 0,
                "ThreadsPerRow must be a power of two in 1..32");
  constexpr int ROWS_PER_WARP = 32 / ThreadsPerRow;
  using Offset = typename OffsetOf<Index>::type;
  using Acc = typename Accumulate<Value>::type;

  // dynamic shared memory: one partial sum per thread (REDUCE_SHARED only)
  extern __shared__ unsigned char shared_bytes[];
  Acc* partial = reinterpret_cast<Acc*>(shared_bytes);

  const int lane = threadIdx.x & (ThreadsPerRow - 1);
  const int group_in_warp = (threadIdx.x & 31) / ThreadsPerRow;
  // grid-stride: at each step the warps of the whole grid cover consecutive rows
  const long long warp_id = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  const long long row_stride = n_warps * ROWS_PER_WARP;
  const long long first = warp_id * ROWS_PER_WARP;
  long long row = first + group_in_warp;
  Offset start = 0, end = 0;
  if (row < n_rows) {
    start = indptr[row];
    end = indptr[row + 1];
  }
  for (long long first_row = first; first_row < n_rows;
       first_row += row_stride, row += row_stride) {
    // the next row's extent is loaded now, so its latency hides behind this row's loads
    const long long next_row = row + row_stride;
    Offset next_start = 0, next_end = 0;
    if (next_row < n_rows) {
      next_start = indptr[next_row];
      next_end = indptr[next_row + 1];
    }
    Acc sum = row_sum(first_row, start, end, lane);
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
      y[row] = narrow<Value>(sum);
    }
    start = next_start;
    end = next_end;
  }
}

// One lane's partial sum (in the accumulator of x's type: Accumulate<X>::type, where the
// values may be narrower, as float values with double x in mixed precision) of the row
// whose nonzeros are [start, end): data[k] * x_at(column)
// over the lane's share of the entries, in a fixed order. column(k) reads entry k's column as
// stored (a Stored: an index, or delta16's 16-bit offset, which x_at decodes when it reads
// x, so that a quad of offsets stays packed in registers until then); with Quads,
// quad(k, out) reads the stored columns of the 4 entries from k (k a multiple of 4) and
// each lane takes whole aligned quads with 8- or 16-byte loads (SPARSEGPU_VECTOR_LOADS),
// skipping entries of the neighbouring rows; a quad read at the array's end stays inside the
// aligned block holding its first entry (the arrays start aligned: checked on the host), so
// it can never leave the allocation. Otherwise each lane keeps UNROLL independent (column,
// value, x) loads in flight per trip, predicated on the row end, so short rows need a
// single trip.
template <int ThreadsPerRow, bool Quads, typename Stored, typename Value, typename Offset,
          typename Column, typename Quad, typename XAt>
__device__ __forceinline__ auto row_partial(Offset start, Offset end, int lane,
                                            const Value* __restrict__ data, Column column,
                                            Quad quad, XAt x_at) {
  constexpr int UNROLL = SPARSEGPU_UNROLL;
  // sums run in the accumulator of x's type (wider than the values' in mixed precision)
  using Acc = typename Accumulate<decltype(x_at(Stored(0)))>::type;
  Acc sum = value_zero<Acc>();
  if constexpr (Quads) {
    for (Offset q = (start & ~Offset(3)) + 4 * lane; q < end;
         q += 4 * UNROLL * ThreadsPerRow) {
      Stored columns[UNROLL][4];
      Value value[UNROLL][4];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = q + 4 * u * ThreadsPerRow;
        if (k < end) {
          quad(k, columns[u]);
          load_quad<SPARSEGPU_STREAM_MATRIX>(data + k, value[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = q + 4 * u * ThreadsPerRow;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (k + e >= start && k + e < end) {
            sum = multiply_add(sum, value[u][e], x_at(columns[u][e]));
          }
        }
      }
    }
  } else {
    for (Offset j = start + lane; j < end; j += UNROLL * ThreadsPerRow) {
      Stored columns[UNROLL];
      Value value[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = j + u * ThreadsPerRow;
        columns[u] = k < end ? column(k) : Stored(0);
        value[u] = k < end ? load_matrix(data + k) : value_zero<Value>();
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        if (j + u * ThreadsPerRow < end) {
          sum = multiply_add(sum, value[u], x_at(columns[u]));
        }
      }
    }
  }
  return sum;
}
