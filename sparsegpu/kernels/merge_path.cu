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
// in shared memory and, across tiles, by adding each row's carries in tile order: in the
// last block to finish (few tiles; an atomic counter only elects that block) or in
// merge_path_fixup (many tiles, or a row spanning more than a warp of tiles: a warp sums
// each such row's carries there). A tile that lies inside one row (no row ends in it: the
// interior of a row longer than a tile) skips the staging, search and scan: its carry is a
// block reduction of its products. No floating-point atomics: same input, same bits.
// Work O(n_rows + nnz); each value, index and row pointer is read once.
#include "common.cuh"

constexpr int WARP_LANES = 32;

// The sum of the carries of one row's run of tiles starting at tile t, by a whole warp:
// lane l adds tiles t + l, t + l + 32, ... while they carry the same row (carry rows never
// decrease, so a lane stops at the run's end), then the lanes' sums are combined by a
// butterfly. Same input, same order, same bits. Every lane returns the total. Past the
// first 32 tiles (where almost every run ends) a lane loads RUN_LOADS of its tiles, rows
// and carries, before adding any: a long run's loads (an arrow matrix's dense row spans
// ~500 tiles, 16 a lane) are then in flight together, not one L2 round trip after another.
constexpr int RUN_LOADS = 4;

template <typename V, typename I, typename Rows>
__device__ __forceinline__ V run_partial_sum(Rows rows, const V* carry_value, int t, int n_tiles,
                                             I row, int lane) {
    V sum = value_zero<V>();
    int u = t + lane;
    if (u < n_tiles && rows[u] == row) {
        sum = add(sum, load_coherent(carry_value + u));  // as the loop adds (0 + -0 is +0)
        for (u += WARP_LANES; u < n_tiles; u += RUN_LOADS * WARP_LANES) {
            bool same[RUN_LOADS];
            V carry[RUN_LOADS];
#pragma unroll
            for (int k = 0; k < RUN_LOADS; ++k) {
                // both loads at once (a carry past the run is read and not added)
                const int w = u + k * WARP_LANES;
                same[k] = w < n_tiles && rows[w] == row;
                carry[k] = w < n_tiles ? load_coherent(carry_value + w) : value_zero<V>();
            }
            bool ended = false;
#pragma unroll
            for (int k = 0; k < RUN_LOADS; ++k) {
                ended = ended || !same[k];
                if (!ended) {
                    sum = add(sum, carry[k]);
                }
            }
            if (ended) {
                break;
            }
        }
    }
#pragma unroll
    for (int offset = WARP_LANES / 2; offset > 0; offset >>= 1) {
        sum = add(sum, shuffle_xor(sum, offset));
    }
    return sum;
}

template <typename V, typename I, int BLOCK, int ITEMS>
__global__ void __launch_bounds__(BLOCK)
merge_path_spmv(const I* __restrict__ indptr, const I* __restrict__ indices,
              const V* __restrict__ data, const V* __restrict__ x, V* __restrict__ y,
              const I* __restrict__ tile_row, const I* __restrict__ tile_nz,
              I* __restrict__ carry_row, V* __restrict__ carry_value, I n_rows,
              unsigned int* __restrict__ tiles_done) {
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
            carry_row[tile] = r0;
            carry_value[tile] = scan_value[0];
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
            carry_row[tile] = r0 + static_cast<I>(row);
            carry_value[tile] = scan_value[tid];
        }
    }
    if (tiles_done == nullptr) {
        return;  // many tiles: merge_path_fixup runs as a second launch
    }
    // Few tiles: the last block to finish adds the carries itself (one launch instead of
    // two). The atomic only elects that block; sums keep their fixed order.
    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        is_last = atomicAdd(tiles_done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) {
        return;
    }
    __threadfence();
    const int n_tiles = static_cast<int>(gridDim.x);
    const volatile I* rows = carry_row;
    for (int t = tid; t < n_tiles; t += BLOCK) {
        const I carry = rows[t];
        if (carry >= n_rows || (t > 0 && rows[t - 1] == carry)) {
            continue;
        }
        V sum = load_coherent(carry_value + t);
        for (int u = t + 1; u < n_tiles && rows[u] == carry; ++u) {
            sum = add(sum, load_coherent(carry_value + u));
        }
        y[carry] = add(sum, load_coherent(y + carry));
    }
    if (tid == 0) {
        *tiles_done = 0u;  // ready for the next product on this buffer
    }
}

// Adds to y the partial sums of rows that span tiles, in a fixed order (deterministic).
// One warp per tile; the warp of the first tile of each run of equal carry rows sums the
// run, its lanes striding over it, so a row spanning thousands of tiles (an arrow matrix's
// dense rows) costs a few strided passes instead of one thread's serial walk.
template <typename V, typename I>
__global__ void merge_path_fixup(const I* __restrict__ carry_row,
                                    const V* __restrict__ carry_value, int n_tiles,
                                    I n_rows, V* __restrict__ y) {
    const long long t =
        (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / WARP_LANES;
    if (t >= n_tiles) {
        return;  // the whole warp: t is the same for its lanes
    }
    const I row = carry_row[t];
    if (row >= n_rows || (t > 0 && carry_row[t - 1] == row)) {
        return;
    }
    const int lane = threadIdx.x % WARP_LANES;
    const V sum = run_partial_sum(carry_row, carry_value, static_cast<int>(t), n_tiles, row, lane);
    if (lane == 0) {
        y[row] = add(sum, y[row]);
    }
}

// ------------------------------------------------------------------------------ SpMM
// merge_path_spmm: Y = A @ X for a dense X of k columns, load-balanced the same way: the
// merge path of row ends and nonzeros is cut into equal runs of `items` items, one run
// per team of COLUMN_LANES lanes (start coordinates computed once per plan), so a
// power-law row costs what its nonzeros cost, spread over many teams. With a row-major X
// (C order, ROW_MAJOR) each lane of a team keeps a 16-byte tile of X's columns (four
// floats, two doubles); with a column-major X (Fortran order) one column each, read down
// the column. Passes cover k beyond the team's lanes. A row whose first nonzero and end
// lie in one team's run is stored by that team; a row cut by a run's boundary is added to
// Y with atomics by every team that holds part of it, after merge_path_spmm_zero cleared
// it (the rows cut are known per plan). The order of those additions varies from run to
// run: such rows agree to rounding, not bitwise, unlike merge_path_spmv.
// Work O(n_rows + nnz * k).

// One team's share of one row, `count` values `stride` apart from y: stored when the
// team holds the whole row (one 16-byte store when `whole`), else added.
template <typename V, int WIDTH>
__device__ __forceinline__ void spmm_write(V* y, long long stride, const V (&sum)[WIDTH],
                                           int count, bool whole, bool alone) {
    if (alone && whole) {
        int4 v;
        memcpy(&v, sum, sizeof(v));
        *reinterpret_cast<int4*>(y) = v;
        return;
    }
#pragma unroll
    for (int t = 0; t < WIDTH; ++t) {
        if (t < count) {
            if (alone) {
                y[t * stride] = sum[t];
            } else {
                atomic_add_value(y + t * stride, sum[t]);
            }
        }
    }
}

// aligned (row-major only): X and Y start 16-byte aligned and k * sizeof(V) is a multiple
// of 16, so a full tile is one 16-byte load or store.
template <typename V, typename I, int COLUMN_LANES, bool ROW_MAJOR>
__global__ void merge_path_spmm(const I* __restrict__ indptr, const I* __restrict__ indices,
                                const V* __restrict__ data, const V* __restrict__ X,
                                V* __restrict__ Y, const I* __restrict__ team_row,
                                const I* __restrict__ team_nz, long long n_teams,
                                long long n_rows, long long n_cols, int k, int aligned) {
    static_assert(COLUMN_LANES >= 1 && COLUMN_LANES <= 32 &&
                      (COLUMN_LANES & (COLUMN_LANES - 1)) == 0,
                  "COLUMN_LANES must be a power of two up to 32");
    constexpr int WIDTH = ROW_MAJOR ? tile_width<V>() : 1;
    const long long team =
        (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / COLUMN_LANES;
    if (team >= n_teams) {
        return;
    }
    const int column_lane = threadIdx.x % COLUMN_LANES;
    const long long first_row = team_row[team];
    const I first_nz = team_nz[team];
    const long long last_row = team_row[team + 1];  // the row the run ends in (not its end)
    const I last_nz = team_nz[team + 1];
    // element (i, c) of X and Y: i * k + c row-major, i + c * rows column-major
    const long long x_column = ROW_MAJOR ? 1 : n_cols;
    const long long y_column = ROW_MAJOR ? 1 : n_rows;
    for (int pass = 0; pass < k; pass += COLUMN_LANES * WIDTH) {
        const int first = pass + column_lane * WIDTH;
        const int count = min(WIDTH, k - first);
        if (count <= 0) {
            continue;  // no shuffles in this kernel: lanes go their own way
        }
        const bool whole = ROW_MAJOR && aligned != 0 && count == WIDTH;
        const V* x_first = X + (ROW_MAJOR ? first : first * n_cols);
        V* y_first = Y + (ROW_MAJOR ? first : first * n_rows);
        I j = first_nz;
        for (long long row = first_row; row <= last_row && row < n_rows; ++row) {
            const I row_start = indptr[row];
            const I stop = row < last_row ? indptr[row + 1] : last_nz;
            V sum[WIDTH];
#pragma unroll
            for (int t = 0; t < WIDTH; ++t) {
                sum[t] = value_zero<V>();
            }
            const I begun = j;
#pragma unroll 4
            for (; j < stop; ++j) {
                const V a = data[j];
                const long long column = indices[j];
                const V* x = x_first + (ROW_MAJOR ? column * k : column);
                if (whole) {
                    const int4 v = __ldg(reinterpret_cast<const int4*>(x));
                    V tile[WIDTH];
                    memcpy(tile, &v, sizeof(v));
#pragma unroll
                    for (int t = 0; t < WIDTH; ++t) {
                        sum[t] = multiply_add(sum[t], a, tile[t]);
                    }
                } else {
#pragma unroll
                    for (int t = 0; t < WIDTH; ++t) {
                        if (t < count) {
                            sum[t] = multiply_add(sum[t], a, load_readonly(x + t * x_column));
                        }
                    }
                }
            }
            const bool ends_here = row < last_row;
            const bool starts_here = row > first_row || first_nz == row_start;
            if (ends_here || j > begun) {  // a share of the row, or the whole row
                V* y = y_first + (ROW_MAJOR ? row * k : row);
                spmm_write(y, y_column, sum, count, whole, ends_here && starts_here);
            }
        }
    }
}

// Clears the rows cut by a run's boundary (merge_path_spmm adds into them): element
// (rows[i], c) of Y is at rows[i] * row_stride + c * column_stride.
template <typename V, typename I>
__global__ void merge_path_spmm_zero(const I* __restrict__ rows, long long n, int k,
                                     long long row_stride, long long column_stride,
                                     V* __restrict__ Y) {
    const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
    if (i < n * k) {
        Y[static_cast<long long>(rows[i / k]) * row_stride + (i % k) * column_stride] =
            value_zero<V>();
    }
}
