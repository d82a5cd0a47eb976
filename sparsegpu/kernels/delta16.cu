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

// body(c, start, end, lane) for every chunk c, a warp per chunk, grid-stride; [start, end)
// are the chunk's nonzeros, and the lanes of the warp share the call.
template <typename Index, typename Body>
__device__ __forceinline__ void for_each_chunk(const Index* __restrict__ indptr,
                                               long long n_rows, Body body) {
  const long long n_chunks = (n_rows + DELTA16_CHUNK_ROWS - 1) / DELTA16_CHUNK_ROWS;
  const int lane = threadIdx.x & 31;
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  for (long long c = warp; c < n_chunks; c += n_warps) {
    const long long first = c * DELTA16_CHUNK_ROWS;
    body(c, static_cast<long long>(indptr[first]),
         static_cast<long long>(indptr[min(first + DELTA16_CHUNK_ROWS, n_rows)]), lane);
  }
}

// The smallest and largest stored column of each chunk (lo = 0, hi = -1 for a chunk without
// nonzeros).
template <typename Index>
__global__ void delta16_chunk_span(const Index* __restrict__ indptr,
                                   const Index* __restrict__ indices, long long n_rows,
                                   Index* __restrict__ lo, Index* __restrict__ hi) {
  for_each_chunk(indptr, n_rows, [&](long long c, long long start, long long end, int lane) {
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
  });
}

// Each column written as a 16-bit offset (compressed chunk) or copied to the wide array
// (full-width chunk), as chunks[] says.
template <typename Index>
__global__ void delta16_encode(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                               const Index* __restrict__ chunks, long long n_rows,
                               unsigned short* __restrict__ offsets, Index* __restrict__ wide) {
  for_each_chunk(indptr, n_rows, [&](long long c, long long start, long long end, int lane) {
    const long long entry = chunks[c];
    for (long long k = start + lane; k < end; k += 32) {
      if (entry >= 0) {
        offsets[k] = static_cast<unsigned short>(indices[k] - entry);
      } else {
        wide[k + entry + 1] = indices[k];  // k - shift
      }
    }
  });
}

// The partial sum of one lane over its share of one row: columns decoded from 16-bit
// offsets (Narrow) or read from the wide array. Quad loads (SPARSEGPU_VECTOR_LOADS) only in
// narrow chunks: a wide chunk's columns start at any position of the wide array.
template <bool Narrow, int ThreadsPerRow, typename MatrixValue, typename Value, typename Index,
          typename Offset>
__device__ __forceinline__ typename Accumulate<Value>::type delta16_row(
    Offset start, Offset end, int lane, Index entry, const unsigned short* __restrict__ offsets,
    const Index* __restrict__ wide, const MatrixValue* __restrict__ data, const Value* x) {
  if constexpr (Narrow && SPARSEGPU_VECTOR_LOADS != 0) {
    // a quad of offsets stays packed in registers until x is read
    const auto offset_at = [&](Offset k) { return load_matrix(offsets + k); };
    const auto quad = [&](Offset k, unsigned short(&out)[4]) {
      load_quad<SPARSEGPU_STREAM_MATRIX>(offsets + k, out);
    };
    const auto x_at = [&](unsigned short offset) {
      return load_readonly(x + (entry + static_cast<Index>(offset)));
    };
    return row_partial<ThreadsPerRow, true, unsigned short>(start, end, lane, data, offset_at,
                                                            quad, x_at);
  } else {
    // a wide chunk's columns start shift = -(entry + 1) places back in the wide array
    const Offset shift = Narrow ? Offset(0) : static_cast<Offset>(-(entry + 1));
    const auto column = [&](Offset k) {
      if constexpr (Narrow) {
        return entry + static_cast<Index>(load_matrix(offsets + k));
      } else {
        return load_matrix(wide + (k - shift));
      }
    };
    const auto no_quad = [](Offset, Index(&)[4]) {};
    const auto x_at = [&](Index c) { return load_readonly(x + c); };
    return row_partial<ThreadsPerRow, false, Index>(start, end, lane, data, column, no_quad,
                                                    x_at);
  }
}

// Value: x, y and the sums; MatrixValue: the stored values (narrower in mixed precision).
// Mixed: the matrix has chunks kept full-width (false: every chunk compressed, and the
// full-width path is not compiled in).
template <typename Value, typename MatrixValue, typename Index, int ThreadsPerRow, bool Mixed>
__device__ __forceinline__ void delta16_rows(const Index* __restrict__ indptr,
                                             const unsigned short* __restrict__ offsets,
                                             const Index* __restrict__ wide,
                                             const Index* __restrict__ chunks,
                                             const MatrixValue* __restrict__ data, const Value* x,
                                             Value* __restrict__ y, long long n_rows) {
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

template <typename Value, typename Index, int ThreadsPerRow, bool Mixed>
__global__ void __launch_bounds__(1024)
    delta16_spmv(const Index* __restrict__ indptr, const unsigned short* __restrict__ offsets,
                 const Index* __restrict__ wide, const Index* __restrict__ chunks,
                 const Value* __restrict__ data, const Value* x, Value* __restrict__ y,
                 long long n_rows) {
  delta16_rows<Value, Value, Index, ThreadsPerRow, Mixed>(indptr, offsets, wide, chunks, data, x,
                                                          y, n_rows);
}

// Mixed precision (A.mixed_precision): MatrixValue values, Value vectors and sums
template <typename Value, typename MatrixValue, typename Index, int ThreadsPerRow, bool Mixed>
__global__ void __launch_bounds__(1024)
    delta16_spmv_mixed_precision(const Index* __restrict__ indptr,
                       const unsigned short* __restrict__ offsets, const Index* __restrict__ wide,
                       const Index* __restrict__ chunks, const MatrixValue* __restrict__ data,
                       const Value* x, Value* __restrict__ y, long long n_rows) {
  delta16_rows<Value, MatrixValue, Index, ThreadsPerRow, Mixed>(indptr, offsets, wide, chunks,
                                                                data, x, y, n_rows);
}
