// Block SpMV: y = A @ x for a matrix stored in R x C dense blocks (BSR: block row pointers,
// one block column per block, the blocks' values row-major, R * C per block), R and C in
// 1..8 (the ``block`` backend; the layout is scipy's bsr_matrix, or one built on the device
// from a CSR mirror whose nonzeros fill aligned b x b blocks).
//
// A group of ThreadsPerBlockRow lanes (a sub-warp, 1..32, a power of two) per block row, as
// the CSR vector kernel gives a group to each row (Bell & Garland, SC'09, figure 22). The
// block row's values are one contiguous run of (blocks x R x C) entries, read as a vector:
// lane l takes entries l, l + G, l + 2G, ... (G = ThreadsPerBlockRow), so a warp's loads of
// values are coalesced whatever R x C is, where a lane per block would read R x C-strided
// addresses. Each entry's block, row and column in its block come from its position (a
// division by the compile-time R x C), its x from the block's one column index, and its
// product goes to the lane's partial sum of that row of the block (R per lane). The R sums
// are reduced across the group with warp shuffles; lane r writes y's row r of the block
// row. Rows and columns past n_rows / n_cols (the padding of a layout built from CSR) are
// never read or written. Work: O(stored blocks x R x C); traffic: values once, one index
// per block, block row pointers, x once per block column (mostly cached), y once.
#include "common.cuh"

#ifndef SPARSEGPU_UNROLL
#define SPARSEGPU_UNROLL 4
#endif
static_assert(SPARSEGPU_UNROLL >= 1 && SPARSEGPU_UNROLL <= 16, "SPARSEGPU_UNROLL: 1..16");

template <typename Index>
struct BlockOffsetOf;
template <>
struct BlockOffsetOf<int> {
  using type = unsigned int;
};
template <>
struct BlockOffsetOf<long long> {
  using type = long long;
};

template <typename Value, typename Index, int R, int C>
__global__ void __launch_bounds__(1024, 1)
    block_spmv(const Index* __restrict__ indptr, const Index* __restrict__ indices,
               const Value* __restrict__ data, const Value* x, Value* __restrict__ y,
               long long n_block_rows, long long n_rows, long long n_cols,
               int threads_per_block_row) {
  static_assert(R >= 1 && R <= 8 && C >= 1 && C <= 8, "R and C must lie in 1..8");
  constexpr int RC = R * C;
  // loads in flight per lane per trip; fewer where the R sums already take many registers
  // (complex128 with 8 rows: 32 of the 64 that 1024 threads a block leave each thread)
  constexpr int UNROLL = sizeof(Value) * R > 64 ? 1 : sizeof(Value) * R > 32 ? 2 : SPARSEGPU_UNROLL;
  // entry offsets: 32-bit for int32 block indices (nblocks * R * C < 2^32 is checked on the
  // host), 64-bit otherwise
  using Offset = typename BlockOffsetOf<Index>::type;
  const int group = threads_per_block_row;
  const int lane = threadIdx.x & (group - 1);
  const int group_in_warp = (threadIdx.x & 31) / group;
  const int groups_per_warp = 32 / group;
  const long long warp_id = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  const long long stride = n_warps * groups_per_warp;
  // the whole warp steps through its block rows together (the shuffles need every lane)
  for (long long first = warp_id * groups_per_warp; first < n_block_rows; first += stride) {
    const long long block_row = first + group_in_warp;
    Offset start = 0, end = 0;
    if (block_row < n_block_rows) {
      start = static_cast<Offset>(indptr[block_row]);
      end = static_cast<Offset>(indptr[block_row + 1]);
    }
    const Value* values = data + start * RC;
    const Index* columns = indices + start;
    const unsigned int n_entries = static_cast<unsigned int>(end - start) * RC;
    Value sums[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      sums[r] = value_zero<Value>();
    }
    for (unsigned int e0 = lane; e0 < n_entries; e0 += UNROLL * group) {
      Value value[UNROLL], x_value[UNROLL];
      int row_of[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const unsigned int e = e0 + u * group;
        value[u] = value_zero<Value>();
        x_value[u] = value_zero<Value>();
        row_of[u] = -1;
        if (e < n_entries) {
          const unsigned int block = e / RC;
          const unsigned int within = e - block * RC;
          const int r = within / C;
          const long long column =
              static_cast<long long>(__ldg(columns + block)) * C + (within - r * C);
          value[u] = load_streaming(values + e);
          if (column < n_cols) {
            x_value[u] = load_readonly(x + column);
          }
          row_of[u] = r;
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Value product = multiply(value[u], x_value[u]);
        // every row's sum takes the product or zero: a select, not a branch, so that the
        // sums stay in registers (a branch on row_of becomes an indexed store to local memory)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          sums[r] = add(sums[r], row_of[u] == r ? product : value_zero<Value>());
        }
      }
    }
    for (int offset = group / 2; offset > 0; offset /= 2) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        sums[r] = add(sums[r], shuffle_xor(sums[r], offset, FULL_WARP, group));
      }
    }
    if (block_row < n_block_rows) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const long long row = block_row * R + r;
        if (lane == r % group && row < n_rows) {
          y[row] = sums[r];
        }
      }
    }
  }
}

// The stored b x b blocks of each block row of a CSR matrix whose rows hold sorted column
// indices (duplicates allowed): counts[block_row] += the distinct column // b among the
// block row's b rows. A warp per row, grid-stride; an entry counts when it is the first of
// its block column in its row and no earlier row of its block row holds that block column
// (a binary search in each). Work: O(nnz x b x log(row length)).
template <typename Index>
__global__ void block_count(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                            long long n_rows, int b, unsigned long long* __restrict__ counts) {
  const int lane = threadIdx.x & 31;
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  for (long long row = warp; row < n_rows; row += n_warps) {
    const long long first_row = row - row % b;
    const long long start = indptr[row], end = indptr[row + 1];
    unsigned long long found = 0;
    for (long long k0 = start; k0 < end; k0 += 32) {
      const long long k = k0 + lane;
      bool first = false;
      if (k < end) {
        const long long block_column = static_cast<long long>(indices[k]) / b;
        first = k == start || static_cast<long long>(indices[k - 1]) / b != block_column;
        for (long long other = first_row; first && other < row; ++other) {
          // the first entry of row `other` at or after column block_column * b
          long long lo = indptr[other], hi = indptr[other + 1];
          const long long target = block_column * b;
          while (lo < hi) {
            const long long mid = (lo + hi) / 2;
            if (static_cast<long long>(indices[mid]) < target) {
              lo = mid + 1;
            } else {
              hi = mid;
            }
          }
          if (lo < indptr[other + 1] && static_cast<long long>(indices[lo]) / b == block_column) {
            first = false;
          }
        }
      }
      found += __popc(__ballot_sync(FULL_WARP, first));
    }
    if (lane == 0 && found) {
      atomicAdd(counts + row / b, found);
    }
  }
}
