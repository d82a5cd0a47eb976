// Row-length statistics of a CSR matrix's indptr in one pass (RowLengthStats.from_indptr
// on the GPU): the empty rows, the shortest and the longest row, and the sum of the squared
// lengths, as exact integers. One launch and one transfer, where CuPy's reductions took a
// launch each and compiled a CUB kernel for each new size class of a small array (1.7 s
// each on an H200 the first time, inside a multigrid set-up's coarse levels).
//
// out[0] empty rows, out[1] shortest, out[2] longest, out[3] sum of squared lengths, set
// before the launch to 0, LLONG_MAX, LLONG_MIN, 0; out[4] and out[5] the first and the last
// offset (indptr[0], indptr[n_rows]), written by the first thread. Each warp combines its lanes' shares
// with shuffles and adds them with one atomic each: integers, so the order of additions
// does not change the answer. O(n_rows) work, (n_rows + 1) sizeof(Index) bytes read.

// A thread's share of the row statistics (grid-stride over the rows), combined over its
// warp: lane 0 holds the warp's. Integers, so the order of additions does not change them.
struct RowShares {
  unsigned long long empty;
  unsigned long long squares;
  long long shortest;
  long long longest;
};

constexpr long long kMostRow = 0x7fffffffffffffffLL;

__device__ __forceinline__ void combine_down(RowShares& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    s.empty += __shfl_down_sync(0xffffffffu, s.empty, offset);
    s.squares += __shfl_down_sync(0xffffffffu, s.squares, offset);
    s.shortest = min(s.shortest, __shfl_down_sync(0xffffffffu, s.shortest, offset));
    s.longest = max(s.longest, __shfl_down_sync(0xffffffffu, s.longest, offset));
  }
}

template <typename Index>
__device__ RowShares warp_row_shares(const Index* __restrict__ indptr, long long n_rows) {
  RowShares s{0ull, 0ull, kMostRow, -kMostRow - 1};
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < n_rows; row += stride) {
    const long long length =
        static_cast<long long>(indptr[row + 1]) - static_cast<long long>(indptr[row]);
    s.empty += length == 0;
    s.squares += static_cast<unsigned long long>(length * length);
    s.shortest = min(s.shortest, length);
    s.longest = max(s.longest, length);
  }
  combine_down(s);
  return s;
}

template <typename Index>
__global__ void row_length_stats(const Index* __restrict__ indptr, long long n_rows,
                                 long long* __restrict__ out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[4] = static_cast<long long>(indptr[0]);
    out[5] = static_cast<long long>(indptr[n_rows]);
  }
  const RowShares s = warp_row_shares(indptr, n_rows);
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(out), s.empty);
    atomicMin(out + 1, s.shortest);
    atomicMax(out + 2, s.longest);
    atomicAdd(reinterpret_cast<unsigned long long*>(out + 3), s.squares);
  }
}

// row_length_stats for a host that waits on an event instead of a copy (a product's first
// read of a fresh operand's longest row, where the host waits for it): the same six integers
// written by the last block into host_out (pinned host memory, reached through unified
// addressing: no copy launched after it), the blocks' shares gathered in scratch[0..3] and
// the blocks done counted in scratch[4], which the last block leaves as it found them (0,
// LLONG_MAX, LLONG_MIN, 0, 0: no upload before the next launch). A block combines its warps'
// shares in shared memory first: one set of atomics a block. Blocks of at most 1024 threads.
template <typename Index>
__global__ void row_length_stats_host(const Index* __restrict__ indptr, long long n_rows,
                                      long long* __restrict__ scratch,
                                      long long* __restrict__ host_out) {
  __shared__ RowShares warp_shares[32];
  RowShares s = warp_row_shares(indptr, n_rows);
  const int warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  if ((threadIdx.x & 31) == 0) {
    warp_shares[warp] = s;
  }
  __syncthreads();
  if (warp != 0) {
    return;
  }
  if (threadIdx.x < warps) {
    s = warp_shares[threadIdx.x];
  } else {
    s = RowShares{0ull, 0ull, kMostRow, -kMostRow - 1};
  }
  combine_down(s);
  if (threadIdx.x != 0) {
    return;
  }
  auto* words = reinterpret_cast<unsigned long long*>(scratch);
  atomicAdd(words, s.empty);
  atomicMin(scratch + 1, s.shortest);
  atomicMax(scratch + 2, s.longest);
  atomicAdd(words + 3, s.squares);
  __threadfence();  // the block's shares before its count of done (CUDA's reduction sample)
  if (atomicAdd(words + 4, 1ull) != gridDim.x - 1ull) {
    return;
  }
  __threadfence();  // every other block's shares are in
  volatile long long* out = host_out;
  out[0] = static_cast<long long>(atomicExch(words, 0ull));
  out[1] = static_cast<long long>(atomicExch(words + 1, static_cast<unsigned long long>(kMostRow)));
  out[2] = static_cast<long long>(
      atomicExch(words + 2, static_cast<unsigned long long>(-kMostRow - 1)));
  out[3] = static_cast<long long>(atomicExch(words + 3, 0ull));
  out[4] = static_cast<long long>(indptr[0]);
  out[5] = static_cast<long long>(indptr[n_rows]);
  atomicExch(words + 4, 0ull);
  __threadfence_system();
}

// The smallest and the largest of n indices (a CSR matrix's column indices, checked when
// a mirror is made): out[0] and out[1], set before the launch to LLONG_MAX and LLONG_MIN.
template <typename Index>
__global__ void index_range(const Index* __restrict__ indices, long long n,
                            long long* __restrict__ out) {
  long long smallest = 0x7fffffffffffffffLL;
  long long largest = -smallest - 1;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const long long index = static_cast<long long>(indices[i]);
    smallest = min(smallest, index);
    largest = max(largest, index);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    smallest = min(smallest, __shfl_down_sync(0xffffffffu, smallest, offset));
    largest = max(largest, __shfl_down_sync(0xffffffffu, largest, offset));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMin(out, smallest);
    atomicMax(out + 1, largest);
  }
}

// Whether every row's column indices strictly increase (a canonical CSR matrix: sorted,
// no duplicates): out[0] (set to 0 before the launch) counts the entries j that are not
// the first of their row and whose index is not above entry j - 1's. A block takes
// RISING_ROWS rows at a time and strides over all of their entries (a long row is shared
// by the block's threads); an entry that does not rise is looked up among the rows'
// starts in shared memory. One launch where CuPy took four kernels and a reduction.
constexpr int RISING_ROWS = 256;

template <typename Index>
__global__ void rows_rising(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                            long long n_rows, unsigned long long* __restrict__ out) {
  __shared__ long long starts[RISING_ROWS + 1];
  unsigned long long falls = 0;
  const long long step = static_cast<long long>(gridDim.x) * RISING_ROWS;
  for (long long first = static_cast<long long>(blockIdx.x) * RISING_ROWS; first < n_rows;
       first += step) {
    const int rows = static_cast<int>(min(static_cast<long long>(RISING_ROWS), n_rows - first));
    for (int k = threadIdx.x; k <= rows; k += blockDim.x) {
      starts[k] = static_cast<long long>(indptr[first + k]);
    }
    __syncthreads();
    const long long end = starts[rows];
    for (long long j = starts[0] + 1 + threadIdx.x; j < end; j += blockDim.x) {
      if (indices[j] <= indices[j - 1]) {
        int lo = 0;  // the last row whose start is at or before j
        int hi = rows;
        while (lo < hi) {
          const int mid = (lo + hi + 1) >> 1;
          if (starts[mid] <= j) {
            lo = mid;
          } else {
            hi = mid - 1;
          }
        }
        falls += starts[lo] != j;
      }
    }
    __syncthreads();
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    falls += __shfl_down_sync(0xffffffffu, falls, offset);
  }
  if ((threadIdx.x & 31) == 0 && falls) {
    atomicAdd(out, falls);
  }
}
