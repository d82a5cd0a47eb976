// merge_path: merge-path CSR SpMV, y = A x, load-balanced for any row-length distribution.
//
// Follows Merrill & Garland, "Merge-based Parallel Sparse Matrix-Vector Multiplication"
// (SC'16): the "merge path" of the row-end offsets (indptr[1:]) and the nonzero indices
// (0..nnz-1) has n_rows + nnz items; every block consumes one tile of BLOCK * ITEMS
// consecutive items and every thread ITEMS of them, so work per thread is the same
// whether rows are empty, short, or one row holds most nonzeros. Tile start coordinates
// are computed once per plan (host side). Per tile: products data[k] * x[indices[k]] and
// row ends are staged in shared memory with coalesced loads; each thread finds its start
// by a binary search along its diagonal, walks its items, and writes rows that end inside
// its segment. Partial rows are combined by a segmented (reduce-by-key) Hillis-Steele scan
// in shared memory and, across tiles, by adding each row's carries in tile order. Which
// tiles carry a partial sum of which row is known before the launch (a tile's carry row is
// the next tile's start row), so one launch does it all: every tile that carries into a
// row, and the tile in which that row ends (the one that writes y), arrive at that row's
// counter, and the last to arrive adds the run's carries to y, a warp striding over them.
// Counters only elect that block; sums keep a fixed order whatever the scheduling. A tile
// that lies inside one row (no row ends in it: the interior of a row longer than a tile)
// skips the staging, search and scan: its carry is a block reduction of its products. No
// floating-point atomics: same input, same bits. Work O(n_rows + nnz); each value, index
// and row pointer is read once.
#include "common.cuh"

constexpr int WARP_LANES = 32;

// Adds the carries of tiles first .. finisher-1 (one row's run) to that row's y, by one
// warp: lane l sums tiles first + l, first + l + 32, ... in turn, then the lanes' sums are
// combined by a butterfly, and lane 0 adds the total to what the finishing tile wrote.
// Same input, same order, same bits, whichever block runs it. Resets the run's counter for
// the next product.
template <typename V, typename I>
__device__ __forceinline__ void add_run(const V* carry_value, int first, int finisher, I row,
                                        V* y, unsigned int* counters, int lane) {
    V sum = value_zero<V>();
    for (int u = first + lane; u < finisher; u += WARP_LANES) {
        sum = add(sum, load_coherent(carry_value + u));
    }
#pragma unroll
    for (int offset = WARP_LANES / 2; offset > 0; offset >>= 1) {
        sum = add(sum, shuffle_xor(sum, offset));
    }
    if (lane == 0) {
        y[row] = add(sum, load_coherent(y + row));
        counters[finisher] = 0u;
    }
}

// Blocks per SM the compiler is held to where a thread's loaded values fit in 16 bytes
// (float, 4 items): a full SM of 2048 threads at 32 registers, as before the carry runs
// moved into this kernel (without the hint ptxas gave them 38 registers: 6 blocks of 256
// instead of 8). Elsewhere 0, ptxas's own choice: held to 32 registers the float 8-item
// instantiations spill, and a minimum of 1 made ptxas take 72-162 registers.
template <typename V, int BLOCK, int ITEMS>
constexpr int merge_path_min_blocks() {
    return ITEMS * static_cast<int>(sizeof(V)) <= 16 ? 2048 / BLOCK : 0;
}

template <typename V, typename I, int BLOCK, int ITEMS>
__global__ void __launch_bounds__(BLOCK, (merge_path_min_blocks<V, BLOCK, ITEMS>()))
merge_path_spmv(const I* __restrict__ indptr, const I* __restrict__ indices,
              const V* __restrict__ data, const V* __restrict__ x, V* __restrict__ y,
              const I* __restrict__ tile_row, const I* __restrict__ tile_nz,
              V* __restrict__ carry_value, const int* __restrict__ carry_finisher,
              const int* __restrict__ run_first, unsigned int* __restrict__ counters) {
    constexpr int TILE = BLOCK * ITEMS;
    // products first, then local row ends (int, never wider than V): together at most
    // TILE entries, plus the alignment gap between them
    __shared__ __align__(16) unsigned char tile_buffer[TILE * sizeof(V) + 16];
    __shared__ int scan_row[BLOCK];
    __shared__ V scan_value[BLOCK];

    const int tile = blockIdx.x;
    const int tid = threadIdx.x;
    const I r0 = tile_row[tile];
    const I k0 = tile_nz[tile];
    const int num_rows = static_cast<int>(tile_row[tile + 1] - r0);
    const int num_nz = static_cast<int>(tile_nz[tile + 1] - k0);
    const int num_items = num_rows + num_nz;

    if (num_rows == 0) {
        // The tile lies inside one row (a row longer than a tile: an arrow matrix's dense
        // rows, a hub's row): no row ends here, so its carry is the sum of its products. A
        // block reduction does that without the staging, search and segmented scan below,
        // at the rate the nonzeros stream in. Fixed order (each thread's items in turn,
        // then a fixed tree over the block): same input, same bits. (The loads are written
        // out in both branches: hoisted above the branch, or shared through a lambda, they
        // made ptxas spill in some instantiations.)
        I column[ITEMS];
        V value[ITEMS];
#pragma unroll
        for (int s = 0; s < ITEMS; ++s) {
            const int i = tid + s * BLOCK;
            if (i < num_nz) {
                column[s] = load_streaming(indices + k0 + i);
                value[s] = load_streaming(data + k0 + i);
            }
        }
        V sum = value_zero<V>();
#pragma unroll
        for (int s = 0; s < ITEMS; ++s) {
            if (tid + s * BLOCK < num_nz) {
                sum = add(sum, multiply(value[s], x[column[s]]));
            }
        }
        // a tree over the block in shared memory
        scan_value[tid] = sum;
        __syncthreads();
#pragma unroll
        for (int half = BLOCK / 2; half > 0; half >>= 1) {
            if (tid < half) {
                scan_value[tid] = add(scan_value[tid], scan_value[tid + half]);
            }
            __syncthreads();
        }
        if (tid == 0) {
            carry_value[tile] = scan_value[0];  // carried into row r0
        }
    } else {
        V* products = reinterpret_cast<V*>(tile_buffer);
        int* row_end = reinterpret_cast<int*>(
            tile_buffer + ((static_cast<unsigned>(num_nz) * sizeof(V) + 15u) & ~15u));
        // All loads of a thread are issued before any is used, so ITEMS gathers of x are
        // in flight at once (the gathers, not the streaming loads, bound irregular
        // matrices).
        I column[ITEMS];
        V value[ITEMS];
#pragma unroll
        for (int s = 0; s < ITEMS; ++s) {
            const int i = tid + s * BLOCK;
            if (i < num_nz) {
                column[s] = load_streaming(indices + k0 + i);
                value[s] = load_streaming(data + k0 + i);
            }
        }
#pragma unroll
        for (int s = 0; s < ITEMS; ++s) {
            const int i = tid + s * BLOCK;
            if (i < num_nz) {
                products[i] = multiply(value[s], x[column[s]]);
            }
        }
#pragma unroll
        for (int s = 0; s < ITEMS; ++s) {
            const int i = tid + s * BLOCK;
            if (i < num_rows) {
                // local nonzero offset of the row's end
                row_end[i] = static_cast<int>(load_streaming(indptr + r0 + i + 1) - k0);
            }
        }
        __syncthreads();

        // Merge-path search: rows whose end comes before this thread's diagonal.
        const int diagonal = min(tid * ITEMS, num_items);
        int lo = max(diagonal - num_nz, 0);
        int hi = min(diagonal, num_rows);
        while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            if (row_end[mid] + mid + 1 <= diagonal) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        int row = lo;
        int nz = diagonal - lo;
        const int first_row = row;
        V running = value_zero<V>();
        V first_partial = value_zero<V>();
        bool ends_a_row = false;
#pragma unroll
        for (int step = 0; step < ITEMS; ++step) {
            if (diagonal + step < num_items) {
                if (row < num_rows && row_end[row] <= nz) {
                    // the first row this thread ends may have begun in earlier threads:
                    // it is written after the scan adds their partial sums
                    if (ends_a_row) {
                        y[r0 + row] = running;
                    } else {
                        first_partial = running;
                        ends_a_row = true;
                    }
                    running = value_zero<V>();
                    ++row;
                } else {
                    running = add(running, products[nz]);
                    ++nz;
                }
            }
        }

        // Segmented inclusive scan of the threads' carries (row, partial), keyed by row.
        scan_row[tid] = row;
        scan_value[tid] = running;
        __syncthreads();
#pragma unroll
        for (int offset = 1; offset < BLOCK; offset <<= 1) {
            const bool same_row = tid >= offset && scan_row[tid - offset] == row;
            V combined = scan_value[tid];
            if (same_row) {
                combined = add(scan_value[tid - offset], combined);
            }
            __syncthreads();
            scan_value[tid] = combined;
            __syncthreads();
        }
        if (ends_a_row) {
            V total = first_partial;
            if (tid > 0 && scan_row[tid - 1] == first_row) {
                total = add(scan_value[tid - 1], first_partial);
            }
            y[r0 + first_row] = total;
        }
        if (tid == BLOCK - 1) {
            carry_value[tile] = scan_value[tid];  // carried into row r0 + row: tile_row[tile + 1]
        }
    }
    // Arrivals. carry_finisher[tile]: the tile in which the row this tile carries into ends
    // (-1: the carry is past the last row); run_first[tile] >= 0: this tile ends a row
    // that tiles run_first[tile] .. tile-1 carried into. A run's counter expects all of
    // them; whoever arrives last adds the run (the atomics elect, they sum nothing).
    __shared__ int fix[2];
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        const int finisher = carry_finisher[tile];
        const int first = run_first[tile];
        fix[0] = finisher >= 0 && atomicAdd(counters + finisher, 1u) ==
                                      static_cast<unsigned>(finisher - run_first[finisher])
                     ? finisher
                     : -1;
        fix[1] = first >= 0 && atomicAdd(counters + tile, 1u) ==
                                   static_cast<unsigned>(tile - first)
                     ? tile
                     : -1;
    }
    __syncthreads();
    if (tid < WARP_LANES && (fix[0] >= 0 || fix[1] >= 0)) {  // the first warp adds the runs
        __threadfence();
#pragma unroll 1
        for (int k = 0; k < 2; ++k) {
            const int finisher = fix[k];
            if (finisher >= 0) {
                add_run(carry_value, run_first[finisher], finisher, tile_row[finisher], y,
                        counters, tid);
            }
        }
    }
}
