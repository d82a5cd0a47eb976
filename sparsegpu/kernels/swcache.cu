// CSR SpMV with x read through a software-managed, direct-mapped cache in shared memory:
// y = A @ x, one group of ThreadsPerRow threads per row.
//
// Hirasawa, Shimoda, Ohshima, Honda, "A Software Cache Implementation for GPU":
// a read-only cache of device memory held in shared memory as a tag array plus cache lines;
// the line of x element c is c / line_size, its slot is fixed by the line number (direct
// mapped), and a miss fills the whole line cooperatively, one element per thread.
//
// Here each warp owns num_lines lines (a block-wide cache would need __syncthreads between
// every lookup and every fill). A warp steps through its rows together; at each step, lanes
// whose line is present read it, then the warp fills one missing line at a time (the lowest
// missing lane's), and the lanes waiting for that line read it before the next fill.
// Each warp processes a contiguous range of rows, so consecutive rows reuse its lines.
// The slot is the line number folded with its high bits (XOR), so that lines a power of two
// apart (a 2-D stencil's rows above and below) do not all land in one slot.
// Work: O(nnz + misses * line_size); shared memory per block: warps * num_lines *
// (line_size * sizeof(Value) + 8).
#include "common.cuh"

template <typename Value, typename Index, int ThreadsPerRow>
__global__ void __launch_bounds__(1024, 1)
    csr_swcache(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                const Value* __restrict__ data, const Value* __restrict__ x,
                Value* __restrict__ y, long long n_rows, long long n_cols, int line_shift,
                int lines_shift) {
  static_assert(ThreadsPerRow >= 1 && ThreadsPerRow <= 32 &&
                    (ThreadsPerRow & (ThreadsPerRow - 1)) == 0,
                "ThreadsPerRow must be a power of two in 1..32");
  constexpr int ROWS_PER_WARP = 32 / ThreadsPerRow;
  const int line_size = 1 << line_shift;
  const int num_lines = 1 << lines_shift;
  const int warps_per_block = blockDim.x >> 5;
  const int warp_in_block = threadIdx.x >> 5;
  const int warp_lane = threadIdx.x & 31;
  const int lane = threadIdx.x & (ThreadsPerRow - 1);
  const int group_in_warp = warp_lane / ThreadsPerRow;

  // all warps' lines first (aligned for any Value), then all warps' tags
  extern __shared__ unsigned char shared_bytes[];
  Value* lines = reinterpret_cast<Value*>(shared_bytes) +
                 (static_cast<long long>(warp_in_block) << (lines_shift + line_shift));
  long long* tags = reinterpret_cast<long long*>(
                        reinterpret_cast<Value*>(shared_bytes) +
                        (static_cast<long long>(warps_per_block) << (lines_shift + line_shift))) +
                    (warp_in_block << lines_shift);
  for (int s = warp_lane; s < num_lines; s += 32) {
    tags[s] = -1;
  }
  __syncwarp();

  // a contiguous range of rows per warp, in whole warp-steps
  const long long warp_id = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const long long n_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  const long long n_steps = (n_rows + ROWS_PER_WARP - 1) / ROWS_PER_WARP;
  const long long steps_per_warp = (n_steps + n_warps - 1) / n_warps;
  const long long row_begin = warp_id * steps_per_warp * ROWS_PER_WARP;
  const long long row_stop = min(n_rows, row_begin + steps_per_warp * ROWS_PER_WARP);

  for (long long first_row = row_begin; first_row < row_stop; first_row += ROWS_PER_WARP) {
    const long long row = first_row + group_in_warp;
    long long start = 0, end = 0;
    if (row < row_stop) {
      start = indptr[row];
      end = indptr[row + 1];
    }
    // trips of the longest row in the warp, so every lane takes part in every fill
    int trips = static_cast<int>((end - start + ThreadsPerRow - 1) / ThreadsPerRow);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      trips = max(trips, __shfl_xor_sync(FULL_WARP, trips, offset));
    }
    Value sum = value_zero<Value>();
    for (int trip = 0; trip < trips; ++trip) {
      const long long k = start + lane + static_cast<long long>(trip) * ThreadsPerRow;
      bool waiting = k < end;
      long long column = 0;
      Value value = value_zero<Value>();
      if (waiting) {
        column = indices[k];
        value = data[k];
      }
      const long long line = column >> line_shift;
      const int slot = static_cast<int>((line ^ (line >> lines_shift)) & (num_lines - 1));
      const int offset_in_line = static_cast<int>(column & (line_size - 1));
      Value x_value = value_zero<Value>();
      if (waiting && tags[slot] == line) {
        x_value = lines[(slot << line_shift) + offset_in_line];
        waiting = false;
      }
      // hits have read their lines before any line is replaced
      __syncwarp();
      for (unsigned missing = __ballot_sync(FULL_WARP, waiting); missing != 0;
           missing = __ballot_sync(FULL_WARP, waiting)) {
        const long long fill_line = __shfl_sync(FULL_WARP, line, __ffs(missing) - 1);
        const int fill_slot =
            static_cast<int>((fill_line ^ (fill_line >> lines_shift)) & (num_lines - 1));
        const long long fill_start = fill_line << line_shift;
        for (int i = warp_lane; i < line_size; i += 32) {
          const long long c = fill_start + i;
          lines[(fill_slot << line_shift) + i] =
              c < n_cols ? load_readonly(x + c) : value_zero<Value>();
        }
        if (warp_lane == 0) {
          tags[fill_slot] = fill_line;
        }
        __syncwarp();
        if (waiting && line == fill_line) {
          x_value = lines[(fill_slot << line_shift) + offset_in_line];
          waiting = false;
        }
        // readers of this line are done before the next fill may replace it
        __syncwarp();
      }
      if (k < end) {
        sum = multiply_add(sum, value, x_value);
      }
    }
#pragma unroll
    for (int offset = ThreadsPerRow / 2; offset > 0; offset /= 2) {
      sum = add(sum, shuffle_xor(sum, offset));
    }
    if (lane == 0 && row < row_stop) {
      y[row] = sum;
    }
  }
}
