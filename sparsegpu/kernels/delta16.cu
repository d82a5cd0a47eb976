// Compressed column indices: CSR SpMV reading 16-bit column offsets instead of 32- or 64-bit
// column indices (the ``delta16`` backend).
//
// The rows are cut into chunks of CHUNK_ROWS consecutive rows. A chunk whose stored columns
// all lie in [base, base + 65536) is "narrow": its columns are kept as unsigned 16-bit
// offsets from base (offsets[k] = indices[k] - base, for its positions k). Any other chunk is
// "wide": its columns stay full-width in a separate array. One number per chunk says which:
//   chunks[c] >= 0   narrow, base column chunks[c]
//   chunks[c] <  0   wide, columns at wide[k - shift] with shift = -(chunks[c] + 1)
// (shift = the narrow nonzeros stored before the chunk, so the wide array is dense). The
// values, the row pointers and the user's arrays are untouched: per nonzero a product reads
// 2 bytes of column instead of 4 (int32) or 8 (int64), plus a 4- or 8-byte chunk entry per
// 32 rows. Compression on stencils and meshes in a banded order is the same idea as the
// "delta" index encodings of CSR-DU (Kourtis, Goumas and Koziris, "Optimizing sparse
// matrix-vector multiplication using index and value compression", CF'08), with a fixed
// chunk base so that every lane decodes its column independently.
//
// The product kernel is the CSR vector kernel (csr_vector.cu: Bell & Garland's figure 22,
// read-only x loads, warp-shuffle reduction, the outer loop of row_groups.cuh) with the
// column load replaced: a group of ThreadsPerRow threads per row, rows grid-strided by warps.
// A warp's rows lie in one chunk (32 / ThreadsPerRow consecutive rows, aligned), so the
// narrow/wide branch is uniform across the warp. Sums run in the same order as csr_vector with the same ThreadsPerRow and unroll.
#include "row_groups.cuh"

constexpr int DELTA16_CHUNK_ROWS = 32;

// The extent [start, end) of chunk c's nonzeros.
template <typename Index>
__device__ __forceinline__ void chunk_extent(const Index* __restrict__ indptr, long long c,
                                             long long n_rows, long long& start, long long& end) {
  const long long first = c * DELTA16_CHUNK_ROWS;
  start = indptr[first];
  end = indptr[min(first + DELTA16_CHUNK_ROWS, n_rows)];
}

// One warp per chunk, grid-stride: the smallest and largest stored column of each chunk
// (lo = 0, hi = -1 for a chunk without nonzeros).
template <typename Index>
__global__ void delta16_chunk_span(const Index* __restrict__ indptr,
                                   const Index* __restrict__ indices, long long n_rows,
                                   Index* __restrict__ lo, Index* __restrict__ hi) {
  const long long n_chunks = (n_rows + DELTA16_CHUNK_ROWS - 1) / DELTA16_CHUNK_ROWS;
  const int lane = threadIdx.x & 31;
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  for (long long c = warp; c < n_chunks; c += n_warps) {
    long long start, end;
    chunk_extent(indptr, c, n_rows, start, end);
    long long smallest = 0x7fffffffffffffffLL, largest = -1;
    for (long long k = start + lane; k < end; k += 32) {
      const long long column = indices[k];
      smallest = min(smallest, column);
      largest = max(largest, column);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      smallest = min(smallest, __shfl_xor_sync(FULL_WARP, smallest, offset));
      largest = max(largest, __shfl_xor_sync(FULL_WARP, largest, offset));
    }
    if (lane == 0) {
      lo[c] = static_cast<Index>(largest < 0 ? 0 : smallest);
      hi[c] = static_cast<Index>(largest);
    }
  }
}

// One warp per chunk, grid-stride: each column written as a 16-bit offset (narrow chunk) or
// copied to the wide array (wide chunk), as chunks[] says.
template <typename Index>
__global__ void delta16_encode(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                               const Index* __restrict__ chunks, long long n_rows,
                               unsigned short* __restrict__ offsets, Index* __restrict__ wide) {
  const long long n_chunks = (n_rows + DELTA16_CHUNK_ROWS - 1) / DELTA16_CHUNK_ROWS;
  const int lane = threadIdx.x & 31;
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  for (long long c = warp; c < n_chunks; c += n_warps) {
    long long start, end;
    chunk_extent(indptr, c, n_rows, start, end);
    const long long entry = chunks[c];
    for (long long k = start + lane; k < end; k += 32) {
      if (entry >= 0) {
        offsets[k] = static_cast<unsigned short>(indices[k] - entry);
      } else {
        wide[k + entry + 1] = indices[k];  // k - shift
      }
    }
  }
}

// The partial sum of one lane over its share of one row: columns decoded from 16-bit
// offsets (Narrow) or read from the wide array.
template <bool Narrow, int ThreadsPerRow, typename Value, typename Index, typename Offset>
__device__ __forceinline__ Value delta16_row(Offset start, Offset end, int lane, Index entry,
                                            const unsigned short* __restrict__ offsets,
                                            const Index* __restrict__ wide,
                                            const Value* __restrict__ data, const Value* x) {
  constexpr int UNROLL = SPARSEGPU_UNROLL;
  // a wide chunk's columns start shift = -(entry + 1) places back in the wide array
  const Offset shift = Narrow ? Offset(0) : static_cast<Offset>(-(entry + 1));
  Value sum = value_zero<Value>();
#if SPARSEGPU_VECTOR_LOADS
  if constexpr (Narrow) {
    // Quads of 4 entries aligned to 4 (8-byte offset loads, 16-byte value loads), entries
    // of a quad outside [start, end) skipped, as csr_vector's quad path. A quad read at the
    // array's end stays inside the aligned block holding its first entry. Wide chunks take
    // the scalar path below (their columns start at any position of the wide array).
    for (Offset q = (start & ~Offset(3)) + 4 * lane; q < end; q += 4 * UNROLL * ThreadsPerRow) {
      unsigned short offset[UNROLL][4];
      Value value[UNROLL][4];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = q + 4 * u * ThreadsPerRow;
        if (k < end) {
          load_quad<SPARSEGPU_STREAM_MATRIX>(offsets + k, offset[u]);
          load_quad<SPARSEGPU_STREAM_MATRIX>(data + k, value[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = q + 4 * u * ThreadsPerRow;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (k + e >= start && k + e < end) {
            sum = multiply_add(sum, value[u][e],
                               load_readonly(x + (entry + static_cast<Index>(offset[u][e]))));
          }
        }
      }
    }
    return sum;
  }
#endif
  for (Offset j = start + lane; j < end; j += UNROLL * ThreadsPerRow) {
    Index column[UNROLL];
    Value value[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const Offset k = j + u * ThreadsPerRow;
      if constexpr (Narrow) {
        column[u] = k < end ? entry + static_cast<Index>(load_matrix(offsets + k))
                            : Index(0);
      } else {
        column[u] = k < end ? load_matrix(wide + (k - shift)) : Index(0);
      }
      value[u] = k < end ? load_matrix(data + k) : value_zero<Value>();
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (j + u * ThreadsPerRow < end) {
        sum = multiply_add(sum, value[u], load_readonly(x + column[u]));
      }
    }
  }
  return sum;
}

// Mixed: the matrix has chunks kept full-width (false: every chunk compressed, and the
// full-width path is not compiled in).
template <typename Value, typename Index, int ThreadsPerRow, bool Mixed>
__global__ void __launch_bounds__(1024)
    delta16_spmv(const Index* __restrict__ indptr, const unsigned short* __restrict__ offsets,
                 const Index* __restrict__ wide, const Index* __restrict__ chunks,
                 const Value* __restrict__ data, const Value* x, Value* __restrict__ y,
                 long long n_rows) {
  using Offset = typename OffsetOf<Index>::type;
  for_each_row<ThreadsPerRow, REDUCE_SHUFFLE>(indptr, n_rows, y, [&](long long first_row,
                                                                      Offset start, Offset end,
                                                                      int lane) {
    // the warp's rows share one chunk: the branch below is uniform across the warp
    const Index entry = __ldg(chunks + first_row / DELTA16_CHUNK_ROWS);
    return !Mixed || entry >= 0
               ? delta16_row<true, ThreadsPerRow>(start, end, lane, entry, offsets, wide, data, x)
               : delta16_row<false, ThreadsPerRow>(start, end, lane, entry, offsets, wide, data,
                                                   x);
  });
}
