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
// Each group strides over the rows (grid-stride, 64-bit row ids, so any n fits any grid);
// a warp steps through its rows together so that __syncwarp / __shfl_xor_sync always see the
// whole warp, and loads the extent (indptr) of its next row while it works on this one.
// Inside a row, each thread keeps UNROLL independent (index, value, x) loads in
// flight, predicated on the row end, so short rows need a single trip. y is written once per
// row, by the group's first lane. Work: O(nnz + n_rows); traffic: values + indices + indptr
// once, x once per nonzero (mostly cached), y once.
#include "common.cuh"

// Two launch knobs are compile-time macros rather than template arguments, so that they
// multiply compiled variants only when a policy asks for them (CsrVectorPolicy.unroll and
// .stream_matrix add -D options to the NVRTC compile): SPARSEGPU_UNROLL independent
// (index, value, x) loads per thread per trip, and SPARSEGPU_STREAM_MATRIX = 1 to read the
// values and indices with evict-first loads (load_streaming) so that x stays cached.
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

// Four consecutive entries from a 16-byte-aligned address as 16-byte loads (SPARSEGPU_VECTOR_LOADS):
// one int4 of int32 indices or floats, two of int64 or doubles, up to four of complex128.
template <typename T>
__device__ __forceinline__ void load_quad(const T* p, T (&out)[4]) {
  static_assert((4 * sizeof(T)) % 16 == 0, "a quad is whole 16-byte chunks");
  constexpr int CHUNKS = 4 * sizeof(T) / 16;
  const int4* src = reinterpret_cast<const int4*>(p);
  int4 chunk[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
#if SPARSEGPU_STREAM_MATRIX
    chunk[c] = __ldcs(src + c);
#else
    chunk[c] = src[c];
#endif
  }
  memcpy(out, chunk, sizeof(chunk));
}

template <typename T>
__device__ __forceinline__ T load_matrix(const T* p) {
#if SPARSEGPU_STREAM_MATRIX
  return load_streaming(p);
#else
  return *p;
#endif
}

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
  constexpr int UNROLL = SPARSEGPU_UNROLL;

  // dynamic shared memory: one partial sum per thread (REDUCE_SHARED only)
  extern __shared__ unsigned char shared_bytes[];
  Value* partial = reinterpret_cast<Value*>(shared_bytes);

  const int lane = threadIdx.x & (ThreadsPerRow - 1);
  const int group_in_warp = (threadIdx.x & 31) / ThreadsPerRow;

  using Offset = typename OffsetOf<Index>::type;
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
          load_quad(indices + k, column[u]);
          load_quad(data + k, value[u]);
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
