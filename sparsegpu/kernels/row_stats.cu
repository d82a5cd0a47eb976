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

template <typename Index>
__global__ void row_length_stats(const Index* __restrict__ indptr, long long n_rows,
                                 long long* __restrict__ out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[4] = static_cast<long long>(indptr[0]);
    out[5] = static_cast<long long>(indptr[n_rows]);
  }
  unsigned long long empty = 0;
  unsigned long long squares = 0;
  long long shortest = 0x7fffffffffffffffLL;
  long long longest = -shortest - 1;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < n_rows; row += stride) {
    const long long length =
        static_cast<long long>(indptr[row + 1]) - static_cast<long long>(indptr[row]);
    empty += length == 0;
    squares += static_cast<unsigned long long>(length * length);
    shortest = min(shortest, length);
    longest = max(longest, length);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    empty += __shfl_down_sync(0xffffffffu, empty, offset);
    squares += __shfl_down_sync(0xffffffffu, squares, offset);
    shortest = min(shortest, __shfl_down_sync(0xffffffffu, shortest, offset));
    longest = max(longest, __shfl_down_sync(0xffffffffu, longest, offset));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(out), empty);
    atomicMin(out + 1, shortest);
    atomicMax(out + 2, longest);
    atomicAdd(reinterpret_cast<unsigned long long*>(out + 3), squares);
  }
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
