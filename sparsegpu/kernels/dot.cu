// Dot products of the solvers: out = sum_i conj(a_i) * b_i, in two launches with a fixed
// order of additions. dot_partial: each of `gridDim.x` blocks (a number fixed by n alone)
// sums a grid-strided share into partial[block]; dot_final: one block sums the partials.
// multi_dot_partial / multi_dot_final do the same for the m rows of a basis against one
// vector (GMRES's Gram-Schmidt); row k's dot is bit-identical to
// dot_partial/dot_final of that row.
// The same n always adds in the same order, so a solve replayed from a CUDA graph and the
// same solve launched kernel by kernel compute bit-identical scalars (cuBLAS may not be
// called during a stream capture, and an atomicAdd reduction is not reproducible).
// O(n) work, 2 n sizeof(T) bytes read.
#include "common.cuh"

constexpr int DOT_BLOCK = 256;

__device__ __forceinline__ float conj_multiply_add(float acc, float a, float b) {
  return multiply_add(acc, a, b);
}
__device__ __forceinline__ double conj_multiply_add(double acc, double a, double b) {
  return multiply_add(acc, a, b);
}
__device__ __forceinline__ complex64 conj_multiply_add(complex64 acc, complex64 a, complex64 b) {
  return multiply_add(acc, complex64{a.re, -a.im}, b);
}
__device__ __forceinline__ complex128 conj_multiply_add(complex128 acc, complex128 a,
                                                        complex128 b) {
  return multiply_add(acc, complex128{a.re, -a.im}, b);
}

// Tree sum of one value per thread of a DOT_BLOCK-thread block; thread 0 returns the total.
template <typename T>
__device__ __forceinline__ T block_sum(T value) {
  __shared__ T shared[DOT_BLOCK];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int width = DOT_BLOCK / 2; width > 0; width >>= 1) {
    if (threadIdx.x < width) {
      shared[threadIdx.x] = add(shared[threadIdx.x], shared[threadIdx.x + width]);
    }
    __syncthreads();
  }
  return shared[0];
}

// The first pass's sum of one block: conj(a_i) * b_i over i = chunk * DOT_BLOCK + thread,
// then every `chunks` * DOT_BLOCK entries, each thread's in turn, then block_sum. The one
// order of additions of dot_partial and of each row of multi_dot_partial.
template <typename T>
__device__ __forceinline__ T chunk_dot(const T* a, const T* b, long long n, long long chunk,
                                       long long chunks) {
  T acc = value_zero<T>();
  const long long stride = static_cast<long long>(DOT_BLOCK) * chunks;
  for (long long i = chunk * DOT_BLOCK + threadIdx.x; i < n; i += stride) {
    acc = conj_multiply_add(acc, a[i], b[i]);
  }
  return block_sum(acc);
}

// The second pass's sum of `count` partials in one block: dot_final's and each row's of
// multi_dot_final.
template <typename T>
__device__ __forceinline__ T partials_sum(const T* partial, int count) {
  T acc = value_zero<T>();
  for (int i = threadIdx.x; i < count; i += DOT_BLOCK) {
    acc = add(acc, partial[i]);
  }
  return block_sum(acc);
}

template <typename T>
__global__ void __launch_bounds__(DOT_BLOCK) dot_partial(const T* a, const T* b, long long n,
                                                         T* partial) {
  T total = chunk_dot(a, b, n, blockIdx.x, gridDim.x);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = total;
  }
}

template <typename T>
__global__ void __launch_bounds__(DOT_BLOCK) dot_final(const T* partial, int count, T* out) {
  T total = partials_sum(partial, count);
  if (threadIdx.x == 0) {
    out[0] = total;
  }
}

// out[k] = conj(basis_k) . w for m rows k of basis (row k at basis + k * ld), launched on
// m * blocks blocks: block b takes row b / blocks and sums its chunk b % blocks the way
// dot_partial's block does (dot_partial on `blocks` blocks), into partial[b].
template <typename T>
__global__ void __launch_bounds__(DOT_BLOCK) multi_dot_partial(const T* basis, long long ld,
                                                               const T* w, long long n,
                                                               int blocks, T* partial) {
  const int row = blockIdx.x / blocks;
  const int chunk = blockIdx.x % blocks;
  const T* a = basis + static_cast<long long>(row) * ld;
  T total = chunk_dot(a, w, n, chunk, blocks);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = total;
  }
}

// Block k sums row k's `count` partials into out[k] (dot_final's order).
template <typename T>
__global__ void __launch_bounds__(DOT_BLOCK) multi_dot_final(const T* partial, int count,
                                                             T* out) {
  T total = partials_sum(partial + static_cast<long long>(blockIdx.x) * count, count);
  if (threadIdx.x == 0) {
    out[blockIdx.x] = total;
  }
}

template __global__ void dot_partial<float>(const float*, const float*, long long, float*);
template __global__ void dot_partial<double>(const double*, const double*, long long, double*);
template __global__ void dot_partial<complex64>(const complex64*, const complex64*, long long,
                                                complex64*);
template __global__ void dot_partial<complex128>(const complex128*, const complex128*, long long,
                                                 complex128*);
template __global__ void dot_final<float>(const float*, int, float*);
template __global__ void dot_final<double>(const double*, int, double*);
template __global__ void dot_final<complex64>(const complex64*, int, complex64*);
template __global__ void dot_final<complex128>(const complex128*, int, complex128*);
template __global__ void multi_dot_partial<float>(const float*, long long, const float*,
    long long, int, float*);
template __global__ void multi_dot_partial<double>(const double*, long long, const double*,
    long long, int, double*);
template __global__ void multi_dot_partial<complex64>(const complex64*, long long, const complex64*,
    long long, int, complex64*);
template __global__ void multi_dot_partial<complex128>(const complex128*, long long, const complex128*,
    long long, int, complex128*);
template __global__ void multi_dot_final<float>(const float*, int, float*);
template __global__ void multi_dot_final<double>(const double*, int, double*);
template __global__ void multi_dot_final<complex64>(const complex64*, int, complex64*);
template __global__ void multi_dot_final<complex128>(const complex128*, int, complex128*);
