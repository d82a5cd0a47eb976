// Block SpMV: y = A @ x for a matrix stored in R x C dense blocks (BSR: block row pointers,
// one block column per block, the blocks' values row-major, R * C per block), R and C in
// 1..8 (the ``block`` backend; the layout is scipy's bsr_matrix, or one built on the device
// from a CSR mirror whose nonzeros fill aligned b x b blocks).
//
// A group of G lanes (a power of two, a template argument) per block row, as the CSR vector
// kernel gives a group to each row (Bell & Garland, SC'09, figure 22). The block row's
// values are one contiguous run, read as a vector in tiles of P whole blocks: each lane
// owns SLOTS fixed positions of the tile (lane, lane + G, ...), so a warp's loads of values
// are coalesced whatever R x C is, and each position's block in the tile, row and column in
// its block are worked out once per thread, not per value; tile after tile, a lane adds
// value x x[block column * C + column] to that position's sum. SLOTS is chosen per block
// shape so that the P * R * C values of a tile fill the G x SLOTS positions well (3 x 3:
// 2 slots, 7 blocks, 63 of 64 positions with G = 32); G x SLOTS must hold one block. At the end of the block row each
// lane adds its positions' sums into its R row sums, the R sums are reduced across the
// group with warp shuffles and lane r writes y's row r of the block row. Rows and columns
// past n_rows / n_cols (the padding of a layout built from CSR) are never read or written.
// Work: O(stored blocks x R x C); traffic: values once, one index per block, block row
// pointers, x once per block column (mostly cached), y once.
#include "common.cuh"

#ifndef SPARSEGPU_UNROLL
#define SPARSEGPU_UNROLL 4
#endif
static_assert(SPARSEGPU_UNROLL >= 1 && SPARSEGPU_UNROLL <= 16, "SPARSEGPU_UNROLL: 1..16");

// Positions each lane owns in a tile of whole blocks: from ceil(RC / 32) (a warp holds one
// block) to 4, the count that leaves the fewest of a full warp's positions idle (the
// smallest on a tie). The same rule as sparsegpu.backends.block.slots_per_lane, which also
// gives the fewest lanes a block row may have: group * SLOTS >= RC.
__host__ __device__ constexpr int block_slots(int rc) {
  int best = (rc + 31) / 32;
  int best_idle = 32 * best - (32 * best / rc) * rc;
  for (int slots = best + 1; slots <= 4; ++slots) {
    const int idle = 32 * slots - (32 * slots / rc) * rc;
    // a smaller share of idle positions: idle / slots < best_idle / best
    if (idle * best < best_idle * slots) {
      best = slots;
      best_idle = idle;
    }
  }
  return best;
}

// A register cap per thread (BlockPolicy.max_registers) in place of the launch bound of 512
// threads (which leaves the compiler up to 128): fewer registers, more warps in flight.
#ifdef SPARSEGPU_MAX_REGISTERS
#define SPARSEGPU_BLOCK_BOUNDS __maxnreg__(SPARSEGPU_MAX_REGISTERS)
#else
#define SPARSEGPU_BLOCK_BOUNDS __launch_bounds__(512, 1)
#endif

// The block rows a group of Group lanes takes, and where each starts and ends in the
// blocks: the warp's 32 / Group groups take consecutive block rows, and all the grid's warps
// step over the block rows together, the whole warp to the same step (the shuffles at a
// block row's end need every lane). prefetch() loads the next step's extent at the start of
// a step, so that its latency hides behind this one's work; next() moves to it.
template <int Group, typename Offset, typename Index>
struct BlockRowWalk {
  static constexpr int groups_per_warp = 32 / Group;
  const Index* indptr;
  long long n_block_rows;
  long long first;      // the warp's first block row of this step
  long long block_row;  // this group's
  long long stride;     // block rows from one step to the next
  Offset start = 0, end = 0, next_start = 0, next_end = 0;

  __device__ BlockRowWalk(const Index* __restrict__ block_pointers, long long block_rows)
      : indptr(block_pointers), n_block_rows(block_rows) {
    const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
    first = warp * groups_per_warp;
    block_row = first + (threadIdx.x & 31) / Group;
    stride = n_warps * groups_per_warp;
    extent(block_row, start, end);
  }
  __device__ void extent(long long row, Offset& row_start, Offset& row_end) const {
    row_start = 0;
    row_end = 0;
    if (row < n_block_rows) {
      row_start = static_cast<Offset>(indptr[row]);
      row_end = static_cast<Offset>(indptr[row + 1]);
    }
  }
  __device__ bool more() const { return first < n_block_rows; }
  __device__ void prefetch() { extent(block_row + stride, next_start, next_end); }
  __device__ void next() {
    first += stride;
    block_row += stride;
    start = next_start;
    end = next_end;
  }
};

// The end of a block row: each lane's R row sums added across its group of Group lanes with
// warp shuffles (every lane of the warp takes part), then lane r % Group writes y's row r
// of the block row (rows past n_rows, the padding of the last block row, are not written).
template <typename Value, int R, int Group>
__device__ __forceinline__ void reduce_and_write(Value (&rows)[R], int lane, long long block_row,
                                                 long long n_block_rows, long long n_rows,
                                                 Value* __restrict__ y) {
  for (int offset = Group / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      rows[r] = add(rows[r], shuffle_xor(rows[r], offset, FULL_WARP, Group));
    }
  }
  if (block_row < n_block_rows) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const long long row = block_row * R + r;
      if (lane == r % Group && row < n_rows) {
        y[row] = rows[r];
      }
    }
  }
}

// Group: lanes per block row, a compile-time constant so that a tile's offsets are
// immediates (with it at run time the compiler kept an address per slot and tile, and the
// registers halved the warps in flight).
template <typename Value, typename Index, int R, int C, int Group>
__global__ void SPARSEGPU_BLOCK_BOUNDS
    block_spmv(const Index* __restrict__ indptr, const Index* __restrict__ indices,
               const Value* __restrict__ data, const Value* x, Value* __restrict__ y,
               long long n_block_rows, long long n_rows, long long n_cols) {
  static_assert(R >= 1 && R <= 8 && C >= 1 && C <= 8, "R and C must lie in 1..8");
  constexpr int RC = R * C;
  constexpr int SLOTS = block_slots(RC);
  static_assert(Group >= 1 && Group <= 32 && (Group & (Group - 1)) == 0,
                "Group must be a power of two in 1..32");
  static_assert(Group * SLOTS >= RC, "a tile must hold one block");
  // tiles in flight per lane per trip: about UNROLL loads of values each
  constexpr int TILES = SPARSEGPU_UNROLL / SLOTS > 1 ? SPARSEGPU_UNROLL / SLOTS : 1;
  // entry offsets: 32-bit for int32 block indices (nblocks * R * C < 2^32 is checked on the
  // host), 64-bit otherwise
  using Offset = typename OffsetOf<Index>::type;
  constexpr int group = Group;
  constexpr int per_tile = Group * SLOTS / RC;  // whole blocks in a tile
  constexpr int tile_values = per_tile * RC;
  const int lane = threadIdx.x & (Group - 1);
  // each slot's position lane + s * group in the tile: its block (-1: an idle slot) and its
  // column in that block
  int slot_block[SLOTS], slot_column[SLOTS];
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    const int position = lane + s * group;
    slot_block[s] = position < tile_values ? position / RC : -1;
    slot_column[s] = position % C;  // RC is a multiple of C
  }
  BlockRowWalk<Group, Offset, Index> walk(indptr, n_block_rows);
  for (; walk.more(); walk.next()) {
    walk.prefetch();
    const Offset start = walk.start, end = walk.end;
    Value sums[SLOTS];
    set_zero(sums);
    for (Offset tile = start; tile < end; tile += TILES * per_tile) {
      // the tile's values from its first one, at this lane's positions, and its columns
      const Value* values = data + tile * RC + lane;
      const Index* columns = indices + tile;
      const Offset blocks_left = end - tile;
      Value value[TILES][SLOTS], x_value[TILES][SLOTS];
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
          const int block = t * per_tile + slot_block[s];
          value[t][s] = value_zero<Value>();
          x_value[t][s] = value_zero<Value>();
          if (slot_block[s] >= 0 && static_cast<Offset>(block) < blocks_left) {
            // block column * C + column < 2^31 for int32 indices (checked on the host)
            const Index column = __ldg(columns + block) * C + slot_column[s];
            value[t][s] = load_streaming(values + (t * tile_values + s * group));
            if (column < n_cols) {
              x_value[t][s] = load_readonly(x + column);
            }
          }
        }
      }
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
          sums[s] = multiply_add(sums[s], value[t][s], x_value[t][s]);
        }
      }
    }
    // each slot's sum into its row's (a select per row and slot keeps them in registers)
    Value rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      rows[r] = value_zero<Value>();
#pragma unroll
      for (int s = 0; s < SLOTS; ++s) {
        const bool mine = slot_block[s] >= 0 && (lane + s * group) % RC / C == r;
        rows[r] = add(rows[r], mine ? sums[s] : value_zero<Value>());
      }
    }
    reduce_and_write<Value, R, Group>(rows, lane, walk.block_row, n_block_rows, n_rows, y);
  }
}

// Bytes of block values and x entries a lane of the whole-block kernel keeps in flight.
#ifndef SPARSEGPU_WHOLE_BYTES
#define SPARSEGPU_WHOLE_BYTES 256
#endif

// The R * C values of one block (load_chunks: 16-byte chunks where the block is whole
// 16-byte chunks, 8-byte ones where it is whole 8-byte ones, else value by value; the blocks
// start at multiples of their size, so each chunk is aligned to its own size, and the host
// checks that the first block is aligned to 16 bytes, or to the block's size), evict-first
// (__ldcs). SPARSEGPU_BLOCK_CACHED (BlockPolicy.cache_blocks): through L1 (__ldg) instead: a
// block of several loads per lane has each of its L1 lines read by several successive
// loads of the warp (3 x 3 in float64: nine 8-byte loads at a 72-byte lane stride), which
// evict-first may make fetch again from L2.
#ifdef SPARSEGPU_BLOCK_CACHED
constexpr int BLOCK_HINT = HINT_READONLY;
#else
constexpr int BLOCK_HINT = HINT_STREAMING;
#endif

template <typename Value, int RC>
__device__ __forceinline__ void load_block(const Value* p, Value (&out)[RC]) {
  load_chunks<BLOCK_HINT>(p, out);
}

// Whole blocks per lane, for small blocks (2 x 2, 1 x 4, 4 x 1, 3 x 3): each of the G lanes of
// a block row takes every G-th block and reads it in as few loads as its size allows
// (load_block: one 16-byte load for a 2 x 2 block in float32, two in float64; nine 8-byte
// loads for 3 x 3 in float64), its block column and its C entries of x, and keeps R row
// sums; the group then adds them with warp shuffles and lane r writes row r. A 2 x 2 block
// costs a lane 4 loads (the tile kernel above: 3 a value, 12), and a short block row few
// shuffles. UNROLL blocks in flight per lane per trip, at most 256 bytes of their values and
// x entries. Work and traffic as the tile kernel's.
template <typename Value, typename Index, int R, int C, int Group>
__global__ void SPARSEGPU_BLOCK_BOUNDS
    block_spmv_whole(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                     const Value* __restrict__ data, const Value* x, Value* __restrict__ y,
                     long long n_block_rows, long long n_rows, long long n_cols) {
  static_assert(R * C == 4 || R * C == 9, "whole blocks: 2 x 2, 1 x 4, 4 x 1 or 3 x 3");
  static_assert(Group >= 1 && Group <= 32 && (Group & (Group - 1)) == 0,
                "Group must be a power of two in 1..32");
  constexpr int RC = R * C;
  // blocks in flight per lane: SPARSEGPU_UNROLL, at most SPARSEGPU_WHOLE_BYTES (256) bytes of
  // values and x entries (3 x 3 in float64: 2; 2 x 2 in complex128: 2)
  constexpr int PER_BLOCK = (RC + C) * static_cast<int>(sizeof(Value));
  constexpr int MAX_IN_FLIGHT =
      SPARSEGPU_WHOLE_BYTES / PER_BLOCK > 1 ? SPARSEGPU_WHOLE_BYTES / PER_BLOCK : 1;
  constexpr int UNROLL = SPARSEGPU_UNROLL < MAX_IN_FLIGHT ? SPARSEGPU_UNROLL : MAX_IN_FLIGHT;
  using Offset = typename OffsetOf<Index>::type;
  const int lane = threadIdx.x & (Group - 1);
  BlockRowWalk<Group, Offset, Index> walk(indptr, n_block_rows);
  for (; walk.more(); walk.next()) {
    walk.prefetch();
    const Offset start = walk.start, end = walk.end;
    Value rows[R];
    set_zero(rows);
    for (Offset trip = start + lane; trip < end; trip += UNROLL * Group) {
      Value block[UNROLL][RC], x_value[UNROLL][C];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const Offset k = trip + u * Group;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          x_value[u][c] = value_zero<Value>();
        }
        if (k < end) {
          // block column * C + c < 2^31 for int32 indices (checked on the host)
          const Index column = __ldg(indices + k) * C;
          load_block<Value, RC>(data + k * RC, block[u]);
#pragma unroll
          for (int c = 0; c < C; ++c) {
            if (column + c < n_cols) {
              x_value[u][c] = load_readonly(x + column + c);
            }
          }
        } else {
#pragma unroll
          for (int v = 0; v < RC; ++v) {
            block[u][v] = value_zero<Value>();
          }
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int c = 0; c < C; ++c) {
            rows[r] = multiply_add(rows[r], block[u][r * C + c], x_value[u][c]);
          }
        }
      }
    }
    reduce_and_write<Value, R, Group>(rows, lane, walk.block_row, n_block_rows, n_rows, y);
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
